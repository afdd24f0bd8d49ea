//! Exclusive queues reached from other nodes, on three real `warren` processes: RPC calls
//! from a client on one node, each with its own server-named, auto-delete reply queue,
//! are answered by a responder on a second node and then on the third, and every reply queue
//! is gone from the other nodes afterwards; an exclusive queue bound to a fanout exchange
//! and to `amq.topic` gets what is published on another node, and stops getting what its
//! unbind removed; another node's client cannot consume from it (405). A node paused (SIGSTOP)
//! while an exclusive queue was declared and bound elsewhere learns it once resumed, and
//! drops it once that queue's node is killed.

mod common;

use common::cluster::*;
use common::http::request;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, Consumer, ExchangeKind};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const STEP: Duration = Duration::from_secs(10);

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, f).await.expect("step timed out")
}

async fn channel(c: &Connection) -> Channel {
    within(c.create_channel()).await.expect("channel")
}

fn exclusive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..Default::default()
    }
}

async fn publish(ch: &Channel, exchange: &str, key: &str, body: &str, props: BasicProperties) {
    within(ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        props,
    ))
    .await
    .expect("publish");
}

async fn consume(ch: &Channel, queue: &str, tag: &str, no_ack: bool) -> lapin::Result<Consumer> {
    let opts = BasicConsumeOptions {
        no_ack,
        ..Default::default()
    };
    within(ch.basic_consume(queue.into(), tag.into(), opts, FieldTable::default())).await
}

/// The body of `consumer`'s next delivery.
async fn next_body(consumer: &mut Consumer) -> String {
    let d = within(consumer.next())
        .await
        .expect("consumer open")
        .expect("delivery");
    String::from_utf8_lossy(&d.data).into_owned()
}

/// A responder on `c`: answers each message of `requests` with "re: <body>" to its reply-to
/// queue, then acks it. Closing the returned channel stops it.
async fn responder(c: &Connection) -> Channel {
    let ch = channel(c).await;
    let mut requests = consume(&ch, "requests", "responder", false)
        .await
        .expect("responder consumes");
    let replies = ch.clone();
    tokio::spawn(async move {
        while let Some(Ok(d)) = requests.next().await {
            let to = d.properties.reply_to().clone().unwrap_or_default();
            let body = format!("re: {}", String::from_utf8_lossy(&d.data));
            let sent = replies
                .basic_publish(
                    "".into(),
                    to,
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default(),
                )
                .await;
            if sent.is_err() || d.ack(BasicAckOptions::default()).await.is_err() {
                return;
            }
        }
    });
    ch
}

/// One RPC call from `client`: a fresh exclusive, auto-delete, server-named reply queue, the
/// request published to `requests` with it as reply-to, the answer read from it, and the
/// consumer cancelled (which deletes the queue).
async fn call(client: &Connection, request: &str) -> String {
    let ch = channel(client).await;
    let reply = within(ch.queue_declare("".into(), exclusive(), FieldTable::default()))
        .await
        .expect("reply queue");
    let name = reply.name().to_string();
    let mut answers = consume(&ch, &name, "answers", true)
        .await
        .expect("consume replies");
    let props = BasicProperties::default().with_reply_to(name.as_str().into());
    publish(&ch, "", "requests", request, props).await;
    let answer = next_body(&mut answers).await;
    within(ch.basic_cancel("answers".into(), BasicCancelOptions::default()))
        .await
        .expect("cancel");
    within(ch.close(200, "done".into())).await.expect("close");
    answer
}

