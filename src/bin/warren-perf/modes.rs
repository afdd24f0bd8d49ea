//! The load tool's two non-streaming scenarios, each printing one JSON line:
//! `--declare N` (durable queue declarations spread over `--producers` connections, each
//! waiting for its declare-ok before the next, as a deploy script or a framework's startup
//! does) and `--rpc` (RabbitMQ's RPC pattern with a reply queue per call: declare an
//! exclusive server-named queue, consume from it, publish the request with `reply_to`, read
//! the reply, delete the queue; one responder answers every request).

use super::{percentile, Args, Client, Uri};
use amq_protocol::protocol::{basic, queue, AMQPClass};
use amq_protocol::types::FieldTable;
use bytes::BytesMut;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use warren::amqp::codec::{self, Frame};

fn declare_method(name: &str, durable: bool, exclusive: bool) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: name.into(),
        passive: false,
        durable,
        exclusive,
        auto_delete: exclusive,
        nowait: false,
        arguments: FieldTable::default(),
    }))
}

fn delete_method(name: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
        queue: name.into(),
        if_unused: false,
        if_empty: false,
        nowait: false,
    }))
}

fn consume_method(name: &str) -> AMQPClass {
    AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
        queue: name.into(),
        consumer_tag: "".into(),
        no_local: false,
        no_ack: true,
        exclusive: false,
        nowait: false,
        arguments: FieldTable::default(),
    }))
}

/// Declares `count` durable queues over `a.producers` connections; prints the rate, then
/// deletes them with `--delete-queues` (not timed).
pub async fn declare(a: &Args, uri: Arc<Uri>, count: usize) -> io::Result<()> {
    let conns = a.producers.max(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (uri, prefix) = (uri.clone(), a.queue_prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(&uri).await?;
            for i in (c..count).step_by(conns) {
                client
                    .call(
                        1,
                        declare_method(&format!("{prefix}-decl-{i}"), true, false),
                    )
                    .await?;
            }
            io::Result::Ok(client)
        }));
    }
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.map_err(io::Error::other)??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{{\"mode\":\"declare\",\"declared\":{count},\"duration_s\":{elapsed:.3},\"declare_rate\":{:.1}}}",
        count as f64 / elapsed
    );
    if a.delete_queues {
        for (c, client) in clients.iter_mut().enumerate() {
            for i in (c..count).step_by(conns) {
                client
                    .call(1, delete_method(&format!("{}-decl-{i}", a.queue_prefix)))
                    .await?;
            }
        }
    }
    Ok(())
}

/// Reads frames until the next delivery's body is complete; its `reply_to`.
async fn next_delivery(c: &mut Client) -> io::Result<Option<String>> {
    let mut reply_to = None;
    loop {
        match c.frame().await? {
            Frame::Header(_, h) => {
                reply_to = amq_protocol::protocol::basic::parse_properties(&h.raw_properties[..])
                    .ok()
                    .and_then(|(_, p)| p.reply_to().as_ref().map(|s| s.to_string()));
                if h.body_size == 0 {
                    return Ok(reply_to);
                }
            }
            Frame::Body(..) => return Ok(reply_to),
            _ => {}
        }
    }
}

/// Raw basic properties carrying only `reply_to`.
fn reply_to_properties(name: &str) -> Vec<u8> {
    let mut p = vec![0x02, 0x00, name.len().min(255) as u8];
    p.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
    p
}

fn publish(out: &mut BytesMut, routing_key: &str, props: &[u8], body: &[u8], frame_max: u32) {
    codec::encode_method(
        out,
        1,
        &AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
            exchange: "".into(),
            routing_key: routing_key.into(),
            mandatory: false,
            immediate: false,
        })),
    );
    codec::encode_content(out, 1, props, body, frame_max);
}

/// Answers every request on `queue` with a reply to its `reply_to`, until aborted.
async fn responder(uri: Arc<Uri>, queue: String) -> io::Result<()> {
    let mut c = Client::connect(&uri).await?;
    c.call(1, consume_method(&queue)).await?;
    let mut out = BytesMut::new();
    loop {
        if let Some(reply_to) = next_delivery(&mut c).await? {
            publish(&mut out, &reply_to, &[0, 0], b"reply", c.frame_max);
            c.wr.write_all(&out).await?;
            out.clear();
        }
    }
}

/// One RPC client: calls until `stop`; the latency of each call in µs.
async fn caller(uri: Arc<Uri>, queue: String, stop: Arc<AtomicBool>) -> io::Result<Vec<u32>> {
    let mut c = Client::connect(&uri).await?;
    let mut out = BytesMut::new();
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let reply_queue = match c.call(1, declare_method("", false, true)).await? {
            AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => ok.queue.to_string(),
            other => return Err(io::Error::other(format!("unexpected {other:?}"))),
        };
        c.call(1, consume_method(&reply_queue)).await?;
        publish(
            &mut out,
            &queue,
            &reply_to_properties(&reply_queue),
            b"request",
            c.frame_max,
        );
        c.wr.write_all(&out).await?;
        out.clear();
        next_delivery(&mut c).await?;
        c.send(1, delete_method(&reply_queue)).await?;
        // Deleting the queue cancels its consumer; the client may hear of that first.
        while !matches!(
            c.expect(1).await?,
            AMQPClass::Queue(queue::AMQPMethod::DeleteOk(_))
        ) {}
        latencies.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }
    Ok(latencies)
}

/// RPC calls from `a.producers` clients (on `clients`) to one responder (on `server`) for
/// `a.duration` seconds; prints the call rate and latencies.
pub async fn rpc(a: &Args, server: Arc<Uri>, clients: Arc<Uri>) -> io::Result<()> {
    let queue = format!("{}-rpc", a.queue_prefix);
    let mut setup = Client::connect(&server).await?;
    setup.call(1, declare_method(&queue, false, false)).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let responder = tokio::spawn(responder(server.clone(), queue.clone()));
    // The responder's consumer is registered before the first call.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let callers: Vec<_> = (0..a.producers.max(1))
        .map(|_| tokio::spawn(caller(clients.clone(), queue.clone(), stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(a.duration)).await;
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for c in callers {
        lat.extend(c.await.map_err(io::Error::other)??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    if responder.is_finished() {
        responder.await.map_err(io::Error::other)??;
    } else {
        responder.abort();
    }
    if a.delete_queues {
        setup.call(1, delete_method(&queue)).await?;
    }
    lat.sort_unstable();
    println!(
        "{{\"mode\":\"rpc\",\"calls\":{},\"duration_s\":{elapsed:.3},\"rpc_rate\":{:.1},\"latency_us\":{{\"p50\":{},\"p95\":{},\"p99\":{},\"max\":{}}}}}",
        lat.len(),
        lat.len() as f64 / elapsed,
        percentile(&lat, 0.50),
        percentile(&lat, 0.95),
        percentile(&lat, 0.99),
        lat.last().copied().unwrap_or(0)
    );
    Ok(())
}
