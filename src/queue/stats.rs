//! Message counters of a queue, for the management API's `message_stats`. The queue task owns
//! them (plain integers, no atomics or locks on the hot path); the node's stats timer asks it
//! every five seconds, as RabbitMQ's collector samples, to turn them
//! into rates, which readers then see without sampling themselves.

use crate::sampler::Sampler;
use tokio::time::Instant;

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

/// How much of the time a queue's consumers could take its messages (RabbitMQ's consumer
/// capacity): the queue marks itself blocked while messages wait and every consumer is out of
/// credit; each sample turns the blocked share of the interval into a fraction.
#[derive(Debug)]
pub struct Capacity {
    blocked_since: Option<Instant>,
    blocked: std::time::Duration,
    sampled_blocked: std::time::Duration,
    sampled_at: Instant,
    last: f64,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            blocked_since: None,
            blocked: Default::default(),
            sampled_blocked: Default::default(),
            sampled_at: Instant::now(),
            last: 1.0,
        }
    }
}

impl Capacity {
    /// Notes whether messages are waiting for consumers that cannot take them (reads the
    /// clock only when that changes).
    pub fn set_blocked(&mut self, blocked: bool) {
        match (blocked, self.blocked_since) {
            (true, None) => self.blocked_since = Some(Instant::now()),
            (false, Some(t)) => {
                self.blocked += t.elapsed();
                self.blocked_since = None;
            }
            _ => {}
        }
    }

    /// Takes a sample: the share of the interval the consumers were not blocked.
    pub fn sample(&mut self) {
        let now = Instant::now();
        let total = self.blocked + self.blocked_since.map_or(Default::default(), |t| now - t);
        let window = (now - self.sampled_at).as_secs_f64();
        if window > 0.0 {
            let blocked = (total - self.sampled_blocked).as_secs_f64();
            self.last = (1.0 - blocked / window).clamp(0.0, 1.0);
        }
        self.sampled_blocked = total;
        self.sampled_at = now;
    }

    /// The last sample (1.0 before the first).
    pub fn value(&self) -> f64 {
        self.last
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

    /// Takes a sample (the timer's tick).
    pub fn sample(&mut self) {
        self.sampler.sample(&self.counts);
    }

    /// Totals and the rates of the last sample.
    pub fn snapshot(&self) -> MessageStats {
        MessageStats {
            counts: self.counts,
            rates: self.sampler.rates(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::advance;

    #[tokio::test(start_paused = true)]
    async fn capacity_is_the_unblocked_share_of_the_interval() {
        let mut c = Capacity::default();
        assert_eq!(c.value(), 1.0);
        advance(Duration::from_secs(6)).await;
        c.set_blocked(true);
        advance(Duration::from_secs(4)).await;
        c.set_blocked(false);
        c.sample();
        assert!((c.value() - 0.6).abs() < 1e-9, "{}", c.value());
        // Blocked for a whole interval, still blocked at the sample.
        c.set_blocked(true);
        advance(Duration::from_secs(10)).await;
        c.sample();
        assert_eq!(c.value(), 0.0);
        // Unblocked again: the next interval is all capacity.
        c.set_blocked(false);
        advance(Duration::from_secs(5)).await;
        c.sample();
        assert_eq!(c.value(), 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn rates_come_from_the_time_between_samples() {
        let mut s = Stats::default();
        s.add(Counter::Publish, 50);
        advance(Duration::from_secs(10)).await;
        s.sample();
        let snap = s.snapshot();
        assert_eq!(snap.counts[Counter::Publish as usize], 50);
        assert_eq!(snap.rates[Counter::Publish as usize], 5.0);
        // Readers see the last sample's rates until the next sample.
        s.add(Counter::Publish, 1000);
        assert_eq!(s.snapshot().rates[Counter::Publish as usize], 5.0);
        assert_eq!(s.snapshot().counts[Counter::Publish as usize], 1050);
        advance(Duration::from_secs(10)).await;
        s.sample();
        assert_eq!(s.snapshot().rates[Counter::Publish as usize], 100.0);
    }
}
