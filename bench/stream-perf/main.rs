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
//! `--mode fill` only publishes, into the stream as it is (created when missing), until
//! `--fill-bytes` of message bodies are confirmed; `--mode attach` times subscribing at
//! `--offset` and at `--timestamp` (ms) in an existing stream: from the subscribe request to
//! the first chunk, each of `--attempts` on a fresh connection, checking that the chunk holds
//! the offset asked for (`bench/stream_large`); `--mode read` has `--consumers` connections
//! each read an existing stream from `first` until they got `--expect` messages, and reports
//! the aggregate rate (`bench/stream_protocol`'s fan-out).
//!
//! Usage: stream-perf --port P [--stream S] [--size B] [--duration S] [--window N] [--batch N]
//!        [--mode run|fill|attach|read] [--fill-bytes N] [--offset O] [--timestamp MS]
//!        [--attempts N] [--consumers N] [--expect N]

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
    mode: String,
    fill_bytes: u64,
    offset: u64,
    timestamp: i64,
    attempts: usize,
    consumers: usize,
    expect: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        port: 5552,
        stream: "perf".into(),
        size: 16,
        duration: 10.0,
        window: 10_000,
        batch: 100,
        mode: "run".into(),
        fill_bytes: 0,
        offset: 0,
        timestamp: 0,
        attempts: 10,
        consumers: 1,
        expect: 0,
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
            "--mode" => a.mode = v.clone(),
            "--fill-bytes" => a.fill_bytes = v.parse().map_err(|_| bad())?,
            "--offset" => a.offset = v.parse().map_err(|_| bad())?,
            "--timestamp" => a.timestamp = v.parse().map_err(|_| bad())?,
            "--attempts" => a.attempts = v.parse().map_err(|_| bad())?,
            "--consumers" => a.consumers = v.parse().map_err(|_| bad())?,
            "--expect" => a.expect = v.parse().map_err(|_| bad())?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.batch == 0 || a.batch > a.window || a.size > 1 << 20 {
        return Err("need 0 < batch <= window and size <= 1 MiB".into());
    }
    Ok(a)
}

