//! The management API across the cluster: `/api/connections`, `/api/channels`,
//! `/api/consumers` and `/api/overview`'s totals answer from any node with every node's. Each
//! node serves its own views to the others (JSON, unfiltered) through the core's
//! `Broker::member_views`; the node asked applies the user's visibility and the vhost filter
//! to the merged list. A member that does not answer within a second is left out. Queues
//! are shown as their home node renders them (policy, message rates), one request per
//! member for a list.

use super::AppState;
use serde_json::{Map, Value};
use std::sync::Arc;

/// This node's connections.
pub(crate) const CONNECTIONS: &str = "connections";
/// This node's channels.
pub(crate) const CHANNELS: &str = "channels";
/// The consumers whose connections are on this node.
pub(crate) const CONSUMERS: &str = "consumers";
/// This node's connection and channel counts and message rates.
pub(crate) const TOTALS: &str = "totals";
/// This node as `/api/nodes` shows it ([`super::nodes::local`]).
pub(crate) const NODE: &str = "node";
/// The queues whose home is this node, as `/api/queues` shows them.
pub(crate) const QUEUES: &str = "queues";
/// Followed by `vhost\nname`: that queue of this node, as `/api/queues/{vhost}/{name}` shows it.
pub(crate) const QUEUE: &str = "queue\n";

/// The view of queue `name` in `vhost`.
pub(crate) fn queue_kind(vhost: &str, name: &str) -> String {
    format!("{QUEUE}{vhost}\n{name}")
}

/// Answers other nodes' requests for this node's views from now on, with `local` (a view's
/// kind to this node's view of it).
pub(crate) fn install<F, Fut>(b: &AppState, local: F)
where
    F: Fn(AppState, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Value> + Send + 'static,
{
    let weak = Arc::downgrade(b);
    let local = Arc::new(local);
    b.views.set(Arc::new(move |kind: String| {
        let (weak, local) = (weak.clone(), local.clone());
        Box::pin(async move {
            let Some(b) = weak.upgrade() else {
                return Vec::new();
            };
            serde_json::to_vec(&local(b, kind).await).unwrap_or_default()
        })
    }));
}

/// This node's view `kind` (`mine`), then every other member's that answers.
pub(crate) async fn everywhere(b: &AppState, kind: &str, mine: Value) -> Vec<Value> {
    let mut out = vec![mine];
    for bytes in b.member_views(kind).await {
        if let Ok(v) = serde_json::from_slice(&bytes) {
            out.push(v);
        }
    }
    out
}

/// View `kind` of member `node` (None when it does not answer in time).
pub(crate) async fn of_member(b: &AppState, node: &str, kind: &str) -> Option<Value> {
    let bytes = b.member_view(node, kind).await?;
    serde_json::from_slice(&bytes).ok()
}

/// The list view `kind` of every node, as one list (this node's, `mine`, first).
pub(crate) async fn listed_everywhere(b: &AppState, kind: &str, mine: Vec<Value>) -> Vec<Value> {
    everywhere(b, kind, Value::Array(mine))
        .await
        .into_iter()
        .flat_map(|v| match v {
            Value::Array(items) => items,
            _ => Vec::new(),
        })
        .collect()
}

/// Adds `more` into `sum`: numbers are added, objects merged key by key.
pub(crate) fn add_into(sum: &mut Value, more: &Value) {
    match (sum, more) {
        (Value::Object(s), Value::Object(m)) => {
            for (k, v) in m {
                match s.get_mut(k) {
                    Some(slot) => add_into(slot, v),
                    None => {
                        s.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot @ Value::Number(_), Value::Number(m)) => {
            let total = match (slot.as_u64(), m.as_u64()) {
                (Some(a), Some(b)) => Value::from(a.saturating_add(b)),
                _ => Value::from(slot.as_f64().unwrap_or(0.0) + m.as_f64().unwrap_or(0.0)),
            };
            *slot = total;
        }
        _ => {}
    }
}

/// The totals of every node (this node's are `mine`), summed.
pub(crate) async fn totals_everywhere(b: &AppState, mine: Value) -> Map<String, Value> {
    let mut sum = Value::Object(Map::new());
    for t in everywhere(b, TOTALS, mine).await {
        add_into(&mut sum, &t);
    }
    match sum {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn totals_add_up_numbers_key_by_key() {
        let mut sum = json!({"connections": 2, "message_stats": {"publish": 5, "publish_details": {"rate": 1.5}}});
        add_into(
            &mut sum,
            &json!({"connections": 3, "channels": 1, "message_stats": {"publish": 1, "publish_details": {"rate": 0.25}}}),
        );
        assert_eq!(
            sum,
            json!({"connections": 5, "channels": 1, "message_stats": {"publish": 6, "publish_details": {"rate": 1.75}}})
        );
    }
}
