//! Frame codec. Decoding checks the frame size against frame_max before waiting for (or
//! allocating) the payload, checks the frame-end octet, and parses method arguments and content
//! headers with amq-protocol. Content header properties are also kept as raw bytes so they can
//! be forwarded untouched. Encoding writes straight into the connection's output buffer; the
//! per-delivery frames (deliver, get-ok, return, ack/nack, content) are laid out here by hand to
//! keep that path free of intermediate structures.

use super::nesting;
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::message::HotProperties;
use amq_protocol::frame::parsing::parse_content_header;
use amq_protocol::protocol::{parse_class, AMQPClass};
use amq_protocol::types::ShortString;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Frame type octets.
pub const FRAME_METHOD: u8 = 1;
/// Content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// Frame-end octet.
pub const FRAME_END: u8 = 0xCE;
/// Bytes a frame adds around its payload.
pub const FRAME_OVERHEAD: usize = 8;

/// A decoded frame.
#[derive(Debug)]
pub enum Frame {
    /// A method.
    Method(u16, Box<AMQPClass>),
    /// A content header.
    Header(u16, Box<ContentHeader>),
    /// A content body fragment.
    Body(u16, Bytes),
    /// A heartbeat (the channel should be 0).
    Heartbeat(u16),
    /// A well-framed method the broker refuses (unknown method, basic.qos with a
    /// prefetch_size); the stream stays in sync.
    Refused(u16, AmqpError),
}

/// A checked content header: what the broker acts on, read from the parsed properties, and
/// the property bytes exactly as received (the parsed properties themselves are not kept:
/// moving them costs more than reading the few fields).
#[derive(Debug)]
pub struct ContentHeader {
    /// Class of the content (60 for basic).
    pub class_id: u16,
    /// Total body size.
    pub body_size: u64,
    /// delivery-mode, priority and the expiration as a TTL.
    pub hot: HotProperties,
    /// The expiration property as sent (a publish whose value is not a TTL is refused).
    pub expiration: Option<ShortString>,
    /// The user-id property (checked against the authenticated user).
    pub user_id: Option<ShortString>,
    /// Property flags and values exactly as received.
    pub raw_properties: Bytes,
}

/// Decodes one frame from `buf`, or returns None when more bytes are needed (after reserving
/// room for the rest of the frame).
pub fn decode(buf: &mut BytesMut, frame_max: u32) -> AmqpResult<Option<Frame>> {
    let frame = decode_buffered(buf, frame_max)?;
    if frame.is_none() {
        reserve_partial(buf);
    }
    Ok(frame)
}

/// Makes room in `buf` for the rest of the partial frame it starts with.
fn reserve_partial(buf: &mut BytesMut) {
    if let Some((_, _, size)) = partial_frame(buf) {
        buf.reserve(7 + size + 1 - buf.len());
    }
}

/// Type, channel and payload size of the incomplete frame `buf` starts with, once its header is
/// in (call after `decode_buffered` returned None, which checked the type and size).
pub fn partial_frame(buf: &[u8]) -> Option<(u8, u16, usize)> {
    let header = buf.get(..7)?;
    let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
    (buf.len() < 7 + size + 1).then_some((
        header[0],
        u16::from_be_bytes([header[1], header[2]]),
        size,
    ))
}

/// As `decode`, without reserving: the caller decides where the rest of a partial frame goes.
pub fn decode_buffered(buf: &mut BytesMut, frame_max: u32) -> AmqpResult<Option<Frame>> {
    if buf.len() < 7 {
        return Ok(None);
    }
    let kind = buf[0];
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    if !matches!(
        kind,
        FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
    ) {
        return Err(AmqpError::frame_error(format!(
            "type {kind}, first 16 octets = {:?}",
            &buf[..buf.len().min(16)]
        )));
    }
    // RabbitMQ allows a payload of frame_max bytes (the 8 octets of header and end on top):
    // several clients size body frames that way.
    if frame_max != 0 && size > frame_max as usize {
        return Err(AmqpError::frame_error(format!(
            "type {kind}, all octets = <<>>: {{frame_too_large,{size},{}}}",
            (frame_max as usize).saturating_sub(FRAME_OVERHEAD)
        )));
    }
    if buf.len() < 7 + size + 1 {
        return Ok(None);
    }
    if buf[7 + size] != FRAME_END {
        return Err(AmqpError::frame_error(format!(
            "frame end octet is {:#04x}, not 0xce",
            buf[7 + size]
        )));
    }
    buf.advance(7);
    let payload = buf.split_to(size).freeze();
    buf.advance(1);
    Ok(Some(match kind {
        FRAME_METHOD => match refusal(&payload) {
            Some(e) => Frame::Refused(channel, e),
            None => Frame::Method(channel, Box::new(decode_method(&payload)?)),
        },
        FRAME_HEADER => Frame::Header(channel, Box::new(decode_header(payload)?)),
        FRAME_BODY => Frame::Body(channel, payload),
        _ => Frame::Heartbeat(channel),
    }))
}

