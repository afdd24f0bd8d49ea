//! The management HTTP API (RabbitMQ's management plugin paths and JSON), served with axum on
//! `http_listen`. It calls the same broker operations as AMQP; errors use RabbitMQ's
//! `{"error", "reason"}` shape. The same port serves the web UI ([`ui`]) at `/`.

mod access;
mod bindings;
mod channels;
pub mod cli;
mod cluster_views;
mod connections;
mod consumers;
mod contents;
mod cors;
mod definitions;
mod exchanges;
mod federation;
mod health;
mod lenient;
mod listing;
mod nodes;
mod overview;
mod parameters;
mod permissions;
mod policies;
mod publish;
mod queues;
mod quorum;
mod shovels;
mod streams;
mod ui;
mod user_limits;
mod users;
mod vhosts;
mod visibility;

use crate::auth::User;
use crate::broker::Broker;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The node name reported by the API and the metrics (RabbitMQ's `name@host` form).
pub(crate) fn node_name(b: &Broker) -> String {
    b.config.node_name.clone()
}

/// Shared state of the handlers.
pub(crate) type AppState = Arc<Broker>;

/// An API error in RabbitMQ's shape.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: &'static str,
    reason: serde_json::Value,
}

/// A core error as RabbitMQ's API reports it: a missing entity is 404 Object Not Found, a
/// metadata change the cluster could not commit in time 503, anything else 400 with the
/// error's text as the reason.
impl From<crate::error::CoreError> for ApiError {
    fn from(e: crate::error::CoreError) -> Self {
        match e {
            crate::error::CoreError::NotFound { .. } => ApiError::not_found(),
            crate::error::CoreError::Unavailable(reason) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "timeout", reason)
            }
            other => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", other.to_string()),
        }
    }
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, error: &'static str, reason: impl Into<String>) -> Self {
        ApiError {
            status,
            error,
            reason: serde_json::Value::String(reason.into()),
        }
    }

    /// An error whose reason is not a string (RabbitMQ answers some with an Erlang term
    /// rendered as a list).
    pub(crate) fn with_reason(
        status: StatusCode,
        error: &'static str,
        reason: serde_json::Value,
    ) -> Self {
        ApiError {
            status,
            error,
            reason,
        }
    }

    pub(crate) fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "Object Not Found", "Not Found")
    }

    /// A refusal as RabbitMQ's API reports a publish's: 400 quoting the AMQP reply,
    /// `"403 ACCESS_REFUSED - cannot publish to internal exchange ..."`.
    pub(crate) fn quoting_reply(e: &crate::error::CoreError) -> Self {
        let code = e.reply_code();
        Self::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("{code} {} - {e}", crate::error::code_name(code)),
        )
    }

    fn unauthorized(reason: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "not_authorized", reason)
    }

    /// 401 for a user whose tags lack the right (RabbitMQ spells this one `not_authorised`).
    pub(crate) fn not_authorised(reason: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "not_authorised", reason)
    }

    /// 401 for an object the user may not touch.
    pub(crate) fn not_permitted() -> Self {
        Self::not_authorised("User not authorised to access object")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(serde_json::json!({"error": self.error, "reason": self.reason}));
        let mut resp = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"RabbitMQ Management\""),
            );
        }
        resp
    }
}

/// Runs a change, then waits until everything it handed to the store is committed, so that a
/// 2xx from the API means the change is on disk.
pub(crate) async fn durably<T>(
    store: &crate::store::Store,
    change: impl std::future::Future<Output = T>,
) -> T {
    let mark = store.submitted();
    let out = change.await;
    store.sync_since(mark).await;
    out
}

/// The vhost a path names, or 404 once the cluster confirmed it has none by that name.
pub(crate) async fn vhost_of(
    b: &crate::broker::Broker,
    name: &str,
) -> Result<std::sync::Arc<crate::vhost::VHost>, ApiError> {
    b.find_vhost(name).await.ok_or_else(ApiError::not_found)
}

