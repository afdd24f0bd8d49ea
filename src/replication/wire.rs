//! The requests between the core halves of two nodes, as they travel in the cluster's
//! opaque `App` requests (`MetaNode::call_app`): queue operations and what comes back from a
//! queue's home node ([`super::forward`]), views, exclusive-queue notices, connection closes
//! and `warren ctl -n` requests ([`super::cli`]).

use super::unavailable;
use crate::cluster::{codec, MetaNode};
use crate::error::CoreError;
use crate::queue::remote::{RemoteDelivery, RemoteOp, RemoteReply};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a forwarded operation may take (a home node's delete waits for the group).
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a node checking that another is up waits for its answer.
pub(super) const PING_TIMEOUT: Duration = Duration::from_millis(500);

/// A node, as one run of it: its consumers and what they hold belong to that run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct Origin {
    pub(super) node: String,
    pub(super) incarnation: u64,
}

/// A request between the core halves of two nodes.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum App {
    /// An operation on a queue that lives on the receiver, for a client of `origin`.
    Queue {
        vhost: String,
        queue: String,
        origin: Origin,
        op: RemoteOp,
    },
    /// Deliveries from a queue's home node to consumer `consumer` of the receiver's run
    /// `incarnation` (refused by a later run).
    Deliveries {
        vhost: String,
        queue: String,
        consumer: u64,
        incarnation: u64,
        items: Vec<RemoteDelivery>,
    },
    /// The home node cancelled consumer `consumer` of the receiver's run `incarnation`.
    Cancelled {
        vhost: String,
        queue: String,
        consumer: u64,
        incarnation: u64,
    },
    /// The receiver's view `kind` ([`crate::broker::ViewHook`]), answered with its bytes.
    View(String),
    /// Is the receiver still in its run `incarnation`? (`Done`, or a refusal after a restart.)
    Alive(u64),
    /// About the exclusive queues of node `from` (the encoded notice), answered by the
    /// receiver's [`NoticeHandler`].
    Exclusive { from: String, notice: Vec<u8> },
    /// Close the receiver's client connection `name` with `reason` (320 CONNECTION_FORCED),
    /// as the management API of another node asked.
    CloseConnection { name: String, reason: String },
    /// A delivery to consumer `consumer` of the receiver's run `incarnation` stayed unacked
    /// past the consumer timeout (`timeout` ms): the receiver closes its channel.
    TimedOut {
        vhost: String,
        queue: String,
        consumer: u64,
        incarnation: u64,
        timeout: u64,
    },
    /// A management API request from `warren ctl -n` naming the receiver (method, path with
    /// query, JSON body), answered by [`super::cli::answer`].
    Cli {
        method: String,
        path: String,
        body: Vec<u8>,
    },
    /// Answer once the receiver has applied the metadata log up to this index (at most
    /// [`super::settle::SETTLE_WAIT`]): a binding made on the sender is in force here.
    Applied(u64),
}

/// The request carrying a management API request from `warren ctl -n`.
pub(super) fn cli_request(method: &str, path: &str, body: Vec<u8>) -> Result<Vec<u8>, CoreError> {
    let app = App::Cli {
        method: method.to_owned(),
        path: path.to_owned(),
        body,
    };
    codec::encode(&app).map_err(|e| CoreError::Internal(e.to_string()))
}

/// The request carrying the encoded `notice` from node `from`.
pub(super) fn exclusive_request(from: &str, notice: Vec<u8>) -> Result<Vec<u8>, CoreError> {
    let app = App::Exclusive {
        from: from.to_owned(),
        notice,
    };
    codec::encode(&app).map_err(|e| CoreError::Internal(e.to_string()))
}

/// Sends `app` to node `to` and decodes its answer; unavailable when the node does not
/// answer within [`CALL_TIMEOUT`].
pub(super) async fn send(node: &MetaNode, to: &str, app: &App) -> Result<RemoteReply, CoreError> {
    let bytes = codec::encode(app).map_err(|e| CoreError::Internal(e.to_string()))?;
    let answer = node
        .call_app(to, bytes, CALL_TIMEOUT)
        .await
        .map_err(unavailable)?;
    codec::decode(&answer).map_err(|e| CoreError::Internal(e.to_string()))
}

/// Whether `origin`'s node answers in its run `origin.incarnation` (a restarted node
/// answers, but its consumers and what they held are gone).
pub(super) async fn origin_alive(node: &MetaNode, origin: &Origin) -> bool {
    let app = App::Alive(origin.incarnation);
    matches!(
        tokio::time::timeout(PING_TIMEOUT, send(node, &origin.node, &app)).await,
        Ok(Ok(RemoteReply::Done))
    )
}
