//! Resource alarms: a memory watermark below the broker's use blocks publishing connections
//! (connection.blocked seen by lapin, the socket no longer read, heartbeats not enforced)
//! while consumers keep draining; the alarm shows in the health check, `/api/nodes` and the
//! metrics; when it clears, connection.unblocked and publishing resumes.

mod common;

use common::http::request;
use common::raw::{content_header, frame, publish_to, Raw};
use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Event};
use std::time::Duration;

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

/// Waits for connection.blocked; returns its reason.
async fn blocked(events: &mut (impl futures_lite::Stream<Item = Event> + Unpin)) -> String {
    within(async {
        loop {
            if let Some(Event::ConnectionBlocked(reason)) = events.next().await {
                return reason;
            }
        }
    })
    .await
}

/// Waits for connection.unblocked.
async fn unblocked(events: &mut (impl futures_lite::Stream<Item = Event> + Unpin)) {
    within(async {
        loop {
            if let Some(Event::ConnectionUnblocked) = events.next().await {
                return;
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_memory_alarm_blocks_publishers_until_it_clears() {
    let b = start_with(|c| {
        c.memory_high_watermark_absolute = Some(1);
        c.alarm_check_interval = 20;
    })
    .await;
    let addr = b.server.http_addr;
    let r = within(async {
        loop {
            let r = request(addr, "GET", "/api/health/checks/alarms", ADMIN, None).await;
            if r.status == 503 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(r.json()["alarms"][0]["resource"], "memory");
    assert_eq!(
        request(addr, "GET", "/api/nodes", ADMIN, None).await.json()[0]["mem_alarm"],
        true
    );
    // A consumer on its own connection.
    let (_cc, cch) = b.channel().await;
    within(cch.queue_declare(
        "jobs".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    let mut consumer = within(cch.basic_consume(
        "jobs".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    // The publisher's first message goes through, then the connection is blocked.
    let (pc, pch) = b.channel().await;
    let mut events = pc.events_listener();
    within(pch.basic_publish(
        "".into(),
        "jobs".into(),
        Default::default(),
        b"first",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let reason = blocked(&mut events).await;
    assert_eq!(reason, "low on memory");
    let d = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    assert_eq!(d.data, b"first");
    // Consumers are not blocked: a second consumer connection works during the alarm.
    let (_c2, ch2) = b.channel().await;
    assert_eq!(ready(&ch2, "jobs").await, 0);
    let m = request(b.server.metrics_addr, "GET", "/metrics", None, None)
        .await
        .body;
    assert!(m.contains("rabbitmq_alarms_memory_used_watermark 1"), "{m}");
    // Clearing the alarm (the watermark raised at runtime) unblocks and publishing resumes.
    b.server.broker.alarms.set_memory_limit(u64::MAX);
    unblocked(&mut events).await;
    within(pch.basic_publish(
        "".into(),
        "jobs".into(),
        Default::default(),
        b"second",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let d = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    assert_eq!(d.data, b"second");
    let r = request(addr, "GET", "/api/health/checks/alarms", ADMIN, None).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_blocked_connection_is_not_read_nor_dropped_for_missing_heartbeats() {
    let b = start_with(|c| {
        c.memory_high_watermark_absolute = Some(1);
        c.alarm_check_interval = 20;
    })
    .await;
    within(async {
        while !b.server.broker.alarms.state().memory {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "held".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    // A raw client with a 1 s heartbeat that then goes silent.
    let mut raw = Raw::handshake(b.server.amqp_addr, 1).await;
    raw.send(&common::raw::method(
        1,
        lapin::protocol::AMQPClass::Channel(lapin::protocol::channel::AMQPMethod::Open(
            lapin::protocol::channel::Open {},
        )),
    ))
    .await;
    let mut two = Vec::new();
    for body in [&b"one"[..], b"two"] {
        two.extend(publish_to("held"));
        two.extend(content_header(60, body.len() as u64));
        two.extend(frame(3, 1, body));
    }
    raw.send(&two).await;
    within(async {
        while ready(&ch, "held").await != 1 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Blocked after the first message: the second waits unread, and the silent client is
    // not dropped although it missed its heartbeats.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(ready(&ch, "held").await, 1);
    b.server.broker.alarms.set_memory_limit(u64::MAX);
    within(async {
        while ready(&ch, "held").await != 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_from_config_blocks_and_unblocks_once_consumers_drain() {
    // Real memory this time: the watermark sits 160 MiB above the broker's use, and a
    // consumer that does not acknowledge lets 40 MiB messages pile up until it is crossed.
    // Bodies that large are their own mappings, returned to the system when freed.
    const BODY: usize = 40 << 20;
    let limit = rss() + (160 << 20);
    let b = start_with(|c| {
        c.memory_high_watermark_absolute = Some(limit);
        c.alarm_check_interval = 20;
    })
    .await;
    let (_cc, cch) = b.channel().await;
    within(cch.queue_declare(
        "big".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    let mut consumer = within(cch.basic_consume(
        "big".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let (pc, pch) = b.channel().await;
    let mut events = pc.events_listener();
    let body = vec![7u8; BODY];
    let mut held = Vec::new();
    let mut raised = false;
    for _ in 0..12 {
        within(pch.basic_publish(
            "".into(),
            "big".into(),
            Default::default(),
            &body,
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
        held.push(
            within(consumer.next())
                .await
                .expect("open")
                .expect("delivery"),
        );
        // The alarm check runs every 20 ms; give it a look at the new use.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if b.server.broker.alarms.state().memory {
            raised = true;
            break;
        }
    }
    assert!(raised, "{} messages of 40 MiB raised no alarm", held.len());
    // The next message that publisher completes gets its connection blocked.
    within(pch.basic_publish(
        "".into(),
        "big".into(),
        Default::default(),
        b"small",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let reason = blocked(&mut events).await;
    assert_eq!(reason, "low on memory");
    // The consumer drains: acknowledged and dropped, the bodies are freed on both sides and
    // the alarm clears by itself.
    held.push(
        within(consumer.next())
            .await
            .expect("open")
            .expect("delivery"),
    );
    for d in held.drain(..) {
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    drop(body);
    unblocked(&mut events).await;
    assert!(!b.server.broker.alarms.state().memory);
    within(pch.basic_publish(
        "".into(),
        "big".into(),
        Default::default(),
        b"after",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let d = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    assert_eq!(d.data, b"after");
}
