//! lapin helpers the multi-node queue tests share: bounded steps, channels, passive counts,
//! confirmed publishes.

use super::cluster::{amqp, reply_code};
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection};
use std::time::{Duration, Instant};

/// Connects to `port`, waiting (at most 30 s) for a node that is starting to listen.
pub async fn connect_when_up(port: u16) -> Connection {
    let start = Instant::now();
    loop {
        if let Ok(Ok(conn)) = tokio::time::timeout(Duration::from_secs(2), amqp(port, "%2F")).await
        {
            return conn;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the node listens"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long one step of a test may take.
pub const STEP: Duration = Duration::from_secs(10);

/// `f`, which must finish within [`STEP`].
pub async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, f).await.expect("step timed out")
}

/// A new channel on `c`.
pub async fn channel(c: &Connection) -> Channel {
    within(c.create_channel()).await.expect("channel")
}

/// Options of a durable queue.
pub fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Declare arguments of a quorum queue.
pub fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        lapin::types::AMQPValue::LongString("quorum".into()),
    );
    args
}

/// A passive declare of `name` on a fresh channel: its message count, or the reply code and
/// text it was refused with.
pub async fn passive(c: &Connection, name: &str) -> Result<u32, (Option<u16>, String)> {
    let ch = channel(c).await;
    let opts = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    match within(ch.queue_declare(name.into(), opts, FieldTable::default())).await {
        Ok(q) => Ok(q.message_count()),
        Err(e) => Err((reply_code(&e), e.to_string())),
    }
}

/// Publishes `n` persistent messages `prefix-i` through `exchange` with `key` and waits for
/// every confirm, which must be an ack.
pub async fn publish_confirmed(c: &Connection, exchange: &str, key: &str, prefix: &str, n: u32) {
    let ch = channel(c).await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let mut pending = Vec::new();
    for i in 0..n {
        let body = format!("{prefix}-{i}");
        pending.push(
            within(ch.basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            ))
            .await
            .expect("publish"),
        );
    }
    for p in pending {
        assert!(within(p).await.expect("confirm").is_ack(), "publish acked");
    }
}

/// Waits (at most 30 s) until a passive declare of `name` counts `want` messages.
pub async fn eventually_count(c: &Connection, name: &str, want: u32, what: &str) {
    let start = Instant::now();
    loop {
        let got = passive(c, name).await;
        if got == Ok(want) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{what}: {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes every ready message of `queue` through `c` with basic.get, acking each: (body,
/// redelivered) in order.
pub async fn drain(c: &lapin::Connection, queue: &str) -> Vec<(String, bool)> {
    let ch = channel(c).await;
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }))
        .await
        .expect("get")
    {
        let body = String::from_utf8(m.delivery.data.clone()).expect("utf-8");
        out.push((body, m.delivery.redelivered));
        within(m.delivery.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    out
}
