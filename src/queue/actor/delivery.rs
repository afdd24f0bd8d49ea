//! Delivery: choosing the consumer (priority groups, round-robin, single active consumer),
//! pushing ready messages within credit, and taking the head of the queue, reading bodies that
//! are only in the store a window at a time.

use super::{now_ms, QueueActor, Unacked, READ_AHEAD};
use crate::message::Message;
use crate::queue::consumer::{ConsumerEvent, Delivery};
use crate::queue::stats::Counter;
use crate::queue::Peeked;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// How far past the message being handed out a replicated queue's delivered mark is written:
/// a new leader flags up to this many messages redelivered that never were, and the mark is
/// written once every `RESERVE / 2` deliveries.
const RESERVE: u64 = 1024;

impl QueueActor {
    /// Pops the head of the queue, reading its body (and the next ones) from the store if needed.
    /// When the store cannot be read, nothing is popped: the messages wait for the next try.
    pub(super) fn take_head(&mut self) -> Option<(u64, Arc<Message>, bool, u32)> {
        loop {
            let head = self.ready.front()?;
            let (seq, unloaded) = (head.seq, head.msg.is_none());
            if !self.may_hand_out(seq) || (unloaded && !self.load_from(seq)) {
                return None;
            }
            let r = self.pop_ready()?;
            match r.msg {
                Some(msg) => return Some((r.seq, msg, r.redelivered, r.returns)),
                None => {
                    tracing::error!(queue = %self.shared.name, seq = r.seq, "stored message missing; skipped");
                }
            }
        }
    }

    /// Whether the message `seq` may be handed out. A replicated queue hands out only up to
    /// the delivered mark its group has committed, so that a new leader flags everything
    /// this one may have handed out redelivered and never gives its number to another
    /// message; the next mark ([`RESERVE`] on) is written when the head comes near. It hands
    /// out only within its leadership's lease ([`Journal::leased`](crate::queue::journal::Journal::leased)),
    /// so that a leader cut off from the others cannot hand out, unknowing, what a new
    /// leader has had acknowledged since: when the lease has lapsed, writing the mark renews
    /// it. A queue whose journal failed a write (its node may no longer lead) hands nothing
    /// out until it is started again from the group.
    pub(super) fn may_hand_out(&mut self, seq: u64) -> bool {
        let Some(journal) = self.shared.journal.as_ref() else {
            return true;
        };
        if journal.broken() {
            return false;
        }
        let leased = journal.leased();
        let near = self
            .reserved
            .is_none_or(|r| seq.saturating_add(RESERVE / 2) > r);
        if (near || !leased) && !self.reserving {
            self.reserving = true;
            // Never below what was reserved already (a requeued message has a lower number).
            let mark = seq.saturating_add(RESERVE).max(self.reserved.unwrap_or(0));
            journal.delivered(mark);
            let (tx, rx) = oneshot::channel();
            journal.sync(tx);
            let q = self.shared.clone();
            tokio::spawn(async move {
                let committed = rx.await.unwrap_or(false);
                q.reserved(mark, committed);
            });
        }
        leased && self.reserved.is_some_and(|r| seq <= r)
    }

    /// Up to `n` ready messages from the head, in delivery order, bodies read from the store
    /// where only it has them; nothing is taken, requeued or reordered.
    pub(super) fn peek(&mut self, n: usize) -> Vec<Peeked> {
        let mut tried = Vec::new();
        loop {
            let missing = self
                .ready
                .head(n)
                .find(|r| r.msg.is_none() && !tried.contains(&r.seq))
                .map(|r| r.seq);
            let Some(seq) = missing else {
                break;
            };
            tried.push(seq);
            if !self.load_from(seq) {
                break;
            }
        }
        let head: Vec<_> = self
            .ready
            .head(n)
            .filter_map(|r| Some((r.msg.clone()?, r.redelivered, r.returns)))
            .collect();
        head.into_iter()
            .map(|(msg, redelivered, returns)| Peeked {
                msg: self.as_delivered(msg, returns),
                redelivered,
            })
            .collect()
    }

