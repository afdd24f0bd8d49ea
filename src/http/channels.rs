//! `/api/channels[/{name}]`, `/api/connections/{name}/channels` and
//! `/api/vhosts/{vhost}/channels`: the open channels from the connection registry, in
//! RabbitMQ's JSON, with their `message_stats`. Visibility as for connections; in a cluster
//! another node's channels are listed and shown from its view.

use super::connections::sees_all;
use super::{ApiError, AppState, Authenticated};
use crate::channels::{ChannelInfo, NAMES};
use crate::connections::ConnectionInfo;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// RabbitMQ's `message_stats` of a channel (or the node): totals with `*_details.rate`,
/// plus `deliver_get`.
pub(crate) fn message_stats(counts: &[u64; NAMES.len()], rates: &[f64; NAMES.len()]) -> Value {
    let mut m = Map::new();
    for (i, name) in NAMES.iter().enumerate() {
        m.insert((*name).into(), json!(counts[i]));
        m.insert(format!("{name}_details"), json!({"rate": rates[i]}));
    }
    // deliver_get: deliver, deliver_no_ack, get and get_no_ack (indices 4 to 7).
    m.insert(
        "deliver_get".into(),
        json!(counts[4..=7].iter().sum::<u64>()),
    );
    m.insert(
        "deliver_get_details".into(),
        json!({"rate": rates[4..=7].iter().sum::<f64>()}),
    );
    Value::Object(m)
}

fn channel_json(b: &AppState, c: &ConnectionInfo, ch: &ChannelInfo) -> Value {
    let (counts, rates) = ch.stats();
    json!({
        "name": c.channel_name(ch.number),
        "number": ch.number,
        "node": super::node_name(b),
        "user": c.user,
        "user_who_performed_action": c.user,
        "vhost": c.vhost,
        "connection_details": {
            "name": c.name(),
            "peer_host": c.peer.ip().to_string(),
            "peer_port": c.peer.port(),
        },
        "consumer_count": ch.consumers.load(Relaxed),
        "prefetch_count": ch.prefetch.load(Relaxed),
        "global_prefetch_count": ch.global_prefetch.load(Relaxed),
        "messages_unacknowledged": ch.unacked.load(Relaxed),
        "messages_unconfirmed": ch.unconfirmed.load(Relaxed),
        "messages_uncommitted": 0,
        "acks_uncommitted": 0,
        "confirm": ch.confirm.load(Relaxed),
        "transactional": ch.transactional.load(Relaxed),
        "state": "running",
        "message_stats": message_stats(&counts, &rates),
    })
}

/// The channels of this node (of connection `only`, when given), in RabbitMQ's JSON.
fn local(b: &AppState, only: Option<u64>) -> Vec<Value> {
    let mut list: Vec<(Arc<ConnectionInfo>, Arc<ChannelInfo>)> = b.connections.channels();
    list.retain(|(c, _)| only.is_none_or(|id| c.id == id));
    list.sort_by_key(|(c, ch)| (c.id, ch.number));
    list.iter().map(|(c, ch)| channel_json(b, c, ch)).collect()
}

/// Every channel of this node, in RabbitMQ's JSON.
pub(crate) fn all(b: &AppState) -> Vec<Value> {
    local(b, None)
}

/// The channels of every node `user` may see (in `vhost`, when given).
async fn everywhere(b: &AppState, user: &crate::auth::User, vhost: Option<&str>) -> Vec<Value> {
    super::cluster_views::listed_everywhere(b, super::cluster_views::CHANNELS, all(b))
        .await
        .into_iter()
        .filter(|ch| super::connections::shown(ch, user, vhost))
        .collect()
}

pub(crate) async fn list(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
) -> Json<Value> {
    Json(Value::Array(everywhere(&b, &user, None).await))
}

pub(crate) async fn of_vhost(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(Json(Value::Array(
        everywhere(&b, &user, Some(&vhost)).await,
    )))
}

pub(crate) async fn of_connection(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let mine = b
        .connections
        .by_name(&name)
        .filter(|c| sees_all(&user) || c.user == user.name);
    if let Some(c) = mine {
        return Ok(Json(Value::Array(local(&b, Some(c.id)))));
    }
    if super::connections::elsewhere(&b, &user, &name)
        .await
        .is_none()
    {
        return Err(ApiError::not_found());
    }
    Ok(Json(Value::Array(
        elsewhere(&b)
            .await
            .into_iter()
            .filter(|ch| ch["connection_details"]["name"].as_str() == Some(name.as_str()))
            .collect(),
    )))
}

/// The channels of the other nodes, as they show them.
async fn elsewhere(b: &AppState) -> Vec<Value> {
    super::cluster_views::listed_everywhere(b, super::cluster_views::CHANNELS, Vec::new()).await
}

pub(crate) async fn show(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let mine = b
        .connections
        .channels()
        .iter()
        .filter(|(c, _)| sees_all(&user) || c.user == user.name)
        .find(|(c, ch)| c.channel_name(ch.number) == name)
        .map(|(c, ch)| channel_json(&b, c, ch));
    if let Some(ch) = mine {
        return Ok(Json(ch));
    }
    elsewhere(&b)
        .await
        .into_iter()
        .find(|ch| {
            ch["name"].as_str() == Some(name.as_str()) && super::connections::shown(ch, &user, None)
        })
        .map(Json)
        .ok_or_else(ApiError::not_found)
}
