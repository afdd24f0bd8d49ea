//! `/api/consumers[/{vhost}]`: every consumer, asked of each queue's task, with its channel's
//! details from the connection registry, in RabbitMQ's JSON.

use super::{ApiError, AppState, Authenticated};
use crate::queue::consumer::REMOTE_CONNECTION;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

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
                let channel_details = match &conn {
                    Some(info) => json!({
                        "name": format!("{} ({})", info.name(), c.channel),
                        "number": c.channel,
                        "connection_name": info.name(),
                        "peer_host": info.peer.ip().to_string(),
                        "peer_port": info.peer.port(),
                        "user": info.user,
                        "node": super::node_name(b),
                    }),
                    None => json!({"number": c.channel}),
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
                    "active": true,
                    "activity_status": "up",
                    "arguments": {},
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
