//! Publish, consume, get, ack: the basic message flow through the default and amq.* exchanges.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

#[tokio::test]
async fn publish_then_get_and_consume() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = within(ch.queue_declare(
        "q1".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    assert_eq!(q.message_count(), 0);
    for i in 0..3 {
        within(ch.basic_publish(
            "".into(),
            "q1".into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    let got = within(ch.basic_get("q1".into(), BasicGetOptions { no_ack: false }))
        .await
        .expect("get")
        .expect("a message");
    assert_eq!(got.delivery.data, b"m0");
    assert_eq!(got.message_count, 2);
    within(got.delivery.ack(BasicAckOptions::default()))
        .await
        .expect("ack");

    let mut consumer = within(ch.basic_consume(
        "q1".into(),
        "c1".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    for expected in ["m1", "m2"] {
        let d = within(consumer.next())
            .await
            .expect("delivery")
            .expect("ok");
        assert_eq!(d.data, expected.as_bytes());
        assert!(!d.redelivered);
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    let empty = within(ch.basic_get("q1".into(), BasicGetOptions::default()))
        .await
        .expect("get");
    assert!(empty.is_none());
}
