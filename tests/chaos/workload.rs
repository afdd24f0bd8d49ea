//! The harness's clients: publishers with confirms and consumers with manual acks, each
//! moving to the next node whenever its connection or a bounded wait fails. They record what
//! they saw in the [`History`].

use super::history::{Delivery, History};
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions,
};
use lapin::types::FieldTable;
use lapin::Confirmation;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a client waits for any one answer before it gives the node up.
const WAIT: Duration = Duration::from_secs(10);
/// Publishes between two waits for their confirms.
const BATCH: u64 = 10;
/// A consumer's prefetch window.
const PREFETCH: u16 = 20;
/// Deliveries a consumer takes on one channel before it closes it (making its acks
/// processed) and consumes again.
const SESSION: usize = 100;

/// The AMQP ports of the cluster's nodes, tried in turn.
#[derive(Clone)]
pub struct Nodes(pub Arc<Vec<u16>>);

impl Nodes {
    /// The index of the node the next connection for `turn` goes to.
    fn node(&self, turn: usize) -> usize {
        turn % self.0.len()
    }

    async fn connect(&self, turn: &mut usize) -> Option<Connection> {
        let port = self.0[self.node(*turn)];
        *turn += 1;
        let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2F");
        let conn = tokio::time::timeout(
            WAIT,
            Connection::connect(&url, ConnectionProperties::default()),
        )
        .await;
        match conn {
            Ok(Ok(c)) => Some(c),
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                None
            }
        }
    }
}

async fn bounded<T, E>(f: impl std::future::Future<Output = Result<T, E>>) -> Option<T> {
    tokio::time::timeout(WAIT, f).await.ok()?.ok()
}

/// Publishes `{queue}/{id}.{channel}/{seq}` persistent, mandatory messages in batches of
/// [`BATCH`], waiting for each batch's confirms, until `stop`; `channel` counts the channels
/// it published on (a new one after each failure), since order holds per channel.
pub async fn publisher(
    nodes: Nodes,
    queue: String,
    id: usize,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
) {
    let mut turn = id;
    let mut seq = 0u64;
    let mut channel = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let node = nodes.node(turn);
        let Some(conn) = nodes.connect(&mut turn).await else {
            continue;
        };
        let Some(ch) = bounded(conn.create_channel()).await else {
            continue;
        };
        if bounded(ch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .is_none()
        {
            continue;
        }
        channel += 1;
        'batches: while !stop.load(Ordering::Relaxed) {
            let mut pending = Vec::new();
            for _ in 0..BATCH {
                let body = format!("{queue}/{id}.{channel}/{seq}");
                seq += 1;
                history.with(|s| s.sent.insert(body.clone()));
                let published = bounded(ch.basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    body.as_bytes(),
                    BasicProperties::default().with_delivery_mode(2),
                ))
                .await;
                match published {
                    Some(confirm) => pending.push((body, confirm)),
                    None => {
                        history.with(|s| s.unknown += 1 + pending.len());
                        break 'batches;
                    }
                }
            }
            let mut failed = false;
            for (body, confirm) in pending {
                if failed {
                    history.with(|s| s.unknown += 1);
                    continue;
                }
                match tokio::time::timeout(WAIT, confirm).await {
                    Ok(Ok(Confirmation::Ack(None))) => history.with(|s| {
                        s.confirm_times.insert(body.clone(), (Instant::now(), node));
                        s.confirmed.insert(body);
                    }),
                    Ok(Ok(Confirmation::Ack(Some(_)))) => history.with(|s| s.returned += 1),
                    Ok(Ok(_)) => history.with(|s| s.nacked += 1),
                    _ => {
                        history.with(|s| s.unknown += 1);
                        failed = true;
                    }
                }
            }
            if failed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.close(200, "bye".into())).await;
    }
}

/// Stream numbers, unique across consumers.
static STREAMS: AtomicU64 = AtomicU64::new(0);

/// Consumes `queue` with manual acks, [`SESSION`] deliveries (or an idle second) per
/// channel, until `stop`; a channel closed with `close-ok` makes its acks processed.
pub async fn consumer(
    nodes: Nodes,
    queue: String,
    id: usize,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
) {
    let mut turn = id;
    while !stop.load(Ordering::Relaxed) {
        let node = nodes.node(turn);
        let Some(conn) = nodes.connect(&mut turn).await else {
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            if !session(&conn, node, &queue, &history).await {
                break;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.close(200, "bye".into())).await;
    }
}

/// One channel's consume: false when the connection looks unusable.
async fn session(conn: &Connection, node: usize, queue: &str, history: &History) -> bool {
    let Some(ch) = bounded(conn.create_channel()).await else {
        return false;
    };
    if bounded(ch.basic_qos(PREFETCH, BasicQosOptions::default()))
        .await
        .is_none()
    {
        return false;
    }
    let stream = STREAMS.fetch_add(1, Ordering::Relaxed);
    history.with(|s| s.streams.insert(stream, node));
    let Some(mut consumer) = bounded(ch.basic_consume(
        queue.into(),
        format!("chaos-{stream}").as_str().into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    else {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return conn.status().connected();
    };
    let mut acked = Vec::new();
    let mut healthy = true;
    while acked.len() < SESSION {
        let next = tokio::time::timeout(Duration::from_secs(1), consumer.next()).await;
        let delivery = match next {
            Err(_) => break,
            Ok(Some(Ok(d))) => d,
            // Cancelled by the broker, or the channel failed.
            Ok(_) => {
                healthy = conn.status().connected();
                break;
            }
        };
        let body = String::from_utf8_lossy(&delivery.data).into_owned();
        history.with(|s| {
            s.deliveries.push(Delivery {
                queue: queue.to_owned(),
                body: body.clone(),
                redelivered: delivery.redelivered,
                at: Instant::now(),
                stream,
            })
        });
        if bounded(delivery.ack(BasicAckOptions::default()))
            .await
            .is_none()
        {
            healthy = false;
            break;
        }
        acked.push(body);
    }
    if bounded(ch.close(200, "bye".into())).await.is_some() {
        let now = Instant::now();
        history.with(|s| {
            for body in acked {
                s.processed.entry(body).or_insert(now);
            }
        });
        healthy
    } else {
        false
    }
}
