//! `/api/policies` and `/api/operator-policies` (list, per vhost, GET/PUT/DELETE one) and
//! `/api/global-parameters` (`/api/parameters`, where policies show as runtime parameters
//! too, is `parameters.rs`). Access as in RabbitMQ: any management user reads policies of the vhosts it can see, policymakers write them, administrators write
//! operator policies; parameters are for policymakers.

use super::{Administrator, ApiError, AppState, Authenticated, Policymaker};
use crate::policy::Policy;
use crate::vhost::policies::component;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

fn bad_request(reason: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
}

fn vhost_missing() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "vhost_not_found")
}

/// Every policy (or operator policy) of the vhosts `visible` accepts, by vhost then name.
fn policies(b: &AppState, operator: bool, visible: impl Fn(&str) -> bool) -> Vec<Value> {
    let mut vhosts = b.vhosts();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    vhosts
        .iter()
        .filter(|v| visible(&v.name))
        .flat_map(|v| v.policies.list(operator))
        .map(|p| p.to_json())
        .collect()
}

/// Whether `user` may see what is in `vhost` (administrators and monitors see every vhost).
pub(crate) fn user_sees(b: &AppState, user: &crate::auth::User, vhost: &str) -> bool {
    user.tags
        .iter()
        .any(|t| t == "administrator" || t == "monitoring")
        || b.permissions.get(vhost, &user.name).is_some()
}

async fn list_of(b: AppState, user: crate::auth::User, operator: bool) -> Json<Value> {
    Json(Value::Array(policies(&b, operator, |v| {
        user_sees(&b, &user, v)
    })))
}

async fn list_in(
    b: AppState,
    user: crate::auth::User,
    vhost: String,
    operator: bool,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    if !user_sees(&b, &user, &vhost) {
        return Err(ApiError::not_permitted());
    }
    Ok(Json(Value::Array(policies(&b, operator, |v| v == vhost))))
}

async fn show_one(
    b: AppState,
    user: crate::auth::User,
    vhost: String,
    name: String,
    operator: bool,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    if !user_sees(&b, &user, &vhost) {
        return Err(ApiError::not_permitted());
    }
    v.policies
        .list(operator)
        .iter()
        .find(|p| p.name == name)
        .map(|p| Json(p.to_json()))
        .ok_or_else(ApiError::not_found)
}

/// RabbitMQ's `/api/policies` escapes `<` and `>` in its reasons (its operator-policy
/// handler does not).
fn escaped(reason: String) -> String {
    reason.replace('<', "&lt;").replace('>', "&gt;")
}

async fn put_one(
    b: AppState,
    vhost: String,
    name: String,
    body: Value,
    operator: bool,
) -> Result<StatusCode, ApiError> {
    let v = b.vhost(&vhost).ok_or_else(vhost_missing)?;
    let p = Policy::from_json(&vhost, &name, &body, operator)
        .map_err(|e| bad_request(if operator { e } else { escaped(e) }))?;
    let created = super::durably(&b.store, b.save_policy(&v, p, operator))
        .await?
        .ok_or_else(vhost_missing)?;
    Ok(super::created_status(created))
}

async fn delete_one(
    b: AppState,
    vhost: String,
    name: String,
    operator: bool,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    if !super::durably(&b.store, b.remove_policy(&v, &name, operator)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn list(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
) -> Json<Value> {
    list_of(b, u, false).await
}

pub(crate) async fn list_vhost(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    list_in(b, u, vhost, false).await
}

pub(crate) async fn show(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    show_one(b, u, vhost, name, false).await
}

pub(crate) async fn put(
    State(b): State<AppState>,
    who: Policymaker,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    if b.vhost(&vhost).is_some() && !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    put_one(b, vhost, name, body, false).await
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    who: Policymaker,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if b.vhost(&vhost).is_some() && !who.may_use(&b, &vhost) {
        return Err(ApiError::not_permitted());
    }
    delete_one(b, vhost, name, false).await
}

pub(crate) async fn operator_list(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
) -> Json<Value> {
    list_of(b, u, true).await
}

pub(crate) async fn operator_list_vhost(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    list_in(b, u, vhost, true).await
}

pub(crate) async fn operator_show(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    show_one(b, u, vhost, name, true).await
}

pub(crate) async fn operator_put(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    put_one(b, vhost, name, body, true).await
}

pub(crate) async fn operator_delete(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    delete_one(b, vhost, name, true).await
}

/// Policies as RabbitMQ's runtime parameters of component `policy` / `operator_policy`.
pub(super) fn as_parameters(b: &AppState, who: &Policymaker, operator: bool) -> Vec<Value> {
    policies(b, operator, |v| who.may_use(b, v))
        .into_iter()
        .map(|p| {
            json!({
                "value": {
                    "pattern": p["pattern"], "definition": p["definition"],
                    "priority": p["priority"], "apply-to": p["apply-to"],
                },
                "vhost": p["vhost"],
                "component": component(operator),
                "name": p["name"],
            })
        })
        .collect()
}

pub(crate) async fn globals(State(b): State<AppState>, _: Policymaker) -> Json<Value> {
    Json(Value::Array(
        b.global_parameters()
            .into_iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect(),
    ))
}

pub(crate) async fn global_show(
    State(b): State<AppState>,
    _: Policymaker,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    b.global_parameters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(name, value)| Json(json!({"value": value, "name": name})))
        .ok_or_else(ApiError::not_found)
}

pub(crate) async fn global_put(
    State(b): State<AppState>,
    _: Policymaker,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let value = body
        .get("value")
        .cloned()
        .ok_or_else(|| bad_request("[{key_missing,value}]"))?;
    let created = super::durably(&b.store, b.save_global_parameter(&name, value)).await?;
    Ok(super::created_status(created))
}

pub(crate) async fn global_delete(
    State(b): State<AppState>,
    _: Policymaker,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !super::durably(&b.store, b.remove_global_parameter(&name)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// GET /api/cluster-name: the cluster's name (`cluster_name` in the config until one is set).
pub(crate) async fn cluster_name_show(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    Json(json!({"name": b.cluster_name()}))
}

/// PUT /api/cluster-name with `{"name": ...}`: sets the `cluster_name` global parameter.
pub(crate) async fn cluster_name_put(
    State(b): State<AppState>,
    _: Administrator,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_request("[{key_missing,name}]"))?
        .to_owned();
    super::durably(
        &b.store,
        b.save_global_parameter("cluster_name", name.into()),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