/// 201 for something new, 204 for a change to something that existed.
pub(crate) fn created_status(new: bool) -> StatusCode {
    if new {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
}

/// Marks requests that came in on the node's local CLI socket ([`serve_local`]): whoever
/// may open that socket (its file is the owner's only) acts as an administrator, as whoever
/// may read RabbitMQ's Erlang cookie does with `rabbitmqctl`.
#[derive(Clone, Copy, Debug)]
struct LocalAdmin;

/// The user name requests on the local CLI socket act as.
pub(crate) const LOCAL_ADMIN: &str = "rabbitmq-cli";

/// A user authenticated with HTTP basic auth whose tags allow the management API.
#[derive(Clone)]
pub(crate) struct Authenticated(pub User);

impl FromRequestParts<AppState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, broker: &AppState) -> Result<Self, ApiError> {
        use base64::Engine;
        if let Some(done) = parts.extensions.get::<Authenticated>() {
            // Authenticated already by the visibility middleware.
            return Ok(done.clone());
        }
        if parts.extensions.get::<LocalAdmin>().is_some() {
            return Ok(Authenticated(User::new(
                LOCAL_ADMIN,
                "",
                &["administrator"],
            )));
        }
        let creds = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .ok()
            })
            .and_then(|raw| String::from_utf8(raw).ok())
            .ok_or_else(|| ApiError::unauthorized("Not_Authorized"))?;
        let (name, pass) = creds.split_once(':').unwrap_or((creds.as_str(), ""));
        let user = broker
            .user(name)
            .filter(|u| u.password_matches(pass))
            .ok_or_else(|| ApiError::unauthorized("Not_Authorized"))?;
        let allowed = ["management", "administrator", "monitoring", "policymaker"];
        if !user.tags.iter().any(|t| allowed.contains(&t.as_str())) {
            return Err(ApiError::not_authorised("Not management user"));
        }
        Ok(Authenticated(user))
    }
}

/// An authenticated user with the `administrator` tag.
pub(crate) struct Administrator;

impl FromRequestParts<AppState> for Administrator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, broker: &AppState) -> Result<Self, ApiError> {
        let Authenticated(user) = Authenticated::from_request_parts(parts, broker).await?;
        if !user.tags.iter().any(|t| t == "administrator") {
            return Err(ApiError::not_authorised("Not administrator user"));
        }
        Ok(Administrator)
    }
}

/// An authenticated user with the `policymaker` or `administrator` tag.
pub(crate) struct Policymaker(pub User);

impl Policymaker {
    /// Administrators see every vhost; others those they have permissions in.
    pub(crate) fn may_use(&self, b: &Broker, vhost: &str) -> bool {
        self.0.tags.iter().any(|t| t == "administrator")
            || b.permissions.get(vhost, &self.0.name).is_some()
    }
}

impl FromRequestParts<AppState> for Policymaker {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, broker: &AppState) -> Result<Self, ApiError> {
        let Authenticated(user) = Authenticated::from_request_parts(parts, broker).await?;
        if !user
            .tags
            .iter()
            .any(|t| t == "administrator" || t == "policymaker")
        {
            return Err(ApiError::not_permitted());
        }
        Ok(Policymaker(user))
    }
}

/// Largest request body accepted (RabbitMQ's `management.http.max_body_size`, 20 MB).
const MAX_BODY: usize = 20_000_000;

/// Turns the framework's plain-text body rejections (malformed or mistyped JSON: 400, 415,
/// 422; too large: 413) into RabbitMQ's `400 {"error": "bad_request", "reason": ...}`.
async fn body_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let too_large = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Exceeded HTTP request body size limit",
        )
        .into_response()
    };
    // A declared length over the limit is refused before any of the body is read.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let resp = next.run(req).await;
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large();
    }
    let plain = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    let rejected = matches!(resp.status().as_u16(), 400 | 415 | 422) && plain;
    if !rejected {
        return resp;
    }
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
        .await
        .unwrap_or_default();
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad_request",
        String::from_utf8_lossy(&bytes).into_owned(),
    )
    .into_response()
}

async fn not_found(State(_): State<AppState>) -> ApiError {
    ApiError::not_found()
}

/// This node's view `kind`, as other nodes ask for it ([`cluster_views`]).
async fn local_view(b: AppState, kind: String) -> serde_json::Value {
    use serde_json::Value;
    match kind.as_str() {
        cluster_views::CONNECTIONS => Value::Array(connections::all(&b)),
        cluster_views::CHANNELS => Value::Array(channels::all(&b)),
        cluster_views::CONSUMERS => Value::Array(consumers::consumers_of(&b, None).await),
        cluster_views::TOTALS => overview::local_totals(&b),
        cluster_views::QUEUES => Value::Array(queues::home_json(&b).await),
        cluster_views::NODE => nodes::local(&b).await,
        k => match k
            .strip_prefix(cluster_views::QUEUE)
            .and_then(|k| k.split_once('\n'))
        {
            Some((vhost, name)) => queues::home_one_json(&b, vhost, name).await,
            None => Value::Null,
        },
    }
}

