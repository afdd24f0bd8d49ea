//! What federation reads and writes in messages and bindings, as RabbitMQ's federation
//! plugin: the `x-received-from` array header (one table per link a message crossed, the
//! newest first), which stops a message at `max-hops` links or at a broker it already
//! passed; and the `x-bound-from` array of a binding made upstream for a binding that was
//! itself federated, which carries the remaining hops.

use crate::exchange::federation_upstream::{already_seen, array, should_forward};
use amq_protocol::protocol::basic::{gen_properties, parse_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};

pub use crate::exchange::federation_upstream::ROUTING_HEADER;
/// The binding argument of the links a binding crossed.
pub const BINDING_HEADER: &str = "x-bound-from";

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

/// `table` prepended to the array header `key` of `headers`.
fn prepend(headers: &mut FieldTable, key: &str, table: FieldTable) {
    let mut list = vec![AMQPValue::FieldTable(table)];
    if let Some(AMQPValue::FieldArray(old)) = headers.inner().get(key) {
        list.extend(old.as_slice().iter().cloned());
    }
    headers.insert(
        ShortString::from(key),
        AMQPValue::FieldArray(FieldArray::from(list)),
    );
}

/// What a link adds to the messages it moves.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The upstream URI, without credentials.
    pub uri: String,
    /// The federated (downstream) exchange.
    pub exchange: String,
    /// The upstream's cluster name, when it told it.
    pub upstream_cluster: Option<String>,
    /// The upstream vhost.
    pub upstream_vhost: String,
    /// Keep `user_id` (else it is cleared, as RabbitMQ without `trust-user-id`).
    pub trust_user_id: bool,
    /// This broker's cluster name.
    pub cluster: String,
    /// The downstream vhost.
    pub vhost: String,
    /// The link's `max-hops`.
    pub max_hops: u16,
}

/// What to do with a message's encoded properties.
pub enum Verdict {
    /// Forward it with these properties.
    Forward(Vec<u8>),
    /// Forward it as it is (its properties do not parse).
    Unchanged,
    /// Drop it (and settle it upstream): it looped or went too far.
    Drop,
}

impl Stamp {
    /// Checks a message and adds this link's table to its `x-received-from`.
    pub fn apply(&self, raw: &[u8], redelivered: bool) -> Verdict {
        let Ok((_, mut props)) = parse_properties(raw) else {
            return Verdict::Unchanged;
        };
        if !should_forward(
            props.headers().as_ref(),
            u64::from(self.max_hops),
            &self.cluster,
            &self.vhost,
        ) {
            return Verdict::Drop;
        }
        let mut t = FieldTable::default();
        t.insert("uri".into(), long(&self.uri));
        t.insert("exchange".into(), long(&self.exchange));
        t.insert("redelivered".into(), AMQPValue::Boolean(redelivered));
        if let Some(c) = &self.upstream_cluster {
            t.insert("cluster-name".into(), long(c));
        }
        t.insert("vhost".into(), long(&self.upstream_vhost));
        let mut headers = props.headers().clone().unwrap_or_default();
        prepend(&mut headers, ROUTING_HEADER, t);
        props = props.with_headers(headers);
        if !self.trust_user_id && props.user_id().is_some() {
            props = without_user_id(&props);
        }
        match cookie_factory::gen_simple(gen_properties(&props), Vec::new()) {
            Ok(bytes) => Verdict::Forward(bytes),
            Err(_) => Verdict::Unchanged,
        }
    }

    /// RabbitMQ's `update_binding`: the arguments of the upstream binding for a local one
    /// (None: not made, its hops are spent or it came from the upstream). `suffix_exchange`
    /// is the `vhost:exchange A` name RabbitMQ writes.
    pub fn binding_args(&self, args: &FieldTable) -> Option<FieldTable> {
        let hops = match array(Some(args), BINDING_HEADER) {
            None => self.max_hops,
            Some(all) => {
                let uc = self.upstream_cluster.as_deref().unwrap_or_default();
                if already_seen(uc, &self.upstream_vhost, all) {
                    0
                } else {
                    let prev = match all.as_slice().first() {
                        Some(AMQPValue::FieldTable(t)) => hops_of(t),
                        _ => 0,
                    };
                    prev.saturating_sub(1).min(self.max_hops)
                }
            }
        };
        if hops == 0 {
            return None;
        }
        let mut t = FieldTable::default();
        t.insert("cluster-name".into(), long(&self.cluster));
        t.insert("vhost".into(), long(&self.vhost));
        t.insert(
            "exchange".into(),
            long(&format!("{}:{} A", self.vhost, self.exchange)),
        );
        t.insert(
            "hops".into(),
            AMQPValue::ShortInt(i16::try_from(hops).unwrap_or(i16::MAX)),
        );
        let mut out = args.clone();
        prepend(&mut out, BINDING_HEADER, t);
        Some(out)
    }
}

