//! RabbitMQ's queue extensions: message TTL (queue and per message), dead-lettering with
//! RabbitMQ 3.13's x-death headers, max-length limits with each overflow mode, and validation
//! of the arguments.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};
use std::time::Duration;

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

async fn declare(ch: &Channel, q: &str, a: FieldTable) {
    within(ch.queue_declare(q.into(), Default::default(), a))
        .await
        .expect("declare");
}

async fn publish(ch: &Channel, q: &str, body: &str, props: BasicProperties) {
    within(ch.basic_publish(
        "".into(),
        q.into(),
        Default::default(),
        body.as_bytes(),
        props,
    ))
    .await
    .expect("publish");
}

async fn get(ch: &Channel, q: &str) -> Option<lapin::message::BasicGetMessage> {
    within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
}

/// Polls a queue until a message arrives (dead-lettering is asynchronous).
async fn wait_get(ch: &Channel, q: &str) -> lapin::message::BasicGetMessage {
    for _ in 0..500 {
        if let Some(m) = get(ch, q).await {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing arrived in {q}");
}

fn header<'a>(m: &'a lapin::message::BasicGetMessage, key: &str) -> Option<&'a AMQPValue> {
    m.delivery.properties.headers().as_ref()?.inner().get(key)
}

fn death(m: &lapin::message::BasicGetMessage, i: usize) -> FieldTable {
    match header(m, "x-death") {
        Some(AMQPValue::FieldArray(a)) => match &a.as_slice()[i] {
            AMQPValue::FieldTable(t) => t.clone(),
            other => panic!("x-death entry is {other:?}"),
        },
        other => panic!("x-death is {other:?}"),
    }
}

#[tokio::test]
async fn queue_ttl_expires_and_dead_letters_with_x_death() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "dlq", FieldTable::default()).await;
    declare(
        &ch,
        "ttl",
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(50)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
        ]),
    )
    .await;
    let headers = args(&[("app", s("kept"))]);
    publish(
        &ch,
        "ttl",
        "old",
        BasicProperties::default()
            .with_headers(headers)
            .with_delivery_mode(2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(get(&ch, "ttl").await.is_none(), "expired message delivered");
    let m = wait_get(&ch, "dlq").await;
    assert_eq!(m.delivery.data, b"old");
    assert_eq!(m.delivery.routing_key.as_str(), "dlq");
    assert_eq!(
        m.delivery.properties.delivery_mode(),
        &Some(2),
        "stays persistent"
    );
    assert_eq!(header(&m, "app"), Some(&s("kept")));
    let d = death(&m, 0);
    assert_eq!(d.inner().get("reason"), Some(&s("expired")));
    assert_eq!(d.inner().get("queue"), Some(&s("ttl")));
    assert_eq!(d.inner().get("count"), Some(&AMQPValue::LongLongInt(1)));
    assert_eq!(d.inner().get("exchange"), Some(&s("")));
    assert!(
        matches!(d.inner().get("routing-keys"), Some(AMQPValue::FieldArray(a)) if a.as_slice() == [s("ttl")])
    );
    assert!(matches!(d.inner().get("time"), Some(AMQPValue::Timestamp(t)) if *t > 1_700_000_000));
    assert!(d.inner().get("original-expiration").is_none());
    assert_eq!(header(&m, "x-first-death-reason"), Some(&s("expired")));
    assert_eq!(header(&m, "x-first-death-queue"), Some(&s("ttl")));
    assert_eq!(header(&m, "x-last-death-queue"), Some(&s("ttl")));
}

#[tokio::test]
async fn per_message_expiration_wins_when_lower_and_is_reported_as_original_expiration() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "dlq", FieldTable::default()).await;
    declare(
        &ch,
        "q",
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(60_000)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
        ]),
    )
    .await;
    publish(
        &ch,
        "q",
        "short",
        BasicProperties::default().with_expiration("20".into()),
    )
    .await;
    publish(&ch, "q", "long", BasicProperties::default()).await;
    let m = wait_get(&ch, "dlq").await;
    assert_eq!(m.delivery.data, b"short");
    assert!(
        m.delivery.properties.expiration().is_none(),
        "expiration removed from the copy"
    );
    assert_eq!(
        death(&m, 0).inner().get("original-expiration"),
        Some(&s("20"))
    );
    assert_eq!(
        get(&ch, "q").await.expect("long one stays").delivery.data,
        b"long"
    );
}

