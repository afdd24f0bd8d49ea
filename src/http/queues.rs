//! `/api/queues[/{vhost}[/{name}]]`: list, show, declare (PUT) and delete, through the same vhost
//! operations as AMQP.

use super::{ApiError, AppState, Authenticated};
use crate::queue::QueueRef;
use crate::vhost::QueueOptions;
use amq_protocol::types::FieldTable;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Connection id the HTTP API acts as (it owns no exclusive queue).
const HTTP_CONNECTION: u64 = 0;

async fn describe(q: &QueueRef, node: &str) -> Value {
    let info = q.info().await.unwrap_or_default();
    describe_with(q, &info, node)
}

fn describe_with(q: &QueueRef, info: &crate::queue::QueueInfo, node: &str) -> Value {
    let arguments = table_json(&q.arguments);
    let applied = q.applied();
    json!({
        "policy": applied.policy.as_ref().map(|p| p.name.as_str()),
        "operator_policy": applied.operator_policy.as_ref().map(|p| p.name.as_str()),
        "effective_policy_definition": applied.definition,
        "name": q.name,
        "node": q.home.as_deref().unwrap_or(node),
        "vhost": q.vhost,
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner.is_some(),
        "arguments": arguments,
        "type": if q.args.quorum { "quorum" } else { "classic" },
        "state": "running",
        "messages": info.messages_ready + info.messages_unacknowledged,
        "messages_ready": info.messages_ready,
        "messages_unacknowledged": info.messages_unacknowledged,
        "messages_ram": info.messages_ram,
        "message_bytes": info.message_bytes_ready + info.message_bytes_unacknowledged,
        "message_bytes_ready": info.message_bytes_ready,
        "message_bytes_unacknowledged": info.message_bytes_unacknowledged,
        "message_bytes_ram": info.message_bytes_ram,
        "messages_paged_out": info.messages_paged_out,
        "message_bytes_paged_out": info.message_bytes_paged_out,
        "memory": info.memory,
        "consumers": info.consumers,
        "consumer_utilisation": info.consumer_utilisation,
        "consumer_capacity": info.consumer_utilisation,
        "idle_since": idle_since(info.last_activity),
        "head_message_timestamp": info.head_message_timestamp,
        "message_stats": message_stats_json(&info.message_stats),
    })
}

/// A queue without activity for this long shows `idle_since`, as RabbitMQ shows it for a queue
/// process gone idle.
const IDLE_AFTER_MS: u64 = 10_000;

fn idle_since(last_activity: u64) -> Option<String> {
    let now = crate::clock::unix_ms();
    (now.saturating_sub(last_activity) >= IDLE_AFTER_MS)
        .then(|| crate::json::rfc3339_ms(last_activity))
}

/// RabbitMQ's `message_stats`: each total with a `*_details.rate`, plus `deliver_get`.
pub(crate) fn message_stats_json(s: &crate::queue::stats::MessageStats) -> Value {
    let mut m = serde_json::Map::new();
    for (i, name) in crate::queue::stats::NAMES.iter().enumerate() {
        m.insert((*name).into(), json!(s.counts[i]));
        m.insert(format!("{name}_details"), json!({"rate": s.rates[i]}));
    }
    // deliver_get sums deliver, deliver_no_ack, get and get_no_ack (indices 1 to 4).
    let total: u64 = s.counts[1..=4].iter().sum();
    let rate: f64 = s.rates[1..=4].iter().sum();
    m.insert("deliver_get".into(), json!(total));
    m.insert("deliver_get_details".into(), json!({"rate": rate}));
    Value::Object(m)
}

/// A field table as JSON.
pub(crate) fn table_json(t: &FieldTable) -> Value {
    crate::json::table_json(t)
}

/// JSON arguments as a field table (400 on values AMQP cannot carry).
pub(crate) fn json_table(args: &HashMap<String, Value>) -> Result<FieldTable, ApiError> {
    crate::json::json_table(args.iter())
        .map_err(|reason| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason))
}

async fn list(queues: Vec<QueueRef>, node: &str) -> Json<Value> {
    let mut queues = queues;
    queues.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let infos = crate::queue::QueueShared::info_many(&queues).await;
    let mut out = Vec::with_capacity(queues.len());
    for (q, info) in queues.iter().zip(&infos) {
        out.push(describe_with(q, info, node));
    }
    Json(Value::Array(out))
}

pub(crate) async fn list_all(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let node = super::node_name(&b);
    list(b.vhosts().iter().flat_map(|v| v.queues()).collect(), &node).await
}

pub(crate) async fn list_vhost(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    Ok(list(v.queues(), &super::node_name(&b)).await)
}

pub(crate) async fn show(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let q = b
        .find_queue(&v, &name)
        .await
        .map_err(|_| ApiError::not_found())?;
    Ok(Json(describe(&q, &super::node_name(&b)).await))
}

/// Body of PUT /api/queues/{vhost}/{name}.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeclareBody {
    #[serde(default, deserialize_with = "super::lenient::opt_bool")]
    durable: Option<bool>,
    #[serde(default, deserialize_with = "super::lenient::bool")]
    auto_delete: bool,
    #[serde(default)]
    arguments: HashMap<String, Value>,
}

pub(crate) async fn declare(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    body: Option<Json<DeclareBody>>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let body = body.map(|Json(b)| b).unwrap_or_default();
    let arguments = json_table(&body.arguments)?;
    let existed = v.queue(&name).is_ok();
    let options = QueueOptions {
        durable: body.durable.unwrap_or(true),
        auto_delete: body.auto_delete,
        arguments,
        ..QueueOptions::default()
    };
    super::durably(
        &v.store,
        b.declare_queue(&v, &name, &options, HTTP_CONNECTION),
    )
    .await
    .map_err(ApiError::from)?;
    Ok(super::created_status(!existed))
}

/// Query of DELETE /api/queues/{vhost}/{name}.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(rename = "if-unused", default)]
    if_unused: Option<String>,
    #[serde(rename = "if-empty", default)]
    if_empty: Option<String>,
}

pub(crate) async fn delete(
    State(b): State<AppState>,
    _: Authenticated,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    b.find_queue(&v, &name)
        .await
        .map_err(|_| ApiError::not_found())?;
    let flag = |f: &Option<String>| f.as_deref() == Some("true");
    b.delete_queue(
        &v,
        &name,
        flag(&q.if_unused),
        flag(&q.if_empty),
        HTTP_CONNECTION,
    )
    .await
    .map_err(ApiError::from)?;
    Ok(StatusCode::NO_CONTENT)
}
