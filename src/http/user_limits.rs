//! `/api/user-limits[/{user}[/{name}]]`: RabbitMQ's per-user `max-connections` and
//! `max-channels` (enforced at connection.open and channel.open). Any management user reads
//! its own, administrators read all and write.

use super::{Administrator, ApiError, AppState, Authenticated};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

const NAMES: [&str; 2] = ["max-connections", "max-channels"];

fn bad_request(reason: impl Into<Value>) -> ApiError {
    ApiError::with_reason(StatusCode::BAD_REQUEST, "bad_request", reason.into())
}

fn listed(b: &AppState, keep: impl Fn(&str) -> bool) -> Json<Value> {
    Json(Value::Array(
        b.user_limits()
            .into_iter()
            .filter(|(u, _)| keep(u))
            .map(|(user, value)| json!({"user": user, "value": value}))
            .collect(),
    ))
}

fn is_admin(u: &crate::auth::User) -> bool {
    u.tags.iter().any(|t| t == "administrator")
}

pub(crate) async fn list(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
) -> Json<Value> {
    listed(&b, |name| is_admin(&u) || name == u.name)
}

pub(crate) async fn of_user(
    State(b): State<AppState>,
    Authenticated(u): Authenticated,
    Path(user): Path<String>,
) -> Result<Json<Value>, ApiError> {
    b.user(&user).ok_or_else(ApiError::not_found)?;
    if !is_admin(&u) && user != u.name {
        return Err(ApiError::not_permitted());
    }
    Ok(listed(&b, |name| name == user))
}

pub(crate) async fn put(
    State(b): State<AppState>,
    _: Administrator,
    Path((user, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    let value = body.get("value").cloned().unwrap_or(Value::Null);
    if !NAMES.contains(&name.as_str()) {
        let shown = match &value {
            Value::String(s) => format!("<<\"{s}\">>"),
            other => other.to_string(),
        };
        return Err(bad_request(format!(
            "Unrecognised terms [{{<<\"{name}\">>,{shown}}}] in user-limits"
        )));
    }
    let n = value.as_i64().ok_or_else(|| {
        let shown = match &value {
            Value::String(s) => format!("<<\"{s}\">>"),
            other => other.to_string(),
        };
        bad_request(format!("{name} should be a number, actually was {shown}"))
    })?;
    if !super::durably(&b.store, b.save_user_limit(&user, &name, Some(n))).await? {
        return Err(bad_request(json!(["no_such_user", user])));
    }
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Administrator,
    Path((user, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    if !super::durably(&b.store, b.save_user_limit(&user, &name, None)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
