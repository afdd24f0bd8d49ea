//! Dead-lettering as RabbitMQ 3.13 does it: the copy gets an `x-death` entry per (queue, reason),
//! most recent first with a count, `x-first-death-*` once and `x-last-death-*` every time; its
//! `expiration` is removed (kept as `original-expiration`); it is republished to the
//! dead-letter exchange with the dead-letter routing key (or its own). A target queue that
//! already appears in the deaths since the last rejection would form a cycle and is skipped.

use crate::message::Message;
use amq_protocol::protocol::basic::{gen_properties, AMQPProperties};
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString};
use bytes::{BufMut, BytesMut};

/// Why a message was dead-lettered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// basic.reject / basic.nack without requeue.
    Rejected,
    /// Its TTL ran out.
    Expired,
    /// A max-length limit dropped it.
    Maxlen,
    /// It was returned more often than x-delivery-limit allows.
    DeliveryLimit,
}

impl Reason {
    /// The text RabbitMQ writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rejected => "rejected",
            Reason::Expired => "expired",
            Reason::Maxlen => "maxlen",
            Reason::DeliveryLimit => "delivery_limit",
        }
    }
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

fn text_of(v: Option<&AMQPValue>) -> Option<String> {
    v.and_then(crate::args::text)
}

/// Copies every property but `expiration` and `headers`.
fn without_expiration(p: &AMQPProperties, headers: FieldTable) -> AMQPProperties {
    let mut n = AMQPProperties::default().with_headers(headers);
    if let Some(v) = p.content_type() {
        n = n.with_content_type(v.clone());
    }
    if let Some(v) = p.content_encoding() {
        n = n.with_content_encoding(v.clone());
    }
    if let Some(v) = p.delivery_mode() {
        n = n.with_delivery_mode(*v);
    }
    if let Some(v) = p.priority() {
        n = n.with_priority(*v);
    }
    if let Some(v) = p.correlation_id() {
        n = n.with_correlation_id(v.clone());
    }
    if let Some(v) = p.reply_to() {
        n = n.with_reply_to(v.clone());
    }
    if let Some(v) = p.message_id() {
        n = n.with_message_id(v.clone());
    }
    if let Some(v) = p.timestamp() {
        n = n.with_timestamp(*v);
    }
    if let Some(v) = p.kind() {
        n = n.with_type(v.clone());
    }
    if let Some(v) = p.user_id() {
        n = n.with_user_id(v.clone());
    }
    if let Some(v) = p.app_id() {
        n = n.with_app_id(v.clone());
    }
    if let Some(v) = p.cluster_id() {
        n = n.with_cluster_id(v.clone());
    }
    n
}

/// The dead-lettered copy of `msg`, leaving `queue` for `reason`, to be published to
/// `dlx` with `routing_key`.
pub fn dead_letter_copy(
    msg: &Message,
    queue: &str,
    reason: Reason,
    dlx: &str,
    routing_key: &str,
    now_secs: u64,
) -> Message {
    let props = msg.properties();
    let headers = props.headers().clone().unwrap_or_default();
    let mut deaths: Vec<AMQPValue> = match headers.inner().get("x-death") {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().to_vec(),
        _ => Vec::new(),
    };
    let same = |v: &AMQPValue| match v {
        AMQPValue::FieldTable(t) => {
            text_of(t.inner().get("queue")).as_deref() == Some(queue)
                && text_of(t.inner().get("reason")).as_deref() == Some(reason.as_str())
        }
        _ => false,
    };
    let previous = deaths.iter().position(same).map(|i| deaths.remove(i));
    let entry = match previous {
        Some(AMQPValue::FieldTable(mut t)) => {
            let count = match t.inner().get("count") {
                Some(AMQPValue::LongLongInt(n)) => *n,
                _ => 1,
            };
            t.insert("count".into(), AMQPValue::LongLongInt(count + 1));
            t.insert("time".into(), AMQPValue::Timestamp(now_secs));
            t
        }
        _ => {
            let mut t = FieldTable::default();
            t.insert("count".into(), AMQPValue::LongLongInt(1));
            t.insert("reason".into(), long(reason.as_str()));
            t.insert("queue".into(), long(queue));
            t.insert("time".into(), AMQPValue::Timestamp(now_secs));
            t.insert("exchange".into(), long(msg.exchange.as_str()));
            let mut keys = vec![long(msg.routing_key.as_str())];
            if let Some(AMQPValue::FieldArray(cc)) = headers.inner().get("CC") {
                keys.extend(cc.as_slice().iter().cloned());
            }
            t.insert(
                "routing-keys".into(),
                AMQPValue::FieldArray(FieldArray::from(keys)),
            );
            if let Some(e) = props.expiration() {
                t.insert("original-expiration".into(), long(e.as_str()));
            }
            t
        }
    };
    deaths.insert(0, AMQPValue::FieldTable(entry));
    // CC keys now live in x-death's routing-keys; RabbitMQ drops the header from the copy.
    let mut headers: FieldTable = headers
        .inner()
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "CC" | "BCC"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into();
    headers.insert(
        "x-death".into(),
        AMQPValue::FieldArray(FieldArray::from(deaths)),
    );
    if !headers.contains_key("x-first-death-queue") {
        headers.insert("x-first-death-queue".into(), long(queue));
        headers.insert("x-first-death-reason".into(), long(reason.as_str()));
        headers.insert("x-first-death-exchange".into(), long(msg.exchange.as_str()));
    }
    headers.insert("x-last-death-queue".into(), long(queue));
    headers.insert("x-last-death-reason".into(), long(reason.as_str()));
    headers.insert("x-last-death-exchange".into(), long(msg.exchange.as_str()));
    let new_props = without_expiration(&props, headers);
    let raw =
        cookie_factory::gen_simple(gen_properties(&new_props), Vec::new()).unwrap_or_default();
    let mut data = BytesMut::with_capacity(raw.len() + msg.body_len());
    data.put_slice(&raw);
    data.put_slice(msg.body());
    Message::new(
        crate::shortstr::short(dlx),
        crate::shortstr::short(routing_key),
        data.freeze(),
        raw.len(),
        &new_props,
    )
}

