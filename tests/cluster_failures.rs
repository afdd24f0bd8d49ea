//! Queues across three real `warren` processes when a node goes: a node killed while its
//! consumer held messages gives them back (redelivered), and so does a basic.get result it
//! held unacked and what a consumer it had cancelled left unacked; consumers of a killed node's queues are cancelled, and
//! `node-is-quorum-critical` then fails on the survivors; forgetting the killed node deletes
//! the queues whose home it was, and `warren ctl -n` reaches the others (not it) with the
//! cluster secret from anywhere. A consumer's node restarted before anyone noticed gets back
//! what its earlier run held.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::http::request;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicQosOptions,
};
use lapin::types::FieldTable;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_gives_back_what_its_consumers_held_and_cancels_consumers_of_its_queues() {
    let (specs, mut children, seeds) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let on_a = channel(&a).await;
    within(on_a.queue_declare("work".into(), durable(), FieldTable::default()))
        .await
        .expect("declare on a");
    publish_confirmed(&c, "", "work", "w", 10).await;

    // b takes 5 (its prefetch) and never acks them, and gets one of "got" without acking
    // it; then b is killed.
    within(on_a.queue_declare("got".into(), durable(), FieldTable::default()))
        .await
        .expect("declare got on a");
    publish_confirmed(&a, "", "got", "g", 1).await;
    let getter = channel(&b).await;
    let got = within(getter.basic_get("got".into(), BasicGetOptions { no_ack: false }))
        .await
        .expect("get on b")
        .expect("a message");
    assert_eq!(got.delivery.data, b"g-0".to_vec());
    assert_eq!(passive(&a, "got").await, Ok(0), "held by b");
    let on_b = channel(&b).await;
    within(on_b.queue_declare("homed-on-b".into(), durable(), FieldTable::default()))
        .await
        .expect("declare on b");
    within(on_b.basic_qos(5, BasicQosOptions::default()))
        .await
        .expect("qos");
    let mut held = within(on_b.basic_consume(
        "work".into(),
        "b-reader".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on b");
    for i in 0..5 {
        let d = within(held.next()).await.expect("open").expect("delivery");
        assert_eq!(d.data, format!("w-{i}").into_bytes());
    }
    assert_eq!(passive(&a, "work").await, Ok(5), "5 ready, 5 held by b");
    // And b cancels a consumer that got 3 of "left": its channel still holds them unacked.
    within(on_a.queue_declare("left".into(), durable(), FieldTable::default()))
        .await
        .expect("declare left on a");
    publish_confirmed(&a, "", "left", "l", 3).await;
    let leaver = channel(&b).await;
    let mut left = within(leaver.basic_consume(
        "left".into(),
        "b-leaver".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume left on b");
    for i in 0..3 {
        let d = within(left.next()).await.expect("open").expect("delivery");
        assert_eq!(d.data, format!("l-{i}").into_bytes());
    }
    within(leaver.basic_cancel("b-leaver".into(), BasicCancelOptions::default()))
        .await
        .expect("cancel on b");
    assert_eq!(passive(&a, "left").await, Ok(0), "held by b's channel");
    let critical = "/api/health/checks/node-is-quorum-critical";
    let g = Some(("guest", "guest"));
    let r = request(specs[0].http, "GET", critical, g, None).await;
    assert_eq!((r.status, r.json()["status"].clone()), (200, "ok".into()));
    children[1].start_kill().expect("kill b");
    let _ = children[1].wait().await;
    eventually_count(&a, "work", 10, "what b held is back").await;
    eventually_count(&a, "got", 1, "what b got and held is back").await;
    eventually_count(&a, "left", 3, "what b's cancelled consumer left is back").await;
    // With b gone, a and c are each critical to the metadata group's majority.
    let r = request(specs[0].http, "GET", critical, g, None).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["queues"][0]["name"], "rabbitmq_metadata");

    // warren ctl on a: b shows as a disk node that is not running; a running node cannot be
    // forgotten; b can, and is then no member.
    let a_dir = specs[0].dir.path().join("data");
    let (rc, out, _) = common::warren_ctl(&a_dir, &["cluster_status", "--formatter", "json"]);
    assert_eq!(rc, 0);
    let cs: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(cs["disk_nodes"], serde_json::json!(NAMES));
    assert_eq!(cs["running_nodes"], serde_json::json!([NAMES[0], NAMES[2]]));
    let (rc, _, err) = common::warren_ctl(&a_dir, &["forget_cluster_node", NAMES[2]]);
    assert_eq!(rc, 70, "{err}");
    assert!(err.contains("failed_to_forget_online_node"), "{err}");
    let (rc, out, err) = common::warren_ctl(&a_dir, &["forget_cluster_node", NAMES[1]]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        out,
        format!("Removing node {} from the cluster\n", NAMES[1])
    );
    eventually_nodes(
        specs[0].http,
        &[(NAMES[0], true), (NAMES[2], true)],
        "b forgotten",
    )
    .await;
    // Forgetting b removed its queue from the cluster (RabbitMQ's forget_all): not "home
    // node down" but gone, and free to be declared again elsewhere.
    let gone = passive(&a, "homed-on-b").await;
    assert_eq!(gone.as_ref().map_err(|e| e.0), Err(Some(404)), "{gone:?}");
    let text = gone.err().map(|e| e.1).unwrap_or_default();
    assert!(text.contains("no queue 'homed-on-b'"), "{text}");
    let r = request(specs[2].http, "GET", "/api/queues/%2F/homed-on-b", g, None).await;
    assert_eq!(r.status, 404, "{}", r.body);

    // warren ctl -n: through a's configuration c answers for itself over the inter-node
    // port; b, gone, does not (69). A configuration of no running node but with the secret
    // and seed list reaches c and makes a user there that a then knows; a wrong secret
    // reaches nothing.
    let (rc, out, err) = common::warren_ctl_with(
        &specs[0].config,
        &["-n", NAMES[2], "status", "--formatter", "json"],
    );
    assert_eq!(rc, 0, "{err}");
    let status: serde_json::Value = serde_json::from_str(&out).expect("json");
    let c_data = specs[2].dir.path().join("data");
    assert_eq!(status["data_directory"], c_data.display().to_string());
    let (rc, _, err) = common::warren_ctl_with(&specs[0].config, &["-n", NAMES[1], "status"]);
    assert_eq!(rc, 69, "{err}");
    assert!(err.contains(NAMES[1]), "{err}");
    let visitor = tempfile::tempdir().expect("dir");
    let visit = |secret: &str| {
        let cfg = visitor.path().join(format!("{secret}.toml"));
        let seeds: Vec<String> = seeds.iter().map(|s| format!("{s:?}")).collect();
        let toml = format!(
            "node_name = \"warren-x@127.0.0.1\"\ndata_dir = {:?}\ncluster_secret = \"{secret}\"\n\
             cluster_nodes = [{}]\n",
            visitor.path().join("data"),
            seeds.join(", ")
        );
        std::fs::write(&cfg, toml).expect("config");
        cfg
    };
    let (rc, _, err) = common::warren_ctl_with(
        &visit("cookie"),
        &["-n", NAMES[2], "add_user", "made-remotely", "pw"],
    );
    assert_eq!(rc, 0, "{err}");
    let r = request(specs[0].http, "GET", "/api/users/made-remotely", g, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (rc, _, err) =
        common::warren_ctl_with(&visit("not-the-cookie"), &["-n", NAMES[2], "list_users"]);
    assert_eq!(rc, 69, "{err}");

    // All ten are read on c, the five b held marked redelivered.
    let on_c = channel(&c).await;
    let mut reader = within(on_c.basic_consume(
        "work".into(),
        "c-reader".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on c");
    let mut seen = Vec::new();
    for _ in 0..10 {
        let d = within(reader.next())
            .await
            .expect("open")
            .expect("delivery");
        let body = String::from_utf8_lossy(&d.data).into_owned();
        let i: u32 = body.trim_start_matches("w-").parse().expect("index");
        assert_eq!(d.redelivered, i < 5, "{body} redelivered flag");
        seen.push(i);
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<u32>>());

    // The queue's home killed: c's consumer is cancelled, as RabbitMQ's are.
    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    let end = tokio::time::timeout(Duration::from_secs(15), reader.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the consumer on c ends when its queue's node goes: {:?}",
        end.map(|d| d.map(|d| d.map(|d| d.data)))
    );
    drop(specs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_node_restarted_at_once_gets_back_what_its_earlier_run_held() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let on_a = channel(&a).await;
    within(on_a.queue_declare("jobs".into(), durable(), FieldTable::default()))
        .await
        .expect("declare on a");
    publish_confirmed(&a, "", "jobs", "j", 10).await;
    {
        let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
        let on_c = channel(&c).await;
        within(on_c.basic_qos(5, BasicQosOptions::default()))
            .await
            .expect("qos");
        let mut first = within(on_c.basic_consume(
            "jobs".into(),
            "first-run".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("consume on c");
        for _ in 0..5 {
            within(first.next()).await.expect("open").expect("delivery");
        }
        // c dies holding 5 and is back before a could notice it was gone.
        children[2].start_kill().expect("kill c");
        let _ = children[2].wait().await;
    }
    children[2] = spawn(&specs[2]);
    let start = Instant::now();
    let c = loop {
        if let Ok(Ok(c)) = tokio::time::timeout(STEP, amqp(specs[2].amqp, "%2F")).await {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "c never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let on_c = channel(&c).await;
    let mut again = within(on_c.basic_consume(
        "jobs".into(),
        "second-run".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on restarted c");
    let mut seen = Vec::new();
    for _ in 0..10 {
        let d = tokio::time::timeout(Duration::from_secs(15), again.next())
            .await
            .expect("all ten reach the new run's consumer")
            .expect("open")
            .expect("delivery");
        let body = String::from_utf8_lossy(&d.data).into_owned();
        seen.push(body.trim_start_matches("j-").parse::<u32>().expect("index"));
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<u32>>());
    drop(specs);
}
