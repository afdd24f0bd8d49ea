//! The federation upstream helper exchange (`x-federation-upstream`, from RabbitMQ's
//! federation plugin). A downstream broker's exchange-federation link declares one on its
//! upstream, bound to the federated exchange, with the link's `x-max-hops` and the
//! downstream's name and vhost in its arguments; it routes like a fanout, except that a
//! message which already crossed `x-max-hops` links, or already passed that downstream (its
//! `x-received-from` header says so), goes nowhere. So a message does not travel back to a
//! broker it came from, and RabbitMQ's plugin can federate from Warren as from RabbitMQ.

use super::fanout::FanoutBindings;
use super::{Binding, Dests};
use crate::message::Message;
use amq_protocol::types::{AMQPValue, FieldArray, FieldTable};

/// The type name.
pub const TYPE_NAME: &str = "x-federation-upstream";
/// The message header of the links a message crossed (the newest first).
pub const ROUTING_HEADER: &str = "x-received-from";
/// The declare argument with the link's hop limit (a `long`: RabbitMQ's name for a signed
/// 64-bit integer, field type `l`).
pub const MAX_HOPS_ARG: &str = "x-max-hops";
const DOWNSTREAM_NAME_ARG: &str = "x-downstream-name";
const DOWNSTREAM_VHOST_ARG: &str = "x-downstream-vhost";

/// A string field of a table (long or short string).
pub fn text(t: &FieldTable, key: &str) -> Option<String> {
    t.inner().get(key).and_then(crate::args::text)
}

/// An array field of a table.
pub fn array<'a>(t: Option<&'a FieldTable>, key: &str) -> Option<&'a FieldArray> {
    match t?.inner().get(key)? {
        AMQPValue::FieldArray(a) => Some(a),
        _ => None,
    }
}

/// True when a table of `array` names broker `cluster` and vhost `vhost`.
pub fn already_seen(cluster: &str, vhost: &str, array: &FieldArray) -> bool {
    array.as_slice().iter().any(|v| match v {
        AMQPValue::FieldTable(t) => {
            text(t, "cluster-name").as_deref() == Some(cluster)
                && text(t, "vhost").as_deref() == Some(vhost)
        }
        _ => false,
    })
}

/// RabbitMQ's `should_forward`: a message goes on unless it crossed `max_hops` links or
/// already passed broker `cluster`, vhost `vhost`.
pub fn should_forward(
    headers: Option<&FieldTable>,
    max_hops: u64,
    cluster: &str,
    vhost: &str,
) -> bool {
    match array(headers, ROUTING_HEADER) {
        Some(a) => (a.as_slice().len() as u64) < max_hops && !already_seen(cluster, vhost, a),
        None => true,
    }
}

/// Checks the declare arguments, with RabbitMQ's texts (406).
pub fn validate(args: &FieldTable) -> Result<(), String> {
    match args.inner().get(MAX_HOPS_ARG) {
        Some(AMQPValue::LongLongInt(_)) => Ok(()),
        None => Err(format!("Argument {MAX_HOPS_ARG} missing")),
        Some(_) => Err(format!("Argument {MAX_HOPS_ARG} must be of type long")),
    }
}

/// Bindings of an `x-federation-upstream` exchange: a fanout's, and the filter its arguments
/// set.
#[derive(Debug)]
pub struct FederationUpstreamBindings {
    fanout: FanoutBindings,
    max_hops: u64,
    /// The downstream broker's name ("unknown" when a link did not say, as RabbitMQ).
    downstream: String,
    downstream_vhost: String,
}

impl FederationUpstreamBindings {
    /// The filter the declare arguments set (a missing or odd `x-max-hops`, which a declare
    /// refuses, lets nothing through).
    pub fn new(args: &FieldTable) -> Self {
        let max_hops = match args.inner().get(MAX_HOPS_ARG) {
            Some(AMQPValue::LongLongInt(n)) => u64::try_from(*n).unwrap_or(0),
            _ => 0,
        };
        let named = |k: &str| text(args, k).unwrap_or_else(|| "unknown".to_owned());
        FederationUpstreamBindings {
            fanout: FanoutBindings::default(),
            max_hops,
            downstream: named(DOWNSTREAM_NAME_ARG),
            downstream_vhost: named(DOWNSTREAM_VHOST_ARG),
        }
    }

    /// Adds a destination once, whatever the key.
    pub fn bind(&mut self, b: &Binding) {
        self.fanout.bind(b);
    }

    /// Removes the destination when no other binding of it remains.
    pub fn unbind(&mut self, b: &Binding, still_bound: bool) {
        self.fanout.unbind(b, still_bound);
    }

    /// Every destination, when the message may go on.
    pub fn route<'a>(
        &'a self,
        msg: &Message,
        headers: &mut Option<FieldTable>,
        out: &mut Dests<'a>,
    ) {
        if msg.has_headers() {
            let h = headers.get_or_insert_with(|| msg.headers());
            if !should_forward(
                Some(h),
                self.max_hops,
                &self.downstream,
                &self.downstream_vhost,
            ) {
                return;
            }
        }
        self.fanout.route(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::LongString;

    fn hop(cluster: &str, vhost: &str) -> AMQPValue {
        let mut t = FieldTable::default();
        t.insert(
            "cluster-name".into(),
            AMQPValue::LongString(LongString::from(cluster.as_bytes().to_vec())),
        );
        t.insert(
            "vhost".into(),
            AMQPValue::LongString(LongString::from(vhost.as_bytes().to_vec())),
        );
        AMQPValue::FieldTable(t)
    }

    fn received(hops: Vec<AMQPValue>) -> FieldTable {
        let mut h = FieldTable::default();
        h.insert(ROUTING_HEADER.into(), AMQPValue::FieldArray(hops.into()));
        h
    }

    #[test]
    fn hops_and_loops_stop_a_message() {
        assert!(should_forward(None, 1, "down", "/"));
        let one = received(vec![hop("other", "/")]);
        assert!(should_forward(Some(&one), 2, "down", "/"));
        assert!(!should_forward(Some(&one), 1, "down", "/"));
        let looped = received(vec![hop("down", "/")]);
        assert!(!should_forward(Some(&looped), 5, "down", "/"));
        assert!(should_forward(Some(&looped), 5, "down", "other-vhost"));
    }

    #[test]
    fn declare_arguments_are_checked_as_rabbitmq() {
        let mut args = FieldTable::default();
        assert_eq!(validate(&args).unwrap_err(), "Argument x-max-hops missing");
        args.insert(MAX_HOPS_ARG.into(), AMQPValue::LongInt(1));
        assert_eq!(
            validate(&args).unwrap_err(),
            "Argument x-max-hops must be of type long"
        );
        args.insert(MAX_HOPS_ARG.into(), AMQPValue::LongLongInt(1));
        assert!(validate(&args).is_ok());
    }
}
