//! Shared test harness: a real broker on 127.0.0.1:0 with a temp data dir, lapin connections to
//! it, and helpers to read AMQP reply codes out of client errors.
#![allow(dead_code)]

pub mod browser;
pub mod cluster;
pub mod cluster_amqp;
pub mod http;
pub mod partition;
pub mod pki;
pub mod rabbitmq;
pub mod raw;
pub mod stream_client;
pub mod stream_raw;

use lapin::{Connection, ConnectionProperties};
use std::time::Duration;
use warren::config::Config;
use warren::Server;

/// How long any single awaited step may take before the test fails.
pub const STEP: Duration = Duration::from_secs(10);

/// A running broker and its data directory.
pub struct TestBroker {
    pub server: Server,
    pub dir: tempfile::TempDir,
}

impl TestBroker {
    /// AMQP URL of the default vhost.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.server.amqp_addr)
    }

    /// Opens a lapin connection.
    /// Connects with PLAIN as another user (vhost /).
    pub async fn connect_as(&self, user: &str, pass: &str) -> lapin::Result<Connection> {
        let enc = |s: &str| {
            s.replace('%', "%25")
                .replace(' ', "%20")
                .replace(',', "%2C")
                .replace('=', "%3D")
        };
        let url = format!(
            "amqp://{}:{}@{}/%2f",
            enc(user),
            enc(pass),
            self.server.amqp_addr
        );
        within(Connection::connect(&url, ConnectionProperties::default())).await
    }

    pub async fn connect(&self) -> Connection {
        within(Connection::connect(
            &self.url(),
            ConnectionProperties::default(),
        ))
        .await
        .expect("connect")
    }

    /// Opens a connection and one channel.
    pub async fn channel(&self) -> (Connection, lapin::Channel) {
        let c = self.connect().await;
        let ch = within(c.create_channel()).await.expect("channel");
        (c, ch)
    }
}

impl TestBroker {
    /// Shuts the broker down cleanly and starts a new one on the same data dir.
    pub async fn restart(self) -> TestBroker {
        let TestBroker { server, dir } = self;
        within(server.shutdown()).await;
        let config = Config {
            amqp_listen: "127.0.0.1:0".parse().expect("addr"),
            http_listen: "127.0.0.1:0".parse().expect("addr"),
            metrics_listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        let server = Server::start(config).await.expect("broker restarts");
        TestBroker { server, dir }
    }
}

/// Starts a broker with a fresh data dir.
pub async fn start() -> TestBroker {
    start_with(|_| {}).await
}

/// Starts a broker after adjusting its configuration.
pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> TestBroker {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config {
        amqp_listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    adjust(&mut config);
    let server = Server::start(config).await.expect("broker starts");
    TestBroker { server, dir }
}

/// Awaits a future, failing the test when it takes longer than `STEP`.
pub async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(STEP, f).await.expect("step timed out")
}

/// The AMQP reply code inside a lapin error, if it carries one.
pub fn code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

/// Asserts that a lapin result failed with the given AMQP reply code.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(r: Result<T, lapin::Error>, expected: u16) {
    match r {
        Ok(v) => panic!("expected reply code {expected}, got success {v:?}"),
        Err(e) => assert_eq!(code(&e), Some(expected), "unexpected error {e}"),
    }
}

/// Publishes on a confirm-mode channel and returns the reply code of the channel error the
/// publish caused (None when it was confirmed). Waiting on the confirm avoids racing the
/// broker's channel.close with a follow-up call.
pub async fn publish_error(
    ch: &lapin::Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    props: lapin::BasicProperties,
) -> Option<u16> {
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let confirm = match within(ch.basic_publish(
        exchange.into(),
        routing_key.into(),
        Default::default(),
        body,
        props,
    ))
    .await
    {
        Ok(c) => c,
        Err(e) => return code(&e),
    };
    match within(confirm).await {
        Ok(_) => None,
        Err(e) => code(&e),
    }
}

/// Ready messages in a queue (a passive declare).
pub async fn ready(ch: &lapin::Channel, queue: &str) -> u32 {
    within(ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    ))
    .await
    .expect("passive declare")
    .message_count()
}

