//! `warren-perf`: a PerfTest-style load generator for any AMQP 0-9-1 broker. Producers and
//! consumers each own a connection; publishes are pipelined (pre-encoded frames, one write per
//! batch), confirms and acks are counted as they arrive, and end-to-end latency is measured
//! from a timestamp in the first 8 bytes of every body.

mod modes;

use amq_protocol::protocol::{basic, confirm, exchange, queue, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::{BufMut, BytesMut};
use clap::Parser;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;
use warren::amqp::codec::{self, Frame};
use warren::client::{AmqpUri as Uri, Client};

/// Load generator in the style of RabbitMQ PerfTest.
#[derive(Debug, Parser, Clone)]
#[command(name = "warren-perf", version)]
struct Args {
    /// Broker URI (queue setup and teardown; producers and consumers too unless given theirs).
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    uri: String,
    /// Broker URI of the producers (and of the RPC clients); `--uri` by default.
    #[arg(long)]
    producer_uri: Option<String>,
    /// Broker URI of the consumers; `--uri` by default.
    #[arg(long)]
    consumer_uri: Option<String>,
    /// Instead of streaming: declare this many durable queues over `--producers` connections
    /// and report the rate.
    #[arg(long, default_value_t = 0)]
    declare: usize,
    /// Instead of streaming: RPC calls from `--producers` clients, each with its own
    /// exclusive reply queue per call, to one responder on `--uri`.
    #[arg(long)]
    rpc: bool,
    /// Producer connections.
    #[arg(long, short = 'x', default_value_t = 1)]
    producers: usize,
    /// Consumer connections.
    #[arg(long, short = 'y', default_value_t = 1)]
    consumers: usize,
    /// Queues (`<prefix>-<n>`); producer i publishes to queue i mod n, consumer j reads j mod n.
    #[arg(long, default_value_t = 1)]
    queues: usize,
    /// Queue name prefix.
    #[arg(long, default_value = "perf")]
    queue_prefix: String,
    /// Message body size in bytes (at least 8, for the timestamp; from 16 on, bodies also carry
    /// the producer and its sequence number, and consumers count deliveries out of order).
    #[arg(long, short = 's', default_value_t = 16)]
    size: usize,
    /// Messages per second per producer (0 = unlimited).
    #[arg(long, short = 'r', default_value_t = 0)]
    rate: u64,
    /// Messages per second each consumer takes at most (0 = unlimited); a slower consumer
    /// simply stops reading its socket meanwhile.
    #[arg(long, short = 'R', default_value_t = 0)]
    consumer_rate: u64,
    /// Publisher confirms with this many unconfirmed messages at most (0 = no confirms).
    #[arg(long, short = 'c', default_value_t = 0)]
    confirm: u64,
    /// Persistent messages (delivery-mode 2) to durable queues.
    #[arg(long)]
    persistent: bool,
    /// The queues' `x-queue-type` (`quorum` needs `--persistent`, its queues being durable);
    /// the broker's default when not given.
    #[arg(long)]
    queue_type: Option<String>,
    /// Consumer prefetch (basic.qos).
    #[arg(long, short = 'q', default_value_t = 1000)]
    prefetch: u16,
    /// Where consumers of stream queues start (`x-stream-offset`: first, last, next or an
    /// offset); the broker's default (`next`) when not given.
    #[arg(long)]
    stream_offset: Option<String>,
    /// Consume without acknowledgements.
    #[arg(long, short = 'a')]
    autoack: bool,
    /// Acknowledge every N deliveries with one multiple ack.
    #[arg(long, default_value_t = 100)]
    multi_ack: u64,
    /// Publish through this exchange instead of the default one.
    #[arg(long, short = 'e', default_value = "")]
    exchange: String,
    /// Type of that exchange: direct, fanout or topic.
    #[arg(long, short = 't', default_value = "direct")]
    exchange_type: String,
    /// Seconds to run.
    #[arg(long, short = 'z', default_value_t = 10.0)]
    duration: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Only publish (no consumers); with --persistent this fills a backlog.
    #[arg(long)]
    publish_only: bool,
    /// Stop each producer after this many messages (0 = run for the duration).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Stop once consumers have received this many messages in total (0 = run for the duration).
    #[arg(long, default_value_t = 0)]
    consume_count: u64,
    /// Delete the queues (and the exchange) when done.
    #[arg(long)]
    delete_queues: bool,
}

#[derive(Default)]
struct Counters {
    published: AtomicU64,
    confirmed: AtomicU64,
    nacked: AtomicU64,
    consumed: AtomicU64,
    /// Deliveries that came before an earlier message of the same producer.
    out_of_order: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn queue_name(a: &Args, i: usize) -> String {
    format!("{}-{}", a.queue_prefix, i % a.queues.max(1))
}

/// The queues' declare arguments: `x-queue-type` when `--queue-type` is given.
fn queue_arguments(a: &Args) -> FieldTable {
    let mut args = FieldTable::default();
    if let Some(t) = &a.queue_type {
        args.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(t.as_str().into()),
        );
    }
    args
}

async fn setup(a: &Args, uri: &Uri) -> io::Result<()> {
    let mut c = Client::connect(uri).await?;
    if !a.exchange.is_empty() {
        c.call(
            1,
            AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
                exchange: a.exchange.as_str().into(),
                kind: a.exchange_type.as_str().into(),
                passive: false,
                durable: a.persistent,
                auto_delete: false,
                internal: false,
                nowait: false,
                arguments: FieldTable::default(),
            })),
        )
        .await?;
    }
    for i in 0..a.queues.max(1) {
        let name = queue_name(a, i);
        c.call(
            1,
            AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
                queue: name.as_str().into(),
                passive: false,
                durable: a.persistent,
                exclusive: false,
                auto_delete: false,
                nowait: false,
                arguments: queue_arguments(a),
            })),
        )
        .await?;
        if !a.exchange.is_empty() {
            c.call(
                1,
                AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
                    queue: name.as_str().into(),
                    exchange: a.exchange.as_str().into(),
                    routing_key: name.as_str().into(),
                    nowait: false,
                    arguments: FieldTable::default(),
                })),
            )
            .await?;
        }
    }
    Ok(())
}

