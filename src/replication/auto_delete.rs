//! What this node's own operations removed, or left to be removed, in a replicated vhost: an
//! auto-delete exchange left without bindings by a queue's unbind or removal, a queue that
//! removed itself (auto-delete, `x-expires`). Each is proposed to the group as the guarded
//! removal every node applies ([`super::exchanges`], [`super::queues`]). An exclusive queue
//! that went is told to the other nodes directly ([`super::exclusive`]).

use super::exchanges::auto_removal;
use crate::broker::Broker;
use crate::vhost::{AutoDeleteDecider, AutoRemoval, VHost};
use std::sync::Arc;

/// What proposes the removals this node's own operations call for ([`AutoRemoval`]), for the
/// vhosts of `b`.
pub fn auto_delete_decider(b: &Arc<Broker>) -> AutoDeleteDecider {
    let broker = Arc::downgrade(b);
    Arc::new(move |v: &VHost, removed: AutoRemoval<'_>| {
        let Some(b) = broker.upgrade() else {
            return;
        };
        // A vhost being deleted takes its exchanges and queues with it.
        if !b.vhost(&v.name).is_some_and(|cur| std::ptr::eq(&*cur, v)) {
            return;
        }
        let (Some(node), Ok(rt)) = (b.cluster.get(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let cmd = match removed {
            AutoRemoval::Exchange(name) => auto_removal(&v.name, name),
            AutoRemoval::Queue(name) => super::queues::removal(v, name),
            AutoRemoval::Exclusive(q) => return super::exclusive::gone(&b, q),
        };
        rt.spawn(async move {
            if let Err(e) = node.write(cmd).await {
                tracing::warn!(error = %e, "auto-removed exchange or queue not removed from the cluster");
            }
        });
    })
}
