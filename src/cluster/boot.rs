//! A node's membership from its settings: its metadata node on the store, then the cluster
//! formed from the seed list (every seed initializes with the same members, which openraft
//! allows), joined through the seeds when the node is not one of them, or a cluster of one
//! when there is no seed list (ready to be joined, as every RabbitMQ node is).

use super::node::{ClusterError, MetaNode, NodeConfig};
use super::state_machine::Observer;
use super::types::Member;
use crate::store::Store;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What the node's settings say about the cluster.
#[derive(Clone, Debug)]
pub struct Boot {
    /// `node_name`.
    pub name: String,
    /// `cluster_listen`.
    pub listen: SocketAddr,
    /// `cluster_advertise`.
    pub advertise: Option<String>,
    /// The cluster secret.
    pub secret: Vec<u8>,
    /// `cluster_nodes`, parsed.
    pub seeds: Vec<Member>,
}

/// Starts the node (with `observer` told of what it applies) and its formation; joining
/// through seeds goes on in the background until one of them takes the node in.
pub async fn start(
    store: Store,
    boot: Boot,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Arc<MetaNode>, ClusterError> {
    let own = boot.seeds.iter().find(|m| m.name == boot.name).cloned();
    let mut config = NodeConfig::new(&boot.name, boot.listen, boot.secret);
    config.advertise = boot.advertise.or(own.as_ref().map(|m| m.addr.clone()));
    let node = Arc::new(MetaNode::start(store, config, observer).await?);
    if own.is_some() || boot.seeds.is_empty() {
        let others: Vec<Member> = boot
            .seeds
            .iter()
            .filter(|m| m.name != boot.name)
            .cloned()
            .collect();
        node.initialize(&others).await?;
    } else {
        tokio::spawn(join_seeds(Arc::downgrade(&node), boot.seeds));
    }
    Ok(node)
}

async fn join_seeds(node: Weak<MetaNode>, seeds: Vec<Member>) {
    for seed in seeds.iter().cycle() {
        let Some(n) = node.upgrade() else { return };
        if n.members()
            .iter()
            .any(|(m, voter)| m.name == n.name() && *voter)
        {
            return;
        }
        match n.join(&seed.addr).await {
            Ok(()) => {
                tracing::info!(seed = %seed, "joined the cluster");
                return;
            }
            Err(e) => {
                tracing::warn!(seed = %seed, error = %e, "joining the cluster failed; retrying")
            }
        }
        drop(n);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
