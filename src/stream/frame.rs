//! The stream protocol's framing and types (`PROTOCOL.adoc` in rabbitmq-server): a frame is a
//! 32-bit size and a body; a body starts with a 16-bit key (the top bit set on responses) and
//! a 16-bit version. Integers are big endian, a string is an int16 length (-1: null) and
//! UTF-8 bytes, bytes are an int32 length and content, an array an int32 count and items.
//! [`Reader`] reads a body without ever panicking: every read checks what is left. [`Frame`]
//! writes one, its size filled in when it is finished.

use bytes::{BufMut, Bytes, BytesMut};

/// Command keys.
pub mod key {
    pub const DECLARE_PUBLISHER: u16 = 0x0001;
    pub const PUBLISH: u16 = 0x0002;
    pub const PUBLISH_CONFIRM: u16 = 0x0003;
    pub const PUBLISH_ERROR: u16 = 0x0004;
    pub const QUERY_PUBLISHER_SEQUENCE: u16 = 0x0005;
    pub const DELETE_PUBLISHER: u16 = 0x0006;
    pub const SUBSCRIBE: u16 = 0x0007;
    pub const DELIVER: u16 = 0x0008;
    pub const CREDIT: u16 = 0x0009;
    pub const STORE_OFFSET: u16 = 0x000a;
    pub const QUERY_OFFSET: u16 = 0x000b;
    pub const UNSUBSCRIBE: u16 = 0x000c;
    pub const CREATE: u16 = 0x000d;
    pub const DELETE: u16 = 0x000e;
    pub const METADATA: u16 = 0x000f;
    pub const METADATA_UPDATE: u16 = 0x0010;
    pub const PEER_PROPERTIES: u16 = 0x0011;
    pub const SASL_HANDSHAKE: u16 = 0x0012;
    pub const SASL_AUTHENTICATE: u16 = 0x0013;
    pub const TUNE: u16 = 0x0014;
    pub const OPEN: u16 = 0x0015;
    pub const CLOSE: u16 = 0x0016;
    pub const HEARTBEAT: u16 = 0x0017;
    pub const ROUTE: u16 = 0x0018;
    pub const PARTITIONS: u16 = 0x0019;
    pub const CONSUMER_UPDATE: u16 = 0x001a;
    pub const EXCHANGE_COMMAND_VERSIONS: u16 = 0x001b;
    pub const STREAM_STATS: u16 = 0x001c;
    pub const CREATE_SUPER_STREAM: u16 = 0x001d;
    pub const DELETE_SUPER_STREAM: u16 = 0x001e;
    pub const RESOLVE_OFFSET_SPEC: u16 = 0x001f;
    /// The bit that marks a response.
    pub const RESPONSE: u16 = 0x8000;
}

/// Response codes.
pub mod code {
    pub const OK: u16 = 0x01;
    pub const STREAM_DOES_NOT_EXIST: u16 = 0x02;
    pub const SUBSCRIPTION_ID_ALREADY_EXISTS: u16 = 0x03;
    pub const SUBSCRIPTION_ID_DOES_NOT_EXIST: u16 = 0x04;
    pub const STREAM_ALREADY_EXISTS: u16 = 0x05;
    pub const STREAM_NOT_AVAILABLE: u16 = 0x06;
    pub const SASL_MECHANISM_NOT_SUPPORTED: u16 = 0x07;
    pub const AUTHENTICATION_FAILURE: u16 = 0x08;
    pub const SASL_ERROR: u16 = 0x09;
    pub const AUTHENTICATION_FAILURE_LOOPBACK: u16 = 0x0b;
    pub const VIRTUAL_HOST_ACCESS_FAILURE: u16 = 0x0c;
    pub const UNKNOWN_FRAME: u16 = 0x0d;
    pub const FRAME_TOO_LARGE: u16 = 0x0e;
    pub const INTERNAL_ERROR: u16 = 0x0f;
    pub const ACCESS_REFUSED: u16 = 0x10;
    pub const PRECONDITION_FAILED: u16 = 0x11;
    pub const PUBLISHER_DOES_NOT_EXIST: u16 = 0x12;
    pub const NO_OFFSET: u16 = 0x13;
}

/// A body ended before what its command needs, or holds a string that is not UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed stream protocol frame")]
pub struct Malformed;

