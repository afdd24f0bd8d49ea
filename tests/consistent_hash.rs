//! The `x-consistent-hash` exchange (RabbitMQ's bundled plugin): its declare and binding errors
//! with RabbitMQ 3.10's texts, one queue per message spread by binding weight, hashing on a
//! header or a property, and the same key landing on the same queue after a restart.

mod common;

use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use std::collections::HashMap;

const CHX: &str = "x-consistent-hash";

fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

async fn declare_chx(ch: &Channel, name: &str, durable: bool, a: FieldTable) -> lapin::Result<()> {
    within(ch.exchange_declare(
        name.into(),
        ExchangeKind::Custom(CHX.into()),
        ExchangeDeclareOptions {
            durable,
            ..Default::default()
        },
        a,
    ))
    .await
}

async fn bind(ch: &Channel, q: &str, x: &str, key: &str) -> lapin::Result<()> {
    within(ch.queue_bind(
        q.into(),
        x.into(),
        key.into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
}

async fn queues(ch: &Channel, names: &[&str], durable: bool) {
    for q in names {
        within(ch.queue_declare(
            (*q).into(),
            QueueDeclareOptions {
                durable,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        .expect("queue.declare");
    }
}

/// Asserts a 406 whose text is RabbitMQ's.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: lapin::Result<T>, text: &str) {
    match r {
        Ok(v) => panic!("expected 406 ({text}), got {v:?}"),
        Err(e) => {
            assert_eq!(code(&e), Some(406), "{e}");
            let want = format!("PRECONDITION_FAILED - {text}");
            assert!(e.to_string().contains(&want), "{e} lacks {want}");
        }
    }
}

async fn fresh(c: &Connection) -> Channel {
    within(c.create_channel()).await.expect("channel")
}

/// Publishes one message per (routing key, properties) with confirms; the body is the key.
async fn publish_all(ch: &Channel, x: &str, msgs: &[(String, BasicProperties)]) {
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    for (key, props) in msgs {
        within(ch.basic_publish(
            x.into(),
            key.as_str().into(),
            Default::default(),
            key.as_bytes(),
            props.clone(),
        ))
        .await
        .expect("publish");
    }
    within(ch.wait_for_confirms()).await.expect("confirms");
}

/// Drains the queues with basic.get: body -> the queue it was in (and how many it found).
async fn drain(ch: &Channel, names: &[&str]) -> (HashMap<String, String>, HashMap<String, usize>) {
    let (mut placed, mut counts) = (HashMap::new(), HashMap::new());
    for q in names {
        let n: &mut usize = counts.entry((*q).to_owned()).or_default();
        while let Some(m) = within(ch.basic_get((*q).into(), BasicGetOptions { no_ack: true }))
            .await
            .expect("basic.get")
        {
            *n += 1;
            placed.insert(
                String::from_utf8_lossy(&m.delivery.data).into_owned(),
                (*q).to_owned(),
            );
        }
    }
    (placed, counts)
}

fn keys(n: usize) -> Vec<(String, BasicProperties)> {
    (0..n)
        .map(|i| (format!("key-{i}"), BasicProperties::default()))
        .collect()
}

#[tokio::test]
async fn declare_and_binding_errors_are_rabbitmqs() {
    let b = start().await;
    let c = b.connect().await;
    refused(
        declare_chx(
            &fresh(&c).await,
            "h",
            false,
            args(&[("hash-property", text("foo"))]),
        )
        .await,
        "Unsupported property: foo",
    );
    refused(
        declare_chx(
            &fresh(&c).await,
            "h",
            false,
            args(&[
                ("hash-property", text("message_id")),
                ("hash-header", text("h")),
            ]),
        )
        .await,
        "hash-header and hash-property are mutually exclusive",
    );
    // A non-string argument crashes RabbitMQ's channel (541); Warren refuses it.
    refused(
        declare_chx(
            &fresh(&c).await,
            "h",
            false,
            args(&[("hash-header", AMQPValue::LongInt(5))]),
        )
        .await,
        "hash-header must be a string",
    );
    let ch = fresh(&c).await;
    declare_chx(&ch, "h", false, FieldTable::default())
        .await
        .expect("declare");
    // As in RabbitMQ, the arguments are checked only when the exchange is created.
    declare_chx(&ch, "h", false, args(&[("hash-property", text("foo"))]))
        .await
        .expect("redeclare");
    queues(&ch, &["q"], false).await;
    for (key, why) in [
        ("abc", r#"The binding key must be an integer: <<"abc">>"#),
        ("", "The binding key must be an integer: <<>>"),
        ("5.0", r#"The binding key must be an integer: <<"5.0">>"#),
        (" 5", r#"The binding key must be an integer: <<" 5">>"#),
        ("0", "The binding key must be greater than 0"),
        ("-1", "The binding key must be greater than 0"),
    ] {
        refused(bind(&fresh(&c).await, "q", "h", key).await, why);
    }
    refused(
        within(fresh(&c).await.exchange_bind(
            "amq.fanout".into(),
            "h".into(),
            "abc".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        r#"The binding key must be an integer: <<"abc">>"#,
    );
    let ch = fresh(&c).await;
    for key in ["+3", "007", "10001"] {
        bind(&ch, "q", "h", key).await.expect("a weight");
    }
    // Unbinding what could never be bound succeeds, as any unbind of nothing.
    within(ch.queue_unbind("q".into(), "h".into(), "abc".into(), FieldTable::default()))
        .await
        .expect("unbind");
}

#[tokio::test]
async fn each_message_goes_to_one_queue_by_weight_and_a_key_sticks() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare_chx(&ch, "parts", false, FieldTable::default())
        .await
        .expect("declare");
    let names = ["p1", "p2", "p3"];
    queues(&ch, &names, false).await;
    for (q, w) in [("p1", "1"), ("p2", "1"), ("p3", "2")] {
        bind(&ch, q, "parts", w).await.expect("bind");
    }
    publish_all(&ch, "parts", &keys(4000)).await;
    let (placed, counts) = drain(&ch, &names).await;
    assert_eq!(placed.len(), 4000, "{counts:?}");
    assert_eq!(counts.values().sum::<usize>(), 4000, "routed once each");
    assert!((800..1200).contains(&counts["p1"]), "{counts:?}");
    assert!((800..1200).contains(&counts["p2"]), "{counts:?}");
    assert!((1700..2300).contains(&counts["p3"]), "{counts:?}");

    // The same keys again land where they did.
    let again: Vec<_> = keys(4000).into_iter().step_by(40).collect();
    publish_all(&ch, "parts", &again).await;
    let (placed_again, _) = drain(&ch, &names).await;
    for (key, q) in &placed_again {
        assert_eq!(&placed[key], q, "{key} moved");
    }

    // Unbinding p3 moves only p3's keys.
    within(ch.queue_unbind(
        "p3".into(),
        "parts".into(),
        "2".into(),
        FieldTable::default(),
    ))
    .await
    .expect("unbind");
    publish_all(&ch, "parts", &keys(4000)).await;
    let (without, counts) = drain(&ch, &names).await;
    assert_eq!(counts["p3"], 0);
    for (key, q) in &placed {
        if q != "p3" {
            assert_eq!(&without[key], q, "{key} moved though its queue stayed");
        }
    }
}

#[tokio::test]
async fn hashing_on_a_header_or_a_property() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let names = ["a", "b", "c", "d"];
    queues(&ch, &names, false).await;
    for (x, a) in [
        ("by-header", args(&[("hash-header", text("tenant"))])),
        ("by-id", args(&[("hash-property", text("message_id"))])),
    ] {
        declare_chx(&ch, x, false, a).await.expect("declare");
        for q in names {
            bind(&ch, q, x, "1").await.expect("bind");
        }
    }
    // 400 routing keys, 4 tenants: each tenant's messages share a queue.
    let tenant = |i: usize| format!("tenant-{}", i % 4);
    let msgs: Vec<_> = (0..400)
        .map(|i| {
            let h = args(&[("tenant", text(&tenant(i)))]);
            (
                format!("key-{i}"),
                BasicProperties::default().with_headers(h),
            )
        })
        .collect();
    publish_all(&ch, "by-header", &msgs).await;
    let (placed, counts) = drain(&ch, &names).await;
    assert_eq!(placed.len(), 400);
    for i in 0..400 {
        assert_eq!(
            placed[&format!("key-{i}")],
            placed[&format!("key-{}", i % 4)]
        );
    }
    assert!(counts.values().all(|n| n % 100 == 0), "{counts:?}");

    // Without the header every message hashes alike.
    publish_all(&ch, "by-header", &keys(100)).await;
    let (_, counts) = drain(&ch, &names).await;
    assert!(counts.values().any(|n| *n == 100), "{counts:?}");

    // message_id: 3 ids over 300 routing keys.
    let msgs: Vec<_> = (0..300)
        .map(|i| {
            let id = format!("id-{}", i % 3);
            (
                format!("key-{i}"),
                BasicProperties::default().with_message_id(id.into()),
            )
        })
        .collect();
    publish_all(&ch, "by-id", &msgs).await;
    let (placed, _) = drain(&ch, &names).await;
    for i in 0..300 {
        assert_eq!(
            placed[&format!("key-{i}")],
            placed[&format!("key-{}", i % 3)]
        );
    }
}

#[tokio::test]
async fn a_key_lands_on_the_same_queue_after_a_restart() {
    let b = start().await;
    let names = ["d1", "d2", "d3", "d4"];
    let before = {
        let (_c, ch) = b.channel().await;
        declare_chx(&ch, "durable-parts", true, FieldTable::default())
            .await
            .expect("declare");
        queues(&ch, &names, true).await;
        // Bound out of name order: recovery reads bindings back sorted.
        for (q, w) in [("d3", "2"), ("d1", "3"), ("d4", "1"), ("d2", "1")] {
            bind(&ch, q, "durable-parts", w).await.expect("bind");
        }
        publish_all(&ch, "durable-parts", &keys(500)).await;
        drain(&ch, &names).await.0
    };
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    publish_all(&ch, "durable-parts", &keys(500)).await;
    let (after, counts) = drain(&ch, &names).await;
    assert_eq!(after.len(), 500, "{counts:?}");
    assert_eq!(after, before);
}
