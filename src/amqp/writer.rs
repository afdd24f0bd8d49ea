//! A connection's writer task: writes what the connection task queued, all chunks that are
//! ready in one vectored write (large bodies are queued by reference, between the frames around
//! them, so they are not copied again here), and sends heartbeats when the connection is idle.
//! Streams without vectored writes (TLS) get the chunks joined into one buffer.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;
use std::io::IoSlice;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Chunks taken from the queue per write.
const CHUNKS_PER_WRITE: usize = 64;

/// Writes queued chunks until the queue closes or the socket fails, and heartbeats when idle.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::Receiver<Bytes>,
    heartbeat: Duration,
) {
    let idle = if heartbeat.is_zero() {
        Duration::from_secs(3600)
    } else {
        heartbeat / 2
    };
    let mut chunks = Vec::new();
    let mut joined = BytesMut::new();
    loop {
        match tokio::time::timeout(idle, rx.recv_many(&mut chunks, CHUNKS_PER_WRITE)).await {
            Ok(0) => break,
            Ok(_) => {
                let r = write_chunks(&mut wr, &chunks, &mut joined).await;
                chunks.clear();
                if r.is_err() {
                    return;
                }
            }
            Err(_) if !heartbeat.is_zero() => {
                let mut hb = BytesMut::with_capacity(8);
                super::codec::encode_heartbeat(&mut hb);
                if wr.write_all(&hb).await.is_err() {
                    return;
                }
            }
            Err(_) => {}
        }
    }
    let _ = wr.shutdown().await;
}

/// Writes all of `chunks`, in order.
async fn write_chunks<W: AsyncWrite + Unpin>(
    wr: &mut W,
    chunks: &[Bytes],
    joined: &mut BytesMut,
) -> std::io::Result<()> {
    if let [one] = chunks {
        return wr.write_all(one).await;
    }
    if !wr.is_write_vectored() {
        for c in chunks {
            joined.extend_from_slice(c);
        }
        let r = wr.write_all(joined).await;
        joined.clear();
        return r;
    }
    let mut slices: SmallVec<[IoSlice<'_>; CHUNKS_PER_WRITE]> =
        chunks.iter().map(|c| IoSlice::new(c)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = wr.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}
