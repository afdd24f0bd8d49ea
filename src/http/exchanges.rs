//! `/api/exchanges[/{vhost}[/{name}]]` (list, show, PUT declare, DELETE) and `.../publish`.

use super::access::Actor;
use super::queues::{json_table, table_json};
use super::{ApiError, AppState, Authenticated};
use crate::error::Kind;
use crate::exchange::Exchange;
use crate::permissions::Access;
use crate::vhost::{ExchangeOptions, VHost};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;

/// RabbitMQ's name for the default exchange in URLs.
pub(crate) const DEFAULT_NAME: &str = "amq.default";

pub(crate) fn url_name(name: &str) -> &str {
    if name == DEFAULT_NAME {
        ""
    } else {
        name
    }
}

fn describe(v: &VHost, x: &Exchange) -> Value {
    let mut out = json!({
        "name": x.name,
        "vhost": v.name,
        "type": x.type_name(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_json(&x.arguments),
    });
    if let Some(p) = x.policy() {
        out["policy"] = p.name.clone().into();
    }
    out
}

fn exchanges_of(v: &VHost) -> Vec<Value> {
    let mut xs = v.exchanges();
    xs.sort_by(|a, b| a.name.cmp(&b.name));
    xs.iter().map(|x| describe(v, x)).collect()
}

pub(crate) async fn list_all(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    Json(Value::Array(
        b.vhosts().iter().flat_map(|v| exchanges_of(v)).collect(),
    ))
}

pub(crate) async fn list_vhost(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    Ok(Json(Value::Array(exchanges_of(&v))))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let x = b
        .find_exchange(&v, url_name(&name))
        .await
        .map_err(|_| ApiError::not_found())?;
    Ok(Json(describe(&v, &x)))
}

/// Body of PUT /api/exchanges/{vhost}/{name}.
#[derive(Debug, Deserialize)]
pub(crate) struct DeclareBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, deserialize_with = "super::lenient::opt_bool")]
    durable: Option<bool>,
    #[serde(default, deserialize_with = "super::lenient::bool")]
    auto_delete: bool,
    #[serde(default, deserialize_with = "super::lenient::bool")]
    internal: bool,
    #[serde(default)]
    arguments: HashMap<String, Value>,
}

pub(crate) async fn declare(
    State(b): State<AppState>,
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<DeclareBody>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(&b, &v.name, Access::Configure, Kind::Exchange, &name)?;
    let existed = v.exchange(&name).is_ok();
    let options = ExchangeOptions {
        passive: false,
        durable: body.durable.unwrap_or(true),
        auto_delete: body.auto_delete,
        internal: body.internal,
        arguments: json_table(&body.arguments)?,
    };
    super::durably(&v.store, async {
        b.declare_exchange(&v, &name, &body.kind, &options).await
    })
    .await
    .map_err(ApiError::from)?;
    Ok(super::created_status(!existed))
}

/// Query of DELETE /api/exchanges/{vhost}/{name}.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(rename = "if-unused", default)]
    if_unused: Option<String>,
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(
        &b,
        &v.name,
        Access::Configure,
        Kind::Exchange,
        url_name(&name),
    )?;
    b.find_exchange(&v, url_name(&name))
        .await
        .map_err(|_| ApiError::not_found())?;
    let if_unused = q.if_unused.as_deref() == Some("true");
    super::durably(&v.store, async {
        b.delete_exchange(&v, url_name(&name), if_unused).await
    })
    .await
    .map_err(ApiError::from)?;
    Ok(StatusCode::NO_CONTENT)
}
