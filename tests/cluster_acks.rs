//! An ack is processed only when its channel's `close-ok` says so (#18). A consumer on one
//! node takes a quorum queue's messages from its leader on another; its node is cut off
//! (iptables) long enough for the leader to give up on it and take those deliveries back.
//! After the cut heals, the consumer acks them and closes its channel: the leader no longer
//! holds them for that node, so the acks are not carried out and the channel's close is
//! refused (541 on the connection) instead of answered `close-ok`, and the messages come
//! back, flagged redelivered. Acks that are carried out are answered `close-ok` and stay
//! acked. Needs root for iptables (`tests/tools/install-iptables` installs it).

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::partition::{prepare, specs_apart, Cut};
use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use std::time::{Duration, Instant};

const APART: [(&str, &str); 3] = [
    ("warren-a@127.0.0.8", "127.0.0.8"),
    ("warren-b@127.0.0.9", "127.0.0.9"),
    ("warren-c@127.0.0.10", "127.0.0.10"),
];

/// The ready and unacknowledged counts of queue `name` as node `at`'s management API has them.
async fn counts(at: std::net::SocketAddr, name: &str) -> (u64, u64) {
    let g = Some(("guest", "guest"));
    let r = common::http::request(at, "GET", &format!("/api/queues/%2F/{name}"), g, None).await;
    let v = r.json();
    (
        v["messages_ready"].as_u64().unwrap_or(u64::MAX),
        v["messages_unacknowledged"].as_u64().unwrap_or(u64::MAX),
    )
}

