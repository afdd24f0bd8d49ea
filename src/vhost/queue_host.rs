//! The vhost as its queues see it (`queue::QueueHost`): the store, the policies, leaving the
//! registry, and dead-lettering through the vhost's publish (at most once, or at least
//! once: confirmed by every queue reached). Queues hold it weakly, so the
//! dependency points down from vhost to queue and never back.

use super::publish::{NoConfirms, PublishContext, RouteState, Routed, Waiters};
use super::VHost;
use crate::args::QueueArgs;
use crate::message::Message;
use crate::policy::Applied;
use crate::queue::{QueueHost, QueueRef};
use crate::store::Store;
use amq_protocol::types::FieldTable;
use std::sync::Arc;

impl QueueHost for VHost {
    fn vhost_name(&self) -> &str {
        &self.name
    }

    fn store(&self) -> &Store {
        &self.store
    }

    fn policies_for(&self, name: &str, args: &QueueArgs, arguments: &FieldTable) -> Applied {
        self.policies.for_queue(name, args, arguments)
    }

    fn forget_queue(&self, q: &QueueRef) {
        VHost::forget_queue(self, q);
        self.queue_removed_itself(q);
    }

    fn dead_letter(self: Arc<Self>, dlx: &str, copies: Vec<Arc<Message>>) {
        let Ok(x) = self.exchange(dlx) else {
            return;
        };
        tokio::spawn(async move {
            let ctx = PublishContext {
                dead_letter: true,
                ..PublishContext::default()
            };
            let mut state = RouteState::default();
            for copy in copies {
                self.publish(&x, copy, ctx, &mut NoConfirms, &mut state)
                    .await;
            }
        });
    }

    fn dead_letter_confirmed(
        self: Arc<Self>,
        dlx: &str,
        copy: Arc<Message>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
        let x = self.exchange(dlx).ok();
        Box::pin(async move {
            let Some(x) = x else {
                return false;
            };
            let ctx = PublishContext {
                dead_letter: true,
                ..PublishContext::default()
            };
            let mut waiters = Waiters::default();
            let routed = self
                .publish(&x, copy, ctx, &mut waiters, &mut RouteState::default())
                .await;
            matches!(routed, Routed::Queues(_))
                && tokio::time::timeout(CONFIRM_TIMEOUT, waiters.stored())
                    .await
                    .unwrap_or(false)
        })
    }
}

/// How long an at-least-once dead letter waits for its targets' confirms before it counts
/// as not sent (and goes again later).
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
