//! Consumers as a queue sees them, the channel-wide prefetch limiter they share, and the events
//! a queue sends to the connection that owns a consumer.

use crate::message::Message;
use crate::queue::QueueRef;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Most deliveries a queue hands to one connection's inbox before that connection has encoded
/// them for its socket. Bounds memory for no-ack consumers and slow sockets.
pub const PENDING_WINDOW: u32 = 2048;

/// What a queue tells a consumer's connection.
/// The connection id of consumers a queue's home node registers for another node's
/// connections (their own node lists them).
pub const REMOTE_CONNECTION: u64 = u64::MAX;

#[derive(Debug)]
pub enum ConsumerEvent {
    /// A message for a consumer.
    Deliver(Delivery),
    /// A publisher confirm outcome for a confirm-mode channel.
    Confirm {
        /// Channel number.
        channel: u16,
        /// Unique id of the channel instance (the number can be reused).
        channel_uid: u64,
        /// Publish sequence number.
        seq: u64,
        /// Stored (true) or failed (false).
        ok: bool,
    },
    /// A direct reply-to message for a channel's reply consumer (no queue, no ack).
    DirectReply {
        /// Channel number.
        channel: u16,
        /// Unique id of the channel instance.
        channel_uid: u64,
        /// The reply consumer's tag.
        tag: Arc<str>,
        /// The reply.
        msg: Arc<Message>,
    },
    /// A delivery stayed unacknowledged longer than the consumer timeout: close the channel.
    TimedOut {
        /// Channel number.
        channel: u16,
        /// The timeout that was exceeded, milliseconds.
        timeout: u64,
    },
    /// The consumer's queue is served by another handle here from now on (a replicated
    /// queue's leader moved): the connection registers the consumer with it again.
    Moved {
        /// The consumer as it was registered.
        spec: Box<ConsumerSpec>,
        /// The queue's new handle.
        to: super::QueueRef,
    },
    /// The queue went away under the consumer (basic.cancel to the client).
    Cancelled {
        /// Channel of the consumer.
        channel: u16,
        /// Consumer tag.
        tag: Arc<str>,
    },
}

/// One delivery to a consumer.
#[derive(Debug)]
pub struct Delivery {
    /// Channel of the consumer.
    pub channel: u16,
    /// Consumer tag.
    pub tag: Arc<str>,
    /// Broker-unique id of the consumer (a tag can be reused after a cancel).
    pub consumer: u64,
    /// Queue it comes from (for the ack).
    pub queue: QueueRef,
    /// The queue's sequence number of the message.
    pub seq: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// The message.
    pub msg: Arc<Message>,
    /// Consumer does not ack.
    pub no_ack: bool,
    /// The consumer's in-flight counter, released when the connection has encoded it.
    pub pending: Arc<AtomicU32>,
}

impl Delivery {
    /// A delivery of `msg` (queue sequence `seq`) to consumer `spec`.
    pub fn to(
        spec: &ConsumerSpec,
        queue: QueueRef,
        seq: u64,
        redelivered: bool,
        msg: Arc<Message>,
    ) -> Delivery {
        Delivery {
            channel: spec.channel,
            tag: spec.tag.clone(),
            consumer: spec.id,
            queue,
            seq,
            redelivered,
            msg,
            no_ack: spec.no_ack,
            pending: spec.pending.clone(),
        }
    }
}

/// Sender into a connection's inbox.
pub type ConsumerSink = mpsc::UnboundedSender<ConsumerEvent>;

impl crate::confirm::ConfirmSink for ConsumerSink {
    fn confirm(&self, channel: u16, channel_uid: u64, seq: u64, ok: bool) {
        let _ = self.send(ConsumerEvent::Confirm {
            channel,
            channel_uid,
            seq,
            ok,
        });
    }
}

