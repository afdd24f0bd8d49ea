//! The AMQP 0-9-1 listener: accepts sockets and runs each connection (handshake, then the
//! connection task) until it ends or the broker shuts down.

pub(crate) mod channel;
pub mod codec;
pub(crate) mod connection;
pub(crate) mod handshake;
mod methods;
pub mod nesting;

pub use methods::ReplyTarget;

use crate::broker::Broker;
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Accepts connections until shutdown, then waits (bounded) for them to close.
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
                Ok((socket, peer)) => {
                    tracing::debug!(%peer, "accepted connection");
                    conns.spawn(handle(socket, peer, broker.clone(), shutdown.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
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

async fn handle(
    socket: TcpStream,
    peer: std::net::SocketAddr,
    broker: Arc<Broker>,
    shutdown: watch::Receiver<bool>,
) {
    let _ = socket.set_nodelay(true);
    let (mut rd, mut wr) = socket.into_split();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let limit = Duration::from_secs(broker.config.handshake_timeout);
    let opened = tokio::time::timeout(limit, async {
        let Some(version) = handshake::protocol_header(&mut rd, &mut wr).await else {
            return Err(handshake::Refused::Dropped);
        };
        handshake::negotiate(&broker, &mut rd, &mut wr, &mut buf, version, peer).await
    })
    .await;
    match opened {
        Ok(Ok(opened)) => connection::run(broker, opened, rd, wr, buf, shutdown).await,
        Ok(Err(handshake::Refused::Close(e))) => {
            handshake::refuse(&mut wr, e).await;
            // Give the client a moment to read the close and answer it.
            let mut sink = [0u8; 512];
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
        }
        Ok(Err(handshake::Refused::Dropped)) | Err(_) => {}
    }
}