/// The API's routes, served by [`serve`] and [`serve_tls`] (public for fuzzing and embedding).
pub fn router(broker: Arc<Broker>) -> Router {
    cluster_views::install(&broker, local_view);
    Router::new()
        .route("/", get(ui::index))
        .route("/ui/{*path}", get(ui::asset))
        .route("/api/overview", get(overview::overview))
        .route("/api/vhost-limits", get(vhosts::limits_all))
        .route("/api/vhost-limits/{vhost}", get(vhosts::limits_of))
        .route(
            "/api/vhost-limits/{vhost}/{name}",
            axum::routing::put(vhosts::limit_put).delete(vhosts::limit_delete),
        )
        .route("/api/vhosts", get(vhosts::list))
        .route(
            "/api/vhosts/{vhost}",
            get(vhosts::show).put(vhosts::put).delete(vhosts::delete),
        )
        .route("/api/whoami", get(overview::whoami))
        .route(
            "/api/definitions",
            get(definitions::export_all).post(definitions::import_all),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::export_vhost).post(definitions::import_vhost),
        )
        .route("/api/nodes", get(nodes::nodes))
        .route(
            "/api/nodes/{name}",
            axum::routing::delete(health::forget_node),
        )
        .route(
            "/api/cluster/join",
            axum::routing::post(health::join_cluster),
        )
        .route("/api/app", get(health::app_state))
        .route("/api/app/stop", axum::routing::post(health::stop_app))
        .route("/api/app/start", axum::routing::post(health::start_app))
        .route("/api/health/checks/alarms", get(health::alarms_check))
        .route(
            "/api/health/checks/local-alarms",
            get(health::local_alarms_check),
        )
        .route("/api/health/checks/virtual-hosts", get(health::always_ok))
        .route(
            "/api/health/checks/certificate-expiration/{within}/{unit}",
            get(health::certificate_expiration),
        )
        .route(
            "/api/health/checks/node-is-quorum-critical",
            get(health::quorum_critical),
        )
        .route(
            "/api/health/checks/node-is-mirror-sync-critical",
            get(health::mirror_sync_critical),
        )
        .route(
            "/api/health/checks/ready-to-serve-clients",
            get(health::always_ok),
        )
        .route(
            "/api/health/checks/port-listener/{port}",
            get(health::port_listener),
        )
        .route(
            "/api/health/checks/protocol-listener/{protocol}",
            get(health::protocol_listener),
        )
        .route("/api/aliveness-test/{vhost}", get(health::aliveness))
        .route(
            "/api/queues/quorum/{vhost}/{name}/replicas/add",
            axum::routing::post(quorum::add_member),
        )
        .route(
            "/api/queues/quorum/{vhost}/{name}/replicas/delete",
            axum::routing::delete(quorum::delete_member),
        )
        .route(
            "/api/queues/quorum/replicas/on/{node}/grow",
            axum::routing::post(quorum::grow),
        )
        .route(
            "/api/queues/quorum/replicas/on/{node}/shrink",
            axum::routing::delete(quorum::shrink),
        )
        .route(
            "/api/queues/quorum/{vhost}/{name}/status",
            get(quorum::status),
        )
        .merge(streams::routes())
        .route("/api/consumers", get(consumers::list))
        .route("/api/consumers/{vhost}", get(consumers::of_vhost))
        .route("/api/channels", get(channels::list))
        .route("/api/channels/{name}", get(channels::show))
        .route(
            "/api/connections/{name}/channels",
            get(channels::of_connection),
        )
        .route("/api/vhosts/{vhost}/channels", get(channels::of_vhost))
        .route("/api/connections", get(connections::list))
        .route(
            "/api/connections/{name}",
            get(connections::show).delete(connections::close),
        )
        .route(
            "/api/vhosts/{vhost}/connections",
            get(connections::of_vhost),
        )
        .route("/api/permissions", get(permissions::list))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(permissions::show)
                .put(permissions::put)
                .delete(permissions::delete),
        )
        .route("/api/topic-permissions", get(permissions::topic_list))
        .route(
            "/api/topic-permissions/{vhost}/{user}",
            get(permissions::topic_show)
                .put(permissions::topic_put)
                .delete(permissions::topic_delete),
        )
        .route("/api/users/{name}/permissions", get(permissions::of_user))
        .route(
            "/api/vhosts/{vhost}/permissions",
            get(permissions::of_vhost),
        )
        .route("/api/policies", get(policies::list))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::show)
                .put(policies::put)
                .delete(policies::delete),
        )
        .route("/api/operator-policies", get(policies::operator_list))
        .route(
            "/api/operator-policies/{vhost}",
            get(policies::operator_list_vhost),
        )
        .route(
            "/api/operator-policies/{vhost}/{name}",
            get(policies::operator_show)
                .put(policies::operator_put)
                .delete(policies::operator_delete),
        )
        .route("/api/parameters", get(parameters::parameters))
        .route(
            "/api/parameters/{component}",
            get(parameters::parameters_component),
        )
        .route(
            "/api/parameters/{component}/{vhost}",
            get(parameters::parameters_vhost),
        )
        .route(
            "/api/parameters/{component}/{vhost}/{name}",
            get(parameters::parameter_show)
                .put(parameters::parameter_put)
                .delete(parameters::parameter_delete),
        )
        .route("/api/federation-links", get(federation::list))
        .route("/api/federation-links/{vhost}", get(federation::list_vhost))
        .route(
            "/api/federation-links/state/down",
            get(federation::list_down),
        )
        .route(
            "/api/federation-links/{vhost}/state/down",
            get(federation::list_vhost_down),
        )
        .route(
            "/api/federation-links/vhost/{vhost}/{id}/{node}/restart",
            axum::routing::delete(federation::restart),
        )
        .route("/api/shovels", get(shovels::list))
        .route("/api/shovels/{vhost}", get(shovels::list_vhost))
        .route(
            "/api/shovels/vhost/{vhost}/{name}",
            get(shovels::show).delete(shovels::delete),
        )
        .route(
            "/api/shovels/vhost/{vhost}/{name}/restart",
            axum::routing::delete(shovels::restart),
        )
        .route(
            "/api/shovels/{vhost}/{name}/pause",
            axum::routing::put(shovels::pause),
        )
        .route(
            "/api/shovels/{vhost}/{name}/resume",
            axum::routing::put(shovels::resume),
        )
        .route(
            "/api/cluster-name",
            get(policies::cluster_name_show).put(policies::cluster_name_put),
        )
        .route("/api/global-parameters", get(policies::globals))
        .route(
            "/api/global-parameters/{name}",
            get(policies::global_show)
                .put(policies::global_put)
                .delete(policies::global_delete),
        )
        .route("/api/user-limits", get(user_limits::list))
        .route("/api/user-limits/{user}", get(user_limits::of_user))
        .route(
            "/api/user-limits/{user}/{name}",
            axum::routing::put(user_limits::put).delete(user_limits::delete),
        )
        .route("/api/users", get(users::list))
        .route(
            "/api/users/{name}",
            get(users::show).put(users::put).delete(users::delete),
        )
        .route("/api/queues", get(queues::list_all))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::show)
                .put(queues::declare)
                .delete(queues::delete),
        )
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(bindings::queue_bindings),
        )
        .route(
            "/api/queues/{vhost}/{name}/contents",
            axum::routing::delete(contents::purge),
        )
        .route("/api/queues/{vhost}/{name}/get", post(contents::get))
        .route("/api/queues/{vhost}/{name}/peek", get(contents::peek))
        .route("/api/exchanges", get(exchanges::list_all))
        .route("/api/exchanges/{vhost}", get(exchanges::list_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(exchanges::show)
                .put(exchanges::declare)
                .delete(exchanges::delete),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            post(publish::publish),
        )
        .route("/api/bindings", get(bindings::bindings_all))
        .route("/api/bindings/{vhost}", get(bindings::bindings_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(bindings::list_between).post(bindings::bind),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::show).delete(bindings::unbind),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/{side}",
            get(bindings::exchange_bindings),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            broker.clone(),
            visibility::vhost_visibility,
        ))
        .layer(axum::middleware::from_fn(listing::list_parameters))
        .layer(axum::middleware::from_fn(body_errors))
        .layer(axum::middleware::from_fn_with_state(
            broker.clone(),
            cors::cors,
        ))
        .layer(axum::middleware::from_fn(ui::security_headers))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(broker)
}