#[tokio::test]
async fn expired_messages_are_not_delivered_to_consumers_waiting_for_credit() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(
        &ch,
        "q",
        args(&[("x-message-ttl", AMQPValue::LongInt(100))]),
    )
    .await;
    let cch = within(c.create_channel()).await.expect("channel");
    within(cch.basic_qos(1, Default::default()))
        .await
        .expect("qos");
    let mut cons = within(cch.basic_consume(
        "q".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    publish(&ch, "q", "1", BasicProperties::default()).await;
    publish(&ch, "q", "2", BasicProperties::default()).await;
    let first = within(cons.next()).await.expect("d").expect("ok");
    assert_eq!(first.data, b"1");
    tokio::time::sleep(Duration::from_millis(250)).await;
    within(first.ack(Default::default())).await.expect("ack");
    publish(&ch, "q", "3", BasicProperties::default()).await;
    let next = within(cons.next()).await.expect("d").expect("ok");
    assert_eq!(
        next.data, b"3",
        "message 2 expired while the consumer had no credit"
    );
}

#[tokio::test]
async fn rejected_messages_are_dead_lettered_and_deaths_are_counted() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        "dlx".into(),
        lapin::ExchangeKind::Fanout,
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("dlx");
    declare(&ch, "work", args(&[("x-dead-letter-exchange", s("dlx"))])).await;
    declare(&ch, "dead", FieldTable::default()).await;
    within(ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    publish(&ch, "work", "job", BasicProperties::default()).await;
    let m = within(ch.basic_get("work".into(), Default::default()))
        .await
        .expect("get")
        .expect("msg");
    within(m.delivery.reject(BasicRejectOptions { requeue: false }))
        .await
        .expect("reject");
    let d = wait_get(&ch, "dead").await;
    assert_eq!(d.delivery.exchange.as_str(), "dlx");
    assert_eq!(
        d.delivery.routing_key.as_str(),
        "work",
        "the original routing key is kept"
    );
    assert_eq!(death(&d, 0).inner().get("reason"), Some(&s("rejected")));
    // Back into the work queue and rejected again: the same (queue, reason) entry counts up.
    let props = d.delivery.properties.clone();
    within(ch.basic_publish("".into(), "work".into(), Default::default(), b"job", props))
        .await
        .expect("republish");
    let m = within(ch.basic_get("work".into(), Default::default()))
        .await
        .expect("get")
        .expect("msg");
    within(m.delivery.nack(BasicNackOptions {
        requeue: false,
        multiple: false,
    }))
    .await
    .expect("nack");
    let d = wait_get(&ch, "dead").await;
    assert_eq!(
        death(&d, 0).inner().get("count"),
        Some(&AMQPValue::LongLongInt(2))
    );
    assert!(
        matches!(header(&d, "x-death"), Some(AMQPValue::FieldArray(a)) if a.as_slice().len() == 1)
    );
}

#[tokio::test]
async fn dead_letter_cycles_are_broken() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    // Two queues expiring into each other: the message dies once in each, then is dropped.
    declare(
        &ch,
        "a",
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(10)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("b")),
        ]),
    )
    .await;
    declare(
        &ch,
        "b",
        args(&[
            ("x-message-ttl", AMQPValue::LongInt(10)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("a")),
        ]),
    )
    .await;
    publish(&ch, "a", "loop", BasicProperties::default()).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(get(&ch, "a").await.is_none());
    assert!(get(&ch, "b").await.is_none());
}

