//! Prometheus metrics in the text format and with the names of RabbitMQ's `rabbitmq_prometheus`
//! plugin, served on `metrics_listen` (and over TLS on `metrics_https_listen`) without
//! authentication, as the plugin serves them: `/metrics` aggregates over all objects,
//! `/metrics/per-object` labels each queue and channel, `/metrics/detailed` serves the
//! `rabbitmq_detailed_*` families asked for (`family=`, optionally `vhost=`). Counters come
//! from the channel records (single-writer cells bumped by their connection task, sampled
//! here) plus the totals of closed channels, so `*_total` never goes backwards.

mod detailed;
mod raft;

use crate::broker::Broker;
use crate::channels::{ChannelInfo, Counter};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The routes of the metrics listener.
pub fn router(broker: Arc<Broker>) -> Router {
    STARTED.get_or_init(std::time::Instant::now);
    Router::new()
        .route("/metrics", get(aggregated))
        .route("/metrics/per-object", get(per_object))
        .route("/metrics/detailed", get(detailed::detailed))
        .with_state(broker)
}

/// One queue's gauges.
pub(crate) struct QueueGauges {
    vhost: String,
    name: String,
    ready: u64,
    unacked: u64,
    consumers: u64,
    ready_bytes: u64,
}

pub(crate) async fn queue_gauges(b: &Broker) -> Vec<QueueGauges> {
    let queues: Vec<_> = b.vhosts().iter().flat_map(|v| v.queues()).collect();
    let infos = crate::queue::QueueShared::info_many(&queues).await;
    let mut out = Vec::with_capacity(queues.len());
    for (q, i) in queues.iter().zip(infos) {
        out.push(QueueGauges {
            vhost: q.vhost.clone(),
            name: q.name.clone(),
            ready: u64::from(i.messages_ready),
            unacked: u64::from(i.messages_unacknowledged),
            consumers: u64::from(i.consumers),
            ready_bytes: i.message_bytes_ready,
        });
    }
    out
}

/// The queue families: (name, help, value).
pub(crate) type Family = (&'static str, &'static str, fn(&QueueGauges) -> u64);

