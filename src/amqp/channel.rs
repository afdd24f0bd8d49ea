//! Per-channel state: content assembly, delivery tags and the unacked list, consumers,
//! prefetch, confirm and transaction modes. The handlers that change it live in `methods/`.

use crate::amqp::error::{AmqpError, AmqpResult};
use crate::queue::consumer::ChannelLimiter;
use crate::queue::QueueRef;
use amq_protocol::protocol::basic;
use bytes::BytesMut;
use std::collections::VecDeque;
use std::sync::Arc;

/// A publish waiting for its content.
#[derive(Debug)]
pub(crate) struct PendingContent {
    pub publish: basic::Publish,
    pub header: Option<HeaderSeen>,
    /// Property bytes followed by the body received so far.
    pub data: BytesMut,
    pub props_len: usize,
}

/// What content assembly keeps of a content header once it is checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeaderSeen {
    /// The declared body size.
    pub body_size: u64,
    /// The properties the broker acts on.
    pub hot: crate::message::HotProperties,
}

/// What a body frame hands to content assembly.
pub(crate) enum BodyFrame {
    /// A payload decoded from the read buffer.
    Buffered(bytes::Bytes),
    /// The message's buffer back from a direct read, with the frame's payload appended.
    Direct(BytesMut),
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

/// Publisher-confirm bookkeeping of a confirm-mode channel. Each publish waits for the stores
/// of its persistent copies; outcomes are reported in publish order, acks of consecutive
/// publishes folded into one `multiple` ack.
#[derive(Debug, Default)]
pub(crate) struct Confirms {
    /// Publishes up to this sequence number have been reported to the client.
    reported: u64,
    /// For each later publish: store confirmations still awaited, and whether one failed.
    outstanding: VecDeque<(u32, bool)>,
}

impl Confirms {
    /// Sequence number the next publish gets.
    pub fn next_seq(&self) -> u64 {
        self.reported + self.outstanding.len() as u64 + 1
    }

    /// Records a publish waiting for `waits` store confirmations.
    pub fn publish(&mut self, waits: u32) {
        self.outstanding.push_back((waits, false));
    }

    /// Records one store outcome for a publish.
    pub fn outcome(&mut self, seq: u64, ok: bool) {
        let Some(idx) = seq.checked_sub(self.reported + 1) else {
            return;
        };
        if let Some(e) = self.outstanding.get_mut(idx as usize) {
            e.0 = e.0.saturating_sub(1);
            e.1 |= !ok;
        }
    }

    /// Publishes not yet reported.
    pub fn unconfirmed(&self) -> usize {
        self.outstanding.len()
    }

    /// Reports every settled publish at the front: `emit(ack, tag, multiple)`; returns how
    /// many were acked.
    pub fn drain(&mut self, mut emit: impl FnMut(bool, u64, bool)) -> u64 {
        let mut acked = 0;
        let mut run: Option<(u64, u64)> = None;
        while let Some(&(0, failed)) = self.outstanding.front() {
            self.outstanding.pop_front();
            self.reported += 1;
            let seq = self.reported;
            if failed {
                if let Some((start, end)) = run.take() {
                    emit(true, end, end > start);
                }
                emit(false, seq, false);
            } else {
                acked += 1;
                run = Some((run.map_or(seq, |(s, _)| s), seq));
            }
        }
        if let Some((start, end)) = run {
            emit(true, end, end > start);
        }
        acked
    }
}

/// One open channel.
#[derive(Debug)]
pub(crate) struct Channel {
    pub id: u16,
    /// Broker-unique id of this channel instance (the number can be reused).
    pub uid: u64,
    /// channel.close was sent; waiting for close-ok.
    pub closing: bool,
    /// Closed by the client (close-ok sent); the slot is freed.
    pub finished: bool,
    pub content: Option<PendingContent>,
    next_tag: u64,
    pub unacked: VecDeque<UnackedEntry>,
    pub consumers: rustc_hash::FxHashMap<Arc<str>, ChannelConsumer>,
    /// Prefetch for consumers started from now on (basic.qos global=false).
    pub prefetch: u32,
    pub limiter: Arc<ChannelLimiter>,
    pub confirm: bool,
    pub confirms: Confirms,
    /// Direct reply-to consumer: (tag, token).
    pub reply_to: Option<(Arc<str>, String)>,
    pub tx: Option<TxState>,
    /// The queue most recently declared on this channel (what an empty queue name means).
    pub last_queue: Option<amq_protocol::types::ShortString>,
    /// What the management API and metrics see of this channel.
    pub stats: crate::connections::ChannelRegistration,
    /// Replicated or other nodes' queues this channel acked on, each with its settle mark
    /// before the first ack: its `close-ok` waits until they have committed those acks.
    pub acked_far: Vec<(crate::queue::QueueRef, u64)>,
}

impl Channel {
    /// A fresh channel; `max_unacked` (0: none) caps its unacknowledged deliveries.
    pub fn new(
        id: u16,
        uid: u64,
        max_unacked: u32,
        stats: crate::connections::ChannelRegistration,
    ) -> Self {
        Channel {
            id,
            uid,
            closing: false,
            finished: false,
            content: None,
            next_tag: 1,
            unacked: VecDeque::new(),
            consumers: Default::default(),
            prefetch: 0,
            limiter: Arc::new(ChannelLimiter::with_cap(max_unacked)),
            confirm: false,
            confirms: Confirms::default(),
            reply_to: None,
            tx: None,
            last_queue: None,
            stats,
            acked_far: Vec::new(),
        }
    }

