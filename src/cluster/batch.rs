//! Group commit of metadata writes. Each write is one round through the leader and an fsync
//! on a majority; while one is in flight, the writes made on this node meanwhile wait and
//! then go together as one entry ([`Command::Each`]), each with its own reply. One writer
//! alone pays nothing extra; eight clients declaring queues at once share their rounds.
//! The node runs [`flush`] in its own task, so a caller that goes away (its connection
//! closed) cannot leave the others waiting.

use super::types::{Command, Reply};
use std::future::Future;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// Most commands one entry carries.
const MOST: usize = 256;

/// Where the reply of one queued write goes.
pub type Waiter<E> = oneshot::Sender<Result<Reply, E>>;

/// The writes waiting for the one in flight.
pub struct Writes<E> {
    pending: Mutex<Pending<E>>,
}

struct Pending<E> {
    queue: Vec<(Command, Waiter<E>)>,
    /// Whether a flushing task is running.
    flushing: bool,
}

impl<E> Default for Writes<E> {
    fn default() -> Self {
        Writes {
            pending: Mutex::new(Pending {
                queue: Vec::new(),
                flushing: false,
            }),
        }
    }
}

impl<E> Writes<E> {
    /// Queues `cmd`; true when the caller must start a task running [`flush`].
    pub fn push(&self, cmd: Command, waiter: Waiter<E>) -> bool {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.queue.push((cmd, waiter));
        !std::mem::replace(&mut p.flushing, true)
    }

    /// The next writes to send (at most [`MOST`]), or None (and the flushing ends) when there
    /// are none.
    fn take(&self) -> Option<Vec<(Command, Waiter<E>)>> {
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

/// Sends what `writes` holds through `send` (one entry per call), until nothing is queued; a
/// lone write goes as itself, several as one [`Command::Each`].
pub async fn flush<E, F, Fut>(writes: &Writes<E>, send: F)
where
    E: Clone,
    F: Fn(Command) -> Fut,
    Fut: Future<Output = Result<Reply, E>>,
{
    while let Some(mut batch) = writes.take() {
        if batch.len() == 1 {
            if let Some((cmd, waiter)) = batch.pop() {
                let _ = waiter.send(send(cmd).await);
            }
            continue;
        }
        let (cmds, waiters): (Vec<Command>, Vec<Waiter<E>>) = batch.into_iter().unzip();
        match send(Command::Each(cmds)).await {
            Ok(reply) => {
                // One reply per command, by construction; a waiter left without one hears
                // that its write was lost.
                for (waiter, own) in waiters.into_iter().zip(reply.each) {
                    let _ = waiter.send(Ok(own));
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
