//! The AMQP 1.0 message format, as far as streams need it: RabbitMQ's stream protocol carries
//! AMQP 1.0 messages, while AMQP 0-9-1 publishers and consumers use the same streams. The two
//! mappings follow RabbitMQ's (its `mc_amqpl` / `mc_amqp` conversions):
//!
//! - 0-9-1 to 1.0 ([`encode`]): a header section (durable, priority), message annotations
//!   `x-exchange` and `x-routing-key`, the properties section (message-id, user-id, reply-to,
//!   correlation-id, content-type, content-encoding, creation-time), application properties
//!   from the headers that have a 1.0 equivalent, and the body as one data section.
//! - 1.0 to 0-9-1 ([`decode`]): the body is the data sections (or a string or binary
//!   amqp-value), the properties map back, application properties become headers. Input is
//!   parsed without panicking; what cannot be read yields None.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::BufMut;

const HEADER: u8 = 0x70;
const MESSAGE_ANNOTATIONS: u8 = 0x72;
const PROPERTIES: u8 = 0x73;
const APPLICATION_PROPERTIES: u8 = 0x74;
const DATA: u8 = 0x75;
const AMQP_VALUE: u8 = 0x77;

/// What a 0-9-1 message is made of, for [`encode`].
pub struct Parts<'a> {
    pub exchange: &'a str,
    pub routing_key: &'a str,
    pub properties: &'a BasicProperties,
    pub body: &'a [u8],
}

fn put_str(out: &mut Vec<u8>, code8: u8, code32: u8, b: &[u8]) {
    match u8::try_from(b.len()) {
        Ok(n) => {
            out.push(code8);
            out.push(n);
        }
        Err(_) => {
            out.push(code32);
            out.put_u32(b.len() as u32);
        }
    }
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, s: &str) {
    put_str(out, 0xa1, 0xb1, s.as_bytes());
}

fn symbol(out: &mut Vec<u8>, s: &str) {
    put_str(out, 0xa3, 0xb3, s.as_bytes());
}

fn binary(out: &mut Vec<u8>, b: &[u8]) {
    put_str(out, 0xa0, 0xb0, b);
}

/// A list or map of `count` already encoded items (list32 / map32).
fn compound(out: &mut Vec<u8>, code32: u8, count: usize, items: &[u8]) {
    out.push(code32);
    out.put_u32(items.len() as u32 + 4);
    out.put_u32(count as u32);
    out.extend_from_slice(items);
}

fn section(out: &mut Vec<u8>, descriptor: u8) {
    out.extend_from_slice(&[0x00, 0x53, descriptor]);
}

/// A header value as an AMQP 1.0 simple value; false when it has none (tables, arrays).
fn value(out: &mut Vec<u8>, v: &AMQPValue) -> bool {
    match v {
        AMQPValue::Boolean(b) => out.push(if *b { 0x41 } else { 0x42 }),
        AMQPValue::ShortShortInt(n) => out.extend_from_slice(&[0x51, *n as u8]),
        AMQPValue::ShortShortUInt(n) => out.extend_from_slice(&[0x50, *n]),
        AMQPValue::ShortInt(n) => {
            out.push(0x61);
            out.put_i16(*n);
        }
        AMQPValue::ShortUInt(n) => {
            out.push(0x60);
            out.put_u16(*n);
        }
        AMQPValue::LongInt(n) => {
            out.push(0x71);
            out.put_i32(*n);
        }
        AMQPValue::LongUInt(n) => {
            out.push(0x70);
            out.put_u32(*n);
        }
        AMQPValue::LongLongInt(n) => {
            out.push(0x81);
            out.put_i64(*n);
        }
        AMQPValue::Float(f) => {
            out.push(0x72);
            out.put_f32(*f);
        }
        AMQPValue::Double(f) => {
            out.push(0x82);
            out.put_f64(*f);
        }
        AMQPValue::Timestamp(t) => {
            out.push(0x83);
            out.put_i64((*t).min(i64::MAX as u64 / 1000) as i64 * 1000);
        }
        AMQPValue::ShortString(s) => string(out, s.as_str()),
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(t) => string(out, t),
            Err(_) => binary(out, s.as_bytes()),
        },
        AMQPValue::ByteArray(b) => binary(out, b.as_slice()),
        AMQPValue::Void => out.push(0x40),
        _ => return false,
    }
    true
}

