//! Message counters of a queue, for the management API's `message_stats`. The queue task owns
//! them (plain integers, no atomics or locks on the hot path) and turns them into rates when
//! asked, over a window of at least five seconds since the previous sample, as RabbitMQ's
//! collector samples every five seconds.

use std::time::Instant;

/// What is counted, in RabbitMQ's `message_stats` names.
pub const NAMES: [&str; 7] = [
    "publish",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "ack",
    "redeliver",
];

/// Index of each counter in [`NAMES`].
#[derive(Clone, Copy, Debug)]
pub enum Counter {
    /// Messages enqueued.
    Publish = 0,
    /// Deliveries to consumers that ack.
    Deliver = 1,
    /// Deliveries to no-ack consumers.
    DeliverNoAck = 2,
    /// basic.get with ack.
    Get = 3,
    /// basic.get without ack.
    GetNoAck = 4,
    /// Acknowledgements.
    Ack = 5,
    /// Deliveries (and gets) flagged redelivered.
    Redeliver = 6,
}

/// Shortest window a rate is computed over.
const WINDOW_MS: u128 = 5_000;

/// Turns growing counters into per-second rates over a window of at least [`WINDOW_MS`]:
/// the rates of the last full window are kept until the next one has passed.
#[derive(Debug)]
pub struct Sampler<const N: usize> {
    sampled: [u64; N],
    sampled_at: Instant,
    rates: [f64; N],
}

impl<const N: usize> Default for Sampler<N> {
    fn default() -> Self {
        Sampler {
            sampled: [0; N],
            sampled_at: Instant::now(),
            rates: [0.0; N],
        }
    }
}

impl<const N: usize> Sampler<N> {
    /// The rates for these counts, taking a new sample when the window has passed.
    pub fn sample(&mut self, counts: &[u64; N]) -> [f64; N] {
        let elapsed = self.sampled_at.elapsed();
        if elapsed.as_millis() >= WINDOW_MS {
            let secs = elapsed.as_secs_f64();
            for ((rate, now), then) in self.rates.iter_mut().zip(counts).zip(&self.sampled) {
                *rate = now.saturating_sub(*then) as f64 / secs;
            }
            self.sampled = *counts;
            self.sampled_at = Instant::now();
        }
        self.rates
    }
}

/// A queue's counters and their sampler.
#[derive(Debug, Default)]
pub struct Stats {
    counts: [u64; NAMES.len()],
    sampler: Sampler<{ NAMES.len() }>,
}

/// A snapshot: totals and per-second rates.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct MessageStats {
    /// Totals, in [`NAMES`] order.
    pub counts: [u64; NAMES.len()],
    /// Per-second rates over the last sample window.
    pub rates: [f64; NAMES.len()],
}

impl Stats {
    /// Adds `n` to a counter.
    pub fn add(&mut self, c: Counter, n: u64) {
        self.counts[c as usize] += n;
    }

    /// Totals and rates, taking a new sample when the window has passed.
    pub fn snapshot(&mut self) -> MessageStats {
        MessageStats {
            counts: self.counts,
            rates: self.sampler.sample(&self.counts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_the_window() {
        let mut s = Stats::default();
        s.add(Counter::Publish, 50);
        s.sampler.sampled_at -= std::time::Duration::from_secs(10);
        let snap = s.snapshot();
        assert_eq!(snap.counts[Counter::Publish as usize], 50);
        let rate = snap.rates[Counter::Publish as usize];
        assert!((4.9..=5.0).contains(&rate), "{rate}");
        // Within the next window the rate stays what it was.
        s.add(Counter::Publish, 1000);
        assert_eq!(s.snapshot().rates[Counter::Publish as usize], rate);
    }
}
