//! Consistent-hash exchange (`x-consistent-hash`, RabbitMQ's bundled plugin): each message goes
//! to exactly one destination, chosen by hashing its routing key (or the header named by the
//! `hash-header` argument, or the property named by `hash-property`), with a binding's key as
//! the destination's weight. The same key always lands on the same destination while the
//! bindings stay the same, so a topic split over N queues keeps per-key order.
//!
//! RabbitMQ places destinations on a ring of buckets in the order they were bound and picks a
//! bucket by jump consistent hashing. Warren uses weighted rendezvous hashing instead: each
//! destination scores `-ln(u) / weight` with `u` a hash of (key, destination name), the lowest
//! score wins. Weights work the same, adding or removing a destination only moves the keys that
//! go to or came from it, and the choice depends on nothing but the names and weights — not on
//! the order bindings were made or recovered in — so every node of a cluster and every restart
//! route a key alike. A destination bound more than once counts once, with its largest weight
//! (RabbitMQ keeps its first binding's weight and forgets the destination when any of its
//! bindings goes).

use super::{Binding, Destination, Dests};
use crate::message::Message;
use amq_protocol::types::{AMQPValue, FieldTable};

/// The type name.
pub const TYPE_NAME: &str = "x-consistent-hash";

/// What a message is hashed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashOn {
    /// The routing key (the default).
    RoutingKey,
    /// A header's value (`hash-header`); a message without it hashes as an empty value.
    Header(String),
    /// A property (`hash-property`).
    Property(Property),
}

/// The properties `hash-property` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Property {
    /// `message_id`.
    MessageId,
    /// `correlation_id`.
    CorrelationId,
    /// `timestamp` (seconds, hashed as its decimal text).
    Timestamp,
}

/// Reads `hash-header` / `hash-property` from the declare arguments; the error is RabbitMQ's
/// text (a non-string value, which crashes RabbitMQ's channel with 541, is refused with a text
/// of Warren's).
pub fn parse_hash_on(args: &FieldTable) -> Result<HashOn, String> {
    let get = |name: &str| -> Result<Option<String>, String> {
        match args.inner().get(name) {
            None => Ok(None),
            Some(v) => crate::args::text(v)
                .map(Some)
                .ok_or_else(|| format!("{name} must be a string")),
        }
    };
    match (get("hash-header")?, get("hash-property")?) {
        (None, None) => Ok(HashOn::RoutingKey),
        (Some(h), None) => Ok(HashOn::Header(h)),
        (None, Some(p)) => Ok(HashOn::Property(match p.as_str() {
            "message_id" => Property::MessageId,
            "correlation_id" => Property::CorrelationId,
            "timestamp" => Property::Timestamp,
            _ => return Err(format!("Unsupported property: {p}")),
        })),
        (Some(_), Some(_)) => {
            Err("hash-header and hash-property are mutually exclusive".to_owned())
        }
    }
}

/// A binding key as a weight: a decimal integer with an optional sign, at least 1 (any size, as
/// in RabbitMQ 3.13/4.x; larger than u32 counts as u32::MAX). The error is RabbitMQ's text.
pub fn parse_weight(key: &str) -> Result<u32, String> {
    let digits = key.strip_prefix(['+', '-']).unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "The binding key must be an integer: {}",
            crate::json::erlang_binary(key)
        ));
    }
    let zero = digits.bytes().all(|b| b == b'0');
    if key.starts_with('-') || zero {
        return Err("The binding key must be greater than 0".to_owned());
    }
    Ok(digits.parse::<u32>().unwrap_or(u32::MAX))
}

/// One destination on the ring, with the weights of its bindings.
#[derive(Debug)]
struct Member {
    destination: Destination,
    id: u64,
    weights: Vec<u32>,
    weight: u32,
}

/// Bindings of a consistent-hash exchange.
#[derive(Debug)]
pub struct ConsistentHashBindings {
    hash_on: HashOn,
    members: Vec<Member>,
    /// Whether every member has the same weight (the lowest score is then the highest hash,
    /// no logarithm needed).
    uniform: bool,
}

impl ConsistentHashBindings {
    /// No bindings yet; messages are hashed on what `arguments` say (the routing key when they
    /// say nothing usable, which declare refuses before it gets here).
    pub fn new(arguments: &FieldTable) -> Self {
        ConsistentHashBindings {
            hash_on: parse_hash_on(arguments).unwrap_or(HashOn::RoutingKey),
            members: Vec::new(),
            uniform: true,
        }
    }

