//! One client connection: the handshake, synchronous calls on a channel, and the socket's two
//! halves and read buffer in the open, so a caller that streams (the load tool's publishers,
//! a shovel) can pipeline without a round trip per message and batch its writes.

use super::uri::AmqpUri;
use crate::amqp::codec::{self, Frame};
use amq_protocol::protocol::{channel, connection, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::BytesMut;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The read half of a client connection.
pub type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
/// The write half of a client connection.
pub type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

/// The largest frame this client asks for.
const FRAME_MAX: u32 = 131_072;
/// The heartbeat proposed when the URI names none (the Erlang client's default).
const DEFAULT_HEARTBEAT: u16 = 10;
/// How long connecting and the handshake may take when the URI names no limit.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// An open connection with channel 1 open.
pub struct Client {
    /// The socket's read half.
    pub rd: ReadHalf,
    /// The socket's write half.
    pub wr: WriteHalf,
    /// What was read and not yet decoded.
    pub rbuf: BytesMut,
    /// The negotiated frame size.
    pub frame_max: u32,
    /// The negotiated heartbeat timeout in seconds (0: none).
    pub heartbeat: u16,
    /// The server's properties from connection.start.
    pub server_properties: FieldTable,
}

/// The server closed the connection (`channel` None) or a channel: the client's typed error,
/// inside the `io::Error` its calls return ([`Closed::of`] finds it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} closed by the server: {code} {text}", if channel.is_some() { "channel" } else { "connection" })]
pub struct Closed {
    /// The channel, or None for the connection.
    pub channel: Option<u16>,
    /// The reply code.
    pub code: u16,
    /// The reply text.
    pub text: String,
}

impl Closed {
    /// The close inside an error the client returned, if that is what it was.
    pub fn of(e: &io::Error) -> Option<&Closed> {
        e.get_ref()?.downcast_ref::<Closed>()
    }
}

/// An error as text (the client's errors are reported, not matched on).
pub fn err(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

/// What the client tells the server about itself.
fn client_properties(connection_name: &str) -> FieldTable {
    let mut caps = FieldTable::default();
    for c in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
    ] {
        caps.insert(c.into(), AMQPValue::Boolean(true));
    }
    let text = |s: &str| AMQPValue::LongString(s.as_bytes().to_vec().into());
    let mut p = FieldTable::default();
    p.insert("product".into(), text("Warren"));
    p.insert("version".into(), text(env!("CARGO_PKG_VERSION")));
    p.insert("platform".into(), text("Rust"));
    p.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    if !connection_name.is_empty() {
        p.insert("connection_name".into(), text(connection_name));
    }
    p
}

impl Client {
    /// Connects as the load tool does: no client properties (so no capabilities: a deleted
    /// queue sends no basic.cancel), heartbeats off.
    pub async fn connect(uri: &AmqpUri) -> io::Result<Client> {
        Self::open(uri, None, Some(0)).await
    }

    /// Connects, names the connection, and negotiates heartbeats as RabbitMQ's client does
    /// (the URI's `heartbeat`, else 10 s; the lower of both sides unless one is 0).
    pub async fn connect_named(uri: &AmqpUri, name: &str) -> io::Result<Client> {
        Self::open(uri, Some(name), uri.heartbeat).await
    }

    async fn open(uri: &AmqpUri, name: Option<&str>, heartbeat: Option<u16>) -> io::Result<Client> {
        if uri.is_local() {
            return Err(err(
                "a URI naming the local node (no host) needs that node's address (AmqpUri::at)",
            ));
        }
        let limit = uri
            .connection_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        tokio::time::timeout(limit, Self::handshake(uri, name, heartbeat))
            .await
            .map_err(|_| err("timed out connecting"))?
    }

    async fn handshake(
        uri: &AmqpUri,
        name: Option<&str>,
        heartbeat: Option<u16>,
    ) -> io::Result<Client> {
        let sock = TcpStream::connect(uri.address()).await?;
        sock.set_nodelay(true)?;
        let (rd, wr): (ReadHalf, WriteHalf) = if uri.tls {
            let (rd, wr) = tokio::io::split(super::tls::connect(uri, sock).await?);
            (Box::new(rd), Box::new(wr))
        } else {
            let (rd, wr) = sock.into_split();
            (Box::new(rd), Box::new(wr))
        };
        let mut c = Client {
            rd,
            wr,
            rbuf: BytesMut::with_capacity(1 << 20),
            frame_max: FRAME_MAX,
            heartbeat: 0,
            server_properties: FieldTable::default(),
        };
        c.wr.write_all(b"AMQP\x00\x00\x09\x01").await?;
        match c.expect(0).await? {
            AMQPClass::Connection(connection::AMQPMethod::Start(s)) => {
                c.server_properties = s.server_properties;
            }
            other => return Err(err(format!("expected connection.start, got {other:?}"))),
        }
        let (mechanism, response) = match uri.external {
            true => ("EXTERNAL", String::new()),
            false => ("PLAIN", format!("\0{}\0{}", uri.user, uri.password)),
        };
        c.send(
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
                client_properties: name.map(client_properties).unwrap_or_default(),
                mechanism: mechanism.into(),
                response: response.into(),
                locale: "en_US".into(),
            })),
        )
        .await?;
        let tune = match c.expect(0).await? {
            AMQPClass::Connection(connection::AMQPMethod::Tune(t)) => t,
            other => return Err(err(format!("expected connection.tune, got {other:?}"))),
        };
        c.frame_max = match tune.frame_max {
            0 => FRAME_MAX,
            n => n.min(FRAME_MAX),
        };
        c.heartbeat = match (heartbeat, tune.heartbeat) {
            (Some(0), _) => 0,
            (ours, 0) => ours.unwrap_or(DEFAULT_HEARTBEAT),
            (ours, theirs) => ours.unwrap_or(DEFAULT_HEARTBEAT).min(theirs),
        };
        c.send(
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
                channel_max: tune.channel_max,
                frame_max: c.frame_max,
                heartbeat: c.heartbeat,
            })),
        )
        .await?;
        let vhost = crate::shortstr::truncated(&uri.vhost);
        c.call(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
                virtual_host: vhost.into(),
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

    /// Reads the next method on `ch`. A close of the connection or of a channel is answered
    /// (close-ok) and returned as a [`Closed`] error.
    pub async fn expect(&mut self, ch: u16) -> io::Result<AMQPClass> {
        loop {
            if let Frame::Method(c, m) = self.frame().await? {
                if let Some(closed) = self.answer_close(c, &m).await? {
                    return Err(io::Error::other(closed));
                }
                if c == ch {
                    return Ok(*m);
                }
            }
        }
    }

    /// When `m` closes the connection or channel `c`: answers it, and returns what closed.
    pub async fn answer_close(&mut self, c: u16, m: &AMQPClass) -> io::Result<Option<Closed>> {
        let closed = match m {
            AMQPClass::Connection(connection::AMQPMethod::Close(cl)) => {
                let ok = connection::AMQPMethod::CloseOk(connection::CloseOk {});
                self.send(0, AMQPClass::Connection(ok)).await?;
                Closed {
                    channel: None,
                    code: cl.reply_code,
                    text: cl.reply_text.to_string(),
                }
            }
            AMQPClass::Channel(channel::AMQPMethod::Close(cl)) => {
                let ok = channel::AMQPMethod::CloseOk(channel::CloseOk {});
                self.send(c, AMQPClass::Channel(ok)).await?;
                Closed {
                    channel: Some(c),
                    code: cl.reply_code,
                    text: cl.reply_text.to_string(),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(closed))
    }

    /// Opens channel `ch`.
    pub async fn open_channel(&mut self, ch: u16) -> io::Result<()> {
        let open = channel::AMQPMethod::Open(channel::Open {});
        self.call(ch, AMQPClass::Channel(open)).await.map(drop)
    }

    /// Closes channel `ch` (waiting for its close-ok).
    pub async fn close_channel(&mut self, ch: u16) -> io::Result<()> {
        let close = channel::AMQPMethod::Close(channel::Close {
            reply_code: 200,
            reply_text: "Goodbye".into(),
            class_id: 0,
            method_id: 0,
        });
        self.call(ch, AMQPClass::Channel(close)).await.map(drop)
    }

    /// Sends a method and waits for its reply.
    pub async fn call(&mut self, ch: u16, m: AMQPClass) -> io::Result<AMQPClass> {
        self.send(ch, m).await?;
        self.expect(ch).await
    }

    /// Closes the connection politely (close, then close-ok or a short wait).
    pub async fn close(mut self, text: &str) {
        let close = AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: crate::shortstr::truncated(text).into(),
            class_id: 0,
            method_id: 0,
        }));
        let polite = async {
            self.send(0, close).await?;
            loop {
                if let Frame::Method(0, m) = self.frame().await? {
                    if matches!(
                        *m,
                        AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))
                    ) {
                        return io::Result::Ok(());
                    }
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), polite).await;
    }
}