pub(crate) const QUEUE_FAMILIES: [Family; 4] = [
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

pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "# HELP {name} {help}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

/// One sample of a queue's series: `name{vhost="..",queue=".."} value`.
pub(crate) fn queue_sample(
    out: &mut String,
    name: &str,
    vhost: &str,
    queue: &str,
    value: impl std::fmt::Display,
) {
    let _ = writeln!(
        out,
        "{name}{{vhost=\"{}\",queue=\"{}\"}} {value}",
        label(vhost),
        label(queue)
    );
}

/// Escapes a label value (backslash, quote, newline).
pub(crate) fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// When the metrics router was made (the node's start, for `rabbitmq_erlang_uptime_seconds`).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Build and identity info, untyped as RabbitMQ's: `endpoint` is the `rabbitmq_endpoint` label
/// (`aggregated`, `per-object`, `detailed`) dashboards select a scrape by.
pub(crate) fn identity(b: &Broker, out: &mut String, endpoint: &str) {
    family(
        out,
        "rabbitmq_build_info",
        "untyped",
        "RabbitMQ & Erlang/OTP version info",
    );
    let _ = writeln!(
        out,
        "rabbitmq_build_info{{rabbitmq_version=\"{}\",erlang_version=\"none\",product_name=\"Warren\",product_version=\"{}\"}} 1",
        crate::RABBITMQ_VERSION,
        env!("CARGO_PKG_VERSION")
    );
    family(
        out,
        "rabbitmq_identity_info",
        "untyped",
        "RabbitMQ node & cluster identity info",
    );
    let _ = writeln!(
        out,
        "rabbitmq_identity_info{{rabbitmq_node=\"{}\",rabbitmq_cluster=\"{}\",rabbitmq_cluster_permanent_id=\"{}\",rabbitmq_endpoint=\"{endpoint}\"}} 1",
        label(&crate::http::node_name(b)),
        label(&b.cluster_name()),
        label(&b.cluster_id())
    );
}

/// Node gauges every endpoint but `detailed` serves.
fn node_families(b: &Broker, out: &mut String, queues: &[QueueGauges]) {
    family(
        out,
        "rabbitmq_erlang_uptime_seconds",
        "gauge",
        "Node uptime",
    );
    let up = STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64());
    let _ = writeln!(out, "rabbitmq_erlang_uptime_seconds {up:.3}");
    gauge(
        out,
        "rabbitmq_connections",
        "Connections currently open",
        b.connections.len() as u64,
    );
    gauge(
        out,
        "rabbitmq_channels",
        "Channels currently open",
        b.connections.channels().len() as u64,
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
    let alarms = b.alarms.state();
    gauge(
        out,
        "rabbitmq_alarms_memory_used_watermark",
        "is set to 1 when the memory alarm is in effect",
        u64::from(alarms.memory),
    );
    gauge(
        out,
        "rabbitmq_alarms_free_disk_space_watermark",
        "is set to 1 when the free disk space alarm is in effect",
        u64::from(alarms.disk),
    );
    gauge(
        out,
        "rabbitmq_resident_memory_limit_bytes",
        "Memory high watermark in bytes",
        b.alarms.memory_limit(),
    );
    gauge(
        out,
        "rabbitmq_disk_space_available_limit_bytes",
        "Free disk space low watermark in bytes",
        b.alarms.disk_limit(),
    );
    if let Some(free) = crate::alarms::disk_free(&b.config.data_dir) {
        gauge(
            out,
            "rabbitmq_disk_space_available_bytes",
            "Disk space available in bytes",
            free,
        );
    }
    if let Some(rss) = crate::alarms::resident_memory() {
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

/// Channel counters: (metric name, help, index in [`crate::channels::NAMES`]).
pub(crate) const CHANNEL_COUNTERS: [(&str, &str, Counter); 11] = [
    ("channel_messages_published_total", "Total number of messages published into an exchange on a channel", Counter::Publish),
    ("channel_messages_confirmed_total", "Total number of messages published into an exchange and confirmed on the channel", Counter::Confirm),
    ("channel_messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", Counter::ReturnUnroutable),
    ("channel_messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", Counter::DropUnroutable),
    ("channel_messages_delivered_ack_total", "Total number of messages delivered to consumers in manual acknowledgement mode", Counter::Deliver),
    ("channel_messages_delivered_total", "Total number of messages delivered to consumers in automatic acknowledgement mode", Counter::DeliverNoAck),
    ("channel_get_ack_total", "Total number of messages fetched with basic.get in manual acknowledgement mode", Counter::Get),
    ("channel_get_total", "Total number of messages fetched with basic.get in automatic acknowledgement mode", Counter::GetNoAck),
    ("channel_get_empty_total", "Total number of times basic.get operations fetched no message", Counter::GetEmpty),
    ("channel_messages_acked_total", "Total number of messages acknowledged by consumers", Counter::Ack),
    ("channel_messages_redelivered_total", "Total number of messages redelivered to consumers", Counter::Redeliver),
];

/// A channel gauge: metric name, help, reader.
pub(crate) type ChannelGauge = (&'static str, &'static str, fn(&ChannelInfo) -> u64);

/// Channel gauges.
pub(crate) const CHANNEL_GAUGES: [ChannelGauge; 4] = [
    ("channel_consumers", "Consumers on a channel", |c| {
        u64::from(c.consumers.load(Relaxed))
    }),
    (
        "channel_messages_unacked",
        "Delivered but not yet acknowledged messages",
        |c| u64::from(c.unacked.load(Relaxed)),
    ),
    (
        "channel_messages_unconfirmed",
        "Published but not yet confirmed messages",
        |c| u64::from(c.unconfirmed.load(Relaxed)),
    ),
    (
        "channel_prefetch",
        "Total limit of unacknowledged messages for all consumers on a channel",
        |c| u64::from(c.global_prefetch.load(Relaxed)),
    ),
];

/// Churn counters: connections, channels and queues opened/declared and closed/deleted.
pub(crate) fn churn(b: &Broker) -> [(&'static str, &'static str, u64); 7] {
    let vhosts = b.vhosts();
    let queues = |i: usize| -> u64 { vhosts.iter().map(|v| v.queue_churn[i].load(Relaxed)).sum() };
    let c = &b.connections;
    [
        (
            "connections_opened_total",
            "Total number of connections opened",
            c.opened_total.load(Relaxed),
        ),
        (
            "connections_closed_total",
            "Total number of connections closed or terminated",
            c.closed_total.load(Relaxed),
        ),
        (
            "channels_opened_total",
            "Total number of channels opened",
            c.channel_totals.opened.load(Relaxed),
        ),
        (
            "channels_closed_total",
            "Total number of channels closed",
            c.channel_totals.closed_channels.load(Relaxed),
        ),
        (
            "queues_declared_total",
            "Total number of queues declared",
            queues(0),
        ),
        (
            "queues_created_total",
            "Total number of queues created",
            queues(1),
        ),
        (
            "queues_deleted_total",
            "Total number of queues deleted",
            queues(2),
        ),
    ]
}

/// Writes one counter family with a single sample.
fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    family(out, name, "counter", help);
    let _ = writeln!(out, "{name} {value}");
}

/// The node-wide counters: channel totals (closed and open channels), churn, and RabbitMQ's
/// `rabbitmq_global_*` counters derived from them.
fn node_counters(b: &Broker, out: &mut String) {
    let channels = b.connections.channels();
    let (counts, _) = b
        .connections
        .channel_totals
        .with_open(channels.iter().map(|(_, ch)| ch));
    let sizes = b
        .connections
        .channel_totals
        .sizes_with_open(channels.iter().map(|(_, ch)| ch));
    for (name, help, c) in CHANNEL_COUNTERS {
        counter(out, &format!("rabbitmq_{name}"), help, counts[c as usize]);
    }
    for (name, help, value) in churn(b) {
        counter(out, &format!("rabbitmq_{name}"), help, value);
    }
    let n = |c: Counter| counts[c as usize];
    let unroutable = n(Counter::DropUnroutable) + n(Counter::ReturnUnroutable);
    let delivered =
        n(Counter::Deliver) + n(Counter::DeliverNoAck) + n(Counter::Get) + n(Counter::GetNoAck);
    for (name, help, value) in [
        ("messages_received_total", "Total number of messages received from publishers", n(Counter::Publish)),
        ("messages_routed_total", "Total number of messages routed to queues or streams", n(Counter::Publish).saturating_sub(unroutable)),
        ("messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", n(Counter::DropUnroutable)),
        ("messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", n(Counter::ReturnUnroutable)),
        ("messages_confirmed_total", "Total number of messages confirmed to publishers", n(Counter::Confirm)),
        ("messages_delivered_total", "Total number of messages delivered to consumers", delivered),
        ("messages_delivered_consume_manual_ack_total", "Total number of messages delivered to consumers using basic.consume with manual acknowledgment", n(Counter::Deliver)),
        ("messages_delivered_consume_auto_ack_total", "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment", n(Counter::DeliverNoAck)),
        ("messages_delivered_get_manual_ack_total", "Total number of messages delivered to consumers using basic.get with manual acknowledgment", n(Counter::Get)),
        ("messages_delivered_get_auto_ack_total", "Total number of messages delivered to consumers using basic.get with automatic acknowledgment", n(Counter::GetNoAck)),
        ("messages_get_empty_total", "Total number of times basic.get operations fetched no message", n(Counter::GetEmpty)),
        ("messages_redelivered_total", "Total number of messages redelivered to consumers", n(Counter::Redeliver)),
        ("messages_acknowledged_total", "Total number of messages acknowledged by consumers", n(Counter::Ack)),
        ("messages_received_confirm_total", "Total number of messages received from publishers expecting confirmations", sizes[crate::channels::RECEIVED_CONFIRM]),
    ] {
        let metric = format!("rabbitmq_global_{name}");
        family(out, &metric, "counter", help);
        let _ = writeln!(out, "{metric}{{protocol=\"amqp091\"}} {value}");
        let stream = stream_counter(&b.connections.stream, name);
        let _ = writeln!(out, "{metric}{{protocol=\"stream\"}} {stream}");
    }
    let publishers = channels
        .iter()
        .filter(|(_, ch)| ch.counts()[Counter::Publish as usize] > 0)
        .count();
    let consumers: u64 = channels
        .iter()
        .map(|(_, ch)| u64::from(ch.consumers.load(Relaxed)))
        .sum();
    let (stream_publishers, stream_consumers) = stream_clients(b);
    for (name, help, value, stream) in [
        (
            "publishers",
            "Current number of publishers",
            publishers as u64,
            stream_publishers,
        ),
        (
            "consumers",
            "Current number of consumers",
            consumers,
            stream_consumers,
        ),
    ] {
        let metric = format!("rabbitmq_global_{name}");
        family(out, &metric, "gauge", help);
        let _ = writeln!(out, "{metric}{{protocol=\"amqp091\"}} {value}");
        let _ = writeln!(out, "{metric}{{protocol=\"stream\"}} {stream}");
    }
    size_histogram(out, &sizes);
    stream_families(b, out);
}

/// The stream protocol's sample of a `rabbitmq_global_*` counter family.
fn stream_counter(c: &crate::stream_stats::StreamCounters, name: &str) -> u64 {
    match name {
        "messages_received_total" | "messages_received_confirm_total" => c.received.load(Relaxed),
        "messages_confirmed_total" => c.confirmed.load(Relaxed),
        "messages_delivered_total" => c.delivered.load(Relaxed),
        _ => 0,
    }
}

/// How many publishers and consumers the stream connections have.
fn stream_clients(b: &Broker) -> (usize, usize) {
    let streams: Vec<_> = b
        .connections
        .list()
        .into_iter()
        .filter(|c| c.protocol == crate::connections::Protocol::Stream)
        .collect();
    let publishers = streams.iter().map(|c| c.stream.publishers().len()).sum();
    let consumers = streams.iter().map(|c| c.stream.consumers().len()).sum();
    (publishers, consumers)
}

/// The stream protocol's `rabbitmq_global_stream_error_*_total` counters.
fn stream_families(b: &Broker, out: &mut String) {
    let counters = &b.connections.stream;
    for (code, name, help) in crate::stream_stats::ERROR_FAMILIES {
        let metric = format!("rabbitmq_global_stream_error_{name}_total");
        family(out, &metric, "counter", help);
        let value = counters.errors(code);
        let _ = writeln!(out, "{metric}{{protocol=\"stream\"}} {value}");
    }
}

/// `le` of each bucket as Prometheus itself normalises it (`100.0`, `1e+06`), so dashboard
/// queries match on Prometheus 2 and 3 alike.
const SIZE_LE: [&str; crate::channels::SIZE_BUCKETS.len() + 1] = [
    "100.0", "1000.0", "10000.0", "100000.0", "1e+06", "1e+07", "5e+07", "1e+08", "+Inf",
];

/// RabbitMQ's `rabbitmq_message_size_bytes` histogram of published bodies.
fn size_histogram(out: &mut String, sizes: &crate::channels::Sizes) {
    let name = "rabbitmq_message_size_bytes";
    family(
        out,
        name,
        "histogram",
        "Size of messages received from publishers",
    );
    let mut cumulative = 0;
    for (le, n) in SIZE_LE.iter().zip(sizes) {
        cumulative += n;
        let _ = writeln!(
            out,
            "{name}_bucket{{protocol=\"amqp091\",le=\"{le}\"}} {cumulative}"
        );
    }
    let sum = sizes[crate::channels::SIZE_SUM];
    let _ = writeln!(out, "{name}_sum{{protocol=\"amqp091\"}} {sum}");
    let _ = writeln!(out, "{name}_count{{protocol=\"amqp091\"}} {cumulative}");
}

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn aggregated(State(b): State<Arc<Broker>>) -> impl IntoResponse {
    let queues = queue_gauges(&b).await;
    let mut out = String::new();
    identity(&b, &mut out, "aggregated");
    node_families(&b, &mut out, &queues);
    node_counters(&b, &mut out);
    for (name, help, value) in QUEUE_FAMILIES {
        gauge(&mut out, name, help, queues.iter().map(value).sum());
    }
    raft::aggregated(&b, &mut out);
    let channels = b.connections.channels();
    for (name, help, read) in CHANNEL_GAUGES {
        let total = channels.iter().map(|(_, ch)| read(ch)).sum();
        gauge(&mut out, &format!("rabbitmq_{name}"), help, total);
    }
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], out)
}