/// What a queue link adds to the messages it moves (RabbitMQ's queue link `update_headers`):
/// a table naming the upstream URI and the local queue, prepended to `x-received-from` with
/// the number of times the message came over this link (`visit-count`: messages may move
/// back and forth between federated queues, and an earlier table of this link is replaced);
/// the first link a message crosses also records `x-original-exchange` and
/// `x-original-routing-key`, and a `CC` header becomes `x-original-cc`.
#[derive(Debug, Clone)]
pub struct QueueStamp {
    /// The upstream URI, without credentials.
    pub uri: String,
    /// The federated (local) queue.
    pub queue: String,
    /// Keep `user_id` (else it is cleared, as RabbitMQ without `trust-user-id`).
    pub trust_user_id: bool,
}

impl QueueStamp {
    /// The properties of a message delivered upstream from `exchange` with `routing_key`, as
    /// they are published here (None: they do not parse, and go unchanged).
    pub fn apply(
        &self,
        raw: &[u8],
        redelivered: bool,
        exchange: &str,
        routing_key: &str,
    ) -> Option<Vec<u8>> {
        let (_, mut props) = parse_properties(raw).ok()?;
        let mut ours = FieldTable::default();
        ours.insert("uri".into(), long(&self.uri));
        ours.insert("queue".into(), long(&self.queue));
        let mut headers = props.headers().clone().unwrap_or_default();
        let mut visits = 0;
        match headers.inner().get(ROUTING_HEADER) {
            Some(AMQPValue::FieldArray(been)) => {
                let same = |t: &FieldTable| {
                    ["uri", "virtual_host", "queue"]
                        .iter()
                        .all(|k| t.inner().get(*k) == ours.inner().get(*k))
                };
                let mut rest = Vec::new();
                for v in been.as_slice() {
                    match v {
                        AMQPValue::FieldTable(t) if same(t) => {
                            visits = visits_of(t);
                        }
                        other => rest.push(other.clone()),
                    }
                }
                headers.insert(
                    ShortString::from(ROUTING_HEADER),
                    AMQPValue::FieldArray(FieldArray::from(rest)),
                );
            }
            _ => {
                headers.insert("x-original-exchange".into(), long(exchange));
                headers.insert("x-original-routing-key".into(), long(routing_key));
            }
        }
        ours.insert("redelivered".into(), AMQPValue::Boolean(redelivered));
        ours.insert("visit-count".into(), AMQPValue::LongLongInt(visits + 1));
        prepend(&mut headers, ROUTING_HEADER, ours);
        if headers.inner().contains_key("CC") {
            let mut renamed = FieldTable::default();
            for (k, v) in headers.inner() {
                let k = if k.as_str() == "CC" {
                    ShortString::from("x-original-cc")
                } else {
                    k.clone()
                };
                renamed.insert(k, v.clone());
            }
            headers = renamed;
        }
        props = props.with_headers(headers);
        if !self.trust_user_id && props.user_id().is_some() {
            props = without_user_id(&props);
        }
        cookie_factory::gen_simple(gen_properties(&props), Vec::new()).ok()
    }
}

fn visits_of(t: &FieldTable) -> i64 {
    match t.inner().get("visit-count") {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        _ => 0,
    }
}

/// The same properties but `user_id`.
fn without_user_id(p: &AMQPProperties) -> AMQPProperties {
    let mut out = AMQPProperties::default();
    if let Some(v) = p.content_type() {
        out = out.with_content_type(v.clone());
    }
    if let Some(v) = p.content_encoding() {
        out = out.with_content_encoding(v.clone());
    }
    if let Some(v) = p.headers() {
        out = out.with_headers(v.clone());
    }
    if let Some(v) = p.delivery_mode() {
        out = out.with_delivery_mode(*v);
    }
    if let Some(v) = p.priority() {
        out = out.with_priority(*v);
    }
    if let Some(v) = p.correlation_id() {
        out = out.with_correlation_id(v.clone());
    }
    if let Some(v) = p.reply_to() {
        out = out.with_reply_to(v.clone());
    }
    if let Some(v) = p.expiration() {
        out = out.with_expiration(v.clone());
    }
    if let Some(v) = p.message_id() {
        out = out.with_message_id(v.clone());
    }
    if let Some(v) = p.timestamp() {
        out = out.with_timestamp(*v);
    }
    if let Some(v) = p.kind() {
        out = out.with_type(v.clone());
    }
    if let Some(v) = p.app_id() {
        out = out.with_app_id(v.clone());
    }
    if let Some(v) = p.cluster_id() {
        out = out.with_cluster_id(v.clone());
    }
    out
}

