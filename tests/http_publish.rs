//! HTTP publish (`POST /api/exchanges/{vhost}/{name}/publish`) goes through the same publish
//! path as AMQP (issue #16, item 7): internal exchanges and missing write or topic permissions
//! are refused with RabbitMQ's 400 texts, delayed exchanges hold the message, and the answer
//! comes only once a persistent message is stored (a SIGKILL right after it loses nothing).

mod common;

use common::http::request;
use common::{ready, start};
use std::time::Duration;

const G: Option<(&str, &str)> = Some(("guest", "guest"));

fn publish_body(key: &str, extra: &str) -> String {
    format!(
        r#"{{"routing_key":"{key}","payload":"hi","payload_encoding":"string","properties":{{{extra}}}}}"#
    )
}

#[tokio::test]
async fn internal_exchanges_and_permissions_are_enforced() {
    let b = start().await;
    let a = b.server.http_addr;
    let put = |path: &'static str, body: &'static str| async move {
        let r = request(a, "PUT", path, G, Some(body)).await;
        assert!(
            r.status == 201 || r.status == 204,
            "{path}: {} {}",
            r.status,
            r.body
        );
    };
    put(
        "/api/exchanges/%2F/ix",
        r#"{"type":"direct","internal":true}"#,
    )
    .await;
    let r = request(
        a,
        "POST",
        "/api/exchanges/%2F/ix/publish",
        G,
        Some(&publish_body("k", "")),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["reason"],
        "403 ACCESS_REFUSED - cannot publish to internal exchange 'ix' in vhost '/'"
    );

    put("/api/users/u", r#"{"password":"p","tags":"management"}"#).await;
    put(
        "/api/permissions/%2F/u",
        r#"{"configure":".*","write":"^amq\\.topic$","read":".*"}"#,
    )
    .await;
    put(
        "/api/topic-permissions/%2F/u",
        r#"{"exchange":"amq.topic","write":"^allowed\\.","read":".*"}"#,
    )
    .await;
    put("/api/queues/%2F/tq", "{}").await;
    let bind = request(
        a,
        "POST",
        "/api/bindings/%2F/e/amq.topic/q/tq",
        G,
        Some(r##"{"routing_key":"#"}"##),
    )
    .await;
    assert_eq!(bind.status, 201, "{}", bind.body);
    let u = Some(("u", "p"));
    let r = request(
        a,
        "POST",
        "/api/exchanges/%2F/amq.topic/publish",
        u,
        Some(&publish_body("denied.x", "")),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["reason"],
        "403 ACCESS_REFUSED - write access to topic 'denied.x' in exchange 'amq.topic' in vhost '/' refused for user 'u'"
    );
    let r = request(
        a,
        "POST",
        "/api/exchanges/%2F/amq.topic/publish",
        u,
        Some(&publish_body("allowed.x", "")),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["routed"].clone()),
        (200, true.into()),
        "{}",
        r.body
    );
    let r = request(
        a,
        "POST",
        "/api/exchanges/%2F/amq.direct/publish",
        u,
        Some(&publish_body("k", "")),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "403 ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user 'u'"
    );
    let (_c, ch) = b.channel().await;
    assert_eq!(ready(&ch, "tq").await, 1);
}

#[tokio::test]
async fn a_delayed_exchange_holds_an_http_publish() {
    let b = start().await;
    let a = b.server.http_addr;
    let r = request(
        a,
        "PUT",
        "/api/exchanges/%2F/dx",
        G,
        Some(r#"{"type":"x-delayed-message","arguments":{"x-delayed-type":"direct"}}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        request(a, "PUT", "/api/queues/%2F/dq", G, Some("{}"))
            .await
            .status,
        201
    );
    let bind = request(
        a,
        "POST",
        "/api/bindings/%2F/e/dx/q/dq",
        G,
        Some(r#"{"routing_key":"k"}"#),
    )
    .await;
    assert_eq!(bind.status, 201);
    let r = request(
        a,
        "POST",
        "/api/exchanges/%2F/dx/publish",
        G,
        Some(&publish_body("k", r#""headers":{"x-delay":400}"#)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Held, so not routed yet (as RabbitMQ's delayed-message exchange answers).
    assert_eq!(r.json()["routed"], false);
    let (_c, ch) = b.channel().await;
    assert_eq!(ready(&ch, "dq").await, 0);
    let mut n = 0;
    for _ in 0..100 {
        n = ready(&ch, "dq").await;
        if n == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(n, 1, "released after its delay");
}

/// The real binary, killed with SIGKILL as soon as the last HTTP publish is answered: every
/// answered persistent message is there after the restart.
#[tokio::test]
async fn an_answered_persistent_http_publish_survives_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut run = common::spawn_binary(dir.path()).await;
    let http = run.http;
    let r = request(
        http,
        "PUT",
        "/api/queues/%2F/dur",
        G,
        Some(r#"{"durable":true}"#),
    )
    .await;
    assert_eq!(r.status, 201);
    const N: usize = 50;
    for _ in 0..N {
        let r = request(
            http,
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            G,
            Some(&publish_body("dur", r#""delivery_mode":2"#)),
        )
        .await;
        assert_eq!((r.status, r.json()["routed"].clone()), (200, true.into()));
    }
    run.child.start_kill().expect("kill");
    let _ = run.child.wait().await;
    let run = common::spawn_binary(dir.path()).await;
    let http = run.http;
    let q = request(http, "GET", "/api/queues/%2F/dur", G, None)
        .await
        .json();
    assert_eq!(q["messages"], N, "{q}");
}
