//! A published message. Properties are kept as the exact bytes the publisher sent (so header
//! tables pass through byte for byte) beside the few fields the broker itself needs. The property
//! bytes and the body share one `Bytes` allocation, shared by every queue the message reaches.

use amq_protocol::protocol::BasicProperties;
use amq_protocol::types::{FieldTable, ShortString};
use bytes::Bytes;

/// An immutable message, shared between queues as `Arc<Message>`.
#[derive(Debug)]
pub struct Message {
    /// Exchange it was published to.
    pub exchange: ShortString,
    /// Routing key it was published with.
    pub routing_key: ShortString,
    /// Raw property flags and values, followed by the body.
    data: Bytes,
    /// Length of the property part of `data`.
    props_len: usize,
    /// delivery-mode 2.
    pub persistent: bool,
    /// Priority property, if set.
    pub priority: Option<u8>,
    /// Per-message TTL from the `expiration` property, milliseconds.
    pub expiration_ms: Option<u64>,
}

/// The properties the broker acts on, read once from the parsed properties (content assembly
/// keeps these instead of the whole parsed header).
#[derive(Clone, Copy, Debug, Default)]
pub struct HotProperties {
    /// delivery-mode 2.
    pub persistent: bool,
    /// Priority property, if set.
    pub priority: Option<u8>,
    /// Per-message TTL from the `expiration` property, milliseconds.
    pub expiration_ms: Option<u64>,
}

/// A short string's bytes at `at` in raw properties (its length byte first); None when cut.
fn short_str_at(raw: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let len = usize::from(*raw.get(at)?);
    Some((raw.get(at + 1..at + 1 + len)?, at + 1 + len))
}

impl HotProperties {
    /// Reads them from raw property bytes (flags then values) without decoding the rest: the
    /// strings and the headers table before them are skipped by their lengths. None when the
    /// bytes are cut short or use a second flag word (no basic property needs one).
    pub fn from_raw(raw: &[u8]) -> Option<Self> {
        let flags = u16::from_be_bytes([*raw.first()?, *raw.get(1)?]);
        if flags & 1 != 0 {
            return None;
        }
        let mut at = 2;
        for bit in [0x8000u16, 0x4000] {
            if flags & bit != 0 {
                at = short_str_at(raw, at)?.1;
            }
        }
        if flags & 0x2000 != 0 {
            let len = u32::from_be_bytes(raw.get(at..at + 4)?.try_into().ok()?) as usize;
            at = at.checked_add(4 + len).filter(|end| *end <= raw.len())?;
        }
        let mut hot = HotProperties::default();
        if flags & 0x1000 != 0 {
            hot.persistent = *raw.get(at)? == 2;
            at += 1;
        }
        if flags & 0x0800 != 0 {
            hot.priority = Some(*raw.get(at)?);
            at += 1;
        }
        for bit in [0x0400u16, 0x0200] {
            if flags & bit != 0 {
                at = short_str_at(raw, at)?.1;
            }
        }
        if flags & 0x0100 != 0 {
            let (text, _) = short_str_at(raw, at)?;
            hot.expiration_ms = std::str::from_utf8(text)
                .ok()
                .and_then(crate::args::parse_expiration);
        }
        Some(hot)
    }

    /// Reads them from parsed properties.
    pub fn of(props: &BasicProperties) -> Self {
        HotProperties {
            persistent: props.delivery_mode() == &Some(2),
            priority: *props.priority(),
            expiration_ms: props
                .expiration()
                .as_ref()
                .and_then(|e| crate::args::parse_expiration(e.as_str())),
        }
    }
}

impl Message {
    /// Builds a message from the raw property bytes and body stored contiguously in `data`.
    pub fn new(
        exchange: ShortString,
        routing_key: ShortString,
        data: Bytes,
        props_len: usize,
        props: &BasicProperties,
    ) -> Self {
        Self::assemble(
            exchange,
            routing_key,
            data,
            props_len,
            HotProperties::of(props),
        )
    }