/// The quorum status rows of queue `name` as node `at` has them: (term, raft state) per member.
async fn members(at: std::net::SocketAddr, name: &str) -> Vec<(u64, String)> {
    let g = Some(("guest", "guest"));
    let path = format!("/api/queues/quorum/%2F/{name}/status");
    let r = common::http::request(at, "GET", &path, g, None).await;
    r.json()
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|m| {
                    let term = m["Term"].as_u64().unwrap_or(0);
                    (term, m["Raft State"].as_str().unwrap_or("").to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the three members of `name` agree on a term with one leader, for a second.
async fn settled(at: std::net::SocketAddr, name: &str) {
    let start = Instant::now();
    let mut agreed: Option<(Instant, u64)> = None;
    loop {
        let rows = members(at, name).await;
        let term = rows.first().map_or(0, |r| r.0);
        let one = rows.len() == 3
            && rows.iter().all(|r| r.0 == term)
            && rows.iter().filter(|r| r.1 == "leader").count() == 1;
        agreed = match (one, agreed) {
            (true, Some((since, t))) if t == term => {
                if since.elapsed() >= Duration::from_secs(1) {
                    return;
                }
                Some((since, t))
            }
            (true, _) => Some((Instant::now(), term)),
            (false, _) => None,
        };
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the members of {name} never settled: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_the_leader_no_longer_holds_are_refused_at_close_and_the_messages_come_back() {
    prepare();
    let specs = specs_apart(&APART);
    let _children: Vec<_> = specs.iter().map(spawn).collect();
    let all_up: Vec<(&str, bool)> = APART.iter().map(|(n, _)| (*n, true)).collect();
    for s in &specs {
        eventually_nodes(s.http, &all_up, &format!("{} sees the cluster", s.name)).await;
    }
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    within(
        channel(&a)
            .await
            .queue_declare("qa".into(), durable(), quorum()),
    )
    .await
    .expect("declare on a");
    publish_confirmed(&a, "", "qa", "m", 10).await;

    // c's consumer takes all ten from a, the leader, and holds them.
    let held = channel(&c).await;
    within(held.basic_qos(10, BasicQosOptions::default()))
        .await
        .expect("qos");
    let mut consumer = within(held.basic_consume(
        "qa".into(),
        "holder".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on c");
    let mut last = 0;
    for i in 0..10 {
        let d = within(consumer.next())
            .await
            .expect("a delivery")
            .expect("delivery");
        assert_eq!(d.data, format!("m-{i}").into_bytes());
        last = d.delivery_tag;
    }
    assert_eq!(counts(specs[0].http, "qa").await, (0, 10));

    // c cut off: a stops hearing from it and takes its deliveries back.
    let mut cut = Cut::off(APART[2].1);
    let start = Instant::now();
    while counts(specs[0].http, "qa").await != (10, 0) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a never took back what c held: {:?}",
            counts(specs[0].http, "qa").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cut.heal();
    for s in [&specs[0], &specs[2]] {
        eventually_nodes(
            s.http,
            &all_up,
            &format!("{} sees the cluster again", s.name),
        )
        .await;
    }
    // c's member may have called elections while cut off: its term deposes the leader once it
    // is heard again, and the queue's task is started afresh, or led elsewhere. c's consumer,
    // attached again, may take the ten again (flagged) under new delivery tags.
    settled(specs[0].http, "qa").await;
    let (ready, unacked) = counts(specs[0].http, "qa").await;
    assert_eq!(ready + unacked, 10, "{ready} ready, {unacked} unacked");

    // The late acks are not carried out, and the close says so.
    within(held.basic_ack(last, BasicAckOptions { multiple: true }))
        .await
        .expect("ack sent");
    let closed = within(held.close(200, "done".into())).await;
    let e = closed.expect_err("close-ok for acks that were not carried out");
    assert_eq!(reply_code(&e), Some(541), "{e}");

    // The messages are all there, flagged redelivered; acked now, they stay acked.
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let ch = channel(&b).await;
    let mut got = Vec::new();
    while let Some(m) = within(ch.basic_get(
        "qa".into(),
        lapin::options::BasicGetOptions { no_ack: false },
    ))
    .await
    .expect("get")
    {
        got.push((
            String::from_utf8(m.delivery.data.clone()).expect("utf-8"),
            m.delivery.redelivered,
        ));
        within(m.delivery.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    let want: Vec<(String, bool)> = (0..10).map(|i| (format!("m-{i}"), true)).collect();
    assert_eq!(got, want, "what c held, back once each");
    within(ch.close(200, "done".into()))
        .await
        .expect("close-ok for acks carried out");
    assert_eq!(passive(&b, "qa").await, Ok(0));
    assert_eq!(counts(specs[0].http, "qa").await, (0, 0));
}

/// The nodes of the deposed-leader test, apart from the ones above (tests run in parallel).
const DEPOSED: [(&str, &str); 3] = [
    ("warren-a@127.0.0.11", "127.0.0.11"),
    ("warren-b@127.0.0.12", "127.0.0.12"),
    ("warren-c@127.0.0.13", "127.0.0.13"),
];

/// The leader of queue `name` as node `at`'s management API has it.
async fn leader(at: std::net::SocketAddr, name: &str) -> String {
    let g = Some(("guest", "guest"));
    let r = common::http::request(at, "GET", &format!("/api/queues/%2F/{name}"), g, None).await;
    r.json()["leader"].as_str().unwrap_or("").to_string()
}

/// The next delivery of `consumer` within `wait`, as (body, redelivered), or None.
async fn next_within(consumer: &mut lapin::Consumer, wait: Duration) -> Option<(String, bool)> {
    let d = tokio::time::timeout(wait, consumer.next()).await.ok()??;
    let d = d.expect("delivery");
    Some((
        String::from_utf8(d.data.clone()).expect("utf-8"),
        d.redelivered,
    ))
}

/// A leader cut off from the others does not know it was deposed until a write of its fails,
/// and handing out a message it had handed out before (under its delivered mark) writes
/// nothing: it must still not hand out what the new leader has had acknowledged since. Its
/// node's consumer gets nothing while the cut lasts, nor after it heals (the queue is empty
/// by then), and then gets what is published next, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_hands_out_nothing_the_new_leader_had_acked() {
    prepare();
    let specs = specs_apart(&DEPOSED);
    let _children: Vec<_> = specs.iter().map(spawn).collect();
    let all_up: Vec<(&str, bool)> = DEPOSED.iter().map(|(n, _)| (*n, true)).collect();
    for s in &specs {
        eventually_nodes(s.http, &all_up, &format!("{} sees the cluster", s.name)).await;
    }
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    within(
        channel(&a)
            .await
            .queue_declare("qd".into(), durable(), quorum()),
    )
    .await
    .expect("declare on a");
    publish_confirmed(&a, "", "qd", "m", 10).await;
    // One message taken and acked on a: the leader's delivered mark now covers the rest.
    let first = channel(&a).await;
    let got = within(first.basic_get(
        "qd".into(),
        lapin::options::BasicGetOptions { no_ack: false },
    ))
    .await
    .expect("get")
    .expect("a message");
    assert_eq!(got.delivery.data, b"m-0");
    within(got.delivery.ack(BasicAckOptions::default()))
        .await
        .expect("ack");
    within(first.close(200, "done".into()))
        .await
        .expect("close-ok");

    // a cut off; another member leads, and the nine are taken and acked through b.
    let mut cut = Cut::off(DEPOSED[0].1);
    let start = Instant::now();
    while leader(specs[1].http, "qd").await == DEPOSED[0].0 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no other member took the queue over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taker = channel(&b).await;
    let mut taken = Vec::new();
    while taken.len() < 9 {
        let m = within(taker.basic_get(
            "qd".into(),
            lapin::options::BasicGetOptions { no_ack: false },
        ))
        .await
        .expect("get on b");
        match m {
            Some(m) => {
                taken.push(String::from_utf8(m.delivery.data.clone()).expect("utf-8"));
                within(m.delivery.ack(BasicAckOptions::default()))
                    .await
                    .expect("ack on b");
            }
            None => {
                assert!(start.elapsed() < Duration::from_secs(30), "took {taken:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let want: Vec<String> = (1..10).map(|i| format!("m-{i}")).collect();
    assert_eq!(taken, want);
    within(taker.close(200, "done".into()))
        .await
        .expect("close-ok: the acks are committed");

    // a's consumer, attached while a is still cut off, gets none of them.
    let watch = channel(&a).await;
    let mut consumer = within(watch.basic_consume(
        "qd".into(),
        "watcher".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on a");
    let during = next_within(&mut consumer, Duration::from_secs(3)).await;
    assert_eq!(during, None, "a deposed leader handed out an acked message");
    cut.heal();
    for s in &specs {
        eventually_nodes(
            s.http,
            &all_up,
            &format!("{} sees the cluster again", s.name),
        )
        .await;
    }
    let after = next_within(&mut consumer, Duration::from_secs(3)).await;
    assert_eq!(after, None, "an acked message came back after the heal");

    // The consumer is attached all the same: what is published now reaches it, once.
    publish_confirmed(&b, "", "qd", "late", 1).await;
    let late = next_within(&mut consumer, Duration::from_secs(10)).await;
    assert_eq!(late, Some(("late-0".to_string(), false)));
    assert_eq!(
        next_within(&mut consumer, Duration::from_secs(1)).await,
        None
    );
}
