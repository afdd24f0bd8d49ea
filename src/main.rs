//! The `warren` binary: command line, configuration, logging, signals.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use warren::config::{Config, LogFormat};

/// jemalloc instead of glibc malloc: per-message allocations no longer contend on arena locks.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// An AMQP 0-9-1 message broker, a drop-in replacement for a RabbitMQ node.
#[derive(Debug, Parser)]
#[command(name = "warren", version)]
struct Cli {
    /// Configuration file (TOML). Without it: $WARREN_CONFIG_FILE, then
    /// /etc/warren/warren.toml, then config/warren.toml, the first that exists.
    #[arg(long, global = true)]
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
    /// RabbitMQ's stream protocol listener address (its port is 5552; off unless set).
    #[arg(long)]
    stream_listen: Option<SocketAddr>,
    /// The stream protocol over TLS (its port is 5551; needs --tls-cert and --tls-key).
    #[arg(long)]
    stream_tls_listen: Option<SocketAddr>,
    /// Data directory of the embedded store.
    #[arg(long, global = true)]
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
    /// Without a command: run the broker.
    #[command(subcommand)]
    command: Option<Sub>,
}

/// What else the binary does.
#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// rabbitmqctl / rabbitmq-diagnostics commands against the node of this configuration
    /// (or --data-dir), through its local CLI socket.
    Ctl(warren::ctl::CtlArgs),
}

/// The configuration file to read, as RabbitMQ users expect to find it: the flag, the
/// environment (`WARREN_CONFIG_FILE`, RabbitMQ's `RABBITMQ_CONFIG_FILE`), the system location,
/// then the one in the working directory. A file named by the flag or the environment must
/// exist; the other two are used when they do.
fn config_file(cli: &Cli) -> Option<PathBuf> {
    let named = cli.config.clone().or_else(|| {
        ["WARREN_CONFIG_FILE", "WARREN_CONFIG"]
            .iter()
            .find_map(|v| std::env::var_os(v).filter(|s| !s.is_empty()))
            .map(PathBuf::from)
    });
    named.or_else(|| {
        ["/etc/warren/warren.toml", "config/warren.toml"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    })
}

fn load(cli: &Cli, file: Option<&PathBuf>) -> Result<Config, warren::config::ConfigError> {
    let mut config = match file {
        Some(p) => Config::load(p)?,
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
    if cli.stream_listen.is_some() {
        config.stream_listen = cli.stream_listen;
    }
    if cli.stream_tls_listen.is_some() {
        config.stream_tls_listen = cli.stream_tls_listen;
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

/// Logs to standard output as text (colour codes only on a terminal) or JSON lines, at the
/// level `RUST_LOG` sets (info by default).
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let file = config_file(&cli);
    let config = match load(&cli, file.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("warren: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(Sub::Ctl(args)) = &cli.command {
        let code = warren::ctl::run(args, &config);
        return std::process::ExitCode::from(code);
    }
    init_logging(config.log_format);
    match &file {
        Some(f) => tracing::info!(config_file = %f.display(), "configuration read"),
        None => tracing::info!("no configuration file found; using the defaults"),
    }
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
