//! The core's metadata in the cluster's tree (#17): which records are replicated, under which
//! paths and in which encoding, and how this node's registries follow what the metadata group
//! applies. `cluster/` replicates paths and bytes; this module is where they mean users,
//! vhosts and policies.
//!
//! Replicated so far: users, their limits, permissions and topic permissions ([`access`]);
//! vhosts, their limits, policies and operator policies, and global parameters ([`vhosts`]);
//! exchanges and bindings ([`exchanges`]); queue definitions with their home node
//! ([`queues`]), reached from every node through [`forward`]. Exclusive queues stay out of the
//! group; their nodes tell the others directly ([`exclusive`]).
//! A change is proposed through the group and applied on every node by [`Replica`], which
//! updates the registries and the node's own tables, so recovery after a restart starts from
//! them and the group's log replays what the node missed. The tree is seeded once, by the
//! first node to reach a majority, with that node's records; every other node then adopts the
//! tree's and drops its own (joining a cluster wipes the joining node's definitions, as
//! RabbitMQ's reset does).

mod access;
#[cfg(test)]
mod adopt_tests;
mod auto_delete;
pub mod cli;
mod delay_record;
mod delayed;
mod exchanges;
mod exclusive;
mod forward;
mod membership;
mod outbound;
mod placement;
mod publish;
mod queue_record;
mod queues;
mod quorum;
mod quorum_members;
mod settle;
mod turns;
mod vhosts;
mod wire;

pub use auto_delete::auto_delete_decider;
pub use exclusive::mend_handles;
pub use membership::{JoinError, Joined};
pub use quorum::QuorumStatus;
pub use quorum_members::{GrowStrategy, MemberChange, MemberStatusRow, RaftSeries};

use crate::broker::Broker;
use crate::cluster::state_machine::Observer;
use crate::cluster::tree::Tree;
use crate::cluster::types::{Command, Path};
use crate::cluster::MetaNode;
use crate::error::CoreError;
use crate::store::TreeChange;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The subtree of vhosts (and everything scoped to one).
const VHOSTS: &str = "vhosts";
/// Set once, with the seeding node's name, when the tree got its first definitions.
const SEEDED: &str = "seeded";

/// How long a lookup that missed waits for the cluster to confirm the miss (a node cut off
/// from the majority answers with the miss after this).
const CATCH_UP_WAIT: Duration = Duration::from_secs(2);

/// A record as the tree holds it.
type Record = (Path, Vec<u8>);

fn vhost_path(name: &str) -> Path {
    vec![VHOSTS.into(), name.into()]
}

/// Every replicated record this node holds.
fn local_records(b: &Broker) -> Vec<Record> {
    let mut out = access::records(b);
    out.extend(vhosts::records(b));
    out.extend(exchanges::records(b));
    out.extend(queues::records(b));
    out
}

fn unavailable(e: crate::cluster::ClusterError) -> CoreError {
    CoreError::Unavailable(e.to_string())
}

/// Follows the metadata group's applied changes into the broker's registries.
pub struct Replica {
    broker: Weak<Broker>,
}

impl Replica {
    /// The observer for `broker`.
    pub fn new(broker: &Arc<Broker>) -> Arc<Replica> {
        Arc::new(Replica {
            broker: Arc::downgrade(broker),
        })
    }
}

impl Observer for Replica {
    fn applied(&self, changes: &[TreeChange]) {
        let Some(b) = self.broker.upgrade() else {
            return;
        };
        for change in changes {
            match change {
                TreeChange::Put(path, value) => apply_put(&b, path, value),
                TreeChange::Delete(path) => apply_delete(&b, path),
                TreeChange::DeleteTree(_) => {
                    if let Some(node) = b.cluster.get() {
                        adopt_current(&b, &node);
                    }
                }
            }
        }
    }

    fn replaced(&self) {
        if let Some(b) = self.broker.upgrade() {
            if let Some(node) = b.cluster.get() {
                adopt_current(&b, &node);
            }
        }
    }
}

/// Whether a path under a vhost is an exchange's or a binding's.
fn in_exchanges(path: &[String]) -> bool {
    path.first().is_some_and(|r| r == VHOSTS)
        && path
            .get(2)
            .is_some_and(|k| k == exchanges::EXCHANGES || k == exchanges::BINDINGS)
}

