//! Counters into rates, and the node's periodic timers. Counters are bumped on the hot path
//! without locks; every `collect_statistics_interval` (five seconds, as RabbitMQ's collector)
//! the broker's stats tick turns the counters of every channel, queue and the node into rates
//! over the interval with a [`Sampler`]; only that tick (and API readers) look at them. The
//! same timer loop runs the alarm checks.

use std::sync::Weak;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Turns growing counters into per-second rates over the time between two samples; the
/// rates of the last sample are kept until the next.
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
    /// The rates of the last sample.
    pub fn rates(&self) -> [f64; N] {
        self.rates
    }

    /// Takes a sample: the rates since the previous one.
    pub fn sample(&mut self, counts: &[u64; N]) -> [f64; N] {
        let secs = self.sampled_at.elapsed().as_secs_f64();
        if secs > 0.0 {
            for ((rate, now), then) in self.rates.iter_mut().zip(counts).zip(&self.sampled) {
                *rate = now.saturating_sub(*then) as f64 / secs;
            }
            self.sampled = *counts;
            self.sampled_at = Instant::now();
        }
        self.rates
    }
}

/// Calls `work` on `target` every `interval` until shutdown or until the target is gone (the
/// node's periodic tasks: the stats tick and the alarm checks).
pub async fn periodic<T>(
    target: Weak<T>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
    work: impl Fn(&T),
) {
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tick.tick() => {}
        }
        let Some(t) = target.upgrade() else { return };
        work(&t);
    }
}
