//! Moving messages between two connections, once they are set up (a shovel's run, a
//! federation link): one task reads both, assembles each delivery consumed on channel 1 of
//! the source, asks its [`Transfer`] where it goes, publishes it on channel 1 of the
//! destination and settles it at the source by the ack mode (after the destination's
//! confirm, after the publish, or never). Confirms are settled at the source in delivery
//! order, each run of acks (or of nacks) that one read of the destination completes as one
//! `multiple` method. What one wake-up produces for a socket goes out in one write. A
//! destination that blocks (`connection.blocked`) stops the reading of the source; unsettled
//! deliveries bound what is in flight to the prefetch. Heartbeats are sent and watched on
//! both connections. A stopped run settles what the destination confirms within a few
//! seconds before it ends, so a pause or restart does not move those messages twice.

use super::consume::{drain, due, failed, fill, silent, Assembler, Incoming};
use super::Client;
use crate::amqp::codec::{self, Frame};
use amq_protocol::protocol::{basic, connection, AMQPClass};
use bytes::BytesMut;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// When the source's deliveries are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// After the destination confirmed the message (the default).
    #[default]
    OnConfirm,
    /// As soon as the message was published to the destination.
    OnPublish,
    /// Never: the source delivers without acknowledgements.
    NoAck,
}

impl AckMode {
    /// RabbitMQ's `ack-mode` value (`on-confirm` for anything unknown).
    pub fn parse(s: Option<&str>) -> AckMode {
        match s {
            Some("no-ack") => AckMode::NoAck,
            Some("on-publish") => AckMode::OnPublish,
            _ => AckMode::OnConfirm,
        }
    }
}

/// A delivery from the source, complete.
pub struct Delivery<'a> {
    /// The exchange it was published to.
    pub exchange: &'a str,
    /// Its routing key.
    pub routing_key: &'a str,
    /// The source's redelivered flag.
    pub redelivered: bool,
    /// Its encoded properties.
    pub props: &'a [u8],
}

/// Where a delivery goes.
pub enum Route<'a> {
    /// Published to this exchange with this key, with these properties (None: unchanged).
    Publish {
        /// The destination exchange.
        exchange: Cow<'a, str>,
        /// The routing key.
        routing_key: Cow<'a, str>,
        /// Rewritten properties.
        props: Option<Vec<u8>>,
    },
    /// Not forwarded, and settled at the source as done (a federation loop).
    Drop,
}

/// What a relay's owner decides.
pub trait Transfer {
    /// When the source's deliveries are acknowledged.
    fn ack_mode(&self) -> AckMode;
    /// Where a delivery goes.
    fn destination<'a>(&'a self, d: &Delivery<'a>) -> Route<'a>;
    /// Called about twice a second, and whenever [`Transfer::wake`] is notified: may add
    /// frames for the source, as `nowait` methods.
    fn tick(&mut self, _src_out: &mut BytesMut) {}
    /// Notified when `tick` has something to do at once (None: the timer is enough).
    fn wake(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// The counters a relay keeps.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages published to the destination.
    pub forwarded: AtomicU64,
    /// Messages published and not yet confirmed by the destination.
    pub pending: AtomicU64,
}

/// How a run ended without failing.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The run was stopped (its shovel or link deleted or restarted, or the node stopping).
    Stopped,
    /// It moved what `delete-after` asked for.
    Completed,
}

/// Where a run stands.
struct Pump<'a, T: Transfer> {
    transfer: &'a mut T,
    ack_mode: AckMode,
    counters: &'a Counters,
    incoming: Assembler,
    /// The publishes not yet settled at the source, in order.
    unconfirmed: VecDeque<Unsettled>,
    next_seq: u64,
    /// Messages still to publish (None: no limit).
    to_publish: Option<u64>,
    /// Messages still to settle before the run is complete (None: no limit).
    to_settle: Option<u64>,
    src_out: BytesMut,
    dst_out: BytesMut,
    blocked: bool,
    dst_frame_max: u32,
}

/// A publish to the destination not yet settled at the source.
struct Unsettled {
    /// Its publish sequence number at the destination.
    seq: u64,
    /// Its delivery tag at the source.
    src_tag: u64,
    /// The destination's answer: Some(true) confirmed, Some(false) refused, None not yet.
    answer: Option<bool>,
}

