//! `/api/consumers[/{vhost}]`: every consumer, asked of each queue's task, with its channel's
//! details from the connection registry, in RabbitMQ's JSON. A stream's stream-protocol
//! subscriptions are among them, as RabbitMQ lists them (`stream.subid-<id>`, no channel).

use super::{ApiError, AppState, Authenticated};
use crate::connections::Protocol;
use crate::queue::consumer::REMOTE_CONNECTION;
use crate::queue::stream::STREAM_TAG_PREFIX;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::Ordering::Relaxed;

/// The consumers of every node (in `vhost`, when given).
async fn everywhere(b: &AppState, vhost: Option<&str>) -> Vec<Value> {
    let mine = consumers_of(b, None).await;
    super::cluster_views::listed_everywhere(b, super::cluster_views::CONSUMERS, mine)
        .await
        .into_iter()
        .filter(|c| vhost.is_none_or(|v| c["queue"]["vhost"].as_str() == Some(v)))
        .collect()
}

/// The consumers whose connections are on this node (in `vhost`, when given), of every
/// queue they consume from wherever it lives.
pub(crate) async fn consumers_of(b: &AppState, vhost: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    let mut vhosts = b.vhosts();
    vhosts.retain(|v| vhost.is_none_or(|n| n == v.name));
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    for v in vhosts {
        let mut queues = v.queues();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        for q in queues {
            let Ok(list) = q.consumers().await else {
                continue;
            };
            for c in list
                .into_iter()
                .filter(|c| c.connection != REMOTE_CONNECTION)
            {
                let conn = b.connections.get(c.connection);
                // A stream-protocol subscription: no channel (RabbitMQ names it ""), its
                // activity and properties from the connection's record.
                let stream = conn.as_ref().and_then(|info| {
                    let id = c.tag.strip_prefix(STREAM_TAG_PREFIX)?.parse::<u8>().ok()?;
                    (info.protocol == Protocol::Stream)
                        .then(|| info.stream.consumers().into_iter().find(|s| s.id == id))
                        .flatten()
                });
                let channel_details = match &conn {
                    Some(info) => json!({
                        "name": match stream {
                            Some(_) => String::new(),
                            None => format!("{} ({})", info.name(), c.channel),
                        },
                        "number": c.channel,
                        "connection_name": info.name(),
                        "peer_host": info.peer.ip().to_string(),
                        "peer_port": info.peer.port(),
                        "user": info.user,
                        "node": super::node_name(b),
                    }),
                    None => json!({"number": c.channel}),
                };
                let (active, status, arguments) = match &stream {
                    Some(s) => {
                        let properties: serde_json::Map<String, Value> = s
                            .properties
                            .iter()
                            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                            .collect();
                        (
                            s.active.load(Relaxed),
                            s.activity_status(),
                            Value::Object(properties),
                        )
                    }
                    None => (true, "up", json!({})),
                };
                out.push(json!({
                    "consumer_tag": c.tag.as_ref(),
                    "queue": {"name": q.name, "vhost": v.name},
                    "channel_details": channel_details,
                    "ack_required": c.ack_required,
                    "exclusive": c.exclusive,
                    "prefetch_count": c.prefetch,
                    "priority": c.priority,
                    "consumer_timeout": c.timeout,
                    "active": active,
                    "activity_status": status,
                    "arguments": arguments,
                }));
            }
        }
    }
    out
}

pub(crate) async fn list(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    Json(Value::Array(everywhere(&b, None).await))
}

pub(crate) async fn of_vhost(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(Json(Value::Array(everywhere(&b, Some(&vhost)).await)))
}