/// Checks what amq-protocol's types cannot carry: unknown methods, and basic.qos's
/// prefetch_size (which its `Qos` drops but RabbitMQ refuses when non-zero).
fn refusal(payload: &[u8]) -> Option<AmqpError> {
    if payload.len() < 4 {
        return None;
    }
    let ids = (
        u16::from_be_bytes([payload[0], payload[1]]),
        u16::from_be_bytes([payload[2], payload[3]]),
    );
    if !known_method(ids) {
        return Some(
            AmqpError::command_invalid(format!("unknown method class {} method {}", ids.0, ids.1))
                .with_method(ids.0, ids.1),
        );
    }
    if ids == (60, 10) && payload.len() >= 8 {
        let size = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        if size != 0 {
            return Some(
                AmqpError::not_implemented(format!("prefetch_size!=0 ({size})"))
                    .with_method(60, 10),
            );
        }
    }
    None
}

fn decode_method(payload: &[u8]) -> AmqpResult<AMQPClass> {
    if payload.len() < 4 {
        return Err(AmqpError::frame_error(format!("cannot decode {payload:?}")));
    }
    let ids = (
        u16::from_be_bytes([payload[0], payload[1]]),
        u16::from_be_bytes([payload[2], payload[3]]),
    );
    if let Some(class) = decode_hot(ids, &payload[4..]) {
        return Ok(class);
    }
    let err = |detail: &str| AmqpError::frame_error(detail).with_method(ids.0, ids.1);
    if nesting::check_method(payload).is_err() {
        return Err(err(
            "cannot decode method arguments: field table nested too deep",
        ));
    }
    match parse_class(payload) {
        Ok(([], class)) => Ok(class),
        Ok(_) => Err(err("cannot decode method: trailing bytes")),
        Err(nom::Err::Incomplete(_)) => Err(err("cannot decode method: arguments truncated")),
        // RabbitMQ answers every undecodable argument list (bad field type, bad UTF-8...) so.
        Err(_) => Err(err("cannot decode method arguments")),
    }
}

/// basic.publish and basic.ack, decoded by hand (one of each per message; amq-protocol's
/// generic parser showed in profiles). Anything unusual returns None and takes the generic
/// path, which gives the errors.
fn decode_hot(ids: (u16, u16), args: &[u8]) -> Option<AMQPClass> {
    use amq_protocol::protocol::basic;
    fn shortstr(b: &[u8]) -> Option<(&str, &[u8])> {
        let (&len, rest) = b.split_first()?;
        let s = rest.get(..usize::from(len))?;
        Some((std::str::from_utf8(s).ok()?, &rest[usize::from(len)..]))
    }
    match ids {
        (60, 40) => {
            let (exchange, rest) = shortstr(args.get(2..)?)?;
            let (routing_key, rest) = shortstr(rest)?;
            let [bits] = rest else { return None };
            Some(AMQPClass::Basic(basic::AMQPMethod::Publish(
                basic::Publish {
                    exchange: exchange.into(),
                    routing_key: routing_key.into(),
                    mandatory: bits & 1 != 0,
                    immediate: bits & 2 != 0,
                },
            )))
        }
        (60, 80) => {
            let (tag, rest) = args.split_first_chunk::<8>()?;
            let [bits] = rest else { return None };
            Some(AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: u64::from_be_bytes(*tag),
                multiple: bits & 1 != 0,
            })))
        }
        _ => None,
    }
}

fn decode_header(payload: Bytes) -> AmqpResult<ContentHeader> {
    if payload.len() > 12 && nesting::check_properties(&payload[12..]).is_err() {
        return Err(AmqpError::frame_error(
            "cannot decode content header: headers nested too deep",
        ));
    }
    match parse_content_header(&payload[..]) {
        Ok(([], h)) => Ok(ContentHeader {
            class_id: h.class_id,
            body_size: h.body_size,
            hot: HotProperties::of(&h.properties),
            expiration: h.properties.expiration().clone(),
            user_id: h.properties.user_id().clone(),
            raw_properties: payload.slice(12..),
        }),
        Ok(_) => Err(AmqpError::frame_error(
            "cannot decode content header: trailing bytes",
        )),
        Err(nom::Err::Incomplete(_)) => Err(AmqpError::frame_error(
            "cannot decode content header: truncated",
        )),
        Err(_) => Err(AmqpError::syntax_error(
            "cannot decode content header properties",
        )),
    }
}

