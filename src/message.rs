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

impl HotProperties {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn message(props: &BasicProperties) -> Message {
        let raw = cookie_factory::gen_simple(
            amq_protocol::protocol::basic::gen_properties(props),
            Vec::new(),
        )
        .expect("encodes");
        let len = raw.len();
        Message::new("x".into(), "k".into(), Bytes::from(raw), len, props)
    }

    /// The flag-bit shortcuts agree with the parsed properties, whichever others are set.
    #[test]
    fn flag_bits_match_the_parsed_properties() {
        let all = BasicProperties::default()
            .with_content_type("text/plain".into())
            .with_delivery_mode(2)
            .with_priority(3)
            .with_correlation_id("c".into())
            .with_expiration("60000".into())
            .with_message_id("m".into())
            .with_timestamp(7)
            .with_app_id("a".into());
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
