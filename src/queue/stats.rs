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

/// Counters and the last sample.
#[derive(Debug)]
pub struct Stats {
    counts: [u64; NAMES.len()],
    sampled: [u64; NAMES.len()],
    sampled_at: Instant,
    rates: [f64; NAMES.len()],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            counts: [0; NAMES.len()],
            sampled: [0; NAMES.len()],
            sampled_at: Instant::now(),
            rates: [0.0; NAMES.len()],
        }
    }
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
        let elapsed = self.sampled_at.elapsed();
        if elapsed.as_millis() >= WINDOW_MS {
            let secs = elapsed.as_secs_f64();
            for i in 0..NAMES.len() {
                self.rates[i] = (self.counts[i] - self.sampled[i]) as f64 / secs;
            }
            self.sampled = self.counts;
            self.sampled_at = Instant::now();
        }
        MessageStats {
            counts: self.counts,
            rates: self.rates,
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
        s.sampled_at -= std::time::Duration::from_secs(10);
        let snap = s.snapshot();
        assert_eq!(snap.counts[Counter::Publish as usize], 50);
        let rate = snap.rates[Counter::Publish as usize];
        assert!((4.9..=5.0).contains(&rate), "{rate}");
        // Within the next window the rate stays what it was.
        s.add(Counter::Publish, 1000);
        assert_eq!(s.snapshot().rates[Counter::Publish as usize], rate);
    }
}
