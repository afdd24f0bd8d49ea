//! Limits that protect the node: connections, consumers per channel, queues per vhost and
//! unacknowledged deliveries per channel, each refused with a clear error when reached.

mod common;

use common::http::request;
use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::time::Duration;

async fn declare(ch: &Channel, q: &str) -> lapin::Result<lapin::Queue> {
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
}

#[tokio::test]
async fn max_connections_refuses_the_next_open_with_530() {
    let b = start_with(|c| c.max_connections = 2).await;
    let first = b.connect().await;
    let _second = b.connect().await;
    let r = within(Connection::connect(
        &b.url(),
        ConnectionProperties::default(),
    ))
    .await;
    match r {
        Err(e) => {
            assert_eq!(code(&e), Some(530), "{e}");
            assert!(
                e.to_string()
                    .contains("node connection limit (2) is reached"),
                "{e}"
            );
        }
        Ok(_) => panic!("a third connection was accepted"),
    }
    let overview = request(
        b.server.http_addr,
        "GET",
        "/api/overview",
        Some(("guest", "guest")),
        None,
    )
    .await
    .json();
    assert_eq!(overview["object_totals"]["connections"], 2);
    // A slot frees when a connection closes.
    within(first.close(200, "bye".into())).await.expect("close");
    within(async {
        loop {
            if let Ok(c) = Connection::connect(&b.url(), ConnectionProperties::default()).await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn max_consumers_per_channel_is_530() {
    let b = start_with(|c| c.max_consumers_per_channel = 2).await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await.expect("declare");
    // Held: lapin cancels a consumer whose handle is dropped.
    let mut held = Vec::new();
    for tag in ["a", "b"] {
        held.push(
            within(ch.basic_consume(
                "q".into(),
                tag.into(),
                Default::default(),
                FieldTable::default(),
            ))
            .await
            .expect("consume"),
        );
    }
    let r = within(ch.basic_consume(
        "q".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await;
    match r {
        Err(e) => {
            assert_eq!(code(&e), Some(530), "{e}");
            assert!(
                e.to_string()
                    .contains("reached maximum (2) of consumers per channel"),
                "{e}"
            );
        }
        Ok(_) => panic!("a third consumer was accepted"),
    }
    // Another channel has its own allowance.
    let (_c2, ch2) = b.channel().await;
    within(ch2.basic_consume(
        "q".into(),
        "a".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on another channel");
}

#[tokio::test]
async fn max_queues_per_vhost_is_406() {
    let b = start_with(|c| c.max_queues_per_vhost = 2).await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "one").await.expect("one");
    declare(&ch, "two").await.expect("two");
    // Redeclaring an existing queue is not a new queue.
    declare(&ch, "two").await.expect("redeclare");
    match declare(&ch, "three").await {
        Err(e) => {
            assert_eq!(code(&e), Some(406), "{e}");
            assert!(
                e.to_string()
                    .contains("queue limit in vhost '/' (2) is reached"),
                "{e}"
            );
        }
        Ok(_) => panic!("a third queue was declared"),
    }
    let (_c, ch) = b.channel().await;
    within(ch.queue_delete("one".into(), Default::default()))
        .await
        .expect("delete");
    declare(&ch, "three").await.expect("room again");
}

#[tokio::test]
async fn max_unacked_per_channel_caps_deliveries_and_gets() {
    let b = start_with(|c| c.max_unacked_per_channel = 5).await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "q").await.expect("declare");
    for i in 0..20 {
        within(ch.basic_publish(
            "".into(),
            "q".into(),
            Default::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    // No basic.qos: the channel still never holds more than 5 unacked deliveries.
    let mut consumer = within(ch.basic_consume(
        "q".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(
            within(consumer.next())
                .await
                .expect("open")
                .expect("delivery"),
        );
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.next())
            .await
            .is_err(),
        "a sixth delivery arrived"
    );
    // basic.get with manual ack on the full channel is refused.
    match within(ch.basic_get("q".into(), BasicGetOptions { no_ack: false })).await {
        Err(e) => assert_eq!(code(&e), Some(406), "{e}"),
        Ok(m) => panic!("basic.get beyond the cap: {m:?}"),
    }
    // On a fresh channel, an ack makes room for the next delivery.
    let (_c2, ch2) = b.channel().await;
    let mut consumer = within(ch2.basic_consume(
        "q".into(),
        "c2".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(
            within(consumer.next())
                .await
                .expect("open")
                .expect("delivery"),
        );
    }
    got[0].ack(BasicAckOptions::default()).await.expect("ack");
    within(consumer.next())
        .await
        .expect("open")
        .expect("the sixth after an ack");
}

#[tokio::test]
async fn user_limits_cap_connections_and_channels_with_530() {
    let b = start().await;
    let admin = Some(("guest", "guest"));
    let addr = b.server.http_addr;
    let put = |path: &'static str, body: &'static str| async move {
        request(addr, "PUT", path, admin, Some(body)).await
    };
    assert_eq!(
        put("/api/user-limits/guest/max-connections", r#"{"value": 1}"#)
            .await
            .status,
        204
    );
    assert_eq!(
        put("/api/user-limits/guest/max-channels", r#"{"value": 2}"#)
            .await
            .status,
        204
    );
    let r = put("/api/user-limits/guest/max-queues", r#"{"value": 1}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "Unrecognised terms [{<<\"max-queues\">>,1}] in user-limits"
    );
    let r = put("/api/user-limits/nobody/max-channels", r#"{"value": 1}"#).await;
    assert_eq!(
        r.json()["reason"],
        serde_json::json!(["no_such_user", "nobody"])
    );
    let shown = request(addr, "GET", "/api/user-limits/guest", admin, None)
        .await
        .json();
    assert_eq!(
        shown,
        serde_json::json!([{"user": "guest", "value": {"max-connections": 1, "max-channels": 2}}])
    );
    let conn = b.connect().await;
    match within(Connection::connect(
        &b.url(),
        ConnectionProperties::default(),
    ))
    .await
    {
        Err(e) => {
            assert_eq!(code(&e), Some(530), "{e}");
            assert!(
                e.to_string()
                    .contains("user connection limit (1) is reached"),
                "{e}"
            );
        }
        Ok(_) => panic!("a second connection was accepted"),
    }
    let _a = within(conn.create_channel()).await.expect("first channel");
    let _b = within(conn.create_channel()).await.expect("second channel");
    let r = within(conn.create_channel()).await;
    assert_code(r, 530);
    // Cleared limits no longer apply.
    let r = request(
        addr,
        "DELETE",
        "/api/user-limits/guest/max-connections",
        admin,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    let again = b.connect().await;
    let _c = within(again.create_channel())
        .await
        .expect("channel under the limit");
}
