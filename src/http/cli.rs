//! Requests from `warren ctl -n` naming this node from elsewhere (another machine, or the
//! CLI of another member): they arrive through the core over the inter-node transport,
//! already proven by the cluster secret, and run through the same router as the local CLI
//! socket's requests, as an administrator.

use super::LocalAdmin;
use crate::broker::Broker;
use axum::body::Body;
use axum::http::{header, Request};
use axum::Router;
use std::sync::Arc;

/// The largest answer sent back (a definitions export of a big broker fits).
const ANSWER_LIMIT: usize = 64 << 20;

/// Answers `warren ctl -n` requests naming this node with `app` from now on.
pub fn install(broker: &Arc<Broker>, app: Router) {
    let app = app.layer(axum::Extension(LocalAdmin));
    broker.cli.set(Arc::new(
        move |method: String, path: String, body: Vec<u8>| {
            let inner = hyper_util::service::TowerToHyperService::new(app.clone());
            Box::pin(async move {
                let request = Request::builder()
                    .method(method.as_str())
                    .uri(path)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body));
                let Ok(mut request) = request else {
                    return (400, b"{\"error\":\"bad request\"}".to_vec());
                };
                super::strip_trailing_slash(request.uri_mut());
                let Ok(response) = hyper::service::Service::call(&inner, request).await;
                let status = response.status().as_u16();
                let body = axum::body::to_bytes(response.into_body(), ANSWER_LIMIT)
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default();
                (status, body)
            })
        },
    ));
}