/// Whether (class, method) is an AMQP 0-9-1 method.
fn known_method((class, method): (u16, u16)) -> bool {
    let methods: &[u16] = match class {
        10 => &[10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61, 70, 71],
        20 => &[10, 11, 20, 21, 40, 41],
        30 => &[10, 11],
        40 => &[10, 11, 20, 21, 30, 31, 40, 51],
        50 => &[10, 11, 20, 21, 30, 31, 40, 41, 50, 51],
        60 => &[
            10, 11, 20, 21, 30, 31, 40, 50, 60, 70, 71, 72, 80, 90, 100, 110, 111, 120,
        ],
        85 => &[10, 11],
        90 => &[10, 11, 20, 21, 30, 31],
        _ => &[],
    };
    methods.contains(&method)
}

fn begin(out: &mut BytesMut, kind: u8, channel: u16) -> usize {
    out.put_u8(kind);
    out.put_u16(channel);
    let at = out.len();
    out.put_u32(0);
    at
}

fn finish(out: &mut BytesMut, at: usize) {
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    out.put_u8(FRAME_END);
}

fn put_short_str(out: &mut BytesMut, s: &str) {
    let b = crate::shortstr::truncated(s).as_bytes();
    out.put_u8(b.len() as u8);
    out.put_slice(b);
}

/// Encodes any method with amq-protocol's generator.
pub fn encode_method(out: &mut BytesMut, channel: u16, method: &AMQPClass) {
    let at = begin(out, FRAME_METHOD, channel);
    // Generation only fails on a full fixed buffer, which a Vec never is.
    if let Ok(buf) = cookie_factory::gen_simple(
        amq_protocol::protocol::gen_class(method),
        Vec::with_capacity(64),
    ) {
        out.put_slice(&buf);
    }
    finish(out, at);
}

/// Encodes a heartbeat frame.
pub fn encode_heartbeat(out: &mut BytesMut) {
    out.put_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// Encodes the content header and body frames of a message.
pub fn encode_content(
    out: &mut BytesMut,
    channel: u16,
    raw_properties: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    encode_content_header(out, channel, raw_properties, body.len());
    for part in body.chunks(body_frame_size(frame_max)) {
        out.reserve(part.len() + FRAME_OVERHEAD);
        let at = begin(out, FRAME_BODY, channel);
        out.put_slice(part);
        finish(out, at);
    }
}

/// Bodies at least this large are queued for the socket by reference (`encode_content_shared`).
pub const SHARED_BODY_MIN: usize = 16 * 1024;

/// As `encode_content`, without copying the body: each body frame's payload is pushed to
/// `chunks` as a slice of `body`, after everything encoded into `out` so far (which is pushed
/// before it); its frame-end octet starts `out` again.
pub fn encode_content_shared(
    out: &mut BytesMut,
    chunks: &mut Vec<Bytes>,
    channel: u16,
    raw_properties: &[u8],
    body: &Bytes,
    frame_max: u32,
) {
    encode_content_header(out, channel, raw_properties, body.len());
    let size = body_frame_size(frame_max);
    let mut at = 0;
    while at < body.len() {
        let part = size.min(body.len() - at);
        out.put_u8(FRAME_BODY);
        out.put_u16(channel);
        out.put_u32(part as u32);
        chunks.push(out.split().freeze());
        chunks.push(body.slice(at..at + part));
        out.put_u8(FRAME_END);
        at += part;
    }
}

fn encode_content_header(out: &mut BytesMut, channel: u16, raw_properties: &[u8], body: usize) {
    let at = begin(out, FRAME_HEADER, channel);
    out.put_u16(60);
    out.put_u16(0);
    out.put_u64(body as u64);
    out.put_slice(raw_properties);
    finish(out, at);
}

/// Payload bytes per body frame under `frame_max`.
fn body_frame_size(frame_max: u32) -> usize {
    (frame_max as usize).saturating_sub(FRAME_OVERHEAD).max(1)
}

/// Fields of basic.deliver.
pub struct DeliverFields<'a> {
    /// Consumer tag.
    pub consumer_tag: &'a str,
    /// Delivery tag.
    pub delivery_tag: u64,
    /// Redelivered flag.
    pub redelivered: bool,
    /// Exchange.
    pub exchange: &'a str,
    /// Routing key.
    pub routing_key: &'a str,
}

