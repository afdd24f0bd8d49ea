//! Publish order across a replicated queue's leader move. When a quorum queue's leader
//! moves, this node's handle of it is replaced (a proxy by the task now led here, or by a
//! proxy to the new leader), while the old proxy may still be sending, in order, what its
//! channels published before: it waits for the new leader and resends to it. A channel's
//! next publishes through the new handle must not overtake them, so they wait until the
//! old proxy has ended (it ends once it has sent everything queued before its shutdown),
//! for [`HANDOVER_WAIT`] at most. What the old proxy resends reaches the new leader's task
//! through the forwarder, which does not wait ([`super::QueueShared::relay`]): the wait
//! would otherwise be for itself.

use super::QueueShared;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;
use std::time::Duration;

/// How long publishes through a new handle wait for the one it replaced (a resend waits for
/// the new leader up to 5 s, then takes a call).
const HANDOVER_WAIT: Duration = Duration::from_secs(10);

/// The handle a queue's handle replaced while publishes through it may be on their way.
#[derive(Debug)]
pub(super) struct Handover {
    prev: Weak<QueueShared>,
    /// Seen ended (or waited for long enough): nothing waits any more.
    done: AtomicBool,
}

impl Handover {
    /// Publishes wait for `prev`, a replaced proxy.
    pub(super) fn after(prev: Weak<QueueShared>) -> Handover {
        Handover {
            prev,
            done: AtomicBool::new(false),
        }
    }

    /// Whether publishes no longer wait (one atomic load on the publish path).
    pub(super) fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Waits until the replaced handle's task has ended, or for [`HANDOVER_WAIT`].
    pub(super) async fn wait(&self) {
        let until = tokio::time::Instant::now() + HANDOVER_WAIT;
        loop {
            let Some(prev) = self.prev.upgrade() else {
                break;
            };
            let f = &prev.inflight;
            let changed = f.room.notified();
            if f.closed.load(Ordering::Acquire) {
                break;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                tracing::warn!(queue = %prev.name, vhost = %prev.vhost, "publishes through a replaced queue handle still pending; later ones go ahead");
                break;
            }
        }
        self.done.store(true, Ordering::Release);
    }
}