fn hops_of(t: &FieldTable) -> u16 {
    let n = match t.inner().get("hops") {
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortShortInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortShortUInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortUInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        Some(AMQPValue::LongLongInt(n)) => *n,
        _ => 0,
    };
    u16::try_from(n.max(0)).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::federation_upstream::text;

    fn stamp(cluster: &str, hops: u16) -> Stamp {
        Stamp {
            uri: "amqp://up".into(),
            exchange: "x".into(),
            upstream_cluster: Some("up-cluster".into()),
            upstream_vhost: "/".into(),
            trust_user_id: false,
            cluster: cluster.into(),
            vhost: "/".into(),
            max_hops: hops,
        }
    }

    fn encode(p: &AMQPProperties) -> Vec<u8> {
        cookie_factory::gen_simple(gen_properties(p), Vec::new()).expect("encode")
    }

    #[test]
    fn a_message_carries_its_links_and_stops_at_max_hops() {
        let raw = encode(&AMQPProperties::default().with_user_id("bob".into()));
        let Verdict::Forward(once) = stamp("down", 2).apply(&raw, true) else {
            panic!("first hop forwarded");
        };
        let (_, p) = parse_properties(once.as_slice()).expect("parse");
        assert!(p.user_id().is_none(), "user_id cleared");
        let a = array(p.headers().as_ref(), ROUTING_HEADER).expect("header");
        assert_eq!(a.as_slice().len(), 1);
        // One hop made: a link with max-hops 1 drops it, one with 2 forwards it.
        assert!(matches!(
            stamp("third", 1).apply(&once, false),
            Verdict::Drop
        ));
        assert!(matches!(
            stamp("third", 2).apply(&once, false),
            Verdict::Forward(_)
        ));
        // Back at the broker it came from: dropped whatever the hops.
        let back = stamp("up-cluster", 9);
        let mut mid = stamp("mid", 9);
        mid.upstream_cluster = Some("down".into());
        let Verdict::Forward(twice) = mid.apply(&once, false) else {
            panic!("forwarded");
        };
        assert!(matches!(back.apply(&twice, false), Verdict::Drop));
    }

    #[test]
    fn bindings_carry_their_remaining_hops() {
        let s = stamp("down", 2);
        let first = s.binding_args(&FieldTable::default()).expect("bound");
        let a = array(Some(&first), BINDING_HEADER).expect("header");
        let Some(AMQPValue::FieldTable(t)) = a.as_slice().first() else {
            panic!("table");
        };
        assert_eq!(hops_of(t), 2);
        // Federated once more: one hop left, then none.
        let next = stamp("further", 5).binding_args(&first).expect("bound");
        let Some(AMQPValue::FieldTable(t)) =
            array(Some(&next), BINDING_HEADER).and_then(|a| a.as_slice().first().cloned())
        else {
            panic!("table");
        };
        assert_eq!(hops_of(&t), 1);
        assert!(stamp("last", 5).binding_args(&next).is_none());
    }

    #[test]
    fn a_queue_link_counts_visits_and_keeps_the_original_route() {
        let q = QueueStamp {
            uri: "amqp://up".into(),
            queue: "work".into(),
            trust_user_id: false,
        };
        let mut h = FieldTable::default();
        h.insert("CC".into(), AMQPValue::FieldArray(FieldArray::default()));
        let raw = encode(&AMQPProperties::default().with_headers(h));
        let once = q.apply(&raw, false, "orders", "eu.1").expect("stamped");
        let (_, p) = parse_properties(once.as_slice()).expect("parse");
        let h = p.headers().clone().expect("headers");
        assert_eq!(text(&h, "x-original-exchange").as_deref(), Some("orders"));
        assert_eq!(text(&h, "x-original-routing-key").as_deref(), Some("eu.1"));
        assert!(h.inner().contains_key("x-original-cc") && !h.inner().contains_key("CC"));
        // Back over the same link (after a trip elsewhere): one table for it, counted twice.
        let twice = q.apply(&once, true, "", "work").expect("stamped");
        let (_, p) = parse_properties(twice.as_slice()).expect("parse");
        let h = p.headers().clone().expect("headers");
        assert_eq!(text(&h, "x-original-exchange").as_deref(), Some("orders"));
        let a = array(Some(&h), ROUTING_HEADER).expect("x-received-from");
        assert_eq!(a.as_slice().len(), 1);
        let Some(AMQPValue::FieldTable(t)) = a.as_slice().first() else {
            panic!("a table");
        };
        assert_eq!(visits_of(t), 2);
        assert_eq!(
            t.inner().get("redelivered"),
            Some(&AMQPValue::Boolean(true))
        );
        assert_eq!(text(t, "queue").as_deref(), Some("work"));
    }
}
