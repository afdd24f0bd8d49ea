//! Load for `bench/stream_protocol`: one producer and one consumer on one stream over
//! RabbitMQ's stream protocol, written frame by frame so that any broker speaking the protocol
//! can be driven by the same code (the official Rust client asks every server for
//! `ExchangeCommandVersions`, which RabbitMQ 3.10 does not know, and gives up).
//!
//! The producer batches as the official clients do by default (`--batch` messages per publish
//! frame, 100 like the Java and Rust clients) and keeps at most `--window` messages unconfirmed;
//! each message is a minimal AMQP 1.0 message (one data section), as the clients encode it. The
//! consumer subscribes at `next` before the producer starts, with 10 chunks of credit and one
//! more per chunk received, as the clients do. Prints one JSON line: messages published,
//! confirmed and consumed, and the rates over the run.
//!
//! Usage: stream-perf --port P [--stream S] [--size B] [--duration S] [--window N] [--batch N]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    port: u16,
    stream: String,
    size: usize,
    duration: f64,
    window: usize,
    batch: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        port: 5552,
        stream: "perf".into(),
        size: 16,
        duration: 10.0,
        window: 10_000,
        batch: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {v}");
        match flag.as_str() {
            "--port" => a.port = v.parse().map_err(|_| bad())?,
            "--stream" => a.stream = v.clone(),
            "--size" => a.size = v.parse().map_err(|_| bad())?,
            "--duration" => a.duration = v.parse().map_err(|_| bad())?,
            "--window" => a.window = v.parse().map_err(|_| bad())?,
            "--batch" => a.batch = v.parse().map_err(|_| bad())?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.batch == 0 || a.batch > a.window || a.size > 255 - 5 {
        return Err("need 0 < batch <= window and size <= 250".into());
    }
    Ok(a)
}

/// Command keys of the stream protocol used here.
const DECLARE_PUBLISHER: u16 = 0x01;
const PUBLISH: u16 = 0x02;
const PUBLISH_CONFIRM: u16 = 0x03;
const PUBLISH_ERROR: u16 = 0x04;
const SUBSCRIBE: u16 = 0x07;
const DELIVER: u16 = 0x08;
const CREDIT: u16 = 0x09;
const CREATE: u16 = 0x0d;
const DELETE: u16 = 0x0e;
const PEER_PROPERTIES: u16 = 0x11;
const SASL_HANDSHAKE: u16 = 0x12;
const SASL_AUTHENTICATE: u16 = 0x13;
const TUNE: u16 = 0x14;
const OPEN: u16 = 0x15;
const HEARTBEAT: u16 = 0x17;
const RESPONSE: u16 = 0x8000;
/// Offset specification `next` in a subscribe request.
const OFFSET_NEXT: u16 = 3;

/// A request being built: key, version 1, then the fields in order.
struct Req(Vec<u8>);