/// Serves a router (the API's or the metrics') over plain HTTP until shutdown; while
/// `broker`'s app is stopped (`warren ctl stop_app`) new connections are dropped, as
/// RabbitMQ's stop_app stops its management and Prometheus listeners.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: watch::Receiver<bool>,
    header_timeout: Duration,
    broker: Arc<Broker>,
) {
    serve_with(listener, app, shutdown, None, header_timeout, broker).await
}

/// Serves a router over TLS until shutdown (stopped with the app as [`serve`]).
pub async fn serve_tls(
    listener: TcpListener,
    app: Router,
    shutdown: watch::Receiver<bool>,
    acceptor: tokio_rustls::TlsAcceptor,
    header_timeout: Duration,
    broker: Arc<Broker>,
) {
    serve_with(
        listener,
        app,
        shutdown,
        Some(acceptor),
        header_timeout,
        broker,
    )
    .await
}

/// Serves the API on the node's local CLI socket until shutdown (`warren ctl` talks to it),
/// every request acting as an administrator ([`LocalAdmin`]).
pub async fn serve_local(
    listener: tokio::net::UnixListener,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    header_timeout: Duration,
) {
    let app = app.layer(axum::Extension(LocalAdmin));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => {
                let Ok((socket, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                conns.spawn(serve_connection(socket, app.clone(), header_timeout));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// The accept loop: each connection gets `header_timeout` for its TLS handshake and for each
/// request's headers (an idle keep-alive connection included), so half-open sockets do not pile
/// up on the HTTP ports any more than on the AMQP one.
async fn serve_with(
    listener: TcpListener,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    header_timeout: Duration,
    broker: Arc<Broker>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let mut app_state = broker.app_state();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Ok(()) = app_state.changed() => {
                // stop_app: the open connections go too (keep-alive ones included), as
                // RabbitMQ's stopped listeners take theirs with them.
                if !*app_state.borrow_and_update() {
                    conns.abort_all();
                }
            }
            accepted = listener.accept() => {
                let Ok((socket, peer)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                if !broker.app_running() {
                    drop(socket);
                    continue;
                }
                let (tls, app) = (tls.clone(), app.clone());
                conns.spawn(async move {
                    match tls {
                        None => serve_connection(socket, app, header_timeout).await,
                        Some(acceptor) => {
                            match tokio::time::timeout(header_timeout, acceptor.accept(socket)).await {
                                Ok(Ok(s)) => serve_connection(s, app, header_timeout).await,
                                Ok(Err(e)) => {
                                    tracing::debug!(%peer, error = %e, "HTTPS handshake failed")
                                }
                                Err(_) => {}
                            }
                        }
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection<S>(stream: S, app: Router, header_timeout: Duration)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let inner = hyper_util::service::TowerToHyperService::new(app);
    // Routing sees the path without its trailing slash: RabbitMQ answers `/api/queues/` as
    // `/api/queues`, for every route and method.
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            strip_trailing_slash(req.uri_mut());
            hyper::service::Service::call(&inner, req)
        });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

/// Removes one trailing slash from a path longer than `/`, keeping the query.
fn strip_trailing_slash(uri: &mut axum::http::Uri) {
    let path = uri.path();
    if path.len() <= 1 || !path.ends_with('/') {
        return;
    }
    let trimmed = &path[..path.len() - 1];
    let rebuilt = match uri.query() {
        Some(q) => format!("{trimmed}?{q}"),
        None => trimmed.to_owned(),
    };
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = rebuilt.parse().ok();
    if let Ok(u) = axum::http::Uri::from_parts(parts) {
        *uri = u;
    }
}

#[cfg(test)]
mod slash_tests {
    use super::strip_trailing_slash;

    fn stripped(s: &str) -> String {
        let mut u: axum::http::Uri = s.parse().expect("uri");
        strip_trailing_slash(&mut u);
        u.to_string()
    }

    #[test]
    fn one_trailing_slash_goes_and_the_query_stays() {
        assert_eq!(stripped("/api/queues/"), "/api/queues");
        assert_eq!(
            stripped("/api/queues/%2F/?page=2"),
            "/api/queues/%2F?page=2"
        );
        assert_eq!(stripped("/"), "/");
        assert_eq!(stripped("/api/overview"), "/api/overview");
    }
}
