//! Group commit of metadata writes. Each write is one round through the leader and an fsync
//! on a majority; while one is in flight, the writes made on this node meanwhile wait and
//! then go together as one entry ([`Command::Each`]), each with its own reply. One writer
//! alone pays nothing extra; eight clients declaring queues at once share their rounds.
//! The flushing runs in its own task, so a caller that goes away (its connection closed)
//! cannot leave the others waiting.

use super::node::{ClusterError, MetaNode};
use super::types::{Command, Reply};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Most commands one entry carries.
const MOST: usize = 256;

type Waiter = oneshot::Sender<Result<Reply, ClusterError>>;

/// The writes waiting for the one in flight.
#[derive(Default)]
pub(super) struct Writes {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    queue: Vec<(Command, Waiter)>,
    /// Whether a flushing task is running.
    flushing: bool,
}

impl Writes {
    /// Queues `cmd`; true when the caller must start the flushing task.
    fn push(&self, cmd: Command, waiter: Waiter) -> bool {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.queue.push((cmd, waiter));
        !std::mem::replace(&mut p.flushing, true)
    }

    /// The next writes to send (at most [`MOST`]), or None (and the flushing ends) when there
    /// are none.
    fn take(&self) -> Option<Vec<(Command, Waiter)>> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.queue.is_empty() {
            p.flushing = false;
            return None;
        }
        let at = p.queue.len().min(MOST);
        let rest = p.queue.split_off(at);
        Some(std::mem::replace(&mut p.queue, rest))
    }
}

impl MetaNode {
    /// Proposes `cmd` and answers once it is committed and applied on this node; concurrent
    /// writes share an entry (see the module's note).
    pub async fn write(self: &Arc<Self>, cmd: Command) -> Result<Reply, ClusterError> {
        let (tx, rx) = oneshot::channel();
        if self.writes.push(cmd, tx) {
            tokio::spawn(flush(self.clone()));
        }
        rx.await
            .unwrap_or_else(|_| Err(ClusterError::Refused("node stopping".into())))
    }
}

/// Sends what is queued, one entry at a time, until nothing is.
async fn flush(node: Arc<MetaNode>) {
    while let Some(mut batch) = node.writes.take() {
        if batch.len() == 1 {
            if let Some((cmd, waiter)) = batch.pop() {
                let _ = waiter.send(node.write_entry(cmd).await);
            }
            continue;
        }
        let (cmds, waiters): (Vec<Command>, Vec<Waiter>) = batch.into_iter().unzip();
        match node.write_entry(Command::Each(cmds)).await {
            Ok(reply) => {
                let mut each = reply.each.into_iter();
                for waiter in waiters {
                    let own = each
                        .next()
                        .ok_or_else(|| ClusterError::Refused("reply missing".into()));
                    let _ = waiter.send(own);
                }
            }
            Err(e) => {
                for waiter in waiters {
                    let _ = waiter.send(Err(e.clone()));
                }
            }
        }
    }
}
