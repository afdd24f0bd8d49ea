//! The node's membership handle as the core sees it: empty on a node without a cluster
//! secret, set at start otherwise, and replaced when `join_cluster` resets the node (its Raft
//! instance is stopped, its state wiped and a fresh one started). Readers take a clone of the
//! handle and never hold the lock across an await.

use super::MetaNode;
use std::sync::{Arc, RwLock};

/// The node's current [`MetaNode`], if any.
#[derive(Debug, Default)]
pub struct Current(RwLock<Option<Arc<MetaNode>>>);

impl Current {
    /// The node's membership now (a clone of the handle).
    pub fn get(&self) -> Option<Arc<MetaNode>> {
        match self.0.read() {
            Ok(n) => n.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Makes `node` the node's membership; the one it replaces is returned.
    pub fn set(&self, node: Arc<MetaNode>) -> Option<Arc<MetaNode>> {
        let mut slot = match self.0.write() {
            Ok(n) => n,
            Err(poisoned) => poisoned.into_inner(),
        };
        slot.replace(node)
    }

    /// Whether `node` is the node's membership now (a task started for an earlier one stops
    /// when it is not).
    pub fn is(&self, node: &Arc<MetaNode>) -> bool {
        self.get().is_some_and(|n| Arc::ptr_eq(&n, node))
    }
}
