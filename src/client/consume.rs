//! What a task consuming over the client reads, shared by the relay (shovels, federation)
//! and the shovel's webhook destination: deliveries assembled from their frames
//! ([`Assembler`]), a connection's buffer filled and decoded, and heartbeat timing.

use super::Client;
use crate::amqp::codec::{self, Frame};
use amq_protocol::protocol::{basic, AMQPClass};
use bytes::{Bytes, BytesMut};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// A delivery from the source, complete or being assembled.
pub struct Incoming {
    /// Its delivery tag.
    pub tag: u64,
    /// The source's redelivered flag.
    pub redelivered: bool,
    /// The exchange it was published to.
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// Its encoded properties.
    pub props: Bytes,
    size: usize,
    /// Its body.
    pub body: BytesMut,
}

/// Assembles the deliveries of a consumer from its frames.
#[derive(Default)]
pub struct Assembler {
    incoming: Option<Incoming>,
}

impl Assembler {
    /// Takes one frame; a delivery once its last frame came. Err when the source cancelled
    /// the consumer or sent a bad frame.
    pub fn feed(&mut self, f: Frame) -> Result<Option<Incoming>, String> {
        match f {
            Frame::Method(_, m) => match *m {
                AMQPClass::Basic(basic::AMQPMethod::Deliver(d)) => {
                    self.incoming = Some(Incoming {
                        tag: d.delivery_tag,
                        redelivered: d.redelivered,
                        exchange: d.exchange.to_string(),
                        routing_key: d.routing_key.to_string(),
                        props: Bytes::new(),
                        size: 0,
                        body: BytesMut::new(),
                    });
                }
                AMQPClass::Basic(basic::AMQPMethod::Cancel(_)) => {
                    return Err("the source cancelled the consumer".into())
                }
                _ => {}
            },
            Frame::Header(_, h) => {
                if let Some(m) = &mut self.incoming {
                    m.props = h.raw_properties.clone();
                    m.size = usize::try_from(h.body_size).unwrap_or(usize::MAX);
                    m.body.reserve(m.size.min(1 << 20));
                    if m.size == 0 {
                        return Ok(self.incoming.take());
                    }
                }
            }
            Frame::Body(_, b) => {
                if let Some(m) = &mut self.incoming {
                    m.body.extend_from_slice(&b);
                    if m.body.len() >= m.size {
                        return Ok(self.incoming.take());
                    }
                }
            }
            Frame::Heartbeat(_) => {}
            Frame::Refused(_, e) => return Err(failed("the source sent a bad frame", e.text)),
        }
        Ok(None)
    }
}

/// `what: e`.
pub fn failed(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// When the connection with heartbeat timeout `hb` seconds last read at `read` is dead.
pub fn silent(hb: u16, read: Instant) -> bool {
    hb > 0 && read.elapsed() > Duration::from_secs(u64::from(hb) * 2)
}

/// When a heartbeat is due on a connection last written at `wrote`.
pub fn due(hb: u16, wrote: Instant) -> bool {
    hb > 0 && wrote.elapsed() >= Duration::from_secs(u64::from(hb)) / 2
}

/// Decodes what `c` has buffered, handing each frame to `each`; a close from the server
/// ends the run with its reason.
pub async fn drain(
    c: &mut Client,
    side: &str,
    mut each: impl FnMut(Frame) -> Result<(), String>,
) -> Result<(), String> {
    loop {
        match codec::decode(&mut c.rbuf, 0) {
            Ok(Some(Frame::Method(ch, m))) => {
                let closed = c.answer_close(ch, &m).await.map_err(|e| failed(side, e))?;
                if let Some(closed) = closed {
                    return Err(format!("{side}: {closed}"));
                }
                each(Frame::Method(ch, m))?;
            }
            Ok(Some(f)) => each(f)?,
            Ok(None) => return Ok(()),
            Err(e) => return Err(failed(side, e.text)),
        }
    }
}

/// Reads into a connection's buffer; Err when it ended.
pub async fn fill(c: &mut Client) -> std::io::Result<()> {
    if c.rbuf.capacity() - c.rbuf.len() < 4096 {
        c.rbuf.reserve(64 * 1024);
    }
    match c.rd.read_buf(&mut c.rbuf).await? {
        0 => Err(super::connection::err("connection closed")),
        _ => Ok(()),
    }
}