    /// Adds a binding (its key is its weight; a key that is no weight, refused at bind time,
    /// adds nothing).
    pub fn bind(&mut self, b: &Binding) {
        let Ok(w) = parse_weight(&b.key) else {
            return;
        };
        match self
            .members
            .iter_mut()
            .find(|m| m.destination == b.destination)
        {
            Some(m) => m.weights.push(w),
            None => self.members.push(Member {
                id: destination_id(&b.destination),
                destination: b.destination.clone(),
                weights: vec![w],
                weight: w,
            }),
        }
        self.reweigh();
    }

    /// Removes a binding.
    pub fn unbind(&mut self, b: &Binding) {
        let Ok(w) = parse_weight(&b.key) else {
            return;
        };
        if let Some(i) = self
            .members
            .iter()
            .position(|m| m.destination == b.destination)
        {
            let m = &mut self.members[i];
            if let Some(j) = m.weights.iter().position(|x| *x == w) {
                m.weights.swap_remove(j);
            }
            if m.weights.is_empty() {
                self.members.remove(i);
            }
        }
        self.reweigh();
    }

    fn reweigh(&mut self) {
        for m in &mut self.members {
            m.weight = m.weights.iter().copied().max().unwrap_or(1);
        }
        let first = self.members.first().map(|m| m.weight);
        self.uniform = self.members.iter().all(|m| Some(m.weight) == first);
    }

