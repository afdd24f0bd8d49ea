//! `dead-letter-strategy` on one node, as RabbitMQ 3.10 does it (each point checked against
//! it): a quorum queue with `at-least-once`, `reject-publish` and a dead-letter exchange
//! keeps what it dead-letters (`messages_dlx`, in `messages` and `message_bytes`, counted
//! against its length limit, left by a purge) until the target exists; a policy that takes
//! the strategy away drops what is held; with `drop-head` it falls back to at most once;
//! invalid values and classic queues are refused with RabbitMQ's texts; a quorum queue with
//! `reject-publish` refuses publishes once it is over its limit, not at it.

mod common;

use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};
use std::time::{Duration, Instant};

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v.as_bytes().to_vec()))
}

fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Publishes `bodies` with confirms: whether each was acked.
async fn confirmed(ch: &Channel, queue: &str, bodies: &[&str]) -> Vec<bool> {
    let mut out = Vec::new();
    for body in bodies {
        let c = within(ch.basic_publish(
            "".into(),
            queue.into(),
            Default::default(),
            body.as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        ))
        .await
        .expect("publish");
        out.push(within(c).await.expect("confirm").is_ack());
    }
    out
}

/// Takes one message of `queue` and rejects it without requeue.
async fn reject_one(ch: &Channel, queue: &str) {
    let m = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }))
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

