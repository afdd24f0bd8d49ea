//! A dynamic shovel's definition: the JSON value of a `shovel` runtime parameter, checked
//! with RabbitMQ's rules and texts (`rabbit_shovel_parameters`, `rabbit_amqp091_shovel`,
//! `rabbit_parameter_validation`) and read into a [`ShovelDef`]. Keys and defaults are
//! RabbitMQ 3.13's, the pre-3.7 spellings (`delete-after`, `prefetch-count`,
//! `add-forward-headers`, `publish-properties`) included.

use super::webhook::Webhook;
use crate::client::uri::check as uri;
use crate::client::AmqpUri;
use crate::json::erlang_term;
use crate::parameters::validation::{binary, boolean, enum_of, number, one, proplist, Check};
use amq_protocol::types::FieldTable;
use serde_json::{Map, Value};
use std::time::Duration;

pub use crate::client::relay::AckMode;

/// When the shovel deletes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteAfter {
    /// It runs until deleted.
    Never,
    /// Once it has moved as many messages as the source queue held when it started.
    QueueLength,
    /// Once it has moved this many messages.
    Count(u64),
}

/// Where messages come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A queue, declared (durable, with these arguments) if it does not exist.
    Queue {
        /// Its name.
        name: String,
        /// Arguments to declare it with.
        args: FieldTable,
        /// Only checked, never declared (`src-predeclared`).
        predeclared: bool,
    },
    /// An exchange: the shovel binds its own exclusive queue with the key.
    Exchange {
        /// The exchange.
        name: String,
        /// The binding key.
        key: String,
    },
}

/// A checked definition.
#[derive(Debug, Clone)]
pub struct ShovelDef {
    /// Source URIs, one picked at each connection.
    pub src_uris: Vec<AmqpUri>,
    /// Where messages come from.
    pub source: Source,
    /// Arguments of basic.consume.
    pub consumer_args: FieldTable,
    /// The consumer tag (empty: the server makes one).
    pub consumer_name: String,
    /// basic.qos prefetch-count on the source.
    pub prefetch: u16,
    /// When the shovel deletes itself.
    pub delete_after: DeleteAfter,
    /// Destination URIs.
    pub dest_uris: Vec<AmqpUri>,
    /// An `http(s)://` destination instead ([`Webhook`]).
    pub webhook: Option<Webhook>,
    /// A queue to publish to (through the default exchange), declared if missing.
    pub dest_queue: Option<String>,
    /// Arguments to declare the destination queue with.
    pub dest_queue_args: FieldTable,
    /// Only check the destination queue, never declare it.
    pub dest_predeclared: bool,
    /// The exchange to publish to (else the message's own).
    pub dest_exchange: Option<String>,
    /// The routing key to publish with (else the message's own).
    pub dest_exchange_key: Option<String>,
    /// Properties set on every message (`dest-publish-properties`).
    pub publish_properties: Map<String, Value>,
    /// Add the `x-shovelled` header.
    pub add_forward_headers: bool,
    /// Add the `x-shovelled-timestamp` header.
    pub add_timestamp_header: bool,
    /// When the source's deliveries are acknowledged.
    pub ack_mode: AckMode,
    /// Pause before connecting again after a failure.
    pub reconnect_delay: Duration,
}

/// RabbitMQ's default reconnect delay.
const DEFAULT_RECONNECT_DELAY: f64 = 5.0;
/// RabbitMQ's default prefetch.
const DEFAULT_PREFETCH: u16 = 1000;
/// The protocols Warren's shovels speak.
const PROTOCOLS: [&str; 1] = ["amqp091"];

fn queue_name(name: &str, v: &Value) -> Vec<String> {
    match v.as_str() {
        Some(s) if s.len() > 255 => one(format!(
            "{name} should be less than 255 bytes, actually was {}",
            s.len()
        )),
        Some(_) => Vec::new(),
        None => binary(name, v),
    }
}

fn ack_mode(name: &str, v: &Value) -> Vec<String> {
    enum_of(name, v, &["no-ack", "on-publish", "on-confirm"])
}

fn protocol(name: &str, v: &Value) -> Vec<String> {
    enum_of(name, v, &PROTOCOLS)
}

