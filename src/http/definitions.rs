//! `/api/definitions[/{vhost}]`: export (GET) and import (POST) in RabbitMQ's JSON format,
//! administrator only; the work is done by [`crate::definitions`].

use super::{Administrator, ApiError, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

pub(crate) async fn export_all(State(b): State<AppState>, _: Administrator) -> Json<Value> {
    Json(crate::definitions::export(&b, None))
}

pub(crate) async fn export_vhost(
    State(b): State<AppState>,
    _: Administrator,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(Json(crate::definitions::export(&b, Some(&vhost))))
}

/// 204 as RabbitMQ when everything was imported; 200 with the list of what was skipped
/// otherwise.
async fn import(b: &AppState, doc: &Value, vhost: Option<&str>) -> Result<Response, ApiError> {
    let r = super::durably(&b.store, crate::definitions::import(b, doc, vhost)).await;
    let skipped =
        r.map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason))?;
    Ok(if skipped.is_empty() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Json(json!({ "skipped": skipped })).into_response()
    })
}

pub(crate) async fn import_all(
    State(b): State<AppState>,
    _: Administrator,
    Json(doc): Json<Value>,
) -> Result<Response, ApiError> {
    import(&b, &doc, None).await
}

pub(crate) async fn import_vhost(
    State(b): State<AppState>,
    _: Administrator,
    Path(vhost): Path<String>,
    Json(doc): Json<Value>,
) -> Result<Response, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    import(&b, &doc, Some(&vhost)).await
}
