//! `/api/parameters`: RabbitMQ's runtime parameters. Policies and operator policies show
//! here as components `policy` and `operator_policy` (written through `/api/policies`);
//! the components the broker runs (`shovel`) are set and cleared here, each value checked
//! by its component. Policymakers only, in the vhosts they may use.

use super::policies::as_parameters;
use super::{ApiError, AppState, Policymaker};
use crate::parameters::ParameterError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

fn bad_request(reason: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
}

/// RabbitMQ's validation failure, its `<` and `>` escaped as its API does.
fn invalid(reason: &str) -> ApiError {
    let text = format!("Validation failed\n\n{reason}\n");
    bad_request(text.replace('<', "&lt;").replace('>', "&gt;"))
}

/// The values of a component the broker runs, in the vhosts `who` may use.
fn component_values(b: &AppState, who: &Policymaker, comp: &str) -> Vec<Value> {
    b.parameters
        .list(comp, None)
        .into_iter()
        .filter(|(vhost, _, _)| who.may_use(b, vhost))
        .map(|(vhost, name, value)| {
            json!({"value": value, "vhost": vhost, "component": comp, "name": name})
        })
        .collect()
}

fn parameters_of(b: &AppState, who: &Policymaker, comp: &str) -> Vec<Value> {
    match comp {
        "policy" => as_parameters(b, who, false),
        "operator_policy" => as_parameters(b, who, true),
        other => component_values(b, who, other),
    }
}

/// GET /api/parameters: every runtime parameter but policies (RabbitMQ lists operator
/// policies here).
pub(crate) async fn parameters(State(b): State<AppState>, who: Policymaker) -> Json<Value> {
    let mut all = as_parameters(&b, &who, true);
    for (comp, vhost, name, value) in b.parameters.all() {
        if who.may_use(&b, &vhost) {
            all.push(json!({"value": value, "vhost": vhost, "component": comp, "name": name}));
        }
    }
    Json(Value::Array(all))
}

/// GET /api/parameters/{component}.
pub(crate) async fn parameters_component(
    State(b): State<AppState>,
    who: Policymaker,
    Path(comp): Path<String>,
) -> Json<Value> {
    Json(Value::Array(parameters_of(&b, &who, &comp)))
}

/// GET /api/parameters/{component}/{vhost}.
pub(crate) async fn parameters_vhost(
    State(b): State<AppState>,
    who: Policymaker,
    Path((comp, vhost)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    let all = parameters_of(&b, &who, &comp);
    Ok(Json(Value::Array(
        all.into_iter().filter(|p| p["vhost"] == vhost).collect(),
    )))
}

/// GET /api/parameters/{component}/{vhost}/{name}.
pub(crate) async fn parameter_show(
    State(b): State<AppState>,
    who: Policymaker,
    Path((comp, vhost, name)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    parameters_of(&b, &who, &comp)
        .into_iter()
        .find(|p| p["vhost"] == vhost && p["name"] == name)
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// PUT /api/parameters/{component}/{vhost}/{name} with `{"value": ...}`: 201 when new, 204
/// when replaced; RabbitMQ's validation texts otherwise.
pub(crate) async fn parameter_put(
    State(b): State<AppState>,
    who: Policymaker,
    Path((comp, vhost, name)): Path<(String, String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    if !b.parameters.is_registered(&comp) {
        return Err(invalid(&format!("component {comp} not found")));
    }
    if b.cluster.get().is_some() {
        return Err(invalid(&format!(
            "component {comp} is not yet supported on a clustered node"
        )));
    }
    let value = body
        .get("value")
        .cloned()
        .ok_or_else(|| bad_request("[{key_missing,value}]"))?;
    // RabbitMQ checks what the user may reach through the value; rabbitmqctl acts as the node.
    let user = (who.0.name != super::LOCAL_ADMIN).then_some(who.0.name.as_str());
    let set = super::durably(&b.store, async {
        b.set_parameter(&comp, &vhost, &name, value, user)
    })
    .await;
    match set {
        Ok(new) => Ok(super::created_status(new)),
        Err(e @ ParameterError::UnknownComponent(_)) | Err(e @ ParameterError::Invalid(_)) => {
            Err(invalid(&e.to_string()))
        }
    }
}

/// DELETE /api/parameters/{component}/{vhost}/{name}: 204, or 404 when it is not set.
pub(crate) async fn parameter_delete(
    State(b): State<AppState>,
    who: Policymaker,
    Path((comp, vhost, name)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    let cleared = super::durably(&b.store, async { b.clear_parameter(&comp, &vhost, &name) }).await;
    if cleared {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}
