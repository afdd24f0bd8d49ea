//! Per-channel state: content assembly, delivery tags and the unacked list, consumers,
//! prefetch, confirm and transaction modes. The handlers that change it live in `methods/`.

use crate::amqp::codec::ContentHeader;
use crate::error::{AmqpError, AmqpResult};
use crate::queue::consumer::ChannelLimiter;
use crate::queue::QueueRef;
use amq_protocol::protocol::basic;
use bytes::BytesMut;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A publish waiting for its content.
#[derive(Debug)]
pub(crate) struct PendingContent {
    pub publish: basic::Publish,
    pub header: Option<ContentHeader>,
    /// Property bytes followed by the body received so far.
    pub data: BytesMut,
    pub props_len: usize,
}

/// A delivery the client has not acknowledged yet.
#[derive(Debug)]
pub(crate) struct UnackedEntry {
    pub tag: u64,
    pub queue: QueueRef,
    pub seq: u64,
    /// Delivered to a consumer (counts against the channel-wide prefetch), not by basic.get.
    pub counted: bool,
}

/// A consumer as its channel knows it.
#[derive(Debug)]
pub(crate) struct ChannelConsumer {
    pub id: u64,
    pub queue: QueueRef,
}

/// Acks and publishes held back by tx.select until commit.
#[derive(Debug, Default)]
pub(crate) struct TxState {
    pub publishes: Vec<(basic::Publish, Arc<crate::message::Message>)>,
    /// Settled entries and whether each was acked (true), requeued (false, true) or dropped.
    pub settles: Vec<(UnackedEntry, Settle)>,
}

/// What happens to a settled delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    Ack,
    Requeue,
    Discard,
}

/// One open channel.
#[derive(Debug)]
pub(crate) struct Channel {
    pub id: u16,
    /// channel.close was sent; waiting for close-ok.
    pub closing: bool,
    /// Closed by the client (close-ok sent); the slot is freed.
    pub finished: bool,
    pub content: Option<PendingContent>,
    next_tag: u64,
    pub unacked: VecDeque<UnackedEntry>,
    pub consumers: HashMap<Arc<str>, ChannelConsumer>,
    /// Prefetch for consumers started from now on (basic.qos global=false).
    pub prefetch: u32,
    pub limiter: Arc<ChannelLimiter>,
    pub confirm: bool,
    /// Sequence number of the last publish in confirm mode.
    pub publish_seq: u64,
    /// Highest sequence number already confirmed to the client.
    pub confirmed: u64,
    pub tx: Option<TxState>,
}

impl Channel {
    pub fn new(id: u16) -> Self {
        Channel {
            id,
            closing: false,
            finished: false,
            content: None,
            next_tag: 1,
            unacked: VecDeque::new(),
            consumers: HashMap::new(),
            prefetch: 0,
            limiter: Arc::new(ChannelLimiter::default()),
            confirm: false,
            publish_seq: 0,
            confirmed: 0,
            tx: None,
        }
    }

    /// Allocates the next delivery tag.
    pub fn next_delivery_tag(&mut self) -> u64 {
        let t = self.next_tag;
        self.next_tag += 1;
        t
    }

    /// Removes the entries an ack/nack/reject names, checking the tag as RabbitMQ does.
    pub fn take_unacked(&mut self, tag: u64, multiple: bool) -> AmqpResult<Vec<UnackedEntry>> {
        let unknown = || AmqpError::precondition_failed(format!("unknown delivery tag {tag}"));
        if multiple {
            if tag == 0 {
                return Ok(self.unacked.drain(..).collect());
            }
            let end = self.unacked.partition_point(|e| e.tag <= tag);
            if end == 0 || self.unacked[end - 1].tag != tag {
                return Err(unknown());
            }
            Ok(self.unacked.drain(..end).collect())
        } else {
            let pos = self.unacked.partition_point(|e| e.tag < tag);
            match self.unacked.get(pos) {
                Some(e) if e.tag == tag => Ok(self.unacked.remove(pos).into_iter().collect()),
                _ => Err(unknown()),
            }
        }
    }

    /// Puts entries back (tx.rollback), keeping the list ordered by tag.
    pub fn restore_unacked(&mut self, entries: Vec<UnackedEntry>) {
        for e in entries {
            let pos = self.unacked.partition_point(|x| x.tag < e.tag);
            self.unacked.insert(pos, e);
        }
    }
}

/// Groups sequence numbers by queue, keeping first-seen order.
pub(crate) fn group_by_queue(
    entries: impl IntoIterator<Item = (QueueRef, u64)>,
) -> Vec<(QueueRef, Vec<u64>)> {
    let mut groups: Vec<(QueueRef, Vec<u64>)> = Vec::new();
    for (q, seq) in entries {
        match groups.iter_mut().find(|(g, _)| Arc::ptr_eq(g, &q)) {
            Some((_, v)) => v.push(seq),
            None => groups.push((q, vec![seq])),
        }
    }
    groups
}