    /// The same, with the hot properties already read from `data`'s property part.
    pub fn assemble(
        exchange: ShortString,
        routing_key: ShortString,
        data: Bytes,
        props_len: usize,
        hot: HotProperties,
    ) -> Self {
        Message {
            exchange,
            routing_key,
            data,
            props_len,
            persistent: hot.persistent,
            priority: hot.priority,
            expiration_ms: hot.expiration_ms,
        }
    }

    /// Rebuilds a message from its stored form (properties parsed again for the hot fields).
    pub fn from_stored(
        exchange: &str,
        routing_key: &str,
        props_len: usize,
        data: &[u8],
    ) -> Option<Self> {
        Self::from_stored_bytes(
            exchange,
            routing_key,
            props_len,
            Bytes::copy_from_slice(data),
        )
    }

    /// The same, keeping `data` (properties then body) as it is, without a copy.
    pub fn from_stored_bytes(
        exchange: &str,
        routing_key: &str,
        props_len: usize,
        data: Bytes,
    ) -> Option<Self> {
        let (_, props) =
            amq_protocol::protocol::basic::parse_properties(data.get(..props_len)?).ok()?;
        Some(Message::new(
            crate::shortstr::short(exchange),
            crate::shortstr::short(routing_key),
            data,
            props_len,
            &props,
        ))
    }

    /// Raw property bytes (flags then values), as sent by the publisher.
    pub fn raw_properties(&self) -> &[u8] {
        &self.data[..self.props_len]
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.data[self.props_len..]
    }

    /// The body, sharing this message's buffer.
    pub fn body_bytes(&self) -> Bytes {
        self.data.slice(self.props_len..)
    }

    /// Properties and body, contiguous.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Approximate bytes this message takes in the store or in memory.
    pub fn stored_size(&self) -> usize {
        self.data.len() + self.exchange.as_str().len() + self.routing_key.as_str().len() + 16
    }

    /// Body size in bytes.
    pub fn body_len(&self) -> usize {
        self.data.len() - self.props_len
    }

