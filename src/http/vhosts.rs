//! `/api/vhosts[/{name}]`: list, show, create (PUT) and delete. Deleting a vhost closes its
//! connections and removes everything in it, as RabbitMQ does. Writes are administrator only.

use super::{Administrator, ApiError, AppState, Authenticated};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

fn vhost_json(name: &str) -> Value {
    json!({
        "name": name,
        "description": "",
        "tags": [],
        "default_queue_type": "classic",
        "metadata": {"description": "", "tags": []},
        "tracing": false,
    })
}

pub(crate) async fn list(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let mut names: Vec<String> = b.vhosts().iter().map(|v| v.name.clone()).collect();
    names.sort();
    Json(Value::Array(names.iter().map(|n| vhost_json(n)).collect()))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Authenticated,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = b.vhost(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(vhost_json(&v.name)))
}

pub(crate) async fn put(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> StatusCode {
    let mark = b.store.submitted();
    let created = b.add_vhost(&name);
    b.store.sync_since(mark).await;
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let mark = b.store.submitted();
    if !b.delete_vhost(&name).await {
        return Err(ApiError::not_found());
    }
    b.store.sync_since(mark).await;
    Ok(StatusCode::NO_CONTENT)
}
