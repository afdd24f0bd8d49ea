//! Health checks (`/api/health/checks/*`), `/api/aliveness-test/{vhost}` and `/api/nodes`, in
//! RabbitMQ's shapes: `{"status": "ok"}` with 200, or `{"status": "failed", "reason": ...}`
//! with 503. Resource alarms: memory and free disk (`crate::alarms`), and a store that cannot
//! write (reported as a disk alarm).

use super::{Administrator, ApiError, AppState, Authenticated};
use crate::message::Message;
use crate::vhost::QueueOptions;
use amq_protocol::protocol::BasicProperties;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;

fn ok(extra: Value) -> Response {
    let mut body = json!({"status": "ok"});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    Json(body).into_response()
}

fn failed(reason: &str, extra: Value) -> Response {
    let mut body = json!({"status": "failed", "reason": reason});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

fn alarms(b: &AppState) -> Vec<Value> {
    let mut list = Vec::new();
    let state = b.alarms.state();
    if state.memory {
        list.push(json!({"node": super::node_name(b), "resource": "memory"}));
    }
    if state.disk || b.store.failing() {
        list.push(json!({"node": super::node_name(b), "resource": "disk"}));
    }
    list
}

pub(crate) async fn alarms_check(State(b): State<AppState>, _: Authenticated) -> Response {
    let list = alarms(&b);
    if list.is_empty() {
        ok(json!({}))
    } else {
        failed(
            "resource alarm(s) in effect in the cluster",
            json!({"alarms": list}),
        )
    }
}

pub(crate) async fn local_alarms_check(State(b): State<AppState>, _: Authenticated) -> Response {
    let list = alarms(&b);
    if list.is_empty() {
        ok(json!({}))
    } else {
        failed(
            "resource alarm(s) in effect on the node",
            json!({"alarms": list}),
        )
    }
}

pub(crate) async fn always_ok(_: Authenticated) -> Response {
    ok(json!({}))
}

pub(crate) async fn port_listener(
    State(b): State<AppState>,
    _: Authenticated,
    Path(port): Path<String>,
) -> Result<Response, ApiError> {
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", "invalid port"))?;
    let ports: Vec<u16> = b.listeners().iter().map(|(_, a)| a.port()).collect();
    Ok(if ports.contains(&port) {
        ok(json!({"port": port}))
    } else {
        failed(
            "No active listener",
            json!({"missing": port, "ports": ports}),
        )
    })
}

/// RabbitMQ's protocol names and their aliases.
fn protocol_name(given: &str) -> Option<&'static str> {
    Some(match given.to_ascii_lowercase().as_str() {
        "amqp" | "amqp091" | "amqp0.9.1" | "amqp0-9-1" => "amqp",
        "amqps" | "amqp/ssl" | "amqp091/ssl" => "amqp/ssl",
        "http" | "management" => "http",
        "https" | "management/ssl" => "https",
        "prometheus" | "http/prometheus" => "http/prometheus",
        "https/prometheus" | "prometheus/ssl" => "https/prometheus",
        _ => return None,
    })
}

pub(crate) async fn protocol_listener(
    State(b): State<AppState>,
    _: Authenticated,
    Path(protocol): Path<String>,
) -> Response {
    let active: Vec<&str> = b.listeners().iter().map(|(p, _)| *p).collect();
    match protocol_name(&protocol) {
        Some(p) if active.contains(&p) => ok(json!({"protocol": p})),
        _ => failed(
            "No active listener",
            json!({"missing": protocol, "protocols": active}),
        ),
    }
}

/// Declares `aliveness-test` in the vhost, publishes a message to it and gets it back.
pub(crate) async fn aliveness(
    State(b): State<AppState>,
    _: Authenticated,
    Path(vhost): Path<String>,
) -> Result<Response, ApiError> {
    let v = super::vhost_of(&b, &vhost).await?;
    let failure = |e: crate::error::CoreError| {
        let name = crate::error::code_name(e.reply_code());
        failed(&format!("{name} - {e}"), json!({}))
    };
    let q = match v.queue_declare("aliveness-test", &QueueOptions::default(), 0) {
        Ok(q) => q,
        Err(e) => return Ok(failure(e)),
    };
    let props = BasicProperties::default();
    let raw = cookie_factory::gen_simple(
        amq_protocol::protocol::basic::gen_properties(&props),
        Vec::new(),
    )
    .unwrap_or_default();
    let mut data = raw.clone();
    data.extend_from_slice(b"test_message");
    let msg = Message::new(
        "".into(),
        "aliveness-test".into(),
        Bytes::from(data),
        raw.len(),
        &props,
    );
    // Through the default exchange, as RabbitMQ's aliveness test publishes.
    if let Ok(x) = v.exchange("") {
        use crate::vhost::publish::{NoConfirms, PublishContext, RouteState};
        v.publish(
            &x,
            Arc::new(msg),
            PublishContext::default(),
            &mut NoConfirms,
            &mut RouteState::default(),
        )
        .await;
    }
    Ok(match q.get(true).await {
        Ok(Some(got)) if got.msg.body() == b"test_message" => ok(json!({})),
        Ok(_) => failed("aliveness test message not received", json!({})),
        Err(e) => failure(e),
    })
}

