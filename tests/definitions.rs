//! Definitions in RabbitMQ's JSON format: a RabbitMQ-shaped export imported over HTTP works over
//! AMQP (users with their hashes, vhosts, permissions, exchanges, queues, bindings); exports
//! round-trip into a fresh node; `load_definitions` seeds a node at boot.

mod common;

use common::http::request;
use common::*;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

/// Shaped like `rabbitmqctl export_definitions` from RabbitMQ 3.13 (user "app", password
/// "test12" with RabbitMQ's documented sha256 example hash).
const RABBITMQ_EXPORT: &str = r##"{
  "rabbit_version": "3.13.7",
  "rabbitmq_version": "3.13.7",
  "product_name": "RabbitMQ",
  "product_version": "3.13.7",
  "users": [
    {"name": "app", "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
     "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["management"], "limits": {}}
  ],
  "vhosts": [{"name": "orders", "description": "", "tags": [], "metadata": {"description": "", "tags": []}}],
  "permissions": [{"user": "app", "vhost": "orders", "configure": ".*", "write": ".*", "read": ".*"}],
  "topic_permissions": [{"user": "app", "vhost": "orders", "exchange": "events", "write": "^order\\.", "read": ".*"}],
  "parameters": [],
  "global_parameters": [{"name": "cluster_name", "value": "rabbit@old"}],
  "policies": [],
  "queues": [
    {"name": "created", "vhost": "orders", "durable": true, "auto_delete": false,
     "arguments": {"x-queue-type": "classic", "x-message-ttl": 60000}}
  ],
  "exchanges": [
    {"name": "events", "vhost": "orders", "type": "topic", "durable": true, "auto_delete": false,
     "internal": false, "arguments": {}},
    {"name": "audit", "vhost": "orders", "type": "fanout", "durable": true, "auto_delete": false,
     "internal": false, "arguments": {}}
  ],
  "bindings": [
    {"source": "events", "vhost": "orders", "destination": "created", "destination_type": "queue",
     "routing_key": "order.created", "arguments": {}},
    {"source": "events", "vhost": "orders", "destination": "audit", "destination_type": "exchange",
     "routing_key": "#", "arguments": {}}
  ]
}"##;