fn settle(out: &mut BytesMut, tag: u64, multiple: bool, ack: bool) {
    if ack {
        codec::encode_confirm(out, 1, true, tag, multiple);
    } else {
        codec::encode_nack(out, 1, tag, multiple, true);
    }
}

impl<T: Transfer> Pump<'_, T> {
    fn count_settled(&mut self, n: u64) {
        if let Some(left) = &mut self.to_settle {
            *left = left.saturating_sub(n);
        }
    }

    fn done(&self) -> bool {
        self.to_settle == Some(0)
    }

    /// Publishes a complete delivery to the destination.
    fn forward(&mut self, m: Incoming) {
        if self.to_publish == Some(0) {
            // Past the limit: left unsettled, the source requeues it when the run ends.
            return;
        }
        let d = Delivery {
            exchange: &m.exchange,
            routing_key: &m.routing_key,
            redelivered: m.redelivered,
            props: &m.props,
        };
        let Route::Publish {
            exchange,
            routing_key,
            props,
        } = self.transfer.destination(&d)
        else {
            if self.ack_mode != AckMode::NoAck {
                settle(&mut self.src_out, m.tag, false, true);
            }
            self.count_settled(1);
            return;
        };
        codec::encode_publish(&mut self.dst_out, 1, &exchange, &routing_key);
        let props = props.as_deref().unwrap_or(&m.props);
        codec::encode_content(&mut self.dst_out, 1, props, &m.body, self.dst_frame_max);
        self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
        if let Some(left) = &mut self.to_publish {
            *left -= 1;
        }
        match self.ack_mode {
            AckMode::OnConfirm => {
                self.next_seq += 1;
                self.unconfirmed.push_back(Unsettled {
                    seq: self.next_seq,
                    src_tag: m.tag,
                    answer: None,
                });
            }
            AckMode::OnPublish => {
                settle(&mut self.src_out, m.tag, false, true);
                self.count_settled(1);
            }
            AckMode::NoAck => self.count_settled(1),
        }
    }

    /// A frame from the source; Err ends the run.
    fn on_source(&mut self, f: Frame) -> Result<(), String> {
        if let Some(m) = self.incoming.feed(f)? {
            self.forward(m);
        }
        Ok(())
    }

    /// A frame from the destination; Err ends the run.
    fn on_destination(&mut self, f: Frame) -> Result<(), String> {
        let Frame::Method(_, m) = f else {
            return Ok(());
        };
        let (tag, multiple, ack) = match *m {
            AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => (a.delivery_tag, a.multiple, true),
            AMQPClass::Basic(basic::AMQPMethod::Nack(n)) => (n.delivery_tag, n.multiple, false),
            AMQPClass::Connection(connection::AMQPMethod::Blocked(_)) => {
                self.blocked = true;
                return Ok(());
            }
            AMQPClass::Connection(connection::AMQPMethod::Unblocked(_)) => {
                self.blocked = false;
                return Ok(());
            }
            _ => return Ok(()),
        };
        if self.ack_mode != AckMode::OnConfirm {
            return Ok(());
        }
        if multiple {
            for u in self.unconfirmed.iter_mut() {
                if u.seq > tag {
                    break;
                }
                u.answer.get_or_insert(ack);
            }
        } else if let Ok(i) = self.unconfirmed.binary_search_by_key(&tag, |u| u.seq) {
            if let Some(u) = self.unconfirmed.get_mut(i) {
                u.answer.get_or_insert(ack);
            }
        }
        Ok(())
    }

    /// Settles at the source the answered publishes at the head of the queue: each run of
    /// one answer as one method (`multiple` when it covers more than one delivery; every
    /// earlier tag is settled already, so it settles exactly the run).
    fn settle_answered(&mut self) {
        while let Some(first) = self.unconfirmed.front() {
            let Some(ack) = first.answer else {
                return;
            };
            let mut last = first.src_tag;
            let mut n = 0;
            while let Some(u) = self.unconfirmed.front() {
                if u.answer != Some(ack) {
                    break;
                }
                last = u.src_tag;
                n += 1;
                self.unconfirmed.pop_front();
            }
            settle(&mut self.src_out, last, n > 1, ack);
            self.count_settled(n);
        }
    }
}