/// A 0-9-1 message as an AMQP 1.0 message.
pub fn encode(m: &Parts<'_>) -> Vec<u8> {
    let p = m.properties;
    let mut out = Vec::with_capacity(m.body.len() + 128);
    let durable = p.delivery_mode().is_some_and(|d| d == 2);
    if durable || p.priority().is_some() {
        let mut items = vec![if durable { 0x41 } else { 0x42 }];
        let mut count = 1;
        if let Some(pr) = p.priority() {
            items.extend_from_slice(&[0x50, *pr]);
            count = 2;
        }
        section(&mut out, HEADER);
        compound(&mut out, 0xd0, count, &items);
    }
    let mut ann = Vec::new();
    symbol(&mut ann, "x-exchange");
    string(&mut ann, m.exchange);
    symbol(&mut ann, "x-routing-key");
    string(&mut ann, m.routing_key);
    section(&mut out, MESSAGE_ANNOTATIONS);
    compound(&mut out, 0xd1, 4, &ann);

    let mut props = Vec::new();
    let opt_str = |props: &mut Vec<u8>, s: Option<&str>| match s {
        Some(s) => string(props, s),
        None => props.push(0x40),
    };
    opt_str(&mut props, p.message_id().as_ref().map(|s| s.as_str()));
    match p.user_id() {
        Some(u) => binary(&mut props, u.as_str().as_bytes()),
        None => props.push(0x40),
    }
    props.push(0x40); // to
    props.push(0x40); // subject
    opt_str(&mut props, p.reply_to().as_ref().map(|s| s.as_str()));
    opt_str(&mut props, p.correlation_id().as_ref().map(|s| s.as_str()));
    match p.content_type() {
        Some(c) => symbol(&mut props, c.as_str()),
        None => props.push(0x40),
    }
    match p.content_encoding() {
        Some(c) => symbol(&mut props, c.as_str()),
        None => props.push(0x40),
    }
    props.push(0x40); // absolute-expiry-time
    match p.timestamp() {
        Some(t) => {
            props.push(0x83);
            props.put_i64((*t).min(i64::MAX as u64 / 1000) as i64 * 1000);
        }
        None => props.push(0x40),
    }
    section(&mut out, PROPERTIES);
    compound(&mut out, 0xd0, 10, &props);

    if let Some(h) = p.headers() {
        let mut items = Vec::new();
        let mut count = 0;
        for (k, v) in h.inner() {
            let mark = items.len();
            string(&mut items, k.as_str());
            if value(&mut items, v) {
                count += 2;
            } else {
                items.truncate(mark);
            }
        }
        if count > 0 {
            section(&mut out, APPLICATION_PROPERTIES);
            compound(&mut out, 0xd1, count, &items);
        }
    }
    section(&mut out, DATA);
    binary(&mut out, m.body);
    out
}

/// A read position in an AMQP 1.0 encoding.
struct Cursor<'a> {
    b: &'a [u8],
}