    /// The one destination for a message, if any is bound.
    pub fn route<'a>(
        &'a self,
        key: &str,
        msg: &Message,
        headers: &mut Option<FieldTable>,
        out: &mut Dests<'a>,
    ) {
        if self.members.is_empty() {
            return;
        }
        let h = match &self.hash_on {
            HashOn::RoutingKey => hash_bytes(key.as_bytes()),
            HashOn::Header(name) => {
                let h = headers.get_or_insert_with(|| msg.headers());
                h.inner()
                    .get(name.as_str())
                    .map_or(hash_bytes(b""), hash_value)
            }
            HashOn::Property(p) => {
                let props = msg.properties();
                match p {
                    Property::MessageId => props.message_id().as_ref().map(|s| s.as_str()),
                    Property::CorrelationId => props.correlation_id().as_ref().map(|s| s.as_str()),
                    Property::Timestamp => {
                        let text = props.timestamp().map(|t| t.to_string());
                        out.extend(self.pick(hash_bytes(text.unwrap_or_default().as_bytes())));
                        return;
                    }
                }
                .map_or(hash_bytes(b""), |s| hash_bytes(s.as_bytes()))
            }
        };
        out.extend(self.pick(h));
    }

    /// The member with the lowest weighted score for key hash `h`.
    fn pick(&self, h: u64) -> Option<&Destination> {
        if self.uniform {
            return self
                .members
                .iter()
                .max_by_key(|m| mix(h ^ m.id))
                .map(|m| &m.destination);
        }
        let mut best: Option<(f64, &Destination)> = None;
        for m in &self.members {
            // A uniform draw in (0, 1) from the top 53 bits.
            let u = ((mix(h ^ m.id) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let score = -u.ln() / f64::from(m.weight);
            if best.is_none_or(|(s, _)| score < s) {
                best = Some((score, &m.destination));
            }
        }
        best.map(|(_, d)| d)
    }
}

/// A destination's identity on the ring: a hash of its kind and name.
fn destination_id(d: &Destination) -> u64 {
    match d {
        Destination::Queue(q) => mix(fnv1a(FNV_QUEUE, q.name.as_bytes())),
        Destination::Exchange(x) => mix(fnv1a(FNV_EXCHANGE, x.as_bytes())),
    }
}

/// A header value's hash: strings by their bytes, integers by their decimal text (whatever
/// their width), anything else by its debug text.
fn hash_value(v: &AMQPValue) -> u64 {
    let text = match v {
        AMQPValue::LongString(s) => return hash_bytes(s.as_bytes()),
        AMQPValue::ShortString(s) => return hash_bytes(s.as_str().as_bytes()),
        AMQPValue::ShortShortInt(i) => i.to_string(),
        AMQPValue::ShortShortUInt(i) => i.to_string(),
        AMQPValue::ShortInt(i) => i.to_string(),
        AMQPValue::ShortUInt(i) => i.to_string(),
        AMQPValue::LongInt(i) => i.to_string(),
        AMQPValue::LongUInt(i) => i.to_string(),
        AMQPValue::LongLongInt(i) => i.to_string(),
        AMQPValue::Timestamp(i) => i.to_string(),
        AMQPValue::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    };
    hash_bytes(text.as_bytes())
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_QUEUE: u64 = FNV_OFFSET ^ 0x71;
const FNV_EXCHANGE: u64 = FNV_OFFSET ^ 0x65;

/// A stable hash of a key's bytes (the same on every node, build and run).
fn hash_bytes(b: &[u8]) -> u64 {
    mix(fnv1a(FNV_OFFSET, b))
}

/// FNV-1a, 64-bit.
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// splitmix64's finalizer: spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::LongString;

    fn binding(dest: &str, key: &str) -> Binding {
        Binding::to_exchange(dest, key, &FieldTable::default())
    }

    fn counts(r: &ConsistentHashBindings, n: usize) -> std::collections::HashMap<String, usize> {
        let mut c = std::collections::HashMap::new();
        for i in 0..n {
            *c.entry(route_one(r, i)).or_default() += 1;
        }
        c
    }

    #[test]
    fn weights_follow_binding_keys() {
        assert_eq!(parse_weight("+3"), Ok(3));
        assert_eq!(parse_weight("007"), Ok(7));
        assert_eq!(parse_weight("99999999999999999999"), Ok(u32::MAX));
        assert_eq!(
            parse_weight("0").unwrap_err(),
            "The binding key must be greater than 0"
        );
        assert_eq!(
            parse_weight("-1").unwrap_err(),
            "The binding key must be greater than 0"
        );
        assert_eq!(
            parse_weight("abc").unwrap_err(),
            "The binding key must be an integer: <<\"abc\">>"
        );
        assert_eq!(
            parse_weight("").unwrap_err(),
            "The binding key must be an integer: <<>>"
        );
        assert_eq!(
            parse_weight("é").unwrap_err(),
            "The binding key must be an integer: <<\"é\"/utf8>>"
        );
        assert_eq!(
            parse_weight("a\u{1}").unwrap_err(),
            "The binding key must be an integer: <<97,1>>"
        );
    }

    #[test]
    fn hash_arguments_are_checked() {
        let mut t = FieldTable::default();
        assert_eq!(parse_hash_on(&t), Ok(HashOn::RoutingKey));
        t.insert("hash-property".into(), AMQPValue::LongString("foo".into()));
        assert_eq!(parse_hash_on(&t).unwrap_err(), "Unsupported property: foo");
        t.insert(
            "hash-property".into(),
            AMQPValue::LongString(LongString::from("timestamp")),
        );
        assert_eq!(parse_hash_on(&t), Ok(HashOn::Property(Property::Timestamp)));
        t.insert("hash-header".into(), AMQPValue::LongString("h".into()));
        assert_eq!(
            parse_hash_on(&t).unwrap_err(),
            "hash-header and hash-property are mutually exclusive"
        );
    }

    #[test]
    fn spread_follows_weights_and_moves_only_what_it_must() {
        let mut r = ConsistentHashBindings::new(&FieldTable::default());
        r.bind(&binding("a", "1"));
        r.bind(&binding("b", "1"));
        let even = counts(&r, 10_000);
        assert!((4_500..5_500).contains(&even["a"]), "{even:?}");
        r.bind(&binding("c", "2"));
        let weighted = counts(&r, 10_000);
        assert!((2_200..2_800).contains(&weighted["a"]), "{weighted:?}");
        assert!((4_500..5_500).contains(&weighted["c"]), "{weighted:?}");
        // Removing c puts every key back where it was before c came.
        let with_c: Vec<_> = (0..1000).map(|i| route_one(&r, i)).collect();
        r.unbind(&binding("c", "2"));
        for (i, before) in with_c.iter().enumerate() {
            let now = route_one(&r, i);
            if before != "c" {
                assert_eq!(&now, before, "key{i} moved though its destination stayed");
            }
        }
        // A second binding of a destination counts once, with the larger weight.
        r.bind(&binding("a", "3"));
        let heavier = counts(&r, 10_000);
        assert!((7_000..8_000).contains(&heavier["a"]), "{heavier:?}");
        r.unbind(&binding("a", "3"));
        assert_eq!(counts(&r, 10_000), even);
    }

    fn route_one(r: &ConsistentHashBindings, i: usize) -> String {
        let props = amq_protocol::protocol::BasicProperties::default();
        let msg = Message::new("x".into(), "".into(), bytes::Bytes::new(), 0, &props);
        let mut out = Dests::new();
        r.route(&format!("key{i}"), &msg, &mut None, &mut out);
        match out.first() {
            Some(Destination::Exchange(n)) => n.clone(),
            _ => String::new(),
        }
    }

    #[test]
    fn the_choice_ignores_binding_order() {
        let mut a = ConsistentHashBindings::new(&FieldTable::default());
        let mut b = ConsistentHashBindings::new(&FieldTable::default());
        for (d, w) in [("p1", "1"), ("p2", "2"), ("p3", "1")] {
            a.bind(&binding(d, w));
        }
        for (d, w) in [("p3", "1"), ("p1", "1"), ("p2", "2")] {
            b.bind(&binding(d, w));
        }
        for i in 0..1000 {
            assert_eq!(route_one(&a, i), route_one(&b, i));
        }
    }
}