#[tokio::test]
async fn max_length_drop_head_dead_letters_the_oldest() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "dlq", FieldTable::default()).await;
    declare(
        &ch,
        "q",
        args(&[
            ("x-max-length", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
        ]),
    )
    .await;
    for i in 0..5 {
        publish(&ch, "q", &i.to_string(), BasicProperties::default()).await;
    }
    let kept: Vec<Vec<u8>> = vec![
        get(&ch, "q").await.expect("3").delivery.data,
        get(&ch, "q").await.expect("4").delivery.data,
    ];
    assert_eq!(kept, vec![b"3".to_vec(), b"4".to_vec()]);
    assert!(get(&ch, "q").await.is_none());
    for i in 0..3 {
        let m = wait_get(&ch, "dlq").await;
        assert_eq!(m.delivery.data, i.to_string().as_bytes());
        assert_eq!(death(&m, 0).inner().get("reason"), Some(&s("maxlen")));
    }
}

#[tokio::test]
async fn max_length_counts_ready_messages_only_and_bytes_limit_too() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q", args(&[("x-max-length", AMQPValue::LongInt(1))])).await;
    publish(&ch, "q", "a", BasicProperties::default()).await;
    let held = within(ch.basic_get("q".into(), Default::default()))
        .await
        .expect("get")
        .expect("a");
    publish(&ch, "q", "b", BasicProperties::default()).await;
    publish(&ch, "q", "c", BasicProperties::default()).await;
    assert_eq!(
        get(&ch, "q").await.expect("c").delivery.data,
        b"c",
        "unacked a does not count"
    );
    drop(held);
    declare(
        &ch,
        "bytes",
        args(&[("x-max-length-bytes", AMQPValue::LongInt(10))]),
    )
    .await;
    for body in ["123456", "7890", "abcde"] {
        publish(&ch, "bytes", body, BasicProperties::default()).await;
    }
    assert_eq!(get(&ch, "bytes").await.expect("one").delivery.data, b"7890");
    assert_eq!(
        get(&ch, "bytes").await.expect("two").delivery.data,
        b"abcde"
    );
}

#[tokio::test]
async fn reject_publish_nacks_and_reject_publish_dlx_also_dead_letters() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm");
    declare(&ch, "dlq", FieldTable::default()).await;
    declare(
        &ch,
        "rp",
        args(&[
            ("x-max-length", AMQPValue::LongInt(1)),
            ("x-overflow", s("reject-publish")),
        ]),
    )
    .await;
    declare(
        &ch,
        "rpd",
        args(&[
            ("x-max-length", AMQPValue::LongInt(1)),
            ("x-overflow", s("reject-publish-dlx")),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
        ]),
    )
    .await;
    for q in ["rp", "rpd"] {
        let first = within(ch.basic_publish(
            "".into(),
            q.into(),
            Default::default(),
            b"1",
            Default::default(),
        ))
        .await
        .expect("p");
        assert!(within(first).await.expect("confirm").is_ack());
        let second = within(ch.basic_publish(
            "".into(),
            q.into(),
            Default::default(),
            b"2",
            Default::default(),
        ))
        .await
        .expect("p");
        assert!(
            within(second).await.expect("confirm").is_nack(),
            "{q}: overflow is nacked"
        );
        assert_eq!(get(&ch, q).await.expect("first kept").delivery.data, b"1");
    }
    let m = wait_get(&ch, "dlq").await;
    assert_eq!(m.delivery.data, b"2");
    assert_eq!(death(&m, 0).inner().get("reason"), Some(&s("maxlen")));
    assert_eq!(death(&m, 0).inner().get("queue"), Some(&s("rpd")));
}

