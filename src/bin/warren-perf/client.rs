//! A minimal AMQP 0-9-1 client for the load tool: handshake, synchronous calls, and raw access
//! to the socket so publishers and consumers can pipeline without per-message round trips.
//! Frames are encoded and decoded with Warren's own codec (itself built on amq-protocol).

use amq_protocol::protocol::{channel, connection, AMQPClass};
use amq_protocol::types::FieldTable;
use bytes::BytesMut;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use warren::amqp::codec::{self, Frame};

/// An open connection with channel 1 open.
pub struct Client {
    pub rd: OwnedReadHalf,
    pub wr: OwnedWriteHalf,
    pub rbuf: BytesMut,
    pub frame_max: u32,
}

fn err(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

/// Parsed `amqp://user:pass@host:port/vhost`.
pub struct Uri {
    pub addr: String,
    pub user: String,
    pub pass: String,
    pub vhost: String,
}

impl Uri {
    pub fn parse(uri: &str) -> io::Result<Uri> {
        let rest = uri
            .strip_prefix("amqp://")
            .ok_or_else(|| err("uri must start with amqp://"))?;
        let (auth, host) = match rest.rsplit_once('@') {
            Some((a, h)) => (a, h),
            None => ("guest:guest", rest),
        };
        let (user, pass) = auth.split_once(':').unwrap_or((auth, ""));
        let (addr, vhost) = match host.split_once('/') {
            Some((a, v)) => (a, v.replace("%2f", "/").replace("%2F", "/")),
            None => (host, "/".to_owned()),
        };
        let vhost = if vhost.is_empty() {
            "/".to_owned()
        } else {
            vhost
        };
        Ok(Uri {
            addr: if addr.contains(':') {
                addr.to_owned()
            } else {
                format!("{addr}:5672")
            },
            user: user.to_owned(),
            pass: pass.to_owned(),
            vhost,
        })
    }
}

impl Client {
    pub async fn connect(uri: &Uri) -> io::Result<Client> {
        let sock = TcpStream::connect(&uri.addr).await?;
        sock.set_nodelay(true)?;
        let (rd, wr) = sock.into_split();
        let mut c = Client {
            rd,
            wr,
            rbuf: BytesMut::with_capacity(1 << 20),
            frame_max: 131_072,
        };
        c.wr.write_all(b"AMQP\x00\x00\x09\x01").await?;
        c.expect(0).await?;
        let response = format!("\0{}\0{}", uri.user, uri.pass);
        c.send(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: FieldTable::default(),
                mechanism: "PLAIN".into(),
                response: response.into(),
                locale: "en_US".into(),
            })),
        )
        .await?;
        let tune = match c.expect(0).await? {
            AMQPClass::Connection(connection::AMQPMethod::Tune(t)) => t,
            other => return Err(err(format!("expected tune, got {other:?}"))),
        };
        c.frame_max = tune.frame_max.min(131_072);
        c.send(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max: c.frame_max,
                heartbeat: 0,
            })),
        )
        .await?;
        c.call(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: uri.vhost.as_str().into(),
            })),
        )
        .await?;
        c.call(
            1,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        )
        .await?;
        Ok(c)
    }

    /// Sends one method.
    pub async fn send(&mut self, ch: u16, m: AMQPClass) -> io::Result<()> {
        let mut out = BytesMut::new();
        codec::encode_method(&mut out, ch, &m);
        self.wr.write_all(&out).await
    }

    /// Reads the next frame.
    pub async fn frame(&mut self) -> io::Result<Frame> {
        loop {
            match codec::decode(&mut self.rbuf, 0) {
                Ok(Some(Frame::Heartbeat(_))) => continue,
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(e) => return Err(err(e.text)),
            }
            if self.rd.read_buf(&mut self.rbuf).await? == 0 {
                return Err(err("connection closed by the broker"));
            }
        }
    }

    /// Reads the next method on `ch`, failing on a close.
    pub async fn expect(&mut self, ch: u16) -> io::Result<AMQPClass> {
        loop {
            if let Frame::Method(c, m) = self.frame().await? {
                match *m {
                    AMQPClass::Connection(connection::AMQPMethod::Close(cl)) => {
                        return Err(err(format!(
                            "connection closed: {} {}",
                            cl.reply_code, cl.reply_text
                        )))
                    }
                    AMQPClass::Channel(channel::AMQPMethod::Close(cl)) => {
                        return Err(err(format!(
                            "channel closed: {} {}",
                            cl.reply_code, cl.reply_text
                        )))
                    }
                    m if c == ch => return Ok(m),
                    _ => {}
                }
            }
        }
    }

    /// Sends a method and waits for its reply.
    pub async fn call(&mut self, ch: u16, m: AMQPClass) -> io::Result<AMQPClass> {
        self.send(ch, m).await?;
        self.expect(ch).await
    }
}
