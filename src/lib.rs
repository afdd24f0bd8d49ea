//! Warren: an AMQP 0-9-1 message broker, a drop-in replacement for a RabbitMQ node.
//!
//! Layers, each only calling the one below: codec (bytes) → connection (socket, heartbeats,
//! channel table) → channel methods (AMQP semantics) → broker core (vhosts, exchanges, queues).
//! `Server::start` is used by the binary, the tests and the benchmarks alike.

pub mod alarms;
pub mod amqp;
pub mod args;
pub mod auth;
pub mod broker;
pub mod channels;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod confirm;
pub mod connections;
pub mod ctl;
pub mod definitions;
pub mod delayed;
pub mod error;
pub mod exchange;
pub mod federation;
pub mod http;
pub mod json;
pub mod listener;
pub mod message;
pub mod message_amqp10;
pub mod metrics;
pub mod parameters;
pub mod permissions;
pub mod policy;
pub mod queue;
pub mod replication;
pub mod sampler;
pub mod shortstr;
pub mod shovel;
pub mod store;
pub mod stream;
pub mod stream_stats;
pub mod tls;
pub mod vhost;

use broker::Broker;
use config::Config;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The RabbitMQ version Warren reports where clients and tools expect one (the management
/// API, definitions exports, metrics): the release whose behaviour it follows.
pub const RABBITMQ_VERSION: &str = "3.13.7";

/// A running broker.
#[derive(Debug)]
pub struct Server {
    /// Address the AMQP listener is bound to (useful with port 0).
    pub amqp_addr: SocketAddr,
    /// Address the management HTTP API is bound to.
    pub http_addr: SocketAddr,
    /// Address of the AMQP-over-TLS listener, when enabled.
    pub amqps_addr: Option<SocketAddr>,
    /// Address of the management API's HTTPS listener, when enabled.
    pub https_addr: Option<SocketAddr>,
    /// Address of the stream protocol listener, when enabled.
    pub stream_addr: Option<SocketAddr>,
    /// The stream protocol's TLS listener, when configured.
    pub stream_tls_addr: Option<SocketAddr>,
    /// Address of the Prometheus metrics listener.
    pub metrics_addr: SocketAddr,
    /// Address of the metrics' HTTPS listener, when enabled.
    pub metrics_https_addr: Option<SocketAddr>,
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

/// Binds a listener; a failure names the listener and its address
/// (`cannot listen for AMQP on 0.0.0.0:5672: address in use`).
async fn listen(what: &str, addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        let reason = match e.kind() {
            std::io::ErrorKind::AddrInUse => "address in use".to_owned(),
            std::io::ErrorKind::AddrNotAvailable => "address not available".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => e.to_string(),
        };
        std::io::Error::new(
            e.kind(),
            format!("cannot listen for {what} on {addr}: {reason}"),
        )
    })
}

/// Logs what the store held at start: vhosts, queues and their messages.
async fn log_recovered(broker: &Broker) {
    let queues: Vec<_> = broker.vhosts().iter().flat_map(|v| v.queues()).collect();
    let infos = queue::QueueShared::info_many(&queues).await;
    let messages: u64 = infos
        .iter()
        .map(|i| u64::from(i.messages_ready) + u64::from(i.messages_unacknowledged))
        .sum();
    tracing::info!(
        data_dir = %broker.config.data_dir.display(),
        node = %broker.config.node_name,
        vhosts = broker.vhosts().len(),
        queues = queues.len(),
        messages,
        "store opened"
    );
}

/// Imports the `load_definitions` file; a missing or invalid file stops the start, as in
/// RabbitMQ.
async fn load_definitions(broker: &Broker, path: &std::path::Path) -> std::io::Result<()> {
    let invalid = |e: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("definitions {}: {e}", path.display()),
        )
    };
    let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let mark = broker.store.submitted();
    definitions::import(broker, &doc, None)
        .await
        .map_err(invalid)?;
    broker.store.sync_since(mark).await;
    tracing::info!(path = %path.display(), "definitions imported");
    Ok(())
}

