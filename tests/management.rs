//! The management HTTP API: authentication, the overview, vhosts and queues, and RabbitMQ's
//! error shape.

mod common;

use common::http::request;
use common::*;
use lapin::options::*;
use lapin::types::FieldTable;

#[tokio::test]
async fn credentials_and_tags_gate_access() {
    let b = start().await;
    let addr = b.server.http_addr;
    let r = request(addr, "GET", "/api/overview", None, None).await;
    assert_eq!(r.status, 401);
    assert!(r.headers.to_ascii_lowercase().contains("www-authenticate"));
    assert_eq!(r.json()["error"], "not_authorized");
    let r = request(addr, "GET", "/api/overview", Some(("guest", "wrong")), None).await;
    assert_eq!(r.status, 401);
    let r = request(addr, "GET", "/api/overview", Some(("guest", "guest")), None).await;
    assert_eq!(r.status, 200);
    let r = request(addr, "GET", "/", None, None).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("/api"));
    let r = request(
        addr,
        "GET",
        "/api/nothing-here",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "Object Not Found");
}

#[tokio::test]
async fn overview_reports_product_and_totals() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare("q".into(), Default::default(), FieldTable::default()))
        .await
        .expect("q");
    within(ch.basic_publish(
        "".into(),
        "q".into(),
        Default::default(),
        b"m",
        Default::default(),
    ))
    .await
    .expect("publish");
    within(ch.basic_qos(1, Default::default()))
        .await
        .expect("round trip");
    let o = request(
        b.server.http_addr,
        "GET",
        "/api/overview",
        Some(("guest", "guest")),
        None,
    )
    .await
    .json();
    assert_eq!(o["product_name"], "Warren");
    assert_eq!(o["product_version"], env!("CARGO_PKG_VERSION"));
    assert!(o["rabbitmq_version"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.13")));
    assert_eq!(o["queue_totals"]["messages_ready"], 1);
    assert_eq!(o["object_totals"]["queues"], 1);
    assert!(o["exchange_types"]
        .as_array()
        .is_some_and(|a| a.iter().any(|t| t["name"] == "topic")));
    let v = request(
        b.server.http_addr,
        "GET",
        "/api/vhosts",
        Some(("guest", "guest")),
        None,
    )
    .await
    .json();
    assert_eq!(v[0]["name"], "/");
}

#[tokio::test]
async fn queues_can_be_listed_declared_and_deleted() {
    let b = start().await;
    let addr = b.server.http_addr;
    let auth = Some(("guest", "guest"));
    let r = request(
        addr,
        "PUT",
        "/api/queues/%2F/orders",
        auth,
        Some(r#"{"durable":true,"arguments":{"x-max-length":5}}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = request(
        addr,
        "PUT",
        "/api/queues/%2F/orders",
        auth,
        Some(r#"{"durable":true,"arguments":{"x-max-length":5}}"#),
    )
    .await;
    assert_eq!(r.status, 204, "redeclare");
    let r = request(
        addr,
        "PUT",
        "/api/queues/%2F/orders",
        auth,
        Some(r#"{"durable":false}"#),
    )
    .await;
    assert_eq!(r.status, 400, "inequivalent redeclare");
    assert!(r.json()["reason"]
        .as_str()
        .is_some_and(|t| t.starts_with("inequivalent arg 'durable'")));
    // AMQP sees the queue the API declared.
    let (_c, ch) = b.channel().await;
    let passive = QueueDeclareOptions {
        passive: true,
        durable: true,
        ..Default::default()
    };
    within(ch.queue_declare("orders".into(), passive, FieldTable::default()))
        .await
        .expect("declared over HTTP");
    within(ch.basic_publish(
        "".into(),
        "orders".into(),
        Default::default(),
        b"m",
        Default::default(),
    ))
    .await
    .expect("publish");
    within(ch.basic_qos(1, Default::default()))
        .await
        .expect("round trip");
    let q = request(addr, "GET", "/api/queues/%2F/orders", auth, None)
        .await
        .json();
    assert_eq!(q["name"], "orders");
    assert_eq!(q["vhost"], "/");
    assert_eq!(q["durable"], true);
    assert_eq!(q["messages_ready"], 1);
    assert_eq!(q["arguments"]["x-max-length"], 5);
    let all = request(addr, "GET", "/api/queues", auth, None).await.json();
    assert!(all
        .as_array()
        .is_some_and(|a| a.iter().any(|q| q["name"] == "orders")));
    let r = request(
        addr,
        "DELETE",
        "/api/queues/%2F/orders?if-empty=true",
        auth,
        None,
    )
    .await;
    assert_eq!(r.status, 400, "not empty");
    let r = request(addr, "DELETE", "/api/queues/%2F/orders", auth, None).await;
    assert_eq!(r.status, 204);
    let r = request(addr, "GET", "/api/queues/%2F/orders", auth, None).await;
    assert_eq!(r.status, 404);
    let r = request(addr, "GET", "/api/queues/nope", auth, None).await;
    assert_eq!(r.status, 404);
}