/// Reads a frame body from the front.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    /// Reads `body` (a frame without its size).
    pub fn new(body: Bytes) -> Self {
        Reader { buf: body }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<Bytes, Malformed> {
        if self.buf.len() < n {
            return Err(Malformed);
        }
        Ok(self.buf.split_to(n))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let b = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&b);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Malformed> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// A string; None for the null string (length -1).
    pub fn opt_string(&mut self) -> Result<Option<String>, Malformed> {
        let len = self.u16()? as i16;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| Malformed)
    }

    /// A string (null reads as empty).
    pub fn string(&mut self) -> Result<String, Malformed> {
        Ok(self.opt_string()?.unwrap_or_default())
    }

    /// Bytes (null reads as empty); shares the frame's buffer.
    pub fn bytes(&mut self) -> Result<Bytes, Malformed> {
        let len = self.u32()? as i32;
        if len < 0 {
            return Ok(Bytes::new());
        }
        self.take(len as usize)
    }

    /// An array's count, checked against what is left (each item takes at least `min` bytes),
    /// so a forged count cannot make the caller reserve memory the frame does not back.
    pub fn count(&mut self, min: usize) -> Result<usize, Malformed> {
        let n = self.u32()? as i32;
        if n < 0 {
            return Ok(0);
        }
        let n = n as usize;
        if n.saturating_mul(min.max(1)) > self.buf.len() {
            return Err(Malformed);
        }
        Ok(n)
    }

    /// An array of strings.
    pub fn strings(&mut self) -> Result<Vec<String>, Malformed> {
        let n = self.count(2)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.string()?);
        }
        Ok(out)
    }

    /// A map of strings (peer properties, arguments).
    pub fn properties(&mut self) -> Result<Vec<(String, String)>, Malformed> {
        let n = self.count(4)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push((self.string()?, self.string()?));
        }
        Ok(out)
    }
}

/// One outgoing frame.
pub struct Frame {
    buf: BytesMut,
}

impl Frame {
    /// A command (no correlation id).
    pub fn command(key: u16, version: u16) -> Self {
        let mut buf = BytesMut::with_capacity(64);
        buf.put_u32(0);
        buf.put_u16(key);
        buf.put_u16(version);
        Frame { buf }
    }

    /// A response to request `key` with `correlation` and `code`.
    pub fn response(key: u16, version: u16, correlation: u32, code: u16) -> Self {
        let mut f = Frame::command(key | self::key::RESPONSE, version);
        f.buf.put_u32(correlation);
        f.buf.put_u16(code);
        f
    }

    pub fn u8(mut self, v: u8) -> Self {
        self.buf.put_u8(v);
        self
    }

    pub fn u16(mut self, v: u16) -> Self {
        self.buf.put_u16(v);
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        self.buf.put_u32(v);
        self
    }

    pub fn u64(mut self, v: u64) -> Self {
        self.buf.put_u64(v);
        self
    }

    pub fn i64(mut self, v: i64) -> Self {
        self.buf.put_i64(v);
        self
    }

    /// A string; longer than 32767 bytes is cut at a character boundary.
    pub fn string(mut self, s: &str) -> Self {
        let mut end = s.len().min(i16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.buf.put_u16(end as u16);
        self.buf.put_slice(&s.as_bytes()[..end]);
        self
    }

    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.buf.put_u32(b.len() as u32);
        self.buf.put_slice(b);
        self
    }

    /// Raw bytes, no length.
    pub fn raw(mut self, b: &[u8]) -> Self {
        self.buf.put_slice(b);
        self
    }

    /// A map of strings.
    pub fn properties<'a>(
        mut self,
        props: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        self.buf.put_u32(props.len() as u32);
        for (k, v) in props {
            self = self.string(k).string(v);
        }
        self
    }

    /// The frame's bytes, its size filled in.
    pub fn finish(mut self) -> Bytes {
        let len = (self.buf.len() - 4) as u32;
        self.buf[..4].copy_from_slice(&len.to_be_bytes());
        self.buf.freeze()
    }
}

/// A publish error frame: each of `ids` of `publisher` refused with `code`.
pub fn publish_error(publisher: u8, ids: &[u64], code: u16) -> Bytes {
    let mut f = Frame::command(key::PUBLISH_ERROR, 1)
        .u8(publisher)
        .u32(ids.len() as u32);
    for id in ids {
        f = f.u64(*id).u16(code);
    }
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_is_written_and_refuses_short_bodies() {
        let f = Frame::response(key::OPEN, 1, 7, code::OK)
            .string("héllo")
            .properties([("a", "b")].into_iter())
            .bytes(b"xyz")
            .finish();
        assert_eq!(
            u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize,
            f.len() - 4
        );
        let mut r = Reader::new(f.slice(4..));
        assert_eq!(r.u16(), Ok(key::OPEN | key::RESPONSE));
        assert_eq!(r.u16(), Ok(1));
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.u16(), Ok(code::OK));
        assert_eq!(r.string().as_deref(), Ok("héllo"));
        assert_eq!(r.properties(), Ok(vec![("a".into(), "b".into())]));
        assert_eq!(r.bytes().as_deref(), Ok(&b"xyz"[..]));
        assert_eq!(r.u8(), Err(Malformed));
        // A count that the body cannot back, a string past the end, invalid UTF-8.
        let mut r = Reader::new(Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0]));
        assert_eq!(r.count(8), Err(Malformed));
        let mut r = Reader::new(Bytes::from_static(&[0, 9, b'a']));
        assert_eq!(r.string(), Err(Malformed));
        let mut r = Reader::new(Bytes::from_static(&[0, 1, 0xff]));
        assert_eq!(r.string(), Err(Malformed));
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff]));
        assert_eq!(r.opt_string(), Ok(None));
    }
}