async fn teardown(a: &Args, uri: &Uri) -> io::Result<()> {
    let mut c = Client::connect(uri).await?;
    for i in 0..a.queues.max(1) {
        c.call(
            1,
            AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
                queue: queue_name(a, i).as_str().into(),
                if_unused: false,
                if_empty: false,
                nowait: false,
            })),
        )
        .await?;
    }
    if !a.exchange.is_empty() {
        c.call(
            1,
            AMQPClass::Exchange(exchange::AMQPMethod::Delete(exchange::Delete {
                exchange: a.exchange.as_str().into(),
                if_unused: false,
                nowait: false,
            })),
        )
        .await?;
    }
    Ok(())
}

/// Pre-encoded publish method and content header for one producer.
fn publish_prefix(a: &Args, routing_key: &str, frame_max: u32) -> (BytesMut, u32) {
    let mut m = BytesMut::new();
    codec::encode_method(
        &mut m,
        1,
        &AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: a.exchange.as_str().into(),
            routing_key: routing_key.into(),
            mandatory: false,
            immediate: false,
        })),
    );
    let props: &[u8] = if a.persistent {
        &[0x10, 0x00, 2]
    } else {
        &[0x00, 0x00]
    };
    let mut header = BytesMut::new();
    codec::encode_content(&mut header, 1, props, &[], frame_max);
    // encode_content wrote a header for an empty body; patch in the real size.
    let size_at = 7 + 4;
    header[size_at..size_at + 8].copy_from_slice(&(a.size as u64).to_be_bytes());
    m.extend_from_slice(&header);
    (m, frame_max)
}