/// Encodes basic.deliver (without content).
pub fn encode_deliver(out: &mut BytesMut, channel: u16, f: &DeliverFields<'_>) {
    let at = begin(out, FRAME_METHOD, channel);
    out.put_u16(60);
    out.put_u16(60);
    put_short_str(out, f.consumer_tag);
    out.put_u64(f.delivery_tag);
    out.put_u8(u8::from(f.redelivered));
    put_short_str(out, f.exchange);
    put_short_str(out, f.routing_key);
    finish(out, at);
}

/// Encodes basic.get-ok (without content).
pub fn encode_get_ok(
    out: &mut BytesMut,
    channel: u16,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    message_count: u32,
) {
    let at = begin(out, FRAME_METHOD, channel);
    out.put_u16(60);
    out.put_u16(71);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_short_str(out, exchange);
    put_short_str(out, routing_key);
    out.put_u32(message_count);
    finish(out, at);
}

/// Encodes basic.return (without content).
pub fn encode_return(
    out: &mut BytesMut,
    channel: u16,
    code: u16,
    text: &str,
    exchange: &str,
    routing_key: &str,
) {
    let at = begin(out, FRAME_METHOD, channel);
    out.put_u16(60);
    out.put_u16(50);
    out.put_u16(code);
    put_short_str(out, text);
    put_short_str(out, exchange);
    put_short_str(out, routing_key);
    finish(out, at);
}

/// Encodes a publisher-confirm basic.ack or basic.nack.
pub fn encode_confirm(
    out: &mut BytesMut,
    channel: u16,
    ack: bool,
    delivery_tag: u64,
    multiple: bool,
) {
    let at = begin(out, FRAME_METHOD, channel);
    out.put_u16(60);
    out.put_u16(if ack { 80 } else { 120 });
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(multiple));
    finish(out, at);
}

/// Encodes basic.publish (without content), as a client sends it (not mandatory).
pub fn encode_publish(out: &mut BytesMut, channel: u16, exchange: &str, routing_key: &str) {
    let at = begin(out, FRAME_METHOD, channel);
    out.put_u16(60);
    out.put_u16(40);
    out.put_u16(0);
    put_short_str(out, exchange);
    put_short_str(out, routing_key);
    out.put_u8(0);
    finish(out, at);
}

/// Encodes a client's basic.nack, with its requeue bit.
pub fn encode_nack(
    out: &mut BytesMut,
    channel: u16,
    delivery_tag: u64,
    multiple: bool,
    requeue: bool,
) {
    let at = begin(out, FRAME_METHOD, channel);
    out.put_u16(60);
    out.put_u16(120);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(multiple) | (u8::from(requeue) << 1));
    finish(out, at);
}

