//! `/api/federation-links` (RabbitMQ's federation management plugin): the status of the
//! node's federation links, all or per vhost, or only those down (neither running nor
//! starting), for any management user in the vhosts it can see; and a link's restart.

use super::policies::user_sees;
use super::{ApiError, AppState, Authenticated};
use crate::federation::upstream::UPSTREAM;
use axum::extract::{Path, State};
use axum::http::StatusCode;
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

/// Whether a link is down (RabbitMQ's `state/down` filter).
fn down(link: &Value) -> bool {
    !matches!(link["status"].as_str(), Some("running" | "starting"))
}

/// GET /api/federation-links/state/down.
pub(crate) async fn list_down(State(b): State<AppState>, who: Authenticated) -> Json<Value> {
    let all = links(&b, |v| user_sees(&b, &who.0, v));
    Json(Value::Array(all.into_iter().filter(down).collect()))
}

/// GET /api/federation-links/{vhost}/state/down.
pub(crate) async fn list_vhost_down(
    state: State<AppState>,
    who: Authenticated,
    vhost: Path<String>,
) -> Result<Json<Value>, ApiError> {
    let Json(all) = list_vhost(state, who, vhost).await?;
    let all = all.as_array().cloned().unwrap_or_default();
    Ok(Json(Value::Array(all.into_iter().filter(down).collect())))
}

/// DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart: 204, or 404 when this
/// node (the only one that runs links) has no such link.
pub(crate) async fn restart(
    State(b): State<AppState>,
    who: Authenticated,
    Path((vhost, id, node)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !user_sees(&b, &who.0, &vhost) {
        return Err(ApiError::not_permitted());
    }
    let restarted = node == b.config.node_name
        && b.parameters
            .component(UPSTREAM)
            .is_some_and(|c| c.restart(&vhost, &id));
    if restarted {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}
