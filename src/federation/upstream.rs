//! Upstreams: the values of the `federation-upstream` and `federation-upstream-set`
//! runtime parameters, checked with RabbitMQ's rules and texts
//! (`rabbit_federation_parameters`), and what a federated exchange's policy resolves to
//! (`rabbit_federation_upstream`): the upstreams it names (one by `federation-upstream`, a
//! set by `federation-upstream-set`, `all` for every upstream of the vhost), each with the
//! set element's keys over the upstream's and RabbitMQ's defaults under both.

use crate::client::relay::AckMode;
use crate::parameters::validation::{binary, boolean, enum_of, number, one, proplist, Check};
use crate::parameters::Parameters;
use serde_json::{Map, Value};
use std::time::Duration;

/// The upstream runtime-parameter component.
pub const UPSTREAM: &str = "federation-upstream";
/// The upstream-set runtime-parameter component.
pub const UPSTREAM_SET: &str = "federation-upstream-set";

fn ack_mode(name: &str, v: &Value) -> Vec<String> {
    enum_of(name, v, &["no-ack", "on-publish", "on-confirm"])
}

/// The keys an upstream and a set element share, in RabbitMQ's order.
const SHARED: &[(&str, Check, bool)] = &[
    ("exchange", binary, false),
    ("queue", binary, false),
    ("consumer-tag", binary, false),
    ("prefetch-count", number, false),
    ("reconnect-delay", number, false),
    ("max-hops", number, false),
    ("expires", number, false),
    ("message-ttl", number, false),
    ("trust-user-id", boolean, false),
    ("ack-mode", ack_mode, false),
    (
        "resource-cleanup-mode",
        |n, v| enum_of(n, v, &["default", "never"]),
        false,
    ),
    (
        "queue-type",
        |n, v| enum_of(n, v, &["classic", "quorum"]),
        false,
    ),
    ("bind-nowait", boolean, false),
    (
        "channel-use-mode",
        |n, v| enum_of(n, v, &["multiple", "single"]),
        false,
    ),
];

fn checks(first: (&'static str, Check, bool)) -> Vec<(&'static str, Check, bool)> {
    std::iter::once(first)
        .chain(SHARED.iter().copied())
        .collect()
}

/// RabbitMQ's messages for a `federation-upstream` value named `name` (empty: valid).
pub fn validate_upstream(name: &str, v: &Value) -> Vec<String> {
    // A list of pairs is what RabbitMQ's coercion makes of an empty JSON array.
    let v = match v {
        Value::Array(a) if a.is_empty() => &Value::Object(Map::new()),
        other => other,
    };
    proplist(name, &checks(("uri", crate::client::uri::check, true)), v)
}

/// RabbitMQ's messages for a `federation-upstream-set` value named `name` (empty: valid).
pub fn validate_set(name: &str, v: &Value) -> Vec<String> {
    match v {
        Value::Array(elements) => elements
            .iter()
            .flat_map(|e| proplist(name, &checks(("upstream", binary, true)), e))
            .collect(),
        other => one(format!(
            "{name} not a list {}",
            crate::json::erlang_term(other)
        )),
    }
}

/// One upstream as a federated exchange uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// The upstream's name.
    pub name: String,
    /// Its URIs, one picked at each connection.
    pub uris: Vec<String>,
    /// The exchange on the upstream (default: the federated exchange's name).
    pub exchange: String,
    /// The queue on the upstream (default: the federated queue's name).
    pub queue: String,
    /// The tag of a queue link's consumer upstream (default `federation-link-NAME`).
    pub consumer_tag: String,
    /// basic.qos prefetch on the upstream queue.
    pub prefetch: u16,
    /// Pause before connecting again after a failure.
    pub reconnect_delay: Duration,
    /// How many federation links a message may cross.
    pub max_hops: u16,
    /// `x-expires` of the upstream queue.
    pub expires: Option<i64>,
    /// `x-message-ttl` of the upstream queue.
    pub message_ttl: Option<i64>,
    /// Keep the messages' `user_id` (else it is cleared).
    pub trust_user_id: bool,
    /// When the upstream's deliveries are acknowledged.
    pub ack_mode: AckMode,
    /// The upstream queue's type.
    pub queue_type: String,
    /// Leave the upstream queue and exchange in place when the link is removed.
    pub keep_resources: bool,
}

