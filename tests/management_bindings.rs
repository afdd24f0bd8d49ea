//! Bindings over the management API: exchange-to-queue and exchange-to-exchange bindings
//! created with POST (a `Location` naming the binding), read and deleted one by one by their
//! properties key, and an exchange's bindings as source and destination; each checked against
//! what AMQP publishes reach.

mod common;

use common::http::request;
use common::*;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

/// Publishes to `exchange` with `key` and reports whether the queue `q` got it (basic.get).
async fn reaches(ch: &lapin::Channel, exchange: &str, key: &str, q: &str) -> bool {
    within(ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        b"m",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("passive declare");
    within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .is_some()
}

#[tokio::test]
async fn bindings_are_created_read_and_deleted_by_properties_key() {
    let b = start().await;
    let addr = b.server.http_addr;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "sink".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("queue");
    for (x, kind) in [("front", "direct"), ("back", "fanout")] {
        let body = format!(r#"{{"type":"{kind}","durable":false}}"#);
        let r = request(
            addr,
            "PUT",
            &format!("/api/exchanges/%2F/{x}"),
            ADMIN,
            Some(&body),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // front --(k, with an argument)--> back --> sink
    let r = request(
        addr,
        "POST",
        "/api/bindings/%2F/e/front/e/back",
        ADMIN,
        Some(r#"{"routing_key":"k","arguments":{"x-note":"e2e"}}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let location = r
        .headers
        .lines()
        .find_map(|l| {
            l.strip_prefix("location: ")
                .or_else(|| l.strip_prefix("Location: "))
        })
        .expect("Location header")
        .trim()
        .to_owned();
    assert!(
        location.starts_with("/api/bindings/%2F/e/front/e/back/k~"),
        "{location}"
    );
    let r = request(
        addr,
        "POST",
        "/api/bindings/%2F/e/back/q/sink",
        ADMIN,
        Some("{}"),
    )
    .await;
    assert_eq!(r.status, 201);
    assert!(reaches(&ch, "front", "k", "sink").await);
    let one = request(addr, "GET", &location, ADMIN, None).await.json();
    assert_eq!(one["arguments"]["x-note"], "e2e");
    assert_eq!(one["destination_type"], "exchange");
    let between = request(addr, "GET", "/api/bindings/%2F/e/back/q/sink", ADMIN, None)
        .await
        .json();
    assert_eq!(between[0]["properties_key"], "~");
    let source = request(
        addr,
        "GET",
        "/api/exchanges/%2F/front/bindings/source",
        ADMIN,
        None,
    )
    .await
    .json();
    assert_eq!(source.as_array().expect("list").len(), 1);
    let dest = request(
        addr,
        "GET",
        "/api/exchanges/%2F/back/bindings/destination",
        ADMIN,
        None,
    )
    .await
    .json();
    assert_eq!(dest[0]["source"], "front");
    // Deleted by its key: publishes stop arriving.
    assert_eq!(
        request(addr, "DELETE", &location, ADMIN, None).await.status,
        204
    );
    assert_eq!(
        request(addr, "GET", &location, ADMIN, None).await.status,
        404
    );
    assert!(!reaches(&ch, "front", "k", "sink").await);
    assert!(reaches(&ch, "back", "", "sink").await);
    let r = request(
        addr,
        "DELETE",
        "/api/bindings/%2F/e/back/q/sink/~",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    assert!(!reaches(&ch, "back", "", "sink").await);
}
