//! The stream plugin's management endpoints (RabbitMQ's `rabbitmq_stream_management`):
//! `/api/stream/connections[/{vhost}[/{name}[/publishers|/consumers]]]`,
//! `/api/stream/publishers[/{vhost}[/{stream}]]` and `/api/stream/consumers[/{vhost}]`, in
//! RabbitMQ's JSON, from the stream connections in the connection registry and the
//! publisher and consumer records each keeps. A consumer's `offset_lag` asks its stream's
//! task where the log ends. Visibility as for connections: administrators and monitoring
//! users see everything, other users their own. This node's stream connections only.

use super::connections::{connection_json, sees_all};
use super::{ApiError, AppState, Authenticated};
use crate::auth::User;
use crate::connections::{ConnectionInfo, Protocol};
use crate::queue::stream::{LogStats, StreamCmd};
use crate::stream_stats::{ConsumerStats, PublisherStats};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Json;
use axum::Router;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The stream plugin's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/stream/connections", get(connections))
        .route("/api/stream/connections/{vhost}", get(connections_of_vhost))
        .route(
            "/api/stream/connections/{vhost}/{name}",
            get(connection).delete(close_connection),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/publishers",
            get(connection_publishers),
        )
        .route(
            "/api/stream/connections/{vhost}/{name}/consumers",
            get(connection_consumers),
        )
        .route("/api/stream/publishers", get(publishers))
        .route("/api/stream/publishers/{vhost}", get(publishers_of_vhost))
        .route(
            "/api/stream/publishers/{vhost}/{stream}",
            get(publishers_of_stream),
        )
        .route("/api/stream/consumers", get(consumers))
        .route("/api/stream/consumers/{vhost}", get(consumers_of_vhost))
}

/// The stream connections `user` may see (in `vhost`, when given), oldest first.
fn stream_connections(b: &AppState, user: &User, vhost: Option<&str>) -> Vec<Arc<ConnectionInfo>> {
    let mut list: Vec<_> = b
        .connections
        .list()
        .into_iter()
        .filter(|c| c.protocol == Protocol::Stream)
        .filter(|c| sees_all(user) || c.user == user.name)
        .filter(|c| vhost.is_none_or(|v| c.vhost == v))
        .collect();
    list.sort_by_key(|c| c.id);
    list
}

/// Stream connection `name` of `vhost`, when `user` may see it.
fn find(
    b: &AppState,
    user: &User,
    vhost: &str,
    name: &str,
) -> Result<Arc<ConnectionInfo>, ApiError> {
    stream_connections(b, user, Some(vhost))
        .into_iter()
        .find(|c| c.name() == name)
        .ok_or_else(ApiError::not_found)
}

/// A publisher's or consumer's `connection_details`.
fn connection_details(b: &AppState, c: &ConnectionInfo) -> Value {
    json!({
        "name": c.name(),
        "node": super::node_name(b),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "user": c.user,
    })
}

fn publisher_json(b: &AppState, c: &ConnectionInfo, p: &PublisherStats) -> Value {
    json!({
        "publisher_id": p.id,
        "reference": p.reference,
        "published": p.published.load(Relaxed),
        "confirmed": p.confirmed.load(Relaxed),
        "errored": p.errored.load(Relaxed),
        "queue": {"name": p.stream, "vhost": c.vhost},
        "connection_details": connection_details(b, c),
    })
}

/// Where each stream of `vhost` named in `names` ends (its last offset; None when empty).
async fn last_offsets(b: &AppState, vhost: &str, names: Vec<&str>) -> HashMap<String, Option<u64>> {
    let mut out = HashMap::new();
    let Some(v) = b.vhost(vhost) else {
        return out;
    };
    for name in names {
        if out.contains_key(name) {
            continue;
        }
        let Ok(q) = v.queue(name) else { continue };
        let (tx, rx) = oneshot::channel();
        let last = match q.stream_request(StreamCmd::Stats { reply: tx }).await {
            true => rx.await.ok().and_then(|s: LogStats| s.next.checked_sub(1)),
            false => None,
        };
        out.insert(name.to_owned(), last);
    }
    out
}

