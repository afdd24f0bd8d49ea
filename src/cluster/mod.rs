//! Clustering (#17): several Warren nodes as one broker. One Raft group (openraft) holds the
//! metadata as a tree of paths and values, with a replica on every node, as RabbitMQ's Khepri
//! does; reads are served from the local replica, writes go through the leader.
//!
//! This room is the only one that sees openraft or the inter-node transport. It knows nothing
//! of exchanges or queues: commands are tree changes ([`types::Command`]), and the core learns
//! what was applied through [`state_machine::Observer`]. Its log and state live in the store
//! (`store::raft_log`, `store::meta_tree`); the group's id there is [`METADATA_GROUP`].
//!
//! Quorum queues (#18) each get a Raft group of their own over a few nodes ([`groups`]): a
//! replicated map of opaque values, with logs in the same store table as the metadata group's
//! (one writer, shared commits), no heartbeats while idle, and elections called by the
//! members when a leader's node stops answering.

// openraft's storage and network traits fix their error types (StorageError is ~224 bytes);
// the helpers that feed them return the same types rather than boxing and unboxing.
#![allow(clippy::result_large_err)]

pub mod batch;
pub mod boot;
pub mod codec;
pub mod current;
pub mod error;
pub mod group_machine;
pub mod group_types;
pub mod groups;
pub mod handshake;
pub mod log_store;
pub mod messages;
pub mod network;
pub mod node;
pub mod raft_view;
pub mod seeds;
pub mod state_machine;
pub mod transport;
pub mod tree;
pub mod types;
mod unflushed;
pub mod visitor;

pub use current::Current;
pub use node::{ClusterError, MetaNode, NodeConfig};

/// The store's Raft group id of the metadata group (quorum queues take ids above it).
pub const METADATA_GROUP: u64 = 0;

#[cfg(test)]
mod storage_suite;
