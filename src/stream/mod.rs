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
use crate::connections::TlsInfo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// What the listener knows of a client's transport.
pub struct Transport {
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's end of the connection.
    pub local: SocketAddr,
    /// What TLS negotiated, when it came over TLS.
    pub tls: Option<Arc<TlsInfo>>,
    /// The user its verified TLS certificate names (for EXTERNAL).
    pub cert_user: Option<String>,
}

/// Accepts stream protocol connections on `listener` until `shutdown`: plain TCP, or TLS
/// with `acceptor` (RabbitMQ's `stream/ssl` listener, port 5551).
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
    acceptor: Option<TlsAcceptor>,
) {
    let what = if acceptor.is_some() {
        "stream over TLS"
    } else {
        "stream"
    };
    let rx = shutdown.clone();
    crate::listener::accept_loop(listener, &broker, rx, what, |socket, addr| {
        connection_on(
            socket,
            addr,
            acceptor.clone(),
            broker.clone(),
            shutdown.clone(),
        )
    })
    .await;
}

/// Runs one accepted connection: over TCP, or over TLS once its handshake is done.
async fn connection_on(
    socket: TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) {
    let Ok(local) = socket.local_addr() else {
        return;
    };
    let deadline = crate::listener::handshake_deadline(&broker);
    let transport = Transport {
        peer,
        local,
        tls: None,
        cert_user: None,
    };
    match acceptor {
        None => {
            let (rd, wr) = socket.into_split();
            connection::run(rd, wr, transport, deadline, broker, shutdown).await
        }
        // Boxed: a plain connection's task must not carry the TLS state machine's size.
        Some(a) => Box::pin(over_tls(a, socket, transport, deadline, broker, shutdown)).await,
    }
}

/// Runs one connection over TLS once its handshake is done.
async fn over_tls(
    acceptor: TlsAcceptor,
    socket: TcpStream,
    mut transport: Transport,
    deadline: tokio::time::Instant,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) {
    let from = broker.config.ssl_cert_login_from;
    let peer = transport.peer;
    let Some(accepted) = crate::tls::accept(&acceptor, socket, peer, deadline, from).await else {
        return;
    };
    transport.tls = Some(accepted.info);
    transport.cert_user = accepted.cert_user;
    let (rd, wr) = tokio::io::split(accepted.stream);
    connection::run(rd, wr, transport, deadline, broker, shutdown).await
}

/// The host and port the stream protocol's metadata and open name for this node, to a
/// client over TLS (`tls`) or not: RabbitMQ's `advertised_host`, and `advertised_port` or
/// `advertised_tls_port`, by default the listener's.
pub fn advertised(broker: &Broker, tls: bool) -> (String, u16) {
    let (protocol, configured, default) = match tls {
        false => ("stream", broker.config.stream_advertised_port, 5552),
        true => ("stream/ssl", broker.config.stream_advertised_tls_port, 5551),
    };
    let bound = broker
        .listeners()
        .iter()
        .find(|(p, _)| *p == protocol)
        .map(|(_, a)| *a);
    let cfg = &broker.config;
    let port = configured.or(bound.map(|a| a.port())).unwrap_or(default);
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