fn table(name: &str, v: &Value) -> Vec<String> {
    match v {
        Value::Object(m) => match crate::json::json_table(m.iter()) {
            Ok(_) => Vec::new(),
            Err(e) => one(format!("invalid arg in {name}: {e}")),
        },
        other => one(format!("{name} not a list {}", erlang_term(other))),
    }
}

fn delete_after(name: &str, v: &Value) -> Vec<String> {
    match v {
        Value::String(s) if s == "never" || s == "queue-length" => Vec::new(),
        Value::Number(n) if n.as_u64().is_some() => Vec::new(),
        other => one(format!(
            "{name} should be a number greater than or equal to 0, \"never\" or \
             \"queue-length\", actually was {}",
            erlang_term(other)
        )),
    }
}

fn positive_seconds(name: &str, v: &Value) -> Vec<String> {
    match v.as_u64() {
        Some(n) if n > 0 => Vec::new(),
        _ => one(format!(
            "{name} should be a positive integer (seconds), actually was {}",
            erlang_term(v)
        )),
    }
}

fn internal_owner(name: &str, v: &Value) -> Vec<String> {
    proplist(
        name,
        &[
            ("name", binary as Check, false),
            ("kind", |n, v| enum_of(n, v, &["exchange", "queue"]), false),
            ("virtual_host", binary, false),
        ],
        v,
    )
}

fn properties(name: &str, v: &Value) -> Vec<String> {
    proplist(
        name,
        &[
            ("content_type", binary as Check, false),
            ("content_encoding", binary, false),
            ("delivery_mode", number, false),
            ("priority", number, false),
            ("correlation_id", binary, false),
            ("reply_to", binary, false),
            ("expiration", binary, false),
            ("message_id", binary, false),
            ("timestamp", number, false),
            ("type", binary, false),
            ("user_id", binary, false),
            ("app_id", binary, false),
            ("cluster_id", binary, false),
        ],
        v,
    )
}

/// The checks of a definition's keys, in RabbitMQ's order (shovel, source, destination).
const CHECKS: &[(&str, Check, bool)] = &[
    ("internal", boolean, false),
    ("internal_owner", internal_owner, false),
    ("reconnect-delay", number, false),
    ("ack-mode", ack_mode, false),
    ("src-protocol", protocol, false),
    ("dest-protocol", protocol, false),
    ("src-uri", uri, true),
    ("src-exchange", binary, false),
    ("src-exchange-key", binary, false),
    ("src-queue", binary, false),
    ("src-queue-args", table, false),
    ("src-consumer-args", table, false),
    ("src-consumer-name", binary, false),
    ("prefetch-count", number, false),
    ("src-prefetch-count", number, false),
    ("delete-after", delete_after, false),
    ("src-delete-after", delete_after, false),
    ("src-delete-after-duration", positive_seconds, false),
    ("src-predeclared", boolean, false),
    ("dest-uri", dest_uri, true),
    ("dest-exchange", binary, false),
    ("dest-exchange-key", binary, false),
    ("dest-queue", queue_name, false),
    ("dest-queue-args", table, false),
    ("add-forward-headers", boolean, false),
    ("add-timestamp-header", boolean, false),
    ("dest-add-forward-headers", boolean, false),
    ("dest-add-timestamp-header", boolean, false),
    ("publish-properties", properties, false),
    ("dest-publish-properties", properties, false),
    ("dest-predeclared", boolean, false),
];

/// RabbitMQ's validation messages for a definition named `name`, empty when it is valid.
pub fn validate(name: &str, v: &Value) -> Vec<String> {
    let Value::Object(m) = v else {
        return one(format!("{name} not a list {}", erlang_term(v)));
    };
    let mut out = Vec::new();
    match (m.contains_key("src-exchange"), m.contains_key("src-queue")) {
        (false, false) => out.push("Must specify 'src-exchange' or 'src-queue'".to_owned()),
        (true, true) => out.push("Cannot specify 'src-exchange' and 'src-queue'".to_owned()),
        _ => {}
    }
    let delete_after = m.get("src-delete-after").or_else(|| m.get("delete-after"));
    if delete_after.is_some_and(Value::is_i64) && m.get("ack-mode") == Some(&"no-ack".into()) {
        out.push("Cannot specify 'no-ack' and numerical 'delete-after'".to_owned());
    }
    if m.contains_key("dest-exchange") && m.contains_key("dest-queue") {
        out.push("Cannot specify 'dest-exchange' and 'dest-queue'".to_owned());
    }
    out.extend(proplist(name, CHECKS, v));
    out
}