/// The queue as the management API shows it, once `ok` holds (at most 15 s).
async fn shown_when(
    b: &TestBroker,
    name: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let v = queue_json(b, name).await;
        if ok(&v) {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "{v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn put_policy(b: &TestBroker, name: &str, body: serde_json::Value) {
    let r = common::http::request(
        b.server.http_addr,
        "PUT",
        &format!("/api/policies/%2f/{name}"),
        Some(("guest", "guest")),
        Some(&body.to_string()),
    )
    .await;
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
}

#[tokio::test]
async fn at_least_once_holds_dead_letters_until_their_target_exists() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    let src = args(&[
        ("x-queue-type", s("quorum")),
        ("x-dead-letter-exchange", s("")),
        ("x-dead-letter-routing-key", s("target")),
        ("x-dead-letter-strategy", s("at-least-once")),
        ("x-overflow", s("reject-publish")),
        ("x-max-length", AMQPValue::LongInt(2)),
    ]);
    within(ch.queue_declare("src".into(), durable(), src))
        .await
        .expect("declare");
    assert_eq!(confirmed(&ch, "src", &["a"]).await, [true]);
    reject_one(&ch, "src").await;
    let v = shown_when(&b, "src", |v| v["messages_dlx"] == 1).await;
    assert_eq!(
        (
            &v["messages"],
            &v["messages_ready"],
            &v["message_bytes"],
            &v["message_bytes_dlx"]
        ),
        (
            &serde_json::json!(1),
            &serde_json::json!(0),
            &serde_json::json!(1),
            &serde_json::json!(1)
        ),
        "{v}"
    );
    // Held ones count against the limit; the queue refuses once over it (as RabbitMQ: b, c
    // taken, d refused).
    assert_eq!(
        confirmed(&ch, "src", &["b", "c", "d"]).await,
        [true, true, false]
    );
    // A purge takes the ready messages only.
    let purged = within(ch.queue_purge("src".into(), Default::default()))
        .await
        .expect("purge");
    assert_eq!(purged, 2);
    let v = shown_when(&b, "src", |v| v["messages_ready"] == 0).await;
    assert_eq!(
        (&v["messages"], &v["messages_dlx"]),
        (&serde_json::json!(1), &serde_json::json!(1))
    );

    // The target appears: the held copy goes there (within a retry, 5 s here; RabbitMQ's is
    // three minutes) and leaves the source.
    within(ch.queue_declare("target".into(), durable(), FieldTable::default()))
        .await
        .expect("declare target");
    shown_when(&b, "src", |v| v["messages_dlx"] == 0 && v["messages"] == 0).await;
    let m = within(ch.basic_get("target".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("the dead letter");
    assert_eq!(m.delivery.data, b"a");

    // A strategy set by policy, then taken away: what is held is dropped (RabbitMQ's caveat).
    let src2 = args(&[
        ("x-queue-type", s("quorum")),
        ("x-dead-letter-exchange", s("")),
        ("x-dead-letter-routing-key", s("nowhere")),
        ("x-overflow", s("reject-publish")),
    ]);
    within(ch.queue_declare("src2".into(), durable(), src2))
        .await
        .expect("declare src2");
    put_policy(
        &b,
        "alo",
        serde_json::json!({"pattern": "^src2$", "apply-to": "queues",
            "definition": {"dead-letter-strategy": "at-least-once"}}),
    )
    .await;
    shown_when(&b, "src2", |v| v["policy"] == "alo").await;
    assert_eq!(confirmed(&ch, "src2", &["x"]).await, [true]);
    reject_one(&ch, "src2").await;
    shown_when(&b, "src2", |v| v["messages_dlx"] == 1).await;
    put_policy(
        &b,
        "alo",
        serde_json::json!({"pattern": "^src2$", "apply-to": "queues",
            "definition": {"dead-letter-strategy": "at-most-once"}}),
    )
    .await;
    shown_when(&b, "src2", |v| v["messages_dlx"] == 0 && v["messages"] == 0).await;
}

#[tokio::test]
async fn drop_head_falls_back_to_at_most_once_and_bad_strategies_are_refused() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    let q = args(&[
        ("x-queue-type", s("quorum")),
        ("x-dead-letter-exchange", s("")),
        ("x-dead-letter-routing-key", s("nowhere")),
        ("x-dead-letter-strategy", s("at-least-once")),
    ]);
    within(ch.queue_declare("fallback".into(), durable(), q))
        .await
        .expect("declare");
    assert_eq!(confirmed(&ch, "fallback", &["x"]).await, [true]);
    reject_one(&ch, "fallback").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let v = queue_json(&b, "fallback").await;
    assert_eq!(
        (&v["messages"], &v["messages_dlx"]),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "{v}"
    );

    // RabbitMQ 3.10's refusals, word for word.
    let refused = [
        (
            "quorum",
            s("bogus"),
            "PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for queue 'bad' in vhost '/': invalid_dlx_strategy",
        ),
        (
            "quorum",
            AMQPValue::LongInt(5),
            "PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for queue 'bad' in vhost '/': {unacceptable_type,signedint}",
        ),
        (
            "classic",
            s("at-most-once"),
            "PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for queue 'bad' in vhost '/' of queue type rabbit_classic_queue",
        ),
    ];
    for (kind, value, text) in refused {
        let ch = within(c.create_channel()).await.expect("channel");
        let a = args(&[("x-queue-type", s(kind)), ("x-dead-letter-strategy", value)]);
        let e = within(ch.queue_declare("bad".into(), durable(), a))
            .await
            .expect_err("refused");
        assert_eq!(code(&e), Some(406));
        assert!(e.to_string().contains(text), "{e}");
    }

    // A quorum queue with reject-publish takes one past its limit, a classic one none.
    for (kind, want) in [
        ("quorum", [true, true, true, false, false]),
        ("classic", [true, true, false, false, false]),
    ] {
        let ch = within(c.create_channel()).await.expect("channel");
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirms");
        let name = format!("limited-{kind}");
        let a = args(&[
            ("x-queue-type", s(kind)),
            ("x-overflow", s("reject-publish")),
            ("x-max-length", AMQPValue::LongInt(2)),
        ]);
        within(ch.queue_declare(name.as_str().into(), durable(), a))
            .await
            .expect("declare");
        assert_eq!(
            confirmed(&ch, &name, &["1", "2", "3", "4", "5"]).await,
            want,
            "{kind}"
        );
    }
}
