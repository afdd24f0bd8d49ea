//! A real network partition between real `warren` processes: each node's inter-node listener
//! (and the connections it opens) is on its own loopback address, and iptables drops every
//! TCP packet from and to one of them (needs root; `tests/tools/install-iptables` installs
//! iptables). The node cut off refuses metadata writes after its bounded wait, with a clear
//! error, while it keeps serving publishes, confirms and gets on the queue it hosts; the
//! other two keep writing; once the cut heals, the node catches up and writes again. A
//! partial cut (two nodes that cannot reach each other, both reaching the third) shows in
//! `/api/nodes` as each one's `partitions`.

mod common;

use common::cluster::*;
use common::http::request;
use common::partition::{prepare, specs_apart, Cut};
use lapin::options::{BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ExchangeKind};
use serde_json::Value;
use std::time::{Duration, Instant};

const STEP: Duration = Duration::from_secs(10);

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, f).await.expect("step timed out")
}

const APART: [(&str, &str); 3] = [
    ("warren-a@127.0.0.2", "127.0.0.2"),
    ("warren-b@127.0.0.3", "127.0.0.3"),
    ("warren-c@127.0.0.4", "127.0.0.4"),
];

async fn exchange(c: &Connection, name: &str, passive: bool) -> lapin::Result<()> {
    let ch = c.create_channel().await?;
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            passive,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_refuses_metadata_writes_serves_its_queues_and_catches_up_when_healed() {
    prepare();

    let specs = specs_apart(&APART);
    let _children: Vec<_> = specs.iter().map(spawn).collect();
    let all_up: Vec<(&str, bool)> = APART.iter().map(|(n, _)| (*n, true)).collect();
    for s in &specs {
        eventually_nodes(s.http, &all_up, &format!("{} sees the cluster", s.name)).await;
    }
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let ch = within(a.create_channel()).await.expect("channel");
    within(ch.queue_declare(
        "on-a".into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("queue on a");

    let mut cut = Cut::off(APART[0].1);

    // a refuses a metadata write after its bounded wait, with a clear error.
    let started = Instant::now();
    let refused = tokio::time::timeout(Duration::from_secs(30), exchange(&a, "while-cut-a", false))
        .await
        .expect("a answers within its bounded wait");
    let e = refused.expect_err("a metadata write on the cut-off node");
    assert_eq!(reply_code(&e), Some(541), "{e}");
    assert!(e.to_string().contains("majority"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );

    // ... while it serves its own queue: publish with confirms, then get.
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a again");
    let ch = within(a.create_channel()).await.expect("channel");
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let confirm = within(ch.basic_publish(
        "".into(),
        "on-a".into(),
        BasicPublishOptions::default(),
        b"kept serving",
        BasicProperties::default().with_delivery_mode(2),
    ))
    .await
    .expect("publish on a");
    assert!(within(confirm).await.expect("confirm").is_ack());
    let got = within(ch.basic_get("on-a".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get on a")
        .expect("the message");
    assert_eq!(got.delivery.data, b"kept serving".to_vec());

    // The majority side keeps writing.
    tokio::time::timeout(Duration::from_secs(20), exchange(&b, "while-cut-b", false))
        .await
        .expect("b answers")
        .expect("b and c still have a majority");

    // Healed: a sees what was made meanwhile and writes again.
    cut.heal();
    let start = Instant::now();
    loop {
        let a = within(amqp(specs[0].amqp, "%2F"))
            .await
            .expect("a after heal");
        let seen = exchange(&a, "while-cut-b", true).await.is_ok();
        let wrote = seen && exchange(&a, "after-heal", false).await.is_ok();
        if wrote {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "a never caught up after the partition healed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    within(exchange(&c, "after-heal", true))
        .await
        .expect("what a wrote after healing is on c");

    // A partial partition: a and b cannot reach each other, c reaches both. c's /api/nodes
    // shows a and b each partitioned from the other, all three running.
    let mut partial = Cut::between(APART[0].1, APART[1].1);
    let start = Instant::now();
    loop {
        let r = request(
            specs[2].http,
            "GET",
            "/api/nodes",
            Some(("guest", "guest")),
            None,
        )
        .await;
        let seen: Vec<(String, Value)> = r
            .json()
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|n| {
                        (
                            n["name"].as_str().unwrap_or_default().to_owned(),
                            n["partitions"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let want = vec![
            (APART[0].0.to_owned(), serde_json::json!([APART[1].0])),
            (APART[1].0.to_owned(), serde_json::json!([APART[0].0])),
            (APART[2].0.to_owned(), serde_json::json!([])),
        ];
        if seen == want {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "partitions never showed: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    partial.heal();
    drop(specs);
}
