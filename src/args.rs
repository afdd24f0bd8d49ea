//! Queue x-arguments: parsed and validated once at declare, as RabbitMQ validates them
//! (an invalid value of a known argument is 406; unknown arguments are ignored).

use crate::error::{CoreError, CoreResult, Precondition};
use amq_protocol::types::{AMQPValue, FieldTable};

/// What happens when a max-length limit is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// Drop (dead-letter) the oldest ready messages.
    #[default]
    DropHead,
    /// Refuse the new message (nack to confirming publishers).
    RejectPublish,
    /// Refuse and dead-letter the new message.
    RejectPublishDlx,
}

/// The arguments a queue acts on.
#[derive(Clone, Debug, Default)]
pub struct QueueArgs {
    /// x-message-ttl, milliseconds.
    pub message_ttl: Option<u64>,
    /// x-dead-letter-exchange.
    pub dead_letter_exchange: Option<String>,
    /// x-dead-letter-routing-key.
    pub dead_letter_routing_key: Option<String>,
    /// x-max-length (ready messages).
    pub max_length: Option<u64>,
    /// x-max-length-bytes (ready message bodies).
    pub max_length_bytes: Option<u64>,
    /// x-overflow.
    pub overflow: Overflow,
    /// x-dead-letter-strategy is `at-least-once` (it acts only with the conditions of
    /// [`QueueArgs::dead_letters_at_least_once`]).
    pub at_least_once: bool,
    /// x-expires: delete the queue after this many idle milliseconds.
    pub expires: Option<u64>,
    /// x-delivery-limit: returns after which a message is dead-lettered (quorum default 20).
    pub delivery_limit: Option<u64>,
    /// x-queue-type is quorum.
    pub quorum: bool,
    /// x-queue-type is stream.
    pub stream: bool,
    /// A stream's x-max-age (or `max-age` policy), milliseconds.
    pub max_age: Option<u64>,
    /// A stream's x-stream-max-segment-size-bytes (or policy).
    pub max_segment_size_bytes: Option<u64>,
    /// A stream's x-stream-filter-size-bytes (or policy): its chunks' Bloom filter size.
    pub filter_size_bytes: Option<u8>,
    /// x-single-active-consumer.
    pub single_active_consumer: bool,
    /// x-max-priority (1-255).
    pub max_priority: Option<u8>,
    /// x-consumer-timeout, milliseconds.
    pub consumer_timeout: Option<u64>,
    /// x-queue-leader-locator asks for the cluster node with the fewest queues (`balanced`)
    /// rather than the declaring client's (`client-local`, the default).
    pub balanced: bool,
}

/// Whether a queue leader locator (the argument's or a policy's `queue-leader-locator`)
/// means `balanced`, as RabbitMQ reads its deprecated names; None when it is not one.
pub fn locator_is_balanced(locator: &str) -> Option<bool> {
    match locator {
        "client-local" => Some(false),
        "balanced" | "random" | "least-leaders" | "min-masters" => Some(true),
        _ => None,
    }
}

fn integer(v: &AMQPValue) -> Option<i128> {
    Some(match v {
        AMQPValue::ShortShortInt(n) => i128::from(*n),
        AMQPValue::ShortShortUInt(n) => i128::from(*n),
        AMQPValue::ShortInt(n) => i128::from(*n),
        AMQPValue::ShortUInt(n) => i128::from(*n),
        AMQPValue::LongInt(n) => i128::from(*n),
        AMQPValue::LongUInt(n) => i128::from(*n),
        AMQPValue::LongLongInt(n) => i128::from(*n),
        AMQPValue::Timestamp(n) => i128::from(*n),
        _ => return None,
    })
}

