//! A queue's contents over the API: `DELETE /api/queues/{vhost}/{name}/contents` purges,
//! `POST /api/queues/{vhost}/{name}/get` takes up to `count` messages and settles them per
//! `ackmode` (requeue, ack, or reject into the dead-letter path), returning them in RabbitMQ's
//! shape with the payload as a string or base64 (`encoding`), cut at `truncate` bytes.

use super::{ApiError, AppState, Authenticated};
use crate::json::table_json;
use crate::message::Message;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

pub(crate) async fn purge(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
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

pub(crate) async fn get(
    State(b): State<AppState>,
    _: Authenticated,
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
        let body_bytes = got.msg.body();
        let shown = &body_bytes[..body_bytes.len().min(body.truncate.unwrap_or(usize::MAX))];
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
        out.push(json!({
            "payload_bytes": body_bytes.len(),
            "redelivered": got.redelivered,
            "exchange": got.msg.exchange.as_str(),
            "routing_key": got.msg.routing_key.as_str(),
            "message_count": got.remaining,
            "properties": properties_json(&got.msg),
            "payload": payload,
            "payload_encoding": encoding,
        }));
        taken.push(got.seq);
    }
    match settle {
        0 => q.requeue(taken).await,
        1 => q.ack(taken).await,
        _ => q.discard(taken).await,
    }
    Ok(Json(Value::Array(out)))
}
