//! `/api/bindings[...]`: every binding (the default exchange's implicit ones included, as
//! RabbitMQ lists them), bindings between one exchange and one queue or exchange, POST to
//! bind (answered with a `Location` naming the binding by its properties key), and GET or
//! DELETE of one binding by that key; plus an exchange's bindings as source or destination.

use super::access::Actor;
use super::exchanges::{url_name, DEFAULT_NAME};
use super::queues::{json_table, table_json};
use super::{ApiError, AppState, Authenticated};
use crate::error::Kind;
use crate::exchange::Destination;
use crate::permissions::Access;
use crate::vhost::VHost;
use amq_protocol::types::FieldTable;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The key that names a binding in URLs: the routing key ("~" when empty), followed by "~" and
/// a digest of the arguments when there are any.
pub(crate) fn properties_key(key: &str, args: &FieldTable) -> String {
    if args.inner().is_empty() {
        if key.is_empty() {
            "~".to_owned()
        } else {
            key.to_owned()
        }
    } else {
        use base64::Engine;
        use sha2::{Digest, Sha256};
        // The arguments in AMQP wire form (a field table's keys are sorted, so it is canonical).
        let wire = cookie_factory::gen_simple(
            amq_protocol::types::generation::gen_field_table(args),
            Vec::new(),
        )
        .unwrap_or_default();
        let digest = Sha256::digest(wire);
        format!(
            "{key}~{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..9])
        )
    }
}

fn binding_json(
    v: &VHost,
    source: &str,
    dest: &Destination,
    key: &str,
    args: &FieldTable,
) -> Value {
    let (destination, kind) = match dest {
        Destination::Queue(q) => (q.name.clone(), "queue"),
        Destination::Exchange(x) => (x.clone(), "exchange"),
    };
    json!({
        "source": source,
        "vhost": v.name,
        "destination": destination,
        "destination_type": kind,
        "routing_key": key,
        "arguments": table_json(args),
        "properties_key": properties_key(key, args),
    })
}

/// Every binding of a vhost, the default exchange's implicit ones first.
pub(crate) fn bindings_of(v: &VHost) -> Vec<Value> {
    let mut out = Vec::new();
    let mut queues = v.queues();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    for q in &queues {
        out.push(binding_json(
            v,
            "",
            &Destination::Queue(q.clone()),
            &q.name,
            &Default::default(),
        ));
    }
    let mut xs = v.exchanges();
    xs.sort_by(|a, b| a.name.cmp(&b.name));
    for x in xs {
        for bd in x.bindings().list() {
            out.push(binding_json(
                v,
                &x.name,
                &bd.destination,
                &bd.key,
                &bd.arguments,
            ));
        }
    }
    out
}

pub(crate) async fn bindings_all(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    Json(Value::Array(
        b.vhosts().iter().flat_map(|v| bindings_of(v)).collect(),
    ))
}

pub(crate) async fn bindings_vhost(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    Ok(Json(Value::Array(bindings_of(&v))))
}

fn filtered(v: &VHost, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
    bindings_of(v).into_iter().filter(|b| keep(b)).collect()
}

pub(crate) async fn queue_bindings(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    v.queue(&name).map_err(|_| ApiError::not_found())?;
    Ok(Json(Value::Array(filtered(&v, |b| {
        b["destination_type"] == "queue" && b["destination"] == name.as_str()
    }))))
}

/// `/api/exchanges/{vhost}/{name}/bindings/source` and `.../destination`.
pub(crate) async fn exchange_bindings(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name, side)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let x = url_name(&name);
    b.find_exchange(&v, x)
        .await
        .map_err(|_| ApiError::not_found())?;
    let list = match side.as_str() {
        "source" => filtered(&v, |b| b["source"] == x),
        "destination" => filtered(&v, |b| {
            b["destination_type"] == "exchange" && b["destination"] == x
        }),
        _ => return Err(ApiError::not_found()),
    };
    Ok(Json(Value::Array(list)))
}

/// The kind of destination in a binding path: `q` or `e`.
fn destination_kind(kind: &str) -> Result<&'static str, ApiError> {
    match kind {
        "q" => Ok("queue"),
        "e" => Ok("exchange"),
        _ => Err(ApiError::not_found()),
    }
}

