//! A queue task's consumers: registration (exclusive use, priority order), removal, and
//! the hand-off of this node's consumers to the queue's next handle when a replicated
//! queue's leader moves.

use super::{now_ms, Consumer, QueueActor};
use crate::error::{CoreError, Refusal};
use crate::queue::consumer::{ConsumerEvent, ConsumerSpec, REMOTE_CONNECTION};
use crate::queue::QueueRef;

impl QueueActor {
    pub(super) fn add_consumer(&mut self, spec: ConsumerSpec) -> Result<(), CoreError> {
        if self.consumers.iter().any(|c| c.spec.exclusive)
            || (spec.exclusive && !self.consumers.is_empty())
        {
            return Err(Refusal::ExclusiveUse {
                queue: self.shared.name.clone(),
                vhost: self.shared.vhost.clone(),
            }
            .into());
        }
        // Kept ordered by priority (highest first), then registration order.
        let pos = self
            .consumers
            .partition_point(|c| c.spec.priority >= spec.priority);
        self.consumers.insert(
            pos,
            Consumer {
                spec,
                unacked: 0,
                timed_out: false,
            },
        );
        self.had_consumers = true;
        self.ready.set_consumed(true);
        Ok(())
    }

    pub(super) fn remove_consumer(&mut self, id: u64) {
        self.last_used = now_ms();
        let before = self.consumers.len();
        self.consumers.retain(|c| c.spec.id != id);
        if before == self.consumers.len() {
            return;
        }
        self.ready.set_consumed(!self.consumers.is_empty());
        for u in self.unacked.values_mut() {
            if u.consumer == Some(id) {
                u.consumer = None;
            }
        }
        if self.consumers.is_empty() && self.had_consumers && self.shared.auto_delete {
            if let Some(host) = self.host.upgrade() {
                host.forget_queue(&self.shared);
            }
            self.stop();
        }
    }

    /// The queue is served by `to` from now on (a replicated queue's leader moved, or its
    /// task was started afresh): this node's consumers leave this task without a cancel,
    /// and their connections register them with `to` ([`ConsumerEvent::Moved`]). What they
    /// hold unacked stays theirs; other nodes' consumers stay (their nodes see the move).
    pub(super) fn hand_off(&mut self, to: &QueueRef) {
        let (moved, kept): (Vec<Consumer>, Vec<Consumer>) = std::mem::take(&mut self.consumers)
            .into_iter()
            .partition(|c| c.spec.connection != REMOTE_CONNECTION);
        self.consumers = kept;
        self.ready.set_consumed(!self.consumers.is_empty());
        for c in moved {
            let id = c.spec.id;
            for u in self.unacked.values_mut() {
                if u.consumer == Some(id) {
                    u.consumer = None;
                }
            }
            let sink = c.spec.sink.clone();
            let _ = sink.send(ConsumerEvent::Moved {
                spec: Box::new(c.spec),
                to: to.clone(),
            });
        }
    }
}