async fn producer(
    a: Args,
    uri: Arc<Uri>,
    idx: usize,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    let mut c = Client::connect(&uri).await?;
    if a.confirm > 0 {
        c.call(
            1,
            AMQPClass::Confirm(confirm::AMQPMethod::Select(confirm::Select {
                nowait: false,
            })),
        )
        .await?;
    }
    let rk = if a.exchange.is_empty() || a.exchange_type != "fanout" {
        queue_name(&a, idx)
    } else {
        String::new()
    };
    let (prefix, frame_max) = publish_prefix(&a, &rk, c.frame_max);
    let Client {
        mut rd,
        mut wr,
        mut rbuf,
        ..
    } = c;
    let confirmed = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Notify::new());
    // Reader: counts confirms (ack/nack, multiple or single) in publish order.
    let reader = {
        let (confirmed, progress, counters) =
            (confirmed.clone(), progress.clone(), counters.clone());
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            loop {
                loop {
                    match codec::decode(&mut rbuf, 0) {
                        Ok(Some(Frame::Method(_, m))) => {
                            let (tag, multiple, ok) = match *m {
                                AMQPClass::Basic(basic::AMQPMethod::Ack(x)) => {
                                    (x.delivery_tag, x.multiple, true)
                                }
                                AMQPClass::Basic(basic::AMQPMethod::Nack(x)) => {
                                    (x.delivery_tag, x.multiple, false)
                                }
                                _ => continue,
                            };
                            let before = confirmed.load(Ordering::Acquire);
                            let now = if multiple {
                                tag.max(before)
                            } else {
                                before + 1
                            };
                            let n = now.saturating_sub(before);
                            confirmed.store(now, Ordering::Release);
                            let counter = if ok {
                                &counters.confirmed
                            } else {
                                &counters.nacked
                            };
                            counter.fetch_add(n, Ordering::Relaxed);
                            progress.notify_one();
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => return,
                    }
                }
                match rd.read_buf(&mut rbuf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
    };
    let mut out = BytesMut::with_capacity(256 * 1024);
    let body_tail = vec![0u8; a.size.saturating_sub(8)];
    let mut published = 0u64;
    let started = Instant::now();
    let batch = if a.rate > 0 { 1 } else { 64 };
    while !stop.load(Ordering::Relaxed) && (a.count == 0 || published < a.count) {
        if a.confirm > 0 {
            loop {
                let notified = progress.notified();
                if published - confirmed.load(Ordering::Acquire) < a.confirm {
                    break;
                }
                if tokio::time::timeout(Duration::from_millis(100), notified)
                    .await
                    .is_err()
                    && stop.load(Ordering::Relaxed)
                {
                    break;
                }
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        if a.rate > 0 {
            let due = Duration::from_secs_f64(published as f64 / a.rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
        let room = if a.confirm > 0 {
            (a.confirm - (published - confirmed.load(Ordering::Acquire))).min(batch)
        } else {
            batch
        };
        let room = if a.count > 0 {
            room.min(a.count - published)
        } else {
            room
        };
        for i in 0..room {
            out.extend_from_slice(&prefix);
            let stamp = epoch().elapsed().as_nanos() as u64;
            let mut body = BytesMut::with_capacity(a.size.max(8));
            body.put_u64(stamp);
            if a.size >= 16 {
                // Producer and sequence, for the consumers' order check.
                body.put_u32(idx as u32);
                body.put_u32((published + i) as u32);
                body.extend_from_slice(&body_tail[8..]);
            } else {
                body.extend_from_slice(&body_tail);
            }
            let body = &body[..a.size.max(8).min(body.len())];
            let chunk = (frame_max as usize - 8).max(1);
            for part in body.chunks(chunk) {
                out.put_u8(codec::FRAME_BODY);
                out.put_u16(1);
                out.put_u32(part.len() as u32);
                out.extend_from_slice(part);
                out.put_u8(codec::FRAME_END);
            }
        }
        wr.write_all(&out).await?;
        out.clear();
        published += room;
        counters.published.fetch_add(room, Ordering::Relaxed);
    }
    if a.confirm > 0 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while confirmed.load(Ordering::Acquire) < published && Instant::now() < deadline {
            let _ = tokio::time::timeout(Duration::from_millis(100), progress.notified()).await;
        }
    }
    reader.abort();
    Ok(())
}

/// The consumers' basic.consume arguments (`x-stream-offset`).
fn consume_arguments(a: &Args) -> FieldTable {
    let mut t = FieldTable::default();
    if let Some(o) = &a.stream_offset {
        let v = match o.parse::<i64>() {
            Ok(n) => AMQPValue::LongLongInt(n),
            Err(_) => AMQPValue::LongString(o.as_str().into()),
        };
        t.insert("x-stream-offset".into(), v);
    }
    t
}

async fn consumer(
    a: Args,
    uri: Arc<Uri>,
    idx: usize,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<u32>> {
    let mut c = Client::connect(&uri).await?;
    c.call(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: a.prefetch,
            global: false,
        })),
    )
    .await?;
    c.call(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: queue_name(&a, idx).as_str().into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: a.autoack,
            exclusive: false,
            nowait: false,
            arguments: consume_arguments(&a),
        })),
    )
    .await?;
    let mut latencies = Vec::with_capacity(1 << 16);
    // Next expected sequence per producer (order check, bodies of 16 bytes or more).
    let mut expected: Vec<u32> = Vec::new();
    let mut redelivered = false;
    let mut last_tag = 0u64;
    let mut unacked = 0u64;
    let mut first_body = true;
    let mut out = BytesMut::new();
    let (started, mut received) = (Instant::now(), 0u64);
    while !stop.load(Ordering::Relaxed) {
        let frame = match tokio::time::timeout(Duration::from_millis(200), c.frame()).await {
            Ok(f) => f?,
            Err(_) => continue,
        };
        match frame {
            Frame::Method(_, m) => {
                if let AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) = *m {
                    last_tag = d.delivery_tag;
                    redelivered = d.redelivered;
                    first_body = true;
                }
            }
            Frame::Header(_, h) if h.body_size == 0 => {
                counters.consumed.fetch_add(1, Ordering::Relaxed);
            }
            Frame::Body(_, b) if first_body && b.len() >= 8 => {
                let sent = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
                let now = epoch().elapsed().as_nanos() as u64;
                if latencies.len() < 4_000_000 {
                    latencies.push((now.saturating_sub(sent) / 1000) as u32);
                }
                counters.consumed.fetch_add(1, Ordering::Relaxed);
                first_body = false;
                received += 1;
                if a.consumer_rate > 0 {
                    let due = Duration::from_secs_f64(received as f64 / a.consumer_rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
                if a.size >= 16 && b.len() >= 16 && !redelivered {
                    let producer = u32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
                    let seq = u32::from_be_bytes(b[12..16].try_into().unwrap_or_default());
                    let p = producer as usize;
                    if expected.len() <= p {
                        expected.resize(p + 1, 0);
                    }
                    if seq < expected[p] {
                        counters.out_of_order.fetch_add(1, Ordering::Relaxed);
                    }
                    expected[p] = expected[p].max(seq.wrapping_add(1));
                }
                if !a.autoack {
                    unacked += 1;
                    if unacked >= a.multi_ack.max(1) {
                        codec::encode_confirm(&mut out, 1, true, last_tag, true);
                        c.wr.write_all(&out).await?;
                        out.clear();
                        unacked = 0;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(latencies)
}

fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let a = Args::parse();
    if a.size < 8 {
        eprintln!("warren-perf: --size must be at least 8 (the timestamp)");
        return std::process::ExitCode::from(2);
    }
    let parse = |u: Option<&String>| Uri::parse(u.unwrap_or(&a.uri)).map(Arc::new);
    let (uri, producer_uri, consumer_uri) = match (
        parse(None),
        parse(a.producer_uri.as_ref()),
        parse(a.consumer_uri.as_ref()),
    ) {
        (Ok(u), Ok(p), Ok(c)) => (u, p, c),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
            eprintln!("warren-perf: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    epoch();
    if a.declare > 0 || a.rpc {
        let done = if a.rpc {
            modes::rpc(&a, uri, producer_uri).await
        } else {
            modes::declare(&a, uri, a.declare).await
        };
        return match done {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("warren-perf: {e}");
                std::process::ExitCode::from(1)
            }
        };
    }
    if let Err(e) = setup(&a, &uri).await {
        eprintln!("warren-perf: setup failed: {e}");
        return std::process::ExitCode::from(1);
    }
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = if a.publish_only {
        Vec::new()
    } else {
        (0..a.consumers)
            .map(|i| {
                tokio::spawn(consumer(
                    a.clone(),
                    consumer_uri.clone(),
                    i,
                    counters.clone(),
                    stop.clone(),
                ))
            })
            .collect()
    };
    let cpu_start = cpu_seconds();
    let started = Instant::now();
    let producers: Vec<_> = (0..a.producers)
        .map(|i| {
            tokio::spawn(producer(
                a.clone(),
                producer_uri.clone(),
                i,
                counters.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let duration = Duration::from_secs_f64(a.duration);
    let mut last = (0u64, 0u64, Instant::now());
    let done = |counters: &Counters| {
        (a.count > 0 && a.consume_count == 0 && producers.iter().all(|p| p.is_finished()))
            || (a.consume_count > 0 && counters.consumed.load(Ordering::Relaxed) >= a.consume_count)
    };
    while started.elapsed() < duration && !done(&counters) {
        tokio::time::sleep(
            Duration::from_millis(if a.consume_count > 0 { 5 } else { 250 }).min(duration),
        )
        .await;
        if !a.json && last.2.elapsed() >= Duration::from_secs(1) {
            let (p, c) = (
                counters.published.load(Ordering::Relaxed),
                counters.consumed.load(Ordering::Relaxed),
            );
            let dt = last.2.elapsed().as_secs_f64();
            eprintln!(
                "time {:>5.1}s  sent {:>9.0} msg/s  received {:>9.0} msg/s",
                started.elapsed().as_secs_f64(),
                (p - last.0) as f64 / dt,
                (c - last.1) as f64 / dt
            );
            last = (p, c, Instant::now());
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let published = counters.published.load(Ordering::Relaxed);
    let consumed = counters.consumed.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let mut failed = false;
    for p in producers {
        if let Ok(Err(e)) = p.await {
            eprintln!("warren-perf: producer: {e}");
            failed = true;
        }
    }
    let confirmed = counters.confirmed.load(Ordering::Relaxed);
    let nacked = counters.nacked.load(Ordering::Relaxed);
    let out_of_order = counters.out_of_order.load(Ordering::Relaxed);
    let mut lat = Vec::new();
    for c in consumers {
        match c.await {
            Ok(Ok(l)) => lat.extend(l),
            Ok(Err(e)) => {
                eprintln!("warren-perf: consumer: {e}");
                failed = true;
            }
            Err(_) => failed = true,
        }
    }
    lat.sort_unstable();
    let cpu = cpu_seconds() - cpu_start;
    if a.delete_queues {
        if let Err(e) = teardown(&a, &uri).await {
            eprintln!("warren-perf: deleting the queues failed: {e}");
            failed = true;
        }
    }
    let (p50, p95, p99, max) = (
        percentile(&lat, 0.50),
        percentile(&lat, 0.95),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0),
    );
    if a.json {
        println!(
            "{{\"duration_s\":{elapsed:.3},\"published\":{published},\"confirmed\":{confirmed},\"nacked\":{nacked},\"consumed\":{consumed},\
             \"out_of_order\":{out_of_order},\"publish_rate\":{:.1},\"confirm_rate\":{:.1},\"consume_rate\":{:.1},\
             \"latency_us\":{{\"p50\":{p50},\"p95\":{p95},\"p99\":{p99},\"max\":{max}}},\"tool_cpu_s\":{cpu:.3}}}",
            published as f64 / elapsed,
            confirmed as f64 / elapsed,
            consumed as f64 / elapsed
        );
    } else {
        println!(
            "published {published} ({:.0} msg/s), confirmed {confirmed} ({:.0} msg/s), nacked {nacked}, consumed {consumed} ({:.0} msg/s), out of order {out_of_order}",
            published as f64 / elapsed,
            confirmed as f64 / elapsed,
            consumed as f64 / elapsed
        );
        println!("latency µs: p50 {p50}  p95 {p95}  p99 {p99}  max {max};  tool CPU {cpu:.2} s in {elapsed:.2} s");
    }
    if failed {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    }
}
