//! basic.*: consume, cancel, get, ack/nack/reject, requeue order and the redelivered flag,
//! recover, prefetch windows, round-robin push, returns, user_id, large and empty messages,
//! property pass-through, and consumer cancel notification.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Consumer};
use std::time::Duration;

async fn declare(ch: &Channel, q: &str) {
    within(ch.queue_declare(q.into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare");
}

async fn publish(ch: &Channel, q: &str, body: &[u8]) {
    within(ch.basic_publish(
        "".into(),
        q.into(),
        Default::default(),
        body,
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
}

async fn consume(ch: &Channel, q: &str, tag: &str, no_ack: bool) -> Consumer {
    within(ch.basic_consume(
        q.into(),
        tag.into(),
        BasicConsumeOptions {
            no_ack,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("consume")
}

async fn next(c: &mut Consumer) -> Delivery {
    within(c.next())
        .await
        .expect("stream open")
        .expect("delivery")
}

/// Asserts nothing arrives for a short while.
async fn quiet(c: &mut Consumer) {
    if let Ok(d) = tokio::time::timeout(Duration::from_millis(200), c.next()).await {
        panic!("unexpected delivery {:?}", d.map(|d| d.map(|d| d.data)));
    }
}

fn text(d: &Delivery) -> String {
    String::from_utf8_lossy(&d.data).into_owned()
}

#[tokio::test]
async fn consume_tags_duplicates_and_missing_queue() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    let server_named = consume(&ch, "q", "", false).await;
    assert!(server_named.tag().as_str().starts_with("amq.ctag-"));
    let _mine = consume(&ch, "q", "mine", false).await;
    // Reusing a tag on the channel is a connection error (530).
    let r = within(ch.basic_consume(
        "q".into(),
        "mine".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await;
    assert_code(r.map(|_| ()), 530);
    let (c2, ch) = b.channel().await;
    let r = within(ch.basic_consume(
        "missing".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await;
    assert_code(r.map(|_| ()), 404);
    drop((c, c2));
}

#[tokio::test]
async fn exclusive_consumer_is_403_both_ways() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    // lapin cancels a consumer when its stream is dropped, so keep it.
    let _x = within(ch.basic_consume(
        "q".into(),
        "x".into(),
        BasicConsumeOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("exclusive consume");
    let ch2 = within(c.create_channel()).await.expect("channel");
    let r = within(ch2.basic_consume(
        "q".into(),
        "y".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await;
    assert_code(r.map(|_| ()), 403);
    declare(&ch, "q2").await;
    let _a = consume(&ch, "q2", "a", false).await;
    let ch3 = within(c.create_channel()).await.expect("channel");
    let r = within(ch3.basic_consume(
        "q2".into(),
        "b".into(),
        BasicConsumeOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await;
    assert_code(r.map(|_| ()), 403);
}

#[tokio::test]
async fn get_empty_and_get_ok_counts() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    assert!(within(ch.basic_get("q".into(), Default::default()))
        .await
        .expect("get")
        .is_none());
    publish(&ch, "q", b"a").await;
    publish(&ch, "q", b"b").await;
    let m = within(ch.basic_get("q".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("msg");
    assert_eq!(
        (m.delivery.data.as_slice(), m.message_count),
        (&b"a"[..], 1)
    );
    let m = within(ch.basic_get("q".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("msg");
    assert_eq!(
        (m.delivery.data.as_slice(), m.message_count),
        (&b"b"[..], 0)
    );
}

#[tokio::test]
async fn unknown_and_double_acks_are_406() {
    use amq_protocol::protocol::{basic as b, AMQPClass};
    use common::raw::{method, Raw};
    let broker = start().await;
    let mut r = Raw::open(broker.server.amqp_addr).await;
    let ack = |tag| {
        method(
            1,
            AMQPClass::Basic(b::AMQPMethod::Ack(b::Ack {
                delivery_tag: tag,
                multiple: false,
            })),
        )
    };
    r.send(&ack(99)).await;
    assert_eq!(r.channel_close_code().await, Some((1, 406)));
    let (_c, ch) = broker.channel().await;
    declare(&ch, "q").await;
    publish(&ch, "q", b"a").await;
    let mut r = Raw::open(broker.server.amqp_addr).await;
    r.send(&method(
        1,
        AMQPClass::Basic(b::AMQPMethod::Get(b::Get {
            queue: "q".into(),
            no_ack: false,
        })),
    ))
    .await;
    let tag = loop {
        match r.frame().await.expect("frame") {
            amq_protocol::frame::AMQPFrame::Method(
                1,
                AMQPClass::Basic(b::AMQPMethod::GetOk(g)),
            ) => break g.delivery_tag,
            _ => continue,
        }
    };
    r.send(&ack(tag)).await;
    r.send(&ack(tag)).await;
    assert_eq!(r.channel_close_code().await, Some((1, 406)));
}

#[tokio::test]
async fn requeued_messages_return_to_their_original_position_flagged_redelivered() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    for m in ["1", "2", "3", "4"] {
        publish(&ch, "q", m.as_bytes()).await;
    }
    let mut cons = consume(&ch, "q", "c", false).await;
    let d1 = next(&mut cons).await;
    let d2 = next(&mut cons).await;
    let d3 = next(&mut cons).await;
    let d4 = next(&mut cons).await;
    assert!(!d1.redelivered);
    within(ch.basic_cancel("c".into(), Default::default()))
        .await
        .expect("cancel");
    // Reject 3 and nack 1 with requeue; ack 2; nack 4 without requeue (dropped).
    within(d3.reject(BasicRejectOptions { requeue: true }))
        .await
        .expect("reject");
    within(d1.nack(BasicNackOptions {
        requeue: true,
        multiple: false,
    }))
    .await
    .expect("nack");
    within(d2.ack(Default::default())).await.expect("ack");
    within(d4.nack(BasicNackOptions {
        requeue: false,
        multiple: false,
    }))
    .await
    .expect("drop");
    let ch2 = within(c.create_channel()).await.expect("channel");
    let mut cons = consume(&ch2, "q", "c2", false).await;
    let a = next(&mut cons).await;
    let b2 = next(&mut cons).await;
    assert_eq!((text(&a), a.redelivered), ("1".into(), true));
    assert_eq!((text(&b2), b2.redelivered), ("3".into(), true));
    quiet(&mut cons).await;
}

#[tokio::test]
async fn unacked_messages_are_requeued_when_the_channel_closes() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    for m in ["1", "2", "3"] {
        publish(&ch, "q", m.as_bytes()).await;
    }
    let ch1 = within(c.create_channel()).await.expect("channel");
    let mut cons = consume(&ch1, "q", "c", false).await;
    for _ in 0..3 {
        next(&mut cons).await;
    }
    within(ch1.close(200, "bye".into())).await.expect("close");
    let mut cons = consume(&ch, "q", "c2", false).await;
    for m in ["1", "2", "3"] {
        let d = next(&mut cons).await;
        assert_eq!(text(&d), m);
        assert!(d.redelivered);
    }
    // And when the connection goes away.
    let (c3, ch3) = b.channel().await;
    declare(&ch3, "r").await;
    publish(&ch3, "r", b"x").await;
    let mut cons3 = consume(&ch3, "r", "c3", false).await;
    next(&mut cons3).await;
    within(c3.close(200, "bye".into())).await.expect("close");
    let mut got = None;
    for _ in 0..50 {
        if let Some(m) = within(ch.basic_get("r".into(), BasicGetOptions { no_ack: true }))
            .await
            .expect("get")
        {
            got = Some(m);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let m = got.expect("message requeued after connection close");
    assert!(m.delivery.redelivered);
}

/// A connection reset while deliveries are still on their way to it (handed to the
/// connection, not yet written to the client) leaves none of them held: all are ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_still_queued_for_a_reset_connection_go_back_to_the_queue() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "inflight").await;
    let body = vec![b'x'; 16 * 1024];
    for _ in 0..2_000 {
        publish(&ch, "inflight", &body).await;
    }
    let start = std::time::Instant::now();
    while ready(&ch, "inflight").await < 2_000 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never all published"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut raw = common::raw::Raw::open(b.server.amqp_addr).await;
    raw.send(&common::raw::consume("inflight", "unread")).await;
    // The client reads nothing: the socket buffers fill and the rest waits for the connection.
    let start = std::time::Instant::now();
    while ready(&ch, "inflight").await > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never all handed out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Closed with unread input, the client's socket resets the connection.
    drop(raw);
    let start = std::time::Instant::now();
    loop {
        let n = ready(&ch, "inflight").await;
        if n == 2_000 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{n} of 2,000 ready again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn multiple_ack_and_nack() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    for m in ["1", "2", "3", "4", "5"] {
        publish(&ch, "q", m.as_bytes()).await;
    }
    let mut cons = consume(&ch, "q", "c", false).await;
    let mut ds = Vec::new();
    for _ in 0..5 {
        ds.push(next(&mut cons).await);
    }
    within(ds[2].ack(BasicAckOptions { multiple: true }))
        .await
        .expect("ack 1..3");
    within(ds[4].nack(BasicNackOptions {
        multiple: true,
        requeue: true,
    }))
    .await
    .expect("nack 4..5");
    let a = next(&mut cons).await;
    let b2 = next(&mut cons).await;
    assert_eq!((text(&a), text(&b2)), ("4".into(), "5".into()));
    assert!(a.redelivered && b2.redelivered);
    within(ch.basic_ack(0, BasicAckOptions { multiple: true }))
        .await
        .expect("ack all");
    within(ch.basic_cancel("c".into(), Default::default()))
        .await
        .expect("cancel");
    let q = within(ch.queue_declare(
        "q".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("passive");
    assert_eq!(q.message_count(), 0);
}

#[tokio::test]
async fn recover_requeues_and_recover_without_requeue_is_540() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    publish(&ch, "q", b"a").await;
    let mut cons = consume(&ch, "q", "c", false).await;
    assert!(!next(&mut cons).await.redelivered);
    within(ch.basic_recover(BasicRecoverOptions { requeue: true }))
        .await
        .expect("recover");
    let d = next(&mut cons).await;
    assert!(d.redelivered);
    let ch2 = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch2.basic_recover(BasicRecoverOptions { requeue: false })).await,
        540,
    );
}

#[tokio::test]
async fn per_consumer_prefetch_limits_unacked_and_resumes_on_ack() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    for i in 0..5 {
        publish(&ch, "q", format!("{i}").as_bytes()).await;
    }
    within(ch.basic_qos(2, Default::default()))
        .await
        .expect("qos");
    let mut cons = consume(&ch, "q", "c", false).await;
    let d0 = next(&mut cons).await;
    let d1 = next(&mut cons).await;
    quiet(&mut cons).await;
    within(d0.ack(Default::default())).await.expect("ack");
    let d2 = next(&mut cons).await;
    assert_eq!(text(&d2), "2");
    quiet(&mut cons).await;
    within(d1.ack(BasicAckOptions { multiple: false }))
        .await
        .expect("ack");
    assert_eq!(text(&next(&mut cons).await), "3");
}

#[tokio::test]
async fn global_prefetch_is_shared_by_the_channels_consumers() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "a").await;
    declare(&ch, "b").await;
    for i in 0..3 {
        publish(&ch, "a", format!("a{i}").as_bytes()).await;
        publish(&ch, "b", format!("b{i}").as_bytes()).await;
    }
    within(ch.basic_qos(3, BasicQosOptions { global: true }))
        .await
        .expect("qos");
    let mut ca = consume(&ch, "a", "ca", false).await;
    let mut cb = consume(&ch, "b", "cb", false).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        tokio::select! {
            d = ca.next() => got.push(d.expect("a").expect("a")),
            d = cb.next() => got.push(d.expect("b").expect("b")),
        }
    }
    quiet(&mut ca).await;
    quiet(&mut cb).await;
    within(got[0].ack(Default::default())).await.expect("ack");
    let more = tokio::time::timeout(STEP, async {
        tokio::select! {
            d = ca.next() => d,
            d = cb.next() => d,
        }
    })
    .await
    .expect("a delivery after the ack");
    assert!(more.is_some());
}

#[tokio::test]
async fn round_robin_across_consumers_and_slow_consumer_does_not_block_others() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    let slow_ch = within(c.create_channel()).await.expect("channel");
    within(slow_ch.basic_qos(1, Default::default()))
        .await
        .expect("qos");
    let mut slow = consume(&slow_ch, "q", "slow", false).await;
    let fast_ch = within(c.create_channel()).await.expect("channel");
    let mut fast = consume(&fast_ch, "q", "fast", true).await;
    for i in 0..10 {
        publish(&ch, "q", format!("{i}").as_bytes()).await;
    }
    let first_slow = next(&mut slow).await;
    assert_eq!(text(&first_slow), "0");
    // The slow consumer holds its one message unacked; the rest go to the fast one.
    let mut fast_got = Vec::new();
    for _ in 0..9 {
        fast_got.push(text(&next(&mut fast).await));
    }
    assert_eq!(fast_got, (1..10).map(|i| i.to_string()).collect::<Vec<_>>());
    quiet(&mut slow).await;
}

#[tokio::test]
async fn mandatory_unroutable_is_returned_with_312() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm");
    let confirm = within(ch.basic_publish(
        "amq.direct".into(),
        "nowhere".into(),
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        b"lost",
        BasicProperties::default().with_message_id("m1".into()),
    ))
    .await
    .expect("publish");
    let confirmation = within(confirm).await.expect("confirmed");
    assert!(confirmation.is_ack(), "unroutable messages are still acked");
    let returned = confirmation.take_message().expect("returned message");
    assert_eq!(returned.reply_code, 312);
    assert_eq!(returned.reply_text.as_str(), "NO_ROUTE");
    assert_eq!(returned.delivery.data, b"lost");
    assert_eq!(
        returned
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("m1")
    );
}

#[tokio::test]
async fn user_id_must_match_the_connection_user() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    let own = BasicProperties::default().with_user_id("guest".into());
    assert_eq!(publish_error(&ch, "", "q", b"ok", own).await, None);
    let other = BasicProperties::default().with_user_id("mallory".into());
    assert_eq!(publish_error(&ch, "", "q", b"bad", other).await, Some(406));
    let ch = within(c.create_channel()).await.expect("channel");
    let q = within(ch.queue_declare(
        "q".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("passive");
    assert_eq!(q.message_count(), 1);
}

#[tokio::test]
async fn large_and_empty_messages_cross_frame_boundaries_intact() {
    let b = start().await;
    let url = format!(
        "amqp://guest:guest@{}/%2f?frame_max=4096",
        b.server.amqp_addr
    );
    let c = within(lapin::Connection::connect(&url, Default::default()))
        .await
        .expect("connect");
    let ch = within(c.create_channel()).await.expect("channel");
    declare(&ch, "q").await;
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    publish(&ch, "q", &big).await;
    publish(&ch, "q", b"").await;
    let mut cons = consume(&ch, "q", "c", true).await;
    assert_eq!(next(&mut cons).await.data, big);
    assert!(next(&mut cons).await.data.is_empty());
}

#[tokio::test]
async fn message_properties_and_headers_pass_through() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    let mut headers = FieldTable::default();
    headers.insert("zeta".into(), AMQPValue::LongString("last".into()));
    headers.insert("alpha".into(), AMQPValue::LongLongInt(-5));
    headers.insert(
        "nested".into(),
        AMQPValue::FieldTable(FieldTable::default()),
    );
    let props = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_content_encoding("utf-8".into())
        .with_headers(headers.clone())
        .with_delivery_mode(2)
        .with_priority(3)
        .with_correlation_id("corr".into())
        .with_reply_to("replies".into())
        .with_expiration("60000".into())
        .with_message_id("id-1".into())
        .with_timestamp(1_700_000_000)
        .with_type("kind".into())
        .with_user_id("guest".into())
        .with_app_id("app".into());
    within(ch.basic_publish(
        "".into(),
        "q".into(),
        Default::default(),
        b"p",
        props.clone(),
    ))
    .await
    .expect("publish");
    let mut cons = consume(&ch, "q", "c", true).await;
    let d = next(&mut cons).await;
    assert_eq!(d.properties, props);
    assert_eq!(d.routing_key.as_str(), "q");
    assert_eq!(d.exchange.as_str(), "");
}

#[tokio::test]
async fn consumers_are_told_when_their_queue_is_deleted() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "q").await;
    let mut cons = consume(&ch, "q", "c", false).await;
    let other = within(c.create_channel()).await.expect("channel");
    within(other.queue_delete("q".into(), Default::default()))
        .await
        .expect("delete");
    // lapin ends the consumer stream when it receives basic.cancel from the broker.
    let end = within(cons.next()).await;
    assert!(
        end.is_none(),
        "consumer stream should end, got {:?}",
        end.map(|d| d.map(|d| d.data))
    );
    // The channel is still usable.
    declare(&ch, "again").await;
}

#[tokio::test]
async fn cancel_stops_deliveries_and_leaves_unacked_with_the_channel() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await;
    publish(&ch, "q", b"1").await;
    let mut cons = consume(&ch, "q", "c", false).await;
    let d = next(&mut cons).await;
    within(ch.basic_cancel("c".into(), Default::default()))
        .await
        .expect("cancel");
    publish(&ch, "q", b"2").await;
    // The unacked message can still be acked after the cancel.
    within(d.ack(Default::default()))
        .await
        .expect("ack after cancel");
    let m = within(ch.basic_get("q".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("msg");
    assert_eq!(m.delivery.data, b"2");
    assert!(!m.delivery.redelivered);
}
