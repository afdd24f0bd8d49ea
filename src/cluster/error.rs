//! Why a cluster operation failed: the error every operation of this room returns.

use std::net::SocketAddr;
use std::time::Duration;

/// Why a cluster operation failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ClusterError {
    /// The inter-node listener could not be opened.
    #[error("cannot listen for cluster peers on {addr}: {cause}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        cause: String,
    },
    /// The named node is not a member, or did not answer.
    #[error("node '{0}' is down or inaccessible")]
    Unreachable(String),
    /// Raft could not start on the store, or its configuration is invalid.
    #[error("the metadata group cannot start: {0}")]
    Start(String),
    /// No majority answered in time (the node is cut off, or too many nodes are down).
    #[error("timed out after {0:?} waiting for a majority of cluster nodes")]
    Timeout(Duration),
    /// The group refused the operation.
    #[error("{0}")]
    Refused(String),
}
