//! `/api/connections[/{name}]` and `/api/vhosts/{vhost}/connections`: the open AMQP 0-9-1 and
//! stream protocol connections
//! from the broker's registry, in RabbitMQ's JSON; DELETE closes one with 320
//! CONNECTION_FORCED (the `X-Reason` header, or "Closed via management plugin"). In a
//! cluster every node lists, shows and closes every node's connections (another node's
//! through its view and a close request to it). Administrators and monitoring users see every connection, other users their own.

use super::{ApiError, AppState, Authenticated};
use crate::connections::ConnectionInfo;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

pub(crate) fn sees_all(user: &crate::auth::User) -> bool {
    user.tags
        .iter()
        .any(|t| t == "administrator" || t == "monitoring")
}

pub(crate) fn connection_json(b: &AppState, c: &ConnectionInfo) -> Value {
    let connected_at = c
        .opened_at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let tls = c.tls.as_deref();
    let cert = tls.and_then(|t| t.peer_cert.as_ref());
    json!({
        "name": c.name(),
        "node": super::node_name(b),
        "vhost": c.vhost,
        "user": c.user,
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "ssl": tls.is_some(),
        "ssl_protocol": tls.map(|t| t.protocol),
        "ssl_cipher": tls.map(|t| t.cipher),
        "ssl_key_exchange": tls.map(|t| t.key_exchange),
        "ssl_hash": tls.map(|t| t.hash),
        "peer_cert_subject": cert.map(|p| &p.subject),
        "peer_cert_issuer": cert.map(|p| &p.issuer),
        "peer_cert_validity": cert.map(|p| &p.validity),
        "protocol": c.protocol.name(),
        "auth_mechanism": c.mechanism,
        "state": "running",
        "type": "network",
        "channels": c.channels.load(Ordering::Relaxed),
        "connected_at": connected_at,
        "timeout": c.heartbeat,
        "frame_max": c.frame_max,
        "channel_max": c.channel_max,
        "client_properties": crate::json::table_json(&c.client_properties),
        "user_provided_name": c.client_name,
    })
}

/// Every connection of this node, in RabbitMQ's JSON, oldest first.
pub(crate) fn all(b: &AppState) -> Vec<Value> {
    let mut list = b.connections.list();
    list.sort_by_key(|c| c.id);
    list.iter().map(|c| connection_json(b, c)).collect()
}

/// Whether `user` may see the connection or channel `item` (its `user` and `vhost` fields),
/// and it is in `vhost` when one is asked for.
pub(crate) fn shown(item: &Value, user: &crate::auth::User, vhost: Option<&str>) -> bool {
    (sees_all(user) || item["user"].as_str() == Some(user.name.as_str()))
        && vhost.is_none_or(|v| item["vhost"].as_str() == Some(v))
}

/// The connections of every node `user` may see (in `vhost`, when given).
async fn visible(b: &AppState, user: &crate::auth::User, vhost: Option<&str>) -> Vec<Value> {
    super::cluster_views::listed_everywhere(b, super::cluster_views::CONNECTIONS, all(b))
        .await
        .into_iter()
        .filter(|c| shown(c, user, vhost))
        .collect()
}

pub(crate) async fn list(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
) -> Json<Value> {
    Json(Value::Array(visible(&b, &user, None).await))
}

pub(crate) async fn of_vhost(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(Json(Value::Array(visible(&b, &user, Some(&vhost)).await)))
}

fn find(
    b: &AppState,
    user: &crate::auth::User,
    name: &str,
) -> Result<std::sync::Arc<ConnectionInfo>, ApiError> {
    b.connections
        .by_name(name)
        .filter(|c| sees_all(user) || c.user == user.name)
        .ok_or_else(ApiError::not_found)
}

/// Connection `name` of another node, as that node shows it, when `user` may see it.
pub(crate) async fn elsewhere(b: &AppState, user: &crate::auth::User, name: &str) -> Option<Value> {
    super::cluster_views::listed_everywhere(b, super::cluster_views::CONNECTIONS, Vec::new())
        .await
        .into_iter()
        .find(|c| c["name"].as_str() == Some(name) && shown(c, user, None))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match find(&b, &user, &name) {
        Ok(c) => Ok(Json(connection_json(&b, &c))),
        Err(e) => elsewhere(&b, &user, &name).await.map(Json).ok_or(e),
    }
}

pub(crate) async fn close(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin");
    match find(&b, &user, &name) {
        Ok(c) => c.force_close(reason),
        Err(e) => {
            if elsewhere(&b, &user, &name).await.is_none()
                || !b.close_member_connection(&name, reason).await
            {
                return Err(e);
            }
        }
    }
    Ok(StatusCode::NO_CONTENT)
}
