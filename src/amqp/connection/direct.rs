//! Large content bodies read from the socket straight into their message's buffer.
//!
//! A body frame of 16 KiB or more that belongs to a publish whose header has arrived is not
//! assembled through the connection's read buffer: the part of it already buffered moves into
//! the message's buffer (which holds the properties and any earlier body frames), and the socket
//! reads the rest of the frame there directly. A 64 KiB message is then copied once in user
//! space on its way in, not three times (read buffer growth, assembly), and the read buffer
//! never holds a large payload that queued messages would keep alive.

use super::Connection;
use crate::amqp::channel::BodyFrame;
use crate::amqp::codec::{self, FRAME_BODY, FRAME_END};
use crate::amqp::error::AmqpError;
use bytes::buf::Limit;
use bytes::{Buf, BufMut, BytesMut};

/// Body frames at least this large (payload bytes) are read directly.
const DIRECT_MIN: usize = 16 * 1024;

/// A body frame being read into its message's buffer.
#[derive(Debug)]
pub(crate) struct DirectBody {
    channel: u16,
    /// Properties, earlier body frames, and this frame's payload and end octet as they arrive.
    data: BytesMut,
    /// Bytes of this frame (payload and end octet) still to read.
    left: usize,
}

impl DirectBody {
    /// Where the next socket read goes: at most the rest of this frame.
    pub fn target(&mut self) -> Limit<&mut BytesMut> {
        (&mut self.data).limit(self.left)
    }
}

impl Connection {
    /// Called when `rbuf` holds the start of a frame and no more: when it is a large body frame
    /// of a publish in progress, takes the buffered part into the message (the next reads go
    /// to `self.direct`); otherwise the rest of the frame is read into `rbuf`.
    pub(crate) fn start_direct(&mut self, rbuf: &mut BytesMut) {
        let Some((kind, channel, size)) = codec::partial_frame(rbuf) else {
            return;
        };
        let direct = kind == FRAME_BODY && size >= DIRECT_MIN && self.closing.is_none();
        let pc = match self.channels.get_mut(channel) {
            Some(ch) if direct && !ch.closing => ch.content.as_mut(),
            _ => None,
        };
        // Only a frame that fits the declared size: anything else takes the buffered path,
        // which reports the error.
        let Some(pc) = pc.filter(|pc| {
            pc.header
                .as_ref()
                .is_some_and(|h| (pc.data.len() - pc.props_len + size) as u64 <= h.body_size)
        }) else {
            return;
        };
        let mut data = std::mem::take(&mut pc.data);
        data.reserve(size + 1);
        rbuf.advance(7);
        let have = rbuf.len();
        data.extend_from_slice(rbuf);
        rbuf.clear();
        self.direct = Some(DirectBody {
            channel,
            data,
            left: size + 1 - have,
        });
    }

    /// Accounts `n` bytes read into the direct frame; once it is complete, checks its end octet
    /// and hands it to content assembly. Returns false while the frame is incomplete.
    pub(crate) async fn on_direct_read(&mut self, n: usize) -> bool {
        let Some(d) = self.direct.as_mut() else {
            return true;
        };
        d.left -= n.min(d.left);
        if d.left > 0 {
            return false;
        }
        let Some(mut d) = self.direct.take() else {
            return true;
        };
        match d.data.last() {
            Some(&FRAME_END) => d.data.truncate(d.data.len() - 1),
            end => {
                self.close_connection(AmqpError::frame_error(format!(
                    "frame end octet is {:#04x}, not 0xce",
                    end.copied().unwrap_or_default()
                )));
                self.done = true;
                return true;
            }
        }
        self.on_body_frame(d.channel, BodyFrame::Direct(d.data))
            .await;
        true
    }
}