/// A short or long string argument as text.
pub fn text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// The name RabbitMQ gives a field's type in its error texts (`{unacceptable_type,longstr}`).
pub fn erlang_type(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "bool",
        AMQPValue::ShortShortInt(_) => "byte",
        AMQPValue::ShortShortUInt(_) => "unsignedbyte",
        AMQPValue::ShortInt(_) => "short",
        AMQPValue::ShortUInt(_) => "unsignedshort",
        AMQPValue::LongInt(_) => "signedint",
        AMQPValue::LongUInt(_) => "unsignedint",
        AMQPValue::LongLongInt(_) => "long",
        AMQPValue::Float(_) => "float",
        AMQPValue::Double(_) => "double",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::ShortString(_) | AMQPValue::LongString(_) => "longstr",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::Timestamp(_) => "timestamp",
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::ByteArray(_) => "binary",
        AMQPValue::Void => "void",
    }
}

/// Queue arguments of other queue types that a stream refuses (RabbitMQ: every type's
/// arguments but the stream's own).
const NOT_FOR_STREAMS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-queue-master-locator",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-quorum-initial-group-size",
    "x-consumer-timeout",
];

/// The largest `x-stream-max-segment-size-bytes` RabbitMQ accepts.
const MAX_SEGMENT_SIZE: u64 = 3_000_000_000;

/// A duration as RabbitMQ writes `x-max-age` and interval offsets (`7D`, `12h`: a positive
/// integer and one of Y M D h m s), in milliseconds.
pub fn parse_max_age(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok().filter(|n| *n > 0)?;
    let unit_ms: u64 = match unit {
        "Y" => 365 * 86_400_000,
        "M" => 30 * 86_400_000,
        "D" => 86_400_000,
        "h" => 3_600_000,
        "m" => 60_000,
        "s" => 1000,
        _ => return None,
    };
    Some(n.saturating_mul(unit_ms))
}