/// Whether a path under a vhost is a queue's.
fn in_queues(path: &[String]) -> bool {
    path.first().is_some_and(|r| r == VHOSTS)
        && path.get(2).is_some_and(|k| k == queue_record::QUEUES)
}

fn apply_put(b: &Broker, path: &[String], value: &[u8]) {
    let decoded = match path.first().map(String::as_str) {
        _ if in_exchanges(path) => {
            let decoded = exchanges::apply_put(b, path, value);
            delayed::apply_put(b, path, value);
            decoded
        }
        _ if in_queues(path) => queues::apply_put(b, path, value),
        Some(access::USERS | access::USER_LIMITS | access::PERMISSIONS)
        | Some(access::TOPIC_PERMISSIONS) => access::apply_put(b, path, value),
        Some(VHOSTS | vhosts::GLOBAL_PARAMETERS) => vhosts::apply_put(b, path, value),
        _ => true,
    };
    if !decoded {
        tracing::warn!(path = ?path, "undecodable replicated record");
    }
}

fn apply_delete(b: &Broker, path: &[String]) {
    if in_exchanges(path) {
        exchanges::apply_delete(b, path);
        delayed::apply_delete(b, path);
        drop_orphans(b);
        return;
    }
    if in_queues(path) {
        return queues::apply_delete(b, path);
    }
    access::apply_delete(b, path);
    vhosts::apply_delete(b, path);
}

/// Makes this node's replicated records those of the tree, once the tree has been seeded:
/// what the tree holds is put where it differs, what it lacks is removed.
fn adopt(b: &Broker, tree: &Tree) {
    if tree.get(&[SEEDED.to_string()]).is_none() {
        return;
    }
    let wanted: BTreeMap<&Path, &Vec<u8>> = tree
        .entries()
        .filter(|(p, _)| p.first().is_some_and(|r| r != SEEDED))
        .collect();
    let held: BTreeMap<Path, Vec<u8>> = local_records(b).into_iter().collect();
    for path in held.keys() {
        if !wanted.contains_key(path) {
            apply_delete(b, path);
        }
    }
    // Users and vhosts before what hangs off them (a user's limits sort before "users"),
    // bindings after the exchanges they join.
    let mut puts: Vec<(&Path, &Vec<u8>)> = wanted
        .into_iter()
        .filter(|(path, value)| held.get(*path) != Some(*value))
        .collect();
    puts.sort_by_key(|(path, _)| match path.first().map(String::as_str) {
        Some(access::USERS) => 0,
        Some(VHOSTS) if path.len() == 2 => 1,
        Some(VHOSTS) if path.get(2).is_some_and(|k| k == exchanges::BINDINGS) => 3,
        _ => 2,
    });
    for (path, value) in puts {
        apply_put(b, path, value);
    }
}

/// Makes this node's registries what the tree it has applied says, at start: a restarted
/// node knows the cluster's queues (its handles on other nodes' queues included), exchanges
/// and users from its own committed state at once, before it reaches the others; the log
/// brings it forward from there. A node whose tree was never seeded keeps its own.
pub fn adopt_applied(b: &Arc<Broker>) {
    if let Some(node) = b.cluster.get() {
        adopt_current(b, &node);
    }
}

/// [`adopt`]s what `node` has applied, from a copy of its tree taken under the read lock and
/// released before any registry changes: adopting a queue reads the tree again (to rebind
/// it), and a read taken while holding one waits behind a write the state machine queued in
/// between, which waits for the first read (std's lock lets no reader past a waiting writer).
fn adopt_current(b: &Broker, node: &MetaNode) {
    let tree = node.read(Tree::clone);
    adopt(b, &tree);
}

/// Seeds the tree with this node's replicated records unless another node did first, then
/// adopts the tree's (one attempt; it fails while no majority answers).
async fn seed_or_adopt(
    b: &Broker,
    node: &Arc<MetaNode>,
) -> Result<(), crate::cluster::ClusterError> {
    let then = local_records(b)
        .into_iter()
        .map(|(path, value)| Command::Put { path, value })
        .collect();
    let seed = Command::IfAbsent {
        path: vec![SEEDED.into()],
        value: node.name().as_bytes().to_vec(),
        then,
    };
    let reply = node.write(seed).await?;
    adopt_current(b, node);
    if reply.before.first().is_some_and(Option::is_none) {
        tracing::info!("this node seeded the cluster's metadata with its own");
    } else {
        tracing::info!(
            "this node adopted the cluster's metadata; its own was replaced, as a reset does"
        );
    }
    Ok(())
}

