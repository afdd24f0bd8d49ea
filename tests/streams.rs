//! Stream queues over AMQP 0-9-1 (#19), as RabbitMQ's behave: declare rules and argument
//! errors with RabbitMQ's texts, what a stream refuses (basic.get, purge, no-ack or
//! prefetch-less consumers: 540 / 406), consumers reading independently from every kind of
//! `x-stream-offset` with the offset in each delivery's header, acks (and nacks) as credit,
//! a live tail, the log surviving a restart, retention by size, and deletion removing the
//! files.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, Consumer};
use std::time::Duration;

fn args(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("stream".into()),
    );
    for (k, v) in pairs {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

async fn declare(ch: &Channel, name: &str, extra: &[(&str, AMQPValue)]) -> lapin::Result<u32> {
    within(ch.queue_declare(name.into(), durable(), args(extra)))
        .await
        .map(|q| q.message_count())
}

/// Publishes `bodies` with confirms.
async fn publish(ch: &Channel, q: &str, bodies: impl IntoIterator<Item = String>) {
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    for b in bodies {
        within(ch.basic_publish(
            "".into(),
            q.into(),
            Default::default(),
            b.as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    assert!(within(ch.wait_for_confirms())
        .await
        .expect("confirms")
        .is_empty());
}

async fn consume(ch: &Channel, q: &str, offset: Option<AMQPValue>) -> lapin::Result<Consumer> {
    let mut a = FieldTable::default();
    if let Some(o) = offset {
        a.insert("x-stream-offset".into(), o);
    }
    within(ch.basic_consume(q.into(), "".into(), Default::default(), a)).await
}

async fn qos(ch: &Channel, n: u16) {
    within(ch.basic_qos(n, Default::default()))
        .await
        .expect("qos");
}

/// The next delivery's body and `x-stream-offset` header, acked.
async fn take(c: &mut Consumer) -> (String, i64) {
    let d = within(c.next()).await.expect("open").expect("delivery");
    let offset = match d
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-stream-offset").cloned())
    {
        Some(AMQPValue::LongLongInt(o)) => o,
        other => panic!("no x-stream-offset header: {other:?}"),
    };
    within(d.ack(Default::default())).await.expect("ack");
    (String::from_utf8_lossy(&d.data).into_owned(), offset)
}

async fn next(c: &mut Consumer) -> lapin::message::Delivery {
    within(c.next()).await.expect("open").expect("delivery")
}

async fn quiet(c: &mut Consumer) {
    if let Ok(d) = tokio::time::timeout(Duration::from_millis(300), c.next()).await {
        panic!("unexpected delivery {:?}", d.map(|d| d.map(|d| d.data)));
    }
}

fn bodies(range: std::ops::Range<usize>) -> impl Iterator<Item = String> {
    range.map(|i| format!("m{i}"))
}

/// Asserts the error's code and RabbitMQ's text.
#[track_caller]
fn refused<T: std::fmt::Debug>(r: lapin::Result<T>, code_: u16, text: &str) {
    match r {
        Ok(v) => panic!("expected {code_} ({text}), got {v:?}"),
        Err(e) => {
            assert_eq!(code(&e), Some(code_), "{e}");
            assert!(e.to_string().contains(text), "{e} lacks {text}");
        }
    }
}

async fn fresh(c: &Connection) -> Channel {
    within(c.create_channel()).await.expect("channel")
}

#[tokio::test]
async fn declare_rules_and_arguments_are_rabbitmqs() {
    let b = start().await;
    let c = b.connect().await;
    for (o, property) in [
        (QueueDeclareOptions::default(), "non-durable"),
        (
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            "exclusive-owner",
        ),
        (
            QueueDeclareOptions {
                durable: true,
                auto_delete: true,
                ..Default::default()
            },
            "auto-delete",
        ),
    ] {
        refused(
            within(fresh(&c).await.queue_declare("s".into(), o, args(&[]))).await,
            406,
            &format!("invalid property '{property}' for queue 's' in vhost '/'"),
        );
    }
    refused(
        declare(
            &fresh(&c).await,
            "s",
            &[("x-message-ttl", AMQPValue::LongInt(5))],
        )
        .await,
        406,
        "invalid arg 'x-message-ttl' for queue 's' in vhost '/' of queue type rabbit_stream_queue",
    );
    refused(
        declare(
            &fresh(&c).await,
            "s",
            &[("x-max-age", AMQPValue::LongString("7X".into()))],
        )
        .await,
        406,
        "invalid arg 'x-max-age' for queue 's' in vhost '/': invalid_max_age",
    );
    refused(
        declare(
            &fresh(&c).await,
            "s",
            &[("x-max-age", AMQPValue::LongInt(5))],
        )
        .await,
        406,
        "{unacceptable_type,signedint}",
    );
    let ch = fresh(&c).await;
    let ok = [
        ("x-max-age", AMQPValue::LongString("7D".into())),
        ("x-max-length-bytes", AMQPValue::LongInt(1 << 30)),
        (
            "x-stream-max-segment-size-bytes",
            AMQPValue::LongInt(1 << 20),
        ),
    ];
    assert_eq!(declare(&ch, "s", &ok).await.expect("declare"), 0);
    publish(&ch, "s", bodies(0..3)).await;
    // RabbitMQ counts no messages in a stream's declare-ok.
    assert_eq!(declare(&ch, "s", &ok).await.expect("redeclare"), 0);
    let q = queue_json(&b, "s").await;
    assert_eq!(q["type"], "stream");
    assert_eq!(q["messages_ready"], 3);
}

#[tokio::test]
async fn what_a_stream_refuses() {
    let b = start().await;
    let c = b.connect().await;
    declare(&fresh(&c).await, "s", &[]).await.expect("declare");
    refused(
        consume(&fresh(&c).await, "s", None).await,
        406,
        "consumer prefetch count is not set for stream queue 's' in vhost '/'",
    );
    let ch = fresh(&c).await;
    qos(&ch, 10).await;
    refused(
        within(ch.basic_consume(
            "s".into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await,
        540,
        "automatic acknowledgement not supported by stream queue 's' in vhost '/'",
    );
    let c = b.connect().await;
    let ch = fresh(&c).await;
    qos(&ch, 10).await;
    refused(
        consume(&ch, "s", Some(AMQPValue::LongString("1X".into()))).await,
        406,
        r#"invalid arg 'x-stream-offset' for queue 's' in vhost '/': {invalid_stream_offset_arg,{longstr,<<"1X">>}}"#,
    );
    let ch = fresh(&c).await;
    qos(&ch, 10).await;
    let mut a = FieldTable::default();
    a.insert("x-priority".into(), AMQPValue::LongInt(3));
    refused(
        within(ch.basic_consume("s".into(), "".into(), Default::default(), a)).await,
        406,
        "invalid arg 'x-priority' for queue 's' in vhost '/' of queue type rabbit_stream_queue",
    );
    refused(
        within(fresh(&c).await.basic_get("s".into(), Default::default())).await,
        540,
        "basic.get not supported by stream queues queue 's' in vhost '/'",
    );
    let c = b.connect().await;
    refused(
        within(fresh(&c).await.queue_purge("s".into(), Default::default())).await,
        540,
        "queue.purge not supported by stream queues queue 's' in vhost '/'",
    );
}

#[tokio::test]
async fn consumers_read_independently_from_any_offset() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "log", &[]).await.expect("declare");
    publish(&ch, "log", bodies(0..10)).await;
    // The second batch is written in a later second than the first.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    publish(&ch, "log", bodies(10..20)).await;

    let from = |o: Option<AMQPValue>| {
        let c = &c;
        async move {
            let ch = fresh(c).await;
            qos(&ch, 50).await;
            let mut consumer = consume(&ch, "log", o).await.expect("consume");
            let first = take(&mut consumer).await;
            (ch, consumer, first)
        }
    };
    let (_a, mut first, head) = from(Some(AMQPValue::LongString("first".into()))).await;
    assert_eq!(head, ("m0".to_owned(), 0));
    for i in 1..20 {
        assert_eq!(take(&mut first).await, (format!("m{i}"), i));
    }
    let (_b, _, at) = from(Some(AMQPValue::LongLongInt(13))).await;
    assert_eq!(at, ("m13".to_owned(), 13));
    let (_c, _, negative) = from(Some(AMQPValue::LongInt(-5))).await;
    assert_eq!(negative.1, 0);
    let (_d, _, interval) = from(Some(AMQPValue::LongString("1h".into()))).await;
    assert_eq!(interval.1, 0);
    // A timestamp (seconds): the first chunk written then or later.
    let (_e, _, later) = from(Some(AMQPValue::Timestamp(second))).await;
    assert_eq!(later, ("m10".to_owned(), 10));
    // `last`: the newest chunk (the second batch may be one chunk or several).
    let (_f, _, last) = from(Some(AMQPValue::LongString("last".into()))).await;
    assert!((10..20).contains(&last.1), "{last:?}");

    // `next` (also the default) sees only what comes after it: a live tail.
    let ch = fresh(&c).await;
    qos(&ch, 50).await;
    let mut next = consume(&ch, "log", None).await.expect("consume");
    quiet(&mut next).await;
    publish(&fresh(&c).await, "log", bodies(20..22)).await;
    assert_eq!(take(&mut next).await, ("m20".to_owned(), 20));
    assert_eq!(take(&mut next).await, ("m21".to_owned(), 21));
    // The first consumer goes on from where it was.
    assert_eq!(take(&mut first).await, ("m20".to_owned(), 20));
}

#[tokio::test]
async fn acks_and_nacks_are_credit_not_removal() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "credit", &[]).await.expect("declare");
    publish(&ch, "credit", bodies(0..6)).await;
    let ch = fresh(&c).await;
    qos(&ch, 2).await;
    let mut consumer = consume(&ch, "credit", Some(AMQPValue::LongString("first".into())))
        .await
        .expect("consume");
    let d0 = next(&mut consumer).await;
    let d1 = next(&mut consumer).await;
    quiet(&mut consumer).await;
    within(d0.ack(Default::default())).await.expect("ack");
    let d2 = next(&mut consumer).await;
    assert_eq!(&d2.data, b"m2");
    quiet(&mut consumer).await;
    // A nack (with requeue) or a reject only gives credit back, as in RabbitMQ 3.13 and 4.x.
    within(d1.nack(BasicNackOptions {
        requeue: true,
        ..Default::default()
    }))
    .await
    .expect("nack");
    let d3 = next(&mut consumer).await;
    assert_eq!(&d3.data, b"m3");
    within(d2.reject(Default::default())).await.expect("reject");
    assert_eq!(&next(&mut consumer).await.data, b"m4");
    // Nothing was removed: a new consumer reads everything again.
    let ch = fresh(&c).await;
    qos(&ch, 10).await;
    let mut again = consume(&ch, "credit", Some(AMQPValue::LongString("first".into())))
        .await
        .expect("consume");
    for i in 0..6 {
        assert_eq!(take(&mut again).await, (format!("m{i}"), i));
    }
}

#[tokio::test]
async fn the_log_survives_a_restart_and_retention_drops_whole_segments() {
    let b = start().await;
    {
        let (_c, ch) = b.channel().await;
        declare(&ch, "kept", &[]).await.expect("declare");
        publish(&ch, "kept", bodies(0..100)).await;
        // Small segments and a size limit: old segments go as new ones fill.
        let small = [
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(2000)),
            ("x-max-length-bytes", AMQPValue::LongInt(6000)),
        ];
        declare(&ch, "bounded", &small).await.expect("declare");
        for round in 0..20 {
            publish(&ch, "bounded", bodies(round * 10..round * 10 + 10)).await;
        }
    }
    let b = b.restart().await;
    let (c, ch) = b.channel().await;
    qos(&ch, 200).await;
    let mut kept = consume(&ch, "kept", Some(AMQPValue::LongString("first".into())))
        .await
        .expect("consume");
    for i in 0..100 {
        assert_eq!(take(&mut kept).await, (format!("m{i}"), i));
    }
    publish(&fresh(&c).await, "kept", bodies(100..101)).await;
    assert_eq!(take(&mut kept).await, ("m100".to_owned(), 100));

    let ch = fresh(&c).await;
    qos(&ch, 200).await;
    let mut bounded = consume(&ch, "bounded", Some(AMQPValue::LongString("first".into())))
        .await
        .expect("consume");
    let (body, first) = take(&mut bounded).await;
    assert!(first > 0, "retention deleted nothing");
    assert_eq!(body, format!("m{first}"));
    for i in first + 1..200 {
        assert_eq!(take(&mut bounded).await, (format!("m{i}"), i));
    }
    let size = queue_json(&b, "bounded").await["message_bytes_ready"]
        .as_u64()
        .expect("size");
    assert!(size <= 6000 + 2000, "{size} bytes kept");

    // The API shows where the log stands: RabbitMQ 4.x's committed_offset (the newest chunk's
    // first offset), segments, members and readers, and Warren's first and last offsets.
    let q = queue_json(&b, "bounded").await;
    assert_eq!(q["type"], "stream", "{q}");
    assert_eq!(q["first_offset"].as_i64(), Some(first), "{q}");
    assert_eq!(q["last_offset"], 199, "{q}");
    let committed = q["committed_offset"].as_i64().expect("committed_offset");
    assert!((first..=199).contains(&committed), "{q}");
    assert!(q["segments"].as_u64().expect("segments") >= 2, "{q}");
    let node = q["node"].as_str().expect("node");
    assert_eq!(q["leader"], node, "{q}");
    assert_eq!(q["members"], serde_json::json!([node]), "{q}");
    assert_eq!(q["readers"][node], 1, "{q}");
    // `last` starts at that chunk.
    let ch = fresh(&c).await;
    qos(&ch, 200).await;
    let mut last = consume(&ch, "bounded", Some(AMQPValue::LongString("last".into())))
        .await
        .expect("consume");
    assert_eq!(take(&mut last).await.1, committed);
    // An empty log has no last or committed offset.
    declare(&ch, "empty", &[]).await.expect("declare");
    let q = queue_json(&b, "empty").await;
    assert!(
        q["last_offset"].is_null() && q["committed_offset"].is_null(),
        "{q}"
    );
    assert_eq!(
        (q["first_offset"].as_u64(), q["segments"].as_u64()),
        (Some(0), Some(1)),
        "{q}"
    );
}

#[tokio::test]
async fn deleting_a_stream_removes_its_files_and_cancels_its_consumers() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "gone", &[]).await.expect("declare");
    publish(&ch, "gone", bodies(0..5)).await;
    let streams = b.dir.path().join("streams");
    let dirs = || std::fs::read_dir(&streams).map_or(0, |d| d.count());
    assert_eq!(dirs(), 1);
    let ch2 = fresh(&c).await;
    qos(&ch2, 10).await;
    let mut consumer = consume(&ch2, "gone", None).await.expect("consume");
    within(ch.queue_delete("gone".into(), Default::default()))
        .await
        .expect("delete");
    // The consumer was cancelled: its stream of deliveries ends.
    assert!(within(consumer.next()).await.is_none());
    for _ in 0..50 {
        if dirs() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dirs(), 0);
}