/// The file name, in the data dir, of the socket `warren ctl` talks to the node on.
pub const CTL_SOCKET: &str = "warren-ctl.sock";

/// Binds the node's local CLI socket at `path` (a file left by an earlier run is replaced:
/// the store's lock already keeps a second node off this data dir), readable and writable
/// by its owner only, as RabbitMQ's Erlang cookie is.
fn local_socket(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Starts the node's cluster membership when it has a cluster secret (see `cluster::boot`).
async fn start_cluster(broker: &Arc<Broker>) -> std::io::Result<()> {
    let cfg = &broker.config;
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let Some(secret) = cfg.cluster_secret().map_err(|e| invalid(e.to_string()))? else {
        return Ok(());
    };
    let seeds = cfg
        .cluster_nodes
        .iter()
        .map(|s| cluster::seeds::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    let mut node_config = cluster::NodeConfig::new(&cfg.node_name, cfg.cluster_listen, secret);
    node_config.advertise = cfg.cluster_advertise.clone();
    node_config.tls = crate::tls::peer_tls(cfg).map_err(|e| invalid(e.to_string()))?;
    let observer = replication::Replica::new(broker);
    let node = cluster::boot::start(broker.store.clone(), node_config, seeds, Some(observer))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    tracing::info!(
        node = node.name(),
        addr = node.addr(),
        "cluster listener up"
    );
    replication::serve_node(broker, &node);
    let _ = broker.cluster.set(node.clone());
    broker.set_auto_delete_decider(replication::auto_delete_decider(broker));
    replication::adopt_applied(broker);
    tokio::spawn(replication::join_metadata(Arc::downgrade(broker), node));
    tokio::spawn(replication::mend_handles(Arc::downgrade(broker)));
    Ok(())
}

impl Server {
    /// Binds the listeners and starts serving.
    pub async fn start(config: Config) -> std::io::Result<Server> {
        config
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        raise_open_file_limit();
        let acceptor = tls::acceptor(&config)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let broker = Broker::open(config).map_err(|e| std::io::Error::other(e.to_string()))?;
        log_recovered(&broker).await;
        // Before the definitions file (it may hold shovels and upstreams) and before any API
        // call.
        shovel::Shovels::install(&broker);
        federation::Federation::install(&broker);
        if let Some(path) = &broker.config.load_definitions {
            load_definitions(&broker, path).await?;
        }
        start_cluster(&broker).await?;
        let cfg = &broker.config;
        let listener = listen("AMQP", cfg.amqp_listen).await?;
        let amqp_addr = listener.local_addr()?;
        let http_listener = listen("HTTP (management API)", cfg.http_listen).await?;
        let http_addr = http_listener.local_addr()?;
        let metrics_listener = listen("HTTP (Prometheus metrics)", cfg.metrics_listen).await?;
        let metrics_addr = metrics_listener.local_addr()?;
        let (shutdown, rx) = watch::channel(false);
        let api = http::router(broker.clone());
        http::cli::install(&broker, api.clone());
        let ctl_listener = local_socket(&cfg.data_dir.join(CTL_SOCKET))?;
        let header = std::time::Duration::from_secs(cfg.handshake_timeout.max(1));
        let prometheus = metrics::router(broker.clone());
        let mut tasks = vec![
            tokio::spawn(http::serve(
                http_listener,
                api.clone(),
                rx.clone(),
                header,
                broker.clone(),
            )),
            tokio::spawn(http::serve(
                metrics_listener,
                prometheus.clone(),
                rx.clone(),
                header,
                broker.clone(),
            )),
            tokio::spawn(amqp::serve(listener, broker.clone(), rx.clone(), None)),
            tokio::spawn(http::serve_local(
                ctl_listener,
                api.clone(),
                rx.clone(),
                header,
            )),
            tokio::spawn(sampler::periodic(
                Arc::downgrade(&broker),
                std::time::Duration::from_millis(cfg.alarm_check_interval),
                rx.clone(),
                |b: &broker::Broker| b.alarms.check(),
            )),
            tokio::spawn(sampler::periodic(
                Arc::downgrade(&broker),
                std::time::Duration::from_millis(cfg.collect_statistics_interval),
                rx.clone(),
                broker::Broker::sample_stats,
            )),
        ];
        let mut stream_addr = None;
        if let Some(addr) = cfg.stream_listen {
            let l = listen("stream protocol", addr).await?;
            stream_addr = Some(l.local_addr()?);
            tasks.push(tokio::spawn(stream::serve(
                l,
                broker.clone(),
                rx.clone(),
                None,
            )));
        }
        let mut stream_tls_addr = None;
        let mut amqps_addr = None;
        let mut https_addr = None;
        let mut metrics_https_addr = None;
        if let Some(acceptor) = acceptor {
            if let Some(addr) = cfg.stream_tls_listen {
                let l = listen("stream protocol over TLS", addr).await?;
                stream_tls_addr = Some(l.local_addr()?);
                let a = Some(acceptor.clone());
                tasks.push(tokio::spawn(stream::serve(
                    l,
                    broker.clone(),
                    rx.clone(),
                    a,
                )));
            }
            if let Some(addr) = cfg.amqps_listen {
                let l = listen("AMQP over TLS", addr).await?;
                amqps_addr = Some(l.local_addr()?);
                let a = Some(acceptor.clone());
                tasks.push(tokio::spawn(amqp::serve(l, broker.clone(), rx.clone(), a)));
            }
            if let Some(addr) = cfg.https_listen {
                let l = listen("HTTPS (management API)", addr).await?;
                https_addr = Some(l.local_addr()?);
                let (rx, a) = (rx.clone(), acceptor.clone());
                let b = broker.clone();
                tasks.push(tokio::spawn(http::serve_tls(l, api, rx, a, header, b)));
            }
            if let Some(addr) = cfg.metrics_https_listen {
                let l = listen("HTTPS (Prometheus metrics)", addr).await?;
                metrics_https_addr = Some(l.local_addr()?);
                tasks.push(tokio::spawn(http::serve_tls(
                    l,
                    prometheus,
                    rx,
                    acceptor,
                    header,
                    broker.clone(),
                )));
            }
        }
        let bound = [
            ("amqp", Some(amqp_addr)),
            ("http", Some(http_addr)),
            ("http/prometheus", Some(metrics_addr)),
            ("amqp/ssl", amqps_addr),
            ("https", https_addr),
            ("https/prometheus", metrics_https_addr),
            ("stream", stream_addr),
            ("stream/ssl", stream_tls_addr),
        ];
        let _ = broker.listeners.set(
            bound
                .into_iter()
                .filter_map(|(p, a)| Some((p, a?)))
                .collect(),
        );
        let task = tokio::spawn(async move {
            for t in tasks {
                let _ = t.await;
            }
        });
        tracing::info!(%amqp_addr, "Warren {} listening", env!("CARGO_PKG_VERSION"));
        tracing::info!(%http_addr, "management API listening");
        tracing::info!(%metrics_addr, "Prometheus metrics listening");
        if let Some(addr) = amqps_addr {
            tracing::info!(%addr, "AMQP over TLS listening");
        }
        if let Some(addr) = https_addr {
            tracing::info!(%addr, "management API over HTTPS listening");
        }
        if let Some(addr) = metrics_https_addr {
            tracing::info!(%addr, "Prometheus metrics over HTTPS listening");
        }
        Ok(Server {
            amqp_addr,
            http_addr,
            amqps_addr,
            https_addr,
            stream_addr,
            stream_tls_addr,
            metrics_addr,
            metrics_https_addr,
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
