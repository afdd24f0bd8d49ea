//! Which virtual hosts a user sees through the API, as RabbitMQ's management plugin decides
//! (`list_visible_vhosts`): administrators and monitoring users every vhost, other users the
//! vhosts they hold permissions in. A GET of a vhost's resources (`/api/queues/{vhost}`, ...)
//! in an existing vhost the user does not see is 401 "User not authorised to access virtual
//! host"; lists leave out what lies in such vhosts. Runs inside the list middleware, so pages
//! and counts are of what the user sees. The user it authenticated is kept in the request,
//! so the handler does not check the password again.

use super::{ApiError, AppState, Authenticated};
use crate::auth::User;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Whether `user` sees the resources of `vhost`.
pub(crate) fn sees_vhost(b: &AppState, user: &User, vhost: &str) -> bool {
    super::connections::sees_all(user) || b.permissions.get(vhost, &user.name).is_some()
}

/// API paths whose third segment names a vhost (`/api/{kind}/{vhost}/...`).
const VHOST_SCOPED: &[&str] = &[
    "queues",
    "exchanges",
    "bindings",
    "consumers",
    "policies",
    "operator-policies",
    "federation-links",
    "shovels",
    "vhost-limits",
    "aliveness-test",
    "vhosts",
];

/// The vhost a GET path is about, percent-decoded, if it names one.
fn vhost_in_path(path: &str) -> Option<String> {
    let mut parts = path.strip_prefix("/api/")?.split('/');
    let kind = parts.next()?;
    let raw = match kind {
        // /api/parameters/{component}/{vhost}[/{name}]
        "parameters" => parts.nth(1)?,
        k if VHOST_SCOPED.contains(&k) => parts.next()?,
        _ => return None,
    };
    if raw.is_empty() {
        return None;
    }
    let decoded = crate::client::uri::percent_decode(raw);
    Some(decoded.unwrap_or_else(|| raw.to_owned()))
}

/// The middleware. Leaves everything but management users' GETs alone.
pub(crate) async fn vhost_visibility(
    State(b): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if req.method() != Method::GET || !req.uri().path().starts_with("/api/") {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let Ok(Authenticated(user)) = Authenticated::from_request_parts(&mut parts, &b).await else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    parts.extensions.insert(Authenticated(user.clone()));
    let req = Request::from_parts(parts, body);
    if super::connections::sees_all(&user) {
        return next.run(req).await;
    }
    if let Some(vhost) = vhost_in_path(req.uri().path()) {
        if b.vhost(&vhost).is_some() && !sees_vhost(&b, &user, &vhost) {
            return ApiError::not_authorised("User not authorised to access virtual host")
                .into_response();
        }
    }
    let vhosts_list = req.uri().path().trim_end_matches('/') == "/api/vhosts";
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let field = if vhosts_list { "name" } else { "vhost" };
    let kept: Vec<Value> = items
        .into_iter()
        .filter(|i| {
            i.get(field)
                .and_then(Value::as_str)
                .is_none_or(|v| sees_vhost(&b, &user, v))
        })
        .collect();
    let mut resp = axum::Json(Value::Array(kept)).into_response();
    resp.headers_mut().extend(
        parts
            .headers
            .into_iter()
            .filter_map(|(k, v)| k.map(|k| (k, v)))
            .filter(|(k, _)| k != axum::http::header::CONTENT_LENGTH),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::vhost_in_path;

    #[test]
    fn the_vhost_of_a_path() {
        assert_eq!(vhost_in_path("/api/queues/%2F/q"), Some("/".into()));
        assert_eq!(vhost_in_path("/api/exchanges/v2"), Some("v2".into()));
        assert_eq!(
            vhost_in_path("/api/parameters/shovel/v%20x/s"),
            Some("v x".into())
        );
        assert_eq!(vhost_in_path("/api/vhosts/v2/channels"), Some("v2".into()));
        assert_eq!(vhost_in_path("/api/queues"), None);
        assert_eq!(vhost_in_path("/api/queues/"), None);
        assert_eq!(vhost_in_path("/api/overview"), None);
        assert_eq!(vhost_in_path("/api/parameters/shovel"), None);
    }
}