#[tokio::test]
async fn invalid_arguments_and_expirations_are_406() {
    let b = start().await;
    let c = b.connect().await;
    for bad in [
        args(&[("x-message-ttl", AMQPValue::LongInt(-1))]),
        args(&[("x-max-length", s("ten"))]),
        args(&[("x-overflow", s("sideways"))]),
        args(&[("x-queue-type", s("stream"))]),
    ] {
        let ch = within(c.create_channel()).await.expect("channel");
        assert_code(
            within(ch.queue_declare("bad".into(), Default::default(), bad)).await,
            406,
        );
    }
    let ch = within(c.create_channel()).await.expect("channel");
    declare(
        &ch,
        "q",
        args(&[
            ("x-queue-type", s("classic")),
            ("x-whatever", AMQPValue::Boolean(true)),
        ]),
    )
    .await;
    let props = BasicProperties::default().with_expiration("soon".into());
    assert_eq!(publish_error(&ch, "", "q", b"m", props).await, Some(406));
}

#[tokio::test]
async fn alternate_exchange_takes_unroutable_messages() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        "ae".into(),
        lapin::ExchangeKind::Fanout,
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("ae");
    within(ch.exchange_declare(
        "main".into(),
        lapin::ExchangeKind::Direct,
        Default::default(),
        args(&[("alternate-exchange", s("ae"))]),
    ))
    .await
    .expect("main");
    declare(&ch, "routed", FieldTable::default()).await;
    declare(&ch, "unrouted", FieldTable::default()).await;
    within(ch.queue_bind(
        "routed".into(),
        "main".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    within(ch.queue_bind(
        "unrouted".into(),
        "ae".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm");
    for key in ["k", "other"] {
        let c = within(ch.basic_publish(
            "main".into(),
            key.into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            key.as_bytes(),
            Default::default(),
        ))
        .await
        .expect("publish");
        let confirmation = within(c).await.expect("confirm");
        assert!(
            confirmation.take_message().is_none(),
            "{key}: routed somewhere, so not returned"
        );
    }
    assert_eq!(get(&ch, "routed").await.expect("k").delivery.data, b"k");
    let m = get(&ch, "unrouted").await.expect("other");
    assert_eq!(m.delivery.data, b"other");
    assert_eq!(m.delivery.exchange.as_str(), "main");
    assert!(get(&ch, "routed").await.is_none());
}

#[tokio::test]
async fn cc_and_bcc_headers_add_routing_keys_and_bcc_is_stripped() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    for q in ["main", "copy", "blind"] {
        declare(&ch, q, FieldTable::default()).await;
    }
    let keys =
        |v: &[&str]| AMQPValue::FieldArray(v.iter().map(|k| s(k)).collect::<Vec<_>>().into());
    let headers = args(&[
        ("CC", keys(&["copy"])),
        ("BCC", keys(&["blind"])),
        ("app", s("x")),
    ]);
    publish(
        &ch,
        "main",
        "hello",
        BasicProperties::default().with_headers(headers),
    )
    .await;
    for q in ["main", "copy", "blind"] {
        let m = get(&ch, q)
            .await
            .unwrap_or_else(|| panic!("{q} got nothing"));
        assert_eq!(m.delivery.data, b"hello");
        assert_eq!(m.delivery.routing_key.as_str(), "main");
        assert!(header(&m, "BCC").is_none(), "{q}: BCC must be stripped");
        assert_eq!(header(&m, "CC"), Some(&keys(&["copy"])));
        assert_eq!(header(&m, "app"), Some(&s("x")));
    }
}

#[tokio::test]
async fn delivery_limit_counts_returns_then_dead_letters() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "dlq", FieldTable::default()).await;
    declare(
        &ch,
        "retry",
        args(&[
            ("x-delivery-limit", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("dlq")),
        ]),
    )
    .await;
    publish(&ch, "retry", "job", BasicProperties::default()).await;
    let mut counts = Vec::new();
    for _ in 0..3 {
        let m = within(ch.basic_get("retry".into(), Default::default()))
            .await
            .expect("get")
            .expect("delivered");
        counts.push(header(&m, "x-delivery-count").cloned());
        within(m.delivery.nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        }))
        .await
        .expect("nack");
    }
    assert_eq!(
        counts,
        vec![
            None,
            Some(AMQPValue::LongLongInt(1)),
            Some(AMQPValue::LongLongInt(2))
        ]
    );
    assert!(
        get(&ch, "retry").await.is_none(),
        "delivered at most limit + 1 times"
    );
    let d = wait_get(&ch, "dlq").await;
    assert_eq!(
        death(&d, 0).inner().get("reason"),
        Some(&s("delivery_limit"))
    );
}

