//! Configuration: `config/warren.toml` (every key documented there), overridden by CLI flags.

use serde::Deserialize;
use std::{net::SocketAddr, path::PathBuf};

/// Broker configuration. Defaults match RabbitMQ's where RabbitMQ has one.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// AMQP listener address.
    pub amqp_listen: SocketAddr,
    /// Management HTTP listener address (reserved for the management API).
    pub http_listen: SocketAddr,
    /// Directory of the embedded store.
    pub data_dir: PathBuf,
    /// Heartbeat interval offered in connection.tune, seconds (0 disables).
    pub heartbeat: u16,
    /// Largest frame offered in connection.tune, bytes.
    pub frame_max: u32,
    /// Highest channel number offered in connection.tune.
    pub channel_max: u16,
    /// Largest message body accepted, bytes (RabbitMQ's `max_message_size`).
    pub max_message_size: u64,
    /// User created at first start.
    pub default_user: String,
    /// Password of the default user.
    pub default_pass: String,
    /// Virtual host created at first start.
    pub default_vhost: String,
    /// Name reported as `cluster_name`.
    pub cluster_name: String,
    /// This node's name (RabbitMQ's `rabbit@host` form): `warren@<short hostname>` by default.
    pub node_name: String,
    /// Log lines as human-readable text (`text`, the default) or one JSON object per line
    /// (`json`, for containers and log shippers).
    pub log_format: LogFormat,
    /// Seconds a client has to finish the handshake.
    pub handshake_timeout: u64,
    /// Page cache of the embedded store, bytes.
    pub store_cache_bytes: usize,
    /// Ready messages each queue keeps in memory; newer ones are paged out to disk.
    pub queue_window_messages: usize,
    /// Body bytes of ready messages each queue keeps in memory; newer ones are paged out.
    pub queue_window_bytes: u64,
    /// Users that may only connect from a loopback address (RabbitMQ's `loopback_users`).
    pub loopback_users: Vec<String>,
    /// Milliseconds a consumer may hold a delivery unacknowledged before its channel is closed
    /// with 406 (RabbitMQ's `consumer_timeout`, 30 minutes); 0 disables.
    pub consumer_timeout: u64,
    /// Origins whose pages may call the management API from a browser (RabbitMQ's
    /// `management.cors.allow_origins`; `*` allows any). Empty, the default: no CORS headers,
    /// so only the UI served by the broker itself can call the API from a browser.
    pub management_cors_allow_origins: Vec<String>,
    /// Seconds a browser may keep a CORS preflight's answer (RabbitMQ's
    /// `management.cors.max_age`, 1800).
    pub management_cors_max_age: u64,
    /// Milliseconds between samples of the message rates (RabbitMQ's
    /// `collect_statistics_interval`, 5 s).
    pub collect_statistics_interval: u64,
    /// Fraction of the machine's (or cgroup's) memory above which publishers are blocked
    /// (RabbitMQ's `vm_memory_high_watermark.relative`, 0.4).
    pub memory_high_watermark: f64,
    /// The watermark in bytes instead (RabbitMQ's `vm_memory_high_watermark.absolute`).
    pub memory_high_watermark_absolute: Option<u64>,
    /// Free bytes on the data dir's disk below which publishers are blocked (RabbitMQ's
    /// `disk_free_limit`, 50 MB).
    pub disk_free_limit: u64,
    /// Milliseconds between checks of the memory and disk alarms.
    pub alarm_check_interval: u64,
    /// TLS AMQP listener address (RabbitMQ's port is 5671); needs `tls_cert` and `tls_key`.
    pub amqps_listen: Option<SocketAddr>,
    /// RabbitMQ's stream protocol listener (its `rabbitmq_stream` plugin's port is 5552); off
    /// unless set, as the plugin is off unless enabled.
    pub stream_listen: Option<SocketAddr>,
    /// The host the stream protocol's metadata names for this node (RabbitMQ's
    /// `stream.advertised_host`); by default the stream listener's address, or this machine's
    /// host name when that is a wildcard.
    pub stream_advertised_host: Option<String>,
    /// The port the stream protocol's metadata names for this node (RabbitMQ's
    /// `stream.advertised_port`); by default the stream listener's.
    pub stream_advertised_port: Option<u16>,
    /// RabbitMQ's stream protocol over TLS (the plugin's `stream.listeners.ssl`, port 5551);
    /// needs `tls_cert` and `tls_key`. EXTERNAL is offered as on `amqps_listen`.
    pub stream_tls_listen: Option<SocketAddr>,
    /// The port the stream protocol's metadata names to TLS clients (RabbitMQ's
    /// `stream.advertised_tls_port`); by default the TLS stream listener's.
    pub stream_advertised_tls_port: Option<u16>,
    /// HTTPS listener for the management API (RabbitMQ's port is 15671).
    pub https_listen: Option<SocketAddr>,
    /// Prometheus metrics listener (RabbitMQ's port is 15692).
    pub metrics_listen: SocketAddr,
    /// Prometheus metrics over HTTPS (RabbitMQ's port is 15691).
    pub metrics_https_listen: Option<SocketAddr>,
    /// Server certificate chain, PEM.
    pub tls_cert: Option<PathBuf>,
    /// Server private key, PEM.
    pub tls_key: Option<PathBuf>,
    /// CA certificates that client certificates are verified against, PEM.
    pub tls_ca: Option<PathBuf>,
    /// Refuse TLS clients without a certificate (RabbitMQ's `fail_if_no_peer_cert`).
    pub tls_fail_if_no_peer_cert: bool,
    /// SASL mechanisms offered, in order (RabbitMQ's `auth_mechanisms`): PLAIN, AMQPLAIN,
    /// EXTERNAL. EXTERNAL is only offered to TLS clients that presented a verified certificate.
    pub auth_mechanisms: Vec<String>,
    /// Which part of a client certificate names the EXTERNAL user (RabbitMQ's
    /// `ssl_cert_login_from`).
    pub ssl_cert_login_from: CertLoginFrom,
    /// Milliseconds to wait before refusing a failed login (0: none, as RabbitMQ).
    pub failed_login_delay: u64,
    /// A definitions file (RabbitMQ's JSON export) imported at every start.
    pub load_definitions: Option<PathBuf>,
    /// Open AMQP connections the node accepts (RabbitMQ's `connection_max`); 0: no limit.
    pub max_connections: usize,
    /// Consumers one channel may hold (RabbitMQ's `consumer_max_per_channel`); 0: no limit.
    pub max_consumers_per_channel: usize,
    /// Queues one virtual host may hold (RabbitMQ's `max-queues` vhost limit); 0: no limit.
    pub max_queues_per_vhost: usize,
    /// Unacknowledged deliveries one channel may hold, whatever its prefetch; 0: no limit.
    pub max_unacked_per_channel: u32,
    /// The inter-node listener (RabbitMQ's distribution port, 25672); opened only when the
    /// node has a cluster secret.
    pub cluster_listen: SocketAddr,
    /// The `host:port` peers reach this node at; by default its entry in `cluster_nodes`,
    /// else `cluster_listen`.
    pub cluster_advertise: Option<String>,
    /// The secret every node of the cluster shares (the Erlang cookie's role); a peer without
    /// it is refused. With it (or `cluster_secret_file`) the node is a cluster member.
    pub cluster_secret: Option<String>,
    /// A file holding the secret instead (trailing whitespace ignored).
    pub cluster_secret_file: Option<PathBuf>,
    /// Inter-node connections over TLS, both ways verified: each node presents `tls_cert`
    /// (with `tls_key`) and accepts only peers whose certificate `tls_ca` signed, as
    /// RabbitMQ's inter-node TLS does with the listeners' certificates.
    pub cluster_tls: bool,
    /// The seed list (RabbitMQ's `cluster_formation.classic_config.nodes`): entries
    /// `NAME@HOST[:PORT]` (port 25672 when omitted). Nodes that find their `node_name` in it
    /// form the cluster from it; others join it through its nodes. Entries are checked when the
    /// node starts (`cluster::seeds`).
    pub cluster_nodes: Vec<String>,
}

