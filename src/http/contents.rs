//! A queue's contents over the API: `DELETE /api/queues/{vhost}/{name}/contents` purges,
//! `POST /api/queues/{vhost}/{name}/get` takes up to `count` messages and settles them per
//! `ackmode` (requeue, ack, or reject into the dead-letter path), returning them in RabbitMQ's
//! shape with the payload as a string or base64 (`encoding`), cut at `truncate` bytes;
//! `GET .../peek` (Warren's) shows the head of the queue without taking anything.

use super::access::Actor;
use super::{ApiError, AppState};
use crate::error::Kind;
use crate::json::table_json;
use crate::message::Message;
use crate::permissions::Access;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

pub(crate) async fn purge(
    State(b): State<AppState>,
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(&b, &v.name, Access::Read, Kind::Queue, &name)?;
    let q = b
        .find_queue(&v, &name)
        .await
        .map_err(|_| ApiError::not_found())?;
    q.purge().await.map_err(ApiError::from)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Body of POST .../get.
#[derive(Debug, Deserialize)]
pub(crate) struct GetBody {
    #[serde(deserialize_with = "super::lenient::u32")]
    count: u32,
    ackmode: String,
    encoding: String,
    #[serde(default, deserialize_with = "super::lenient::opt_usize")]
    truncate: Option<usize>,
}

fn properties_json(m: &Message) -> Value {
    let p = m.properties();
    let mut o = Map::new();
    let mut put = |k: &str, v: Value| {
        o.insert(k.to_owned(), v);
    };
    if let Some(v) = p.content_type() {
        put("content_type", json!(v.as_str()));
    }
    if let Some(v) = p.content_encoding() {
        put("content_encoding", json!(v.as_str()));
    }
    if let Some(v) = p.headers() {
        put("headers", table_json(v));
    }
    if let Some(v) = p.delivery_mode() {
        put("delivery_mode", json!(v));
    }
    if let Some(v) = p.priority() {
        put("priority", json!(v));
    }
    if let Some(v) = p.correlation_id() {
        put("correlation_id", json!(v.as_str()));
    }
    if let Some(v) = p.reply_to() {
        put("reply_to", json!(v.as_str()));
    }
    if let Some(v) = p.expiration() {
        put("expiration", json!(v.as_str()));
    }
    if let Some(v) = p.message_id() {
        put("message_id", json!(v.as_str()));
    }
    if let Some(v) = p.timestamp() {
        put("timestamp", json!(v));
    }
    if let Some(v) = p.kind() {
        put("type", json!(v.as_str()));
    }
    if let Some(v) = p.user_id() {
        put("user_id", json!(v.as_str()));
    }
    if let Some(v) = p.app_id() {
        put("app_id", json!(v.as_str()));
    }
    Value::Object(o)
}

/// Query of GET .../peek.
#[derive(Debug, Deserialize)]
pub(crate) struct PeekQuery {
    #[serde(default, deserialize_with = "super::lenient::opt_usize")]
    count: Option<usize>,
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default, deserialize_with = "super::lenient::opt_usize")]
    truncate: Option<usize>,
}

/// Most messages one peek returns.
const MAX_PEEK: usize = 500;

/// A message in the shape `get` and `peek` return it: the payload as a string where it is
/// UTF-8 and `base64` is not asked for, else base64, cut at `truncate` bytes.
fn message_json(msg: &Message, redelivered: bool, truncate: Option<usize>, base64: bool) -> Value {
    let body = msg.body();
    let shown = &body[..body.len().min(truncate.unwrap_or(usize::MAX))];
    let (payload, encoding) = match (base64, std::str::from_utf8(shown)) {
        (false, Ok(s)) => (s.to_owned(), "string"),
        _ => {
            use base64::Engine;
            (
                base64::engine::general_purpose::STANDARD.encode(shown),
                "base64",
            )
        }
    };
    json!({
        "payload_bytes": body.len(),
        "redelivered": redelivered,
        "exchange": msg.exchange.as_str(),
        "routing_key": msg.routing_key.as_str(),
        "properties": properties_json(msg),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

/// `GET /api/queues/{vhost}/{name}/peek?count=&encoding=&truncate=`: Warren's addition, the
/// first `count` (default 1, at most 500) ready messages in delivery order in `get`'s shape,
/// left where they are: not taken, requeued, redelivered or reordered. Needs read permission
/// on the queue, as `get` does.
pub(crate) async fn peek(
    State(b): State<AppState>,
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<PeekQuery>,
) -> Result<Json<Value>, ApiError> {
    let bad = |r: &str| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", r.to_owned());
    let base64 = match q.encoding.as_deref().unwrap_or("auto") {
        "auto" => false,
        "base64" => true,
        _ => return Err(bad("invalid encoding")),
    };
    let count = q.count.unwrap_or(1);
    if !(1..=MAX_PEEK).contains(&count) {
        return Err(bad(&format!("count must be between 1 and {MAX_PEEK}")));
    }
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(&b, &v.name, Access::Read, Kind::Queue, &name)?;
    let queue = b
        .find_queue(&v, &name)
        .await
        .map_err(|_| ApiError::not_found())?;
    let peeked = queue
        .peek(count as u32)
        .await
        .map_err(|e| ApiError::quoting_reply(&e))?;
    let out = peeked
        .iter()
        .map(|p| message_json(&p.msg, p.redelivered, q.truncate, base64))
        .collect();
    Ok(Json(Value::Array(out)))
}

pub(crate) async fn get(
    State(b): State<AppState>,
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<GetBody>,
) -> Result<Json<Value>, ApiError> {
    let bad = |r: &str| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", r.to_owned());
    let settle = match body.ackmode.as_str() {
        "ack_requeue_true" | "reject_requeue_true" => 0,
        "ack_requeue_false" => 1,
        "reject_requeue_false" => 2,
        _ => return Err(bad("invalid ackmode")),
    };
    let base64 = match body.encoding.as_str() {
        "auto" => false,
        "base64" => true,
        _ => return Err(bad("invalid encoding")),
    };
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(&b, &v.name, Access::Read, Kind::Queue, &name)?;
    let q = b
        .find_queue(&v, &name)
        .await
        .map_err(|_| ApiError::not_found())?;
    let mut taken = Vec::new();
    let mut out = Vec::new();
    for _ in 0..body.count {
        let Some(got) = q.get(false).await.map_err(ApiError::from)? else {
            break;
        };
        let mut shown = message_json(&got.msg, got.redelivered, body.truncate, base64);
        shown["message_count"] = json!(got.remaining);
        out.push(shown);
        taken.push(got.seq);
    }
    match settle {
        0 => q.requeue(taken).await,
        1 => q.ack(taken).await,
        _ => q.discard(taken).await,
    }
    Ok(Json(Value::Array(out)))
}
