//! Crash safety: the real binary is killed with SIGKILL at a random moment while a publisher
//! with confirms and an acking consumer are busy; after a restart on the same data dir every
//! confirmed and not-acknowledged message must be there. `WARREN_CRASH_CYCLES` sets the number
//! of cycles (20 by default; use hundreds for a long run). A stream queue goes through the same:
//! every confirmed message is in its log after each kill, in publish order, at consecutive
//! offsets.

mod common;

use common::within;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rand::Rng;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Ledger {
    confirmed: BTreeSet<u64>,
    acked: BTreeSet<u64>,
    /// One past the highest id handed to the client: an unconfirmed publish may still have
    /// reached the log, so the next cycle's ids start above it.
    sent: u64,
}

async fn publisher(url: String, queue: &'static str, first: u64, ledger: Arc<Mutex<Ledger>>) {
    let Ok(c) = Connection::connect(&url, ConnectionProperties::default()).await else {
        return;
    };
    let Ok(ch) = c.create_channel().await else {
        return;
    };
    if ch.confirm_select(Default::default()).await.is_err() {
        return;
    }
    let mut id = first;
    loop {
        let mut window = Vec::new();
        for _ in 0..32 {
            ledger.lock().expect("ledger").sent = id + 1;
            let props = BasicProperties::default().with_delivery_mode(2);
            match ch
                .basic_publish(
                    "".into(),
                    queue.into(),
                    Default::default(),
                    &id.to_be_bytes(),
                    props,
                )
                .await
            {
                Ok(p) => window.push((id, p)),
                Err(_) => return,
            }
            id += 1;
        }
        for (id, p) in window {
            match p.await {
                Ok(c) if c.is_ack() => {
                    ledger.lock().expect("ledger").confirmed.insert(id);
                }
                _ => return,
            }
        }
    }
}

