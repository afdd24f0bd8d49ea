//! Channel records for the management API and the Prometheus metrics. Each open channel has a
//! [`ChannelInfo`] listed on its connection; the connection task that owns the channel is the
//! only writer of its counters, so a bump is a plain load and store (no locked instruction, no
//! lock) and readers sample them. When a channel goes, its counts are folded into the
//! node-wide totals, so the overview and `*_total` metrics never go backwards.

use crate::sampler::Sampler;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What is counted per channel, in RabbitMQ's `message_stats` names.
pub const NAMES: [&str; 11] = [
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "get_empty",
    "ack",
    "redeliver",
];

/// Index of each counter in [`NAMES`].
#[derive(Clone, Copy, Debug)]
pub enum Counter {
    /// Messages published.
    Publish = 0,
    /// Publishes confirmed (acked) to the publisher.
    Confirm = 1,
    /// Unroutable mandatory publishes returned.
    ReturnUnroutable = 2,
    /// Unroutable publishes dropped.
    DropUnroutable = 3,
    /// Deliveries to consumers that ack.
    Deliver = 4,
    /// Deliveries to no-ack consumers.
    DeliverNoAck = 5,
    /// basic.get with ack.
    Get = 6,
    /// basic.get without ack.
    GetNoAck = 7,
    /// basic.get on an empty queue.
    GetEmpty = 8,
    /// Acknowledged deliveries.
    Ack = 9,
    /// Deliveries flagged redelivered.
    Redeliver = 10,
}

/// Counts in [`NAMES`] order.
pub type Counts = [u64; NAMES.len()];

/// Upper bounds (bytes) of the message size histogram's buckets, RabbitMQ's
/// `rabbitmq_message_size_bytes` (the last one is +Inf).
pub const SIZE_BUCKETS: [u64; 8] = [
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
];

/// Per-bucket observations (the buckets, then +Inf, not cumulative), the sum of the sizes,
/// and the publishes received in confirm mode.
pub type Sizes = [u64; SIZE_BUCKETS.len() + 3];

/// Index of the size sum in [`Sizes`].
pub const SIZE_SUM: usize = SIZE_BUCKETS.len() + 1;
/// Index of the confirm-mode publish count in [`Sizes`].
pub const RECEIVED_CONFIRM: usize = SIZE_BUCKETS.len() + 2;

/// One open channel as the API shows it.
#[derive(Debug)]
pub struct ChannelInfo {
    /// Channel number.
    pub number: u16,
    counters: [AtomicU64; NAMES.len()],
    /// The sizes of the messages published on it ([`Sizes`]).
    sizes: [AtomicU64; SIZE_SUM + 2],
    /// Consumers on the channel.
    pub consumers: AtomicU32,
    /// basic.qos prefetch for new consumers.
    pub prefetch: AtomicU32,
    /// basic.qos global prefetch.
    pub global_prefetch: AtomicU32,
    /// Deliveries not yet acknowledged.
    pub unacked: AtomicU32,
    /// Publishes not yet confirmed.
    pub unconfirmed: AtomicU32,
    /// In confirm mode.
    pub confirm: AtomicBool,
    /// In transaction mode.
    pub transactional: AtomicBool,
    sampler: Mutex<Sampler<{ NAMES.len() }>>,
}

impl ChannelInfo {
    /// A record for channel `number`.
    pub fn new(number: u16) -> Self {
        ChannelInfo {
            number,
            counters: Default::default(),
            sizes: Default::default(),
            consumers: AtomicU32::new(0),
            prefetch: AtomicU32::new(0),
            global_prefetch: AtomicU32::new(0),
            unacked: AtomicU32::new(0),
            unconfirmed: AtomicU32::new(0),
            confirm: AtomicBool::new(false),
            transactional: AtomicBool::new(false),
            sampler: Mutex::new(Sampler::default()),
        }
    }