async fn consumers_json(
    b: &AppState,
    c: &ConnectionInfo,
    list: &[Arc<ConsumerStats>],
) -> Vec<Value> {
    let lasts = last_offsets(
        b,
        &c.vhost,
        list.iter().map(|s| s.stream.as_str()).collect(),
    )
    .await;
    list.iter()
        .map(|s| {
            let last = lasts.get(&s.stream).copied().flatten();
            let properties: serde_json::Map<String, Value> = s
                .properties
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            json!({
                "subscription_id": s.id,
                "credits": s.credits.load(Relaxed).max(0),
                "consumed": s.consumed.load(Relaxed),
                "offset": s.offset.load(Relaxed),
                "offset_lag": s.offset_lag(last),
                "active": s.active.load(Relaxed),
                "activity_status": s.activity_status(),
                "properties": properties,
                "queue": {"name": s.stream, "vhost": c.vhost},
                "connection_details": connection_details(b, c),
            })
        })
        .collect()
}

pub(crate) async fn connections(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
) -> Json<Value> {
    let list = stream_connections(&b, &user, None);
    Json(list.iter().map(|c| connection_json(&b, c)).collect())
}

pub(crate) async fn connections_of_vhost(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    let list = stream_connections(&b, &user, Some(&vhost));
    Ok(Json(list.iter().map(|c| connection_json(&b, c)).collect()))
}

pub(crate) async fn connection(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let c = find(&b, &user, &vhost, &name)?;
    Ok(Json(connection_json(&b, &c)))
}

/// DELETE: the connection ends (RabbitMQ sends a stream client no close frame).
pub(crate) async fn close_connection(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let c = find(&b, &user, &vhost, &name)?;
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin");
    c.force_close(reason);
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn connection_publishers(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let c = find(&b, &user, &vhost, &name)?;
    let list = c.stream.publishers();
    Ok(Json(
        list.iter().map(|p| publisher_json(&b, &c, p)).collect(),
    ))
}

pub(crate) async fn connection_consumers(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let c = find(&b, &user, &vhost, &name)?;
    let list = c.stream.consumers();
    Ok(Json(Value::Array(consumers_json(&b, &c, &list).await)))
}

/// Every publisher `user` may see, in `vhost` and of `stream` when given.
fn publishers_of(b: &AppState, user: &User, vhost: Option<&str>, stream: Option<&str>) -> Value {
    let mut out = Vec::new();
    for c in stream_connections(b, user, vhost) {
        for p in c.stream.publishers() {
            if stream.is_none_or(|s| p.stream == s) {
                out.push(publisher_json(b, &c, &p));
            }
        }
    }
    Value::Array(out)
}

pub(crate) async fn publishers(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
) -> Json<Value> {
    Json(publishers_of(&b, &user, None, None))
}

pub(crate) async fn publishers_of_vhost(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(Json(publishers_of(&b, &user, Some(&vhost), None)))
}

pub(crate) async fn publishers_of_stream(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path((vhost, stream)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    if !v.queue(&stream).is_ok_and(|q| q.args.stream) {
        return Err(ApiError::not_found());
    }
    Ok(Json(publishers_of(&b, &user, Some(&vhost), Some(&stream))))
}

/// Every consumer `user` may see, in `vhost` when given.
async fn consumers_of(b: &AppState, user: &User, vhost: Option<&str>) -> Value {
    let mut out = Vec::new();
    for c in stream_connections(b, user, vhost) {
        out.extend(consumers_json(b, &c, &c.stream.consumers()).await);
    }
    Value::Array(out)
}

pub(crate) async fn consumers(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
) -> Json<Value> {
    Json(consumers_of(&b, &user, None).await)
}

pub(crate) async fn consumers_of_vhost(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(Json(consumers_of(&b, &user, Some(&vhost)).await))
}
