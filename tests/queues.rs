//! Queues: server-named and passive declares, exclusive and auto-delete queues, inequivalent
//! redeclares, bind/unbind, purge and delete with their counts.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

async fn publish_n(ch: &Channel, q: &str, n: usize) {
    for i in 0..n {
        within(ch.basic_publish(
            "".into(),
            q.into(),
            Default::default(),
            format!("{i}").as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

#[tokio::test]
async fn server_named_queue_and_counts() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = within(ch.queue_declare(
        "".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    let name = q.name().to_string();
    assert!(name.starts_with("amq.gen-"), "{name}");
    assert_eq!(name.len(), "amq.gen-".len() + 22);
    publish_n(&ch, &name, 3).await;
    let _consumer = within(ch.basic_consume(
        name.as_str().into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let again = within(ch.queue_declare(name.as_str().into(), passive(), FieldTable::default()))
        .await
        .expect("passive");
    assert_eq!(again.consumer_count(), 1);
}

#[tokio::test]
async fn passive_declare_of_missing_queue_is_404_and_reserved_prefix_403() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    assert_code(
        within(ch.queue_declare("missing".into(), passive(), FieldTable::default())).await,
        404,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch.queue_declare("amq.mine".into(), Default::default(), FieldTable::default()))
            .await,
        403,
    );
}

#[tokio::test]
async fn message_count_excludes_unacked() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare("q".into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare");
    publish_n(&ch, "q", 3).await;
    let got = within(ch.basic_get("q".into(), BasicGetOptions { no_ack: false }))
        .await
        .expect("get");
    assert!(got.is_some());
    let q = within(ch.queue_declare("q".into(), passive(), FieldTable::default()))
        .await
        .expect("passive");
    assert_eq!(q.message_count(), 2);
}

#[tokio::test]
async fn redeclare_with_other_properties_is_406() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    within(ch.queue_declare("q".into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare");
    within(ch.queue_declare("q".into(), Default::default(), FieldTable::default()))
        .await
        .expect("same again");
    assert_code(
        within(ch.queue_declare(
            "q".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch.queue_declare(
            "q".into(),
            QueueDeclareOptions {
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(10));
    assert_code(
        within(ch.queue_declare("q".into(), Default::default(), args)).await,
        406,
    );
    // Arguments RabbitMQ does not compare are ignored.
    let ch = within(c.create_channel()).await.expect("channel");
    let mut args = FieldTable::default();
    args.insert("x-custom".into(), AMQPValue::LongInt(10));
    within(ch.queue_declare("q".into(), Default::default(), args))
        .await
        .expect("ignored arg");
}

#[tokio::test]
async fn exclusive_queue_is_locked_to_its_connection_and_dies_with_it() {
    let b = start().await;
    let (owner, ch) = b.channel().await;
    let excl = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    within(ch.queue_declare("ex".into(), excl, FieldTable::default()))
        .await
        .expect("declare");
    let (other, och) = b.channel().await;
    // Others may publish to it...
    publish_n(&och, "ex", 1).await;
    // ...but not declare, bind, consume, get, purge or delete it.
    assert_code(
        within(och.queue_declare("ex".into(), passive(), FieldTable::default())).await,
        405,
    );
    let och = within(other.create_channel()).await.expect("channel");
    assert_code(
        within(och.queue_declare("ex".into(), Default::default(), FieldTable::default())).await,
        405,
    );
    let och = within(other.create_channel()).await.expect("channel");
    assert_code(
        within(och.queue_bind(
            "ex".into(),
            "amq.fanout".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        405,
    );
    let och = within(other.create_channel()).await.expect("channel");
    assert_code(
        within(och.basic_consume(
            "ex".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .map(|_| ()),
        405,
    );
    let och = within(other.create_channel()).await.expect("channel");
    assert_code(
        within(och.basic_get("ex".into(), Default::default()))
            .await
            .map(|_| ()),
        405,
    );
    let och = within(other.create_channel()).await.expect("channel");
    assert_code(
        within(och.queue_purge("ex".into(), Default::default())).await,
        405,
    );
    let och = within(other.create_channel()).await.expect("channel");
    assert_code(
        within(och.queue_delete("ex".into(), Default::default())).await,
        405,
    );
    let q = within(ch.queue_declare("ex".into(), passive(), FieldTable::default()))
        .await
        .expect("owner sees it");
    assert_eq!(q.message_count(), 1);
    within(owner.close(200, "bye".into())).await.expect("close");
    let och = within(other.create_channel()).await.expect("channel");
    // The close is processed asynchronously on the broker side; poll briefly.
    let mut gone = false;
    for _ in 0..50 {
        match within(och.queue_declare("ex".into(), passive(), FieldTable::default())).await {
            Err(e) => {
                assert_eq!(code(&e), Some(404));
                gone = true;
                break;
            }
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    assert!(gone, "exclusive queue survived its connection");
}

#[tokio::test]
async fn auto_delete_queue_goes_when_its_last_consumer_is_cancelled() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let ad = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    within(ch.queue_declare("ad".into(), ad, FieldTable::default()))
        .await
        .expect("declare");
    within(ch.queue_declare("never".into(), ad, FieldTable::default()))
        .await
        .expect("declare");
    let c1 = within(ch.basic_consume(
        "ad".into(),
        "c1".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("c1");
    let c2 = within(ch.basic_consume(
        "ad".into(),
        "c2".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("c2");
    within(ch.basic_cancel(c1.tag(), Default::default()))
        .await
        .expect("cancel 1");
    within(ch.queue_declare("ad".into(), passive(), FieldTable::default()))
        .await
        .expect("one consumer left");
    within(ch.basic_cancel(c2.tag(), Default::default()))
        .await
        .expect("cancel 2");
    within(ch.queue_declare("never".into(), passive(), FieldTable::default()))
        .await
        .expect("never consumed stays");
    assert_code(
        within(ch.queue_declare("ad".into(), passive(), FieldTable::default())).await,
        404,
    );
}

#[tokio::test]
async fn bind_unbind_and_missing_entities() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    within(ch.queue_declare("q".into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare");
    within(ch.queue_bind(
        "q".into(),
        "amq.direct".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    within(ch.basic_publish(
        "amq.direct".into(),
        "k".into(),
        Default::default(),
        b"1",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    within(ch.queue_unbind(
        "q".into(),
        "amq.direct".into(),
        "k".into(),
        FieldTable::default(),
    ))
    .await
    .expect("unbind");
    // Unbinding what is not bound is fine.
    within(ch.queue_unbind(
        "q".into(),
        "amq.direct".into(),
        "k".into(),
        FieldTable::default(),
    ))
    .await
    .expect("unbind again");
    within(ch.basic_publish(
        "amq.direct".into(),
        "k".into(),
        Default::default(),
        b"2",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let q = within(ch.queue_declare("q".into(), passive(), FieldTable::default()))
        .await
        .expect("passive");
    assert_eq!(q.message_count(), 1);
    assert_code(
        within(ch.queue_bind(
            "nope".into(),
            "amq.direct".into(),
            "k".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        404,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch.queue_bind(
            "q".into(),
            "nope".into(),
            "k".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        404,
    );
}

#[tokio::test]
async fn purge_and_delete_report_counts_and_conditions() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    within(ch.queue_declare("q".into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare");
    publish_n(&ch, "q", 4).await;
    assert_eq!(
        within(ch.queue_purge("q".into(), Default::default()))
            .await
            .expect("purge"),
        4
    );
    publish_n(&ch, "q", 2).await;
    assert_code(
        within(ch.queue_delete(
            "q".into(),
            QueueDeleteOptions {
                if_empty: true,
                ..Default::default()
            },
        ))
        .await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    within(ch.basic_qos(1, Default::default()))
        .await
        .expect("qos");
    let mut consumer = within(ch.basic_consume(
        "q".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let d = within(consumer.next())
        .await
        .expect("delivery")
        .expect("ok");
    assert_eq!(d.data, b"0");
    let ch2 = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch2.queue_delete(
            "q".into(),
            QueueDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        ))
        .await,
        406,
    );
    let ch2 = within(c.create_channel()).await.expect("channel");
    // One message is unacked with the consumer, so one is ready.
    let n = within(ch2.queue_delete("q".into(), Default::default()))
        .await
        .expect("delete");
    assert_eq!(n, 1);
    // Deleting a missing queue succeeds with 0 (RabbitMQ 3.13).
    assert_eq!(
        within(ch2.queue_delete("q".into(), Default::default()))
            .await
            .expect("delete again"),
        0
    );
}
