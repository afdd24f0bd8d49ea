//! The `rabbitmq_raft_*` families of `/metrics/per-object`: for each quorum queue member this
//! node runs, labelled `vhost` and `queue`, its term, snapshot, applied, commit and written
//! indexes and its last commit latency, under the names and helps of RabbitMQ 4.x
//! (`deps/rabbitmq_prometheus/metrics.md`); and the aggregated `/metrics`'
//! `rabbitmq_raft_max_commit_latency_seconds{ra_system="quorum_queues"}`, the highest of them
//! (RabbitMQ 4.2's; Warren keeps no segment files, so it has no `_max_num_segments`). openraft reports no separate commit index: a
//! member applies what is committed as it learns of it, so the applied index stands for it.

use super::{family, queue_sample};
use crate::broker::Broker;
use crate::replication::RaftSeries;
use std::fmt::Write;

/// A family: (name, type, help, value of a member).
type RaftFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&RaftSeries) -> f64,
);

const COMMIT_LATENCY_HELP: &str =
    "Approximate time taken from an entry being written to the log until it is committed";

const FAMILIES: [RaftFamily; 6] = [
    ("rabbitmq_raft_term", "counter", "Current term", |s| {
        s.report.term as f64
    }),
    (
        "rabbitmq_raft_snapshot_index",
        "counter",
        "Current snapshot index",
        |s| s.report.snapshot.unwrap_or(0) as f64,
    ),
    (
        "rabbitmq_raft_last_applied",
        "counter",
        "Last applied index. Can go backwards if a ra server is restarted",
        |s| s.report.applied.unwrap_or(0) as f64,
    ),
    (
        "rabbitmq_raft_commit_index",
        "counter",
        "Current commit index",
        |s| s.report.applied.unwrap_or(0) as f64,
    ),
    (
        "rabbitmq_raft_last_written_index",
        "counter",
        "Last fully written and fsynced index of the log",
        |s| s.report.last_index.unwrap_or(0) as f64,
    ),
    (
        "rabbitmq_raft_commit_latency_seconds",
        "gauge",
        COMMIT_LATENCY_HELP,
        |s| s.report.commit_latency.map_or(0.0, |d| d.as_secs_f64()),
    ),
];

/// Appends the families, one series per local member (nothing without quorum queues).
pub(super) fn per_queue(b: &Broker, out: &mut String) {
    let series = b.quorum_raft_series();
    if series.is_empty() {
        return;
    }
    for (name, kind, help, value) in FAMILIES {
        family(out, name, kind, help);
        for s in &series {
            queue_sample(out, name, &s.vhost, &s.name, value(s));
        }
    }
}

/// Appends the aggregated endpoint's maximum over the local members (nothing without
/// quorum queues).
pub(super) fn aggregated(b: &Broker, out: &mut String) {
    let series = b.quorum_raft_series();
    if series.is_empty() {
        return;
    }
    let name = "rabbitmq_raft_max_commit_latency_seconds";
    let max = series
        .iter()
        .filter_map(|s| s.report.commit_latency)
        .max()
        .unwrap_or_default();
    family(out, name, "gauge", COMMIT_LATENCY_HELP);
    let _ = writeln!(
        out,
        "{name}{{ra_system=\"quorum_queues\"}} {}",
        max.as_secs_f64()
    );
}
