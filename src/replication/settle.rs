//! Writes that routing depends on (bindings, exchange deletions) are answered only once the
//! other members have applied them, so a client told bind-ok on one node and publishing
//! through another finds the binding there: a node routes by what it has applied, and
//! confirming every unroutable publish against the leader would cost each one a round trip.
//! The wait is bounded, and a member that did not answer the node's last request is told
//! without waiting (a dead or cut-off node does not hold every binding up).

use super::wire::App;
use crate::broker::Broker;
use crate::cluster::codec;
use std::time::Duration;

/// How long a write waits for the other members to apply it.
pub(super) const SETTLE_WAIT: Duration = Duration::from_secs(2);

impl Broker {
    /// Waits until every other member that answered its last request has applied what this
    /// node has applied now (at most [`SETTLE_WAIT`]).
    pub(super) async fn settled_everywhere(&self) {
        let Some(node) = self.cluster.get() else {
            return;
        };
        let Some(index) = node.applied_index() else {
            return;
        };
        let Ok(request) = codec::encode(&App::Applied(index)) else {
            return;
        };
        let mut waits = tokio::task::JoinSet::new();
        for (m, _) in node.members() {
            if m.name == node.name() {
                continue;
            }
            let wait = node.answered_last(&m.name);
            let (node, request) = (node.clone(), request.clone());
            let call = async move {
                let _ = node.call_app(&m.name, request, SETTLE_WAIT).await;
            };
            if wait {
                waits.spawn(call);
            } else {
                tokio::spawn(call);
            }
        }
        while waits.join_next().await.is_some() {}
    }
}