/// A binding needs write on its destination and read on its source, as queue.bind and
/// exchange.bind do.
fn authorize_binding(
    actor: &Actor,
    b: &AppState,
    vhost: &str,
    source: &str,
    kind_name: &str,
    dest: &str,
) -> Result<(), ApiError> {
    let dest_kind = if kind_name == "queue" {
        Kind::Queue
    } else {
        Kind::Exchange
    };
    actor.authorize(b, vhost, Access::Write, dest_kind, dest)?;
    actor.authorize(b, vhost, Access::Read, Kind::Exchange, source)
}

fn between(v: &VHost, source: &str, kind: &str, dest: &str) -> Vec<Value> {
    let source = url_name(source);
    filtered(v, |b| {
        b["source"] == source && b["destination_type"] == kind && b["destination"] == dest
    })
}

/// GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}.
pub(crate) async fn list_between(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, source, kind, dest)): Path<(String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let kind = destination_kind(&kind)?;
    Ok(Json(Value::Array(between(&v, &source, kind, &dest))))
}

/// Body of POST /api/bindings/{vhost}/e/{x}/{q|e}/{destination}.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BindBody {
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    arguments: HashMap<String, Value>,
}

pub(crate) async fn bind(
    State(b): State<AppState>,
    actor: Actor,
    Path((vhost, source, kind, dest)): Path<(String, String, String, String)>,
    body: Option<Json<BindBody>>,
) -> Result<Response, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let kind_name = destination_kind(&kind)?;
    authorize_binding(&actor, &b, &v.name, url_name(&source), kind_name, &dest)?;
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let args = json_table(&body.arguments)?;
    let r = super::durably(&v.store, async {
        if kind_name == "queue" {
            b.bind_queue(&v, &dest, url_name(&source), &body.routing_key, &args, 0)
                .await
        } else {
            b.bind_exchange(&v, &dest, url_name(&source), &body.routing_key, &args)
                .await
        }
    })
    .await;
    r.map_err(ApiError::from)?;
    let location = format!(
        "/api/bindings/{}/e/{source}/{kind}/{dest}/{}",
        vhost.replace('/', "%2F"),
        properties_key(&body.routing_key, &args)
    );
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}

async fn find(
    b: &AppState,
    (vhost, source, kind, dest, props): &(String, String, String, String, String),
) -> Result<(std::sync::Arc<VHost>, Value), ApiError> {
    let v = super::vhost_of(b, vhost).await?;
    let kind = destination_kind(kind)?;
    let found = between(&v, source, kind, dest)
        .into_iter()
        .find(|b| b["properties_key"] == props.as_str())
        .ok_or_else(ApiError::not_found)?;
    Ok((v, found))
}

/// GET one binding by its properties key.
pub(crate) async fn show(
    State(b): State<AppState>,
    _: Authenticated,
    Path(path): Path<(String, String, String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(find(&b, &path).await?.1))
}

/// DELETE one binding by its properties key.
pub(crate) async fn unbind(
    State(b): State<AppState>,
    actor: Actor,
    Path(path): Path<(String, String, String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let (v, found) = find(&b, &path).await?;
    let source = url_name(&path.1);
    let kind_name = destination_kind(&path.2)?;
    authorize_binding(&actor, &b, &v.name, source, kind_name, &path.3)?;
    if source.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("bindings of {DEFAULT_NAME} cannot be deleted"),
        ));
    }
    let key = found["routing_key"].as_str().unwrap_or("");
    let args = match found.get("arguments") {
        Some(Value::Object(m)) => crate::json::json_table(m.iter()).unwrap_or_default(),
        _ => FieldTable::default(),
    };
    super::durably(&v.store, async {
        if found["destination_type"] == "queue" {
            b.unbind_queue(&v, &path.3, source, key, &args, 0).await
        } else {
            b.unbind_exchange(&v, &path.3, source, key, &args).await
        }
    })
    .await
    .map_err(ApiError::from)?;
    Ok(StatusCode::NO_CONTENT)
}
