//! The `warren` binary: command line, configuration, logging, signals.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use warren::config::Config;

/// jemalloc instead of glibc malloc: per-message allocations no longer contend on arena locks.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// An AMQP 0-9-1 message broker, a drop-in replacement for a RabbitMQ node.
#[derive(Debug, Parser)]
#[command(name = "warren", version)]
struct Cli {
    /// Configuration file (TOML). Defaults to config/warren.toml when it exists.
    #[arg(long, env = "WARREN_CONFIG")]
    config: Option<PathBuf>,
    /// AMQP listener address.
    #[arg(long)]
    amqp_listen: Option<SocketAddr>,
    /// Management HTTP listener address.
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// Prometheus metrics listener address.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Data directory of the embedded store.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// AMQP-over-TLS listener address (needs --tls-cert and --tls-key).
    #[arg(long)]
    amqps_listen: Option<SocketAddr>,
    /// Management API HTTPS listener address (needs --tls-cert and --tls-key).
    #[arg(long)]
    https_listen: Option<SocketAddr>,
    /// Server certificate chain (PEM).
    #[arg(long)]
    tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long)]
    tls_key: Option<PathBuf>,
    /// CA certificates to verify client certificates against (PEM).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

fn load(cli: &Cli) -> Result<Config, warren::config::ConfigError> {
    let default = PathBuf::from("config/warren.toml");
    let mut config = match &cli.config {
        Some(p) => Config::load(p)?,
        None if default.exists() => Config::load(&default)?,
        None => Config::default(),
    };
    config.apply_env(|name| std::env::var(name).ok());
    if let Some(a) = cli.amqp_listen {
        config.amqp_listen = a;
    }
    if let Some(a) = cli.http_listen {
        config.http_listen = a;
    }
    if let Some(a) = cli.metrics_listen {
        config.metrics_listen = a;
    }
    if let Some(d) = &cli.data_dir {
        config.data_dir = d.clone();
    }
    if cli.amqps_listen.is_some() {
        config.amqps_listen = cli.amqps_listen;
    }
    if cli.https_listen.is_some() {
        config.https_listen = cli.https_listen;
    }
    for (flag, key) in [
        (&cli.tls_cert, &mut config.tls_cert),
        (&cli.tls_key, &mut config.tls_key),
        (&cli.tls_ca, &mut config.tls_ca),
    ] {
        if flag.is_some() {
            key.clone_from(flag);
        }
    }
    config.validate()?;
    Ok(config)
}

async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let config = match load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("warren: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let server = match warren::Server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warren: cannot start: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    terminated().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    std::process::ExitCode::SUCCESS
}