/// Moves messages from channel 1 of `src` to channel 1 of `dst` until the run is stopped,
/// has settled `remaining` messages (None: no limit), or fails (Err with the reason).
pub async fn run<T: Transfer>(
    src: &mut Client,
    dst: &mut Client,
    remaining: Option<u64>,
    transfer: &mut T,
    counters: &Counters,
    stop: &mut watch::Receiver<bool>,
) -> Result<Ended, String> {
    let wake = transfer.wake();
    let mut p = Pump {
        ack_mode: transfer.ack_mode(),
        transfer,
        counters,
        incoming: Assembler::default(),
        unconfirmed: VecDeque::new(),
        next_seq: 0,
        to_publish: remaining,
        to_settle: remaining,
        src_out: BytesMut::new(),
        dst_out: BytesMut::new(),
        blocked: false,
        dst_frame_max: dst.frame_max,
    };
    let now = Instant::now();
    let (mut src_read, mut dst_read, mut src_wrote, mut dst_wrote) = (now, now, now, now);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        let (src_hb, dst_hb) = (src.heartbeat, dst.heartbeat);
        if due(dst_hb, dst_wrote) {
            codec::encode_heartbeat(&mut p.dst_out);
        }
        if due(src_hb, src_wrote) {
            codec::encode_heartbeat(&mut p.src_out);
        }
        // Publishes go out before the source hears of their settling.
        let mut stopped = false;
        for (c, out, wrote, side) in [
            (&mut *dst, &mut p.dst_out, &mut dst_wrote, "destination"),
            (&mut *src, &mut p.src_out, &mut src_wrote, "source"),
        ] {
            if out.is_empty() {
                continue;
            }
            tokio::select! {
                r = c.wr.write_all_buf(out) => r.map_err(|e| failed(side, e))?,
                _ = stop.changed() => {
                    stopped = true;
                    break;
                }
            }
            *wrote = Instant::now();
        }
        if stopped {
            wind_down(&mut p, src, dst).await;
            return Ok(Ended::Stopped);
        }
        p.counters
            .pending
            .store(p.unconfirmed.len() as u64, Ordering::Relaxed);
        if p.done() {
            return Ok(Ended::Completed);
        }
        if p.blocked {
            // Not read while the destination is blocked: its silence is ours.
            src_read = Instant::now();
        }
        if silent(src_hb, src_read) {
            return Err("source: missed heartbeats".into());
        }
        if silent(dst_hb, dst_read) {
            return Err("destination: missed heartbeats".into());
        }
        tokio::select! {
            r = fill(src), if !p.blocked => {
                r.map_err(|e| failed("source", e))?;
                src_read = Instant::now();
                drain(src, "source", |f| p.on_source(f)).await?;
            }
            r = fill(dst) => {
                r.map_err(|e| failed("destination", e))?;
                dst_read = Instant::now();
                drain(dst, "destination", |f| p.on_destination(f)).await?;
                p.settle_answered();
            }
            _ = tick.tick() => p.transfer.tick(&mut p.src_out),
            _ = woken(&wake) => p.transfer.tick(&mut p.src_out),
            _ = stop.changed() => {
                wind_down(&mut p, src, dst).await;
                return Ok(Ended::Stopped);
            }
        }
    }
}

/// How long a stopped run waits for the destination to confirm what it published.
pub(crate) const WIND_DOWN: Duration = Duration::from_secs(5);

