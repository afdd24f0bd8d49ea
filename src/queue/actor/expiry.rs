//! The parts of the queue task that retire messages: TTL expiry (head only), x-expires,
//! consumer timeouts, max-length limits and dead-lettering.

use super::{now_ms, QueueActor};
use crate::args::Overflow;
use crate::clock::unix_secs;
use crate::message::Message;
use crate::queue::consumer::ConsumerEvent;
use crate::queue::deadletter::{self, Reason};
use std::sync::Arc;

impl QueueActor {
    /// Drops expired messages from the head (only the head is checked, as in RabbitMQ, so a
    /// queue without TTLs pays nothing and expiry never scans the queue).
    pub(super) fn expire_head(&mut self) {
        // The clock is read only when the head has a deadline (not per message otherwise).
        if self.ready.front().is_none_or(|r| r.expires.is_none()) {
            return;
        }
        let now = now_ms();
        while self
            .ready
            .front()
            .is_some_and(|r| r.expires.is_some_and(|e| now > e))
        {
            if let Some(r) = self.pop_ready() {
                if let Some(msg) = r.msg {
                    self.drop_message(r.seq, msg, Reason::Expired);
                }
            }
        }
    }

    /// The shortest timeout of the consumers that hold unacknowledged deliveries, if any.
    fn shortest_timeout(&self) -> Option<u64> {
        self.consumers
            .iter()
            .filter(|c| c.spec.timeout > 0 && c.unacked > 0 && !c.timed_out)
            .map(|c| c.spec.timeout)
            .min()
    }

    /// When to look for timed-out deliveries next: while a consumer with a timeout holds
    /// unacknowledged messages, every min(timeout, 1 s).
    pub(super) fn next_timeout_check(&mut self) -> Option<u64> {
        let Some(shortest) = self.shortest_timeout() else {
            self.timeout_check_at = None;
            return None;
        };
        Some(
            *self
                .timeout_check_at
                .get_or_insert_with(|| now_ms() + shortest.min(1000)),
        )
    }

    /// Tells the channel of every consumer holding a delivery longer than its timeout to close
    /// (406); closing the channel requeues its messages. The unacked deliveries are scanned at
    /// most every min(timeout, 1 s), not per batch.
    pub(super) fn check_consumer_timeouts(&mut self) {
        let Some(at) = self.next_timeout_check() else {
            return;
        };
        let now = now_ms();
        if now < at {
            return;
        }
        self.timeout_check_at = None;
        for u in self.unacked.values() {
            let Some(id) = u.consumer else { continue };
            let Some(c) = self.consumers.iter_mut().find(|c| c.spec.id == id) else {
                continue;
            };
            if c.spec.timeout > 0 && !c.timed_out && now.saturating_sub(u.since) > c.spec.timeout {
                c.timed_out = true;
                let _ = c.spec.sink.send(ConsumerEvent::TimedOut {
                    channel: c.spec.channel,
                    timeout: c.spec.timeout,
                });
            }
        }
    }

    /// Deletes the queue when x-expires says it has been unused (no consumers, no get, no
    /// redeclare) for long enough.
    pub(super) fn expire_queue(&mut self) {
        let Some(e) = self.args.expires else {
            return;
        };
        if self.consumers.is_empty() && now_ms() >= self.last_used + e {
            if let Some(host) = self.host.upgrade() {
                host.forget_queue(&self.shared);
            }
            self.stop();
        }
    }

    /// Removes a message for good: from the store, and to the dead-letter exchange if any
    /// (kept until its copy is confirmed when the queue dead-letters at least once).
    pub(super) fn drop_message(&mut self, seq: u64, msg: Arc<Message>, reason: Reason) {
        if self.at_least_once() {
            self.hold_dead_letter(seq, &msg, reason);
            return;
        }
        if self.shared.persists(&msg) {
            self.forget_stored(vec![seq]);
        }
        if self.args.dead_letter_exchange.is_some() {
            self.dead.push((msg, reason));
        }
    }

    /// The copy of `msg` to publish to the dead-letter exchange, if the queue has one.
    pub(super) fn dead_letter_copy(
        &self,
        msg: &Message,
        reason: Reason,
        now_secs: u64,
    ) -> Option<Message> {
        let dlx = self.args.dead_letter_exchange.as_deref()?;
        let key = match &self.args.dead_letter_routing_key {
            Some(k) => k.as_str(),
            None => msg.routing_key.as_str(),
        };
        Some(deadletter::dead_letter_copy(
            msg,
            &self.shared.name,
            reason,
            dlx,
            key,
            now_secs,
        ))
    }

    /// Republishes this batch's dead letters through the dead-letter exchange, by the vhost's
    /// publish (which skips the queues a copy would cycle back to).
    pub(super) fn send_dead_letters(&mut self) {
        if self.dead.is_empty() {
            return;
        }
        let dead = std::mem::take(&mut self.dead);
        let (Some(dlx), Some(host)) = (self.args.dead_letter_exchange.clone(), self.host.upgrade())
        else {
            return;
        };
        let now = unix_secs();
        let copies = dead
            .iter()
            .filter_map(|(msg, reason)| self.dead_letter_copy(msg, *reason, now))
            .map(Arc::new)
            .collect();
        host.dead_letter(&dlx, copies);
    }

    /// Applies x-max-length / x-max-length-bytes to an incoming message; false when it is
    /// refused.
    pub(super) fn admit(&mut self, msg: &Arc<Message>) -> bool {
        let args = &*self.args;
        let size = msg.body_len() as u64;
        let over = |len: usize, bytes: u64| {
            args.max_length.is_some_and(|m| len as u64 > m)
                || args.max_length_bytes.is_some_and(|m| bytes > m)
        };
        // Copies held for at-least-once dead-lettering count, as in RabbitMQ. A quorum queue
        // refuses a publish only once it is over a limit already, as RabbitMQ's do (they
        // take one message past it); a classic queue refuses the one that would go over.
        let (held, held_bytes) = self.dlx.count();
        let (len, bytes) = (self.ready.len() + held, self.ready.bytes() + held_bytes);
        let refused = match args.quorum {
            true => over(len, bytes),
            false => over(len + 1, bytes + size),
        };
        if !refused {
            return true;
        }
        match args.overflow {
            Overflow::DropHead => true,
            Overflow::RejectPublish => false,
            Overflow::RejectPublishDlx => {
                if args.dead_letter_exchange.is_some() {
                    self.dead.push((msg.clone(), Reason::Maxlen));
                }
                false
            }
        }
    }

    /// With drop-head, drops (dead-letters) the oldest ready messages while over a limit.
    pub(super) fn enforce_limits(&mut self) {
        if self.args.max_length.is_none() && self.args.max_length_bytes.is_none() {
            return;
        }
        let args = self.args.clone();
        if args.overflow != Overflow::DropHead {
            return;
        }
        while args.max_length.is_some_and(|m| self.ready.len() as u64 > m)
            || args
                .max_length_bytes
                .is_some_and(|m| self.ready.bytes() > m)
        {
            if let Some(seq) = self
                .ready
                .front()
                .filter(|r| r.msg.is_none())
                .map(|r| r.seq)
            {
                self.load_from(seq);
            }
            let Some(r) = self.pop_ready() else { break };
            match r.msg {
                Some(msg) => self.drop_message(r.seq, msg, Reason::Maxlen),
                None => self.forget_stored(vec![r.seq]),
            }
        }
    }
}
