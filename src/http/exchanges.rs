//! `/api/exchanges[/{vhost}[/{name}]]` (list, show, PUT declare, DELETE), `.../publish`, and the
//! bindings endpoints (`/api/bindings[/{vhost}]`, `/api/bindings/{vhost}/e/{x}/q/{q}`,
//! `.../bindings/source`, `/api/queues/{vhost}/{q}/bindings`).

use super::queues::{bad_request, json_table, table_json};
use super::{ApiError, AppState, Authenticated};
use crate::exchange::{Destination, Exchange};
use crate::vhost::{ExchangeOptions, VHost};
use amq_protocol::protocol::BasicProperties;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// RabbitMQ's name for the default exchange in URLs.
const DEFAULT_NAME: &str = "amq.default";

fn url_name(name: &str) -> &str {
    if name == DEFAULT_NAME {
        ""
    } else {
        name
    }
}

fn describe(v: &VHost, x: &Exchange) -> Value {
    json!({
        "name": x.name,
        "vhost": v.name,
        "type": x.type_name(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_json(&x.arguments),
    })
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
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    Ok(Json(Value::Array(exchanges_of(&v))))
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let x = v
        .exchange(url_name(&name))
        .map_err(|_| ApiError::not_found())?;
    Ok(Json(describe(&v, &x)))
}

/// Body of PUT /api/exchanges/{vhost}/{name}.
#[derive(Debug, Deserialize)]
pub(crate) struct DeclareBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    durable: Option<bool>,
    #[serde(default)]
    auto_delete: bool,
    #[serde(default)]
    internal: bool,
    #[serde(default)]
    arguments: HashMap<String, Value>,
}

pub(crate) async fn declare(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<DeclareBody>,
) -> Result<StatusCode, ApiError> {
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let existed = v.exchange(&name).is_ok();
    let options = ExchangeOptions {
        passive: false,
        durable: body.durable.unwrap_or(true),
        auto_delete: body.auto_delete,
        internal: body.internal,
        arguments: json_table(&body.arguments)?,
    };
    let mark = v.store.submitted();
    v.exchange_declare(&name, &body.kind, &options)
        .map_err(bad_request)?;
    v.store.sync_since(mark).await;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// Query of DELETE /api/exchanges/{vhost}/{name}.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(rename = "if-unused", default)]
    if_unused: Option<String>,
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    v.exchange(url_name(&name))
        .map_err(|_| ApiError::not_found())?;
    let mark = v.store.submitted();
    v.exchange_delete(url_name(&name), q.if_unused.as_deref() == Some("true"))
        .map_err(bad_request)?;
    v.store.sync_since(mark).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Body of POST .../publish.
#[derive(Debug, Deserialize)]
pub(crate) struct PublishBody {
    routing_key: String,
    payload: String,
    #[serde(default)]
    payload_encoding: Option<String>,
    #[serde(default)]
    properties: HashMap<String, Value>,
}

pub(crate) async fn publish(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<PublishBody>,
) -> Result<Json<Value>, ApiError> {
    use base64::Engine;
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let x = v
        .exchange(url_name(&name))
        .map_err(|_| ApiError::not_found())?;
    let payload = match body.payload_encoding.as_deref() {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(&body.payload)
            .map_err(|_| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    "payload is not base64",
                )
            })?,
        _ => body.payload.into_bytes(),
    };
    let mut props = BasicProperties::default();
    if let Some(Value::Number(n)) = body.properties.get("delivery_mode") {
        props = props.with_delivery_mode(n.as_u64().unwrap_or(1) as u8);
    }
    if let Some(Value::Object(h)) = body.properties.get("headers") {
        let h: HashMap<String, Value> = h.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        props = props.with_headers(json_table(&h)?);
    }
    let raw = cookie_factory::gen_simple(
        amq_protocol::protocol::basic::gen_properties(&props),
        Vec::new(),
    )
    .unwrap_or_default();
    let mut data = raw.clone();
    data.extend_from_slice(&payload);
    let msg = Arc::new(crate::message::Message::new(
        x.name.as_str().into(),
        body.routing_key.as_str().into(),
        Bytes::from(data),
        raw.len(),
        &props,
    ));
    let (msg, extra) = msg.sender_selected();
    let mut targets = Vec::new();
    v.route(&x, &msg, &extra, &mut targets);
    let routed = !targets.is_empty();
    for q in targets {
        q.publish(msg.clone(), None).await;
    }
    Ok(Json(json!({ "routed": routed })))
}

fn binding_json(
    v: &VHost,
    source: &str,
    dest: &Destination,
    key: &str,
    args: &amq_protocol::types::FieldTable,
) -> Value {
    let (destination, kind) = match dest {
        Destination::Queue(q) => (q.name.clone(), "queue"),
        Destination::Exchange(x) => (x.clone(), "exchange"),
    };
    let properties_key = if args.inner().is_empty() {
        if key.is_empty() {
            "~".to_owned()
        } else {
            key.to_owned()
        }
    } else {
        use base64::Engine;
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(crate::store::schema::encode_table(args));
        format!(
            "{key}~{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..9])
        )
    };
    json!({
        "source": source,
        "vhost": v.name,
        "destination": destination,
        "destination_type": kind,
        "routing_key": key,
        "arguments": table_json(args),
        "properties_key": properties_key,
    })
}

/// Every binding of a vhost, the default exchange's implicit ones first, as RabbitMQ lists them.
fn bindings_of(v: &VHost) -> Vec<Value> {
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
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    Ok(Json(Value::Array(bindings_of(&v))))
}

pub(crate) async fn queue_bindings(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    v.queue(&name).map_err(|_| ApiError::not_found())?;
    let all = bindings_of(&v);
    Ok(Json(Value::Array(
        all.into_iter()
            .filter(|b| b["destination_type"] == "queue" && b["destination"] == name.as_str())
            .collect(),
    )))
}

/// Body of POST /api/bindings/{vhost}/e/{x}/q/{q}.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BindBody {
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    arguments: HashMap<String, Value>,
}

pub(crate) async fn bind_queue(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, exchange, queue)): Path<(String, String, String)>,
    body: Option<Json<BindBody>>,
) -> Result<Response, ApiError> {
    let v = b.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let args = json_table(&body.arguments)?;
    let mark = v.store.submitted();
    v.queue_bind(&queue, url_name(&exchange), &body.routing_key, &args, 0)
        .map_err(|e| {
            if e.code == 404 {
                ApiError::not_found()
            } else {
                bad_request(e)
            }
        })?;
    v.store.sync_since(mark).await;
    let key = if body.routing_key.is_empty() {
        "~".to_owned()
    } else {
        body.routing_key.clone()
    };
    let location = format!(
        "/api/bindings/{}/e/{exchange}/q/{queue}/{key}",
        vhost.replace('/', "%2F")
    );
    Ok((StatusCode::CREATED, [(header::LOCATION, location)]).into_response())
}
