//! Prometheus metrics in the text format and with the names of RabbitMQ's `rabbitmq_prometheus`
//! plugin, served on `metrics_listen` (and over TLS on `metrics_https_listen`) without
//! authentication, as the plugin serves them: `/metrics` aggregates over all objects,
//! `/metrics/per-object` labels each queue with its vhost and name. This first cut covers the
//! gauges the broker can read without hot-path counters (connections, queues, consumers,
//! queue depths, process memory and file descriptors).

use crate::broker::Broker;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::fmt::Write;
use std::sync::Arc;

/// The routes of the metrics listener.
pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .with_state(broker)
}

/// One queue's gauges.
struct QueueGauges {
    vhost: String,
    name: String,
    ready: u64,
    unacked: u64,
    consumers: u64,
    ready_bytes: u64,
}

async fn queue_gauges(b: &Broker) -> Vec<QueueGauges> {
    let mut out = Vec::new();
    for v in b.vhosts() {
        for q in v.queues() {
            if let Ok(i) = q.info().await {
                out.push(QueueGauges {
                    vhost: v.name.clone(),
                    name: q.name.clone(),
                    ready: u64::from(i.messages_ready),
                    unacked: u64::from(i.messages_unacknowledged),
                    consumers: u64::from(i.consumers),
                    ready_bytes: i.message_bytes_ready,
                });
            }
        }
    }
    out
}

/// The queue families: (name, help, value).
type Family = (&'static str, &'static str, fn(&QueueGauges) -> u64);

const QUEUE_FAMILIES: [Family; 4] = [
    (
        "rabbitmq_queue_messages_ready",
        "Messages ready to be delivered to consumers",
        |q| q.ready,
    ),
    (
        "rabbitmq_queue_messages_unacked",
        "Messages delivered to consumers but not yet acknowledged",
        |q| q.unacked,
    ),
    (
        "rabbitmq_queue_messages",
        "Sum of ready and unacknowledged messages - total queue depth",
        |q| q.ready + q.unacked,
    ),
    (
        "rabbitmq_queue_messages_ready_bytes",
        "Size in bytes of ready messages",
        |q| q.ready_bytes,
    ),
];

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "# HELP {name} {help}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

/// Escapes a label value (backslash, quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Families every endpoint serves: build and identity info, node gauges.
fn node_families(b: &Broker, out: &mut String, queues: &[QueueGauges]) {
    family(
        out,
        "rabbitmq_build_info",
        "gauge",
        "RabbitMQ & Erlang/OTP version info",
    );
    let _ = writeln!(
        out,
        "rabbitmq_build_info{{rabbitmq_version=\"{}\",product_name=\"Warren\",product_version=\"{}\"}} 1",
        crate::http::RABBITMQ_VERSION,
        env!("CARGO_PKG_VERSION")
    );
    family(
        out,
        "rabbitmq_identity_info",
        "gauge",
        "RabbitMQ node & cluster identity info",
    );
    let _ = writeln!(
        out,
        "rabbitmq_identity_info{{rabbitmq_node=\"{}\",rabbitmq_cluster=\"{}\"}} 1",
        label(&crate::http::node_name(b)),
        label(&b.config.cluster_name)
    );
    gauge(
        out,
        "rabbitmq_connections",
        "Connections currently open",
        b.connections.len() as u64,
    );
    gauge(
        out,
        "rabbitmq_queues",
        "Queues available",
        queues.len() as u64,
    );
    gauge(
        out,
        "rabbitmq_consumers",
        "Consumers currently connected",
        queues.iter().map(|q| q.consumers).sum(),
    );
    if let Some(rss) = resident_memory() {
        gauge(
            out,
            "rabbitmq_process_resident_memory_bytes",
            "Memory used in bytes",
            rss,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            out,
            "rabbitmq_process_open_fds",
            "Open file descriptors",
            fds.count() as u64,
        );
    }
    if let Ok((soft, _)) = rlimit::getrlimit(rlimit::Resource::NOFILE) {
        gauge(
            out,
            "rabbitmq_process_max_fds",
            "Open file descriptors limit",
            soft,
        );
    }
}

/// Resident set size from /proc (Linux), in bytes.
fn resident_memory() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn aggregated(State(b): State<Arc<Broker>>) -> impl IntoResponse {
    let queues = queue_gauges(&b).await;
    let mut out = String::new();
    node_families(&b, &mut out, &queues);
    for (name, help, value) in QUEUE_FAMILIES {
        gauge(&mut out, name, help, queues.iter().map(value).sum());
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], out)
}

async fn per_object(State(b): State<Arc<Broker>>) -> impl IntoResponse {
    let queues = queue_gauges(&b).await;
    let mut out = String::new();
    node_families(&b, &mut out, &queues);
    let consumers: Family = ("rabbitmq_queue_consumers", "Consumers on a queue", |q| {
        q.consumers
    });
    for (name, help, value) in QUEUE_FAMILIES.into_iter().chain([consumers]) {
        family(&mut out, name, "gauge", help);
        for q in &queues {
            let _ = writeln!(
                out,
                "{name}{{vhost=\"{}\",queue=\"{}\"}} {}",
                label(&q.vhost),
                label(&q.name),
                value(q)
            );
        }
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], out)
}
