//! One stream protocol connection: the handshake (peer properties, SASL, tune, open), then
//! requests dispatched to the core (stream creation and deletion through the broker's
//! declare and delete, publishes and subscriptions to the stream's task), and what the
//! streams send back (confirms, chunks) written as frames. One task per connection: it reads
//! frames, answers them, and writes what the streams' tasks send it; the socket is flushed
//! once per wake-up, not per frame.

use super::frame::{code, key, publish_error, Frame, Malformed};
use super::request::Request;
use super::session::{Next, Session};
use super::Transport;
use crate::broker::Broker;
use crate::connections::ConnectionInfo;
use crate::queue::stream::{ChunkData, StreamEvent};
use crate::store::stream::FileSpan;
use bytes::{Buf, Bytes, BytesMut};
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter, Interest, WriteHalf,
};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Events written per wake-up before the socket is read again.
const EVENTS_PER_TURN: usize = 256;

/// Chunk data of at least this many bytes is sent from its file by the kernel (`sendfile`);
/// smaller chunks cost less copied into the write buffer than a call of their own.
const SENDFILE_MIN: usize = 64 * 1024;

/// A read buffer grown past this by a large chunk is let go once written.
const MAX_SCRATCH: usize = 1 << 20;

/// Runs one connection, over TCP (`rd` and `wr` its halves) or TLS, from its first frame to
/// its end; the handshake must be done by `deadline`.
pub async fn run<R, W>(
    mut rd: R,
    wr: W,
    transport: Transport,
    deadline: Instant,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: Outbound,
{
    let peer = transport.peer;
    let mut wr = BufWriter::with_capacity(64 * 1024, wr);
    let (events, mut inbox) = mpsc::unbounded_channel();
    let mut s = Session::new(broker.clone(), transport, events);
    // Its registry entry once open: a close through the management API wakes its `kill`.
    let mut info: Option<Arc<ConnectionInfo>> = None;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut scratch = Vec::new();
    let mut last_read = Instant::now();
    let mut last_write = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    'conn: loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = killed(info.as_deref()) => {
                // As RabbitMQ: the connection ends, with no close frame.
                tracing::info!(%peer, "stream connection closed through the management API");
                break;
            }
            n = rd.read_buf(&mut buf) => {
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(_) => last_read = Instant::now(),
                }
                loop {
                    match next_frame(&mut buf, s.frame_max()) {
                        Ok(None) => break,
                        Ok(Some(body)) => {
                            let next = match Request::decode(body) {
                                Ok(req) => s.handle(req, &mut wr).await,
                                Err(Malformed) => {
                                    s.close(&mut wr, code::UNKNOWN_FRAME, "malformed frame").await
                                }
                            };
                            if matches!(next, Next::Close) {
                                let _ = wr.flush().await;
                                break 'conn;
                            }
                            if info.is_none() {
                                info = s.info();
                            }
                        }
                        Err(TooLarge) => {
                            let _ = s.close(&mut wr, code::FRAME_TOO_LARGE, "frame too large").await;
                            let _ = wr.flush().await;
                            break 'conn;
                        }
                    }
                }
            }
            Some(ev) = inbox.recv() => {
                if write_event(&mut s, &mut wr, ev, &mut scratch).await.is_err() {
                    break;
                }
                for _ in 0..EVENTS_PER_TURN {
                    let Ok(ev) = inbox.try_recv() else { break };
                    if write_event(&mut s, &mut wr, ev, &mut scratch).await.is_err() {
                        break 'conn;
                    }
                }
            }
            _ = ticker.tick() => {
                let now = Instant::now();
                if !s.opened() && now > deadline {
                    break;
                }
                let hb = u64::from(s.heartbeat());
                if hb > 0 {
                    if now.duration_since(last_read) > Duration::from_secs(hb * 2) {
                        tracing::warn!(%peer, "stream connection missed heartbeats, closing");
                        break;
                    }
                    if now.duration_since(last_write) >= Duration::from_secs(hb) {
                        let _ = wr.write_all(&Frame::command(key::HEARTBEAT, 1).finish()).await;
                    }
                }
            }
        }
        if !wr.buffer().is_empty() {
            if wr.flush().await.is_err() {
                break;
            }
            last_write = Instant::now();
        }
    }
    s.closed().await;
}

