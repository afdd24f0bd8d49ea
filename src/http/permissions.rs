//! `/api/permissions` and `/api/topic-permissions` (list, per vhost and user, PUT, DELETE), and
//! the per-user and per-vhost permission lists. Administrator only, as in RabbitMQ.

use super::{Administrator, ApiError, AppState};
use crate::permissions::{Access, Permission, TopicPermission};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

fn permission_json(vhost: &str, user: &str, p: &Permission) -> Value {
    json!({
        "user": user,
        "vhost": vhost,
        "configure": p.pattern(Access::Configure),
        "write": p.pattern(Access::Write),
        "read": p.pattern(Access::Read),
    })
}

fn topic_json(vhost: &str, user: &str, t: &TopicPermission) -> Value {
    json!({
        "user": user,
        "vhost": vhost,
        "exchange": t.exchange,
        "write": t.write(),
        "read": t.read(),
    })
}

fn bad_request(reason: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
}

/// The vhost and user of a permission path must exist.
async fn check_subjects(b: &AppState, vhost: &str, user: &str) -> Result<(), ApiError> {
    super::vhost_of(b, vhost).await?;
    b.find_user(user)
        .await
        .ok_or_else(|| bad_request("no_such_user"))?;
    Ok(())
}

fn filtered(b: &AppState, keep: impl Fn(&str, &str) -> bool) -> Json<Value> {
    Json(Value::Array(
        b.permissions
            .list()
            .iter()
            .filter(|(v, u, _)| keep(v, u))
            .map(|(v, u, p)| permission_json(v, u, p))
            .collect(),
    ))
}

pub(crate) async fn list(State(b): State<AppState>, _: Administrator) -> Json<Value> {
    filtered(&b, |_, _| true)
}

pub(crate) async fn of_user(
    State(b): State<AppState>,
    _: Administrator,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    b.user(&user).ok_or_else(ApiError::not_found)?;
    Ok(filtered(&b, |_, u| u == user))
}

pub(crate) async fn of_vhost(
    State(b): State<AppState>,
    _: Administrator,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    super::vhost_of(&b, &vhost).await?;
    Ok(filtered(&b, |v, _| v == vhost))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let p = b
        .permissions
        .get(&vhost, &user)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(permission_json(&vhost, &user, &p)))
}

/// Body of PUT /api/permissions/{vhost}/{user}.
#[derive(Debug, Deserialize)]
pub(crate) struct PermissionBody {
    configure: String,
    write: String,
    read: String,
}

pub(crate) async fn put(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, user)): Path<(String, String)>,
    Json(body): Json<PermissionBody>,
) -> Result<StatusCode, ApiError> {
    check_subjects(&b, &vhost, &user).await?;
    let p = Permission::new(&body.configure, &body.write, &body.read).map_err(bad_request)?;
    let existed = b.permissions.get(&vhost, &user).is_some();
    super::durably(&b.store, b.save_permission(&vhost, &user, p)).await?;
    Ok(super::created_status(!existed))
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if !super::durably(&b.store, b.remove_permission(&vhost, &user)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

fn topics_filtered(b: &AppState, keep: impl Fn(&str, &str) -> bool) -> Vec<Value> {
    b.permissions
        .list_topics()
        .iter()
        .filter(|(v, u, _)| keep(v, u))
        .map(|(v, u, t)| topic_json(v, u, t))
        .collect()
}

pub(crate) async fn topic_list(State(b): State<AppState>, _: Administrator) -> Json<Value> {
    Json(Value::Array(topics_filtered(&b, |_, _| true)))
}

pub(crate) async fn topic_show(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let found = topics_filtered(&b, |v, u| v == vhost && u == user);
    if found.is_empty() {
        return Err(ApiError::not_found());
    }
    Ok(Json(Value::Array(found)))
}

/// Body of PUT /api/topic-permissions/{vhost}/{user}.
#[derive(Debug, Deserialize)]
pub(crate) struct TopicBody {
    exchange: String,
    write: String,
    read: String,
}

pub(crate) async fn topic_put(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, user)): Path<(String, String)>,
    Json(body): Json<TopicBody>,
) -> Result<StatusCode, ApiError> {
    check_subjects(&b, &vhost, &user).await?;
    let t = TopicPermission::new(&body.exchange, &body.write, &body.read, &user, &vhost)
        .map_err(bad_request)?;
    let existed = b
        .permissions
        .topics(&vhost, &user)
        .is_some_and(|l| l.iter().any(|x| x.exchange == body.exchange));
    super::durably(&b.store, b.save_topic_permission(&vhost, &user, t)).await?;
    Ok(super::created_status(!existed))
}

pub(crate) async fn topic_delete(
    State(b): State<AppState>,
    _: Administrator,
    Path((vhost, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if !super::durably(&b.store, b.remove_topic_permissions(&vhost, &user)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