/// Default `queue_window_messages`: ready messages a queue keeps in memory.
pub const QUEUE_WINDOW_MESSAGES: usize = 16_384;
/// Default `queue_window_bytes`: their body bytes.
pub const QUEUE_WINDOW_BYTES: u64 = 8 << 20;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable text (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The machine's short host name (up to the first dot), as RabbitMQ's default node name uses.
pub fn short_hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let short = name.trim().split('.').next().unwrap_or_default();
    if short.is_empty() {
        "localhost".into()
    } else {
        short.into()
    }
}

/// Where the EXTERNAL mechanism takes the user name from.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CertLoginFrom {
    /// The subject's distinguished name in RFC 4514 form ("CN=app,O=Example").
    #[default]
    DistinguishedName,
    /// The subject's common name.
    CommonName,
}

/// SASL mechanisms Warren implements.
pub const KNOWN_MECHANISMS: [&str; 3] = ["PLAIN", "AMQPLAIN", "EXTERNAL"];

impl Default for Config {
    fn default() -> Self {
        Config {
            amqp_listen: SocketAddr::from(([0, 0, 0, 0], 5672)),
            http_listen: SocketAddr::from(([0, 0, 0, 0], 15672)),
            data_dir: PathBuf::from("./data"),
            heartbeat: 60,
            frame_max: 131_072,
            channel_max: 2047,
            max_message_size: 134_217_728,
            default_user: "guest".into(),
            default_pass: "guest".into(),
            default_vhost: "/".into(),
            cluster_name: "warren@localhost".into(),
            node_name: format!("warren@{}", short_hostname()),
            log_format: LogFormat::Text,
            handshake_timeout: 10,
            store_cache_bytes: 32 << 20,
            queue_window_messages: QUEUE_WINDOW_MESSAGES,
            queue_window_bytes: QUEUE_WINDOW_BYTES,
            consumer_timeout: 1_800_000,
            collect_statistics_interval: 5_000,
            management_cors_allow_origins: Vec::new(),
            management_cors_max_age: 1_800,
            memory_high_watermark: 0.4,
            memory_high_watermark_absolute: None,
            disk_free_limit: 50_000_000,
            alarm_check_interval: 1_000,
            loopback_users: vec!["guest".into()],
            amqps_listen: None,
            stream_listen: None,
            stream_advertised_host: None,
            stream_advertised_port: None,
            stream_tls_listen: None,
            stream_advertised_tls_port: None,
            https_listen: None,
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 15692)),
            metrics_https_listen: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_fail_if_no_peer_cert: false,
            auth_mechanisms: vec!["PLAIN".into(), "AMQPLAIN".into()],
            ssl_cert_login_from: CertLoginFrom::DistinguishedName,
            failed_login_delay: 0,
            load_definitions: None,
            max_connections: 0,
            max_consumers_per_channel: 0,
            max_queues_per_vhost: 0,
            max_unacked_per_channel: 0,
            cluster_listen: SocketAddr::from(([0, 0, 0, 0], 25672)),
            cluster_advertise: None,
            cluster_secret: None,
            cluster_secret_file: None,
            cluster_tls: false,
            cluster_nodes: Vec::new(),
        }
    }
}