/// A consumer registered by basic.consume.
#[derive(Clone, Debug)]
pub struct ConsumerSpec {
    /// Broker-unique id.
    pub id: u64,
    /// Consumer tag.
    pub tag: Arc<str>,
    /// Channel number.
    pub channel: u16,
    /// Owning connection id.
    pub connection: u64,
    /// Connection inbox.
    pub sink: ConsumerSink,
    /// Deliveries need no ack.
    pub no_ack: bool,
    /// Exclusive consumer.
    pub exclusive: bool,
    /// Per-consumer prefetch (0 = unlimited).
    pub prefetch: u32,
    /// Channel-wide prefetch.
    pub limiter: Arc<ChannelLimiter>,
    /// In-flight deliveries not yet encoded by the connection.
    pub pending: Arc<AtomicU32>,
    /// Consumer priority (`x-priority`); higher is served first.
    pub priority: i32,
    /// Milliseconds a delivery may stay unacknowledged (0: no limit).
    pub timeout: u64,
    /// Where a consumer of a stream starts (`x-stream-offset`; None: `next`).
    pub stream_offset: Option<crate::store::stream::OffsetSpec>,
    /// Which messages a consumer of a stream takes (None: all).
    pub stream_filter: Option<Arc<StreamFilter>>,
}

/// What a consumer of a stream takes (`x-stream-filter`, `x-stream-match-unfiltered`): the
/// messages whose `x-stream-filter-value` is one of `values`, and those without a filter
/// value when `match_unfiltered`. Applied to each message (exact filtering, as LavinMQ), not
/// per chunk through a Bloom filter as RabbitMQ, so a consumer never sees another's values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamFilter {
    pub values: Vec<String>,
    pub match_unfiltered: bool,
}

impl StreamFilter {
    /// Whether a message with filter value `value` passes.
    pub fn admits(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => self.values.iter().any(|f| f == v),
            None => self.match_unfiltered,
        }
    }
}

/// Channel-wide prefetch (basic.qos global=true), shared by the channel's consumers on all queues.
#[derive(Debug, Default)]
pub struct ChannelLimiter {
    limit: AtomicU32,
    /// The node's `max_unacked_per_channel` (0: none), a ceiling whatever the prefetch.
    cap: u32,
    unacked: AtomicU32,
    blocked: AtomicBool,
}

impl ChannelLimiter {
    /// A limiter whose channel may never hold more than `cap` unacked deliveries (0: no cap).
    pub fn with_cap(cap: u32) -> Self {
        ChannelLimiter {
            cap,
            ..Self::default()
        }
    }

    /// The channel-wide prefetch (0 = unlimited).
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// Sets the channel-wide prefetch (0 = unlimited).
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Release);
    }

    /// Takes one unit of credit if the channel has any; remembers a refusal.
    pub fn try_acquire(&self) -> bool {
        let limit = self.limit.load(Ordering::Acquire);
        let mut cur = self.unacked.load(Ordering::Acquire);
        loop {
            if (limit != 0 && cur >= limit) || (self.cap != 0 && cur >= self.cap) {
                self.blocked.store(true, Ordering::Release);
                return false;
            }
            match self.unacked.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes one unit for a delivery another node already granted (a consumer here of a
    /// queue whose home is elsewhere), so the ack that returns it balances.
    pub fn acquire_granted(&self) {
        self.unacked.fetch_add(1, Ordering::AcqRel);
    }

    /// Returns `n` units; true when some queue was refused credit and should be woken.
    pub fn release(&self, n: u32) -> bool {
        if n == 0 {
            return false;
        }
        let _ = self
            .unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_sub(n))
            });
        self.blocked.swap(false, Ordering::AcqRel)
    }

    /// Whether the limit was raised or removed while some queue was waiting.
    pub fn take_blocked(&self) -> bool {
        self.blocked.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_counts_and_reports_blocking() {
        let l = ChannelLimiter::default();
        l.set_limit(2);
        assert!(l.try_acquire());
        assert!(l.try_acquire());
        assert!(!l.try_acquire());
        assert!(l.release(1));
        assert!(l.try_acquire());
        assert!(!l.release(0));
        l.set_limit(0);
        assert!(l.try_acquire());
    }
}