/// A decoded AMQP 1.0 value, as far as a 0-9-1 message can hold it.
#[derive(Debug, Clone, PartialEq)]
enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Timestamp(i64),
    Str(&'a str),
    Bytes(&'a [u8]),
    /// Lists, maps and anything else: their bytes, undecoded.
    Compound(&'a [u8], u32),
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn be<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Some(a)
    }

    fn value(&mut self) -> Option<Value<'a>> {
        let code = self.u8()?;
        Some(match code {
            0x00 => {
                self.value()?; // the descriptor
                return self.value();
            }
            0x40 => Value::Null,
            0x41 => Value::Bool(true),
            0x42 => Value::Bool(false),
            0x56 => Value::Bool(self.u8()? != 0),
            0x43 | 0x44 => Value::UInt(0),
            0x50 | 0x52 | 0x53 => Value::UInt(self.u8()?.into()),
            0x51 | 0x54 | 0x55 => Value::Int((self.u8()? as i8).into()),
            0x60 => Value::UInt(u16::from_be_bytes(self.be()?).into()),
            0x61 => Value::Int(i16::from_be_bytes(self.be()?).into()),
            0x70 => Value::UInt(u32::from_be_bytes(self.be()?).into()),
            0x71 => Value::Int(i32::from_be_bytes(self.be()?).into()),
            0x80 => Value::UInt(u64::from_be_bytes(self.be()?)),
            0x81 => Value::Int(i64::from_be_bytes(self.be()?)),
            0x72 => Value::Double(f32::from_be_bytes(self.be()?).into()),
            0x82 => Value::Double(f64::from_be_bytes(self.be()?)),
            0x83 => Value::Timestamp(i64::from_be_bytes(self.be()?)),
            0x73 => Value::UInt(u32::from_be_bytes(self.be()?).into()), // char
            0x74 => Value::Compound(self.take(4)?, 0),                  // decimal32
            0x84 | 0x94 => Value::Compound(self.take(if code == 0x84 { 8 } else { 16 })?, 0),
            0x98 => Value::Bytes(self.take(16)?), // uuid
            0xa0 | 0xa1 | 0xa3 => {
                let n = usize::from(self.u8()?);
                self.variable(code, n)?
            }
            0xb0 | 0xb1 | 0xb3 => {
                let n = u32::from_be_bytes(self.be()?) as usize;
                self.variable(code, n)?
            }
            0x45 => Value::Compound(&[], 0),
            0xc0 | 0xc1 | 0xe0 => {
                let size = usize::from(self.u8()?);
                let body = self.take(size)?;
                let count = u32::from(*body.first()?);
                Value::Compound(body.get(1..)?, count)
            }
            0xd0 | 0xd1 | 0xf0 => {
                let size = u32::from_be_bytes(self.be()?) as usize;
                let body = self.take(size)?;
                let count = u32::from_be_bytes(body.get(..4)?.try_into().ok()?);
                Value::Compound(body.get(4..)?, count)
            }
            _ => return None,
        })
    }

    fn variable(&mut self, code: u8, n: usize) -> Option<Value<'a>> {
        let b = self.take(n)?;
        Some(match code & 0x0f {
            0x00 => Value::Bytes(b),
            _ => Value::Str(std::str::from_utf8(b).ok()?),
        })
    }
}

/// The items of a list or map.
fn items<'a>(body: &'a [u8], count: u32) -> Option<Vec<Value<'a>>> {
    let mut c = Cursor { b: body };
    let mut out = Vec::with_capacity(count.min(64) as usize);
    for _ in 0..count {
        out.push(c.value()?);
    }
    Some(out)
}

