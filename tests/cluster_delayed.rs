//! Replicated delayed messages across three real `warren` processes (#18): the messages
//! waiting in a durable `x-delayed-message` exchange are held by a Raft group of their own,
//! so a publish confirmed through any node survives kill -9 of the node running their timers
//! (in RabbitMQ they live on one node and are lost with it): the group's next leader routes
//! each once its delay is over, and none before. They survive a restart of every node too;
//! the messages of a deleted exchange go with it.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use std::time::{Duration, Instant};

/// Publishes `n` messages `{prefix}-{i}` to `exchange` with `x-delay` `delay_ms`, through
/// `c` with confirms, and waits for every confirm.
async fn publish_delayed(
    c: &lapin::Connection,
    exchange: &str,
    prefix: &str,
    n: u32,
    delay_ms: i32,
) {
    let ch = channel(c).await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirm.select");
    let mut pending = Vec::new();
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert("x-delay".into(), AMQPValue::LongInt(delay_ms));
        let body = format!("{prefix}-{i}");
        pending.push(
            within(
                ch.basic_publish(
                    exchange.into(),
                    "k".into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_headers(headers),
                ),
            )
            .await
            .expect("publish"),
        );
    }
    for p in pending {
        assert!(
            within(p).await.expect("confirm").is_ack(),
            "held and confirmed"
        );
    }
}

/// Every message left in `queue`, taken with auto-ack, sorted.
async fn take_all(c: &lapin::Connection, queue: &str) -> Vec<String> {
    let ch = channel(c).await;
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
    {
        out.push(String::from_utf8(m.delivery.data).expect("utf-8"));
    }
    out.sort();
    out
}

fn names(prefix: &str, n: u32) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Declares the durable delayed exchange `later` (direct routing) through `x_on`, and
/// through `q_on` the quorum queue `late` bound to it with key `k`.
async fn later_and_late(x_on: &lapin::Connection, q_on: &lapin::Connection) {
    let ch = channel(x_on).await;
    let mut delayed_type = FieldTable::default();
    delayed_type.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    within(ch.exchange_declare(
        "later".into(),
        lapin::ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        delayed_type,
    ))
    .await
    .expect("a durable delayed exchange");
    let ch = channel(q_on).await;
    within(ch.queue_declare("late".into(), durable(), quorum()))
        .await
        .expect("a quorum queue");
    within(ch.queue_bind(
        "late".into(),
        "later".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_survive_a_restart_of_every_node_and_go_with_their_exchange() {
    let (specs, mut children, _) = three().await;
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    later_and_late(&b, &b).await;
    let published = Instant::now();
    publish_delayed(&b, "later", "kept", 10, 5_000).await;
    for child in &mut children {
        child.start_kill().expect("kill");
        let _ = child.wait().await;
    }
    drop(b);
    for (i, spec) in specs.iter().enumerate() {
        children[i] = spawn(spec);
    }
    let c = connect_when_up(specs[2].amqp).await;
    eventually_count(
        &c,
        "late",
        10,
        "every delayed message routed after the restart",
    )
    .await;
    assert!(
        published.elapsed() >= Duration::from_millis(4_900),
        "routed before the delay was over: {:?}",
        published.elapsed()
    );
    assert_eq!(take_all(&c, "late").await, names("kept", 10));

    // Held, then their exchange is deleted: they go with it.
    publish_delayed(&c, "later", "dropped", 5, 1_000).await;
    within(
        channel(&c)
            .await
            .exchange_delete("later".into(), ExchangeDeleteOptions::default()),
    )
    .await
    .expect("deleted");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(
        passive(&c, "late").await,
        Ok(0),
        "nothing routed once deleted"
    );
    // Declared again, it holds and routes its own messages.
    later_and_late(&c, &c).await;
    publish_delayed(&c, "later", "again", 3, 300).await;
    eventually_count(&c, "late", 3, "the new exchange's messages routed").await;
    assert_eq!(take_all(&c, "late").await, names("again", 3));
    for child in &mut children {
        let _ = child.start_kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_survive_kill_9_of_the_node_running_their_timers() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    // Declared on a, whose member leads the exchange's group first; the quorum queue is led
    // on b, so it stays put when a goes.
    later_and_late(&a, &b).await;

    // Confirmed through a (the node killed below) and c: the group holds them. Due 8 s
    // after their publish.
    let published = Instant::now();
    publish_delayed(&a, "later", "via-a", 20, 8_000).await;
    publish_delayed(&c, "later", "via-c", 10, 8_000).await;
    assert_eq!(passive(&c, "late").await, Ok(0), "held for their delay");

    // The node running their timers goes, with them in its memory.
    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    // A publish after the kill is held by the group's next leader too.
    publish_delayed(&c, "later", "after", 5, 500).await;
    assert!(
        published.elapsed() < Duration::from_millis(7_000),
        "the test outran the delay it checks: {:?}",
        published.elapsed()
    );
    let early = passive(&b, "late").await.expect("the queue");
    assert!(early <= 5, "{early} routed, only the last five were due");

    eventually_count(&b, "late", 35, "every confirmed delayed message routed").await;
    assert!(
        published.elapsed() >= Duration::from_millis(7_900),
        "routed before the delay was over: {:?}",
        published.elapsed()
    );
    let mut want = names("after", 5);
    want.extend(names("via-a", 20));
    want.extend(names("via-c", 10));
    want.sort();
    assert_eq!(take_all(&c, "late").await, want);
    // Each was routed once: nothing more arrives.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(passive(&b, "late").await, Ok(0), "routed once each");
    for child in &mut children {
        let _ = child.start_kill();
    }
}