impl QueueArgs {
    /// Parses and validates the arguments of queue `queue` in `vhost` (named in errors).
    pub fn parse(args: &FieldTable, queue: &str, vhost: &str) -> CoreResult<QueueArgs> {
        let invalid = |key: &str, why: String| -> CoreError {
            Precondition::InvalidArg {
                arg: key.to_owned(),
                queue: queue.to_owned(),
                vhost: vhost.to_owned(),
                why,
            }
            .into()
        };
        let get = |key: &str| args.inner().get(key);
        let non_negative = |key: &str| -> CoreResult<Option<u64>> {
            match get(key) {
                None => Ok(None),
                Some(v) => match integer(v) {
                    Some(n) if n >= 0 => Ok(Some(n.min(i128::from(u64::MAX)) as u64)),
                    Some(n) => Err(invalid(key, format!("{{value_negative,{n}}}"))),
                    None => Err(invalid(
                        key,
                        format!("{{unacceptable_type,{}}}", erlang_type(v)),
                    )),
                },
            }
        };
        let string = |key: &str| -> CoreResult<Option<String>> {
            match get(key) {
                None => Ok(None),
                Some(v) => text(v).map(Some).ok_or_else(|| {
                    invalid(key, format!("{{unacceptable_type,{}}}", erlang_type(v)))
                }),
            }
        };
        let overflow = match string("x-overflow")?.as_deref() {
            None | Some("drop-head") => Overflow::DropHead,
            Some("reject-publish") => Overflow::RejectPublish,
            Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
            Some(other) => {
                return Err(invalid(
                    "x-overflow",
                    format!("{{unknown_overflow,<<\"{other}\">>}}"),
                ))
            }
        };
        let expires = match get("x-expires") {
            None => None,
            Some(v) => match integer(v) {
                Some(n) if n > 0 => Some(n.min(i128::from(u64::MAX)) as u64),
                _ => {
                    return Err(invalid(
                        "x-expires",
                        format!("{{value_zero_or_less,{v:?}}}"),
                    ))
                }
            },
        };
        let (quorum, stream) = match string("x-queue-type")?.as_deref() {
            None | Some("classic") => (false, false),
            Some("quorum") => (true, false),
            Some("stream") => (false, true),
            Some(other) => {
                return Err(invalid(
                    "x-queue-type",
                    format!("unknown queue type '{other}'"),
                ))
            }
        };
        if stream {
            if let Some(arg) = NOT_FOR_STREAMS.iter().find(|k| get(k).is_some()) {
                return Err(Precondition::ArgForType {
                    arg: (*arg).to_owned(),
                    queue: queue.to_owned(),
                    vhost: vhost.to_owned(),
                    queue_type: "rabbit_stream_queue",
                }
                .into());
            }
        }
        let at_least_once = match get("x-dead-letter-strategy") {
            None => false,
            // A quorum queue's argument: a classic queue refuses it whatever its value.
            Some(_) if !quorum && !stream => {
                return Err(Precondition::ArgForType {
                    arg: "x-dead-letter-strategy".into(),
                    queue: queue.to_owned(),
                    vhost: vhost.to_owned(),
                    queue_type: "rabbit_classic_queue",
                }
                .into())
            }
            Some(v @ (AMQPValue::LongString(_) | AMQPValue::ShortString(_))) => {
                match text(v).as_deref() {
                    Some("at-most-once") => false,
                    Some("at-least-once") => true,
                    _ => {
                        return Err(invalid(
                            "x-dead-letter-strategy",
                            "invalid_dlx_strategy".into(),
                        ))
                    }
                }
            }
            Some(v) => {
                return Err(invalid(
                    "x-dead-letter-strategy",
                    format!("{{unacceptable_type,{}}}", erlang_type(v)),
                ))
            }
        };
        let max_age = match get("x-max-age") {
            None => None,
            Some(v @ AMQPValue::LongString(_)) => Some(
                text(v)
                    .as_deref()
                    .and_then(parse_max_age)
                    .ok_or_else(|| invalid("x-max-age", "invalid_max_age".into()))?,
            ),
            Some(v) => {
                return Err(invalid(
                    "x-max-age",
                    format!("{{unacceptable_type,{}}}", erlang_type(v)),
                ))
            }
        };
        let max_segment_size_bytes = non_negative("x-stream-max-segment-size-bytes")?;
        if max_segment_size_bytes.is_some_and(|n| n > MAX_SEGMENT_SIZE) {
            return Err(Precondition::StreamArg(
                "Exceeded max value for x-stream-max-segment-size-bytes",
            )
            .into());
        }
        let filter_size_bytes = match get("x-stream-filter-size-bytes").map(integer) {
            None => None,
            Some(Some(n @ 16..=255)) => u8::try_from(n).ok(),
            Some(Some(_)) => {
                return Err(
                    Precondition::StreamArg("Invalid value for x-stream-filter-size-bytes").into(),
                )
            }
            Some(None) => {
                return Err(
                    Precondition::StreamArg("Invalid type for x-stream-filter-size-bytes").into(),
                )
            }
        };
        let delivery_limit = non_negative("x-delivery-limit")?.or(quorum.then_some(20));
        let max_priority = match non_negative("x-max-priority")? {
            None => None,
            Some(n) if n <= 255 => Some(n as u8),
            Some(n) => return Err(invalid("x-max-priority", format!("{{value_too_big,{n}}}"))),
        };
        let single_active_consumer = match get("x-single-active-consumer") {
            None => false,
            Some(AMQPValue::Boolean(b)) => *b,
            Some(v) => {
                return Err(invalid(
                    "x-single-active-consumer",
                    format!("{{unacceptable_type,{}}}", erlang_type(v)),
                ))
            }
        };
        let balanced = match get("x-queue-leader-locator") {
            None => false,
            Some(AMQPValue::LongString(l)) => std::str::from_utf8(l.as_bytes())
                .ok()
                .and_then(locator_is_balanced)
                .ok_or_else(|| {
                    invalid("x-queue-leader-locator", "invalid_queue_locator_arg".into())
                })?,
            Some(v) => {
                return Err(invalid(
                    "x-queue-leader-locator",
                    format!("{{unacceptable_type,{}}}", erlang_type(v)),
                ))
            }
        };
        Ok(QueueArgs {
            balanced,
            message_ttl: non_negative("x-message-ttl")?,
            dead_letter_exchange: string("x-dead-letter-exchange")?,
            dead_letter_routing_key: string("x-dead-letter-routing-key")?,
            max_length: non_negative("x-max-length")?,
            max_length_bytes: non_negative("x-max-length-bytes")?,
            overflow,
            at_least_once,
            expires,
            delivery_limit,
            quorum,
            stream,
            max_age,
            max_segment_size_bytes,
            filter_size_bytes,
            single_active_consumer,
            max_priority,
            consumer_timeout: non_negative("x-consumer-timeout")?,
        })
    }

