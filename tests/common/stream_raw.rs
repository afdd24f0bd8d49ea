//! A raw stream protocol client: frames written and read by hand, for what the official Rust
//! client cannot show (single active consumer's `ConsumerUpdate`, credit and chunk framing).

use super::within;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Command keys the tests use.
pub const SUBSCRIBE: u16 = 0x0007;
pub const DELIVER: u16 = 0x0008;
pub const CREDIT: u16 = 0x0009;
pub const CONSUMER_UPDATE: u16 = 0x001a;
pub const RESPONSE: u16 = 0x8000;

/// An offset specification as a subscribe or a consumer update response carries it.
pub enum Offset {
    None,
    First,
    Next,
    At(u64),
}

impl Offset {
    fn encode(&self, b: &mut Vec<u8>) {
        match self {
            Offset::None => b.extend(0u16.to_be_bytes()),
            Offset::First => b.extend(1u16.to_be_bytes()),
            Offset::Next => b.extend(3u16.to_be_bytes()),
            Offset::At(o) => {
                b.extend(4u16.to_be_bytes());
                b.extend(o.to_be_bytes());
            }
        }
    }
}

/// A string as the protocol writes it.
pub fn string(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u16).to_be_bytes().to_vec();
    b.extend_from_slice(s.as_bytes());
    b
}

/// The key of a frame body.
pub fn frame_key(f: &[u8]) -> u16 {
    u16::from_be_bytes([f[0], f[1]])
}

/// A chunk a deliver frame carries: (subscription, first offset, records).
pub fn chunk_of(f: &[u8]) -> (u8, u64, u32) {
    // key, version, subscription, then the chunk header.
    let chunk = &f[5..];
    let n = u32::from_be_bytes(chunk[4..8].try_into().expect("4 bytes"));
    let first = u64::from_be_bytes(chunk[24..32].try_into().expect("8 bytes"));
    (f[4], first, n)
}

/// A raw connection.
pub struct StreamRaw {
    pub s: tokio::net::TcpStream,
    /// Frames read while waiting for another.
    unread: VecDeque<Vec<u8>>,
    corr: u32,
}

impl StreamRaw {
    pub async fn send(&mut self, body: &[u8]) {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        within(self.s.write_all(&f)).await.expect("write");
    }

    async fn read(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        within(self.s.read_exact(&mut len))
            .await
            .expect("frame size");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        within(self.s.read_exact(&mut body))
            .await
            .expect("frame body");
        body
    }

    /// The next frame (heartbeats skipped).
    pub async fn frame(&mut self) -> Vec<u8> {
        if let Some(f) = self.unread.pop_front() {
            return f;
        }
        loop {
            let f = self.read().await;
            if frame_key(&f) != 0x0017 {
                return f;
            }
        }
    }

    /// The next frame with key `k`; frames of other keys are kept for `frame`.
    pub async fn expect(&mut self, k: u16) -> Vec<u8> {
        if let Some(i) = self.unread.iter().position(|f| frame_key(f) == k) {
            return self.unread.remove(i).expect("present");
        }
        loop {
            let f = self.read().await;
            if frame_key(&f) == k {
                return f;
            }
            if frame_key(&f) != 0x0017 {
                self.unread.push_back(f);
            }
        }
    }