#[tokio::test]
async fn quorum_queues_follow_rabbitmqs_declare_rules_and_default_limit() {
    let b = start().await;
    let c = b.connect().await;
    let quorum = || args(&[("x-queue-type", s("quorum"))]);
    for o in [
        QueueDeclareOptions::default(),
        QueueDeclareOptions {
            durable: true,
            exclusive: true,
            ..Default::default()
        },
        QueueDeclareOptions {
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
    ] {
        let ch = within(c.create_channel()).await.expect("channel");
        assert_code(
            within(ch.queue_declare("qq".into(), o, quorum())).await,
            406,
        );
    }
    let ch = within(c.create_channel()).await.expect("channel");
    within(ch.queue_declare(
        "qq".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        quorum(),
    ))
    .await
    .expect("durable quorum queue");
    publish(&ch, "qq", "m", BasicProperties::default()).await;
    for expected in [None, Some(AMQPValue::LongLongInt(1))] {
        let m = within(ch.basic_get("qq".into(), Default::default()))
            .await
            .expect("get")
            .expect("m");
        assert_eq!(header(&m, "x-delivery-count").cloned(), expected);
        within(m.delivery.nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        }))
        .await
        .expect("nack");
    }
}

#[tokio::test]
async fn x_expires_deletes_an_unused_queue_only() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let expiring = args(&[("x-expires", AMQPValue::LongInt(100))]);
    declare(&ch, "idle", expiring.clone()).await;
    declare(&ch, "used", expiring).await;
    let _consumer = within(ch.basic_consume(
        "used".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    within(ch.queue_declare("used".into(), passive, FieldTable::default()))
        .await
        .expect("a queue with a consumer stays");
    assert_code(
        within(ch.queue_declare("idle".into(), passive, FieldTable::default())).await,
        404,
    );
}

async fn consume_with(ch: &Channel, q: &str, tag: &str, priority: Option<i32>) -> lapin::Consumer {
    let a = match priority {
        Some(p) => args(&[("x-priority", AMQPValue::LongInt(p))]),
        None => FieldTable::default(),
    };
    within(ch.basic_consume(q.into(), tag.into(), Default::default(), a))
        .await
        .expect("consume")
}

async fn no_delivery(c: &mut lapin::Consumer) {
    if let Ok(d) = tokio::time::timeout(Duration::from_millis(200), c.next()).await {
        panic!("unexpected delivery {:?}", d.map(|d| d.map(|d| d.data)));
    }
}

#[tokio::test]
async fn higher_priority_consumers_are_served_while_they_have_credit() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q", FieldTable::default()).await;
    let hi_ch = within(c.create_channel()).await.expect("channel");
    within(hi_ch.basic_qos(2, Default::default()))
        .await
        .expect("qos");
    let lo_ch = within(c.create_channel()).await.expect("channel");
    let mut lo = consume_with(&lo_ch, "q", "lo", None).await;
    let mut hi = consume_with(&hi_ch, "q", "hi", Some(10)).await;
    for i in 0..3 {
        publish(&ch, "q", &i.to_string(), BasicProperties::default()).await;
    }
    let h1 = within(hi.next()).await.expect("hi").expect("ok");
    let h2 = within(hi.next()).await.expect("hi").expect("ok");
    assert_eq!(
        (h1.data.as_slice(), h2.data.as_slice()),
        (&b"0"[..], &b"1"[..])
    );
    let l = within(lo.next()).await.expect("lo").expect("ok");
    assert_eq!(
        l.data, b"2",
        "the low-priority consumer gets what the high one has no credit for"
    );
    within(h1.ack(Default::default())).await.expect("ack");
    publish(&ch, "q", "3", BasicProperties::default()).await;
    assert_eq!(within(hi.next()).await.expect("hi").expect("ok").data, b"3");
    no_delivery(&mut lo).await;
}

