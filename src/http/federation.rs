//! `/api/federation-links` (RabbitMQ's federation management plugin): the status of the
//! node's federation links, all or per vhost, for any management user in the vhosts it can
//! see.

use super::policies::user_sees;
use super::{ApiError, AppState, Authenticated};
use crate::federation::upstream::UPSTREAM;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

fn links(b: &AppState, visible: impl Fn(&str) -> bool) -> Vec<Value> {
    b.parameters
        .component(UPSTREAM)
        .map(|c| c.status())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["vhost"].as_str().is_some_and(&visible))
        .collect()
}

/// GET /api/federation-links.
pub(crate) async fn list(State(b): State<AppState>, who: Authenticated) -> Json<Value> {
    Json(Value::Array(links(&b, |v| user_sees(&b, &who.0, v))))
}

/// GET /api/federation-links/{vhost}.
pub(crate) async fn list_vhost(
    State(b): State<AppState>,
    who: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !user_sees(&b, &who.0, &vhost) {
        return Err(ApiError::not_permitted());
    }
    Ok(Json(Value::Array(links(&b, |v| v == vhost))))
}
