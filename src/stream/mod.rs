//! RabbitMQ's stream protocol (its `rabbitmq_stream` plugin, port 5552): a binary protocol
//! for stream queues. A front end like `amqp/`: it decodes frames (`frame`, `request`), runs
//! each connection's handshake and requests (`connection`, `session`), and calls the core —
//! the broker's declare and delete for `create` and `delete`, and the stream queue's task for
//! publishes, subscriptions and offsets (`queue::stream`). Chunks are delivered as the log
//! holds them on disk (osiris's chunk format), not re-encoded.

mod arguments;
mod connection;
pub mod frame;
mod handshake;
mod publishers;
pub mod request;
mod session;
mod subscriptions;
mod super_stream;

use crate::broker::Broker;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Accepts stream protocol connections on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) if !broker.app_running() => drop(socket),
                Ok((socket, addr)) => {
                    tracing::info!("accepting stream connection {addr}");
                    conns.spawn(connection::run(socket, addr, broker.clone(), shutdown.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "stream accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
}

/// The host and port the stream protocol's metadata and open name for this node.
pub fn advertised(broker: &Broker) -> (String, u16) {
    let bound = broker
        .listeners()
        .iter()
        .find(|(p, _)| *p == "stream")
        .map(|(_, a)| *a);
    let cfg = &broker.config;
    let port = cfg
        .stream_advertised_port
        .or(bound.map(|a| a.port()))
        .unwrap_or(5552);
    let host = cfg
        .stream_advertised_host
        .clone()
        .unwrap_or_else(|| match bound {
            Some(a) if !a.ip().is_unspecified() => a.ip().to_string(),
            _ => host_name(),
        });
    (host, port)
}

/// This machine's host name (`localhost` when it has none).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