    /// Adds `n` to a counter. Only the channel's connection task calls this (single writer).
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        let a = &self.counters[c as usize];
        a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Records a publish of a `size`-byte body (in confirm mode or not). Single writer, as
    /// [`ChannelInfo::add`].
    #[inline]
    pub fn observe_publish(&self, size: u64, confirm: bool) {
        let bucket = SIZE_BUCKETS
            .iter()
            .position(|b| size <= *b)
            .unwrap_or(SIZE_BUCKETS.len());
        let bump = |i: usize, n: u64| {
            let a = &self.sizes[i];
            a.store(a.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        };
        bump(bucket, 1);
        bump(SIZE_SUM, size);
        if confirm {
            bump(RECEIVED_CONFIRM, 1);
        }
    }

    /// The size histogram and confirm-mode publishes now.
    pub fn sizes(&self) -> Sizes {
        std::array::from_fn(|i| self.sizes[i].load(Ordering::Relaxed))
    }

    /// The counters now.
    pub fn counts(&self) -> Counts {
        std::array::from_fn(|i| self.counters[i].load(Ordering::Relaxed))
    }

    /// Samples the counters into rates (the stats timer's tick).
    pub fn sample(&self) {
        let counts = self.counts();
        if let Ok(mut s) = self.sampler.lock() {
            s.sample(&counts);
        }
    }

    /// Counts and the per-second rates of the last sample.
    pub fn stats(&self) -> (Counts, [f64; NAMES.len()]) {
        let rates = self
            .sampler
            .lock()
            .map_or([0.0; NAMES.len()], |s| s.rates());
        (self.counts(), rates)
    }
}

/// Node-wide channel totals: what closed channels counted, plus open/close counters.
#[derive(Debug, Default)]
pub struct ChannelTotals {
    closed: [AtomicU64; NAMES.len()],
    closed_sizes: [AtomicU64; SIZE_SUM + 2],
    /// Channels opened since start.
    pub opened: AtomicU64,
    /// Channels closed since start.
    pub closed_channels: AtomicU64,
    sampler: Mutex<Sampler<{ NAMES.len() }>>,
}

impl ChannelTotals {
    /// Folds a closing channel's counts in.
    pub fn fold(&self, ch: &ChannelInfo) {
        for (slot, n) in self.closed.iter().zip(ch.counts()) {
            slot.fetch_add(n, Ordering::Relaxed);
        }
        for (slot, n) in self.closed_sizes.iter().zip(ch.sizes()) {
            slot.fetch_add(n, Ordering::Relaxed);
        }
        self.closed_channels.fetch_add(1, Ordering::Relaxed);
    }

    /// The size histogram and confirm-mode publishes over closed channels and the open ones.
    pub fn sizes_with_open<'a>(
        &self,
        open: impl IntoIterator<Item = &'a Arc<ChannelInfo>>,
    ) -> Sizes {
        let mut sizes: Sizes =
            std::array::from_fn(|i| self.closed_sizes[i].load(Ordering::Relaxed));
        for c in open {
            for (sum, n) in sizes.iter_mut().zip(c.sizes()) {
                *sum += n;
            }
        }
        sizes
    }

    /// Totals over closed channels and the open ones given, with the node-wide rates of the
    /// last sample.
    pub fn with_open<'a>(
        &self,
        open: impl IntoIterator<Item = &'a Arc<ChannelInfo>>,
    ) -> (Counts, [f64; NAMES.len()]) {
        let mut counts: Counts = std::array::from_fn(|i| self.closed[i].load(Ordering::Relaxed));
        for c in open {
            for (sum, n) in counts.iter_mut().zip(c.counts()) {
                *sum += n;
            }
        }
        let rates = self
            .sampler
            .lock()
            .map_or([0.0; NAMES.len()], |s| s.rates());
        (counts, rates)
    }

    /// Samples the node totals into rates (the stats timer's tick).
    pub fn sample<'a>(&self, open: impl IntoIterator<Item = &'a Arc<ChannelInfo>>) {
        let (counts, _) = self.with_open(open);
        if let Ok(mut s) = self.sampler.lock() {
            s.sample(&counts);
        }
    }
}
