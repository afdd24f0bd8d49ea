//! Moving messages between two connections, once they are set up (a shovel's run, a
//! federation link): one task reads both, assembles each delivery consumed on channel 1 of
//! the source, asks its [`Transfer`] where it goes, publishes it on channel 1 of the
//! destination and settles it at the source by the ack mode (after the destination's
//! confirm, after the publish, or never). What one wake-up produces for a socket goes out in
//! one write. A destination that blocks (`connection.blocked`) stops the reading of the
//! source; unsettled deliveries bound what is in flight to the prefetch. Heartbeats are sent
//! and watched on both connections.

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
    /// (destination publish sequence number, source delivery tag), in order.
    unconfirmed: VecDeque<(u64, u64)>,
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
                self.unconfirmed.push_back((self.next_seq, m.tag));
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
            let mut last = None;
            let mut n = 0;
            while let Some(&(seq, src_tag)) = self.unconfirmed.front() {
                if seq > tag {
                    break;
                }
                self.unconfirmed.pop_front();
                last = Some(src_tag);
                n += 1;
            }
            if let Some(src_tag) = last {
                settle(&mut self.src_out, src_tag, true, ack);
                self.count_settled(n);
            }
        } else if let Some(i) = self.unconfirmed.iter().position(|&(seq, _)| seq == tag) {
            if let Some((_, src_tag)) = self.unconfirmed.remove(i) {
                settle(&mut self.src_out, src_tag, false, ack);
                self.count_settled(1);
            }
        }
        Ok(())
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
        for (c, out, wrote, side) in [
            (&mut *dst, &mut p.dst_out, &mut dst_wrote, "destination"),
            (&mut *src, &mut p.src_out, &mut src_wrote, "source"),
        ] {
            if out.is_empty() {
                continue;
            }
            tokio::select! {
                r = c.wr.write_all(out) => r.map_err(|e| failed(side, e))?,
                _ = stop.changed() => return Ok(Ended::Stopped),
            }
            out.clear();
            *wrote = Instant::now();
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
            }
            _ = tick.tick() => p.transfer.tick(&mut p.src_out),
            _ = woken(&wake) => p.transfer.tick(&mut p.src_out),
            _ = stop.changed() => return Ok(Ended::Stopped),
        }
    }
}

/// Waits for `wake`, or forever without one.
async fn woken(wake: &Option<Arc<Notify>>) {
    match wake {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}