/// `DELETE /api/nodes/{name}` (Warren's, for `warren ctl forget_cluster_node`): removes a
/// member that is not running from the cluster, as RabbitMQ's forget_cluster_node does
/// (a running node, or this node itself, is refused).
pub(crate) async fn forget_node(
    State(b): State<AppState>,
    _: Administrator,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let node = b.cluster.get().ok_or_else(ApiError::not_found)?;
    let refused = |why: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", why);
    if name == node.name() {
        return Err(refused(format!(
            "{{:cannot_forget_self, \"{name} is the node asked; ask another member\"}}"
        )));
    }
    let members = node.member_status(PING_TIMEOUT).await;
    let member = members
        .iter()
        .find(|m| m.member.name == name)
        .ok_or_else(ApiError::not_found)?;
    if member.running {
        return Err(refused(format!(
            "{{:failed_to_forget_online_node, \"{name} is running; stop it first\"}}"
        )));
    }
    b.forget_cluster_node(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/cluster/join` with `{"node": "NAME@HOST[:PORT]"}` (Warren's, for `warren ctl
/// join_cluster`): resets this node and joins the named node's cluster, as RabbitMQ's
/// join_cluster does. 201 when it joined, 204 when it was already a member.
pub(crate) async fn join_cluster(
    State(b): State<AppState>,
    _: Administrator,
    Json(body): Json<Value>,
) -> Result<StatusCode, ApiError> {
    use crate::replication::{JoinError, Joined};
    let target = body["node"].as_str().unwrap_or_default();
    let bad = |error: &'static str, why: String| ApiError::new(StatusCode::BAD_REQUEST, error, why);
    match b.join_cluster(target).await {
        Ok(Joined::Joined) => Ok(StatusCode::CREATED),
        Ok(Joined::AlreadyMember) => Ok(StatusCode::NO_CONTENT),
        Err(e @ JoinError::Unreachable(_)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "cannot_discover_cluster",
            e.to_string(),
        )),
        Err(e @ JoinError::WithItself(_)) => {
            Err(bad("cannot_cluster_node_with_itself", e.to_string()))
        }
        Err(e @ JoinError::AppRunning) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "app_running",
            e.to_string(),
        )),
        Err(e @ (JoinError::NotClustered | JoinError::BadName(_))) => {
            Err(bad("bad_request", e.to_string()))
        }
        Err(e @ JoinError::Failed(_)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "join_failed",
            e.to_string(),
        )),
    }
}

/// `GET /api/app` (Warren's, for `warren ctl`): whether the node takes clients, i.e. is not
/// between `stop_app` and `start_app`.
pub(crate) async fn app_state(State(b): State<AppState>, _: Administrator) -> Json<Value> {
    Json(json!({ "running": b.app_running() }))
}

/// `POST /api/app/stop` (Warren's, for `warren ctl stop_app`): closes every client
/// connection and refuses new ones until `POST /api/app/start`.
pub(crate) async fn stop_app(State(b): State<AppState>, _: Administrator) -> StatusCode {
    b.stop_app();
    StatusCode::NO_CONTENT
}

/// `POST /api/app/start` (Warren's, for `warren ctl start_app`).
pub(crate) async fn start_app(State(b): State<AppState>, _: Administrator) -> StatusCode {
    b.start_app();
    StatusCode::NO_CONTENT
}

