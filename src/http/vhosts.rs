//! `/api/vhosts[/{name}]`: list, show, create (PUT) and delete. Deleting a vhost closes its
//! connections and removes everything in it, as RabbitMQ does. `/api/vhost-limits` sets
//! `max-connections` and `max-queues` (enforced at connection.open and queue.declare). Writes
//! are administrator only.

use super::{Administrator, ApiError, AppState, Authenticated};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

/// A vhost as RabbitMQ shows it, with the message counts of its queues.
async fn vhost_json(b: &AppState, v: &crate::vhost::VHost) -> Value {
    let (mut ready, mut unacked) = (0u64, 0u64);
    for i in crate::queue::QueueShared::info_many(&v.queues()).await {
        ready += u64::from(i.messages_ready);
        unacked += u64::from(i.messages_unacknowledged);
    }
    let mut cluster_state = serde_json::Map::new();
    cluster_state.insert(super::node_name(b), json!("running"));
    json!({
        "name": v.name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "metadata": {"description": "", "tags": []},
        "tracing": false,
        "cluster_state": cluster_state,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
    })
}

pub(crate) async fn list(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let mut vhosts = b.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::with_capacity(vhosts.len());
    for v in &vhosts {
        out.push(vhost_json(&b, v).await);
    }
    Json(Value::Array(out))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Authenticated,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &name).await?;
    Ok(Json(vhost_json(&b, &v).await))
}

pub(crate) async fn put(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let created = super::durably(&b.store, b.save_vhost(&name)).await?;
    Ok(super::created_status(created))
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !super::durably(&b.store, b.remove_vhost(&name)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

fn limits_json(v: &crate::vhost::VHost) -> Option<Value> {
    let m = v.limits.to_json();
    (!m.is_empty()).then(|| json!({"vhost": v.name, "value": m}))
}

/// GET /api/vhost-limits: the vhosts that have limits.
pub(crate) async fn limits_all(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let mut vs = b.vhosts();
    vs.sort_by(|a, b| a.name.cmp(&b.name));
    Json(Value::Array(
        vs.iter().filter_map(|v| limits_json(v)).collect(),
    ))
}

/// GET /api/vhost-limits/{vhost}.
pub(crate) async fn limits_of(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    Ok(Json(Value::Array(limits_json(&v).into_iter().collect())))
}

/// Body of PUT /api/vhost-limits/{vhost}/{name}.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LimitBody {
    value: Value,
}

pub(crate) async fn limit_put(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<LimitBody>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    let value = match &body.value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "value must be an integer",
        )
    })?;
    if !super::durably(&b.store, b.save_vhost_limit(&vhost, &name, value)).await? {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("unknown limit {name} (max-connections, max-queues)"),
        ));
    }
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn limit_delete(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !super::durably(&b.store, b.save_vhost_limit(&vhost, &name, -1)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
