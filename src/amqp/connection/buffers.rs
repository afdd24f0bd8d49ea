//! How big a connection's read and output buffers are. Thousands of quiet connections must not
//! each hold 64 KiB buffers (they would be most of a node's memory), while a busy one should
//! read and write 64 KiB per system call: buffers start small and are replaced by large ones
//! while the socket keeps them full (reads) or a turn writes that much (output, in
//! `Connection::flush_output`).

use super::codec;
use super::direct::DirectBody;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Read and output buffers of a quiet connection.
pub(crate) const BUFFER_SMALL: usize = 4 << 10;
/// Read and output buffers of a busy connection.
pub(crate) const BUFFER_LARGE: usize = 64 << 10;

/// Reads from the socket into the read buffer, or into the message a large body frame is
/// being read into. A read buffer without room (for the rest of the partial frame it ends with)
/// is replaced by a small one, or by a large one when the last read filled all the room it had
/// (`busy`: the socket had more).
pub(crate) async fn read_some<R: AsyncRead + Unpin>(
    rd: &mut R,
    rbuf: &mut BytesMut,
    direct: &mut Option<DirectBody>,
    busy: &mut bool,
) -> std::io::Result<usize> {
    if let Some(d) = direct {
        return rd.read_buf(&mut d.target()).await;
    }
    let missing = codec::partial_frame(rbuf).map_or(0, |(_, _, size)| 8 + size - rbuf.len());
    let room = rbuf.capacity() - rbuf.len();
    if room == 0 || room < missing {
        let size = if *busy { BUFFER_LARGE } else { BUFFER_SMALL };
        rbuf.reserve(missing.max(size));
    }
    let room = rbuf.capacity() - rbuf.len();
    let n = rd.read_buf(rbuf).await?;
    // A few bytes left at the end of a buffer say nothing about the socket.
    *busy = n == room && (room >= BUFFER_SMALL / 4 || *busy);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` body frames of 100 bytes on channel 1.
    fn frames(count: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..count {
            v.extend_from_slice(&[3, 0, 1, 0, 0, 0, 92]);
            v.extend_from_slice(&[7; 92]);
            v.push(codec::FRAME_END);
        }
        v
    }

    /// Decodes the complete frames, as the connection does between reads.
    fn consume(rbuf: &mut BytesMut) {
        while let Ok(Some(_)) = codec::decode_buffered(rbuf, 0) {}
    }

    #[tokio::test]
    async fn a_busy_socket_gets_large_reads_even_after_a_partial_frame() {
        let data = frames(3000);
        let mut socket = &data[..];
        let mut rbuf = BytesMut::with_capacity(BUFFER_SMALL);
        let mut busy = false;
        let n = read_some(&mut socket, &mut rbuf, &mut None, &mut busy).await;
        assert_eq!(n.ok(), Some(BUFFER_SMALL));
        assert!(busy);
        consume(&mut rbuf);
        assert!(!rbuf.is_empty(), "the buffer ends in a partial frame");
        let n = read_some(&mut socket, &mut rbuf, &mut None, &mut busy).await;
        assert!(n.as_ref().is_ok_and(|&n| n >= BUFFER_LARGE - 100), "{n:?}");
    }

    #[tokio::test]
    async fn a_quiet_socket_keeps_a_small_buffer() {
        let data = frames(3);
        let mut socket = &data[..];
        let mut rbuf = BytesMut::new();
        let mut busy = false;
        let n = read_some(&mut socket, &mut rbuf, &mut None, &mut busy).await;
        assert_eq!(n.ok(), Some(300));
        assert!(!busy);
        assert!(rbuf.capacity() <= BUFFER_SMALL);
    }
}