    /// Asserts no frame but heartbeats comes within `ms` milliseconds.
    pub async fn quiet(&mut self, ms: u64) {
        assert!(self.unread.is_empty(), "unread frames: {:?}", self.unread);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        loop {
            let mut len = [0u8; 4];
            match tokio::time::timeout_at(deadline, self.s.read_exact(&mut len)).await {
                Err(_) => return,
                Ok(r) => {
                    r.expect("frame size");
                }
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            within(self.s.read_exact(&mut body)).await.expect("body");
            assert_eq!(frame_key(&body), 0x0017, "a frame came: {body:?}");
        }
    }

    /// Sends a request (key, version 1, a fresh correlation id, `fields`) and returns the
    /// code of its response.
    pub async fn call(&mut self, k: u16, fields: &[u8]) -> u16 {
        self.call_full(k, fields).await.0
    }

    /// The same, returning the response's code and whole frame body.
    pub async fn call_full(&mut self, k: u16, fields: &[u8]) -> (u16, Vec<u8>) {
        self.corr += 1;
        let mut b = k.to_be_bytes().to_vec();
        b.extend(1u16.to_be_bytes());
        b.extend(self.corr.to_be_bytes());
        b.extend_from_slice(fields);
        self.send(&b).await;
        let r = self.expect(k | RESPONSE).await;
        assert_eq!(&r[4..8], &self.corr.to_be_bytes(), "the response to it");
        (u16::from_be_bytes([r[8], r[9]]), r)
    }

    /// Subscribes `id` to `stream` with `credit` chunks and `properties`; the response code.
    pub async fn subscribe(
        &mut self,
        id: u8,
        stream: &str,
        offset: Offset,
        credit: u16,
        properties: &[(&str, &str)],
    ) -> u16 {
        let mut f = vec![id];
        f.extend(string(stream));
        offset.encode(&mut f);
        f.extend(credit.to_be_bytes());
        f.extend((properties.len() as u32).to_be_bytes());
        for (k, v) in properties {
            f.extend(string(k));
            f.extend(string(v));
        }
        self.call(SUBSCRIBE, &f).await
    }

    /// Waits for a `ConsumerUpdate`: (correlation id, subscription, active).
    pub async fn consumer_update(&mut self) -> (u32, u8, bool) {
        let f = self.expect(CONSUMER_UPDATE).await;
        let corr = u32::from_be_bytes(f[4..8].try_into().expect("4 bytes"));
        (corr, f[8], f[9] == 1)
    }

    /// Answers a `ConsumerUpdate` with OK and `offset`.
    pub async fn answer_update(&mut self, corr: u32, offset: Offset) {
        let mut b = (CONSUMER_UPDATE | RESPONSE).to_be_bytes().to_vec();
        b.extend(1u16.to_be_bytes());
        b.extend(corr.to_be_bytes());
        b.extend(1u16.to_be_bytes());
        offset.encode(&mut b);
        self.send(&b).await;
    }

    /// Connects and runs the handshake as guest on vhost /.
    pub async fn open(addr: SocketAddr) -> StreamRaw {
        match StreamRaw::try_open(addr).await {
            Ok(r) => r,
            Err(c) => panic!("open answered {c:#x}"),
        }
    }

    /// The same, or the open's response code when it is refused.
    pub async fn try_open(addr: SocketAddr) -> Result<StreamRaw, u16> {
        let s = within(tokio::net::TcpStream::connect(addr))
            .await
            .expect("connect");
        let mut r = StreamRaw {
            s,
            unread: VecDeque::new(),
            corr: 100,
        };
        r.send(&[0, 0x11, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]).await;
        assert_eq!(&r.frame().await[..2], &[0x80, 0x11]);
        let mut auth = vec![0, 0x13, 0, 1, 0, 0, 0, 2];
        auth.extend(string("PLAIN"));
        auth.extend(12u32.to_be_bytes());
        auth.extend(b"\0guest\0guest");
        r.send(&auth).await;
        let ok = r.frame().await;
        assert_eq!(&ok[..2], &[0x80, 0x13]);
        assert_eq!(&ok[8..10], &[0, 1], "authenticated");
        assert_eq!(&r.frame().await[..2], &[0, 0x14], "the server's tune");
        r.send(&[0, 0x14, 0, 1, 0, 0x10, 0, 0, 0, 0, 0, 0]).await;
        let mut open = vec![0, 0x15, 0, 1, 0, 0, 0, 3];
        open.extend(string("/"));
        r.send(&open).await;
        let ok = r.frame().await;
        assert_eq!(&ok[..2], &[0x80, 0x15]);
        match u16::from_be_bytes([ok[8], ok[9]]) {
            1 => Ok(r),
            c => Err(c),
        }
    }
}
