//! The management API's JSON bodies: arbitrary bytes as the body of each write endpoint,
//! through the real router with administrator credentials. No body may cause a 5xx.
#![no_main]

use axum::body::Body;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const ENDPOINTS: [(&str, &str); 6] = [
    ("PUT", "/api/queues/%2F/fq"),
    ("PUT", "/api/exchanges/%2F/fx"),
    ("POST", "/api/exchanges/%2F/amq.default/publish"),
    ("PUT", "/api/users/fuzz-user"),
    ("POST", "/api/bindings/%2F/e/amq.direct/q/fq"),
    ("DELETE", "/api/queues/%2F/fq"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let (method, path) = ENDPOINTS[usize::from(selector) % ENDPOINTS.len()];
    let h = warren_fuzz::harness();
    let app = warren::http::router(h.broker.clone());
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("request");
    let response = h
        .runtime
        .block_on(app.oneshot(request))
        .expect("infallible");
    assert!(
        !response.status().is_server_error(),
        "{method} {path} answered {}",
        response.status()
    );
});
