//! A connection task that dies (here: a panic injected through `connection.update-secret`)
//! leaves nothing behind: its exclusive queues are deleted, its consumers cancelled and its
//! unacknowledged deliveries requeued, as when it closes normally.

use crate::config::Config;
use crate::Server;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::time::Duration;

/// The update-secret reason that makes the connection task panic (test builds only).
pub(crate) const PANIC_REASON: &str = "warren-test: panic in the connection task";

async fn until<F: std::future::Future<Output = bool>>(mut check: impl FnMut() -> F) -> bool {
    for _ in 0..200 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_task_that_panics_releases_what_it_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(Config {
        amqp_listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().to_owned(),
        ..Config::default()
    })
    .await
    .expect("broker starts");
    let url = format!("amqp://guest:guest@{}/%2f", server.amqp_addr);
    let conn = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    ch.queue_declare("mine".into(), exclusive, FieldTable::default())
        .await
        .expect("exclusive queue");
    ch.queue_declare("shared".into(), Default::default(), FieldTable::default())
        .await
        .expect("shared queue");
    for _ in 0..3 {
        ch.basic_publish(
            "".into(),
            "shared".into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    }
    let _consumer = ch
        .basic_consume(
            "shared".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let vhost = server.broker.vhost("/").expect("vhost");
    let shared = vhost.queue("shared").expect("shared exists");
    // All three are delivered and unacked before the task dies.
    assert!(until(|| async { matches!(shared.stats().await, Ok((0, 1))) }).await);
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        conn.update_secret("guest".into(), PANIC_REASON.into()),
    )
    .await;
    assert!(
        until(|| async { vhost.queue("mine").is_err() }).await,
        "the dead connection's exclusive queue is deleted"
    );
    assert!(
        until(|| async { matches!(shared.stats().await, Ok((3, 0))) }).await,
        "its consumer is gone and its unacked messages are back: {:?}",
        shared.stats().await
    );
    // The broker goes on serving: a new connection can take the exclusive name.
    let conn2 = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("connect again");
    let ch2 = conn2.create_channel().await.expect("channel");
    ch2.queue_declare("mine".into(), exclusive, FieldTable::default())
        .await
        .expect("the exclusive name is free again");
    server.shutdown().await;
}