/// A connection's write half.
pub trait Outbound: AsyncWrite + Unpin {
    /// Its socket, when the kernel can send file bytes to it itself (plain TCP, not TLS).
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl Outbound for OwnedWriteHalf {
    fn socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl<T: AsyncRead + AsyncWrite> Outbound for WriteHalf<T> {}

/// Writes a chunk's data from its segment file: sent by the kernel from the page cache when
/// it is large enough to be worth a call of its own and the socket is plain TCP, else read
/// into `scratch` and written as any other bytes. True when the kernel sent it.
async fn write_span<W: Outbound>(
    wr: &mut BufWriter<W>,
    span: &FileSpan,
    scratch: &mut Vec<u8>,
) -> std::io::Result<bool> {
    if span.len() >= SENDFILE_MIN && wr.get_ref().socket().is_some() {
        // What is buffered (this frame's head among it) goes first.
        wr.flush().await?;
        if let Some(socket) = wr.get_ref().socket() {
            return send_file(socket, span).await.map(|()| true);
        }
    }
    scratch.clear();
    span.read_into(scratch)?;
    wr.write_all(scratch).await?;
    if scratch.capacity() > MAX_SCRATCH {
        *scratch = Vec::new();
    }
    Ok(false)
}

/// Has the kernel send `span` to `socket`, waiting whenever the socket is full.
async fn send_file(socket: &TcpStream, span: &FileSpan) -> std::io::Result<()> {
    let mut done = 0;
    while done < span.len() {
        socket.writable().await?;
        match socket.try_io(Interest::WRITABLE, || span.send_to(socket.as_fd(), done)) {
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Waits until the connection is asked to close (never, before it is open).
async fn killed(info: Option<&ConnectionInfo>) {
    match info {
        Some(i) => i.kill.notified().await,
        None => std::future::pending().await,
    }
}

/// A frame larger than the negotiated maximum.
struct TooLarge;

/// Splits the next whole frame's body off `buf`.
fn next_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Bytes>, TooLarge> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if frame_max > 0 && len > frame_max {
        return Err(TooLarge);
    }
    let len = len as usize;
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Writes what a stream's task sent (`scratch`: room to read chunks into).
async fn write_event<W: Outbound>(
    s: &mut Session,
    wr: &mut BufWriter<W>,
    ev: StreamEvent,
    scratch: &mut Vec<u8>,
) -> std::io::Result<()> {
    match ev {
        StreamEvent::Confirmed { publisher, ids } => {
            wr.write_all(&s.confirmed(publisher, ids)).await
        }
        StreamEvent::Refused { publisher, ids } => {
            s.refused(publisher, ids.len());
            let c = s.counted(code::INTERNAL_ERROR);
            wr.write_all(&publish_error(publisher, &ids, c)).await
        }
        StreamEvent::Chunk {
            subscription,
            header,
            data,
            committed_chunk,
        } => {
            let bytes = header.len() + data.len();
            if !s.subscribed(subscription) {
                s.chunk_written(bytes).await;
                return Ok(());
            }
            // Key, version, subscription (and in version 2 the committed chunk id).
            let v2 = s.deliver_version >= 2;
            let head_len = if v2 { 13 } else { 5 };
            let len = (head_len + header.len() + data.len()) as u32;
            let mut head = [0u8; 4 + 13];
            head[..4].copy_from_slice(&len.to_be_bytes());
            head[4..6].copy_from_slice(&key::DELIVER.to_be_bytes());
            head[6..8].copy_from_slice(&s.deliver_version.to_be_bytes());
            head[8] = subscription;
            head[9..17].copy_from_slice(&committed_chunk.to_be_bytes());
            wr.write_all(&head[..4 + head_len]).await?;
            wr.write_all(&header).await?;
            match data {
                ChunkData::Bytes(b) => wr.write_all(&b).await?,
                ChunkData::File(span) => {
                    if write_span(wr, &span, scratch).await? {
                        let counters = &s.broker.connections.stream;
                        counters
                            .sent_from_file
                            .fetch_add(span.len() as u64, Relaxed);
                    }
                }
            }
            s.delivered(subscription, &header);
            s.chunk_written(bytes).await;
            Ok(())
        }
        StreamEvent::ConsumerUpdate {
            subscription,
            active,
        } => {
            if !s.subscribed(subscription) {
                return Ok(());
            }
            let f = s.consumer_update(subscription, active);
            wr.write_all(&f).await
        }
        StreamEvent::Deleted { stream } => {
            if !s.stream_deleted(&stream) {
                return Ok(());
            }
            let f = Frame::command(key::METADATA_UPDATE, 1)
                .u16(code::STREAM_NOT_AVAILABLE)
                .string(&stream);
            wr.write_all(&f.finish()).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_whole_and_oversized_ones_refused() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0, 0, 0, 3, 1, 2]);
        assert!(matches!(next_frame(&mut buf, 100), Ok(None)));
        buf.extend_from_slice(&[3, 0, 0]);
        let Ok(Some(body)) = next_frame(&mut buf, 100) else {
            panic!("a frame");
        };
        assert_eq!(&body[..], &[1, 2, 3]);
        assert_eq!(buf.len(), 2);
        let mut big = BytesMut::from(&[0u8, 0, 1, 0][..]);
        assert!(next_frame(&mut big, 255).is_err());
    }
}
