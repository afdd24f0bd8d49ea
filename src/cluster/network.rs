//! openraft's network: one [`PeerNetwork`] per target node and group, each call a request on
//! the node's pooled inter-node connection (every group shares it). A node that cannot be
//! reached, or runs no such group, is `Unreachable` (openraft backs off); a call that fails
//! midway is a `Network` error (openraft retries).

use super::group_types::GroupConfig;
use super::log_store::Logged;
use super::messages::{GroupResponse, GroupRpc, Request, Response};
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
use openraft::RaftTypeConfig;
use std::marker::PhantomData;
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

/// A type configuration whose RPCs travel as [`Request`]s: how each is wrapped (for a group's
/// id) and unwrapped (None: the answer is of another kind, or the receiver runs no such group).
pub trait Wire: Logged + RaftTypeConfig<Node = Member> {
    /// AppendEntries to `group`.
    fn append(group: u64, rpc: AppendEntriesRequest<Self>) -> Request;
    /// RequestVote to `group`.
    fn vote(group: u64, rpc: VoteRequest<NodeId>) -> Request;
    /// A snapshot chunk to `group`.
    fn snapshot(group: u64, rpc: InstallSnapshotRequest<Self>) -> Request;
    /// AppendEntries' answer.
    fn appended(r: Response) -> Option<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>;
    /// RequestVote's answer.
    fn voted(r: Response) -> Option<Result<VoteResponse<NodeId>, RaftError<NodeId>>>;
    /// A snapshot chunk's answer.
    #[allow(clippy::type_complexity)]
    fn installed(
        r: Response,
    ) -> Option<Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>>;
}

impl Wire for MetaConfig {
    fn append(_: u64, rpc: AppendEntriesRequest<Self>) -> Request {
        Request::Append(rpc)
    }
    fn vote(_: u64, rpc: VoteRequest<NodeId>) -> Request {
        Request::Vote(rpc)
    }
    fn snapshot(_: u64, rpc: InstallSnapshotRequest<Self>) -> Request {
        Request::Snapshot(rpc)
    }
    fn appended(r: Response) -> Option<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>> {
        match r {
            Response::Append(r) => Some(r),
            _ => None,
        }
    }
    fn voted(r: Response) -> Option<Result<VoteResponse<NodeId>, RaftError<NodeId>>> {
        match r {
            Response::Vote(r) => Some(r),
            _ => None,
        }
    }
    fn installed(
        r: Response,
    ) -> Option<Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>>
    {
        match r {
            Response::Snapshot(r) => Some(r),
            _ => None,
        }
    }
}

impl Wire for GroupConfig {
    fn append(group: u64, rpc: AppendEntriesRequest<Self>) -> Request {
        Request::Group {
            group,
            rpc: GroupRpc::Append(rpc),
        }
    }
    fn vote(group: u64, rpc: VoteRequest<NodeId>) -> Request {
        Request::Group {
            group,
            rpc: GroupRpc::Vote(rpc),
        }
    }
    fn snapshot(group: u64, rpc: InstallSnapshotRequest<Self>) -> Request {
        Request::Group {
            group,
            rpc: GroupRpc::Snapshot(rpc),
        }
    }
    fn appended(r: Response) -> Option<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>> {
        match r {
            Response::Group(GroupResponse::Append(r)) => Some(r),
            _ => None,
        }
    }
    fn voted(r: Response) -> Option<Result<VoteResponse<NodeId>, RaftError<NodeId>>> {
        match r {
            Response::Group(GroupResponse::Vote(r)) => Some(r),
            _ => None,
        }
    }
    fn installed(
        r: Response,
    ) -> Option<Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>>
    {
        match r {
            Response::Group(GroupResponse::Snapshot(r)) => Some(r),
            _ => None,
        }
    }
}

/// Hands openraft a client per target, for the group `group` (the metadata group's id, or a
/// replicated queue's).
pub struct NetworkFactory<C> {
    peers: Arc<Peers>,
    group: u64,
    config: PhantomData<fn() -> C>,
}

impl<C> NetworkFactory<C> {
    /// The clients of `group` over `peers`.
    pub fn new(peers: Arc<Peers>, group: u64) -> NetworkFactory<C> {
        NetworkFactory {
            peers,
            group,
            config: PhantomData,
        }
    }
}

impl<C: Wire> RaftNetworkFactory<C> for NetworkFactory<C> {
    type Network = PeerNetwork<C>;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> PeerNetwork<C> {
        PeerNetwork {
            target,
            group: self.group,
            peer: self.peers.get(target, &node.addr),
            config: PhantomData,
        }
    }
}

/// openraft's client of one target node, for one group.
pub struct PeerNetwork<C> {
    target: NodeId,
    group: u64,
    peer: Arc<Peer>,
    config: PhantomData<fn() -> C>,
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

impl<C: Wire> PeerNetwork<C> {
    /// Sends `req`; unwraps the answer with `unwrap`, a remote error as openraft's.
    async fn call<T, E: std::error::Error>(
        &self,
        req: Request,
        option: &RPCOption,
        unwrap: fn(Response) -> Option<Result<T, E>>,
    ) -> Result<T, RPCError<NodeId, Member, E>> {
        // Boxed: the call's state would otherwise sit inline in every replication task's
        // future, a few KiB for each of a leader's followers in each group, idle or not.
        let answer = Box::pin(self.peer.call(&req, option.hard_ttl()))
            .await
            .map_err(transport_error)?;
        if matches!(answer, Response::Group(GroupResponse::NotMember)) {
            // Not started there (yet): openraft backs off from an unreachable target.
            return Err(RPCError::Unreachable(Unreachable::new(
                &std::io::Error::other("the peer runs no such group"),
            )));
        }
        match unwrap(answer) {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            None => Err(mismatched()),
        }
    }
}

impl<C: Wire> RaftNetwork<C> for PeerNetwork<C> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        self.call(C::append(self.group, rpc), &option, C::appended)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<C>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Member, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(C::snapshot(self.group, rpc), &option, C::installed)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        self.call(C::vote(self.group, rpc), &option, C::voted).await
    }
}