/// A stopped run's last steps: what it had started to write goes out, the source is no
/// longer read, the destination's confirms of what was published are awaited, up to
/// [`WIND_DOWN`] in all, and settled at the source, so that what reached the destination
/// is not requeued at the source and moved a second time by the next run.
async fn wind_down<T: Transfer>(p: &mut Pump<'_, T>, src: &mut Client, dst: &mut Client) {
    let deadline = Instant::now() + WIND_DOWN;
    if !p.dst_out.is_empty()
        && !matches!(
            tokio::time::timeout_at(deadline, dst.wr.write_all_buf(&mut p.dst_out)).await,
            Ok(Ok(()))
        )
    {
        return;
    }
    loop {
        if !p.src_out.is_empty()
            && !matches!(
                tokio::time::timeout_at(deadline, src.wr.write_all_buf(&mut p.src_out)).await,
                Ok(Ok(()))
            )
        {
            return;
        }
        if p.unconfirmed.is_empty() {
            return;
        }
        if !matches!(
            tokio::time::timeout_at(deadline, fill(dst)).await,
            Ok(Ok(()))
        ) {
            return;
        }
        if drain(dst, "destination", |f| p.on_destination(f))
            .await
            .is_err()
        {
            return;
        }
        p.settle_answered();
    }
}

/// Waits for `wake`, or forever without one.
async fn woken(wake: &Option<Arc<Notify>>) {
    match wake {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl Transfer for Nowhere {
        fn ack_mode(&self) -> AckMode {
            AckMode::OnConfirm
        }
        fn destination<'a>(&'a self, _d: &Delivery<'a>) -> Route<'a> {
            Route::Drop
        }
    }

    /// The (ack, tag, multiple) of every settle method in `out`.
    fn settled(out: &mut BytesMut) -> Vec<(bool, u64, bool)> {
        let mut got = Vec::new();
        while let Ok(Some(Frame::Method(_, m))) = codec::decode(out, 0) {
            match *m {
                AMQPClass::Basic(basic::AMQPMethod::Ack(a)) => {
                    got.push((true, a.delivery_tag, a.multiple));
                }
                AMQPClass::Basic(basic::AMQPMethod::Nack(n)) => {
                    assert!(n.requeue, "a refused message goes back to its queue");
                    got.push((false, n.delivery_tag, n.multiple));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        got
    }

    /// Feeds the destination's confirms (ack, seq, multiple) and settles what they answer.
    fn confirm(p: &mut Pump<'_, Nowhere>, confirms: &[(bool, u64, bool)]) {
        let mut wire = BytesMut::new();
        for &(ack, seq, multiple) in confirms {
            codec::encode_confirm(&mut wire, 1, ack, seq, multiple);
        }
        while let Ok(Some(f)) = codec::decode(&mut wire, 0) {
            p.on_destination(f).expect("a confirm");
        }
        p.settle_answered();
    }

    #[test]
    fn confirms_settle_the_source_in_order_one_method_per_run() {
        let (mut t, counters) = (Nowhere, Counters::default());
        let mut p = Pump {
            ack_mode: AckMode::OnConfirm,
            transfer: &mut t,
            counters: &counters,
            incoming: Assembler::default(),
            unconfirmed: VecDeque::new(),
            next_seq: 0,
            to_publish: None,
            to_settle: Some(9),
            src_out: BytesMut::new(),
            dst_out: BytesMut::new(),
            blocked: false,
            dst_frame_max: 0,
        };
        // Source tags 11..=19 published as destination sequence numbers 1..=9.
        for seq in 1..=9 {
            p.unconfirmed.push_back(Unsettled {
                seq,
                src_tag: seq + 10,
                answer: None,
            });
        }
        // Single confirms of 1, 2, 3: one multiple ack up to the third tag.
        confirm(
            &mut p,
            &[(true, 1, false), (true, 2, false), (true, 3, false)],
        );
        assert_eq!(settled(&mut p.src_out), [(true, 13, true)]);
        // 5 answered before 4: nothing settles until 4 is answered.
        confirm(&mut p, &[(true, 5, false)]);
        assert_eq!(settled(&mut p.src_out), []);
        // 4 completes the run 4..=5.
        confirm(&mut p, &[(true, 4, false)]);
        assert_eq!(settled(&mut p.src_out), [(true, 15, true)]);
        // A nack between acks breaks the run, a lone answer settles without `multiple`,
        // and a multiple nack leaves earlier answers as they were.
        confirm(
            &mut p,
            &[(false, 6, false), (true, 7, false), (false, 9, true)],
        );
        assert_eq!(
            settled(&mut p.src_out),
            [(false, 16, false), (true, 17, false), (false, 19, true)]
        );
        assert!(p.unconfirmed.is_empty());
        assert!(p.done(), "every settled message is counted");
    }
}
