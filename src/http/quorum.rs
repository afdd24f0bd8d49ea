//! RabbitMQ's quorum queue replica endpoints: `/api/queues/quorum/{vhost}/{name}/replicas/add`
//! (POST) and `/delete` (DELETE) with `{"node": ...}`, `/api/queues/quorum/replicas/on/{node}/grow`
//! (POST, `vhost_pattern`, `queue_pattern`, `strategy`) and `/shrink` (DELETE), and
//! `/api/queues/quorum/{vhost}/{name}/status`. Status codes and errors as RabbitMQ's: 204 for
//! an add or grow, 202 for a delete or shrink, 404 for a queue or node that is not there, 503
//! with the reason for a change that could not be made.

use super::{ApiError, AppState, Authenticated};
use crate::error::CoreError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// A failed change as RabbitMQ's `service_unavailable` reports it; 404 for a missing queue.
fn change_error(e: CoreError) -> ApiError {
    match e {
        CoreError::NotFound { .. } => ApiError::not_found(),
        other => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            other.to_string(),
        ),
    }
}

/// The `node` a body names (400 without one).
fn node_in(body: &Value) -> Result<String, ApiError> {
    body.get("node")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", "node not found"))
}

/// 404 unless `node` is a member of the cluster (or this node, unclustered).
fn known_node(b: &AppState, node: &str) -> Result<(), ApiError> {
    let known = match b.cluster.get() {
        Some(n) => n.members().iter().any(|(m, _)| m.name == node),
        None => super::node_name(b) == node,
    };
    known.then_some(()).ok_or_else(ApiError::not_found)
}

/// `POST /api/queues/quorum/{vhost}/{name}/replicas/add`.
pub(crate) async fn add_member(
    State(b): State<AppState>,
    _: super::Administrator,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let node = node_in(&body)?;
    b.quorum_add_member(&vhost, &name, &node)
        .await
        .map_err(change_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete`.
pub(crate) async fn delete_member(
    State(b): State<AppState>,
    _: super::Administrator,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let node = node_in(&body)?;
    b.quorum_delete_member(&vhost, &name, &node)
        .await
        .map_err(change_error)?;
    Ok(StatusCode::ACCEPTED)
}

/// `POST /api/queues/quorum/replicas/on/{node}/grow`.
pub(crate) async fn grow(
    State(b): State<AppState>,
    _: super::Administrator,
    Path(node): Path<String>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    known_node(&b, &node)?;
    let field = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("{k} not found"),
                )
            })
    };
    let (vhosts, queues) = (field("vhost_pattern")?, field("queue_pattern")?);
    let strategy = field("strategy")?.parse().map_err(|e: CoreError| {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.to_string())
    })?;
    let changes = b
        .quorum_grow(&node, &vhosts, &queues, strategy)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.to_string()))?;
    log_failures(&changes);
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/quorum/replicas/on/{node}/shrink`.
pub(crate) async fn shrink(
    State(b): State<AppState>,
    _: super::Administrator,
    Path(node): Path<String>,
) -> Result<StatusCode, ApiError> {
    known_node(&b, &node)?;
    let changes = b.quorum_shrink(&node).await.map_err(change_error)?;
    log_failures(&changes);
    Ok(StatusCode::ACCEPTED)
}

fn log_failures(changes: &[crate::replication::MemberChange]) {
    for c in changes {
        if let Err(e) = &c.result {
            tracing::warn!(queue = %c.name, vhost = %c.vhost, error = %e, "quorum queue member change failed");
        }
    }
}

/// `GET /api/queues/quorum/{vhost}/{name}/status`: a row per member, RabbitMQ's columns.
pub(crate) async fn status(
    State(b): State<AppState>,
    auth: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if !super::policies::user_sees(&b, &auth.0, &vhost) {
        return Err(ApiError::not_permitted());
    }
    let rows = match b.quorum_member_status(&vhost, &name).await {
        Ok(rows) => rows,
        Err(CoreError::NotFound { .. }) => return Err(ApiError::not_found()),
        Err(e) => {
            let body = Json(json!({"status": "failed", "reason": e.to_string()}));
            return Ok((StatusCode::SERVICE_UNAVAILABLE, body).into_response());
        }
    };
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|r| match r.report {
            Some(m) => json!({
                "Node Name": r.node,
                "Raft State": m.state,
                "Membership": if m.state == "learner" { "promotable" } else { "voter" },
                "Last Log Index": m.last_index.unwrap_or(0),
                "Last Written": m.last_index.unwrap_or(0),
                "Last Applied": m.applied.unwrap_or(0),
                "Commit Index": m.applied.unwrap_or(0),
                "Snapshot Index": m.snapshot.map_or(Value::from(""), Value::from),
                "Term": m.term,
                "Machine Version": 1,
            }),
            None => json!({
                "Node Name": r.node,
                "Raft State": "noproc",
                "Membership": "",
                "Last Log Index": "",
                "Last Written": "",
                "Last Applied": "",
                "Commit Index": "",
                "Snapshot Index": "",
                "Term": "",
                "Machine Version": 1,
            }),
        })
        .collect();
    Ok(Json(Value::Array(rows)).into_response())
}