/// Command keys of the stream protocol used here.
const DECLARE_PUBLISHER: u16 = 0x01;
const UNSUBSCRIBE: u16 = 0x0c;
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
/// Offset specifications in a subscribe request: `first`, `next`, an offset, a timestamp.
const OFFSET_FIRST: u16 = 1;
const OFFSET_NEXT: u16 = 3;
const OFFSET_AT: u16 = 4;
const OFFSET_TIMESTAMP: u16 = 5;

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
    fn u64(mut self, v: u64) -> Req {
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

/// The AMQP 1.0 encoding of a message with one data section holding `body`.
fn amqp_message(body: &[u8]) -> Vec<u8> {
    let mut m = vec![0x00, 0x53, 0x75];
    match u8::try_from(body.len()) {
        Ok(n) => m.extend([0xa0, n]),
        Err(_) => {
            m.push(0xb0);
            m.extend((body.len() as u32).to_be_bytes());
        }
    }
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
    match a.mode.as_str() {
        "run" => run(a).await,
        "fill" => fill(a).await,
        "attach" => attach(a).await,
        "read" => read(a).await,
        other => Err(format!("unknown mode {other}").into()),
    }
}

/// Publishes `--size` B messages into the stream until `--fill-bytes` of bodies are confirmed.
async fn fill(a: Args) -> Result<(), Error> {
    let mut admin = Conn::open(a.port).await?;
    let _ = admin.call(CREATE, |r| r.str(&a.stream).u32(0)).await;
    let Publisher {
        mut w,
        window,
        confirmed,
        confirmer,
    } = publisher(&a).await?;
    let message = amqp_message(&vec![b'x'; a.size]);
    let mut frame = publish_frame(&message, a.batch);
    let target = a.fill_bytes.div_ceil(a.size.max(1) as u64);
    let first_ms = now_ms();
    let start = Instant::now();
    let mut published = 0u64;
    while published < target {
        window.acquire_many(a.batch as u32).await?.forget();
        number_batch(&mut frame, message.len(), a.batch, &mut published);
        w.write_all(&frame).await?;
    }
    while confirmed.load(Ordering::Relaxed) < published {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    confirmer.abort();
    println!(
        "{{\"published\": {published}, \"bytes\": {}, \"seconds\": {seconds:.3}, \
         \"first_ms\": {first_ms}, \"last_ms\": {}}}",
        published * a.size as u64,
        now_ms()
    );
    Ok(())
}

/// A declared publisher (id 0) on the stream: where to write, its confirm window, what was
/// confirmed, and the task reading the confirms.
struct Publisher {
    w: OwnedWriteHalf,
    window: Arc<Semaphore>,
    confirmed: Arc<AtomicU64>,
    confirmer: tokio::task::JoinHandle<Result<(), Error>>,
}

async fn publisher(a: &Args) -> Result<Publisher, Error> {
    let mut c = Conn::open(a.port).await?;
    c.call(DECLARE_PUBLISHER, |r| r.u8(0).str("").str(&a.stream))
        .await?;
    let window = Arc::new(Semaphore::new(a.window));
    let confirmed = Arc::new(AtomicU64::new(0));
    let Conn { r, w, .. } = c;
    let confirmer = tokio::spawn(confirms(r, window.clone(), confirmed.clone()));
    Ok(Publisher {
        w,
        window,
        confirmed,
        confirmer,
    })
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A publish frame of `batch` copies of `message` (publisher 0), ids filled in by
/// [`number_batch`].
fn publish_frame(message: &[u8], batch: usize) -> Vec<u8> {
    let per_message = 8 + 4 + message.len();
    let mut frame = Vec::with_capacity(4 + 9 + batch * per_message);
    frame.extend(((4 + 1 + 4 + batch * per_message) as u32).to_be_bytes());
    frame.extend(PUBLISH.to_be_bytes());
    frame.extend(1u16.to_be_bytes());
    frame.push(0);
    frame.extend((batch as u32).to_be_bytes());
    for _ in 0..batch {
        frame.extend(0u64.to_be_bytes());
        frame.extend((message.len() as u32).to_be_bytes());
        frame.extend(message);
    }
    frame
}

/// Writes the next `batch` publishing ids into a frame from [`publish_frame`].
fn number_batch(frame: &mut [u8], message_len: usize, batch: usize, next: &mut u64) {
    let per_message = 8 + 4 + message_len;
    for i in 0..batch {
        let at = 13 + i * per_message;
        frame[at..at + 8].copy_from_slice(&next.to_be_bytes());
        *next += 1;
    }
}

/// Times `--attempts` subscriptions at `--offset` and as many at `--timestamp`.
async fn attach(a: Args) -> Result<(), Error> {
    let mut by_offset = Vec::new();
    let mut by_time = Vec::new();
    for _ in 0..a.attempts {
        by_offset.push(attach_once(&a, OFFSET_AT, a.offset).await?);
        by_time.push(attach_once(&a, OFFSET_TIMESTAMP, a.timestamp as u64).await?);
    }
    let ms = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{{\"offset_ms\": [{}], \"timestamp_ms\": [{}]}}",
        ms(&by_offset),
        ms(&by_time)
    );
    Ok(())
}

/// One subscription on a fresh connection: milliseconds from the request to the first chunk.
async fn attach_once(a: &Args, kind: u16, value: u64) -> Result<f64, Error> {
    let mut c = Conn::open(a.port).await?;
    let start = Instant::now();
    c.call(SUBSCRIBE, |r| {
        r.u8(0).str(&a.stream).u16(kind).u64(value).u16(1).u32(0)
    })
    .await?;
    let mut buf = Vec::new();
    loop {
        c.read_frame(&mut buf).await?;
        if u16::from_be_bytes([buf[0], buf[1]]) == DELIVER && buf.len() >= 37 {
            break;
        }
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    // key, version, subscription, then the chunk header: records at 4, first offset at 24.
    let records = u64::from(u32::from_be_bytes([buf[9], buf[10], buf[11], buf[12]]));
    let mut first = [0u8; 8];
    first.copy_from_slice(&buf[29..37]);
    let first = u64::from_be_bytes(first);
    if kind == OFFSET_AT && !(first <= value && value < first + records) {
        return Err(format!("asked for {value}, got chunk {first} (+{records})").into());
    }
    c.call(UNSUBSCRIBE, |r| r.u8(0)).await?;
    Ok(ms)
}

/// One producer and one consumer for `--duration`.
async fn run(a: Args) -> Result<(), Error> {
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

    let Publisher {
        mut w,
        window,
        confirmed,
        confirmer,
    } = publisher(&a).await?;

    let message = amqp_message(&vec![b'x'; a.size]);
    let mut frame = publish_frame(&message, a.batch);
    let start = Instant::now();
    let run = Duration::from_secs_f64(a.duration);
    let mut published = 0u64;
    while start.elapsed() < run {
        window.acquire_many(a.batch as u32).await?.forget();
        number_batch(&mut frame, message.len(), a.batch, &mut published);
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

/// `--consumers` connections read the stream from `first` at once, each until it got
/// `--expect` messages: the time from the first subscription to the last reader done.
async fn read(a: Args) -> Result<(), Error> {
    if a.expect == 0 || a.consumers == 0 {
        return Err("--mode read needs --expect and --consumers above 0".into());
    }
    let mut conns = Vec::new();
    for _ in 0..a.consumers {
        conns.push(Conn::open(a.port).await?);
    }
    let start = Instant::now();
    let mut counts = Vec::new();
    let mut readers = Vec::new();
    for mut c in conns {
        c.call(SUBSCRIBE, |r| {
            r.u8(0).str(&a.stream).u16(OFFSET_FIRST).u16(10).u32(0)
        })
        .await?;
        let consumed = Arc::new(AtomicU64::new(0));
        counts.push(consumed.clone());
        readers.push(tokio::spawn(consume(c, consumed)));
    }
    let limit = Duration::from_secs_f64(a.duration.max(60.0));
    while counts.iter().any(|c| c.load(Ordering::Relaxed) < a.expect) {
        if start.elapsed() > limit || readers.iter().any(|r| r.is_finished()) {
            return Err("the readers did not get every message".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let total: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    println!(
        "{{\"consumers\": {}, \"consumed\": {total}, \"seconds\": {seconds:.3}, \"rate\": {:.1}}}",
        a.consumers,
        total as f64 / seconds
    );
    for r in readers {
        r.abort();
    }
    Ok(())
}
