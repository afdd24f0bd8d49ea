//! `/api/overview`, `/api/vhosts`, `/api/whoami` and `/api/users`.

use super::{AppState, Authenticated};
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

/// The RabbitMQ version whose behaviour Warren follows (tools gate features on it).
pub(crate) const RABBITMQ_VERSION: &str = "3.13.7";

pub(crate) async fn overview(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let (mut queues, mut exchanges, mut ready, mut unacked, mut consumers) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for v in b.vhosts() {
        exchanges += v.exchanges().len() as u64;
        for q in v.queues() {
            queues += 1;
            if let Ok(i) = q.info().await {
                ready += u64::from(i.messages_ready);
                unacked += u64::from(i.messages_unacknowledged);
                consumers += u64::from(i.consumers);
            }
        }
    }
    let node = format!("warren@{}", b.config.cluster_name);
    Json(json!({
        "product_name": "Warren",
        "product_version": env!("CARGO_PKG_VERSION"),
        "rabbitmq_version": RABBITMQ_VERSION,
        "management_version": RABBITMQ_VERSION,
        "cluster_name": b.config.cluster_name,
        "node": node,
        "exchange_types": [
            {"name": "direct", "description": "AMQP direct exchange, as per the AMQP specification", "enabled": true},
            {"name": "fanout", "description": "AMQP fanout exchange, as per the AMQP specification", "enabled": true},
            {"name": "headers", "description": "AMQP headers exchange, as per the AMQP specification", "enabled": true},
            {"name": "topic", "description": "AMQP topic exchange, as per the AMQP specification", "enabled": true},
            {"name": "x-delayed-message", "description": "Delayed Message Exchange", "enabled": true}
        ],
        "listeners": [
            {"node": node, "protocol": "amqp", "ip_address": b.config.amqp_listen.ip().to_string(), "port": b.config.amqp_listen.port()},
            {"node": node, "protocol": "http", "ip_address": b.config.http_listen.ip().to_string(), "port": b.config.http_listen.port()}
        ],
        "object_totals": {"queues": queues, "exchanges": exchanges, "consumers": consumers, "connections": 0, "channels": 0},
        "queue_totals": {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked},
        "message_stats": {}
    }))
}

pub(crate) async fn vhosts(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let mut names: Vec<String> = b.vhosts().iter().map(|v| v.name.clone()).collect();
    names.sort();
    Json(Value::Array(
        names
            .into_iter()
            .map(|name| json!({"name": name, "description": "", "tags": [], "tracing": false}))
            .collect(),
    ))
}

fn user_json(u: &crate::auth::User) -> Value {
    json!({
        "name": u.name,
        "password_hash": u.password_hash(),
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": u.tags,
        "limits": {},
    })
}

pub(crate) async fn whoami(Authenticated(user): Authenticated) -> Json<Value> {
    Json(json!({"name": user.name, "tags": user.tags}))
}

pub(crate) async fn users(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let mut users = b.users();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    Json(Value::Array(users.iter().map(user_json).collect()))
}
