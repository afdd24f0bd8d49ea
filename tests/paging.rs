//! Paging with a small window (50 messages): persistent paged messages survive a restart,
//! purge removes them for good, TTL and max-length see them, consumers get them in order.

mod common;

use common::*;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;

/// A broker whose queues keep only 50 messages in memory.
async fn small_window() -> TestBroker {
    start_with(|c| c.queue_window_messages = 50).await
}

async fn publish(ch: &lapin::Channel, queue: &str, n: u32, props: BasicProperties) {
    for i in 0..n {
        within(ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &i.to_be_bytes(),
            props.clone(),
        ))
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
}

async fn declare(ch: &lapin::Channel, name: &str, durable: bool, args: FieldTable) {
    within(ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable,
            ..Default::default()
        },
        args,
    ))
    .await
    .expect("declare");
}

/// Bodies (as numbers) of every message in the queue, taken with basic.get.
async fn drain(ch: &lapin::Channel, queue: &str) -> Vec<u32> {
    let mut got = Vec::new();
    while let Some(m) = within(ch.basic_get(
        queue.into(),
        lapin::options::BasicGetOptions { no_ack: true },
    ))
    .await
    .expect("get")
    {
        let body: [u8; 4] = m.delivery.data[..4].try_into().expect("4 bytes");
        got.push(u32::from_be_bytes(body));
    }
    got
}

#[tokio::test]
async fn persistent_paged_messages_survive_a_restart_and_purge_removes_them_for_good() {
    let b = small_window().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "kept", true, FieldTable::default()).await;
    declare(&ch, "purged", true, FieldTable::default()).await;
    let persistent = BasicProperties::default().with_delivery_mode(2);
    publish(&ch, "kept", 300, persistent.clone()).await;
    publish(&ch, "purged", 300, persistent).await;
    let q = queue_json(&b, "kept").await;
    assert_eq!(q["messages_ready"], 300);
    assert!(q["messages_paged_out"].as_u64() >= Some(200), "{q}");
    assert!(q["messages_ram"].as_u64() <= Some(50), "{q}");
    let purged = within(ch.queue_purge("purged".into(), Default::default()))
        .await
        .expect("purge");
    assert_eq!(purged, 300);
    drop(c);
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    assert_eq!(drain(&ch, "kept").await, (0..300).collect::<Vec<_>>());
    assert_eq!(
        ready(&ch, "purged").await,
        0,
        "purged paged messages stay gone"
    );
}

#[tokio::test]
async fn paged_messages_expire_and_count_against_max_length() {
    let b = small_window().await;
    let (_c, ch) = b.channel().await;
    let mut ttl = FieldTable::default();
    ttl.insert("x-message-ttl".into(), AMQPValue::LongInt(200));
    declare(&ch, "ttl", false, ttl).await;
    let mut max = FieldTable::default();
    max.insert("x-max-length".into(), AMQPValue::LongInt(120));
    declare(&ch, "capped", false, max).await;
    publish(&ch, "ttl", 200, BasicProperties::default()).await;
    publish(&ch, "capped", 300, BasicProperties::default()).await;
    assert_eq!(ready(&ch, "capped").await, 120);
    assert_eq!(drain(&ch, "capped").await, (180..300).collect::<Vec<_>>());
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(drain(&ch, "ttl").await, Vec::<u32>::new(), "all expired");
    // And a consumer gets a paged backlog in order, requeues included.
    publish(&ch, "capped", 100, BasicProperties::default()).await;
    let mut consumer = within(ch.basic_consume(
        "capped".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let mut got = Vec::new();
    while got.len() < 100 {
        use futures_lite::StreamExt;
        let d = within(consumer.next())
            .await
            .expect("delivery")
            .expect("ok");
        got.push(u32::from_be_bytes(d.data[..4].try_into().expect("4 bytes")));
    }
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}
