//! The stats timer: every `collect_statistics_interval` (five seconds, as RabbitMQ's
//! collector) it turns the message counters of every channel, every queue and the node into
//! rates over the interval. Counters are bumped on the hot path without locks; only this tick
//! (and API readers) look at them.

use crate::broker::Broker;
use std::sync::Weak;
use std::time::Duration;
use tokio::sync::watch;

/// Calls `work` every `interval` until shutdown or until the broker is gone (the node's
/// periodic tasks: this timer and the alarm checks).
pub(crate) async fn periodic(
    broker: Weak<Broker>,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
    work: impl Fn(&Broker),
) {
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tick.tick() => {}
        }
        let Some(b) = broker.upgrade() else { return };
        work(&b);
    }
}

/// Runs the timer until shutdown or until the broker is gone.
pub async fn run(broker: Weak<Broker>, interval: Duration, shutdown: watch::Receiver<bool>) {
    periodic(broker, interval, shutdown, sample).await
}

/// One tick: every channel, the node totals and every queue.
fn sample(b: &Broker) {
    let channels = b.connections.channels();
    for (_, ch) in &channels {
        ch.sample();
    }
    b.connections
        .channel_totals
        .sample(channels.iter().map(|(_, ch)| ch));
    for v in b.vhosts() {
        for q in v.queues() {
            q.sample_stats();
        }
    }
}