/// `dest-uri`: AMQP URIs as RabbitMQ's, or one `http(s)://` webhook URI (LavinMQ's).
fn dest_uri(name: &str, v: &Value) -> Vec<String> {
    let hooks: Vec<&str> = match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    match hooks.iter().filter(|u| Webhook::is_webhook(u)).count() {
        0 => uri(name, v),
        1 if hooks.len() == 1 => match hooks.first().map(|h| Webhook::parse(h)) {
            Some(Err(e)) => vec![e],
            _ => Vec::new(),
        },
        _ => vec!["dest-uri: an http(s) URI must be the only one".to_owned()],
    }
}

/// The webhook `dest-uri` names, if it names one.
fn webhook(v: Option<&Value>) -> Option<Webhook> {
    let text = match v? {
        Value::String(s) => s.as_str(),
        Value::Array(a) => a.first()?.as_str()?,
        _ => return None,
    };
    Webhook::parse(text).ok()
}

fn uris(v: Option<&Value>) -> Vec<AmqpUri> {
    let texts: Vec<&str> = match v {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    texts
        .into_iter()
        .filter_map(|t| AmqpUri::parse(t).ok())
        .collect()
}

/// The vhosts the URIs naming this node (no host) reach, source and destination.
pub fn local_vhosts(v: &Value) -> Vec<String> {
    ["src-uri", "dest-uri"]
        .iter()
        .flat_map(|k| uris(v.get(*k)))
        .filter(AmqpUri::is_local)
        .map(|u| u.vhost)
        .collect()
}

fn args(v: Option<&Value>) -> FieldTable {
    match v {
        Some(Value::Object(m)) => crate::json::json_table(m.iter()).unwrap_or_default(),
        _ => FieldTable::default(),
    }
}

impl ShovelDef {
    /// Reads a definition [`validate`] accepted; Err with the messages otherwise.
    pub fn parse(name: &str, v: &Value) -> Result<ShovelDef, Vec<String>> {
        let errors = validate(name, v);
        if !errors.is_empty() {
            return Err(errors);
        }
        let m = v.as_object().cloned().unwrap_or_default();
        let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        let flag = |k: &str, legacy: &str| {
            m.get(k)
                .or_else(|| m.get(legacy))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let source = match text("src-queue") {
            Some(name) => Source::Queue {
                name,
                args: args(m.get("src-queue-args")),
                predeclared: flag("src-predeclared", "src-predeclared"),
            },
            None => Source::Exchange {
                name: text("src-exchange").unwrap_or_default(),
                key: text("src-exchange-key").unwrap_or_default(),
            },
        };
        let delete_after = match m.get("src-delete-after").or_else(|| m.get("delete-after")) {
            Some(Value::String(s)) if s == "queue-length" => DeleteAfter::QueueLength,
            Some(Value::Number(n)) => DeleteAfter::Count(n.as_u64().unwrap_or(0)),
            _ => DeleteAfter::Never,
        };
        let prefetch = m
            .get("src-prefetch-count")
            .or_else(|| m.get("prefetch-count"))
            .and_then(Value::as_f64)
            .map_or(DEFAULT_PREFETCH, |n| {
                n.clamp(0.0, f64::from(u16::MAX)) as u16
            });
        let ack_mode = AckMode::parse(m.get("ack-mode").and_then(Value::as_str));
        let delay = m
            .get("reconnect-delay")
            .and_then(Value::as_f64)
            .unwrap_or(DEFAULT_RECONNECT_DELAY)
            .clamp(0.0, 86_400.0);
        let publish_properties = m
            .get("dest-publish-properties")
            .or_else(|| m.get("publish-properties"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Ok(ShovelDef {
            src_uris: uris(m.get("src-uri")),
            source,
            consumer_args: args(m.get("src-consumer-args")),
            consumer_name: text("src-consumer-name").unwrap_or_default(),
            prefetch,
            delete_after,
            dest_uris: uris(m.get("dest-uri")),
            webhook: webhook(m.get("dest-uri")),
            dest_queue: text("dest-queue"),
            dest_queue_args: args(m.get("dest-queue-args")),
            dest_predeclared: flag("dest-predeclared", "dest-predeclared"),
            dest_exchange: text("dest-exchange"),
            dest_exchange_key: text("dest-exchange-key"),
            publish_properties,
            add_forward_headers: flag("dest-add-forward-headers", "add-forward-headers"),
            add_timestamp_header: flag("dest-add-timestamp-header", "add-timestamp-header"),
            ack_mode,
            reconnect_delay: Duration::from_secs_f64(delay),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rabbitmqs_messages_in_rabbitmqs_order() {
        // As RabbitMQ 3.10.8 answers the same value (before its HTML escaping).
        let v = json!({"src-queue": "q1", "src-exchange": "x", "dest-uri": 5,
            "ack-mode": "bogus", "prefetch-count": "a", "zzz": 1});
        assert_eq!(
            validate("s2", &v),
            [
                "Cannot specify 'src-exchange' and 'src-queue'",
                "Unrecognised terms [{<<\"zzz\">>,1}] in s2",
                "dest-uri should be list, actually was 5",
                "prefetch-count should be a number, actually was <<\"a\">>",
                "Key \"src-uri\" not found in s2",
                "ack-mode should be one of [<<\"no-ack\">>,<<\"on-publish\">>,<<\"on-confirm\">>], \
                 actually was <<\"bogus\">>",
            ]
        );
        let v = json!({"src-uri": "amqp://", "src-queue": "q1", "dest-uri": "amqp://",
            "dest-add-forward-headers": "yes", "src-delete-after": 5, "ack-mode": "no-ack",
            "dest-publish-properties": {"delivery_mode": "x", "bogus": 1}});
        assert_eq!(
            validate("s4", &v),
            [
                "Cannot specify 'no-ack' and numerical 'delete-after'",
                "Unrecognised terms [{<<\"bogus\">>,1}] in dest-publish-properties",
                "delivery_mode should be a number, actually was <<\"x\">>",
                "dest-add-forward-headers should be boolean, actually was <<\"yes\">>",
            ]
        );
        let v = json!({"src-uri": "foo://x", "src-queue": "q1", "dest-queue": "q",
            "dest-uri": ["amqp://", "amqp://h:1"], "dest-exchange": "x",
            "src-delete-after": "sometimes"});
        assert_eq!(
            validate("s3", &v),
            [
                "Cannot specify 'dest-exchange' and 'dest-queue'",
                "src-delete-after should be a number greater than or equal to 0, \"never\" or \
                 \"queue-length\", actually was <<\"sometimes\">>",
                "\"foo://x\" not a valid URI: {{unexpected_uri_scheme,\"foo\"},\"foo://x\"}",
            ]
        );
        assert_eq!(validate("s5", &json!("str")), ["s5 not a list <<\"str\">>"]);
    }

    #[test]
    fn reads_defaults_and_legacy_keys() {
        let v = json!({"src-uri": ["amqp://a", "amqp://b"], "src-queue": "q",
            "dest-uri": "amqp://c", "dest-exchange": "x", "prefetch-count": 7,
            "add-forward-headers": true, "delete-after": "queue-length"});
        let d = ShovelDef::parse("s", &v).unwrap();
        assert_eq!(d.src_uris.len(), 2);
        assert_eq!(d.prefetch, 7);
        assert_eq!(d.ack_mode, AckMode::OnConfirm);
        assert_eq!(d.delete_after, DeleteAfter::QueueLength);
        assert_eq!(d.reconnect_delay, Duration::from_secs(5));
        assert!(d.add_forward_headers && !d.add_timestamp_header);
        assert_eq!(d.dest_exchange.as_deref(), Some("x"));
        assert!(matches!(d.source, Source::Queue { ref name, .. } if name == "q"));
    }
}