#[cfg(test)]
mod tests {
    #[test]
    fn client_publish_and_nack_encode_as_amq_protocol_does() {
        use amq_protocol::protocol::basic;
        let mut ours = BytesMut::new();
        super::encode_publish(&mut ours, 3, "x", "k");
        super::encode_nack(&mut ours, 3, 9, true, true);
        let mut theirs = BytesMut::new();
        for m in [
            AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: "x".into(),
                routing_key: "k".into(),
                mandatory: false,
                immediate: false,
            })),
            AMQPClass::Basic(basic::AMQPMethod::Nack(basic::Nack {
                delivery_tag: 9,
                multiple: true,
                requeue: true,
            })),
        ] {
            super::encode_method(&mut theirs, 3, &m);
        }
        assert_eq!(ours, theirs);
    }

    #[test]
    fn hot_methods_decode_as_the_generic_parser_does() {
        use amq_protocol::frame::{gen_frame, AMQPFrame};
        use amq_protocol::protocol::basic;
        let cases = [
            AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: "amq.direct".into(),
                routing_key: "a.routing.key".into(),
                mandatory: true,
                immediate: false,
            })),
            AMQPClass::Basic(basic::AMQPMethod::Publish(basic::Publish {
                exchange: "".into(),
                routing_key: "".into(),
                mandatory: false,
                immediate: true,
            })),
            AMQPClass::Basic(basic::AMQPMethod::Ack(basic::Ack {
                delivery_tag: 0x0102_0304_0506_0708,
                multiple: true,
            })),
        ];
        for class in cases {
            let buf = cookie_factory::gen_simple(
                gen_frame(&AMQPFrame::Method(1, class.clone())),
                Vec::new(),
            )
            .expect("encode");
            let payload = &buf[7..buf.len() - 1];
            let ids = (
                u16::from_be_bytes([payload[0], payload[1]]),
                u16::from_be_bytes([payload[2], payload[3]]),
            );
            let fast = decode_hot(ids, &payload[4..]).expect("decoded by hand");
            assert_eq!(format!("{fast:?}"), format!("{class:?}"));
            let generic = parse_class(payload).expect("generic").1;
            assert_eq!(format!("{fast:?}"), format!("{generic:?}"));
        }
        // Truncated or trailing bytes fall back to the generic parser (and its errors).
        assert!(decode_hot((60, 40), &[0, 0, 3, b'a']).is_none());
        assert!(decode_hot((60, 80), &[0; 10]).is_none());
    }

    use super::*;
    use amq_protocol::frame::{gen_frame, parsing::parse_frame, AMQPFrame};
    use amq_protocol::protocol::basic;

    fn frame_bytes(f: &AMQPFrame) -> Vec<u8> {
        cookie_factory::gen_simple(gen_frame(f), Vec::new()).expect("gen")
    }

    #[test]
    fn method_round_trip_and_partial_input() {
        let m = AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 10,
            global: false,
        }));
        let bytes = frame_bytes(&AMQPFrame::Method(3, m.clone()));
        let mut buf = BytesMut::from(&bytes[..bytes.len() - 1]);
        assert!(decode(&mut buf, 4096).expect("ok").is_none());
        buf.put_u8(FRAME_END);
        match decode(&mut buf, 4096).expect("ok") {
            Some(Frame::Method(3, c)) => assert_eq!(*c, m),
            other => panic!("unexpected {other:?}"),
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn encoders_agree_with_amq_protocol() {
        let mut out = BytesMut::new();
        encode_deliver(
            &mut out,
            1,
            &DeliverFields {
                consumer_tag: "ctag",
                delivery_tag: 7,
                redelivered: true,
                exchange: "x",
                routing_key: "rk",
            },
        );
        match parse_frame(&out[..]) {
            Ok((_, AMQPFrame::Method(1, AMQPClass::Basic(basic::AMQPMethod::Deliver(d))))) => {
                assert_eq!(d.consumer_tag.as_str(), "ctag");
                assert_eq!(d.delivery_tag, 7);
                assert!(d.redelivered);
                assert_eq!(d.routing_key.as_str(), "rk");
            }
            other => panic!("unexpected {other:?}"),
        }
        let mut out = BytesMut::new();
        encode_content(&mut out, 2, &[0, 0], b"hello world", 4096 + 8);
        let mut copy = out.clone();
        match decode(&mut copy, 0).expect("ok") {
            Some(Frame::Header(2, h)) => assert_eq!(h.body_size, 11),
            other => panic!("unexpected {other:?}"),
        }
        match decode(&mut copy, 0).expect("ok") {
            Some(Frame::Body(2, b)) => assert_eq!(&b[..], b"hello world"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn bad_frames_are_rejected_before_allocation() {
        let mut buf = BytesMut::from(&[1u8, 0, 1, 0xff, 0xff, 0xff, 0xff][..]);
        let e = decode(&mut buf, 131_072).expect_err("too large");
        assert_eq!(e.code, 501);
        assert!(buf.capacity() < 1 << 20);
        let mut buf = BytesMut::from(&[9u8, 0, 0, 0, 0, 0, 0, 0xCE][..]);
        assert_eq!(decode(&mut buf, 4096).expect_err("type").code, 501);
        let mut buf = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0xAB][..]);
        assert_eq!(decode(&mut buf, 4096).expect_err("end").code, 501);
        let mut buf = BytesMut::from(&[1u8, 0, 1, 0, 0, 0, 4, 0, 99, 0, 1, 0xCE][..]);
        assert!(matches!(decode(&mut buf, 4096), Ok(Some(Frame::Refused(1, e))) if e.code == 503));
        let mut buf = BytesMut::from(&[1u8, 0, 1, 0, 0, 0, 5, 0, 60, 0, 10, 0, 0xCE][..]);
        assert_eq!(decode(&mut buf, 4096).expect_err("truncated").code, 501);
    }
}
