//! The one publish path as the cluster needs it: a message the default exchange cannot route
//! here is routed again once this node has applied what the cluster had committed, so a queue
//! declared through another node a moment ago gets it (the "never a stale no queue").

use crate::broker::Broker;
use crate::exchange::Exchange;
use crate::message::Message;
use crate::vhost::publish::{Confirmer, PublishContext, RouteState, Routed};
use crate::vhost::VHost;
use std::sync::Arc;

impl Broker {
    /// [`VHost::publish`], with a default-exchange miss confirmed against the cluster before
    /// it stands. Only a miss waits (one read index), and only in a cluster of several nodes.
    pub async fn publish(
        &self,
        v: &VHost,
        x: &Exchange,
        msg: Arc<Message>,
        ctx: PublishContext<'_>,
        confirmer: &mut impl Confirmer,
        state: &mut RouteState,
    ) -> Routed {
        let routed = v.publish(x, msg.clone(), ctx, confirmer, state).await;
        if matches!(routed, Routed::Unroutable(_))
            && x.name.is_empty()
            && self.is_clustered()
            && self.catch_up().await
        {
            return v.publish(x, msg, ctx, confirmer, state).await;
        }
        routed
    }
}
