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
        Node = Member,
        Entry = openraft::Entry<MetaConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A member of the cluster as its membership records it: the node's name (RabbitMQ's
/// `rabbit@host` form) and the address its inter-node listener is reached at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The node's name (`node_name`).
    pub name: String,
    /// Where peers reach it (`host:port`).
    pub addr: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.name, self.addr)
    }
}

/// The id a node name has in the group: the first 8 bytes of its SHA-256, so every node
/// derives the same ids from the same names (a seed list) without coordinating.
pub fn node_id(name: &str) -> NodeId {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    NodeId::from_be_bytes(id)
}

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
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
    },
    /// Sets the value at a path unless one is there (declare races: the first one wins and
    /// the others see its value).
    Create {
        /// Where.
        path: Path,
        /// The value, when none is there.
        #[serde(with = "serde_bytes")]
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
    /// When nothing is at `path`: puts `value` there, then applies `then`; otherwise does
    /// nothing (seeding the tree once, whichever node gets there first).
    IfAbsent {
        /// The marker's path.
        path: Path,
        /// The marker's value.
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// What else to apply with it.
        then: Vec<Command>,
    },
    /// When a value is at `path`, applies `then`; otherwise does nothing (a policy put only
    /// while its vhost exists, so a delete racing with it leaves no orphan).
    IfPresent {
        /// The path that must hold a value.
        path: Path,
        /// What to apply when it does.
        then: Vec<Command>,
    },
    /// Removes every path below `prefix` whose part at index `at` is `name` (a vhost's
    /// permissions, which live under their users).
    DeleteWhere {
        /// Where to look.
        prefix: Path,
        /// The index of the part that is compared.
        at: usize,
        /// The part's value that dooms a path.
        name: String,
    },
    /// When no path below `prefix` has `name` as its part at index `at`, applies `then`
    /// (an auto-delete exchange goes once no binding has it as its source).
    IfNoneBelow {
        /// Where to look.
        prefix: Path,
        /// The index of the part that is compared.
        at: usize,
        /// The part's value that must not occur.
        name: String,
        /// What to apply when it does not.
        then: Vec<Command>,
    },
    /// When some path below `prefix` has `name` as its part at index `at`, applies `then`
    /// (an auto-delete exchange bound to one being deleted).
    IfAnyBelow {
        /// Where to look.
        prefix: Path,
        /// The index of the part that is compared.
        at: usize,
        /// The part's value that must occur.
        name: String,
        /// What to apply when it does.
        then: Vec<Command>,
    },
    /// The commands of several writers carried in one entry ([`super::batch`]), applied in
    /// order, each with its own reply ([`Reply::each`]).
    Each(Vec<Command>),
    /// When the value at `path` is exactly `value`, applies `then` (a record rewritten from
    /// what its writer read: a concurrent change makes it a no-op, and the writer reads again).
    IfEquals {
        /// The path.
        path: Path,
        /// The value it must hold.
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// What to apply when it does.
        then: Vec<Command>,
    },
}

/// What applying a command found: per leaf command, in order, the value at its path before it
/// applied (for a `Create`, Some means it was not created).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The values before, one per leaf command.
    pub before: Vec<Option<Vec<u8>>>,
    /// For [`Command::Each`], each command's own reply, in order.
    pub each: Vec<Reply>,
}
