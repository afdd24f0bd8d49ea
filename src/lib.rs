//! Warren: an AMQP 0-9-1 message broker, a drop-in replacement for a RabbitMQ node.
//!
//! Layers, each only calling the one below: codec (bytes) → connection (socket, heartbeats,
//! channel table) → channel methods (AMQP semantics) → broker core (vhosts, exchanges, queues).
//! `Server::start` is used by the binary, the tests and the benchmarks alike.

pub mod amqp;
pub mod auth;
pub mod broker;
pub mod config;
pub mod confirm;
pub mod delayed;
pub mod error;
pub mod exchange;
pub mod http;
pub mod message;
pub mod queue;
pub mod store;
pub mod vhost;

use broker::Broker;
use config::Config;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running broker.
#[derive(Debug)]
pub struct Server {
    /// Address the AMQP listener is bound to (useful with port 0).
    pub amqp_addr: SocketAddr,
    /// Address the management HTTP API is bound to.
    pub http_addr: SocketAddr,
    /// Shared broker state.
    pub broker: Arc<Broker>,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// File descriptors kept for the store, listeners and logs, not for client sockets.
const RESERVED_FDS: u64 = 64;

/// Raises the soft open-file limit to the hard limit (as RabbitMQ's start scripts do) and logs
/// how many client connections that leaves room for.
fn raise_open_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(
            open_files = limit,
            "open file limit allows about {} connections",
            limit.saturating_sub(RESERVED_FDS)
        ),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open file limit"),
    }
}

impl Server {
    /// Binds the listeners and starts serving.
    pub async fn start(config: Config) -> std::io::Result<Server> {
        config
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        raise_open_file_limit();
        let broker = Broker::open(config).map_err(|e| std::io::Error::other(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(broker.config.amqp_listen).await?;
        let amqp_addr = listener.local_addr()?;
        let http_listener = tokio::net::TcpListener::bind(broker.config.http_listen).await?;
        let http_addr = http_listener.local_addr()?;
        let (shutdown, rx) = watch::channel(false);
        let http = tokio::spawn(http::serve(http_listener, broker.clone(), rx.clone()));
        let amqp = tokio::spawn(amqp::serve(listener, broker.clone(), rx));
        let task = tokio::spawn(async move {
            let _ = amqp.await;
            let _ = http.await;
        });
        tracing::info!(%amqp_addr, "Warren {} listening", env!("CARGO_PKG_VERSION"));
        tracing::info!(%http_addr, "management API listening");
        Ok(Server {
            amqp_addr,
            http_addr,
            broker,
            shutdown,
            task,
        })
    }

    /// Closes every client connection with 320 CONNECTION_FORCED, stops listening, and
    /// commits and closes the store.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        self.broker.close().await;
    }
}
