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
    for kind in [
        "topic",
        "x-consistent-hash",
        "x-delayed-message",
        "x-federation-upstream",
    ] {
        assert!(
            o["exchange_types"]
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t["name"] == kind)),
            "{kind} missing from {}",
            o["exchange_types"]
        );
    }
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

#[tokio::test]
async fn exchanges_bindings_and_publish() {
    let b = start().await;
    let addr = b.server.http_addr;
    let auth = Some(("guest", "guest"));
    let xs = request(addr, "GET", "/api/exchanges/%2F", auth, None)
        .await
        .json();
    assert!(xs.as_array().is_some_and(|a| a
        .iter()
        .any(|x| x["name"] == "amq.topic" && x["type"] == "topic")));
    let d = request(addr, "GET", "/api/exchanges/%2F/amq.default", auth, None)
        .await
        .json();
    assert_eq!(d["name"], "");
    let r = request(
        addr,
        "PUT",
        "/api/exchanges/%2F/events",
        auth,
        Some(r#"{"type":"topic","durable":true}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = request(
        addr,
        "PUT",
        "/api/exchanges/%2F/events",
        auth,
        Some(r#"{"type":"fanout","durable":true}"#),
    )
    .await;
    assert_eq!(r.status, 400, "inequivalent type");
    let r = request(
        addr,
        "PUT",
        "/api/queues/%2F/audit",
        auth,
        Some(r#"{"durable":true}"#),
    )
    .await;
    assert_eq!(r.status, 201);
    let r = request(
        addr,
        "POST",
        "/api/bindings/%2F/e/events/q/audit",
        auth,
        Some(r#"{"routing_key":"order.*"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.headers
            .contains("/api/bindings/%2F/e/events/q/audit/order.*"),
        "{}",
        r.headers
    );
    let r = request(
        addr,
        "POST",
        "/api/bindings/%2F/e/events/q/missing",
        auth,
        Some("{}"),
    )
    .await;
    assert_eq!(r.status, 404);
    let bs = request(addr, "GET", "/api/queues/%2F/audit/bindings", auth, None)
        .await
        .json();
    let keys: Vec<&str> = bs
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|b| b["routing_key"].as_str())
        .collect();
    assert_eq!(
        keys,
        vec!["audit", "order.*"],
        "default-exchange binding first, then the topic one"
    );
    let all = request(addr, "GET", "/api/bindings/%2F", auth, None)
        .await
        .json();
    assert!(all.as_array().is_some_and(|a| a
        .iter()
        .any(|b| b["source"] == "events" && b["destination_type"] == "queue")));
    let r = request(addr, "POST", "/api/exchanges/%2F/events/publish", auth, Some(r#"{"routing_key":"order.created","payload":"hello","payload_encoding":"string","properties":{}}"#)).await;
    assert_eq!(r.json()["routed"], true);
    let r = request(addr, "POST", "/api/exchanges/%2F/events/publish", auth, Some(r#"{"routing_key":"user.created","payload":"aGk=","payload_encoding":"base64","properties":{}}"#)).await;
    assert_eq!(r.json()["routed"], false);
    // The message published over HTTP reaches AMQP consumers.
    let (_c, ch) = b.channel().await;
    let m = within(ch.basic_get("audit".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("published over HTTP");
    assert_eq!(m.delivery.data, b"hello");
    assert_eq!(m.delivery.exchange.as_str(), "events");
    let r = request(
        addr,
        "DELETE",
        "/api/exchanges/%2F/events?if-unused=true",
        auth,
        None,
    )
    .await;
    assert_eq!(r.status, 400, "still bound");
    let r = request(addr, "DELETE", "/api/exchanges/%2F/events", auth, None).await;
    assert_eq!(r.status, 204);
    let r = request(addr, "GET", "/api/exchanges/%2F/events", auth, None).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn whoami_and_users_show_rabbitmq_password_hashes() {
    let b = start().await;
    let addr = b.server.http_addr;
    let auth = Some(("guest", "guest"));
    let me = request(addr, "GET", "/api/whoami", auth, None).await.json();
    assert_eq!(me["name"], "guest");
    assert_eq!(me["tags"][0], "administrator");
    let users = request(addr, "GET", "/api/users", auth, None).await.json();
    let guest = &users[0];
    assert_eq!(guest["hashing_algorithm"], "rabbit_password_hashing_sha256");
    let hash = guest["password_hash"].as_str().expect("hash");
    assert!(warren::auth::User::with_hash("guest", hash, &[])
        .is_some_and(|u| u.password_matches("guest")));
}

/// Full permissions on vhost / for a user.
async fn grant(addr: std::net::SocketAddr, user: &str) {
    let r = request(
        addr,
        "PUT",
        &format!("/api/permissions/%2F/{user}"),
        Some(("guest", "guest")),
        Some(r#"{"configure":".*","write":".*","read":".*"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

#[tokio::test]
async fn users_are_created_updated_and_deleted_and_log_in_over_amqp() {
    let b = start_with(|c| c.loopback_users = vec![]).await;
    let addr = b.server.http_addr;
    let admin = Some(("guest", "guest"));
    // A password user with a tag string.
    let r = request(
        addr,
        "PUT",
        "/api/users/alice",
        admin,
        Some(r#"{"password":"wonder","tags":"monitoring"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    grant(addr, "alice").await;
    b.connect_as("alice", "wonder")
        .await
        .expect("alice logs in");
    assert!(b.connect_as("alice", "wrong").await.is_err());
    let alice = request(addr, "GET", "/api/users/alice", admin, None)
        .await
        .json();
    assert_eq!(alice["tags"], serde_json::json!(["monitoring"]));
    // Not an administrator: the users API is closed to her, with RabbitMQ's reason.
    let r = request(addr, "GET", "/api/users", Some(("alice", "wonder")), None).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["reason"], "Not administrator user");
    // Hashes exported by RabbitMQ with each hashing module ("test12", salt 908DC60A).
    for (name, algorithm, hash) in [
        ("h256", "rabbit_password_hashing_sha256", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"),
        ("h512", "rabbit_password_hashing_sha512", "kI3GChuNuIYf8lRbCCxZjgjKwsY19ns6+uFO0zcXRBGA/XGJPYD8OWMy7EB8TaOmAzjP2azv84GbINYwX2cDWb4DHnc="),
        ("hmd5", "rabbit_password_hashing_md5", "kI3GChNpte2FApYFXScl+0dIluk="),
    ] {
        let body = format!(
            r#"{{"password_hash":"{hash}","hashing_algorithm":"{algorithm}","tags":["management"]}}"#
        );
        let r = request(addr, "PUT", &format!("/api/users/{name}"), admin, Some(&body)).await;
        assert_eq!(r.status, 201, "{name}: {}", r.body);
        grant(addr, name).await;
        b.connect_as(name, "test12").await.expect("imported hash logs in");
    }
    let r = request(
        addr,
        "PUT",
        "/api/users/bad",
        admin,
        Some(r#"{"password_hash":"c2hvcnQ=","tags":""}"#),
    )
    .await;
    assert_eq!(r.status, 400);
    // An update keeps the user, replaces the password.
    let r = request(
        addr,
        "PUT",
        "/api/users/alice",
        admin,
        Some(r#"{"password":"changed","tags":["administrator"]}"#),
    )
    .await;
    assert_eq!(r.status, 204);
    assert!(b.connect_as("alice", "wonder").await.is_err());
    b.connect_as("alice", "changed")
        .await
        .expect("new password");
    // Users survive a restart, hashing module included.
    let b = b.restart().await;
    let addr = b.server.http_addr;
    let h512 = request(addr, "GET", "/api/users/h512", admin, None)
        .await
        .json();
    assert_eq!(h512["hashing_algorithm"], "rabbit_password_hashing_sha512");
    b.connect_as("alice", "changed")
        .await
        .expect("alice after restart");
    // Deleted users can no longer log in.
    let r = request(addr, "DELETE", "/api/users/alice", admin, None).await;
    assert_eq!(r.status, 204);
    assert!(b.connect_as("alice", "changed").await.is_err());
    let r = request(addr, "DELETE", "/api/users/alice", admin, None).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn queue_get_and_purge_over_http() {
    let b = start().await;
    let addr = b.server.http_addr;
    let admin = Some(("guest", "guest"));
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "inbox".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    let mut headers = FieldTable::default();
    headers.insert(
        "origin".into(),
        lapin::types::AMQPValue::LongString("test".into()),
    );
    for body in [&b"first"[..], b"second", b"\xff\x00binary"] {
        within(
            ch.basic_publish(
                "".into(),
                "inbox".into(),
                BasicPublishOptions::default(),
                body,
                lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(headers.clone()),
            ),
        )
        .await
        .expect("publish");
    }
    let ready = |n: u64| async move {
        within(async {
            loop {
                let q = request(addr, "GET", "/api/queues/%2F/inbox", admin, None)
                    .await
                    .json();
                if q["messages_ready"] == n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await
    };
    ready(3).await;
    let got = request(
        addr,
        "POST",
        "/api/queues/%2F/inbox/get",
        admin,
        Some(r#"{"count":2,"ackmode":"ack_requeue_true","encoding":"auto","truncate":50000}"#),
    )
    .await
    .json();
    assert_eq!(got[0]["payload"], "first");
    assert_eq!(got[0]["payload_encoding"], "string");
    assert_eq!(got[0]["routing_key"], "inbox");
    assert_eq!(got[0]["properties"]["delivery_mode"], 2);
    assert_eq!(got[0]["properties"]["headers"]["origin"], "test");
    assert_eq!(got[1]["payload"], "second");
    ready(3).await;
    // Taken for good, in order; the binary one comes as base64.
    let got = request(
        addr,
        "POST",
        "/api/queues/%2F/inbox/get",
        admin,
        Some(r#"{"count":5,"ackmode":"ack_requeue_false","encoding":"auto"}"#),
    )
    .await
    .json();
    assert_eq!(got.as_array().expect("list").len(), 3);
    assert_eq!(got[0]["redelivered"], true);
    assert_eq!(got[2]["payload_encoding"], "base64");
    assert_eq!(got[2]["payload"], "/wBiaW5hcnk=");
    ready(0).await;
    within(ch.basic_publish(
        "".into(),
        "inbox".into(),
        BasicPublishOptions::default(),
        b"x",
        lapin::BasicProperties::default(),
    ))
    .await
    .expect("publish");
    ready(1).await;
    let r = request(
        addr,
        "DELETE",
        "/api/queues/%2F/inbox/contents",
        admin,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    ready(0).await;
    let r = request(
        addr,
        "POST",
        "/api/queues/%2F/inbox/get",
        admin,
        Some(r#"{"count":1,"ackmode":"nope","encoding":"auto"}"#),
    )
    .await;
    assert_eq!(r.status, 400);
}
