//! A node's membership from its settings: its metadata node on the store, then the cluster
//! formed from the seed list (every seed initializes with the same members, which openraft
//! allows), joined through the seeds when the node is not one of them, or a cluster of one
//! when there is no seed list (ready to be joined, as every RabbitMQ node is).

use super::node::{ClusterError, MetaNode, NodeConfig};
use super::state_machine::Observer;
use super::types::Member;
use crate::store::Store;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Starts the node `config` describes (with `observer` told of what it applies) and its
/// formation from `seeds` (`cluster_nodes`, parsed); joining through seeds goes on in the
/// background until one of them takes the node in. A node without `advertise` set is reached
/// at its own seed entry's address when it has one.
pub async fn start(
    store: Store,
    mut config: NodeConfig,
    seeds: Vec<Member>,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Arc<MetaNode>, ClusterError> {
    let name = config.name.clone();
    let own = seeds.iter().find(|m| m.name == name).cloned();
    if config.advertise.is_none() {
        config.advertise = own.as_ref().map(|m| m.addr.clone());
    }
    let node = Arc::new(MetaNode::start(store, config, observer).await?);
    if own.is_some() || seeds.is_empty() {
        let others: Vec<Member> = seeds.iter().filter(|m| m.name != name).cloned().collect();
        node.initialize(&others).await?;
    } else {
        tokio::spawn(join_seeds(Arc::downgrade(&node), seeds));
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
