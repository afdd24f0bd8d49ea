//! Real `warren` processes formed into a cluster on loopback: specs (ports, data dir, node
//! name, seed list), spawning, and waiting for `/api/nodes` to list the members.

use super::http::request;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A loopback port free now and not handed out before in this process (tests run in
/// parallel and each node binds its ports only when it starts). It is taken below the
/// kernel's ephemeral range (32768 and up by default): a port from there can become some
/// connection's source port before the node binds it, and the node then fails to start.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Test binaries run one after another; the pid spreads them anyway.
    let base = std::process::id() % SPAN;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOW + (base + n) % SPAN).expect("below 32000");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub struct Spec {
    pub name: String,
    pub dir: tempfile::TempDir,
    pub http: SocketAddr,
    /// The Prometheus listener.
    pub metrics: SocketAddr,
    pub amqp: u16,
    pub config: std::path::PathBuf,
}

pub fn spec(name: &str, cluster_port: u16, secret: &str, seeds: &[String]) -> Spec {
    spec_with(name, cluster_port, secret, seeds, "")
}

/// A node's spec with `extra` lines appended to its config.
pub fn spec_with(
    name: &str,
    cluster_port: u16,
    secret: &str,
    seeds: &[String],
    extra: &str,
) -> Spec {
    spec_on("127.0.0.1", name, cluster_port, secret, seeds, extra)
}

/// A node's spec whose inter-node listener (and connections) are on the loopback address
/// `host` (its AMQP and HTTP listeners stay on 127.0.0.1).
pub fn spec_on(
    host: &str,
    name: &str,
    cluster_port: u16,
    secret: &str,
    seeds: &[String],
    extra: &str,
) -> Spec {
    let dir = tempfile::tempdir().expect("dir");
    let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let amqp = free_port();
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let seeds: Vec<String> = seeds.iter().map(|s| format!("{s:?}")).collect();
    let toml = format!(
        "amqp_listen = \"127.0.0.1:{amqp}\"\n\
         http_listen = \"{http}\"\n\
         metrics_listen = \"{metrics}\"\n\
         data_dir = {data:?}\n\
         node_name = \"{name}\"\n\
         cluster_listen = \"{host}:{cluster_port}\"\n\
         cluster_secret = \"{secret}\"\n\
         cluster_nodes = [{seeds}]\n{extra}",
        data = dir.path().join("data"),
        seeds = seeds.join(", "),
    );
    let config = dir.path().join("warren.toml");
    std::fs::write(&config, toml).expect("config");
    Spec {
        name: name.to_string(),
        dir,
        http,
        metrics,
        amqp,
        config,
    }
}

pub fn spawn(s: &Spec) -> tokio::process::Child {
    spawn_with(s, &[])
}

/// A node started with `env` set besides the usual (a fault to inject). Its log filter is
/// `warn`, or `WARREN_NODE_LOG` when set (to trace a fault harness run).
pub fn spawn_with(s: &Spec, env: &[(&str, &str)]) -> tokio::process::Child {
    let log = std::env::var("WARREN_NODE_LOG").unwrap_or_else(|_| "warn".into());
    tokio::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .arg("--config")
        .arg(&s.config)
        .env("RUST_LOG", log)
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn warren")
}

/// `name` -> `running` as node `at` lists them, once it answers.
pub async fn nodes(at: SocketAddr) -> Option<Vec<(String, bool)>> {
    tokio::net::TcpStream::connect(at).await.ok()?;
    let r = request(at, "GET", "/api/nodes", Some(("guest", "guest")), None).await;
    if r.status != 200 {
        return None;
    }
    let list = r.json();
    let list = list.as_array()?;
    Some(
        list.iter()
            .map(|n| {
                (
                    n["name"].as_str().unwrap_or_default().to_string(),
                    n["running"] == Value::Bool(true),
                )
            })
            .collect(),
    )
}

pub async fn eventually_nodes(at: SocketAddr, want: &[(&str, bool)], what: &str) {
    let want: Vec<(String, bool)> = want.iter().map(|(n, r)| (n.to_string(), *r)).collect();
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(30) {
        last = nodes(at).await;
        if last.as_deref() == Some(&want[..]) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: /api/nodes at {at} never became {want:?}; last {last:?}");
}

pub const NAMES: [&str; 3] = [
    "warren-a@127.0.0.1",
    "warren-b@127.0.0.1",
    "warren-c@127.0.0.1",
];

/// The specs of three nodes named [`NAMES`] with one seed list (each config ends with
/// `extra`), not started; and the seed list.
pub fn three_specs(extra: &str) -> (Vec<Spec>, Vec<String>) {
    let ports = [free_port(), free_port(), free_port()];
    let seeds: Vec<String> = NAMES
        .iter()
        .zip(ports)
        .map(|(n, p)| format!("{n}:{p}"))
        .collect();
    let specs = NAMES
        .iter()
        .zip(ports)
        .map(|(n, p)| spec_with(n, p, "cookie", &seeds, extra))
        .collect();
    (specs, seeds)
}

/// Three processes formed by one seed list, each seeing all three running.
pub async fn three() -> (Vec<Spec>, Vec<tokio::process::Child>, Vec<String>) {
    let (specs, seeds) = three_specs("");
    let children: Vec<_> = specs.iter().map(spawn).collect();
    let all_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    for s in &specs {
        eventually_nodes(s.http, &all_up, &format!("{} sees the cluster", s.name)).await;
    }
    (specs, children, seeds)
}

pub async fn amqp(port: u16, vhost: &str) -> lapin::Result<lapin::Connection> {
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/{vhost}");
    lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await
}

pub fn reply_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

/// `warren ctl` against the node whose spec is `s`: (exit code, stdout, stderr).
pub async fn ctl(s: &Spec, args: &[&str]) -> (i32, String, String) {
    let dir = s.dir.path().join("data");
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::warren_ctl(&dir, &args)
    })
    .await
    .expect("ctl task")
}