    /// Publishes the unacked gauge alone (what a delivery changes).
    pub fn update_unacked_gauge(&self) {
        self.stats.unacked.store(
            self.unacked.len() as u32,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Publishes the channel's gauges for the API (plain stores; called after each method and
    /// delivery by the owning connection task).
    pub fn update_gauges(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.stats;
        self.update_unacked_gauge();
        s.unconfirmed
            .store(self.confirms.unconfirmed() as u32, Relaxed);
        s.consumers.store(self.consumers.len() as u32, Relaxed);
        s.prefetch.store(self.prefetch, Relaxed);
        s.global_prefetch.store(self.limiter.limit(), Relaxed);
        s.confirm.store(self.confirm, Relaxed);
        s.transactional.store(self.tx.is_some(), Relaxed);
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

impl Drop for Channel {
    /// A channel dropped with consumers or unacked deliveries (its connection task ended
    /// without releasing it, a panic included) still gives them back: its consumers are
    /// cancelled and its messages requeued, by a task of their own.
    fn drop(&mut self) {
        let consumers: Vec<ChannelConsumer> = self.consumers.drain().map(|(_, c)| c).collect();
        let mut entries: Vec<(QueueRef, u64)> =
            self.unacked.drain(..).map(|e| (e.queue, e.seq)).collect();
        if let Some(tx) = self.tx.take() {
            entries.extend(tx.settles.into_iter().map(|(e, _)| (e.queue, e.seq)));
        }
        if consumers.is_empty() && entries.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            for c in consumers {
                c.queue.cancel(c.id).await;
            }
            for (q, seqs) in group_by_queue(entries) {
                q.requeue(seqs).await;
            }
        });
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

#[cfg(test)]
mod tests {
    use super::Confirms;

    fn drained(c: &mut Confirms) -> Vec<(bool, u64, bool)> {
        let mut v = Vec::new();
        c.drain(|a, t, m| v.push((a, t, m)));
        v
    }

    #[test]
    fn confirms_fold_in_order_and_nack_failures() {
        let mut c = Confirms::default();
        c.publish(0);
        c.publish(1);
        c.publish(0);
        assert_eq!(drained(&mut c), vec![(true, 1, false)]);
        c.outcome(2, true);
        assert_eq!(drained(&mut c), vec![(true, 3, true)]);
        c.publish(2);
        c.publish(0);
        c.publish(1);
        c.outcome(4, true);
        c.outcome(4, false);
        c.outcome(6, true);
        assert_eq!(drained(&mut c), vec![(false, 4, false), (true, 6, true)]);
        assert_eq!(c.next_seq(), 7);
    }
}
