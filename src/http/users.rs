//! `/api/users` and `/api/users/{name}`: list, show, create or update (password, or a
//! `password_hash` with its `hashing_algorithm`, as RabbitMQ's definitions carry them) and
//! delete. Administrator only, as in RabbitMQ.

use super::{Administrator, ApiError, AppState};
use crate::auth::{hash_password, Hashing, User};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// A user as the API shows it.
pub(crate) fn user_json(b: &AppState, u: &User) -> Value {
    let limits = b
        .user_limits()
        .into_iter()
        .find(|(n, _)| *n == u.name)
        .map(|(_, l)| l)
        .unwrap_or_default();
    json!({
        "name": u.name,
        "password_hash": u.password_hash(),
        "hashing_algorithm": u.hashing.name(),
        "tags": u.tags,
        "limits": limits,
    })
}

pub(crate) async fn list(State(b): State<AppState>, _: Administrator) -> Json<Value> {
    let mut users = b.users();
    users.sort_by(|a, b| a.name.cmp(&b.name));
    Json(Value::Array(
        users.iter().map(|u| user_json(&b, u)).collect(),
    ))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let u = b.user(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(user_json(&b, &u)))
}

/// Tags as a comma-separated string or a list (RabbitMQ takes both).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Tags {
    List(Vec<String>),
    Text(String),
}

impl Tags {
    fn into_vec(self) -> Vec<String> {
        let list = match self {
            Tags::List(l) => l,
            Tags::Text(t) => t.split(',').map(str::to_owned).collect(),
        };
        list.into_iter()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect()
    }
}

/// Body of PUT /api/users/{name}.
#[derive(Debug, Deserialize)]
pub(crate) struct UserBody {
    password: Option<String>,
    password_hash: Option<String>,
    hashing_algorithm: Option<String>,
    tags: Option<Tags>,
}

fn bad_request(reason: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
}

pub(crate) async fn put(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
    Json(body): Json<UserBody>,
) -> Result<StatusCode, ApiError> {
    let existing = b.user(&name);
    let tags: Vec<String> = match body.tags {
        Some(t) => t.into_vec(),
        None => existing
            .as_ref()
            .map(|u| u.tags.clone())
            .unwrap_or_default(),
    };
    let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
    let hashing = match body.hashing_algorithm.as_deref() {
        None => Hashing::Sha256,
        Some(h) => Hashing::from_name(h)
            .ok_or_else(|| bad_request(format!("unknown hashing algorithm {h}")))?,
    };
    let user = match (body.password, body.password_hash) {
        (Some(p), _) => User::with_hash(&name, &hash_password(&p), &tags),
        (None, Some(h)) => User::with_hashing(&name, &h, hashing, &tags),
        // Neither: an existing user keeps its password, a new one has none (EXTERNAL only).
        (None, None) => match &existing {
            Some(u) => User::with_hashing(&name, &u.password_hash(), u.hashing, &tags),
            None => User::with_hashing(&name, "", hashing, &tags),
        },
    }
    .ok_or_else(|| bad_request("invalid password_hash"))?;
    let created = super::durably(&b.store, b.save_user(user)).await?;
    Ok(super::created_status(created))
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !super::durably(&b.store, b.remove_user(&name)).await? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
