//! Joining a cluster by hand (RabbitMQ's `join_cluster`): the node leaves the cluster it is
//! in, resets (its metadata group's log, Raft state and tree are wiped and a fresh Raft
//! instance starts), joins the named node's cluster, and adopts that cluster's definitions in
//! place of its own, as RabbitMQ's reset does: its users, vhosts, exchanges, bindings and
//! queues (with their messages) give way to the cluster's. Exclusive queues, being its
//! connections', stay.

use super::{adopt_current, join_metadata, seed_or_adopt};
use crate::broker::Broker;
use crate::cluster::seeds;
use std::sync::Arc;
use std::time::Duration;

/// How long the named node may take to answer the first ping.
const PING_WAIT: Duration = Duration::from_secs(5);

/// How a join ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Joined {
    /// The node was reset and is now a member of the named node's cluster.
    Joined,
    /// The node was already a member of that cluster; nothing changed.
    AlreadyMember,
}

/// Why a join was refused or failed (RabbitMQ's reasons where it has one).
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The node runs without a cluster secret, so it cannot be in a cluster.
    #[error("this node has no cluster secret (cluster_secret or cluster_secret_file)")]
    NotClustered,
    /// The node named is not of the form `NAME@HOST[:PORT]`.
    #[error("'{0}' is not a node name (NAME@HOST[:PORT])")]
    BadName(String),
    /// The node still takes clients: `stop_app` first, as RabbitMQ asks.
    #[error("this command requires the 'rabbit' app to be stopped on the target node. Stop it with 'rabbitmqctl stop_app'.")]
    AppRunning,
    /// The node named is this node.
    #[error("cannot cluster node with itself: {0}")]
    WithItself(String),
    /// Nothing with the cluster secret answers at the node's address, or another node does.
    #[error("The nodes provided are either offline or not running: {0}")]
    Unreachable(String),
    /// The node could not leave its current cluster, reset or join.
    #[error("{0}")]
    Failed(String),
}

impl Broker {
    /// Joins the cluster of the node `target` (`NAME@HOST[:PORT]`, port 25672 by default),
    /// resetting this node first unless it is already a member of that cluster. As in
    /// RabbitMQ, the node must have been stopped with [`Broker::stop_app`] first.
    pub async fn join_cluster(self: &Arc<Self>, target: &str) -> Result<Joined, JoinError> {
        let node = self.cluster.get().ok_or(JoinError::NotClustered)?;
        if self.app_running() {
            return Err(JoinError::AppRunning);
        }
        let member = seeds::parse(target).map_err(|_| JoinError::BadName(target.to_owned()))?;
        if member.name == node.name() {
            return Err(JoinError::WithItself(member.name));
        }
        match node.name_at(&member.addr, PING_WAIT).await {
            Some(name) if name == member.name => {}
            _ => return Err(JoinError::Unreachable(member.to_string())),
        }
        let members = node.members();
        if members.iter().any(|(m, _)| m.name == member.name) {
            return Ok(Joined::AlreadyMember);
        }
        if members.iter().any(|(m, _)| m.name != node.name()) {
            node.forget(node.name())
                .await
                .map_err(|e| JoinError::Failed(format!("cannot leave the current cluster: {e}")))?;
        }
        let fresh = node
            .restart_empty()
            .await
            .map_err(|e| JoinError::Failed(e.to_string()))?;
        self.cluster.set(fresh.clone());
        super::serve_node(self, &fresh);
        tracing::warn!(node = %member, "reset: this node's metadata was wiped; joining the cluster");
        if let Err(e) = fresh.join(&member.addr).await {
            // Still a node of its own: a cluster of one again, seeded with what it kept.
            let _ = fresh.initialize(&[]).await;
            tokio::spawn(join_metadata(Arc::downgrade(self), fresh));
            return Err(JoinError::Failed(format!(
                "joining {member} failed: {e}; this node is a cluster of one"
            )));
        }
        if seed_or_adopt(self, &fresh).await.is_err() {
            adopt_current(self, &fresh);
            tokio::spawn(join_metadata(Arc::downgrade(self), fresh));
        }
        Ok(Joined::Joined)
    }
}
