//! What a shovel changes in a message's properties on the way: the properties of
//! `dest-publish-properties`, the `x-shovelled` header (a table prepended to that array
//! header, as RabbitMQ's `update_headers` does) and `x-shovelled-timestamp`. A shovel that
//! changes nothing forwards the property bytes untouched.

use super::definition::ShovelDef;
use crate::client::relay::{AckMode, Delivery, Route, Transfer};
use amq_protocol::protocol::basic::{gen_properties, parse_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use serde_json::Value;
use std::borrow::Cow;

/// The fixed part of a shovel's rewrite, worked out once per connection.
#[derive(Debug, Default)]
pub struct Rewrite {
    ack_mode: AckMode,
    dest_queue: Option<String>,
    dest_exchange: Option<String>,
    dest_exchange_key: Option<String>,
    /// Entries of the `x-shovelled` table, when forward headers are on.
    forward: Option<Vec<(String, String)>>,
    timestamp: bool,
    properties: serde_json::Map<String, Value>,
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

impl Rewrite {
    /// The rewrite of shovel `name` in `vhost` between the connected URIs (shown redacted).
    pub fn new(
        def: &ShovelDef,
        cluster: &str,
        vhost: &str,
        name: &str,
        src_uri: &str,
        dest_uri: &str,
    ) -> Rewrite {
        let forward = def.add_forward_headers.then(|| {
            let mut t: Vec<(String, String)> = [
                ("shovelled-by", cluster),
                ("shovel-type", "dynamic"),
                ("shovel-name", name),
                ("shovel-vhost", vhost),
                ("src-uri", src_uri),
                ("dest-uri", dest_uri),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
            match &def.source {
                super::definition::Source::Queue { name, .. } => {
                    t.push(("src-queue".into(), name.clone()))
                }
                super::definition::Source::Exchange { name, key } => {
                    t.push(("src-exchange".into(), name.clone()));
                    t.push(("src-exchange-key".into(), key.clone()));
                }
            }
            for (k, v) in [
                ("dest-exchange", &def.dest_exchange),
                ("dest-exchange-key", &def.dest_exchange_key),
                ("dest-queue", &def.dest_queue),
            ] {
                if let Some(v) = v {
                    t.push((k.into(), v.clone()));
                }
            }
            t
        });
        Rewrite {
            ack_mode: def.ack_mode,
            dest_queue: def.dest_queue.clone(),
            dest_exchange: def.dest_exchange.clone(),
            dest_exchange_key: def.dest_exchange_key.clone(),
            forward,
            timestamp: def.add_timestamp_header,
            properties: def.publish_properties.clone(),
        }
    }

    /// True when messages' properties go through untouched.
    pub fn is_identity(&self) -> bool {
        self.forward.is_none() && !self.timestamp && self.properties.is_empty()
    }

    /// The rewritten property bytes; None when the given ones do not parse (they are then
    /// forwarded as they are).
    pub fn apply(&self, raw: &[u8], now_secs: u64) -> Option<Vec<u8>> {
        let (_, mut props) = parse_properties(raw).ok()?;
        props = self.set_properties(props);
        if self.forward.is_some() || self.timestamp {
            let mut headers = props.headers().clone().unwrap_or_default();
            if let Some(entries) = &self.forward {
                let mut table = FieldTable::default();
                for (k, v) in entries {
                    table.insert(ShortString::from(k.as_str()), long(v));
                }
                let mut list = vec![AMQPValue::FieldTable(table)];
                if let Some(AMQPValue::FieldArray(old)) = headers.inner().get("x-shovelled") {
                    list.extend(old.as_slice().iter().cloned());
                }
                headers.insert(
                    "x-shovelled".into(),
                    AMQPValue::FieldArray(FieldArray::from(list)),
                );
            }
            if self.timestamp {
                headers.insert(
                    "x-shovelled-timestamp".into(),
                    AMQPValue::LongLongInt(i64::try_from(now_secs).unwrap_or(i64::MAX)),
                );
            }
            props = props.with_headers(headers);
        }
        cookie_factory::gen_simple(gen_properties(&props), Vec::new()).ok()
    }

    fn set_properties(&self, mut p: AMQPProperties) -> AMQPProperties {
        for (k, v) in &self.properties {
            let text = v
                .as_str()
                .map(|s| ShortString::from(crate::shortstr::truncated(s)));
            let num = v.as_f64().map(|n| n.clamp(0.0, u64::MAX as f64) as u64);
            let octet = num.map(|n| n.min(255) as u8);
            p = match (k.as_str(), text, num, octet) {
                ("content_type", Some(s), ..) => p.with_content_type(s),
                ("content_encoding", Some(s), ..) => p.with_content_encoding(s),
                ("delivery_mode", _, _, Some(n)) => p.with_delivery_mode(n),
                ("priority", _, _, Some(n)) => p.with_priority(n),
                ("correlation_id", Some(s), ..) => p.with_correlation_id(s),
                ("reply_to", Some(s), ..) => p.with_reply_to(s),
                ("expiration", Some(s), ..) => p.with_expiration(s),
                ("message_id", Some(s), ..) => p.with_message_id(s),
                ("timestamp", _, Some(n), _) => p.with_timestamp(n),
                ("type", Some(s), ..) => p.with_type(s),
                ("user_id", Some(s), ..) => p.with_user_id(s),
                ("app_id", Some(s), ..) => p.with_app_id(s),
                ("cluster_id", Some(s), ..) => p.with_cluster_id(s),
                _ => p,
            };
        }
        p
    }
}

impl Transfer for Rewrite {
    fn ack_mode(&self) -> AckMode {
        self.ack_mode
    }

    /// To the destination queue, else to the destination exchange (or the message's own)
    /// with the destination key (or the message's own).
    fn destination<'a>(&'a self, d: &Delivery<'a>) -> Route<'a> {
        let (exchange, routing_key) = match (&self.dest_queue, &self.dest_exchange) {
            (Some(q), _) => ("", q.as_str()),
            (None, x) => (
                x.as_deref().unwrap_or(d.exchange),
                self.dest_exchange_key.as_deref().unwrap_or(d.routing_key),
            ),
        };
        let props = if self.is_identity() {
            None
        } else {
            self.apply(d.props, crate::clock::unix_secs())
        };
        Route::Publish {
            exchange: Cow::Borrowed(exchange),
            routing_key: Cow::Borrowed(routing_key),
            props,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(v: Value) -> ShovelDef {
        ShovelDef::parse("s", &v).unwrap()
    }

    #[test]
    fn forward_headers_prepend_a_table_and_properties_are_set() {
        let d = def(
            json!({"src-uri": "amqp://a", "src-queue": "q", "dest-uri": "amqp://b",
            "dest-queue": "r", "dest-add-forward-headers": true,
            "dest-add-timestamp-header": true,
            "dest-publish-properties": {"delivery_mode": 2, "app_id": "mover"}}),
        );
        let r = Rewrite::new(&d, "c1", "/", "s", "amqp://a", "amqp://b");
        assert!(!r.is_identity());
        let earlier = {
            let mut h = FieldTable::default();
            let mut t = FieldTable::default();
            t.insert("shovel-name".into(), long("before"));
            h.insert(
                "x-shovelled".into(),
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(t)])),
            );
            AMQPProperties::default().with_headers(h)
        };
        let raw = cookie_factory::gen_simple(gen_properties(&earlier), Vec::new()).unwrap();
        let out = r.apply(&raw, 1_700_000_000).unwrap();
        let (_, p) = parse_properties(&out[..]).unwrap();
        assert_eq!(*p.delivery_mode(), Some(2));
        assert_eq!(p.app_id().as_ref().map(|s| s.as_str()), Some("mover"));
        let h = p.headers().clone().unwrap();
        let Some(AMQPValue::FieldArray(list)) = h.inner().get("x-shovelled") else {
            panic!("no x-shovelled: {h:?}");
        };
        assert_eq!(list.as_slice().len(), 2);
        let AMQPValue::FieldTable(first) = &list.as_slice()[0] else {
            panic!("not a table");
        };
        assert_eq!(first.inner().get("shovel-name"), Some(&long("s")));
        assert_eq!(first.inner().get("dest-queue"), Some(&long("r")));
        assert_eq!(first.inner().get("src-queue"), Some(&long("q")));
        assert_eq!(
            h.inner().get("x-shovelled-timestamp"),
            Some(&AMQPValue::LongLongInt(1_700_000_000))
        );
    }

    #[test]
    fn a_plain_shovel_changes_nothing() {
        let d = def(json!({"src-uri": "amqp://a", "src-queue": "q", "dest-uri": "amqp://b"}));
        assert!(Rewrite::new(&d, "c", "/", "s", "a", "b").is_identity());
    }
}
