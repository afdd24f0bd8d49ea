//! Routing: from an exchange to the set of queues a message reaches, following
//! exchange-to-exchange bindings, sender-selected keys (CC/BCC) and alternate exchanges.

use super::VHost;
use crate::exchange::{Destination, Exchange};
use crate::message::Message;
use crate::queue::QueueRef;
use amq_protocol::types::FieldTable;
use std::sync::Arc;

impl VHost {
    /// The queues a message published to `x` reaches, each once: through exchange-to-exchange
    /// bindings, for its routing key and any sender-selected keys (`CC`/`BCC`), and through
    /// `x`'s alternate exchange(s) when nothing else matched.
    pub fn route(
        &self,
        x: &Exchange,
        msg: &Message,
        extra_keys: &[String],
        out: &mut Vec<QueueRef>,
    ) {
        self.route_keys(x, msg, extra_keys, out);
        if !out.is_empty() {
            return;
        }
        let mut tried = vec![x.name.clone()];
        let mut alternate = x.alternate_exchange();
        while out.is_empty() {
            let Some(name) = alternate.take() else { break };
            if tried.contains(&name) {
                break;
            }
            let Ok(ae) = self.exchange(&name) else { break };
            self.route_keys(&ae, msg, extra_keys, out);
            alternate = ae.alternate_exchange();
            tried.push(name);
        }
    }

    fn route_keys(
        &self,
        x: &Exchange,
        msg: &Message,
        extra_keys: &[String],
        out: &mut Vec<QueueRef>,
    ) {
        let mut headers = None;
        self.route_key(x, msg.routing_key.as_str(), msg, &mut headers, out);
        for k in extra_keys {
            self.route_key(x, k, msg, &mut headers, out);
        }
    }

    fn route_key(
        &self,
        x: &Exchange,
        key: &str,
        msg: &Message,
        headers: &mut Option<FieldTable>,
        out: &mut Vec<QueueRef>,
    ) {
        if x.name.is_empty() {
            if let Some(q) = self.queues.get(key) {
                if !out.iter().any(|o| Arc::ptr_eq(o, q.value())) {
                    out.push(q.clone());
                }
            }
            return;
        }
        let mut next: Vec<String> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        Self::route_one(x, key, msg, headers, out, &mut next);
        while let Some(name) = next.pop() {
            if seen.contains(&name) || name == x.name {
                continue;
            }
            if let Some(x2) = self.exchanges.get(&name).map(|e| e.clone()) {
                Self::route_one(&x2, key, msg, headers, out, &mut next);
            }
            seen.push(name);
        }
    }

    fn route_one(
        x: &Exchange,
        key: &str,
        msg: &Message,
        headers: &mut Option<FieldTable>,
        out: &mut Vec<QueueRef>,
        next: &mut Vec<String>,
    ) {
        let b = x.bindings();
        let mut dests = crate::exchange::Dests::new();
        b.route(key, msg, headers, &mut dests);
        for d in dests {
            match d {
                Destination::Queue(q) => {
                    if !out.iter().any(|o| Arc::ptr_eq(o, q)) {
                        out.push(q.clone());
                    }
                }
                Destination::Exchange(n) => next.push(n.clone()),
            }
        }
    }
}
