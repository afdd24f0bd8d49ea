//! A quorum queue's consumer rules across a failover, three real `warren` processes (#18):
//! with `x-single-active-consumer`, one consumer of the two (on b and c) gets everything
//! before kill -9 of the leader's node and one gets everything after (each stays attached,
//! neither is cancelled); with consumer priorities, the higher one gets every message while
//! it has credit, before and after.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::http::request;
use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use std::time::Duration;

/// A consumer of `queue` on a new channel of `conn` with prefetch 100 and `args`.
async fn consumer(
    conn: &lapin::Connection,
    queue: &str,
    tag: &str,
    args: FieldTable,
) -> lapin::Consumer {
    let ch = channel(conn).await;
    within(ch.basic_qos(100, BasicQosOptions::default()))
        .await
        .expect("qos");
    within(ch.basic_consume(
        queue.into(),
        tag.into(),
        BasicConsumeOptions::default(),
        args,
    ))
    .await
    .expect("consume")
}

type Deliveries = tokio::sync::mpsc::UnboundedReceiver<(&'static str, String)>;

/// Acks what `consumer` gets and tells `tx` (tag, body).
fn forward(
    tag: &'static str,
    mut consumer: lapin::Consumer,
    tx: tokio::sync::mpsc::UnboundedSender<(&'static str, String)>,
) {
    tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            let body = String::from_utf8_lossy(&d.data).into_owned();
            let _ = d.ack(BasicAckOptions::default()).await;
            if tx.send((tag, body)).is_err() {
                return;
            }
        }
    });
}

/// What the consumers of `tags` got: (tag, bodies), once `want` arrived in all (at most
/// 20 s) and nothing more came for 750 ms.
async fn collect(rx: &mut Deliveries, tags: &[&str], want: usize) -> Vec<(String, Vec<String>)> {
    let mut got: Vec<(String, Vec<String>)> =
        tags.iter().map(|t| (t.to_string(), Vec::new())).collect();
    let (mut total, start) = (0, std::time::Instant::now());
    loop {
        match tokio::time::timeout(Duration::from_millis(750), rx.recv()).await {
            Ok(Some((tag, body))) => {
                if let Some(entry) = got.iter_mut().find(|(t, _)| t == tag) {
                    entry.1.push(body);
                    total += 1;
                }
            }
            _ if total >= want => return got,
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "only {total} of {want} arrived: {got:?}"
        );
    }
}

/// The one consumer that got messages, and how many; panics when both did.
fn single(got: &[(String, Vec<String>)]) -> (String, usize) {
    let active: Vec<&(String, Vec<String>)> = got.iter().filter(|(_, b)| !b.is_empty()).collect();
    assert_eq!(active.len(), 1, "one consumer active at a time: {got:?}");
    (active[0].0.clone(), active[0].1.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_active_consumer_and_priorities_hold_across_a_failover() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let on_a = channel(&a).await;
    let mut sac = quorum();
    sac.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
    within(on_a.queue_declare("sac".into(), durable(), sac))
        .await
        .expect("declare sac on a");
    within(on_a.queue_declare("prio".into(), durable(), quorum()))
        .await
        .expect("declare prio on a");
    let (tx, mut sac) = tokio::sync::mpsc::unbounded_channel();
    forward(
        "sac-b",
        consumer(&b, "sac", "sac-b", FieldTable::default()).await,
        tx.clone(),
    );
    forward(
        "sac-c",
        consumer(&c, "sac", "sac-c", FieldTable::default()).await,
        tx,
    );
    let priority = |p: i32| {
        let mut t = FieldTable::default();
        t.insert("x-priority".into(), AMQPValue::LongInt(p));
        t
    };
    let (tx, mut prio) = tokio::sync::mpsc::unbounded_channel();
    forward(
        "low",
        consumer(&b, "prio", "low", priority(1)).await,
        tx.clone(),
    );
    forward("high", consumer(&c, "prio", "high", priority(10)).await, tx);

    publish_confirmed(&b, "", "sac", "before", 10).await;
    publish_confirmed(&b, "", "prio", "before", 10).await;
    let got = collect(&mut sac, &["sac-b", "sac-c"], 10).await;
    assert_eq!(single(&got).1, 10, "{got:?}");
    let got = collect(&mut prio, &["low", "high"], 10).await;
    assert_eq!(single(&got), ("high".to_string(), 10), "{got:?}");
    // The acks are committed after they are handled: let them be.
    tokio::time::sleep(Duration::from_millis(500)).await;

    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    // Both consumers of each queue are registered with its new leader before the publishes
    // (a publish alone could overtake a re-registration).
    for queue in ["sac", "prio"] {
        let start = std::time::Instant::now();
        loop {
            let path = format!("/api/queues/%2F/{queue}");
            let r = request(specs[1].http, "GET", &path, Some(("guest", "guest")), None).await;
            let v = r.json();
            if v["leader"].as_str().is_some_and(|l| l != NAMES[0]) && v["consumers"] == 2 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{}", r.body);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    publish_confirmed(&b, "", "sac", "after", 10).await;
    publish_confirmed(&b, "", "prio", "after", 10).await;
    let got = collect(&mut sac, &["sac-b", "sac-c"], 10).await;
    let (_, n) = single(&got);
    assert_eq!(
        n, 10,
        "every message after the move, to one consumer: {got:?}"
    );
    let got = collect(&mut prio, &["low", "high"], 10).await;
    assert_eq!(single(&got), ("high".to_string(), 10), "{got:?}");
    for mut child in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}