async fn per_object(State(b): State<Arc<Broker>>) -> impl IntoResponse {
    let queues = queue_gauges(&b).await;
    let mut out = String::new();
    identity(&b, &mut out, "per-object");
    node_families(&b, &mut out, &queues);
    node_counters(&b, &mut out);
    channel_series(&b, &mut out, "rabbitmq_", |_| true);
    let consumers: Family = ("rabbitmq_queue_consumers", "Consumers on a queue", |q| {
        q.consumers
    });
    for (name, help, value) in QUEUE_FAMILIES.into_iter().chain([consumers]) {
        family(&mut out, name, "gauge", help);
        for q in &queues {
            queue_sample(&mut out, name, &q.vhost, &q.name, value(q));
        }
    }
    raft::per_queue(&b, &mut out);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], out)
}

/// Every channel's gauges and counters, labelled `channel` (RabbitMQ's channel name) and
/// `vhost`, for the connections `keep` accepts.
pub(crate) fn channel_series(
    b: &Broker,
    out: &mut String,
    prefix: &str,
    keep: impl Fn(&crate::connections::ConnectionInfo) -> bool,
) {
    let mut channels = b.connections.channels();
    channels.retain(|(c, _)| keep(c));
    channels.sort_by_key(|(c, ch)| (c.id, ch.number));
    let labels: Vec<String> = channels
        .iter()
        .map(|(c, ch)| {
            format!(
                "channel=\"{}\",vhost=\"{}\"",
                label(&c.channel_name(ch.number)),
                label(&c.vhost)
            )
        })
        .collect();
    for (name, help, read) in CHANNEL_GAUGES {
        family(out, &format!("{prefix}{name}"), "gauge", help);
        for ((_, ch), l) in channels.iter().zip(&labels) {
            let _ = writeln!(out, "{prefix}{name}{{{l}}} {}", read(ch));
        }
    }
    for (name, help, c) in CHANNEL_COUNTERS {
        family(out, &format!("{prefix}{name}"), "counter", help);
        for ((_, ch), l) in channels.iter().zip(&labels) {
            let _ = writeln!(out, "{prefix}{name}{{{l}}} {}", ch.counts()[c as usize]);
        }
    }
}
