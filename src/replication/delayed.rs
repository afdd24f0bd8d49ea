//! Replicated delayed messages (#18; in RabbitMQ they live on one node and are lost with
//! it). A durable `x-delayed-message` exchange declared on a cluster gets a Raft group, named
//! in its record in the tree ([`DelayGroup`]; members placed as a quorum queue's: the
//! declaring node, which leads first, and the next running nodes, three in all). The group
//! holds the exchange's waiting messages, key -> [`Waiting`]; a publish through any node is
//! confirmed once the group has committed it ([`GroupReplica::hold`]).
//!
//! The node leading the group runs the timers: when it comes to lead it feeds the delayer
//! everything the group holds, then each [`POLL`] what was added since
//! ([`take_over`]). A message whose delay is over is routed through the exchange on that node
//! and removed from the group. A node that no longer leads the group in the term it was fed
//! in routes nothing; between a message's routing and its removal committing, a new leader
//! may route it again (at least once, as a quorum queue's redelivery).

use super::delay_record::DelayGroup;
use super::exchanges::EXCHANGES;
use super::quorum_members::members_named;
use super::VHOSTS;
use crate::broker::Broker;
use crate::cluster::codec;
use crate::cluster::group_types::GroupCommand;
use crate::cluster::MetaNode;
use crate::confirm::ConfirmToken;
use crate::delayed::{Held, Replica};
use crate::message::Message;
use crate::queue::remote::WireMessage;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the leader of a delayed exchange's group looks for messages added to it.
const POLL: Duration = Duration::from_millis(50);

/// A message waiting in a group: when it is due (Unix milliseconds) and the message.
#[derive(Serialize, Deserialize)]
struct Waiting {
    due: u64,
    message: WireMessage,
}

/// Applies the put of an exchange's record on this node: a delayed exchange's messages go
/// to the group it names, whose member here is started if this node is one.
pub(super) fn apply_put(b: &Broker, path: &[String], value: &[u8]) {
    let ([_, vhost, kind, name], Some(d)) = (path, DelayGroup::of(value)) else {
        return;
    };
    if kind != EXCHANGES || b.vhost(vhost).is_none() {
        return;
    }
    let (Some(node), Some(delayer)) = (b.cluster.get(), b.delayer()) else {
        return;
    };
    delayer.replicate(vhost, name, d.group, &d.members);
    if !d.members.iter().any(|m| m == node.name()) {
        return;
    }
    if node.groups().is_member(d.group) {
        node.groups().prefer(d.group, &d.node);
        return;
    }
    let (node, members, leader, group) = (
        node.clone(),
        members_named(&node, &d.members),
        d.node.clone(),
        d.group,
    );
    tokio::spawn(async move {
        if let Err(e) = node.groups().start(group, &members, Some(&leader)).await {
            tracing::error!(group, error = %e, "cannot start a delayed exchange's group");
        }
    });
}

/// Applies the delete of an exchange's record on this node: its messages are no longer
/// held by a group (the group itself goes with the orphans, [`super::drop_orphans`]).
pub(super) fn apply_delete(b: &Broker, path: &[String]) {
    if let ([_, vhost, kind, name], Some(delayer)) = (path, b.delayer()) {
        if kind == EXCHANGES {
            delayer.forget(vhost, name);
        }
    }
}

/// Whether the tree has a delayed exchange whose messages `group` holds.
pub(super) fn named(node: &MetaNode, group: u64) -> bool {
    node.read(|t| {
        t.children(&[VHOSTS.to_string()]).any(|(path, value)| {
            matches!(path.as_slice(), [_, _, kind, _] if kind == EXCHANGES)
                && DelayGroup::of(value).is_some_and(|d| d.group == group)
        })
    })
}