/// Waits (up to `limit`) until the node serving HTTP at `http` lists a binding of `queue` to
/// `exchange`.
async fn eventually_bound(http: SocketAddr, exchange: &str, queue: &str, limit: Duration) {
    let path = format!("/api/bindings/%2F/e/{exchange}/q/{queue}");
    let start = Instant::now();
    loop {
        let r = request(http, "GET", &path, Some(("guest", "guest")), None).await;
        if r.status == 200 && r.json().as_array().is_some_and(|l| !l.is_empty()) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{queue} bound to {exchange}: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The names of the queues `GET /api/queues` lists on the node serving HTTP at `http`.
async fn listed(http: SocketAddr) -> Vec<String> {
    let r = request(http, "GET", "/api/queues", Some(("guest", "guest")), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|q| q["name"].as_str().map(str::to_owned))
        .collect()
}

fn signal(child: &tokio::process::Child, sig: &str) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_replies_and_bindings_reach_exclusive_queues_on_other_nodes() {
    let (specs, mut children, _) = three().await;
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let on_b = channel(&b).await;
    within(on_b.queue_declare("requests".into(), Default::default(), FieldTable::default()))
        .await
        .expect("requests on b");

    // RPC: the client on a, the responder on b and then on c; each reply crosses nodes to
    // an exclusive queue of a's. The client first checks that the requests queue is there,
    // as a node may apply a declare made elsewhere a moment after its declare-ok.
    let on_a = channel(&a).await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    within(on_a.queue_declare("requests".into(), passive, FieldTable::default()))
        .await
        .expect("requests seen on a");
    within(on_a.queue_declare("kept".into(), Default::default(), FieldTable::default()))
        .await
        .expect("kept on a");
    let serving = responder(&b).await;
    for i in 0..10 {
        assert_eq!(call(&a, &format!("q{i}")).await, format!("re: q{i}"));
    }
    within(serving.close(200, "moved".into()))
        .await
        .expect("close responder on b");
    let serving = responder(&c).await;
    for i in 10..20 {
        assert_eq!(call(&a, &format!("q{i}")).await, format!("re: q{i}"));
    }
    within(serving.close(200, "done".into()))
        .await
        .expect("close responder on c");
    let start = Instant::now();
    loop {
        let left: Vec<String> = listed(specs[2].http)
            .await
            .into_iter()
            .filter(|n| n.starts_with("amq.gen-"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "reply queues deleted on a stay listed on c: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Pub/sub: a's exclusive queue bound to a fanout exchange declared on c and to
    // amq.topic gets what is published on c.
    let on_c = channel(&c).await;
    within(on_c.exchange_declare(
        "news".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("news on c");
    let sub = within(on_a.queue_declare("".into(), exclusive(), FieldTable::default()))
        .await
        .expect("sub on a")
        .name()
        .to_string();
    for (exchange, key) in [("news", ""), ("amq.topic", "a.#")] {
        within(on_a.queue_bind(
            sub.as_str().into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind sub");
    }
    let mut news = consume(&on_a, &sub, "news", true).await.expect("consume");
    publish(&on_c, "news", "", "n1", BasicProperties::default()).await;
    assert_eq!(next_body(&mut news).await, "n1");
    publish(&on_c, "amq.topic", "a.x", "t1", BasicProperties::default()).await;
    assert_eq!(next_body(&mut news).await, "t1");
    within(on_a.queue_unbind(
        sub.as_str().into(),
        "amq.topic".into(),
        "a.#".into(),
        FieldTable::default(),
    ))
    .await
    .expect("unbind");
    publish(&on_c, "amq.topic", "a.x", "t2", BasicProperties::default()).await;
    publish(&on_c, "news", "", "n2", BasicProperties::default()).await;
    assert_eq!(
        next_body(&mut news).await,
        "n2",
        "t2 was not routed after the unbind"
    );

    // Another node's client cannot consume from it.
    let refused = consume(&channel(&b).await, &sub, "thief", true)
        .await
        .expect_err("consume on b refused");
    assert_eq!(reply_code(&refused), Some(405), "{refused}");

    // With c paused (SIGSTOP), a declare and a bind of an exclusive queue on a still
    // complete (each waits at most a second for c).
    signal(&children[2], "-STOP");
    let started = Instant::now();
    let late = within(on_a.queue_declare("late".into(), exclusive(), FieldTable::default())).await;
    let bound = within(on_a.queue_bind(
        "late".into(),
        "news".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await;
    let took = started.elapsed();
    signal(&children[2], "-CONT");
    late.expect("late declared with c paused");
    bound.expect("late bound with c paused");
    assert!(
        took < Duration::from_secs(3),
        "declare and bind took {took:?}"
    );

    // c restarted knows nothing of a's exclusive queues until the digest mends it: then
    // what is published on c reaches "late" on a.
    children[2].start_kill().expect("kill c");
    let _ = children[2].wait().await;
    children[2] = spawn(&specs[2]);
    let c = within(async {
        loop {
            if let Ok(c) = amqp(specs[2].amqp, "%2F").await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let mut late = consume(&on_a, "late", "late", true).await.expect("consume");
    let mend = Duration::from_secs(20);
    eventually_bound(specs[2].http, "news", "late", mend).await;
    let on_c = channel(&c).await;
    publish(&on_c, "news", "", "n3", BasicProperties::default()).await;
    assert_eq!(next_body(&mut late).await, "n3", "routed on c to a's late");

    // a killed: c drops its handles on a's exclusive queues (a replicated queue of a's stays
    // listed, as RabbitMQ lists a down node's).
    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    let start = Instant::now();
    loop {
        let names = listed(specs[2].http).await;
        assert!(names.contains(&"kept".to_owned()), "{names:?}");
        if !names.contains(&"late".to_owned()) && !names.contains(&sub) {
            break;
        }
        assert!(
            start.elapsed() < mend,
            "c keeps a's exclusive queues: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(specs);
}