    /// Fills in bodies of on-disk entries from `from` on, a window at a time; false when the
    /// store could not be read.
    pub(super) fn load_from(&mut self, from: u64) -> bool {
        let Some(id) = self.shared.store_id else {
            return true;
        };
        let read = match self.store.read_messages(id, from, READ_AHEAD) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(queue = %self.shared.name, error = %e, "reading stored messages failed");
                return false;
            }
        };
        for (seq, msg) in read {
            self.ready.fill(seq, msg);
        }
        true
    }

    /// The consumer for the next message, credit taken: with a single active consumer, only
    /// that one (the highest-priority, earliest registered); otherwise the highest priority
    /// group with credit, round-robin within it.
    pub(super) fn pick_consumer(&mut self) -> Option<usize> {
        if self.args.single_active_consumer {
            return self.consumers.first()?.take_credit().then_some(0);
        }
        let n = self.consumers.len();
        let mut start = 0;
        while start < n {
            let prio = self.consumers[start].spec.priority;
            let end = start + self.consumers[start..].partition_point(|c| c.spec.priority == prio);
            let size = end - start;
            let first = self.next_consumer % size;
            if let Some(idx) = (0..size)
                .map(|i| start + (first + i) % size)
                .find(|&i| self.consumers[i].take_credit())
            {
                self.next_consumer = idx - start + 1;
                return Some(idx);
            }
            start = end;
        }
        None
    }

    /// Pushes ready messages to consumers round-robin while any has credit.
    pub(super) fn deliver(&mut self) {
        let n = self.consumers.len();
        // One clock read per batch for the deliveries' timestamps.
        let now = if n > 0 && !self.ready.is_empty() {
            now_ms()
        } else {
            0
        };
        while n > 0 && !self.ready.is_empty() && !self.stopped {
            let Some(idx) = self.pick_consumer() else {
                return;
            };
            self.expire_head();
            let Some((seq, msg, redelivered, returns)) = self.take_head() else {
                let c = &self.consumers[idx];
                if !c.spec.no_ack {
                    c.spec.limiter.release(1);
                }
                return;
            };
            self.note_delivered(seq, &msg);
            let no_ack = self.consumers[idx].spec.no_ack;
            self.stats.add(
                if no_ack {
                    Counter::DeliverNoAck
                } else {
                    Counter::Deliver
                },
                1,
            );
            self.stats.add(Counter::Redeliver, u64::from(redelivered));
            let consumed = no_ack && self.shared.persists(&msg);
            let sent = self.as_delivered(msg.clone(), returns);
            let c = &mut self.consumers[idx];
            if !c.spec.no_ack {
                c.unacked += 1;
                self.unacked.insert(
                    seq,
                    Unacked {
                        msg: msg.clone(),
                        consumer: Some(c.spec.id),
                        returns,
                        since: now,
                    },
                );
            }
            c.spec.pending.fetch_add(1, Ordering::AcqRel);
            let d = Delivery::to(&c.spec, self.shared.clone(), seq, redelivered, sent);
            if let Err(mpsc::error::SendError(ConsumerEvent::Deliver(d))) =
                c.spec.sink.send(ConsumerEvent::Deliver(d))
            {
                // The connection is gone: the message was never delivered, so it goes back as it
                // was; the consumer is dropped (its channel's cleanup will follow).
                let id = c.spec.id;
                if !c.spec.no_ack {
                    c.spec.limiter.release(1);
                }
                c.spec.pending.fetch_sub(1, Ordering::AcqRel);
                self.settle(d.seq);
                self.insert_ready(d.seq, Some(d.msg), d.redelivered, returns);
                self.remove_consumer(id);
                return self.deliver();
            }
            if consumed {
                // A no-ack delivery settles the message as it leaves.
                self.forget_stored(vec![seq]);
            }
        }
    }
}
