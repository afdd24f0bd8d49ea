//! Table definitions, the schema version, and the byte encodings of keys and values.
//!
//! Entity keys are sequences of length-prefixed byte strings (`u32` big-endian length, then the
//! bytes), so `(vhost, name)` pairs never collide and sort by vhost first. Messages are keyed
//! by `(queue id, sequence)`; a small index table beside them lets recovery rebuild every
//! queue's order without reading a single body.

use amq_protocol::types::FieldTable;
use redb::TableDefinition;

/// Version of the layout below; a store with a higher one is refused.
pub const SCHEMA_VERSION: u64 = 1;

/// `schema_version`, `next_queue_id`.
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Virtual host names.
pub const VHOSTS: TableDefinition<&str, ()> = TableDefinition::new("vhosts");
/// User name → encoded (password, tags).
pub const USERS: TableDefinition<&str, &[u8]> = TableDefinition::new("users");
/// vhost -> its limits as JSON (`{"max-connections": 10, "max-queues": 100}`).
pub const VHOST_LIMITS: TableDefinition<&str, &[u8]> = TableDefinition::new("vhost_limits");
/// Encoded (component, vhost, name) → JSON: runtime parameters, as RabbitMQ keeps them
/// (components `policy`, `operator_policy`, and `global` with an empty vhost).
pub const PARAMETERS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("parameters");
/// Encoded (user, vhost) → encoded (configure, write, read) patterns.
pub const PERMISSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("permissions");
/// Encoded (vhost, name) → encoded exchange.
pub const EXCHANGES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("exchanges");
/// Encoded (vhost, name) → encoded queue (with its id).
pub const QUEUES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("queues");
/// Encoded binding → nothing.
pub const BINDINGS: TableDefinition<&[u8], ()> = TableDefinition::new("bindings");
/// (queue id, sequence) → encoded message.
pub const MESSAGES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("messages");
/// (queue id, sequence) → body size in the low 32 bits, priority in the next 8: the queue
/// order, readable without the bodies.
pub const QUEUE_INDEX: TableDefinition<(u64, u64), u64> = TableDefinition::new("queue_index");

/// Packs an index entry.
pub fn index_entry(size: usize, priority: u8) -> u64 {
    (size.min(u32::MAX as usize) as u64) | (u64::from(priority) << 32)
}

/// Unpacks an index entry into (size, priority).
pub fn index_parts(v: u64) -> (u32, u8) {
    (v as u32, (v >> 32) as u8)
}
/// (due time in Unix milliseconds, id) → encoded (vhost, exchange, message): messages held
/// by x-delayed-message exchanges.
pub const DELAYED: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("delayed");
/// (queue id, sequence) → expiry in Unix milliseconds, for stored messages with a TTL.
pub const EXPIRES: TableDefinition<(u64, u64), u64> = TableDefinition::new("expires");
/// Queue id → highest sequence ever handed to a consumer (for the redelivered flag).
pub const DELIVERED: TableDefinition<u64, u64> = TableDefinition::new("delivered");
/// (Raft group, log index) → entry as the cluster encodes it. One table for every group on
/// the node, so their appends share the writer's group commit.
pub const RAFT_LOG: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("raft_log");
/// (Raft group, which) → the group's vote, committed or last purged log id, as the cluster
/// encodes them.
pub const RAFT_STATE: TableDefinition<(u64, u8), &[u8]> = TableDefinition::new("raft_state");
/// Encoded path → value: the replicated metadata tree (the state machine of the cluster's
/// metadata group), paths as `encode_parts` of their segments.
pub const META_TREE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta_tree");

/// (Raft group, key) → value: the state machines of the replicated queues' groups, each a map
/// from keys (the log index of the entry that added the value) to opaque values.
pub const GROUP_VALUES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("group_values");