fn text(v: &Value<'_>) -> Option<String> {
    match v {
        Value::Str(s) => Some((*s).to_owned()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::UInt(n) => Some(n.to_string()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn short(v: &Value<'_>) -> Option<amq_protocol::types::ShortString> {
    text(v).map(|s| crate::shortstr::short(&s))
}

fn header_value(v: &Value<'_>) -> Option<AMQPValue> {
    Some(match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Int(n) => AMQPValue::LongLongInt(*n),
        Value::UInt(n) => AMQPValue::LongLongInt(i64::try_from(*n).ok()?),
        Value::Double(f) => AMQPValue::Double(*f),
        Value::Timestamp(t) => AMQPValue::Timestamp((*t).max(0) as u64 / 1000),
        Value::Str(s) => AMQPValue::LongString(LongString::from(*s)),
        Value::Bytes(b) => AMQPValue::ByteArray(b.to_vec().into()),
        Value::Compound(..) => return None,
    })
}

/// A 1.0 message read as 0-9-1.
#[derive(Debug)]
pub struct Decoded {
    pub properties: BasicProperties,
    pub body: Vec<u8>,
    /// The `x-exchange` and `x-routing-key` annotations, when present.
    pub exchange: Option<String>,
    pub routing_key: Option<String>,
}

/// A 1.0 message as 0-9-1 properties and a body; None when `b` is not one.
pub fn decode(b: &[u8]) -> Option<Decoded> {
    let mut c = Cursor { b };
    let (mut exchange, mut routing_key) = (None, None);
    let mut props = BasicProperties::default();
    let mut headers = FieldTable::default();
    let mut body: Vec<u8> = Vec::new();
    while !c.b.is_empty() {
        if c.u8()? != 0x00 {
            return None;
        }
        let descriptor = match c.value()? {
            Value::UInt(d) => d,
            _ => return None,
        };
        let v = c.value()?;
        match (descriptor as u8, v) {
            (HEADER, Value::Compound(list, n)) => {
                let f = items(list, n)?;
                if f.first() == Some(&Value::Bool(true)) {
                    props = props.with_delivery_mode(2);
                }
                if let Some(Value::UInt(p)) = f.get(1) {
                    props = props.with_priority((*p).min(255) as u8);
                }
            }
            (PROPERTIES, Value::Compound(list, n)) => {
                let f = items(list, n)?;
                let at = |i: usize| f.get(i).filter(|v| **v != Value::Null);
                if let Some(v) = at(0).and_then(short) {
                    props = props.with_message_id(v);
                }
                if let Some(v) = at(1).and_then(short) {
                    props = props.with_user_id(v);
                }
                if let Some(v) = at(4).and_then(short) {
                    props = props.with_reply_to(v);
                }
                if let Some(v) = at(5).and_then(short) {
                    props = props.with_correlation_id(v);
                }
                if let Some(v) = at(6).and_then(short) {
                    props = props.with_content_type(v);
                }
                if let Some(v) = at(7).and_then(short) {
                    props = props.with_content_encoding(v);
                }
                if let Some(Value::Timestamp(t)) = at(9) {
                    props = props.with_timestamp((*t).max(0) as u64 / 1000);
                }
            }
            (MESSAGE_ANNOTATIONS | APPLICATION_PROPERTIES, Value::Compound(map, n)) => {
                let kv = items(map, n)?;
                for pair in kv.chunks_exact(2) {
                    let (Some(k), Some(v)) = (text(&pair[0]), header_value(&pair[1])) else {
                        continue;
                    };
                    if descriptor as u8 == MESSAGE_ANNOTATIONS {
                        match k.as_str() {
                            "x-exchange" => exchange = text(&pair[1]),
                            "x-routing-key" => routing_key = text(&pair[1]),
                            _ => {}
                        }
                        if k == "x-exchange" || k == "x-routing-key" {
                            continue;
                        }
                    }
                    headers.insert(crate::shortstr::short(&k), v);
                }
            }
            (DATA, Value::Bytes(d)) => body.extend_from_slice(d),
            (AMQP_VALUE, Value::Str(s)) => body.extend_from_slice(s.as_bytes()),
            (AMQP_VALUE, Value::Bytes(d)) => body.extend_from_slice(d),
            _ => {}
        }
    }
    if !headers.inner().is_empty() {
        props = props.with_headers(headers);
    }
    Some(Decoded {
        properties: props,
        body,
        exchange,
        routing_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_091_message_round_trips_through_amqp_10() {
        let mut h = FieldTable::default();
        h.insert("region".into(), AMQPValue::LongString("eu".into()));
        h.insert("n".into(), AMQPValue::LongInt(-3));
        h.insert(
            "nested".into(),
            AMQPValue::FieldTable(FieldTable::default()),
        );
        let props = BasicProperties::default()
            .with_message_id("m-1".into())
            .with_content_type("text/plain".into())
            .with_correlation_id("c".into())
            .with_delivery_mode(2)
            .with_priority(4)
            .with_timestamp(1_700_000_000)
            .with_headers(h);
        let big = vec![7u8; 300];
        let encoded = encode(&Parts {
            exchange: "ex",
            routing_key: "rk",
            properties: &props,
            body: &big,
        });
        assert_eq!(&encoded[..3], &[0x00, 0x53, HEADER]);
        let d = decode(&encoded).expect("decodes");
        assert_eq!(d.body, big);
        assert_eq!(d.exchange.as_deref(), Some("ex"));
        assert_eq!(d.routing_key.as_deref(), Some("rk"));
        let back = d.properties;
        assert_eq!(back.message_id(), props.message_id());
        assert_eq!(back.content_type(), props.content_type());
        assert_eq!(back.correlation_id(), props.correlation_id());
        assert_eq!(back.delivery_mode(), &Some(2));
        assert_eq!(back.priority(), &Some(4));
        assert_eq!(back.timestamp(), &Some(1_700_000_000));
        let headers = back.headers().clone().expect("headers");
        assert_eq!(
            headers.inner().get("region"),
            Some(&AMQPValue::LongString("eu".into()))
        );
        assert_eq!(headers.inner().get("n"), Some(&AMQPValue::LongLongInt(-3)));
        assert!(headers.inner().get("nested").is_none());
        // A string amqp-value body (what many 1.0 clients send); truncated or foreign input.
        let value = [0x00, 0x53, AMQP_VALUE, 0xa1, 2, b'h', b'i'];
        assert_eq!(decode(&value).map(|d| d.body), Some(b"hi".to_vec()));
        assert!(decode(&encoded[..encoded.len() - 1]).is_none());
        assert!(decode(&[0xA9, 1, 2]).is_none());
        assert!(decode(&[0x00, 0x53, DATA, 0xb0, 0xff, 0xff, 0xff, 0xff]).is_none());
    }
}
