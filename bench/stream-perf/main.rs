//! Load for `bench/stream_protocol`: one producer and one consumer on one stream over
//! RabbitMQ's stream protocol, through the official Rust client (so both brokers are driven by
//! the same client code). The consumer starts at `next` before the producer; the producer keeps
//! at most `--window` messages unconfirmed and stops after `--duration` seconds. Prints one
//! JSON line: messages published, confirmed and consumed, and the rates over the run.
//!
//! Usage: stream-perf --port P [--stream S] [--size B] [--duration S] [--window N]

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::Environment;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

struct Args {
    port: u16,
    stream: String,
    size: usize,
    duration: f64,
    window: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        port: 5552,
        stream: "perf".into(),
        size: 16,
        duration: 10.0,
        window: 10_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {v}");
        match flag.as_str() {
            "--port" => a.port = v.parse().map_err(|_| bad())?,
            "--stream" => a.stream = v.clone(),
            "--size" => a.size = v.parse().map_err(|_| bad())?,
            "--duration" => a.duration = v.parse().map_err(|_| bad())?,
            "--window" => a.window = v.parse().map_err(|_| bad())?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let env = Environment::builder()
        .host("localhost")
        .port(a.port)
        .build()
        .await?;
    let _ = env.delete_stream(&a.stream).await;
    env.stream_creator().create(&a.stream).await?;
    let consumed = Arc::new(AtomicU64::new(0));
    let mut consumer = env
        .consumer()
        .offset(OffsetSpecification::Next)
        .build(&a.stream)
        .await?;
    let counter = consumed.clone();
    let reader = tokio::spawn(async move {
        while let Some(Ok(_)) = consumer.next().await {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    let producer = env.producer().build(&a.stream).await?;
    let window = Arc::new(Semaphore::new(a.window));
    let confirmed = Arc::new(AtomicU64::new(0));
    let body = vec![b'x'; a.size];
    let start = Instant::now();
    let run = Duration::from_secs_f64(a.duration);
    let mut published = 0u64;
    while start.elapsed() < run {
        let permit = window.clone().acquire_owned().await?;
        let done = confirmed.clone();
        producer
            .send(Message::builder().body(body.clone()).build(), move |r| {
                let ok = r.map(|c| c.confirmed()).unwrap_or(false);
                drop(permit);
                if ok {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                async {}
            })
            .await?;
        published += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let confirmed_n = confirmed.load(Ordering::Relaxed);
    // Let the consumer catch up with what was confirmed (at most 30 s).
    let wait = Instant::now();
    while consumed.load(Ordering::Relaxed) < confirmed_n && wait.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let consumed_n = consumed.load(Ordering::Relaxed);
    let total = start.elapsed().as_secs_f64();
    println!(
        "{{\"published\": {published}, \"confirmed\": {confirmed_n}, \"consumed\": {consumed_n}, \
         \"publish_rate\": {:.1}, \"consume_rate\": {:.1}, \"seconds\": {elapsed:.3}}}",
        confirmed_n as f64 / elapsed,
        consumed_n as f64 / total,
    );
    reader.abort();
    let _ = producer.close().await;
    let _ = env.delete_stream(&a.stream).await;
    Ok(())
}
