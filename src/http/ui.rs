//! The management web UI: the files under `ui/` at the repository root, embedded in the
//! binary (`include_bytes!`), so `cargo build` alone makes a broker whose UI works offline.
//! `/` serves the page and `/ui/...` its modules, styles and the vendored chart library. The
//! UI is plain ES modules over the same management API as every other client; it renders
//! broker values as text only. Every response of the HTTP port carries [`security_headers`].

use axum::extract::{Path, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// An embedded file: its path under `/ui/`, content type and bytes.
struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $mime:literal) => {
        Asset {
            path: $path,
            mime: $mime,
            body: include_bytes!(concat!("../../ui/", $path)),
        }
    };
}

/// Every file the UI loads.
const ASSETS: &[Asset] = &[
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("js/app.js", "text/javascript; charset=utf-8"),
    asset!("js/api.js", "text/javascript; charset=utf-8"),
    asset!("js/dom.js", "text/javascript; charset=utf-8"),
    asset!("js/state.js", "text/javascript; charset=utf-8"),
    asset!("js/forms.js", "text/javascript; charset=utf-8"),
    asset!("js/paged.js", "text/javascript; charset=utf-8"),
    asset!("js/chart.js", "text/javascript; charset=utf-8"),
    asset!("js/overview.js", "text/javascript; charset=utf-8"),
    asset!("js/queues.js", "text/javascript; charset=utf-8"),
    asset!("js/exchanges.js", "text/javascript; charset=utf-8"),
    asset!("js/connections.js", "text/javascript; charset=utf-8"),
    asset!("js/admin.js", "text/javascript; charset=utf-8"),
    asset!("js/limits.js", "text/javascript; charset=utf-8"),
    asset!("vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    asset!("vendor/uPlot.min.css", "text/css; charset=utf-8"),
];

const INDEX: &[u8] = include_bytes!("../../ui/index.html");

/// The Content-Security-Policy of every response: scripts, styles and API calls from this
/// origin only, no inline script, no plugins, no form posts, and no framing by any page.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; form-action 'none'; base-uri 'none'; \
                   frame-ancestors 'none'";

fn file(mime: &'static str, body: &'static [u8]) -> Response {
    (
        [
            (header::CONTENT_TYPE, mime),
            // Small files: always revalidated, so a new broker version's UI is used at once.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the UI's page.
pub(crate) async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/{*path}`: one of the UI's files.
pub(crate) async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => file(a.mime, a.body),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// Adds the browser-safety headers to every response: the [`CSP`], `X-Frame-Options: DENY`
/// for browsers without `frame-ancestors`, no MIME sniffing and no referrer.
pub(crate) async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every module the page imports is embedded (a file added to ui/js but not to ASSETS
    /// would load as a 404 in the browser).
    #[test]
    fn every_ui_module_is_embedded() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/ui/js");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = format!("js/{}", entry.file_name().to_string_lossy());
            if !ASSETS.iter().any(|a| a.path == name) {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "not embedded: {missing:?}");
        assert!(ASSETS.iter().filter(|a| a.path.starts_with("js/")).count() >= 12);
    }
}