async fn consumer(url: String, ledger: Arc<Mutex<Ledger>>) {
    let Ok(c) = Connection::connect(&url, ConnectionProperties::default()).await else {
        return;
    };
    let Ok(ch) = c.create_channel().await else {
        return;
    };
    if ch.basic_qos(20, Default::default()).await.is_err() {
        return;
    }
    let Ok(mut cons) = ch
        .basic_consume(
            "crash".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
    else {
        return;
    };
    while let Some(Ok(d)) = cons.next().await {
        let Ok(bytes) = <[u8; 8]>::try_from(d.data.as_slice()) else {
            return;
        };
        let id = u64::from_be_bytes(bytes);
        if d.ack(Default::default()).await.is_err() {
            return;
        }
        ledger.lock().expect("ledger").acked.insert(id);
        // A slow consumer keeps a backlog in the queue.
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
}

/// Declares a durable queue.
async fn declare(url: &str, queue: &str, args: FieldTable) {
    let c = within(Connection::connect(url, ConnectionProperties::default()))
        .await
        .expect("connect");
    let ch = within(c.create_channel()).await.expect("channel");
    within(ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    ))
    .await
    .expect("declare");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirmed_messages_survive_sigkill() {
    let cycles: usize = std::env::var("WARREN_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().expect("dir");
    let mut next_id = 0u64;
    let mut total_confirmed = 0usize;
    let mut total_acked_back = 0usize;
    for cycle in 0..cycles {
        let mut run = common::spawn_binary(dir.path()).await;
        declare(&run.url, "crash", FieldTable::default()).await;
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let p = tokio::spawn(publisher(run.url.clone(), "crash", next_id, ledger.clone()));
        let c = tokio::spawn(consumer(run.url.clone(), ledger.clone()));
        let delay = rand::rng().random_range(50..400);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        run.child.start_kill().expect("SIGKILL");
        let _ = run.child.wait().await;
        // lapin does not always end a consumer stream when the socket dies; the ledger only
        // holds completed confirms and acks, so stopping the clients here loses nothing.
        tokio::time::sleep(Duration::from_millis(100)).await;
        p.abort();
        c.abort();
        let ledger = std::mem::take(&mut *ledger.lock().expect("ledger"));
        next_id = next_id.max(ledger.sent);

        let mut run = common::spawn_binary(dir.path()).await;
        let conn = within(Connection::connect(
            &run.url,
            ConnectionProperties::default(),
        ))
        .await
        .expect("reconnect");
        let ch = within(conn.create_channel()).await.expect("channel");
        let mut present = BTreeSet::new();
        while let Some(m) = within(ch.basic_get("crash".into(), BasicGetOptions { no_ack: true }))
            .await
            .expect("get")
        {
            let bytes = <[u8; 8]>::try_from(m.delivery.data.as_slice()).expect("8-byte id");
            present.insert(u64::from_be_bytes(bytes));
        }
        let missing: Vec<u64> = ledger
            .confirmed
            .difference(&ledger.acked)
            .filter(|id| !present.contains(id))
            .copied()
            .collect();
        assert!(
            missing.is_empty(),
            "cycle {cycle}: {} confirmed, unacked messages lost (first {:?})",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        let acked_back = ledger.acked.intersection(&present).count();
        total_confirmed += ledger.confirmed.len();
        total_acked_back += acked_back;
        drop(conn);
        run.child.start_kill().expect("kill");
        let _ = run.child.wait().await;
    }
    println!(
        "crash test: {cycles} SIGKILL cycles, {total_confirmed} confirmed messages, none lost; \
         {total_acked_back} acknowledged messages came back (at-least-once)"
    );
    assert!(total_confirmed > 0, "the publisher never got a confirm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirmed_stream_messages_survive_sigkill() {
    let cycles: usize = std::env::var("WARREN_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(5, |n: usize| n.div_ceil(4));
    let dir = tempfile::tempdir().expect("dir");
    let mut next_id = 0u64;
    let mut confirmed = BTreeSet::new();
    for _ in 0..cycles {
        let mut run = common::spawn_binary(dir.path()).await;
        let mut args = FieldTable::default();
        args.insert(
            "x-queue-type".into(),
            lapin::types::AMQPValue::LongString("stream".into()),
        );
        declare(&run.url, "crash-stream", args).await;
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let p = tokio::spawn(publisher(
            run.url.clone(),
            "crash-stream",
            next_id,
            ledger.clone(),
        ));
        let delay = rand::rng().random_range(100..500);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        run.child.start_kill().expect("SIGKILL");
        let _ = run.child.wait().await;
        p.abort();
        let ledger = std::mem::take(&mut *ledger.lock().expect("ledger"));
        next_id = next_id.max(ledger.sent);
        confirmed.extend(ledger.confirmed);
    }
    // Read the whole log back after the last kill.
    let mut run = common::spawn_binary(dir.path()).await;
    let conn = within(Connection::connect(
        &run.url,
        ConnectionProperties::default(),
    ))
    .await
    .expect("reconnect");
    let ch = within(conn.create_channel()).await.expect("channel");
    within(ch.basic_qos(1000, Default::default()))
        .await
        .expect("qos");
    let mut args = FieldTable::default();
    args.insert(
        "x-stream-offset".into(),
        lapin::types::AMQPValue::LongString("first".into()),
    );
    let mut cons =
        within(ch.basic_consume("crash-stream".into(), "".into(), Default::default(), args))
            .await
            .expect("consume");
    let mut read = Vec::new();
    let mut offsets = Vec::new();
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(500), cons.next()).await
    {
        let bytes = <[u8; 8]>::try_from(d.data.as_slice()).expect("8-byte id");
        read.push(u64::from_be_bytes(bytes));
        if let Some(lapin::types::AMQPValue::LongLongInt(o)) = d
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("x-stream-offset").cloned())
        {
            offsets.push(o);
        }
        within(d.ack(Default::default())).await.expect("ack");
    }
    assert!(!confirmed.is_empty(), "the publisher never got a confirm");
    let present: BTreeSet<u64> = read.iter().copied().collect();
    let missing: Vec<u64> = confirmed.difference(&present).copied().collect();
    assert!(
        missing.is_empty(),
        "{} confirmed messages lost from the stream (first {:?})",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let broken = read.windows(2).position(|w| w[0] >= w[1]);
    assert!(
        broken.is_none(),
        "publish order broken at position {broken:?}: {:?}",
        broken.map(|i| &read[i.saturating_sub(3)..(i + 4).min(read.len())])
    );
    let expected: Vec<i64> = (0..read.len() as i64).collect();
    assert_eq!(offsets, expected, "offsets are not consecutive from 0");
    println!(
        "stream crash test: {cycles} SIGKILL cycles, {} confirmed, none lost, {} in the log",
        confirmed.len(),
        read.len()
    );
    drop(conn);
    run.child.start_kill().expect("kill");
    let _ = run.child.wait().await;
}
