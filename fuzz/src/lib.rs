//! Shared harness of the fuzz targets: one broker per process (temp data dir, current-thread
//! runtime), a way to run a whole client byte stream through a real connection, and a valid
//! handshake prefix for targets that fuzz what follows it.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren::broker::Broker;

/// The process-wide runtime and broker.
pub struct Harness {
    /// Drives the broker's tasks while an input runs.
    pub runtime: tokio::runtime::Runtime,
    /// The broker under test.
    pub broker: Arc<Broker>,
    _dir: tempfile::TempDir,
}

/// The harness, created on first use.
pub fn harness() -> &'static Harness {
    static H: OnceLock<Harness> = OnceLock::new();
    H.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = warren::config::Config {
            data_dir: dir.path().to_owned(),
            heartbeat: 0,
            ..Default::default()
        };
        let broker = runtime.block_on(async { Broker::open(config).expect("broker opens") });
        Harness {
            runtime,
            broker,
            _dir: dir,
        }
    })
}

/// Feeds `input` to a fresh connection as the client's whole byte stream, then end of file,
/// and drains what the broker answers. The connection must end: a hang is a failure.
pub fn run_stream(input: &[u8]) {
    let h = harness();
    h.runtime.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let conn = tokio::spawn(warren::amqp::serve_stream(h.broker.clone(), server, peer));
        let (mut rd, mut wr) = tokio::io::split(client);
        let drain = tokio::spawn(async move {
            let mut sink = vec![0u8; 1 << 16];
            while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {}
        });
        let _ = wr.write_all(input).await;
        let _ = wr.shutdown().await;
        let ended = tokio::time::timeout(Duration::from_secs(20), async {
            let _ = conn.await;
            let _ = drain.await;
        })
        .await;
        assert!(
            ended.is_ok(),
            "the connection did not end after end of input"
        );
    });
}

fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v.push(0xCE);
    v
}

fn method(channel: u16, class: u16, id: u16, args: &[u8]) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(args);
    frame(1, channel, &p)
}

fn short(s: &[u8]) -> Vec<u8> {
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s);
    v
}

/// Protocol header, start-ok (PLAIN guest), tune-ok, connection.open and channel.open 1.
pub fn handshake() -> Vec<u8> {
    let mut out = b"AMQP\x00\x00\x09\x01".to_vec();
    let mut start_ok = vec![0, 0, 0, 0];
    start_ok.extend(short(b"PLAIN"));
    let resp = b"\0guest\0guest";
    start_ok.extend_from_slice(&(resp.len() as u32).to_be_bytes());
    start_ok.extend_from_slice(resp);
    start_ok.extend(short(b"en_US"));
    out.extend(method(0, 10, 11, &start_ok));
    let mut tune_ok = 2047u16.to_be_bytes().to_vec();
    tune_ok.extend_from_slice(&131_072u32.to_be_bytes());
    tune_ok.extend_from_slice(&0u16.to_be_bytes());
    out.extend(method(0, 10, 31, &tune_ok));
    let mut open = short(b"/");
    open.extend(short(b""));
    open.push(0);
    out.extend(method(0, 10, 40, &open));
    out.extend(method(1, 20, 10, &short(b"")));
    out
}

/// The handshake, then basic.publish on channel 1 to queue "fuzz" through the default exchange
/// (declared first), ready for content frames.
pub fn publish_prefix() -> Vec<u8> {
    let mut out = handshake();
    let mut declare = vec![0, 0];
    declare.extend(short(b"fuzz"));
    declare.extend_from_slice(&[0, 0, 0, 0, 0]);
    out.extend(method(1, 50, 10, &declare));
    let mut publish = vec![0, 0];
    publish.extend(short(b""));
    publish.extend(short(b"fuzz"));
    publish.push(0);
    out.extend(method(1, 60, 40, &publish));
    out
}
