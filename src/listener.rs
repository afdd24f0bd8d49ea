//! The accept loop of the client listeners (AMQP 0-9-1 and the stream protocol, plain and
//! TLS): accept until shutdown, drop sockets while the node's app is stopped (between
//! `stop_app` and `start_app` it takes no clients), run each connection as its own task, and
//! at shutdown wait (bounded) for the connections to close.

use crate::broker::Broker;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long shutdown waits for the connections to end.
const DRAIN: Duration = Duration::from_secs(10);

/// Accepts on `listener` until `shutdown`, running `connection(socket, peer)` for each
/// client; `what` names the listener in the log.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    broker: &Broker,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
    mut connection: F,
) where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) if !broker.app_running() => drop(socket),
                Ok((socket, addr)) => {
                    tracing::info!("accepting {what} connection {addr}");
                    let _ = socket.set_nodelay(true);
                    conns.spawn(connection(socket, addr));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "{what} accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
}

/// When a connection accepted now must have finished its handshake.
pub fn handshake_deadline(broker: &Broker) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(broker.config.handshake_timeout)
}
