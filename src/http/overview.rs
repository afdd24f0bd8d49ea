//! `/api/overview` and `/api/whoami`.

use super::{AppState, Authenticated};
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

/// The RabbitMQ version whose behaviour Warren follows (tools gate features on it).
pub(crate) use crate::RABBITMQ_VERSION;

pub(crate) async fn overview(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let (mut queues, mut exchanges, mut ready, mut unacked, mut consumers) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut all = Vec::new();
    for v in b.vhosts() {
        exchanges += v.exchanges().len() as u64;
        all.extend(v.queues());
    }
    for i in crate::queue::QueueShared::info_many(&all).await {
        queues += 1;
        ready += u64::from(i.messages_ready);
        unacked += u64::from(i.messages_unacknowledged);
        consumers += u64::from(i.consumers);
    }
    let totals = super::cluster_views::totals_everywhere(&b, local_totals(&b)).await;
    let node = super::node_name(&b);
    Json(json!({
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "rabbitmq_version": RABBITMQ_VERSION,
        "management_version": RABBITMQ_VERSION,
        "cluster_name": b.cluster_name(),
        "node": node,
        // Warren's: how often rates are sampled (ms), which the web UI refreshes on.
        "collect_statistics_interval": b.config.collect_statistics_interval,
        "exchange_types": [
            {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
            {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
            {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
            {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
            {"name": "x-consistent-hash", "description": "Consistent Hashing Exchange", "enabled": true},
            {"name": "x-delayed-message", "description": "Delayed Message Exchange", "enabled": true},
            {"name": "x-federation-upstream", "description": "Federation upstream helper exchange", "internal_purpose": "federation", "enabled": true}
        ],
        "listeners": listeners(&b, &node),
        "object_totals": {"queues": queues, "exchanges": exchanges, "consumers": consumers, "connections": totals.get("connections"), "channels": totals.get("channels")},
        "queue_totals": {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked},
        "message_stats": totals.get("message_stats")
    }))
}

/// This node's connection and channel counts and its message totals and rates, which
/// `/api/overview` sums over the cluster's nodes (queues, counted on every node, are not).
pub(crate) fn local_totals(b: &AppState) -> Value {
    let channels = b.connections.channels();
    let (counts, rates) = b
        .connections
        .channel_totals
        .with_open(channels.iter().map(|(_, ch)| ch));
    json!({
        "connections": b.connections.len(),
        "channels": channels.len(),
        "message_stats": super::channels::message_stats(&counts, &rates),
    })
}

pub(crate) async fn whoami(Authenticated(user): Authenticated) -> Json<Value> {
    Json(json!({"name": user.name, "tags": user.tags}))
}

/// The bound listeners, under RabbitMQ's protocol names.
fn listeners(b: &AppState, node: &str) -> Vec<Value> {
    b.listeners()
        .iter()
        .map(|(protocol, a)| {
            json!({"node": node, "protocol": protocol, "ip_address": a.ip().to_string(), "port": a.port()})
        })
        .collect()
}
