//! A raw-socket AMQP client for bad-input tests: performs the handshake by hand, then lets the
//! test send arbitrary bytes and read back the frames (or the socket close) that result.

use amq_protocol::frame::{gen_frame, parsing::parse_frame, AMQPFrame};
use amq_protocol::protocol::{basic, channel, connection, AMQPClass};
use amq_protocol::types::FieldTable;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A raw connection.
pub struct Raw {
    pub sock: TcpStream,
    buf: Vec<u8>,
}

/// Serialises a frame with amq-protocol.
pub fn frame_bytes(f: &AMQPFrame) -> Vec<u8> {
    cookie_factory::gen_simple(gen_frame(f), Vec::new()).expect("gen")
}

/// A method frame.
pub fn method(channel: u16, m: AMQPClass) -> Vec<u8> {
    frame_bytes(&AMQPFrame::Method(channel, m))
}

/// basic.consume of `queue` on channel 1 with tag `tag`, acks required (no arguments).
pub fn consume(queue: &str, tag: &str) -> Vec<u8> {
    method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: queue.into(),
            consumer_tag: tag.into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        })),
    )
}

impl Raw {
    /// Connects without sending anything.
    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw {
            sock: TcpStream::connect(addr).await.expect("connect"),
            buf: Vec::new(),
        }
    }

    /// Connects and completes the handshake (PLAIN guest/guest, vhost /), opening channel 1.
    pub async fn open(addr: SocketAddr) -> Raw {
        let mut r = Raw::handshake(addr, 0).await;
        r.send(&method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        ))
        .await;
        assert!(matches!(
            r.frame().await,
            Some(AMQPFrame::Method(
                1,
                AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))
            ))
        ));
        r
    }

    /// Connects and completes the handshake with the given heartbeat, opening no channel.
    pub async fn handshake(addr: SocketAddr, heartbeat: u16) -> Raw {
        Raw::handshake_tuned(addr, heartbeat, None).await
    }

    /// The same, asking for a smaller frame_max than the broker offers.
    pub async fn handshake_tuned(addr: SocketAddr, heartbeat: u16, frame_max: Option<u32>) -> Raw {
        let mut r = Raw::connect(addr).await;
        r.send(b"AMQP\x00\x00\x09\x01").await;
        assert!(matches!(
            r.frame().await,
            Some(AMQPFrame::Method(
                0,
                AMQPClass::Connection(connection::AMQPMethod::Start(_))
            ))
        ));
        r.send(&method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "PLAIN".into(),
                response: "\0guest\0guest".into(),
                locale: "en_US".into(),
            })),
        ))
        .await;
        let tune = match r.frame().await {
            Some(AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Tune(t)))) => t,
            other => panic!("expected tune, got {other:?}"),
        };
        r.send(&method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max: frame_max.unwrap_or(tune.frame_max),
                heartbeat,
            })),
        ))
        .await;
        r.send(&method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: "/".into(),
            })),
        ))
        .await;
        assert!(matches!(
            r.frame().await,
            Some(AMQPFrame::Method(
                0,
                AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))
            ))
        ));
        r
    }

    /// Sends bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        let _ = self.sock.write_all(bytes).await;
    }

    /// Reads raw bytes until `n` are there or the socket closes (None then).
    pub async fn read_exact_bytes(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout(Duration::from_secs(10), self.sock.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(k)) => self.buf.extend_from_slice(&chunk[..k]),
                Err(_) => panic!("no reply within 10 s"),
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Reads the next non-heartbeat frame; None when the socket closed first.
    pub async fn frame(&mut self) -> Option<AMQPFrame> {
        loop {
            if let Ok((rest, f)) = parse_frame(self.buf.as_slice()) {
                let used = self.buf.len() - rest.len();
                self.buf.drain(..used);
                if matches!(f, AMQPFrame::Heartbeat) {
                    continue;
                }
                return Some(f);
            }
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout(Duration::from_secs(10), self.sock.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(k)) => self.buf.extend_from_slice(&chunk[..k]),
                Err(_) => panic!("no reply within 10 s"),
            }
        }
    }

    /// Reads frames until a connection.close arrives; returns its reply code (None: socket closed).
    pub async fn connection_close_code(&mut self) -> Option<u16> {
        loop {
            match self.frame().await? {
                AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => {
                    return Some(c.reply_code)
                }
                _ => continue,
            }
        }
    }

    /// Reads frames until a channel.close arrives; returns (channel, code).
    pub async fn channel_close_code(&mut self) -> Option<(u16, u16)> {
        loop {
            match self.frame().await? {
                AMQPFrame::Method(ch, AMQPClass::Channel(channel::AMQPMethod::Close(c))) => {
                    return Some((ch, c.reply_code))
                }
                AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => {
                    panic!(
                        "connection closed instead: {} {}",
                        c.reply_code, c.reply_text
                    )
                }
                _ => continue,
            }
        }
    }

    /// Whether the broker closed the socket (EOF) within a few seconds.
    pub async fn closed_by_peer(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.sock.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// A frame of any type around `payload`.
pub fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v.push(0xCE);
    v
}

/// An AMQP short string.
pub fn short_str(s: &[u8]) -> Vec<u8> {
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s);
    v
}

/// A method frame built by hand from its ids and encoded arguments.
pub fn raw_method(channel: u16, class: u16, id: u16, args: &[u8]) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(args);
    frame(1, channel, &p)
}

/// basic.publish on channel 1 to the default exchange with routing key `queue`.
pub fn publish_to(queue: &str) -> Vec<u8> {
    let mut args = vec![0, 0];
    args.extend(short_str(b""));
    args.extend(short_str(queue.as_bytes()));
    args.push(0);
    raw_method(1, 60, 40, &args)
}

/// A content header on channel 1 with no properties.
pub fn content_header(class: u16, body_size: u64) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&body_size.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    frame(2, 1, &p)
}