/// How long a member may take to answer the ping that says it is running.
pub(crate) const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// `node-is-quorum-critical`: failed when stopping this node would leave a replicated
/// group without a majority: a quorum queue with a member here, or the metadata group, which
/// is reported as RabbitMQ reports its own (`rabbitmq_metadata`, a "process") when no more
/// than a bare majority of its members is online. A single node is never critical (RabbitMQ
/// says "single node cluster").
pub(crate) async fn quorum_critical(State(b): State<AppState>, _: Authenticated) -> Response {
    let members = match b.cluster.get() {
        Some(node) => node.member_status(PING_TIMEOUT).await,
        None => Vec::new(),
    };
    let voters: Vec<_> = members.iter().filter(|m| m.voter).collect();
    if voters.len() <= 1 {
        return ok(json!({"reason": "single node cluster"}));
    }
    let online = voters.iter().filter(|m| m.running).count();
    let mut queues = Vec::new();
    if online <= voters.len() / 2 + 1 {
        queues.push(json!({
            "readable_name": "rabbitmq_metadata",
            "name": "rabbitmq_metadata",
            "virtual_host": "(not applicable)",
            "type": "process",
        }));
    }
    for (vhost, name) in b.quorum_critical() {
        queues.push(json!({
            "readable_name": format!("queue '{name}' in vhost '{vhost}'"),
            "name": name,
            "virtual_host": vhost,
            "type": "quorum",
        }));
    }
    if queues.is_empty() {
        return ok(json!({}));
    }
    failed(
        "There are quorum queues that would lose their quorum if the target node is shut down",
        json!({ "queues": queues }),
    )
}

/// `node-is-mirror-sync-critical`: classic mirrored queues do not exist (RabbitMQ 4.x removed
/// them), so no mirror can be the last synchronised one.
pub(crate) async fn mirror_sync_critical(_: Authenticated) -> Response {
    ok(json!({}))
}

/// Seconds in one `unit` of RabbitMQ's certificate-expiration check.
fn unit_seconds(unit: &str) -> Option<i64> {
    match unit.to_ascii_lowercase().as_str() {
        "days" => Some(86_400),
        "weeks" => Some(7 * 86_400),
        "months" => Some(365 * 86_400 / 12),
        "years" => Some(365 * 86_400),
        _ => None,
    }
}

/// `2026-12-01 9:05:00`, as RabbitMQ prints expiry dates.
fn expiry_text(unix: i64) -> String {
    let ms = u64::try_from(unix).unwrap_or_default() * 1000;
    let iso = crate::json::rfc3339_ms(ms);
    let (date, time) = iso.split_once('T').unwrap_or((&iso, ""));
    let time = time.get(..8).unwrap_or(time);
    let time = time.strip_prefix('0').unwrap_or(time);
    format!("{date} {time}")
}

/// `certificate-expiration/{within}/{unit}`: failed (503) when a TLS listener's certificate
/// or CA certificate expires within that time; 400 for a bad value or unit, RabbitMQ's texts.
pub(crate) async fn certificate_expiration(
    State(b): State<AppState>,
    _: Authenticated,
    Path((within, unit)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let bad = |reason: &str| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason);
    let within: i64 = within
        .parse()
        .map_err(|_| bad("Invalid expiration value."))?;
    let unit = unit_seconds(&unit).ok_or_else(|| {
        bad("Time unit not recognised. Supported units: days, weeks, months, years.")
    })?;
    let deadline = crate::clock::unix_ms() as i64 / 1000 + within.saturating_mul(unit);
    let cfg = &b.config;
    let expiring = |path: &Option<std::path::PathBuf>| -> Value {
        let Some(path) = path else {
            return json!([]);
        };
        match crate::tls::certificate_expiries(path) {
            Ok(list) => Value::Array(
                list.into_iter()
                    .filter(|t| *t < deadline)
                    .map(|t| json!(expiry_text(t)))
                    .collect(),
            ),
            Err(e) => json!({"error": e}),
        }
    };
    let mut listeners = Vec::new();
    let bound = b.listeners.get().cloned().unwrap_or_default();
    let tls_listeners = bound
        .into_iter()
        .filter(|(p, _)| matches!(*p, "amqp/ssl" | "https" | "https/prometheus"));
    for (protocol, addr) in tls_listeners {
        let (cert, ca) = (expiring(&cfg.tls_cert), expiring(&cfg.tls_ca));
        let none = |v: &Value| v.as_array().is_some_and(|a| a.is_empty());
        if none(&cert) && none(&ca) {
            continue;
        }
        let file = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        listeners.push(json!({
            "node": super::node_name(&b),
            "protocol": protocol,
            "interface": addr.ip().to_string(),
            "port": addr.port(),
            "certfile": file(&cfg.tls_cert),
            "cacertfile": file(&cfg.tls_ca),
            "certfile_expires_on": cert,
            "cacertfile_expires_on": ca,
        }));
    }
    if listeners.is_empty() {
        return Ok(ok(json!({})));
    }
    Ok(failed(
        "Certificates expiring",
        json!({"expired": listeners}),
    ))
}