/// Resident memory of this process (broker and clients), bytes.
pub fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Samples resident memory every 20 ms on a thread of its own, from `start` to `stop`.
pub struct PeakRss {
    /// Resident memory at the start, bytes.
    pub base: u64,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl PeakRss {
    pub fn start() -> PeakRss {
        use std::sync::atomic::Ordering;
        let base = rss();
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(base));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (peak, done) = (peak.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    peak.fetch_max(rss(), Ordering::AcqRel);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        PeakRss {
            base,
            peak,
            done,
            thread,
        }
    }

    /// Stops sampling; returns how far the peak rose above the start, bytes.
    pub fn stop(self) -> u64 {
        use std::sync::atomic::Ordering;
        self.done.store(true, Ordering::Release);
        let _ = self.thread.join();
        self.peak
            .load(Ordering::Acquire)
            .max(rss())
            .saturating_sub(self.base)
    }
}

/// Runs warren-perf against `url` (a separate process, so its memory is not the test's) and
/// returns its JSON summary; runs up to 600 s unless `args` set `-z`.
pub fn perf_json(url: &str, args: &[&str]) -> serde_json::Value {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_warren-perf"));
    cmd.args(["--uri", url, "--json", "-s", "16"]);
    if !args.contains(&"-z") {
        cmd.args(["-z", "600"]);
    }
    let out = cmd.args(args).output().expect("run warren-perf");
    assert!(
        out.status.success(),
        "warren-perf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json summary")
}

/// Runs 20,000 messages through the broker (warming up the allocator and the connection
/// paths), then starts sampling resident memory from there.
pub fn warm_up_and_sample(url: &str) -> PeakRss {
    let warm = [
        "-x",
        "1",
        "-y",
        "1",
        "--count",
        "20000",
        "--consume-count",
        "20000",
    ];
    perf_json(url, &warm);
    PeakRss::start()
}

/// A queue of the default vhost as the management API shows it.
pub async fn queue_json(b: &TestBroker, name: &str) -> serde_json::Value {
    let path = format!("/api/queues/%2f/{name}");
    let r = http::request(
        b.server.http_addr,
        "GET",
        &path,
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// The real `warren` binary, started on free loopback ports with its own data dir (killed when
/// dropped), for tests that kill it with SIGKILL.
pub struct Process {
    pub child: tokio::process::Child,
    /// AMQP URL of the default vhost.
    pub url: String,
    /// The management API's address.
    pub http: std::net::SocketAddr,
}

use cluster::free_port;

/// Starts the binary on `dir` and waits until AMQP and HTTP accept connections.
pub async fn spawn_binary(dir: &std::path::Path) -> Process {
    spawn_binary_on(dir, free_port(), free_port()).await
}

/// Starts the binary on `dir` with AMQP and HTTP on these loopback ports (the same ones
/// again after a kill, so what points at it finds it).
pub async fn spawn_binary_on(dir: &std::path::Path, amqp: u16, http: u16) -> Process {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--amqp-listen", &format!("127.0.0.1:{amqp}")])
        .args(["--http-listen", &format!("127.0.0.1:{http}")])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir)
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/warren.toml"),
        ])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn warren");
    for _ in 0..400 {
        let up = |port: u16| tokio::net::TcpStream::connect(("127.0.0.1", port));
        if up(amqp).await.is_ok() && up(http).await.is_ok() {
            return Process {
                child,
                url: format!("amqp://guest:guest@127.0.0.1:{amqp}/%2f"),
                http: std::net::SocketAddr::from(([127, 0, 0, 1], http)),
            };
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("warren did not come up");
}

/// Runs `warren --data-dir DIR ctl ARGS`: (exit code, stdout, stderr).
pub fn warren_ctl(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    warren_ctl_as("--data-dir", dir, args)
}

/// [`warren_ctl`] off the async runtime (the command blocks while the broker answers).
pub async fn warren_ctl_async(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let (dir, args): (std::path::PathBuf, Vec<String>) =
        (dir.to_owned(), args.iter().map(|s| s.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        warren_ctl(&dir, &args)
    })
    .await
    .expect("ctl task")
}

/// `warren --config CONFIG ctl ARGS`: exit code, stdout, stderr.
pub fn warren_ctl_with(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    warren_ctl_as("--config", config, args)
}

fn warren_ctl_as(option: &str, path: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .arg(option)
        .arg(path)
        .arg("ctl")
        .args(args)
        .output()
        .expect("run warren ctl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A test tool at `path` under the repository (in target/tools), installed by the project's
/// script `tests/tools/<installer>` on first use.
pub fn tool(path: &str, installer: &str) -> std::path::PathBuf {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join(path);
    if !bin.exists() {
        let status = std::process::Command::new(root.join("tests/tools").join(installer))
            .status()
            .unwrap_or_else(|e| panic!("run {installer}: {e}"));
        assert!(status.success(), "{installer} failed");
    }
    bin
}

/// Waits for a lapin connection's events (subscribed before the close is caused) to report a
/// server close; returns its reply code.
pub async fn server_close_code(
    mut events: impl futures_lite::Stream<Item = lapin::Event> + Unpin,
) -> Option<u16> {
    within(async {
        loop {
            match futures_lite::StreamExt::next(&mut events).await {
                Some(lapin::Event::Error(e)) => return code(&e),
                Some(_) => continue,
                None => return None,
            }
        }
    })
    .await
}

/// Percent-encodes a path segment.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
