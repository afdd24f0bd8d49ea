//! `POST /api/exchanges/{vhost}/{name}/publish`: a message published through the core's one
//! publish path as the API user, with the checks and behaviour of an AMQP publish (write and
//! topic permissions, internal exchanges, delayed exchanges, direct reply-to) and answered only
//! once its persistent copies are stored. Channel-style refusals are RabbitMQ's 400 with the
//! AMQP code and text as the reason.

use super::exchanges::url_name;
use super::queues::json_table;
use super::{ApiError, AppState, Authenticated};
use crate::vhost::publish::{self, PublishContext, RouteState, Waiters};
use amq_protocol::protocol::BasicProperties;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

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
    Authenticated(user): Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    Json(body): Json<PublishBody>,
) -> Result<Json<Value>, ApiError> {
    use base64::Engine;
    let v = super::vhost_of(&b, &vhost).await?;
    let x = v
        .exchange(url_name(&name))
        .map_err(|_| ApiError::not_found())?;
    publish::authorize_write(&b.permissions, &v.name, &user.name, &x.name)
        .map_err(|e| ApiError::quoting_reply(&e))?;
    let topics = b.permissions.topics(&v.name, &user.name);
    v.check_publish(
        &x,
        &user.name,
        topics.as_deref().map(Vec::as_slice),
        &body.routing_key,
    )
    .map_err(|e| ApiError::quoting_reply(&e))?;
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
    if let Some(mode) = body
        .properties
        .get("delivery_mode")
        .and_then(super::lenient::as_u64)
    {
        props = props.with_delivery_mode(mode.min(2) as u8);
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
        crate::shortstr::short(&x.name),
        crate::shortstr::short(&body.routing_key),
        Bytes::from(data),
        raw.len(),
        &props,
    ));
    let ctx = PublishContext {
        delayer: b.delayer(),
        replies: Some(b.reply_targets()),
        dead_letter: false,
    };
    let mut waiters = Waiters::default();
    let routed = b
        .publish(&v, &x, msg, ctx, &mut waiters, &mut RouteState::default())
        .await;
    // Answered once stored, as an AMQP publisher's confirm.
    if !waiters.stored().await {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_server_error",
            "the message could not be stored",
        ));
    }
    Ok(Json(json!({ "routed": routed.routed() })))
}
