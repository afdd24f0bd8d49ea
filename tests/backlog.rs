//! Backlogs beyond the queues' in-memory window: paged out to disk, resident memory bounded,
//! drained in order; purge, TTL and restarts with paged messages.

mod common;

use common::*;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Resident memory of this process (broker and test), bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Runs warren-perf (a separate process, so its memory is not ours) and returns its JSON.
fn perf(url: &str, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warren-perf"))
        .args(["--uri", url, "--json", "-z", "600", "-s", "16"])
        .args(args)
        .output()
        .expect("run warren-perf");
    assert!(
        out.status.success(),
        "warren-perf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json summary")
}

async fn queue_json(b: &TestBroker, name: &str) -> serde_json::Value {
    let path = format!("/api/queues/%2f/{name}");
    let r = http::request(
        b.server.http_addr,
        "GET",
        &path,
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn millions_of_messages_stay_within_the_memory_bound_and_drain_in_order() {
    const N: u64 = 3_000_000;
    let b = start().await;
    let url = b.url();
    // Warm up the allocator and the connection paths, then take the baseline.
    perf(
        &url,
        &[
            "-x",
            "1",
            "-y",
            "1",
            "--count",
            "20000",
            "--consume-count",
            "20000",
        ],
    );
    let base = rss();
    let peak = Arc::new(AtomicU64::new(base));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                peak.fetch_max(rss(), Ordering::AcqRel);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let u = url.clone();
    let published = tokio::task::spawn_blocking(move || {
        perf(
            &u,
            &["--publish-only", "-x", "1", "--count", &N.to_string()],
        )
    })
    .await
    .expect("join");
    assert_eq!(published["published"], N);
    // The tool is done writing; the broker may still be reading its socket.
    let mut q = queue_json(&b, "perf-0").await;
    for _ in 0..600 {
        if q["messages_ready"] == N {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        q = queue_json(&b, "perf-0").await;
    }
    assert_eq!(q["messages_ready"], N);
    let paged = q["messages_paged_out"].as_u64().expect("paged count");
    assert!(paged >= N - 10_000, "only {paged} of {N} paged out");
    let u = url.clone();
    let drained = tokio::task::spawn_blocking(move || {
        perf(
            &u,
            &["-x", "0", "-y", "1", "--consume-count", &N.to_string()],
        )
    })
    .await
    .expect("join");
    done.store(true, Ordering::Release);
    sampler.join().expect("sampler");
    assert_eq!(drained["consumed"], N, "every message came back");
    assert_eq!(drained["out_of_order"], 0, "in publish order");
    let q = queue_json(&b, "perf-0").await;
    assert_eq!(q["messages"], 0);
    assert_eq!(q["messages_paged_out"], 0);
    let grew = peak.load(Ordering::Acquire).saturating_sub(base);
    eprintln!(
        "{N} queued messages: resident memory {} MiB at the start, peak +{} MiB",
        base >> 20,
        grew >> 20
    );
    assert!(
        grew <= 64 << 20,
        "resident memory grew by {} MiB over {} MiB with {N} messages queued",
        grew >> 20,
        base >> 20
    );
    let left = std::fs::read_dir(b.dir.path().join("paging")).map_or(0, |d| d.count());
    assert_eq!(left, 0, "drained page files are deleted");
}

/// A broker whose queues keep only 50 messages in memory.
async fn small_window() -> TestBroker {
    start_with(|c| c.queue_window_messages = 50).await
}

async fn publish(ch: &lapin::Channel, queue: &str, n: u32, props: BasicProperties) {
    for i in 0..n {
        within(ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &i.to_be_bytes(),
            props.clone(),
        ))
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
}

async fn declare(ch: &lapin::Channel, name: &str, durable: bool, args: FieldTable) {
    within(ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable,
            ..Default::default()
        },
        args,
    ))
    .await
    .expect("declare");
}

/// Bodies (as numbers) of every message in the queue, taken with basic.get.
async fn drain(ch: &lapin::Channel, queue: &str) -> Vec<u32> {
    let mut got = Vec::new();
    while let Some(m) = within(ch.basic_get(
        queue.into(),
        lapin::options::BasicGetOptions { no_ack: true },
    ))
    .await
    .expect("get")
    {
        let body: [u8; 4] = m.delivery.data[..4].try_into().expect("4 bytes");
        got.push(u32::from_be_bytes(body));
    }
    got
}

#[tokio::test]
async fn persistent_paged_messages_survive_a_restart_and_purge_removes_them_for_good() {
    let b = small_window().await;
    let (c, ch) = b.channel().await;
    declare(&ch, "kept", true, FieldTable::default()).await;
    declare(&ch, "purged", true, FieldTable::default()).await;
    let persistent = BasicProperties::default().with_delivery_mode(2);
    publish(&ch, "kept", 300, persistent.clone()).await;
    publish(&ch, "purged", 300, persistent).await;
    let q = queue_json(&b, "kept").await;
    assert_eq!(q["messages_ready"], 300);
    assert!(q["messages_paged_out"].as_u64() >= Some(200), "{q}");
    assert!(q["messages_ram"].as_u64() <= Some(50), "{q}");
    let purged = within(ch.queue_purge("purged".into(), Default::default()))
        .await
        .expect("purge");
    assert_eq!(purged, 300);
    drop(c);
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    assert_eq!(drain(&ch, "kept").await, (0..300).collect::<Vec<_>>());
    assert_eq!(
        ready(&ch, "purged").await,
        0,
        "purged paged messages stay gone"
    );
}

#[tokio::test]
async fn paged_messages_expire_and_count_against_max_length() {
    let b = small_window().await;
    let (_c, ch) = b.channel().await;
    let mut ttl = FieldTable::default();
    ttl.insert("x-message-ttl".into(), AMQPValue::LongInt(200));
    declare(&ch, "ttl", false, ttl).await;
    let mut max = FieldTable::default();
    max.insert("x-max-length".into(), AMQPValue::LongInt(120));
    declare(&ch, "capped", false, max).await;
    publish(&ch, "ttl", 200, BasicProperties::default()).await;
    publish(&ch, "capped", 300, BasicProperties::default()).await;
    assert_eq!(ready(&ch, "capped").await, 120);
    assert_eq!(drain(&ch, "capped").await, (180..300).collect::<Vec<_>>());
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(drain(&ch, "ttl").await, Vec::<u32>::new(), "all expired");
    // And a consumer gets a paged backlog in order, requeues included.
    publish(&ch, "capped", 100, BasicProperties::default()).await;
    let mut consumer = within(ch.basic_consume(
        "capped".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let mut got = Vec::new();
    while got.len() < 100 {
        use futures_lite::StreamExt;
        let d = within(consumer.next())
            .await
            .expect("delivery")
            .expect("ok");
        got.push(u32::from_be_bytes(d.data[..4].try_into().expect("4 bytes")));
    }
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}