fn number_of(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

impl Upstream {
    /// Upstream `name` from its value and a set element's keys over it, for the exchange or
    /// queue named `target`.
    fn resolve(name: &str, upstream: &Value, element: &Value, target: &str) -> Option<Upstream> {
        let get = |k: &str| element.get(k).or_else(|| upstream.get(k));
        let uris = match get("uri")? {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => return None,
        };
        let text = |k: &str| get(k).and_then(Value::as_str).map(str::to_owned);
        let whole = |k: &str| number_of(get(k)).map(|n| n.max(0.0) as i64);
        Some(Upstream {
            name: name.to_owned(),
            uris,
            exchange: text("exchange").unwrap_or_else(|| target.to_owned()),
            queue: text("queue").unwrap_or_else(|| target.to_owned()),
            consumer_tag: text("consumer-tag").unwrap_or_else(|| format!("federation-link-{name}")),
            prefetch: number_of(get("prefetch-count"))
                .map_or(1000, |n| n.clamp(0.0, f64::from(u16::MAX)) as u16),
            reconnect_delay: Duration::from_secs_f64(
                number_of(get("reconnect-delay")).map_or(5.0, |n| n.clamp(0.0, 86_400.0)),
            ),
            max_hops: number_of(get("max-hops")).map_or(1, |n| n.clamp(0.0, 65_535.0) as u16),
            expires: whole("expires"),
            message_ttl: whole("message-ttl"),
            trust_user_id: get("trust-user-id").and_then(Value::as_bool) == Some(true),
            ack_mode: AckMode::parse(get("ack-mode").and_then(Value::as_str)),
            queue_type: text("queue-type").unwrap_or_else(|| "classic".to_owned()),
            keep_resources: text("resource-cleanup-mode").as_deref() == Some("never"),
        })
    }
}

/// The upstreams a policy definition names for exchange or queue `target` of `vhost` (one by
/// name, a set, `all`, or those whose names match a pattern), sorted by name (those whose
/// parameter does not exist are left out, as RabbitMQ does).
pub fn for_policy(
    params: &Parameters,
    vhost: &str,
    target: &str,
    definition: &Map<String, Value>,
) -> Vec<Upstream> {
    let named = |name: &str| serde_json::json!({ "upstream": name });
    let key = |k: &str| definition.get(k).and_then(Value::as_str);
    let elements: Vec<Value> = match (
        key("federation-upstream"),
        key("federation-upstream-set"),
        key("federation-upstream-pattern"),
    ) {
        (Some(name), None, None) => vec![named(name)],
        (None, Some("all"), None) => params
            .list(UPSTREAM, Some(vhost))
            .into_iter()
            .map(|(_, name, _)| named(&name))
            .collect(),
        (None, Some(set), None) => match params.get(UPSTREAM_SET, vhost, set) {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        },
        (None, None, Some(pattern)) => match regex::Regex::new(pattern) {
            Ok(re) => params
                .list(UPSTREAM, Some(vhost))
                .into_iter()
                .filter(|(_, name, _)| re.is_match(name))
                .map(|(_, name, _)| named(&name))
                .collect(),
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    let mut out: Vec<Upstream> = elements
        .iter()
        .filter_map(|e| {
            let name = e.get("upstream")?.as_str()?;
            let value = params.get(UPSTREAM, vhost, name)?;
            Upstream::resolve(name, &value, e, target)
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn upstream_texts_are_rabbitmqs() {
        assert_eq!(
            validate_upstream("up", &json!({})),
            vec!["Key \"uri\" not found in up"]
        );
        assert_eq!(
            validate_upstream("up", &json!({"uri": 5})),
            vec!["uri should be list, actually was 5"]
        );
        let v = json!({"uri": "amqp://h", "prefetch-count": "x", "ack-mode": "bogus",
                       "trust-user-id": 3, "max-hops": "a", "zzz": 1});
        assert_eq!(
            validate_upstream("up", &v),
            vec![
                "Unrecognised terms [{<<\"zzz\">>,1}] in up",
                "ack-mode should be one of [<<\"no-ack\">>,<<\"on-publish\">>,<<\"on-confirm\">>], actually was <<\"bogus\">>",
                "trust-user-id should be boolean, actually was 3",
                "max-hops should be a number, actually was <<\"a\">>",
                "prefetch-count should be a number, actually was <<\"x\">>",
            ]
        );
        assert!(validate_upstream("up", &json!({"uri": ["amqp://a", "amqp://b"]})).is_empty());
        assert_eq!(
            validate_set("s", &json!([{"upstream": "a"}, {"max-hops": 2}])),
            vec!["Key \"upstream\" not found in s"]
        );
    }

    #[test]
    fn a_set_element_overrides_its_upstream() {
        let up = json!({"uri": "amqp://h", "max-hops": 3, "prefetch-count": 10});
        let u = Upstream::resolve("a", &up, &json!({"upstream": "a", "max-hops": 2}), "x")
            .expect("resolves");
        assert_eq!((u.max_hops, u.prefetch, u.exchange.as_str()), (2, 10, "x"));
        assert_eq!(
            (u.queue.as_str(), u.consumer_tag.as_str()),
            ("x", "federation-link-a")
        );
        assert_eq!(u.ack_mode, AckMode::OnConfirm);
        assert_eq!(u.reconnect_delay, Duration::from_secs(5));
    }
}