impl Req {
    fn new(key: u16) -> Req {
        let mut b = Vec::with_capacity(64);
        b.extend(key.to_be_bytes());
        b.extend(1u16.to_be_bytes());
        Req(b)
    }
    fn u8(mut self, v: u8) -> Req {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Req {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Req {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn str(mut self, s: &str) -> Req {
        self.0.extend((s.len() as u16).to_be_bytes());
        self.0.extend(s.as_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Req {
        self.0.extend((b.len() as u32).to_be_bytes());
        self.0.extend(b);
        self
    }
    /// The frame on the wire: the size, then the request.
    fn frame(self) -> Vec<u8> {
        let mut f = (self.0.len() as u32).to_be_bytes().to_vec();
        f.extend(self.0);
        f
    }
}

/// One connection's halves after the handshake.
struct Conn {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
    correlation: u32,
}

impl Conn {
    async fn read_frame(&mut self, buf: &mut Vec<u8>) -> Result<(), Error> {
        let size = self.r.read_u32().await? as usize;
        buf.resize(size, 0);
        self.r.read_exact(buf).await?;
        if buf.len() < 4 {
            return Err("short frame".into());
        }
        Ok(())
    }

    /// Sends a request with the next correlation id after the key and version, and waits for
    /// its response (skipping heartbeats and tune); fails unless the response code is OK.
    async fn call(&mut self, key: u16, fields: impl FnOnce(Req) -> Req) -> Result<Vec<u8>, Error> {
        self.correlation += 1;
        let req = fields(Req::new(key).u32(self.correlation));
        self.w.write_all(&req.frame()).await?;
        let mut buf = Vec::new();
        loop {
            self.read_frame(&mut buf).await?;
            let k = u16::from_be_bytes([buf[0], buf[1]]);
            if k == key | RESPONSE {
                let code = buf.get(8..10).map(|c| u16::from_be_bytes([c[0], c[1]]));
                if code != Some(1) {
                    return Err(format!("{key:#06x} answered code {code:?}").into());
                }
                return Ok(buf);
            }
        }
    }

    /// Connects, authenticates as guest (PLAIN), tunes to the server's values and opens `/`.
    async fn open(port: u16) -> Result<Conn, Error> {
        let s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        let mut c = Conn {
            r: BufReader::with_capacity(1 << 20, r),
            w,
            correlation: 0,
        };
        c.call(PEER_PROPERTIES, |r| r.u32(0)).await?;
        c.call(SASL_HANDSHAKE, |r| r).await?;
        c.call(SASL_AUTHENTICATE, |r| {
            r.str("PLAIN").bytes(b"\0guest\0guest")
        })
        .await?;
        let mut buf = Vec::new();
        loop {
            c.read_frame(&mut buf).await?;
            if u16::from_be_bytes([buf[0], buf[1]]) == TUNE && buf.len() >= 12 {
                break;
            }
        }
        let tune = Req(buf[..12].to_vec()).frame();
        c.w.write_all(&tune).await?;
        c.call(OPEN, |r| r.str("/")).await?;
        Ok(c)
    }
}

/// The AMQP 1.0 encoding of a message with one data section holding `body` (under 256 B).
fn amqp_message(body: &[u8]) -> Vec<u8> {
    let mut m = vec![0x00, 0x53, 0x75, 0xa0, body.len() as u8];
    m.extend(body);
    m
}

/// Reads deliveries, counting records and granting one chunk of credit per chunk.
async fn consume(mut c: Conn, consumed: Arc<AtomicU64>) -> Result<(), Error> {
    let credit = Req::new(CREDIT).u8(0).u16(1).frame();
    let mut buf = Vec::new();
    loop {
        c.read_frame(&mut buf).await?;
        match u16::from_be_bytes([buf[0], buf[1]]) {
            // key, version, subscription id, then the chunk: magic and version, chunk type,
            // entries (u16), records (u32), ...
            DELIVER if buf.len() >= 13 => {
                let records = u32::from_be_bytes([buf[9], buf[10], buf[11], buf[12]]);
                consumed.fetch_add(u64::from(records), Ordering::Relaxed);
                c.w.write_all(&credit).await?;
            }
            HEARTBEAT => c.w.write_all(&Req::new(HEARTBEAT).frame()).await?,
            _ => {}
        }
    }
}

/// Reads confirms, returning their permits to the window; a publish error ends the run.
async fn confirms(
    mut c: BufReader<OwnedReadHalf>,
    window: Arc<Semaphore>,
    confirmed: Arc<AtomicU64>,
) -> Result<(), Error> {
    let mut buf = Vec::new();
    loop {
        let size = c.read_u32().await? as usize;
        buf.resize(size, 0);
        c.read_exact(&mut buf).await?;
        match buf.get(..2).map(|k| u16::from_be_bytes([k[0], k[1]])) {
            // key, version, publisher id, then an array of publishing ids.
            Some(PUBLISH_CONFIRM) if buf.len() >= 9 => {
                let n = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) as usize;
                confirmed.fetch_add(n as u64, Ordering::Relaxed);
                window.add_permits(n);
            }
            Some(PUBLISH_ERROR) => return Err("publish error".into()),
            _ => {}
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let a = args()?;
    let mut admin = Conn::open(a.port).await?;
    let _ = admin.call(DELETE, |r| r.str(&a.stream)).await;
    admin.call(CREATE, |r| r.str(&a.stream).u32(0)).await?;

    let consumed = Arc::new(AtomicU64::new(0));
    let mut sub = Conn::open(a.port).await?;
    sub.call(SUBSCRIBE, |r| {
        r.u8(0).str(&a.stream).u16(OFFSET_NEXT).u16(10).u32(0)
    })
    .await?;
    let reader = tokio::spawn(consume(sub, consumed.clone()));

    let mut publisher = Conn::open(a.port).await?;
    publisher
        .call(DECLARE_PUBLISHER, |r| r.u8(0).str("").str(&a.stream))
        .await?;
    let window = Arc::new(Semaphore::new(a.window));
    let confirmed = Arc::new(AtomicU64::new(0));
    let Conn { r, mut w, .. } = publisher;
    let confirmer = tokio::spawn(confirms(r, window.clone(), confirmed.clone()));

    let message = amqp_message(&vec![b'x'; a.size]);
    let per_message = 8 + 4 + message.len();
    let mut frame = Vec::with_capacity(4 + 9 + a.batch * per_message);
    let start = Instant::now();
    let run = Duration::from_secs_f64(a.duration);
    let mut published = 0u64;
    while start.elapsed() < run {
        window.acquire_many(a.batch as u32).await?.forget();
        frame.clear();
        frame.extend(((4 + 1 + 4 + a.batch * per_message) as u32).to_be_bytes());
        frame.extend(PUBLISH.to_be_bytes());
        frame.extend(1u16.to_be_bytes());
        frame.push(0);
        frame.extend((a.batch as u32).to_be_bytes());
        for _ in 0..a.batch {
            frame.extend(published.to_be_bytes());
            frame.extend((message.len() as u32).to_be_bytes());
            frame.extend(&message);
            published += 1;
        }
        w.write_all(&frame).await?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Confirms still in flight arrive within a second; the rate counts the run only.
    let confirmed_in_run = confirmed.load(Ordering::Relaxed);
    let wait = Instant::now();
    while confirmed.load(Ordering::Relaxed) < published && wait.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let confirmed_n = confirmed.load(Ordering::Relaxed);
    // Let the consumer catch up with what was confirmed (at most 30 s).
    let wait = Instant::now();
    while consumed.load(Ordering::Relaxed) < confirmed_n && wait.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let consumed_n = consumed.load(Ordering::Relaxed);
    let total = start.elapsed().as_secs_f64();
    println!(
        "{{\"published\": {published}, \"confirmed\": {confirmed_n}, \"consumed\": {consumed_n}, \
         \"publish_rate\": {:.1}, \"consume_rate\": {:.1}, \"seconds\": {elapsed:.3}}}",
        confirmed_in_run as f64 / elapsed,
        consumed_n as f64 / total,
    );
    reader.abort();
    confirmer.abort();
    let _ = admin.call(DELETE, |r| r.str(&a.stream)).await;
    if confirmed_n < published {
        return Err(format!(
            "{} of {published} publishes unconfirmed",
            published - confirmed_n
        )
        .into());
    }
    Ok(())
}