/// A configuration file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys.
    #[error("invalid config file {path}: {source}")]
    Parse {
        /// File path.
        path: PathBuf,
        /// Cause.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("invalid config: {0}")]
    Invalid(String),
}

impl Config {
    /// Parses a TOML document.
    pub fn from_toml(text: &str, path: &std::path::Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Reads a TOML file.
    pub fn load(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Applies the environment variables Docker images and CI setups use for RabbitMQ:
    /// `RABBITMQ_DEFAULT_USER`, `RABBITMQ_DEFAULT_PASS`, `RABBITMQ_DEFAULT_VHOST` (they take
    /// precedence over the file; `var` reads one, e.g. `std::env::var(..).ok()`).
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) {
        for (name, key) in [
            ("RABBITMQ_DEFAULT_USER", &mut self.default_user),
            ("RABBITMQ_DEFAULT_PASS", &mut self.default_pass),
            ("RABBITMQ_DEFAULT_VHOST", &mut self.default_vhost),
        ] {
            if let Some(v) = var(name) {
                *key = v;
            }
        }
    }

    /// The cluster secret, from `cluster_secret` or `cluster_secret_file`; None: one node.
    pub fn cluster_secret(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if let Some(s) = &self.cluster_secret {
            return Ok(Some(s.as_bytes().to_vec()));
        }
        let Some(path) = &self.cluster_secret_file else {
            return Ok(None);
        };
        let text = std::fs::read(path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let end = text
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        Ok(Some(text[..end].to_vec()))
    }

    /// Checks ranges that the protocol imposes.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cluster_secret.is_some() && self.cluster_secret_file.is_some() {
            return Err(ConfigError::Invalid(
                "set cluster_secret or cluster_secret_file, not both".into(),
            ));
        }
        if matches!(&self.cluster_secret, Some(s) if s.is_empty()) {
            return Err(ConfigError::Invalid(
                "cluster_secret must not be empty".into(),
            ));
        }
        if !self.cluster_nodes.is_empty()
            && self.cluster_secret.is_none()
            && self.cluster_secret_file.is_none()
        {
            return Err(ConfigError::Invalid(
                "cluster_nodes needs cluster_secret or cluster_secret_file".into(),
            ));
        }

        if self.frame_max < 4096 {
            return Err(ConfigError::Invalid(format!(
                "frame_max {} is below the AMQP minimum 4096",
                self.frame_max
            )));
        }
        if self.channel_max == 0 {
            return Err(ConfigError::Invalid(
                "channel_max must be at least 1".into(),
            ));
        }
        if self.default_vhost.is_empty() {
            return Err(ConfigError::Invalid(
                "default_vhost must not be empty".into(),
            ));
        }
        if (self.amqps_listen.is_some()
            || self.https_listen.is_some()
            || self.metrics_https_listen.is_some()
            || self.stream_tls_listen.is_some())
            && (self.tls_cert.is_none() || self.tls_key.is_none())
        {
            return Err(ConfigError::Invalid(
                "amqps_listen, https_listen, metrics_https_listen and stream_tls_listen need tls_cert and tls_key"
                    .into(),
            ));
        }
        if self.cluster_tls
            && (self.tls_cert.is_none() || self.tls_key.is_none() || self.tls_ca.is_none())
        {
            return Err(ConfigError::Invalid(
                "cluster_tls needs tls_cert, tls_key and tls_ca".into(),
            ));
        }
        if self.auth_mechanisms.is_empty() {
            return Err(ConfigError::Invalid(
                "auth_mechanisms must name at least one mechanism".into(),
            ));
        }
        if let Some(m) = self
            .auth_mechanisms
            .iter()
            .find(|m| !KNOWN_MECHANISMS.contains(&m.as_str()))
        {
            return Err(ConfigError::Invalid(format!(
                "unknown auth mechanism {m} (known: {})",
                KNOWN_MECHANISMS.join(", ")
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_file_parses_and_matches_defaults() {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/warren.toml"));
        let c = Config::load(path).expect("config/warren.toml parses");
        let d = Config::default();
        assert_eq!(c.amqp_listen, d.amqp_listen);
        assert_eq!(c.frame_max, d.frame_max);
        assert_eq!(c.heartbeat, d.heartbeat);
        c.validate().expect("valid");
    }

    #[test]
    fn rabbitmq_environment_variables_set_the_defaults() {
        let mut c = Config::default();
        c.apply_env(|name| match name {
            "RABBITMQ_DEFAULT_USER" => Some("admin".into()),
            "RABBITMQ_DEFAULT_VHOST" => Some("apps".into()),
            _ => None,
        });
        assert_eq!(c.default_user, "admin");
        assert_eq!(c.default_pass, "guest");
        assert_eq!(c.default_vhost, "apps");
    }

    #[test]
    fn a_seed_list_needs_a_secret() {
        let p = std::path::Path::new("x.toml");
        let c = Config::from_toml(r#"cluster_nodes = ["warren@a"]"#, p).expect("parses");
        assert!(c.validate().is_err());
        let c = Config::from_toml(
            "cluster_secret = \"s\"\ncluster_nodes = [\"warren@a:25001\", \"warren@b\"]",
            p,
        )
        .expect("parses");
        c.validate().expect("valid");
        assert_eq!(c.cluster_secret().expect("secret"), Some(b"s".to_vec()));
    }

    #[test]
    fn cluster_tls_needs_a_certificate_a_key_and_a_ca() {
        let p = std::path::Path::new("x.toml");
        let partial = "cluster_tls = true\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"";
        let c = Config::from_toml(partial, p).expect("parses");
        assert!(c.validate().is_err());
        let c = Config::from_toml(&format!("{partial}\ntls_ca = \"ca.pem\""), p).expect("parses");
        c.validate().expect("valid");
    }

    #[test]
    fn unknown_keys_and_small_frames_are_rejected() {
        let p = std::path::Path::new("x.toml");
        assert!(Config::from_toml("nope = 1", p).is_err());
        let c = Config::from_toml("frame_max = 100", p).expect("parses");
        assert!(c.validate().is_err());
    }
}
