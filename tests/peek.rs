//! `GET /api/queues/{vhost}/{name}/peek` (Warren's addition for the web UI): the head of a
//! queue in delivery order, taken from nowhere. Checked against what AMQP clients then get:
//! the same messages, in the same order, not flagged redelivered, with priorities and with
//! bodies that only the store holds after a restart; stream queues refuse it as they refuse
//! basic.get.

mod common;

use common::http::request;
use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use serde_json::Value;

async fn peek(b: &TestBroker, queue: &str, count: u32) -> (u16, Value) {
    let path = format!("/api/queues/%2F/{queue}/peek?count={count}");
    let r = request(
        b.server.http_addr,
        "GET",
        &path,
        Some(("guest", "guest")),
        None,
    )
    .await;
    (
        r.status,
        serde_json::from_str(&r.body).unwrap_or(Value::Null),
    )
}

fn payloads(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["payload"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn publish(ch: &lapin::Channel, queue: &str, body: &str, priority: Option<u8>) {
    let mut props = lapin::BasicProperties::default().with_delivery_mode(2);
    if let Some(p) = priority {
        props = props.with_priority(p);
    }
    within(ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        props,
    ))
    .await
    .expect("publish")
    .await
    .expect("confirm");
}

async fn get(ch: &lapin::Channel, queue: &str) -> (String, bool) {
    let m = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("a message");
    (
        String::from_utf8_lossy(&m.delivery.data).into_owned(),
        m.delivery.redelivered,
    )
}

#[tokio::test]
async fn peek_shows_the_head_in_priority_order_and_takes_nothing() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let mut args = FieldTable::default();
    args.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(5));
    within(ch.queue_declare(
        "prio".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    ))
    .await
    .expect("declare");
    publish(&ch, "prio", "low-1", Some(1)).await;
    publish(&ch, "prio", "high", Some(5)).await;
    publish(&ch, "prio", "low-2", Some(1)).await;
    let (status, head) = peek(&b, "prio", 10).await;
    assert_eq!(status, 200, "{head}");
    assert_eq!(payloads(&head), ["high", "low-1", "low-2"]);
    assert!(head
        .as_array()
        .expect("array")
        .iter()
        .all(|m| m["redelivered"] == false));
    // Twice, the same: nothing moved.
    assert_eq!(payloads(&peek(&b, "prio", 2).await.1), ["high", "low-1"]);
    assert_eq!(ready(&ch, "prio").await, 3);
    assert_eq!(get(&ch, "prio").await, ("high".into(), false));
    assert_eq!(get(&ch, "prio").await, ("low-1".into(), false));
    assert_eq!(payloads(&peek(&b, "prio", 10).await.1), ["low-2"]);
}

#[tokio::test]
async fn peek_reads_bodies_only_the_store_holds_after_a_restart() {
    let b = start().await;
    {
        let (_c, ch) = b.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        within(ch.queue_declare(
            "kept".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        .expect("declare");
        for i in 0..5 {
            publish(&ch, "kept", &format!("m{i}"), None).await;
        }
    }
    let b = b.restart().await;
    let (status, head) = peek(&b, "kept", 3).await;
    assert_eq!(status, 200, "{head}");
    assert_eq!(payloads(&head), ["m0", "m1", "m2"]);
    let (_c, ch) = b.channel().await;
    assert_eq!(ready(&ch, "kept").await, 5);
    assert_eq!(get(&ch, "kept").await, ("m0".into(), false));
    // Bad requests and missing queues.
    assert_eq!(peek(&b, "kept", 0).await.0, 400);
    assert_eq!(peek(&b, "kept", 501).await.0, 400);
    assert_eq!(peek(&b, "missing", 1).await.0, 404);
}

#[tokio::test]
async fn stream_queues_refuse_peek_as_they_refuse_get() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    within(ch.queue_declare(
        "log".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    ))
    .await
    .expect("declare");
    let (status, body) = peek(&b, "log", 1).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("540 NOT_IMPLEMENTED")),
        "{body}"
    );
}
