//! At-least-once dead-lettering of a quorum queue across three real `warren` processes (#18),
//! as RabbitMQ 3.10+ does it (`dead-letter-strategy: at-least-once`, `overflow:
//! reject-publish`): messages rejected while their dead-letter target does not exist stay in
//! the queue (`messages_dlx`, counted in `messages`, not ready), survive kill -9 of the
//! leader's node (the copies are in the queue's Raft group), and reach the target once it is
//! declared, each once, with its `x-death`; then the queue holds none.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::http::request;
use lapin::options::{BasicGetOptions, BasicNackOptions};
use lapin::types::{AMQPValue, FieldTable};
use std::time::{Duration, Instant};

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

/// `GET /api/queues/%2F/{name}` through `http`, once it satisfies `ok` (at most 30 s).
async fn shown_when(
    http: std::net::SocketAddr,
    name: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let path = format!("/api/queues/%2F/{name}");
        let r = request(http, "GET", &path, Some(("guest", "guest")), None).await;
        let v = r.json();
        if r.status == 200 && ok(&v) {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_held_at_least_once_survive_the_leaders_node_and_reach_their_target() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let mut args: FieldTable = quorum();
    args.insert("x-dead-letter-exchange".into(), text(""));
    args.insert("x-dead-letter-routing-key".into(), text("target"));
    args.insert("x-dead-letter-strategy".into(), text("at-least-once"));
    args.insert("x-overflow".into(), text("reject-publish"));
    within(
        channel(&a)
            .await
            .queue_declare("src".into(), durable(), args),
    )
    .await
    .expect("declare src on a");

    // Three confirmed through b, rejected through c: no queue named `target` yet.
    publish_confirmed(&b, "", "src", "m", 3).await;
    let rejecter = channel(&c).await;
    for _ in 0..3 {
        let m = within(rejecter.basic_get("src".into(), BasicGetOptions { no_ack: false }))
            .await
            .expect("get")
            .expect("a message");
        within(m.delivery.nack(BasicNackOptions {
            requeue: false,
            multiple: false,
        }))
        .await
        .expect("nack");
    }
    let shown = shown_when(specs[1].http, "src", |v| v["messages_dlx"] == 3).await;
    assert_eq!(
        (
            &shown["messages"],
            &shown["messages_ready"],
            &shown["messages_unacknowledged"],
            &shown["delivery_limit"],
            &shown["leader"],
        ),
        (
            &serde_json::json!(3),
            &serde_json::json!(0),
            &serde_json::json!(0),
            &serde_json::json!(20),
            &serde_json::json!(NAMES[0]),
        ),
        "{shown}"
    );
    // The copies are committed with the rejects: let them be.
    tokio::time::sleep(Duration::from_millis(500)).await;

    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    let shown = shown_when(specs[1].http, "src", |v| {
        v["leader"].as_str().is_some_and(|l| l != NAMES[0]) && v["messages_dlx"] == 3
    })
    .await;
    assert_eq!(shown["messages_ready"], 0, "{shown}");

    // The target appears (a classic queue on c): the new leader sends the copies there.
    within(
        channel(&c)
            .await
            .queue_declare("target".into(), durable(), FieldTable::default()),
    )
    .await
    .expect("declare target on c");
    eventually_count(&b, "target", 3, "the held copies reach their target").await;
    shown_when(specs[1].http, "src", |v| {
        v["messages_dlx"] == 0 && v["messages"] == 0
    })
    .await;
    let ch = channel(&c).await;
    let mut bodies = Vec::new();
    while let Some(m) = within(ch.basic_get("target".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
    {
        let deaths = m
            .delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("x-death").cloned());
        let reason = match deaths {
            Some(AMQPValue::FieldArray(a)) => match a.as_slice().first() {
                Some(AMQPValue::FieldTable(t)) => t.inner().get("reason").cloned(),
                _ => None,
            },
            _ => None,
        };
        assert_eq!(reason, Some(text("rejected")));
        bodies.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    bodies.sort();
    assert_eq!(bodies, ["m-0", "m-1", "m-2"], "each copy once");
    for mut child in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}
