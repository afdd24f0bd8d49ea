//! The AMQP 0-9-1 listeners (plain and TLS): accept sockets and run each connection (TLS
//! handshake, AMQP handshake, then the connection task) until it ends or the broker shuts down.
//! The handshake code and the connection task are generic over the stream halves, so a plain
//! TCP connection pays nothing for TLS support.
//!
//! Inside: `codec` (frames) → `connection/` (socket, heartbeats, channel table, writer, inbox)
//! → `methods::dispatch` (one flat match) → the handlers in `methods/`, which see only the
//! `session::Session` (vhost handle, user, outbox, caches) and the `channel::Channel`, and
//! call the core.

pub(crate) mod channel;
pub(crate) mod channel_table;
#[cfg(test)]
mod cleanup_tests;
pub mod codec;
pub(crate) mod connection;
pub mod error;
pub(crate) mod handshake;
mod methods;
pub mod nesting;
pub(crate) mod sasl;
pub(crate) mod session;
mod writer;

use crate::broker::Broker;
use bytes::BytesMut;
use handshake::Peer;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// Accepts connections until shutdown, then waits (bounded) for them to close. With an
/// acceptor, every socket first completes a TLS handshake (within the handshake timeout).
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
    tls: Option<TlsAcceptor>,
) {
    let what = if tls.is_some() {
        "AMQP over TLS"
    } else {
        "AMQP"
    };
    let rx = shutdown.clone();
    crate::listener::accept_loop(listener, &broker, rx, what, |socket, addr| {
        connection_on(socket, addr, tls.clone(), broker.clone(), shutdown.clone())
    })
    .await;
}

/// Runs one accepted connection: over TCP, or over TLS once its handshake is done.
async fn connection_on(
    socket: TcpStream,
    addr: SocketAddr,
    tls: Option<TlsAcceptor>,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) {
    let local = socket.local_addr().unwrap_or(addr);
    let deadline = crate::listener::handshake_deadline(&broker);
    match tls {
        None => {
            let (rd, wr) = socket.into_split();
            let peer = Peer {
                addr,
                local,
                tls: None,
                cert_user: None,
            };
            handle(rd, wr, peer, deadline, broker, shutdown).await
        }
        // Boxed: a plain connection's task must not carry the TLS state machine's size.
        Some(acceptor) => {
            Box::pin(handle_tls(
                acceptor, socket, addr, local, deadline, broker, shutdown,
            ))
            .await
        }
    }
}

/// Runs one client connection over any byte stream (TCP, TLS, or an in-memory pipe for
/// fuzzing and embedding) from its protocol header to its end.
pub async fn serve_stream<S>(broker: Arc<Broker>, stream: S, addr: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(broker.config.handshake_timeout);
    let (rd, wr) = tokio::io::split(stream);
    let peer = Peer {
        addr,
        local: addr,
        tls: None,
        cert_user: None,
    };
    let (_never, shutdown) = watch::channel(false);
    handle(rd, wr, peer, deadline, broker, shutdown).await;
}

async fn handle_tls(
    acceptor: TlsAcceptor,
    socket: TcpStream,
    addr: SocketAddr,
    local: SocketAddr,
    deadline: Instant,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) {
    let from = broker.config.ssl_cert_login_from;
    let Some(accepted) = crate::tls::accept(&acceptor, socket, addr, deadline, from).await else {
        return;
    };
    let (stream, tls, cert_user) = (accepted.stream, Some(accepted.info), accepted.cert_user);
    let (rd, wr) = tokio::io::split(stream);
    let peer = Peer {
        addr,
        local,
        tls,
        cert_user,
    };
    handle(rd, wr, peer, deadline, broker, shutdown).await;
}

/// Reads and discards input until the peer closes its side, fails, or `limit` passes.
pub(crate) async fn drain<R: AsyncRead + Unpin>(rd: &mut R, limit: Duration) {
    let mut sink = vec![0u8; 16 << 10];
    let _ = tokio::time::timeout(limit, async {
        while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

async fn handle<R, W>(
    mut rd: R,
    mut wr: W,
    peer: Peer,
    deadline: Instant,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::with_capacity(connection::BUFFER_SMALL);
    let opened = tokio::time::timeout_at(deadline, async {
        let Some(version) = handshake::protocol_header(&mut rd, &mut wr).await else {
            return Err(handshake::Refused::Dropped);
        };
        handshake::negotiate(&broker, &mut rd, &mut wr, &mut buf, version, &peer).await
    })
    .await;
    match opened {
        Ok(Ok(opened)) => connection::run(broker, opened, rd, wr, buf, shutdown).await,
        Ok(Err(handshake::Refused::Close(e))) => {
            // The close is sent and the write side shut; whatever the client pipelined is
            // read until it closes, so the close reaches it (no RST on unread input).
            handshake::refuse(&mut wr, e).await;
            drain(&mut rd, connection::DRAIN_TIMEOUT).await;
        }
        Ok(Err(handshake::Refused::Dropped)) | Err(_) => {}
    }
}
