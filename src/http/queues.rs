//! `/api/queues[/{vhost}[/{name}]]`: list, show, declare (PUT) and delete, through the same vhost
//! operations as AMQP. Another node's queue is shown as its home node renders it (its policy,
//! message rates and counters), asked through the cluster's views.

use super::access::Actor;
use super::{ApiError, AppState, Authenticated};
use crate::error::Kind;
use crate::permissions::Access;
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

async fn describe(b: &AppState, q: &QueueRef) -> Value {
    let info = q.info().await.unwrap_or_default();
    rendered(b, q, &info, &super::node_name(b))
}

/// `q` in RabbitMQ's JSON with its type's specifics.
fn rendered(b: &AppState, q: &QueueRef, info: &crate::queue::QueueInfo, node: &str) -> Value {
    let v = describe_with(q, info, node);
    match &info.stream {
        Some(log) => with_stream(v, log, q.home.as_deref().unwrap_or(node), info.consumers),
        None => with_quorum(b, q, v),
    }
}

/// A stream's `leader`, `members`, `online`, `readers`, `committed_offset` and `segments` as
/// RabbitMQ 4.x shows them (one member: streams are not replicated yet), and Warren's
/// `first_offset` and `last_offset` (the newest record's; null while empty).
fn with_stream(mut v: Value, log: &crate::queue::StreamOffsets, node: &str, readers: u32) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("leader".into(), json!(node));
        o.insert("members".into(), json!([node]));
        o.insert("online".into(), json!([node]));
        o.insert("readers".into(), json!({ node: readers }));
        o.insert("committed_offset".into(), json!(log.committed_chunk));
        o.insert("segments".into(), json!(log.segments));
        o.insert("first_offset".into(), json!(log.first));
        o.insert(
            "last_offset".into(),
            json!((log.next > log.first).then(|| log.next - 1)),
        );
    }
    v
}

/// A quorum queue's `leader`, `members`, `online` and `state` (`minority` when no majority of
/// its members answers), as RabbitMQ shows them.
fn with_quorum(b: &AppState, q: &QueueRef, mut v: Value) -> Value {
    let status = q
        .args
        .quorum
        .then(|| b.quorum_status(&q.vhost, &q.name))
        .flatten();
    if let (Some(s), Some(o)) = (status, v.as_object_mut()) {
        let state = if s.has_majority() {
            "running"
        } else {
            "minority"
        };
        o.insert("leader".into(), json!(s.leader));
        o.insert("members".into(), json!(s.members));
        o.insert("online".into(), json!(s.online));
        o.insert("state".into(), json!(state));
    }
    v
}

fn describe_with(q: &QueueRef, info: &crate::queue::QueueInfo, node: &str) -> Value {
    let arguments = table_json(&q.arguments);
    let applied = q.applied();
    let mut v = json!({
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
        "type": if q.args.quorum { "quorum" } else if q.args.stream { "stream" } else { "classic" },
        "state": "running",
        "messages": info.messages_ready + info.messages_unacknowledged + info.messages_dlx,
        "messages_ready": info.messages_ready,
        "messages_unacknowledged": info.messages_unacknowledged,
        "messages_ram": info.messages_ram,
        "message_bytes": info.message_bytes_ready
            + info.message_bytes_unacknowledged
            + info.message_bytes_dlx,
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
    });
    if let (true, Some(o)) = (q.args.quorum, v.as_object_mut()) {
        // A quorum queue's dead letters held for their targets (at-least-once), and the
        // delivery limit in force, as RabbitMQ shows them.
        o.insert("messages_dlx".into(), json!(info.messages_dlx));
        o.insert("message_bytes_dlx".into(), json!(info.message_bytes_dlx));
        o.insert("delivery_limit".into(), json!(applied.args.delivery_limit));
    }
    v
}

/// A queue without activity for this long shows `idle_since`, as RabbitMQ shows it for a queue
/// process gone idle.
const IDLE_AFTER_MS: u64 = 10_000;