/// What this node does when it comes to lead a delayed exchange's group: once it has applied
/// everything committed, it feeds the delayer what the group holds, and keeps feeding it what
/// is added for as long as it leads in this term. True when done (or when the group holds no
/// exchange's messages); false to be asked again.
pub(super) async fn take_over(b: Arc<Broker>, group: u64) -> bool {
    let Some(node) = b.cluster.get() else {
        return true;
    };
    let Some((vhost, name)) = b.delayer().and_then(|d| d.exchange_of(group)) else {
        return true;
    };
    let Some(term) = node.groups().leading_term(group) else {
        return true;
    };
    if let Err(e) = node.groups().linearize(group).await {
        tracing::warn!(group, error = %e, "a delayed exchange's new leader could not catch up");
        return false;
    }
    let held = match node.groups().values(group).await {
        Ok(held) => held,
        Err(e) => {
            tracing::error!(group, error = %e, "cannot read a delayed exchange's group");
            return false;
        }
    };
    tracing::info!(group, term, exchange = %name, vhost = %vhost, messages = held.len(), "this node holds the delayed exchange's messages now");
    let next = feed(&b, &vhost, &name, group, term, held, 0);
    tokio::spawn(follow(Arc::downgrade(&b), vhost, name, group, term, next));
    true
}

/// Feeds the delayer `held` (of `group`, led here in `term`); the key after the last one.
fn feed(
    b: &Broker,
    vhost: &str,
    exchange: &str,
    group: u64,
    term: u64,
    held: Vec<(u64, Vec<u8>)>,
    mut next: u64,
) -> u64 {
    let Some(delayer) = b.delayer() else {
        return next;
    };
    for (key, bytes) in held {
        next = next.max(key.saturating_add(1));
        let waiting = codec::decode::<Waiting>(&bytes)
            .ok()
            .and_then(|w| Some((w.due, w.message.message()?)));
        match waiting {
            Some((due, msg)) => {
                let held = Held::Group { group, key, term };
                delayer.feed(vhost, exchange, due, Arc::new(msg), held);
            }
            None => tracing::error!(group, key, "undecodable delayed message; skipped"),
        }
    }
    next
}

/// Feeds the delayer what is added to `group` from key `next` on, for as long as this node
/// leads it in `term` and the broker lives.
async fn follow(
    b: Weak<Broker>,
    vhost: String,
    exchange: String,
    group: u64,
    term: u64,
    mut next: u64,
) {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(b) = b.upgrade() else {
            return;
        };
        let Some(node) = b.cluster.get() else {
            return;
        };
        if node.groups().leading_term(group) != Some(term) {
            return;
        }
        match node.groups().values_from(group, next) {
            Ok(added) => next = feed(&b, &vhost, &exchange, group, term, added, next),
            Err(e) => {
                tracing::warn!(group, error = %e, "cannot read a delayed exchange's group");
                return;
            }
        }
    }
}

/// The cluster's side of the delayer: the groups of replicated delayed exchanges.
pub(super) struct GroupReplica {
    /// The broker whose node holds the groups.
    pub broker: Weak<Broker>,
}

impl GroupReplica {
    fn node(&self) -> Option<Arc<MetaNode>> {
        self.broker.upgrade()?.cluster.get()
    }
}

impl Replica for GroupReplica {
    fn hold(
        &self,
        group: u64,
        members: &[String],
        due: u64,
        msg: Arc<Message>,
        token: Option<ConfirmToken>,
    ) {
        let Some(node) = self.node() else {
            if let Some(t) = token {
                t.complete(false);
            }
            return;
        };
        let value = codec::encode(&Waiting {
            due,
            message: WireMessage::of(&msg),
        });
        // Asked only by a node that is not a member.
        let via = if node.groups().is_member(group) {
            Vec::new()
        } else {
            members_named(&node, members)
        };
        tokio::spawn(async move {
            let written = match value {
                Ok(value) => {
                    let cmd = GroupCommand::Add(value);
                    node.groups().write_via(group, cmd, &via).await.is_ok()
                }
                Err(_) => false,
            };
            if !written {
                tracing::warn!(group, "a delayed message was not held by its group");
            }
            if let Some(t) = token {
                t.complete(written);
            }
        });
    }

    fn leads(&self, group: u64, term: u64) -> bool {
        self.node()
            .is_some_and(|n| n.groups().leading_term(group) == Some(term))
    }

    fn released(&self, group: u64, keys: Vec<u64>) {
        let Some(node) = self.node() else {
            return;
        };
        tokio::spawn(async move {
            let count = keys.len();
            if let Err(e) = node.groups().write(group, GroupCommand::Remove(keys)).await {
                // Routed again by whoever leads the group next (at least once).
                tracing::warn!(group, count, error = %e, "routed delayed messages were not removed");
            }
        });
    }
}