#[tokio::test]
async fn single_active_consumer_gets_everything_until_it_goes() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(
        &ch,
        "sac",
        args(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    let ch1 = within(c.create_channel()).await.expect("channel");
    let ch2 = within(c.create_channel()).await.expect("channel");
    let mut first = consume_with(&ch1, "sac", "first", None).await;
    let mut second = consume_with(&ch2, "sac", "second", None).await;
    for i in 0..3 {
        publish(&ch, "sac", &i.to_string(), BasicProperties::default()).await;
    }
    for i in 0..3 {
        let d = within(first.next()).await.expect("first").expect("ok");
        assert_eq!(d.data, i.to_string().as_bytes());
        within(d.ack(Default::default())).await.expect("ack");
    }
    no_delivery(&mut second).await;
    within(ch1.basic_cancel("first".into(), Default::default()))
        .await
        .expect("cancel");
    publish(&ch, "sac", "3", BasicProperties::default()).await;
    assert_eq!(
        within(second.next())
            .await
            .expect("second")
            .expect("ok")
            .data,
        b"3"
    );
}

#[tokio::test]
async fn priority_queues_deliver_highest_first_fifo_within_a_priority() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(
        &ch,
        "prio",
        args(&[("x-max-priority", AMQPValue::ShortShortUInt(5))]),
    )
    .await;
    for (body, p) in [
        ("a", Some(0)),
        ("b", Some(9)),
        ("c", Some(3)),
        ("d", Some(5)),
        ("e", None),
    ] {
        let mut props = BasicProperties::default();
        if let Some(p) = p {
            props = props.with_priority(p);
        }
        publish(&ch, "prio", body, props).await;
    }
    let mut order = Vec::new();
    while let Some(m) = get(&ch, "prio").await {
        order.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    assert_eq!(
        order,
        vec!["b", "d", "c", "a", "e"],
        "values above the maximum count as the maximum"
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch.queue_declare(
            "bad".into(),
            Default::default(),
            args(&[("x-max-priority", AMQPValue::LongInt(300))]),
        ))
        .await,
        406,
    );
}

