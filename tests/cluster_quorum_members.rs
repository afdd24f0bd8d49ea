//! A quorum queue's membership changed while it holds confirmed messages (#18), through the
//! management API and `warren ctl` as `rabbitmq-queues` does it: a member added on a third
//! node catches up and votes; the leader's member removed hands the queue to another
//! member with every message; `shrink` and `grow` move members off and onto a node; the last
//! member cannot go; `quorum_status` shows each member's Raft state, and Prometheus each
//! node's members under RabbitMQ's `rabbitmq_raft_*` names.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::http::request;
use lapin::types::AMQPValue;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const G: Option<(&str, &str)> = Some(("guest", "guest"));

/// The queue `qm` as node `s` shows it: (leader, members sorted).
async fn shown(s: &Spec) -> (String, Vec<String>) {
    let r = request(s.http, "GET", "/api/queues/%2F/qm", G, None).await;
    let v = r.json();
    let mut members: Vec<String> = v["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    members.sort();
    (v["leader"].as_str().unwrap_or_default().to_owned(), members)
}

/// Waits until node `s` shows `qm` with these members (sorted) and a leader among them.
async fn eventually_members(s: &Spec, want: &[&str]) -> String {
    let start = Instant::now();
    loop {
        let (leader, members) = shown(s).await;
        if members == want && want.contains(&leader.as_str()) {
            return leader;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{} shows members {members:?} led by {leader}, not {want:?}",
            s.name
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `quorum_status` of `qm` through `warren ctl` on `s`, as JSON rows.
async fn status_rows(s: &Spec) -> Vec<Value> {
    let (rc, out, err) = ctl(s, &["quorum_status", "qm", "-q", "--formatter", "json"]).await;
    assert_eq!(rc, 0, "{out}{err}");
    let v: Value = serde_json::from_str(out.trim()).expect("json");
    v.as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queues_members_change_and_it_keeps_its_messages() {
    let (specs, mut children, _) = three().await;
    let [na, nb, nc] = NAMES;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let mut args = quorum();
    args.insert("x-quorum-initial-group-size".into(), AMQPValue::LongInt(2));
    within(
        channel(&a)
            .await
            .queue_declare("qm".into(), durable(), args),
    )
    .await
    .expect("declare on a");
    assert_eq!(eventually_members(&specs[2], &[na, nb]).await, na);
    publish_confirmed(&b, "", "qm", "m", 30).await;

    // A member on c, asked through b: it catches up and votes.
    let add = "/api/queues/quorum/%2F/qm/replicas/add";
    let r = request(
        specs[1].http,
        "POST",
        add,
        G,
        Some(&json!({ "node": nc }).to_string()),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    eventually_members(&specs[0], &[na, nb, nc]).await;
    // c hears of its membership and of the leader's commit on the leader's next append.
    let applied = |r: &Value| r["Last Applied"].as_u64().unwrap_or_default();
    let start = Instant::now();
    let rows = loop {
        let rows = status_rows(&specs[2]).await;
        let states: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r["Node Name"].as_str().unwrap_or_default(),
                    r["Raft State"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        // The messages went in a few entries; c has applied what the leader has.
        let caught_up = rows.len() == 3 && applied(&rows[2]) == applied(&rows[0]);
        if states == vec![(na, "leader"), (nb, "follower"), (nc, "follower")] && caught_up {
            break rows;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "c has not caught up as a follower: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Prometheus: each node's member, RabbitMQ's rabbitmq_raft_* names, per queue.
    let raft = |body: &str, name: &str| -> Option<f64> {
        let prefix = format!("{name}{{vhost=\"/\",queue=\"qm\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse().ok())
    };
    let on_c = request(specs[2].metrics, "GET", "/metrics/per-object", None, None).await;
    assert_eq!(
        on_c.body
            .matches("# TYPE rabbitmq_raft_term counter")
            .count(),
        1,
        "{}",
        on_c.body
    );
    assert_eq!(
        raft(&on_c.body, "rabbitmq_raft_term"),
        rows[2]["Term"].as_f64()
    );
    assert!(
        raft(&on_c.body, "rabbitmq_raft_last_applied") >= rows[2]["Last Applied"].as_f64(),
        "{}",
        on_c.body
    );
    let on_a = request(specs[0].metrics, "GET", "/metrics/per-object", None, None).await;
    let latency = raft(&on_a.body, "rabbitmq_raft_commit_latency_seconds");
    assert!(
        latency.is_some_and(|l| l > 0.0 && l < 5.0),
        "the leader's commit latency: {}",
        on_a.body
    );
    // The aggregated endpoint: the highest commit latency of the node's members (RabbitMQ
    // 4.2's family, labelled with its Ra system).
    let aggregated = request(specs[0].metrics, "GET", "/metrics", None, None).await;
    let max = aggregated.body.lines().find_map(|l| {
        l.strip_prefix("rabbitmq_raft_max_commit_latency_seconds{ra_system=\"quorum_queues\"} ")
            .and_then(|v| v.parse::<f64>().ok())
    });
    assert!(
        max.is_some_and(|m| latency.is_some_and(|l| m >= l)),
        "{}",
        aggregated.body
    );
    // Again: nothing to do. A node that is not in the cluster: refused.
    let r = request(
        specs[0].http,
        "POST",
        add,
        G,
        Some(&json!({ "node": nc }).to_string()),
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let nowhere = json!({ "node": "warren-x@127.0.0.1" }).to_string();
    let r = request(specs[0].http, "POST", add, G, Some(&nowhere)).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["reason"], "node_not_running", "{}", r.body);
    let r = request(
        specs[0].http,
        "POST",
        "/api/queues/quorum/%2F/nosuch/replicas/add",
        G,
        Some(&json!({ "node": nc }).to_string()),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // The leader's member goes (through ctl on b): b or c leads, with every message.
    let (rc, out, err) = ctl(&specs[1], &["delete_member", "qm", na]).await;
    assert_eq!(rc, 0, "{out}{err}");
    let leader = eventually_members(&specs[0], &[nb, nc]).await;
    assert_ne!(leader, na);
    let got = drain(&a, "qm").await;
    let want: Vec<(String, bool)> = (0..30).map(|i| (format!("m-{i}"), false)).collect();
    assert_eq!(got, want, "every confirmed message, in order, through a");
    let start = Instant::now();
    while status_rows(&specs[0]).await.len() != 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a's member is gone"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Shrink b: c alone; the last member cannot go.
    let shrink = format!("/api/queues/quorum/replicas/on/{nb}/shrink");
    let r = request(specs[0].http, "DELETE", &shrink, G, None).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(eventually_members(&specs[1], &[nc]).await, nc);
    let delete = "/api/queues/quorum/%2F/qm/replicas/delete";
    let r = request(
        specs[0].http,
        "DELETE",
        delete,
        G,
        Some(&json!({ "node": nc }).to_string()),
    )
    .await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (503, json!("last_node")),
        "{}",
        r.body
    );

    // Grow onto a (ctl, all queues matching): two members, publishes confirmed again.
    let (rc, out, err) = ctl(&specs[2], &["grow", na, "all", "--queue-pattern", "^qm$"]).await;
    assert_eq!(rc, 0, "{out}{err}");
    eventually_members(&specs[1], &[na, nc]).await;
    publish_confirmed(&b, "", "qm", "n", 3).await;
    assert_eq!(passive(&a, "qm").await, Ok(3));
    for mut child in children.drain(..) {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}
