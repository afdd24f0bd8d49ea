//! `/api/shovels` (RabbitMQ's shovel management plugin): the status of the node's dynamic
//! shovels, all or per vhost, one by name (an array, as RabbitMQ 3.x answers), its restart
//! (`DELETE .../restart`) and its deletion (`DELETE` of the shovel clears its parameter);
//! and LavinMQ's pause and resume (`PUT /api/shovels/{vhost}/{name}/pause|resume`). Any
//! management user reads the vhosts it can see; policymakers restart, pause, resume and
//! delete.

use super::policies::user_sees;
use super::{ApiError, AppState, Authenticated, Policymaker};
use crate::shovel::COMPONENT;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

fn statuses(b: &AppState, visible: impl Fn(&str) -> bool) -> Vec<Value> {
    b.parameters
        .component(COMPONENT)
        .map(|c| c.status())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["vhost"].as_str().is_some_and(&visible))
        .collect()
}

/// GET /api/shovels.
pub(crate) async fn list(State(b): State<AppState>, who: Authenticated) -> Json<Value> {
    Json(Value::Array(statuses(&b, |v| user_sees(&b, &who.0, v))))
}

/// GET /api/shovels/{vhost}.
pub(crate) async fn list_vhost(
    State(b): State<AppState>,
    who: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !user_sees(&b, &who.0, &vhost) {
        return Err(ApiError::not_permitted());
    }
    Ok(Json(Value::Array(statuses(&b, |v| v == vhost))))
}

/// GET /api/shovels/vhost/{vhost}/{name}: 404 unless the shovel runs here.
pub(crate) async fn show(
    State(b): State<AppState>,
    who: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !user_sees(&b, &who.0, &vhost) {
        return Err(ApiError::not_permitted());
    }
    let found: Vec<Value> = statuses(&b, |v| v == vhost)
        .into_iter()
        .filter(|s| s["name"] == name.as_str())
        .collect();
    if found.is_empty() {
        return Err(ApiError::not_found());
    }
    Ok(Json(Value::Array(found)))
}

/// DELETE /api/shovels/vhost/{vhost}/{name}: clears the shovel's parameter (204 even when
/// it was not running, as RabbitMQ answers).
pub(crate) async fn delete(
    State(b): State<AppState>,
    who: Policymaker,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    super::durably(&b.store, async {
        b.clear_parameter(COMPONENT, &vhost, &name)
    })
    .await;
    Ok(StatusCode::NO_CONTENT)
}

/// DELETE /api/shovels/vhost/{vhost}/{name}/restart: 204, or 404 when it does not run here.
pub(crate) async fn restart(
    State(b): State<AppState>,
    who: Policymaker,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    let restarted = b
        .parameters
        .component(COMPONENT)
        .is_some_and(|c| c.restart(&vhost, &name));
    if restarted {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}

/// How long a pause waits for the shovel's run to end before it answers.
const PAUSE_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// PUT /api/shovels/{vhost}/{name}/pause and .../resume (LavinMQ's): 204 (a pause once the
/// run has ended); 422 when the shovel is not running (pause) or not paused (resume); 404
/// when it does not run here.
async fn set_paused(
    b: AppState,
    who: Policymaker,
    vhost: String,
    name: String,
    paused: bool,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    let component = b.parameters.component(COMPONENT);
    match component
        .as_ref()
        .and_then(|c| c.set_paused(&vhost, &name, paused))
    {
        Some(true) => {
            if let Some(c) = component.filter(|_| paused) {
                // Answered once the run has ended: nothing moves after the 204.
                let _ = tokio::time::timeout(PAUSE_WAIT, c.stopped(&vhost, &name)).await;
            }
            Ok(StatusCode::NO_CONTENT)
        }
        Some(false) => Ok(StatusCode::UNPROCESSABLE_ENTITY),
        None => Err(ApiError::not_found()),
    }
}

/// PUT /api/shovels/{vhost}/{name}/pause.
pub(crate) async fn pause(
    State(b): State<AppState>,
    who: Policymaker,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    set_paused(b, who, vhost, name, true).await
}

/// PUT /api/shovels/{vhost}/{name}/resume.
pub(crate) async fn resume(
    State(b): State<AppState>,
    who: Policymaker,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    set_paused(b, who, vhost, name, false).await
}