    /// These declared arguments combined with a policy definition as RabbitMQ combines them:
    /// the lower value wins for the numeric limits, the argument wins for the dead-letter keys
    /// and `overflow`. `arguments` tells which keys were declared (defaults are not).
    pub fn with_policy(
        &self,
        arguments: &FieldTable,
        def: &serde_json::Map<String, serde_json::Value>,
    ) -> QueueArgs {
        let declared = |k: &str| arguments.inner().contains_key(k);
        let num = |k: &str| def.get(k).and_then(serde_json::Value::as_u64);
        let text = |k: &str| def.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        let low = |mine: Option<u64>, k: &str| match (mine, num(k)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut out = self.clone();
        if self.stream {
            // A stream's limits: the policy wins, as in RabbitMQ.
            out.max_length_bytes = num("max-length-bytes").or(self.max_length_bytes);
            out.max_age = text("max-age")
                .as_deref()
                .and_then(parse_max_age)
                .or(self.max_age);
            out.max_segment_size_bytes = num("stream-max-segment-size-bytes")
                .filter(|n| *n <= MAX_SEGMENT_SIZE)
                .or(self.max_segment_size_bytes);
            out.filter_size_bytes = num("stream-filter-size-bytes")
                .filter(|n| (16..=255).contains(n))
                .and_then(|n| u8::try_from(n).ok())
                .or(self.filter_size_bytes);
            return out;
        }
        out.message_ttl = low(self.message_ttl, "message-ttl");
        out.max_length = low(self.max_length, "max-length");
        out.max_length_bytes = low(self.max_length_bytes, "max-length-bytes");
        out.expires = low(self.expires, "expires").filter(|e| *e > 0);
        out.consumer_timeout = low(self.consumer_timeout, "consumer-timeout");
        let explicit_limit = if declared("x-delivery-limit") {
            self.delivery_limit
        } else {
            None
        };
        out.delivery_limit = low(explicit_limit, "delivery-limit").or(self.quorum.then_some(20));
        if !declared("x-dead-letter-exchange") {
            out.dead_letter_exchange = text("dead-letter-exchange");
        }
        if !declared("x-dead-letter-routing-key") {
            out.dead_letter_routing_key = text("dead-letter-routing-key");
        }
        if !declared("x-dead-letter-strategy") {
            out.at_least_once = text("dead-letter-strategy").as_deref() == Some("at-least-once");
        }
        if !declared("x-overflow") {
            out.overflow = match def.get("overflow").and_then(|v| v.as_str()) {
                Some("reject-publish") => Overflow::RejectPublish,
                Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
                _ => Overflow::DropHead,
            };
        }
        out
    }

    /// Whether dead letters go at least once, as RabbitMQ's quorum queues send them: a quorum
    /// queue with a dead-letter exchange, `dead-letter-strategy: at-least-once` and `overflow:
    /// reject-publish` (with `drop-head` it falls back to at most once).
    pub fn dead_letters_at_least_once(&self) -> bool {
        self.quorum
            && self.at_least_once
            && self.overflow == Overflow::RejectPublish
            && self.dead_letter_exchange.is_some()
    }

    /// Whether a publish to this queue can be refused (so confirms must wait for the queue).
    pub fn may_reject(&self) -> bool {
        self.overflow != Overflow::DropHead
            && (self.max_length.is_some() || self.max_length_bytes.is_some())
    }
}

/// The `x-priority` consumer argument (0 when absent); None when it is not an integer.
pub fn consumer_priority(args: &FieldTable) -> Option<i32> {
    match args.inner().get("x-priority") {
        None => Some(0),
        Some(v) => integer(v).map(|n| n.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32),
    }
}

/// The `x-consumer-timeout` consume argument, milliseconds, if a non-negative integer.
pub fn consumer_timeout(args: &FieldTable) -> Option<u64> {
    args.inner()
        .get("x-consumer-timeout")
        .and_then(integer)
        .filter(|n| *n >= 0)
        .map(|n| n.min(i128::from(u64::MAX)) as u64)
}

/// The `x-quorum-initial-group-size` queue argument, if a positive integer.
pub fn quorum_group_size(args: &FieldTable) -> Option<usize> {
    args.inner()
        .get("x-quorum-initial-group-size")
        .and_then(integer)
        .filter(|n| *n > 0)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Parses a message's `expiration` property (milliseconds) as RabbitMQ does.
pub fn parse_expiration(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    #[test]
    fn known_arguments_are_validated() {
        let a = QueueArgs::parse(
            &table(&[
                ("x-message-ttl", AMQPValue::ShortShortUInt(5)),
                ("x-max-length", AMQPValue::LongLongInt(2)),
                ("x-overflow", AMQPValue::LongString("reject-publish".into())),
                (
                    "x-dead-letter-exchange",
                    AMQPValue::LongString("dlx".into()),
                ),
                ("x-unknown", AMQPValue::Boolean(true)),
            ]),
            "q",
            "/",
        )
        .expect("valid");
        assert_eq!(a.message_ttl, Some(5));
        assert_eq!(a.max_length, Some(2));
        assert!(a.may_reject());
        assert_eq!(a.dead_letter_exchange.as_deref(), Some("dlx"));
        for bad in [
            table(&[("x-message-ttl", AMQPValue::LongInt(-1))]),
            table(&[("x-message-ttl", AMQPValue::LongString("1".into()))]),
            table(&[("x-overflow", AMQPValue::LongString("explode".into()))]),
            table(&[("x-expires", AMQPValue::LongInt(0))]),
            table(&[("x-queue-type", AMQPValue::LongString("streams".into()))]),
        ] {
            let e = QueueArgs::parse(&bad, "q", "/").expect_err("invalid");
            assert_eq!(e.reply_code(), 406);
            assert!(e.to_string().starts_with("invalid arg 'x-"), "{e}");
        }
    }

    #[test]
    fn policy_combines_as_rabbitmq() {
        let declared = table(&[
            ("x-max-length", AMQPValue::LongInt(10)),
            (
                "x-dead-letter-exchange",
                AMQPValue::LongString("mine".into()),
            ),
        ]);
        let a = QueueArgs::parse(&declared, "q", "/").expect("valid");
        let def = serde_json::json!({
            "max-length": 5, "message-ttl": 100, "dead-letter-exchange": "theirs",
            "dead-letter-routing-key": "rk", "overflow": "reject-publish"
        });
        let def = def.as_object().expect("object");
        let e = a.with_policy(&declared, def);
        assert_eq!(e.max_length, Some(5));
        assert_eq!(e.message_ttl, Some(100));
        assert_eq!(e.dead_letter_exchange.as_deref(), Some("mine"));
        assert_eq!(e.dead_letter_routing_key.as_deref(), Some("rk"));
        assert_eq!(e.overflow, Overflow::RejectPublish);
        let looser = serde_json::json!({"max-length": 50});
        let e = a.with_policy(&declared, looser.as_object().expect("object"));
        assert_eq!(e.max_length, Some(10));
        let quorum = table(&[("x-queue-type", AMQPValue::LongString("quorum".into()))]);
        let q = QueueArgs::parse(&quorum, "q", "/").expect("valid");
        let more = serde_json::json!({"delivery-limit": 50});
        assert_eq!(
            q.with_policy(&quorum, more.as_object().expect("object"))
                .delivery_limit,
            Some(50)
        );
        assert_eq!(
            q.with_policy(&quorum, &Default::default()).delivery_limit,
            Some(20)
        );
    }

    #[test]
    fn stream_arguments_as_rabbitmq_checks_them() {
        let stream = |extra: &[(&str, AMQPValue)]| {
            let mut pairs = vec![("x-queue-type", AMQPValue::LongString("stream".into()))];
            pairs.extend(extra.iter().cloned());
            QueueArgs::parse(&table(&pairs), "s", "/")
        };
        let ok = stream(&[
            ("x-max-age", AMQPValue::LongString("7D".into())),
            ("x-max-length-bytes", AMQPValue::LongInt(1000)),
            ("x-stream-max-segment-size-bytes", AMQPValue::LongInt(5000)),
            ("x-stream-filter-size-bytes", AMQPValue::ShortShortUInt(16)),
            (
                "x-queue-leader-locator",
                AMQPValue::LongString("balanced".into()),
            ),
        ])
        .expect("valid");
        assert!(ok.stream && !ok.quorum);
        assert_eq!(ok.max_age, Some(7 * 86_400_000));
        assert_eq!(ok.max_segment_size_bytes, Some(5000));
        let err = |extra: &[(&str, AMQPValue)]| stream(extra).expect_err("invalid").to_string();
        assert_eq!(
            err(&[("x-message-ttl", AMQPValue::LongInt(1))]),
            "invalid arg 'x-message-ttl' for queue 's' in vhost '/' of queue type rabbit_stream_queue"
        );
        assert_eq!(
            err(&[("x-max-age", AMQPValue::LongString("7X".into()))]),
            "invalid arg 'x-max-age' for queue 's' in vhost '/': invalid_max_age"
        );
        assert_eq!(
            err(&[("x-stream-filter-size-bytes", AMQPValue::LongInt(300))]),
            "Invalid value for x-stream-filter-size-bytes"
        );
        assert_eq!(
            err(&[(
                "x-stream-max-segment-size-bytes",
                AMQPValue::LongLongInt(3_000_000_001)
            )]),
            "Exceeded max value for x-stream-max-segment-size-bytes"
        );
        assert_eq!(parse_max_age("12h"), Some(12 * 3_600_000));
        for bad in ["0D", "D", "5", "5d", "-1h", ""] {
            assert_eq!(parse_max_age(bad), None, "{bad}");
        }
        // A policy's limits win over the arguments.
        let declared = table(&[
            ("x-queue-type", AMQPValue::LongString("stream".into())),
            ("x-max-age", AMQPValue::LongString("1D".into())),
        ]);
        let a = QueueArgs::parse(&declared, "s", "/").expect("valid");
        let def = serde_json::json!({"max-age": "2D", "max-length-bytes": 99});
        let e = a.with_policy(&declared, def.as_object().expect("object"));
        assert_eq!(
            (e.max_age, e.max_length_bytes),
            (Some(2 * 86_400_000), Some(99))
        );
    }

    #[test]
    fn expiration_strings() {
        assert_eq!(parse_expiration("60000"), Some(60_000));
        assert_eq!(parse_expiration("0"), Some(0));
        assert_eq!(parse_expiration("-1"), None);
        assert_eq!(parse_expiration("1.5"), None);
        assert_eq!(parse_expiration(""), None);
    }
}