/// Concatenates length-prefixed parts.
pub fn encode_parts(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
    for p in parts {
        out.extend_from_slice(&(p.len() as u32).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// Splits what `encode_parts` wrote; None when the bytes are not such a sequence.
pub fn decode_parts(mut bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let mut parts = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let part = bytes.get(4..4 + len)?;
        parts.push(part);
        bytes = &bytes[4 + len..];
    }
    Some(parts)
}

/// A field table in AMQP wire form.
pub fn encode_table(t: &FieldTable) -> Vec<u8> {
    cookie_factory::gen_simple(
        amq_protocol::types::generation::gen_field_table(t),
        Vec::new(),
    )
    .unwrap_or_default()
}

/// Parses a field table in AMQP wire form.
pub fn decode_table(bytes: &[u8]) -> Option<FieldTable> {
    amq_protocol::types::parsing::parse_field_table(bytes)
        .ok()
        .map(|(_, t)| t)
}

/// Flag bits of exchanges and queues.
pub mod flags {
    /// Durable.
    pub const DURABLE: u8 = 1;
    /// Auto-delete.
    pub const AUTO_DELETE: u8 = 2;
    /// Internal (exchanges).
    pub const INTERNAL: u8 = 4;
}

/// A stored message: exchange, routing key, property length, then properties and body.
pub fn encode_message(exchange: &str, routing_key: &str, props_len: usize, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + exchange.len() + routing_key.len() + 4 + data.len());
    encode_message_into(&mut out, exchange, routing_key, props_len, data);
    out
}

/// Appends what `encode_message` returns.
pub fn encode_message_into(
    out: &mut Vec<u8>,
    exchange: &str,
    routing_key: &str,
    props_len: usize,
    data: &[u8],
) {
    out.push(exchange.len() as u8);
    out.extend_from_slice(exchange.as_bytes());
    out.push(routing_key.len() as u8);
    out.extend_from_slice(routing_key.as_bytes());
    out.extend_from_slice(&(props_len as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// The parts of a stored message: (exchange, routing key, props_len, properties and body).
pub fn decode_message(bytes: &[u8]) -> Option<(&str, &str, usize, &[u8])> {
    let xl = *bytes.first()? as usize;
    let exchange = std::str::from_utf8(bytes.get(1..1 + xl)?).ok()?;
    let rest = &bytes[1 + xl..];
    let kl = *rest.first()? as usize;
    let routing_key = std::str::from_utf8(rest.get(1..1 + kl)?).ok()?;
    let rest = &rest[1 + kl..];
    let props_len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let data = &rest[4..];
    if props_len > data.len() {
        return None;
    }
    Some((exchange, routing_key, props_len, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::AMQPValue;

    #[test]
    fn parts_round_trip_and_do_not_collide() {
        let a = encode_parts(&[b"/", b"ab"]);
        let b = encode_parts(&[b"/a", b"b"]);
        assert_ne!(a, b);
        assert_eq!(decode_parts(&a), Some(vec![&b"/"[..], b"ab"]));
        assert_eq!(
            decode_parts(&encode_parts(&[b"", b"x"])),
            Some(vec![&b""[..], b"x"])
        );
        assert_eq!(decode_parts(&[0, 0, 0, 9, 1]), None);
    }

    #[test]
    fn vhost_prefix_orders_keys() {
        let k1 = encode_parts(&[b"a", b"zzz"]);
        let k2 = encode_parts(&[b"b", b"aaa"]);
        assert!(k1 < k2);
    }

    #[test]
    fn message_round_trip() {
        let bytes = encode_message("amq.direct", "rk", 2, b"\x00\x00body");
        assert_eq!(
            decode_message(&bytes),
            Some(("amq.direct", "rk", 2, &b"\x00\x00body"[..]))
        );
        assert_eq!(decode_message(&bytes[..5]), None);
    }

    #[test]
    fn index_entries_pack_size_and_priority() {
        assert_eq!(index_parts(index_entry(1024, 7)), (1024, 7));
        assert_eq!(index_parts(index_entry(0, 255)), (0, 255));
        assert_eq!(index_parts(index_entry(usize::MAX, 0)), (u32::MAX, 0));
    }

    #[test]
    fn table_round_trip() {
        let mut t = FieldTable::default();
        t.insert("x-max-length".into(), AMQPValue::LongInt(5));
        assert_eq!(decode_table(&encode_table(&t)), Some(t));
    }
}