#[tokio::test]
async fn a_rabbitmq_export_imports_and_works_over_amqp() {
    let b = start().await;
    let addr = b.server.http_addr;
    let r = request(
        addr,
        "POST",
        "/api/definitions",
        ADMIN,
        Some(RABBITMQ_EXPORT),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    // The imported user logs in with the password behind the imported hash.
    let url = format!("amqp://app:test12@{}/orders", b.server.amqp_addr);
    let conn = within(lapin::Connection::connect(&url, Default::default()))
        .await
        .expect("imported user and vhost");
    let ch = within(conn.create_channel()).await.expect("channel");
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirms");
    within(async {
        ch.basic_publish(
            "events".into(),
            "order.created".into(),
            BasicPublishOptions::default(),
            b"o-1",
            BasicProperties::default(),
        )
        .await?
        .await
    })
    .await
    .expect("routed through the imported binding");
    let q = within(ch.queue_declare(
        "created".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("imported queue");
    assert_eq!(q.message_count(), 1);
    // The imported topic permission applies.
    let e = within(async {
        ch.basic_publish(
            "events".into(),
            "invoice.sent".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await?
        .await
    })
    .await
    .expect_err("topic permission");
    assert_eq!(code(&e), Some(403));
    // And everything survives a restart.
    let b = b.restart().await;
    let url = format!("amqp://app:test12@{}/orders", b.server.amqp_addr);
    within(lapin::Connection::connect(&url, Default::default()))
        .await
        .expect("still there after a restart");
}

#[tokio::test]
async fn exports_round_trip_into_a_fresh_node() {
    let a = start().await;
    let r = request(
        a.server.http_addr,
        "POST",
        "/api/definitions",
        ADMIN,
        Some(RABBITMQ_EXPORT),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let exported = request(a.server.http_addr, "GET", "/api/definitions", ADMIN, None)
        .await
        .json();
    assert_eq!(exported["product_name"], "Warren");
    let names = |doc: &serde_json::Value, key: &str| -> Vec<String> {
        let mut v: Vec<String> = doc[key]
            .as_array()
            .expect("list")
            .iter()
            .map(|e| e.to_string())
            .collect();
        v.sort();
        v
    };
    assert!(exported["users"]
        .as_array()
        .expect("users")
        .iter()
        .any(|u| u["name"] == "app"
            && u["password_hash"] == "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"));
    assert_eq!(exported["queues"][0]["arguments"]["x-message-ttl"], 60000);
    let b = start().await;
    let r = request(
        b.server.http_addr,
        "POST",
        "/api/definitions",
        ADMIN,
        Some(&exported.to_string()),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let again = request(b.server.http_addr, "GET", "/api/definitions", ADMIN, None)
        .await
        .json();
    for key in [
        "vhosts",
        "users",
        "permissions",
        "topic_permissions",
        "queues",
        "exchanges",
        "bindings",
    ] {
        let (x, y) = (names(&exported, key), names(&again, key));
        // The fresh node's own guest user has a different salt; everything else is identical.
        if key == "users" {
            assert_eq!(x.len(), y.len());
        } else {
            assert_eq!(x, y, "{key}");
        }
    }
    // One vhost's definitions.
    let one = request(
        a.server.http_addr,
        "GET",
        "/api/definitions/orders",
        ADMIN,
        None,
    )
    .await
    .json();
    assert!(one.get("users").is_none());
    assert_eq!(one["queues"][0]["name"], "created");
    assert!(one["queues"][0].get("vhost").is_none());
}

#[tokio::test]
async fn bad_definitions_are_400_and_load_definitions_seeds_a_node() {
    let b = start().await;
    let r = request(
        b.server.http_addr,
        "POST",
        "/api/definitions",
        ADMIN,
        Some(r#"{"queues":[{"name":"q","vhost":"nowhere","durable":true}]}"#),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["reason"]
        .as_str()
        .expect("reason")
        .contains("nowhere"));
    // Bodies up to RabbitMQ's 20 MB are read; beyond, RabbitMQ's 400.
    let padded = format!(
        r#"{{"padding": "{}", "queues": []}}"#,
        "x".repeat(5_000_000)
    );
    let r = request(
        b.server.http_addr,
        "POST",
        "/api/definitions",
        ADMIN,
        Some(&padded),
    )
    .await;
    assert_eq!(r.status, 204, "a 5 MB body is accepted");
    let r = oversized_post(b.server.http_addr, "/api/definitions", 20_000_001).await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(
        r.contains(r#"{"error":"bad_request","reason":"Exceeded HTTP request body size limit"}"#),
        "{r}"
    );
    let file = b.dir.path().join("definitions.json");
    std::fs::write(&file, RABBITMQ_EXPORT).expect("write");
    let seeded = start_with(|c| c.load_definitions = Some(file)).await;
    let r = request(
        seeded.server.http_addr,
        "GET",
        "/api/queues/orders/created",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Announces a body of `length` bytes but sends only its start; returns the raw response.
async fn oversized_post(addr: std::net::SocketAddr, path: &str, length: usize) -> String {
    use base64::Engine;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let token = base64::engine::general_purpose::STANDARD.encode("guest:guest");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n{{\"queues\": ["
    );
    sock.write_all(head.as_bytes()).await.expect("send");
    let mut raw = vec![0u8; 4096];
    let n = within(sock.read(&mut raw)).await.expect("read");
    String::from_utf8_lossy(&raw[..n]).into_owned()
}

/// A real export from RabbitMQ 3.10.8 (made with its management API: user "app" with password
/// "test12", user and vhost limits, a topic permission, classic, quorum and stream queues,
/// policies including a plugin key, an operator policy).
const REAL_EXPORT: &str = include_str!("fixtures/rabbitmq-3.10.8-definitions.json");

#[tokio::test]
async fn a_real_rabbitmq_export_with_policies_imports_and_round_trips() {
    let b = start().await;
    let addr = b.server.http_addr;
    let r = request(addr, "POST", "/api/definitions", ADMIN, Some(REAL_EXPORT)).await;
    // Everything is created, the stream queue too.
    assert_eq!(r.status, 204, "{}", r.body);
    let url = format!("amqp://app:test12@{}/orders", b.server.amqp_addr);
    let conn = within(lapin::Connection::connect(&url, Default::default()))
        .await
        .expect("imported user");
    let ch = within(conn.create_channel()).await.expect("channel");
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirms");
    // The imported policy caps "capped" at 2 with reject-publish: the third is nacked.
    let mut acks = Vec::new();
    for i in 0..3u8 {
        let c = within(ch.basic_publish(
            "".into(),
            "capped".into(),
            BasicPublishOptions::default(),
            &[i],
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
        acks.push(within(c).await.expect("confirm").is_ack());
    }
    assert_eq!(acks, [true, true, false]);
    let get =
        |path: &'static str| async move { request(addr, "GET", path, ADMIN, None).await.json() };
    assert_eq!(get("/api/queues/orders/history").await["type"], "stream");
    let q = get("/api/queues/orders/created").await;
    assert_eq!(q["operator_policy"], "ops");
    assert_eq!(q["effective_policy_definition"]["expires"], 86_400_000);
    assert_eq!(get("/api/exchanges/orders/events").await["policy"], "ae");
    assert_eq!(
        get("/api/user-limits/app").await[0]["value"]["max-connections"],
        20
    );
    assert_eq!(
        get("/api/vhost-limits/orders").await[0]["value"]["max-queues"],
        500
    );
    // Warren's export re-imports into a fresh node with nothing lost.
    let exported = get("/api/definitions").await;
    let fresh = start().await;
    let r = request(
        fresh.server.http_addr,
        "POST",
        "/api/definitions",
        ADMIN,
        Some(&exported.to_string()),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let again = request(
        fresh.server.http_addr,
        "GET",
        "/api/definitions",
        ADMIN,
        None,
    )
    .await
    .json();
    for key in [
        "policies",
        "parameters",
        "queues",
        "exchanges",
        "bindings",
        "permissions",
    ] {
        let sorted = |doc: &serde_json::Value| {
            let mut v: Vec<String> = doc[key]
                .as_array()
                .expect("list")
                .iter()
                .map(|e| e.to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(sorted(&exported), sorted(&again), "{key}");
    }
    assert_eq!(exported["policies"].as_array().map(Vec::len), Some(3));
    let app = |doc: &serde_json::Value| {
        doc["users"]
            .as_array()
            .expect("users")
            .iter()
            .find(|u| u["name"] == "app")
            .cloned()
    };
    assert_eq!(app(&exported), app(&again));
    assert_eq!(app(&again).expect("app")["limits"]["max-connections"], 20);
}
