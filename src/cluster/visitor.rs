//! A caller that is not a member: `warren ctl -n NODE` proving the cluster secret to a node
//! (as rabbitmqctl proves the Erlang cookie) and asking it one thing. It checks that the node
//! answering at the address is the one named before it sends the request.

use super::error::ClusterError;
use super::messages::{Request, Response};
use super::transport::Peer;
use super::types::node_id;
use std::sync::Arc;
use std::time::Duration;

/// Sends the core request `request` to the node `name` at `addr`, with `secret` (over
/// `tls` when given), and returns its answer within `timeout`.
pub async fn call_app(
    name: &str,
    addr: &str,
    secret: &[u8],
    tls: Option<tokio_rustls::TlsConnector>,
    request: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, ClusterError> {
    let unreachable = || ClusterError::Unreachable(name.to_owned());
    // Not a member id: the node takes the caller for a stranger holding the secret.
    let me = node_id(&format!("warren-ctl:{name}"));
    let peer = Peer::new(addr.to_owned(), Arc::from(secret), me, tls, None);
    match peer.call(&Request::Ping, timeout).await {
        Ok(Response::Pong(answered)) if answered == name => {}
        Ok(Response::Pong(other)) => {
            return Err(ClusterError::Refused(format!(
                "the node at {addr} is '{other}', not '{name}'"
            )))
        }
        _ => return Err(unreachable()),
    }
    match peer.call(&Request::App(request), timeout).await {
        Ok(Response::App(Ok(answer))) => Ok(answer.into_vec()),
        Ok(Response::App(Err(e))) => Err(ClusterError::Refused(e)),
        _ => Err(unreachable()),
    }
}
