//! Cross-origin calls to the API, as RabbitMQ's management plugin allows them: none unless
//! `management_cors_allow_origins` lists the page's origin (or `*`). A request from an allowed
//! origin gets `Access-Control-Allow-Origin` (that origin) and `-Allow-Credentials`; a
//! preflight (`OPTIONS`) is answered here with the allowed methods, the headers it asked for
//! and `management_cors_max_age`. Every response varies on `Origin`.

use super::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The methods the API answers.
const METHODS: &str = "GET, HEAD, PUT, POST, DELETE, OPTIONS";

/// The request's origin when the configuration allows it (never a missing or `null` one).
fn allowed_origin(b: &AppState, req: &Request) -> Option<HeaderValue> {
    let origin = req.headers().get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    let allowed = &b.config.management_cors_allow_origins;
    (text != "null" && allowed.iter().any(|o| o == text || o == "*")).then(|| origin.clone())
}

/// The middleware.
pub(crate) async fn cors(State(b): State<AppState>, req: Request, next: Next) -> Response {
    let origin = allowed_origin(&b, &req);
    let preflight = req.method() == Method::OPTIONS;
    let asked_headers = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned();
    let mut resp = match (&origin, preflight) {
        (Some(_), true) => {
            let mut r = StatusCode::OK.into_response();
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(METHODS),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from(b.config.management_cors_max_age),
            );
            if let Some(asked) = asked_headers {
                h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
            }
            r
        }
        _ => next.run(req).await,
    };
    let h = resp.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("origin"));
    if let Some(origin) = origin {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    resp
}