/// Makes `node` serve this broker's core: other nodes' requests (their operations on queues
/// that live here, their notices about their exclusive queues), and the quorum queues whose
/// group this node comes to lead.
pub fn serve_node(b: &Arc<Broker>, node: &MetaNode) {
    node.set_app_handler(forward::handler(b, exclusive::receive_notice));
    node.groups().on_leading(leading_hook(b));
    if let Some(delayer) = b.delayer() {
        delayer.set_replica(Arc::new(delayed::GroupReplica {
            broker: Arc::downgrade(b),
        }));
    }
}

/// The hook the groups call when this node comes to lead one: a delayed exchange's group
/// ([`delayed::take_over`]) or a quorum queue's ([`quorum::take_over`]).
fn leading_hook(b: &Arc<Broker>) -> crate::cluster::groups::LeadingHook {
    let weak = Arc::downgrade(b);
    Arc::new(move |group| {
        let weak = weak.clone();
        Box::pin(async move {
            let Some(b) = weak.upgrade() else {
                return true;
            };
            if b.delayer().is_some_and(|d| d.exchange_of(group).is_some()) {
                return delayed::take_over(b, group).await;
            }
            let done = quorum::take_over(b.clone(), group).await;
            // A delayed exchange whose record this node has not applied yet (at boot, the
            // groups may elect first): asked again.
            done && !b.cluster.get().is_some_and(|n| delayed::named(&n, group))
        })
    })
}

/// Stops and wipes, in the background, this node's groups whose quorum queue or delayed
/// exchange is no longer in the tree (deleted).
fn drop_orphans(b: &Broker) {
    let Some(node) = b.cluster.get().filter(|n| !n.groups().ids().is_empty()) else {
        return;
    };
    let delays = b.delayer().map(|d| d.groups()).unwrap_or_default();
    tokio::spawn(async move {
        for group in node.groups().ids() {
            if !delays.contains(&group) && quorum::queue_of_group(&node, group).is_none() {
                node.groups().delete(group).await;
            }
        }
    });
}

/// [`seed_or_adopt`] in the background from the start, retrying each second until a majority
/// answers (a node joining through seeds is not a member before that), for as long as `node`
/// is the broker's membership.
pub async fn join_metadata(broker: Weak<Broker>, node: Arc<MetaNode>) {
    loop {
        let Some(b) = broker.upgrade() else {
            return;
        };
        if !b.cluster.is(&node) {
            return;
        }
        match seed_or_adopt(&b, &node).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(error = %e, "cluster metadata not reachable yet; retrying"),
        }
        drop(b);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl Broker {
    /// Waits until this node has applied what the cluster had committed when it was called,
    /// so that a lookup which missed can be trusted: a vhost or user made on another node a
    /// moment ago is here afterwards. False when the node is not in a cluster or the cluster
    /// does not answer in time (then the miss stands, as it would on one node).
    pub async fn catch_up(&self) -> bool {
        let Some(node) = self.cluster.get() else {
            return false;
        };
        tokio::time::timeout(CATCH_UP_WAIT, node.read_linearizable(|_| ()))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Whether this node is in a cluster with other nodes (a miss may then be stale).
    pub fn is_clustered(&self) -> bool {
        self.cluster.get().is_some_and(|n| n.has_peers())
    }

    /// A user by name, with a miss confirmed against the cluster ([`Broker::catch_up`]).
    pub async fn find_user(&self, name: &str) -> Option<crate::auth::User> {
        if let Some(u) = self.user(name) {
            return Some(u);
        }
        if self.catch_up().await {
            return self.user(name);
        }
        None
    }

    /// A virtual host by name, with a miss confirmed against the cluster ([`Broker::catch_up`]).
    pub async fn find_vhost(&self, name: &str) -> Option<Arc<crate::vhost::VHost>> {
        if let Some(v) = self.vhost(name) {
            return Some(v);
        }
        if self.catch_up().await {
            return self.vhost(name);
        }
        None
    }
}