    /// Decodes the properties again (only for the rare paths that need more than the hot fields).
    pub fn properties(&self) -> BasicProperties {
        amq_protocol::protocol::basic::parse_properties(self.raw_properties())
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    /// The `headers` table, empty when absent.
    pub fn headers(&self) -> FieldTable {
        self.properties().headers().clone().unwrap_or_default()
    }

    /// Whether the publisher set a `headers` table (read from the flag bits, without parsing).
    pub fn has_headers(&self) -> bool {
        self.raw_properties().first().is_some_and(|b| b & 0x20 != 0)
    }

    /// Whether the publisher set `reply_to` (read from the flag bits, without parsing).
    pub fn has_reply_to(&self) -> bool {
        self.raw_properties().first().is_some_and(|b| b & 0x02 != 0)
    }

    /// A copy with other properties (re-encoded) and the same body, exchange and routing key
    /// unless given.
    pub fn with_properties(
        &self,
        props: &BasicProperties,
        exchange: Option<&str>,
        routing_key: Option<&str>,
    ) -> Message {
        let raw = cookie_factory::gen_simple(
            amq_protocol::protocol::basic::gen_properties(props),
            Vec::new(),
        )
        .unwrap_or_default();
        let mut data = bytes::BytesMut::with_capacity(raw.len() + self.body_len());
        data.extend_from_slice(&raw);
        data.extend_from_slice(self.body());
        Message::new(
            exchange.map_or_else(|| self.exchange.clone(), crate::shortstr::short),
            routing_key.map_or_else(|| self.routing_key.clone(), crate::shortstr::short),
            data.freeze(),
            raw.len(),
            props,
        )
    }

    /// A copy carrying `x-delivery-count` (a redelivery from a queue with a delivery limit).
    pub fn with_delivery_count(&self, count: u32) -> Message {
        self.with_header(
            "x-delivery-count",
            amq_protocol::types::AMQPValue::LongLongInt(i64::from(count)),
        )
    }

    /// A copy with the long-long-integer header `name` added, spliced into the raw property
    /// bytes without decoding them (the stream's `x-stream-offset` on every delivery); the
    /// slower [`Message::with_header`] when the headers may already name it.
    pub fn with_long_header(&self, name: &str, value: i64) -> Message {
        match splice_long_header(self.raw_properties(), name, value) {
            Some(props) => {
                let mut data = bytes::BytesMut::with_capacity(props.len() + self.body_len());
                data.extend_from_slice(&props);
                data.extend_from_slice(self.body());
                Message::assemble(
                    self.exchange.clone(),
                    self.routing_key.clone(),
                    data.freeze(),
                    props.len(),
                    HotProperties {
                        persistent: self.persistent,
                        priority: self.priority,
                        expiration_ms: self.expiration_ms,
                    },
                )
            }
            None => self.with_header(name, amq_protocol::types::AMQPValue::LongLongInt(value)),
        }
    }

    /// A copy with one header set (replaced if the publisher set it).
    pub fn with_header(&self, name: &str, value: amq_protocol::types::AMQPValue) -> Message {
        let props = self.properties();
        let mut headers = props.headers().clone().unwrap_or_default();
        headers.insert(name.into(), value);
        self.with_properties(&props.with_headers(headers), None, None)
    }

    /// Sender-selected distribution: the extra routing keys of the `CC` and `BCC` headers, and
    /// the message to deliver (without its `BCC` header, which RabbitMQ strips).
    pub fn sender_selected(self: std::sync::Arc<Self>) -> (std::sync::Arc<Self>, Vec<String>) {
        if !self.has_headers() {
            return (self, Vec::new());
        }
        let props = self.properties();
        let Some(headers) = props.headers() else {
            return (self, Vec::new());
        };
        let mut keys = Vec::new();
        for name in ["CC", "BCC"] {
            if let Some(amq_protocol::types::AMQPValue::FieldArray(a)) = headers.inner().get(name) {
                keys.extend(a.as_slice().iter().filter_map(crate::args::text));
            }
        }
        if !headers.contains_key("BCC") {
            return (self, keys);
        }
        let kept: std::collections::BTreeMap<_, _> = headers
            .inner()
            .iter()
            .filter(|(k, _)| k.as_str() != "BCC")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let stripped = props.clone().with_headers(kept.into());
        (
            std::sync::Arc::new(self.with_properties(&stripped, None, None)),
            keys,
        )
    }
}

/// Raw properties with the header `name` (a long long, `l`) added to the headers table (made
/// when there is none); None when that cannot be done without decoding: a second flag word,
/// cut bytes, a name that is no short string, or headers whose bytes contain the name already.
fn splice_long_header(raw: &[u8], name: &str, value: i64) -> Option<Vec<u8>> {
    let flags = u16::from_be_bytes([*raw.first()?, *raw.get(1)?]);
    if flags & 1 != 0 || name.len() > 255 {
        return None;
    }
    let mut at = 2;
    for bit in [0x8000u16, 0x4000] {
        if flags & bit != 0 {
            at = short_str_at(raw, at)?.1;
        }
    }
    let mut entry = Vec::with_capacity(name.len() + 10);
    entry.push(name.len() as u8);
    entry.extend_from_slice(name.as_bytes());
    entry.push(b'l');
    entry.extend_from_slice(&value.to_be_bytes());
    let mut out = Vec::with_capacity(raw.len() + entry.len() + 4);
    if flags & 0x2000 != 0 {
        let len = u32::from_be_bytes(raw.get(at..at + 4)?.try_into().ok()?) as usize;
        let table = raw.get(at + 4..at + 4 + len)?;
        if table.windows(name.len()).any(|w| w == name.as_bytes()) {
            return None;
        }
        out.extend_from_slice(&raw[..at]);
        out.extend_from_slice(&u32::try_from(len + entry.len()).ok()?.to_be_bytes());
        out.extend_from_slice(table);
        out.extend_from_slice(&entry);
        out.extend_from_slice(&raw[at + 4 + len..]);
    } else {
        out.extend_from_slice(&(flags | 0x2000).to_be_bytes());
        out.extend_from_slice(&raw[2..at]);
        out.extend_from_slice(&(entry.len() as u32).to_be_bytes());
        out.extend_from_slice(&entry);
        out.extend_from_slice(&raw[at..]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::AMQPValue;

    /// Splicing a header in gives what decoding, adding and encoding again gives, whichever
    /// properties are around the table; the hot properties read from raw bytes agree.
    #[test]
    fn a_spliced_header_equals_a_re_encoded_one() {
        let mut headers = FieldTable::default();
        headers.insert("tenant".into(), AMQPValue::LongString("t1".into()));
        headers.insert("n".into(), AMQPValue::LongInt(-4));
        let full = most_properties()
            .with_content_encoding("gzip".into())
            .with_reply_to("r".into());
        let cases = [
            BasicProperties::default(),
            BasicProperties::default().with_headers(FieldTable::default()),
            BasicProperties::default().with_headers(headers.clone()),
            BasicProperties::default().with_content_type("a/b".into()),
            full.clone(),
            full.with_headers(headers),
        ];
        for props in &cases {
            let mut m = message(props);
            let hot = HotProperties::from_raw(m.raw_properties()).expect("hot");
            assert_eq!(
                (hot.persistent, hot.priority, hot.expiration_ms),
                (m.persistent, m.priority, m.expiration_ms),
                "{props:?}"
            );
            let mut body = m.raw_properties().to_vec();
            body.extend_from_slice(b"payload");
            m = Message::new(
                "x".into(),
                "k".into(),
                Bytes::from(body),
                m.raw_properties().len(),
                props,
            );
            let spliced = m.with_long_header("x-stream-offset", 42);
            let encoded = m.with_header("x-stream-offset", AMQPValue::LongLongInt(42));
            assert_eq!(spliced.properties(), encoded.properties(), "{props:?}");
            assert_eq!(spliced.body(), b"payload");
            assert_eq!(
                (spliced.persistent, spliced.priority, spliced.expiration_ms),
                (m.persistent, m.priority, m.expiration_ms)
            );
        }
        // A table that already names the header is not spliced (the header is replaced).
        let mut has = FieldTable::default();
        has.insert("x-stream-offset".into(), AMQPValue::LongLongInt(1));
        let m = message(&BasicProperties::default().with_headers(has));
        assert!(splice_long_header(m.raw_properties(), "x-stream-offset", 2).is_none());
        let again = m.with_long_header("x-stream-offset", 2);
        assert_eq!(
            again.headers().inner().get("x-stream-offset"),
            Some(&AMQPValue::LongLongInt(2))
        );
        assert!(HotProperties::from_raw(&[0x20, 0, 0, 0, 0, 9]).is_none());
    }

    fn message(props: &BasicProperties) -> Message {
        let raw = cookie_factory::gen_simple(
            amq_protocol::protocol::basic::gen_properties(props),
            Vec::new(),
        )
        .expect("encodes");
        let len = raw.len();
        Message::new("x".into(), "k".into(), Bytes::from(raw), len, props)
    }

    /// Properties with most fields set (not content-encoding, reply-to or headers).
    fn most_properties() -> BasicProperties {
        BasicProperties::default()
            .with_content_type("text/plain".into())
            .with_delivery_mode(2)
            .with_priority(3)
            .with_correlation_id("c".into())
            .with_expiration("60000".into())
            .with_message_id("m".into())
            .with_timestamp(7)
            .with_app_id("a".into())
    }

    /// The flag-bit shortcuts agree with the parsed properties, whichever others are set.
    #[test]
    fn flag_bits_match_the_parsed_properties() {
        let all = most_properties();
        let cases = [
            BasicProperties::default(),
            BasicProperties::default().with_reply_to("r".into()),
            BasicProperties::default().with_headers(FieldTable::default()),
            all.clone(),
            all.clone().with_reply_to("r".into()),
            all.with_headers(FieldTable::default()),
        ];
        for props in &cases {
            let m = message(props);
            assert_eq!(m.has_reply_to(), props.reply_to().is_some(), "{props:?}");
            assert_eq!(m.has_headers(), props.headers().is_some(), "{props:?}");
            let hot = HotProperties::of(&m.properties());
            assert_eq!(
                (m.persistent, m.priority, m.expiration_ms),
                (hot.persistent, hot.priority, hot.expiration_ms)
            );
        }
        let m = message(&cases[3]);
        assert_eq!(
            (m.persistent, m.priority, m.expiration_ms),
            (true, Some(3), Some(60000))
        );
    }
}
