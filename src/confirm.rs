//! Publisher-confirm tokens. A token travels with a persistent message to the store and is
//! completed after the commit that holds it (or with a failure, if the write failed or the
//! message was dropped on the way). Dropping an uncompleted token reports a failure, so a
//! publisher is never told "on disk" by accident.

use std::sync::Arc;
use tokio::sync::oneshot;

/// Where a confirm-mode channel's outcomes go (its connection's inbox). The store and the
/// queues see only this; the connection's inbox implements it.
pub trait ConfirmSink: Send + Sync + std::fmt::Debug {
    /// Reports publish `seq` of channel `channel` (instance `channel_uid`) stored (`ok`) or
    /// failed.
    fn confirm(&self, channel: u16, channel_uid: u64, seq: u64, ok: bool);
}

/// Who waits for a confirmation.
#[derive(Debug)]
enum Target {
    /// A confirm-mode channel: the outcome arrives in its connection's inbox.
    Channel {
        sink: Arc<dyn ConfirmSink>,
        channel: u16,
        channel_uid: u64,
        seq: u64,
    },
    /// A transaction commit waiting for its messages.
    Waiter(oneshot::Sender<bool>),
}

/// One pending confirmation.
#[derive(Debug)]
pub struct ConfirmToken {
    target: Option<Target>,
}

impl ConfirmToken {
    /// A token reported to a confirm-mode channel.
    pub fn for_channel(
        sink: Arc<dyn ConfirmSink>,
        channel: u16,
        channel_uid: u64,
        seq: u64,
    ) -> Self {
        ConfirmToken {
            target: Some(Target::Channel {
                sink,
                channel,
                channel_uid,
                seq,
            }),
        }
    }

    /// A token awaited through the returned receiver.
    pub fn waiter() -> (Self, oneshot::Receiver<bool>) {
        let (tx, rx) = oneshot::channel();
        (
            ConfirmToken {
                target: Some(Target::Waiter(tx)),
            },
            rx,
        )
    }

    /// Reports the outcome.
    pub fn complete(mut self, ok: bool) {
        self.fire(ok);
    }

    fn fire(&mut self, ok: bool) {
        match self.target.take() {
            Some(Target::Channel {
                sink,
                channel,
                channel_uid,
                seq,
            }) => {
                sink.confirm(channel, channel_uid, seq, ok);
            }
            Some(Target::Waiter(tx)) => {
                let _ = tx.send(ok);
            }
            None => {}
        }
    }
}

impl Drop for ConfirmToken {
    fn drop(&mut self) {
        self.fire(false);
    }
}
