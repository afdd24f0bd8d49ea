//! Migrating off RabbitMQ and back (#21, docs/MIGRATING.md), against a real RabbitMQ 3.10
//! started by the harness: its definitions exported and imported into Warren, every queue's
//! backlog shovelled over with `src-delete-after: queue-length` while producers keep
//! publishing to RabbitMQ and then switch to Warren, consumers draining Warren; every message
//! published arrives. Then the way back, with RabbitMQ's own shovel plugin reading from Warren
//! and Warren's definitions imported into RabbitMQ.

mod common;

use common::http::{request, Response};
use common::rabbitmq::Rabbit;
use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const GUEST: Option<(&str, &str)> = Some(("guest", "guest"));
const QUEUES: [(&str, &str); 2] = [("orders", "order"), ("events", "event")];

async fn api(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Response {
    let text = body.map(Value::to_string);
    request(addr, method, path, GUEST, text.as_deref()).await
}

async fn eventually<F, Fut>(what: &str, secs: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..secs * 20 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn connect(uri: &str) -> (Connection, Channel) {
    let c = within(Connection::connect(uri, ConnectionProperties::default()))
        .await
        .expect("connect");
    let ch = within(c.create_channel()).await.expect("channel");
    (c, ch)
}

/// Ready messages in a queue, by a passive declare on a channel of its own (0 if missing).
async fn depth(uri: &str, q: &str) -> u32 {
    let (c, ch) = connect(uri).await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let n = within(ch.queue_declare(q.into(), passive, FieldTable::default()))
        .await
        .map_or(0, |ok| ok.message_count());
    let _ = c.close(200, "".into()).await;
    n
}

/// Publishes `p-{i}` for i in `range` through exchange `shop` (keys alternating over the two
/// queues), with confirms.
async fn produce(uri: &str, range: std::ops::Range<usize>) {
    let (_c, ch) = connect(uri).await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    for i in range {
        let key = QUEUES[i % 2].1;
        within(ch.basic_publish(
            "shop".into(),
            key.into(),
            Default::default(),
            format!("p-{i}").as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        ))
        .await
        .expect("publish");
        if i % 50 == 49 {
            within(ch.wait_for_confirms()).await.expect("confirms");
        }
    }
    within(ch.wait_for_confirms()).await.expect("confirms");
}

/// Consumers on both queues of `uri`, acking; what they received, body -> times.
async fn consume(uri: &str) -> (Connection, Arc<Mutex<HashMap<String, usize>>>) {
    let (c, ch) = connect(uri).await;
    let seen = Arc::new(Mutex::new(HashMap::new()));
    for (q, _) in QUEUES {
        let mut consumer = within(ch.basic_consume(
            q.into(),
            format!("drain-{q}").as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("consume");
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(d)) = consumer.next().await {
                let body = String::from_utf8_lossy(&d.data).into_owned();
                *seen.lock().unwrap().entry(body).or_insert(0) += 1;
                let _ = d.ack(BasicAckOptions::default()).await;
            }
        });
    }
    (c, seen)
}

/// RabbitMQ's topology on the broker at `http`: exchange `shop` routing to two durable queues,
/// and a user `app`.
async fn topology(http: SocketAddr) {
    let puts = [
        (
            "/api/exchanges/%2F/shop",
            json!({"type": "direct", "durable": true}),
        ),
        ("/api/queues/%2F/orders", json!({"durable": true})),
        ("/api/queues/%2F/events", json!({"durable": true})),
        ("/api/users/app", json!({"password": "s3cret", "tags": ""})),
        (
            "/api/permissions/%2F/app",
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        ),
    ];
    for (path, body) in puts {
        let r = api(http, "PUT", path, Some(&body)).await;
        assert!(r.status < 300, "{path}: {} {}", r.status, r.body);
    }
    for (q, key) in QUEUES {
        let path = format!("/api/bindings/%2F/e/shop/q/{q}");
        let r = api(http, "POST", &path, Some(&json!({"routing_key": key}))).await;
        assert!(r.status < 300, "{path}: {} {}", r.status, r.body);
    }
}

/// Declares a queue-length shovel for each queue on `host`; returns their names.
async fn shovel_backlogs(host: SocketAddr, src: &str, dest: &str, round: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (q, _) in QUEUES {
        let name = format!("{round}-{q}");
        let value = json!({"src-uri": src, "src-queue": q, "dest-uri": dest, "dest-queue": q,
                           "src-delete-after": "queue-length", "reconnect-delay": 1});
        let path = format!("/api/parameters/shovel/%2F/{name}");
        let r = api(host, "PUT", &path, Some(&json!({ "value": value }))).await;
        assert_eq!(r.status, 201, "{name}: {}", r.body);
        names.push(name);
    }
    names
}

async fn wait_shovels_gone(host: SocketAddr, names: &[String]) {
    for name in names {
        let path = format!("/api/parameters/shovel/%2F/{name}");
        eventually(&format!("shovel {name} to finish"), 120, || async {
            api(host, "GET", &path, None).await.status == 404
        })
        .await;
    }
}

fn check_all(seen: &Mutex<HashMap<String, usize>>, n: usize) -> usize {
    let seen = seen.lock().unwrap();
    let missing: Vec<usize> = (0..n)
        .filter(|i| !seen.contains_key(&format!("p-{i}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} never consumed: {missing:?}",
        missing.len()
    );
    let unknown: Vec<&String> = seen
        .keys()
        .filter(|k| {
            k.strip_prefix("p-")
                .and_then(|i| i.parse::<usize>().ok())
                .is_none_or(|i| i >= n)
        })
        .collect();
    assert!(unknown.is_empty(), "never published: {unknown:?}");
    seen.values().filter(|&&c| c > 1).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_rabbitmq_into_warren_while_producers_switch_and_back_again() {
    let rabbit = Rabbit::start().await;
    let warren = start().await;
    let (r_http, w_http) = (rabbit.http, warren.server.http_addr);
    let r_uri = format!("{}/%2f", rabbit.uri());
    let w_uri = warren.url();
    topology(r_http).await;
    produce(&r_uri, 0..400).await;

    // 1. Definitions: RabbitMQ's export imported into Warren (the user keeps its password).
    let defs = api(r_http, "GET", "/api/definitions", None).await.json();
    let r = api(w_http, "POST", "/api/definitions", Some(&defs)).await;
    assert!(r.status < 300, "import: {} {}", r.status, r.body);
    warren
        .connect_as("app", "s3cret")
        .await
        .expect("app logs in to Warren");

    // 2. Consumers move to Warren; backlogs follow while producers still publish to RabbitMQ.
    let (consumers, seen) = consume(&w_uri).await;
    let first = shovel_backlogs(w_http, &rabbit.uri(), "amqp://", "backlog").await;
    produce(&r_uri, 400..600).await;

    // 3. Producers switch to Warren; a second pass moves what reached RabbitMQ meanwhile.
    produce(&w_uri, 600..800).await;
    wait_shovels_gone(w_http, &first).await;
    let rest = shovel_backlogs(w_http, &rabbit.uri(), "amqp://", "rest").await;
    wait_shovels_gone(w_http, &rest).await;
    for (q, _) in QUEUES {
        assert_eq!(depth(&r_uri, q).await, 0, "{q} left on RabbitMQ");
    }
    eventually("every message consumed from Warren", 60, || async {
        seen.lock().unwrap().len() >= 800
    })
    .await;
    let twice = check_all(&seen, 800);
    eprintln!("off RabbitMQ: 800 published, all consumed, {twice} twice");

    // 4. And back: Warren's definitions into RabbitMQ, whose own shovel drains Warren.
    within(consumers.close(200, "moving back".into()))
        .await
        .expect("close Warren's consumers");
    produce(&w_uri, 800..1000).await;
    let defs = api(w_http, "GET", "/api/definitions", None).await.json();
    let r = api(r_http, "POST", "/api/definitions", Some(&defs)).await;
    assert!(
        r.status < 300,
        "import into RabbitMQ: {} {}",
        r.status,
        r.body
    );
    let (_back, seen_back) = consume(&r_uri).await;
    let warren_src = format!("amqp://guest:guest@{}", warren.server.amqp_addr);
    let home = shovel_backlogs(r_http, &warren_src, "amqp://", "home").await;
    wait_shovels_gone(r_http, &home).await;
    for (q, _) in QUEUES {
        assert_eq!(depth(&w_uri, q).await, 0, "{q} left on Warren");
    }
    eventually("every message consumed from RabbitMQ", 60, || async {
        let seen = seen_back.lock().unwrap();
        (800..1000).all(|i| seen.contains_key(&format!("p-{i}")))
    })
    .await;
}
