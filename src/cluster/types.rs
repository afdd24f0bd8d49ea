//! The metadata group's type configuration for openraft, and its commands and replies.
//!
//! Commands speak of paths and opaque values, not of exchanges or queues: `cluster/` replicates
//! a tree (as Khepri does for RabbitMQ) and the core decides what lives where in it, so this
//! room never names the core's types.

use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// A node's id in the metadata group.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// openraft's types for the metadata group.
    pub MetaConfig:
        D = Command,
        R = Reply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<MetaConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The metadata group's Raft handle.
pub type MetaRaft = openraft::Raft<MetaConfig>;

/// A path in the metadata tree (`["vhosts", "/", "queues", "q1"]`).
pub type Path = Vec<String>;

/// One change to the metadata tree, as proposed to the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Sets the value at a path.
    Put {
        /// Where.
        path: Path,
        /// The new value.
        value: Vec<u8>,
    },
    /// Sets the value at a path unless one is there (declare races: the first one wins and
    /// the others see its value).
    Create {
        /// Where.
        path: Path,
        /// The value, when none is there.
        value: Vec<u8>,
    },
    /// Removes the value at a path.
    Delete {
        /// Where.
        path: Path,
    },
    /// Removes the value at a path and every path below it.
    DeleteTree {
        /// The subtree's root.
        path: Path,
    },
    /// Several commands applied as one entry, in order (a queue and its bindings).
    Batch(Vec<Command>),
}

/// What applying a command found: per leaf command, in order, the value at its path before it
/// applied (for a `Create`, Some means it was not created).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The values before, one per leaf command.
    pub before: Vec<Option<Vec<u8>>>,
}
