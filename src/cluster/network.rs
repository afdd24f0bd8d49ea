//! openraft's network: one [`PeerNetwork`] per target node, each call a request on a pooled
//! inter-node connection. A node that cannot be reached is `Unreachable` (openraft backs off);
//! a call that fails midway is a `Network` error (openraft retries).

use super::messages::{Request, Response};
use super::transport::{CallError, Peer};
use super::types::{Member, MetaConfig, NodeId};
use dashmap::DashMap;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use std::sync::Arc;

/// The node's peers by id, each with its connection pool.
pub struct Peers {
    secret: Arc<[u8]>,
    me: NodeId,
    tls: Option<tokio_rustls::TlsConnector>,
    bind: Option<std::net::IpAddr>,
    map: DashMap<NodeId, Arc<Peer>>,
}

impl Peers {
    /// Peers reached as node `me` with `secret`, over TLS with `tls` when given, from the
    /// local address `bind` when given.
    pub fn new(
        secret: Arc<[u8]>,
        me: NodeId,
        tls: Option<tokio_rustls::TlsConnector>,
        bind: Option<std::net::IpAddr>,
    ) -> Peers {
        Peers {
            secret,
            me,
            tls,
            bind,
            map: DashMap::new(),
        }
    }

    /// A one-off peer at `addr`, not yet a member (a seed to join through).
    pub fn unlisted(&self, addr: &str) -> Peer {
        Peer::new(
            addr.to_string(),
            self.secret.clone(),
            self.me,
            self.tls.clone(),
            self.bind,
        )
    }

    /// The peer `id`, if this node has called it.
    pub fn known(&self, id: NodeId) -> Option<Arc<Peer>> {
        self.map.get(&id).map(|p| p.clone())
    }

    /// The peer `id` at `addr` (a new one when its address changed).
    pub fn get(&self, id: NodeId, addr: &str) -> Arc<Peer> {
        if let Some(p) = self.map.get(&id) {
            if p.addr() == addr {
                return p.clone();
            }
        }
        let peer = Arc::new(self.unlisted(addr));
        self.map.insert(id, peer.clone());
        peer
    }
}

/// Hands openraft a client per target.
#[derive(Clone)]
pub struct NetworkFactory(pub Arc<Peers>);

impl RaftNetworkFactory<MetaConfig> for NetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> PeerNetwork {
        PeerNetwork {
            target,
            peer: self.0.get(target, &node.addr),
        }
    }
}

/// openraft's client of one target node.
pub struct PeerNetwork {
    target: NodeId,
    peer: Arc<Peer>,
}

fn transport_error<E: std::error::Error>(e: CallError) -> RPCError<NodeId, Member, E> {
    match e {
        CallError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Failed { .. } => RPCError::Network(NetworkError::new(&e)),
    }
}

fn mismatched<E: std::error::Error>() -> RPCError<NodeId, Member, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "the peer answered with another kind of response",
    )))
}

impl PeerNetwork {
    async fn call<E: std::error::Error>(
        &self,
        req: Request,
        option: &RPCOption,
    ) -> Result<Response, RPCError<NodeId, Member, E>> {
        self.peer
            .call(&req, option.hard_ttl())
            .await
            .map_err(transport_error)
    }

    fn remote<E: std::error::Error>(&self, e: E) -> RPCError<NodeId, Member, E> {
        RPCError::RemoteError(RemoteError::new(self.target, e))
    }
}

impl RaftNetwork<MetaConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetaConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        match self.call(Request::Append(rpc), &option).await? {
            Response::Append(Ok(r)) => Ok(r),
            Response::Append(Err(e)) => Err(self.remote(e)),
            _ => Err(mismatched()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<MetaConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Member, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call(Request::Snapshot(rpc), &option).await? {
            Response::Snapshot(Ok(r)) => Ok(r),
            Response::Snapshot(Err(e)) => Err(self.remote(e)),
            _ => Err(mismatched()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        match self.call(Request::Vote(rpc), &option).await? {
            Response::Vote(Ok(r)) => Ok(r),
            Response::Vote(Err(e)) => Err(self.remote(e)),
            _ => Err(mismatched()),
        }
    }
}
