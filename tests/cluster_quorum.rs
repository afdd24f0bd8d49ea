//! Quorum queues across three real `warren` processes (#18): a quorum queue declared on one
//! node is a Raft group over the three; publishes through any node are confirmed once a
//! majority has them; when the leader's node is killed (-9) another member leads, every
//! confirmed message not acked is there, in order, and the queue serves publishes and gets
//! through any node, and a message nacked back keeps its `x-delivery-count`; the killed node
//! comes back as a member and reaches the new leader; a consumer on another node stays
//! attached through the move. A
//! quorum queue of two members deleted through a third node is gone everywhere, and its name
//! makes a new, empty queue.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::http::request;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_keeps_what_was_confirmed_when_its_leaders_node_is_killed() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let on_a = channel(&a).await;
    within(on_a.queue_declare("qq".into(), durable(), quorum()))
        .await
        .expect("declare a quorum queue on a");
    // RabbitMQ's rules for quorum queues hold in the cluster too.
    let transient = QueueDeclareOptions::default();
    let refused = within(
        channel(&b)
            .await
            .queue_declare("qq2".into(), transient, quorum()),
    )
    .await;
    assert_eq!(refused.as_ref().err().and_then(reply_code), Some(406));

    // Confirmed through b (a handle that forwards to the leader on a): a majority has them.
    publish_confirmed(&b, "", "qq", "m", 20).await;
    assert_eq!(passive(&c, "qq").await, Ok(20));
    // Five taken and acked on a, the leader; two taken on c and held unacked.
    let taken: Vec<String> = drain_some(&a, "qq", 5).await;
    assert_eq!(taken, (0..5).map(|i| format!("m-{i}")).collect::<Vec<_>>());
    let holder = channel(&c).await;
    for i in 5..7 {
        let m = within(holder.basic_get("qq".into(), BasicGetOptions { no_ack: false }))
            .await
            .expect("get")
            .expect("a message");
        assert_eq!(m.delivery.data, format!("m-{i}").into_bytes());
    }
    assert_eq!(passive(&b, "qq").await, Ok(13));
    // The management API shows the group; stopping a member now leaves a majority.
    let g = Some(("guest", "guest"));
    let shown = request(specs[2].http, "GET", "/api/queues/%2F/qq", g, None).await;
    let shown = shown.json();
    let mut names: Vec<&str> = NAMES.to_vec();
    names.sort();
    assert_eq!(
        (
            shown["type"].as_str(),
            shown["leader"].as_str(),
            shown["state"].as_str()
        ),
        (Some("quorum"), Some(NAMES[0]), Some("running")),
        "{shown}"
    );
    assert_eq!(shown["members"], serde_json::json!(names));
    let critical = "/api/health/checks/node-is-quorum-critical";
    let r = request(specs[1].http, "GET", critical, g, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // A message of a second queue nacked back twice through c.
    within(on_a.queue_declare("qd".into(), durable(), quorum()))
        .await
        .expect("declare qd on a");
    publish_confirmed(&b, "", "qd", "d", 1).await;
    let nacker = channel(&c).await;
    for _ in 0..2 {
        let m = within(nacker.basic_get("qd".into(), BasicGetOptions { no_ack: false }))
            .await
            .expect("get")
            .expect("a message");
        within(m.delivery.nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        }))
        .await
        .expect("nack");
    }
    // A consumer on b of a third queue, and one on a: they take their first message.
    within(on_a.queue_declare("qc".into(), durable(), quorum()))
        .await
        .expect("declare qc on a");
    let mut stays = consume_one(&b, "qc", "stays").await;
    let mut on_leader = consume_one(&a, "qc", "on-leader").await;
    publish_confirmed(&c, "", "qc", "c", 2).await;
    let mut first = Vec::new();
    for consumer in [&mut stays, &mut on_leader] {
        let d = within(consumer.next())
            .await
            .expect("stream open")
            .expect("delivery");
        first.push(String::from_utf8_lossy(&d.data).into_owned());
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    first.sort();
    assert_eq!(first, ["c-0", "c-1"]);
    // The acks, nacks and the delivered mark go to the group after they are handled: let
    // them commit.
    tokio::time::sleep(Duration::from_millis(500)).await;

    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    let killed = Instant::now();
    // Declared again while no member leads it yet (a client reconnecting after the loss):
    // declare-ok, as RabbitMQ's, which counts 0 when the leader does not answer, not the
    // 404 of a classic queue whose node is down.
    let redeclared = passive(&b, "qq").await;
    assert!(
        redeclared.is_ok(),
        "{redeclared:?} after {:?}",
        killed.elapsed()
    );
    // What c held unacked comes back from the new leader, flagged redelivered.
    eventually_count(
        &b,
        "qq",
        15,
        "b or c leads the queue with what a had confirmed",
    )
    .await;
    eprintln!(
        "a quorum queue served again {:?} after its leader's node was killed",
        killed.elapsed()
    );
    // b's consumer stays attached through the leader's move (as RabbitMQ's do): it gets
    // what is published under the new leader, with no basic.cancel.
    publish_confirmed(&c, "", "qc", "after-move", 3).await;
    for i in 0..3 {
        let d = within(stays.next())
            .await
            .expect("still consuming, not cancelled")
            .expect("delivery");
        assert_eq!(
            (String::from_utf8_lossy(&d.data).into_owned(), d.redelivered),
            (format!("after-move-{i}"), false)
        );
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    publish_confirmed(&c, "", "qq", "n", 5).await;
    let got = drain(&c, "qq").await;
    // What c held comes back flagged, and so does the rest of the old leader's delivered
    // mark, which runs ahead of what it handed out (a new leader cannot tell those apart);
    // what was published under the new leader is not flagged.
    let want: Vec<(String, bool)> = (5..20)
        .map(|i| (format!("m-{i}"), true))
        .chain((0..5).map(|i| (format!("n-{i}"), false)))
        .collect();
    assert_eq!(
        got, want,
        "every confirmed message not acked, in order, once"
    );
    // The nacked message keeps its count under the new leader (RabbitMQ's x-delivery-count
    // is in the queue's replicated state too).
    let start = Instant::now();
    let again = loop {
        let ch = channel(&b).await;
        if let Ok(Some(m)) =
            within(ch.basic_get("qd".into(), BasicGetOptions { no_ack: true })).await
        {
            break m;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "qd serves again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let count = again
        .delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count").cloned());
    assert_eq!(
        (count, again.delivery.redelivered),
        (Some(AMQPValue::LongLongInt(2)), true)
    );
    // Two of three members left: stopping either would leave the queue without a majority.
    let start = Instant::now();
    loop {
        let r = request(specs[1].http, "GET", critical, g, None).await;
        let listed = r.json()["queues"]
            .as_array()
            .is_some_and(|q| q.iter().any(|q| q["name"] == "qq" && q["type"] == "quorum"));
        if r.status == 503 && listed {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shown = request(specs[1].http, "GET", "/api/queues/%2F/qq", g, None).await;
    assert_ne!(
        shown.json()["leader"].as_str(),
        Some(NAMES[0]),
        "{}",
        shown.body
    );

    // a comes back: a member again, its handle on the queue points at the new leader.
    children[0] = spawn(&specs[0]);
    let a = connect_when_up(specs[0].amqp).await;
    publish_confirmed(&a, "", "qq", "after", 3).await;
    eventually_count(&b, "qq", 3, "published through the restarted node").await;
    let got = drain(&a, "qq").await;
    assert_eq!(
        got.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
        vec!["after-0", "after-1", "after-2"]
    );
    for mut child in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_quorum_queue_is_gone_everywhere_and_its_name_can_be_declared_again() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let mut two = quorum();
    two.insert("x-quorum-initial-group-size".into(), AMQPValue::LongInt(2));
    within(
        channel(&b)
            .await
            .queue_declare("gone".into(), durable(), two),
    )
    .await
    .expect("declare on b");
    let g = Some(("guest", "guest"));
    let shown = request(specs[0].http, "GET", "/api/queues/%2F/gone", g, None).await;
    let members = shown.json()["members"].clone();
    assert_eq!(members.as_array().map(Vec::len), Some(2), "{}", shown.body);
    assert!(members
        .as_array()
        .is_some_and(|m| m.contains(&NAMES[1].into())));
    publish_confirmed(&a, "", "gone", "m", 3).await;
    // Deleted through a node that only holds a handle: its leader deletes it.
    let deleted = within(
        channel(&c)
            .await
            .queue_delete("gone".into(), Default::default()),
    )
    .await
    .expect("delete on c");
    assert_eq!(deleted, 3);
    for conn in [&a, &b, &c] {
        assert_eq!(passive(conn, "gone").await.map_err(|e| e.0), Err(Some(404)));
    }
    // The name is free: a new queue, empty, on another leader.
    within(
        channel(&c)
            .await
            .queue_declare("gone".into(), durable(), quorum()),
    )
    .await
    .expect("declared again on c");
    assert_eq!(passive(&a, "gone").await, Ok(0));
    publish_confirmed(&b, "", "gone", "again", 2).await;
    assert_eq!(passive(&c, "gone").await, Ok(2));
    for mut child in children.drain(..) {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

/// Takes `n` messages of `queue` through `c` with basic.get and acks them: their bodies.
async fn drain_some(c: &lapin::Connection, queue: &str, n: usize) -> Vec<String> {
    let ch = channel(c).await;
    let mut out = Vec::new();
    for _ in 0..n {
        let m = within(ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }))
            .await
            .expect("get")
            .expect("a message");
        out.push(String::from_utf8(m.delivery.data.clone()).expect("utf-8"));
        within(m.delivery.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    out
}

/// A manual-ack consumer of `queue` through `conn` with a prefetch of 1.
async fn consume_one(conn: &lapin::Connection, queue: &str, tag: &str) -> lapin::Consumer {
    let ch = channel(conn).await;
    within(ch.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("qos");
    within(ch.basic_consume(
        queue.into(),
        tag.into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume")
}