#[tokio::test]
async fn stored_priority_queues_recover_in_priority_order_and_dead_letters_persist() {
    let b = start().await;
    {
        let (_c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.queue_declare(
            "prio".into(),
            durable,
            args(&[("x-max-priority", AMQPValue::LongInt(3))]),
        ))
        .await
        .expect("prio");
        within(ch.queue_declare("dlq".into(), durable, FieldTable::default()))
            .await
            .expect("dlq");
        within(ch.queue_declare(
            "src".into(),
            durable,
            args(&[
                ("x-dead-letter-exchange", s("")),
                ("x-dead-letter-routing-key", s("dlq")),
            ]),
        ))
        .await
        .expect("src");
        for (body, p) in [("low", 1), ("high", 3), ("mid", 2)] {
            let props = BasicProperties::default()
                .with_delivery_mode(2)
                .with_priority(p);
            let c = within(ch.basic_publish(
                "".into(),
                "prio".into(),
                Default::default(),
                body.as_bytes(),
                props,
            ))
            .await
            .expect("publish");
            assert!(within(c).await.expect("confirm").is_ack());
        }
        let props = BasicProperties::default().with_delivery_mode(2);
        let c =
            within(ch.basic_publish("".into(), "src".into(), Default::default(), b"dead", props))
                .await
                .expect("publish");
        assert!(within(c).await.expect("confirm").is_ack());
        let m = within(ch.basic_get("src".into(), Default::default()))
            .await
            .expect("get")
            .expect("m");
        within(m.delivery.reject(BasicRejectOptions { requeue: false }))
            .await
            .expect("reject");
        wait_count(&ch, "dlq", 1).await;
    }
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    let mut order = Vec::new();
    while let Some(m) = get(&ch, "prio").await {
        order.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    assert_eq!(order, vec!["high", "mid", "low"]);
    let d = get(&ch, "dlq")
        .await
        .expect("the dead-lettered persistent copy survived");
    assert_eq!(d.delivery.data, b"dead");
    assert_eq!(death(&d, 0).inner().get("reason"), Some(&s("rejected")));
}

/// Waits until a queue reports `n` ready messages.
async fn wait_count(ch: &Channel, q: &str, n: u32) {
    let passive = QueueDeclareOptions {
        passive: true,
        durable: true,
        ..Default::default()
    };
    for _ in 0..200 {
        let got = within(ch.queue_declare(q.into(), passive, FieldTable::default()))
            .await
            .expect("passive");
        if got.message_count() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{q} never reached {n} messages");
}

#[tokio::test]
async fn direct_reply_to_round_trip_and_misuse() {
    let b = start().await;
    let (c, requester) = b.channel().await;
    let responder = within(c.create_channel()).await.expect("channel");
    declare(&responder, "rpc", FieldTable::default()).await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    within(requester.queue_declare(
        "amq.rabbitmq.reply-to".into(),
        passive,
        FieldTable::default(),
    ))
    .await
    .expect("the pseudo-queue exists");
    let mut replies = within(requester.basic_consume(
        "amq.rabbitmq.reply-to".into(),
        "".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("reply consumer");
    publish(
        &requester,
        "rpc",
        "ping",
        BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into()),
    )
    .await;
    let request = wait_get(&responder, "rpc").await;
    let address = request
        .delivery
        .properties
        .reply_to()
        .clone()
        .expect("reply_to")
        .to_string();
    assert!(address.starts_with("amq.rabbitmq.reply-to."), "{address}");
    publish(&responder, &address, "pong", BasicProperties::default()).await;
    let reply = within(replies.next()).await.expect("reply").expect("ok");
    assert_eq!(reply.data, b"pong");
    assert_eq!(reply.routing_key.as_str(), address);

    let ch = within(c.create_channel()).await.expect("channel");
    let r = within(ch.basic_consume(
        "amq.rabbitmq.reply-to".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await;
    assert_code(r.map(|_| ()), 406);
    let ch = within(c.create_channel()).await.expect("channel");
    let props = BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into());
    assert_eq!(
        publish_error(&ch, "", "rpc", b"ping", props).await,
        Some(406)
    );
}

async fn declare_delayed(ch: &Channel, name: &str, durable: bool) {
    within(ch.exchange_declare(
        name.into(),
        lapin::ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable,
            ..Default::default()
        },
        args(&[("x-delayed-type", s("direct"))]),
    ))
    .await
    .expect("delayed exchange");
}

fn delayed_props(ms: i32) -> BasicProperties {
    BasicProperties::default().with_headers(args(&[("x-delay", AMQPValue::LongInt(ms))]))
}

#[tokio::test]
async fn delayed_message_exchange_holds_messages_for_their_delay() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare_delayed(&ch, "later", false).await;
    declare(&ch, "q", FieldTable::default()).await;
    within(ch.queue_bind(
        "q".into(),
        "later".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    within(ch.basic_publish(
        "later".into(),
        "k".into(),
        Default::default(),
        b"delayed",
        delayed_props(1000),
    ))
    .await
    .expect("publish");
    within(ch.basic_publish(
        "later".into(),
        "k".into(),
        Default::default(),
        b"now",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    assert_eq!(
        get(&ch, "q").await.expect("immediate").delivery.data,
        b"now"
    );
    assert!(
        get(&ch, "q").await.is_none(),
        "the delayed one is still held"
    );
    let m = wait_get(&ch, "q").await;
    assert_eq!(m.delivery.data, b"delayed");
    assert_eq!(m.delivery.exchange.as_str(), "later");
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch.exchange_declare(
            "bad".into(),
            lapin::ExchangeKind::Custom("x-delayed-message".into()),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        406,
    );
}

#[tokio::test]
async fn pending_delays_survive_a_restart() {
    let b = start().await;
    {
        let (_c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        declare_delayed(&ch, "later", true).await;
        within(ch.queue_declare(
            "q".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        .expect("q");
        within(ch.queue_bind(
            "q".into(),
            "later".into(),
            "k".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind");
        let props = delayed_props(700).with_delivery_mode(2);
        let c = within(ch.basic_publish(
            "later".into(),
            "k".into(),
            Default::default(),
            b"retry",
            props,
        ))
        .await
        .expect("publish");
        assert!(
            within(c).await.expect("confirm").is_ack(),
            "confirmed once stored"
        );
    }
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    let m = wait_get(&ch, "q").await;
    assert_eq!(m.delivery.data, b"retry");
}

#[tokio::test]
async fn a_ttl_keeps_running_across_a_restart() {
    let b = start().await;
    {
        let (_c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.queue_declare(
            "q".into(),
            durable,
            args(&[("x-message-ttl", AMQPValue::LongInt(1500))]),
        ))
        .await
        .expect("q");
        let props = BasicProperties::default().with_delivery_mode(2);
        for body in [&b"short"[..], b"also"] {
            let c = within(ch.basic_publish(
                "".into(),
                "q".into(),
                Default::default(),
                body,
                props.clone(),
            ))
            .await
            .expect("publish");
            assert!(within(c).await.expect("confirm").is_ack());
        }
    }
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    assert_eq!(
        get(&ch, "q").await.expect("not expired yet").delivery.data,
        b"short"
    );
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(
        get(&ch, "q").await.is_none(),
        "the recovered message expired on time"
    );
}

#[tokio::test]
async fn consumer_timeout_closes_the_channel_with_406_and_requeues() {
    use amq_protocol::protocol::{basic as b, AMQPClass};
    use common::raw::{method, Raw};
    let broker = start().await;
    let (_c, ch) = broker.channel().await;
    declare(
        &ch,
        "slow",
        args(&[("x-consumer-timeout", AMQPValue::LongInt(100))]),
    )
    .await;
    publish(&ch, "slow", "held", BasicProperties::default()).await;
    let mut r = Raw::open(broker.server.amqp_addr).await;
    r.send(&method(
        1,
        AMQPClass::Basic(b::AMQPMethod::Consume(b::Consume {
            queue: "slow".into(),
            consumer_tag: "c".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        })),
    ))
    .await;
    // The delivery arrives, is never acked, and the channel is closed for it.
    assert_eq!(r.channel_close_code().await, Some((1, 406)));
    let m = wait_get(&ch, "slow").await;
    assert_eq!(m.delivery.data, b"held");
    assert!(m.delivery.redelivered);
}

#[tokio::test]
async fn a_backlog_with_a_ttl_expires_without_consumers() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(
        &ch,
        "bulk",
        args(&[("x-message-ttl", AMQPValue::LongInt(50))]),
    )
    .await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm");
    let mut confirms = Vec::new();
    for i in 0..5000u32 {
        confirms.push(
            within(ch.basic_publish(
                "".into(),
                "bulk".into(),
                Default::default(),
                &i.to_be_bytes(),
                Default::default(),
            ))
            .await
            .expect("publish"),
        );
    }
    for c in confirms {
        within(c).await.expect("confirm");
    }
    // Expiry walks the head only: the whole backlog drains by itself, oldest first.
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let mut left = u32::MAX;
    for _ in 0..500 {
        left = within(ch.queue_declare("bulk".into(), passive, FieldTable::default()))
            .await
            .expect("passive")
            .message_count();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(left, 0);
}