/// Whether delivering a dead-lettered message to `target` would close a cycle: the target
/// already appears in its deaths and none of the deaths since then was a rejection.
pub fn is_cycle(msg: &Message, target: &str) -> bool {
    let headers = msg.headers();
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        return false;
    };
    for d in deaths.as_slice() {
        let AMQPValue::FieldTable(t) = d else {
            continue;
        };
        if text_of(t.inner().get("reason")).as_deref() == Some("rejected") {
            return false;
        }
        if text_of(t.inner().get("queue")).as_deref() == Some(target) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(props: AMQPProperties) -> Message {
        let raw = cookie_factory::gen_simple(gen_properties(&props), Vec::new()).expect("gen");
        let mut data = raw.clone();
        data.extend_from_slice(b"body");
        Message::new(
            "src-x".into(),
            "rk".into(),
            Bytes::from(data),
            raw.len(),
            &props,
        )
    }

    fn death(m: &Message, i: usize) -> FieldTable {
        match m.headers().inner().get("x-death") {
            Some(AMQPValue::FieldArray(a)) => match &a.as_slice()[i] {
                AMQPValue::FieldTable(t) => t.clone(),
                other => panic!("not a table: {other:?}"),
            },
            other => panic!("no x-death: {other:?}"),
        }
    }

    #[test]
    fn x_death_is_written_counted_and_ordered() {
        let m = msg(AMQPProperties::default()
            .with_expiration("500".into())
            .with_delivery_mode(2));
        let d1 = dead_letter_copy(&m, "q1", Reason::Expired, "dlx", "dead", 100);
        assert_eq!(d1.routing_key.as_str(), "dead");
        assert_eq!(d1.exchange.as_str(), "dlx");
        assert!(d1.persistent);
        assert_eq!(d1.body(), b"body");
        assert!(d1.properties().expiration().is_none());
        let e = death(&d1, 0);
        assert_eq!(e.inner().get("count"), Some(&AMQPValue::LongLongInt(1)));
        assert_eq!(e.inner().get("reason"), Some(&long("expired")));
        assert_eq!(e.inner().get("queue"), Some(&long("q1")));
        assert_eq!(e.inner().get("exchange"), Some(&long("src-x")));
        assert_eq!(e.inner().get("original-expiration"), Some(&long("500")));
        assert_eq!(e.inner().get("time"), Some(&AMQPValue::Timestamp(100)));
        let d2 = dead_letter_copy(&d1, "q2", Reason::Rejected, "dlx2", "again", 101);
        let d3 = dead_letter_copy(&d2, "q1", Reason::Expired, "dlx", "dead", 102);
        assert_eq!(death(&d3, 0).inner().get("queue"), Some(&long("q1")));
        assert_eq!(
            death(&d3, 0).inner().get("count"),
            Some(&AMQPValue::LongLongInt(2))
        );
        assert_eq!(death(&d3, 1).inner().get("queue"), Some(&long("q2")));
        let h = d3.headers();
        assert_eq!(h.inner().get("x-first-death-queue"), Some(&long("q1")));
        assert_eq!(
            h.inner().get("x-first-death-reason"),
            Some(&long("expired"))
        );
        assert_eq!(h.inner().get("x-last-death-queue"), Some(&long("q1")));
        assert_eq!(h.inner().get("x-last-death-exchange"), Some(&long("dlx2")));
    }

    #[test]
    fn cc_keys_move_into_routing_keys() {
        let mut h = FieldTable::default();
        h.insert(
            "CC".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![long("other")])),
        );
        let m = msg(AMQPProperties::default().with_headers(h));
        let d = dead_letter_copy(&m, "q", Reason::Rejected, "dlx", "rk", 1);
        assert!(!d.headers().contains_key("CC"));
        assert!(matches!(death(&d, 0).inner().get("routing-keys"),
            Some(AMQPValue::FieldArray(a)) if a.as_slice() == [long("rk"), long("other")]));
    }

    #[test]
    fn cycles_are_detected_unless_a_rejection_intervened() {
        let m = msg(AMQPProperties::default());
        let d1 = dead_letter_copy(&m, "a", Reason::Expired, "dlx", "b", 1);
        assert!(is_cycle(&d1, "a"));
        assert!(!is_cycle(&d1, "b"));
        let d2 = dead_letter_copy(&d1, "b", Reason::Rejected, "dlx", "a", 2);
        assert!(
            !is_cycle(&d2, "a"),
            "a rejection since then breaks the cycle"
        );
        let d3 = dead_letter_copy(&d1, "b", Reason::Expired, "dlx", "a", 2);
        assert!(is_cycle(&d3, "a"));
    }
}