fn idle_since(last_activity: u64) -> Option<String> {
    let now = crate::clock::unix_ms();
    // 0: not known (another node's queue whose home did not answer).
    (last_activity > 0 && now.saturating_sub(last_activity) >= IDLE_AFTER_MS)
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

/// `queues` in JSON, as this node sees them (another node's with the counters it answers).
async fn render(b: &AppState, queues: &[QueueRef]) -> Vec<Value> {
    let node = super::node_name(b);
    let infos = crate::queue::QueueShared::info_many(queues).await;
    queues
        .iter()
        .zip(&infos)
        .map(|(q, info)| rendered(b, q, info, &node))
        .collect()
}

/// `queues` in JSON, sorted by vhost and name: this node's rendered here, other nodes' as
/// their home nodes render them (one request per member), or here when a home does not
/// answer.
async fn render_all(b: &AppState, queues: Vec<QueueRef>) -> Vec<Value> {
    use super::cluster_views::{listed_everywhere, QUEUES};
    let (here, elsewhere): (Vec<QueueRef>, Vec<QueueRef>) =
        queues.into_iter().partition(|q| q.home.is_none());
    let mut out = render(b, &here).await;
    if !elsewhere.is_empty() {
        let mut theirs: HashMap<(String, String), Value> = listed_everywhere(b, QUEUES, Vec::new())
            .await
            .into_iter()
            .filter_map(|v| {
                let key = (
                    v["vhost"].as_str()?.to_owned(),
                    v["name"].as_str()?.to_owned(),
                );
                Some((key, v))
            })
            .collect();
        let mut unanswered = Vec::new();
        for q in elsewhere {
            match theirs.remove(&(q.vhost.clone(), q.name.clone())) {
                Some(v) => out.push(v),
                None => unanswered.push(q),
            }
        }
        out.extend(render(b, &unanswered).await);
    }
    let key = |v: &Value| {
        (
            v["vhost"].as_str().unwrap_or_default().to_owned(),
            v["name"].as_str().unwrap_or_default().to_owned(),
        )
    };
    out.sort_by_cached_key(key);
    out
}

/// GET of a queue list. A page (`page`, with `sort`, `name` and the other list parameters) is
/// cut here rather than by the list middleware: queues the name filter drops are not
/// rendered, and when every queue lives on this node and the order is by name (the UI's
/// default) only the page's queues are, so the first page of 10,000 queues costs 100.
async fn list(
    b: &AppState,
    mut queues: Vec<QueueRef>,
    uri: &axum::http::Uri,
) -> Result<Json<Value>, ApiError> {
    use super::listing;
    let bad = |reason: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason);
    let Some(q) = listing::query_of(uri) else {
        return Ok(Json(Value::Array(render_all(b, queues).await)));
    };
    let Some(page) = q.page().map_err(bad)? else {
        return Ok(Json(Value::Array(render_all(b, queues).await)));
    };
    let total = queues.len();
    if let Some(matcher) = q.name_matcher().map_err(bad)? {
        queues.retain(|r| matcher(&r.name));
    }
    let filtered = queues.len();
    let by_name = matches!(q.sort.as_deref(), None | Some("name" | "vhost"));
    let items = if by_name && queues.iter().all(|r| r.home.is_none()) {
        // As the middleware orders the (vhost, name)-sorted list: stably by the field.
        if q.sort.as_deref() == Some("name") {
            queues.sort_by(|x, y| (&x.name, &x.vhost).cmp(&(&y.name, &y.vhost)));
        } else {
            queues.sort_by(|x, y| (&x.vhost, &x.name).cmp(&(&y.vhost, &y.name)));
        }
        if q.sort.is_some() && q.sort_reverse == Some(true) {
            queues.reverse();
        }
        let range = listing::window(filtered, page).map_err(bad)?;
        render(b, &queues[range]).await
    } else {
        let mut all = render_all(b, queues).await;
        listing::sort_values(&mut all, &q);
        let range = listing::window(filtered, page).map_err(bad)?;
        all.drain(range).collect()
    };
    Ok(Json(listing::paged(items, &q, page, filtered, total)))
}

/// The queues whose home is this node, in JSON (what other nodes list for them).
pub(crate) async fn home_json(b: &AppState) -> Vec<Value> {
    let queues: Vec<QueueRef> = b
        .vhosts()
        .iter()
        .flat_map(|v| v.queues())
        .filter(|q| q.home.is_none())
        .collect();
    render(b, &queues).await
}

/// Queue `name` in `vhost` when its home is this node, in JSON (null otherwise).
pub(crate) async fn home_one_json(b: &AppState, vhost: &str, name: &str) -> Value {
    match b.vhost(vhost).and_then(|v| v.queue(name).ok()) {
        Some(q) if q.home.is_none() => describe(b, &q).await,
        _ => Value::Null,
    }
}

pub(crate) async fn list_all(
    State(b): State<AppState>,
    Authenticated(user): Authenticated,
    uri: axum::http::Uri,
) -> Result<Json<Value>, ApiError> {
    // Filtered here, not only by the visibility middleware: a page is cut in `list`.
    let queues = b
        .vhosts()
        .iter()
        .filter(|v| super::visibility::sees_vhost(&b, &user, &v.name))
        .flat_map(|v| v.queues())
        .collect();
    list(&b, queues, &uri).await
}

pub(crate) async fn list_vhost(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
    uri: axum::http::Uri,
) -> Result<Json<Value>, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    list(&b, v.queues(), &uri).await
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
    if let Some(home) = q.home.as_deref() {
        let kind = super::cluster_views::queue_kind(&vhost, &name);
        if let Some(v) = super::cluster_views::of_member(&b, home, &kind).await {
            if v.is_object() {
                return Ok(Json(v));
            }
        }
    }
    Ok(Json(describe(&b, &q).await))
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
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
    body: Option<Json<DeclareBody>>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(&b, &v.name, Access::Configure, Kind::Queue, &name)?;
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
    actor: Actor,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    actor.authorize(&b, &v.name, Access::Configure, Kind::Queue, &name)?;
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