#[tokio::test]
async fn consumers_filter_by_the_publishers_filter_values() {
    let b = start().await;
    let c = b.connect().await;
    let ch = fresh(&c).await;
    declare(&ch, "regions", &[]).await.expect("declared");
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    // m0 eu, m1 us, m2 unfiltered, m3 eu, m4 apac, m5 a filter value that is no string.
    let values: [Option<AMQPValue>; 6] = [
        Some(AMQPValue::LongString("eu".into())),
        Some(AMQPValue::LongString("us".into())),
        None,
        Some(AMQPValue::LongString("eu".into())),
        Some(AMQPValue::LongString("apac".into())),
        Some(AMQPValue::LongInt(7)),
    ];
    for (i, v) in values.into_iter().enumerate() {
        let mut props = BasicProperties::default();
        if let Some(v) = v {
            let mut h = FieldTable::default();
            h.insert("x-stream-filter-value".into(), v);
            props = props.with_headers(h);
        }
        within(ch.basic_publish(
            "".into(),
            "regions".into(),
            Default::default(),
            format!("m{i}").as_bytes(),
            props,
        ))
        .await
        .expect("publish");
    }
    assert!(within(ch.wait_for_confirms())
        .await
        .expect("confirms")
        .is_empty());

    let filtered = |filter: AMQPValue, unfiltered: Option<bool>| {
        let mut a = FieldTable::default();
        a.insert(
            "x-stream-offset".into(),
            AMQPValue::LongString("first".into()),
        );
        a.insert("x-stream-filter".into(), filter);
        if let Some(u) = unfiltered {
            a.insert("x-stream-match-unfiltered".into(), AMQPValue::Boolean(u));
        }
        a
    };
    let cases = [
        (
            AMQPValue::LongString("eu".into()),
            None,
            vec![("m0", 0), ("m3", 3)],
        ),
        (
            AMQPValue::FieldArray(
                vec![
                    AMQPValue::LongString("us".into()),
                    AMQPValue::LongString("apac".into()),
                ]
                .into(),
            ),
            Some(true),
            vec![("m1", 1), ("m2", 2), ("m4", 4), ("m5", 5)],
        ),
        (AMQPValue::LongString("none".into()), Some(false), vec![]),
    ];
    for (filter, unfiltered, expected) in cases {
        let ch = fresh(&c).await;
        qos(&ch, 10).await;
        let mut consumer = within(ch.basic_consume(
            "regions".into(),
            "".into(),
            Default::default(),
            filtered(filter.clone(), unfiltered),
        ))
        .await
        .expect("consume");
        let mut got = Vec::new();
        for _ in 0..expected.len() {
            got.push(take(&mut consumer).await);
        }
        let want: Vec<(String, i64)> = expected.iter().map(|(b, o)| (b.to_string(), *o)).collect();
        assert_eq!(got, want, "filter {filter:?}, unfiltered {unfiltered:?}");
        quiet(&mut consumer).await;
    }
    // Without a filter, everything.
    let ch = fresh(&c).await;
    qos(&ch, 10).await;
    let mut all = consume(&ch, "regions", Some(AMQPValue::LongString("first".into())))
        .await
        .expect("consume");
    for i in 0..6 {
        assert_eq!(take(&mut all).await, (format!("m{i}"), i));
    }
    b.server.shutdown().await;
}
