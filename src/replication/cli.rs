//! `warren ctl -n NODE` for a node other than the local one: the management API request
//! travels over the inter-node transport to the named member, proven by the cluster secret
//! as rabbitmqctl's calls are by the Erlang cookie, and that node's HTTP front end runs it as
//! its own CLI socket would ([`crate::broker::CliHook`]). The node's address is its entry in
//! this configuration's `cluster_nodes`, or its name's `NAME@HOST[:PORT]`.

use crate::broker::Broker;
use crate::cluster::{codec, seeds, visitor, ClusterError};
use crate::config::Config;
use std::sync::Arc;
use std::time::Duration;

/// Why a request could not be put to the named node.
#[derive(Debug, thiserror::Error)]
pub enum MemberCallError {
    /// This configuration has no cluster secret to prove.
    #[error("this configuration has no cluster secret (cluster_secret or cluster_secret_file)")]
    NoSecret,
    /// The secret file or the inter-node TLS settings could not be read.
    #[error("{0}")]
    Config(String),
    /// The node is not in the seed list and its name has no host.
    #[error("'{0}' is not a node name (NAME@HOST[:PORT])")]
    BadName(String),
    /// Nothing answered as that node with this secret.
    #[error("node '{node}' does not answer at {addr} with this cluster secret ({cause})")]
    Unreachable {
        /// The node named.
        node: String,
        /// Where it was looked for.
        addr: String,
        /// What went wrong.
        cause: ClusterError,
    },
    /// The answer could not be read.
    #[error("malformed answer from '{0}'")]
    Malformed(String),
}

/// Runs `method path` (with the JSON `body`) on the node named `node` as its local CLI
/// socket would, and returns the status and body of its answer.
pub async fn call_member(
    config: &Config,
    node: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), MemberCallError> {
    let secret = config
        .cluster_secret()
        .map_err(|e| MemberCallError::Config(e.to_string()))?
        .ok_or(MemberCallError::NoSecret)?;
    let listed = config
        .cluster_nodes
        .iter()
        .filter_map(|s| seeds::parse(s).ok())
        .find(|m| m.name == node);
    let member = match listed {
        Some(m) => m,
        None => seeds::parse(node).map_err(|_| MemberCallError::BadName(node.to_owned()))?,
    };
    let tls = crate::tls::peer_tls(config)
        .map_err(|e| MemberCallError::Config(e.to_string()))?
        .map(|t| t.connector);
    let request = super::wire::cli_request(method, path, body)
        .map_err(|e| MemberCallError::Config(e.to_string()))?;
    let answer = visitor::call_app(node, &member.addr, &secret, tls, request, timeout)
        .await
        .map_err(|cause| MemberCallError::Unreachable {
            node: node.to_owned(),
            addr: member.addr.clone(),
            cause,
        })?;
    codec::decode(&answer).map_err(|_| MemberCallError::Malformed(node.to_owned()))
}

/// Answers a request from `warren ctl -n` naming this node: its status and body, encoded.
pub(super) async fn answer(
    b: Option<Arc<Broker>>,
    method: String,
    path: String,
    body: Vec<u8>,
) -> Vec<u8> {
    let hook = b.as_ref().and_then(|b| b.cli.get().cloned());
    let answer = match hook {
        Some(hook) => hook(method, path, body).await,
        None => (503, b"{\"error\":\"not ready\"}".to_vec()),
    };
    codec::encode(&answer).unwrap_or_default()
}
