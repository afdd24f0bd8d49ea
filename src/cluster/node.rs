//! A node of the metadata group: its Raft instance on the store, its listener for peers, and
//! the operations the core calls: writes (proposed by the leader, forwarded there from any
//! node, answered once applied here too, so a client's next operation on this node sees it),
//! local reads, linearizable reads (the leader's read index, then a local wait), and
//! membership (bootstrap, join, forget). Every wait is bounded by the write timeout: a node cut
//! off from the majority answers with [`ClusterError::Timeout`].

use super::batch;
pub use super::error::ClusterError;
use super::groups::Groups;
use super::log_store::LogStore;
use super::messages::{Refused, Request, Response};
use super::network::{NetworkFactory, Peers};
use super::raft_view::{leader_of, members_of, refusal};
use super::state_machine::{Observer, SharedState, StateMachine};
use super::transport::{self, Handler};
use super::tree::Tree;
use super::types::{node_id, Command, Member, MetaRaft, NodeId, Reply};
use super::METADATA_GROUP;
use crate::store::Store;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{ChangeMembers, ServerState};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How a node takes part in the metadata group.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Its name (`node_name`); its id in the group is derived from it.
    pub name: String,
    /// Where it listens for peers (`cluster_listen`).
    pub listen: SocketAddr,
    /// The address peers reach it at; by default the address it listens on.
    pub advertise: Option<String>,
    /// The cluster secret.
    pub secret: Vec<u8>,
    /// How long a write or a linearizable read may wait for a majority.
    pub write_timeout: Duration,
    /// Raft's heartbeat interval.
    pub heartbeat: Duration,
    /// Raft's election timeout range; a leader's loss is noticed within its upper bound.
    pub election_timeout: (Duration, Duration),
    /// A snapshot is built after this many applied entries, and the log before it purged
    /// but for a fifth of that (what a briefly lagging follower still reads as entries).
    pub snapshot_logs: u64,
    /// Inter-node TLS (`cluster_tls`); None: plain TCP.
    pub tls: Option<crate::tls::PeerTls>,
}

impl NodeConfig {
    /// A node `name` listening on `listen` with `secret`, with the default timings.
    pub fn new(name: &str, listen: SocketAddr, secret: Vec<u8>) -> NodeConfig {
        NodeConfig {
            name: name.to_string(),
            listen,
            advertise: None,
            secret,
            write_timeout: Duration::from_secs(10),
            heartbeat: Duration::from_millis(150),
            election_timeout: (Duration::from_millis(600), Duration::from_millis(1200)),
            snapshot_logs: 5000,
            tls: None,
        }
    }
}

/// What a node's core answers to [`Request::App`] from another node: the request's bytes
/// in, the answer's bytes out.
pub type AppHandler =
    Arc<dyn Fn(Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> + Send + Sync>;

/// How often the reachability watch pings every member ([`MetaNode::unreachable`]).
const REACH_EVERY: Duration = Duration::from_secs(1);
/// How long it waits for each answer.
const REACH_TIMEOUT: Duration = Duration::from_millis(500);

/// What answers peers: the Raft RPCs, the requests a leader carries out for followers, and
/// the core's own requests.
struct Serving {
    raft: MetaRaft,
    name: String,
    app: OnceLock<AppHandler>,
    groups: Arc<Groups>,
}

impl Serving {
    async fn change(
        &self,
        changes: ChangeMembers<NodeId, Member>,
    ) -> Result<(), RaftError<NodeId, ClientWriteError<NodeId, Member>>> {
        self.raft
            .change_membership(changes, false)
            .await
            .map(|_| ())
    }
}

impl Handler for Serving {
    async fn handle(&self, _from: NodeId, req: Request) -> Response {
        let raft = &self.raft;
        match req {
            Request::Append(r) => Response::Append(raft.append_entries(r).await),
            Request::Vote(r) => Response::Vote(raft.vote(r).await),
            Request::Snapshot(r) => Response::Snapshot(raft.install_snapshot(r).await),
            Request::Write(cmd) => Response::Write(match raft.client_write(cmd).await {
                Ok(r) => Ok((r.log_id.index, r.data)),
                Err(e) => Err(refusal(raft, e)),
            }),
            Request::ReadIndex => Response::ReadIndex(match raft.ensure_linearizable().await {
                Ok(id) => Ok(id.map_or(0, |id| id.index)),
                Err(e) => Err(refusal(raft, e)),
            }),
            Request::Join(member) => {
                let id = node_id(&member.name);
                let added = match raft.add_learner(id, member, true).await {
                    Ok(_) => {
                        self.change(ChangeMembers::AddVoterIds(BTreeSet::from([id])))
                            .await
                    }
                    Err(e) => Err(e),
                };
                Response::Membership(added.map_err(|e| refusal(raft, e)))
            }
            Request::Forget(id) => Response::Membership(
                self.change(ChangeMembers::RemoveVoters(BTreeSet::from([id])))
                    .await
                    .map_err(|e| refusal(raft, e)),
            ),
            Request::Ping => Response::Pong(self.name.clone()),
            Request::App(bytes) => Response::App(match self.app.get() {
                Some(app) => Ok(serde_bytes::ByteBuf::from(app(bytes).await)),
                None => Err(format!("node '{}' is starting", self.name)),
            }),
            Request::Group { group, rpc } => Response::Group(self.groups.handle(group, rpc).await),
        }
    }
}

fn refused_in(r: &Response) -> Option<&Refused> {
    match r {
        Response::Write(Err(e)) | Response::ReadIndex(Err(e)) | Response::Membership(Err(e)) => {
            Some(e)
        }
        _ => None,
    }
}

/// A member as [`MetaNode::member_status`] sees it.
#[derive(Clone, Debug)]
pub struct MemberStatus {
    /// The member.
    pub member: Member,
    /// Whether it votes.
    pub voter: bool,
    /// Whether it answered.
    pub running: bool,
}

/// A running member of the metadata group.
pub struct MetaNode {
    id: NodeId,
    name: String,
    addr: String,
    raft: MetaRaft,
    state: SharedState,
    peers: Arc<Peers>,
    serving: Arc<Serving>,
    groups: Arc<Groups>,
    write_timeout: Duration,
    stop: watch::Sender<bool>,
    server: Mutex<Option<JoinHandle<()>>>,
    /// What it was started with, for [`MetaNode::restart_empty`].
    started: (Store, NodeConfig, Option<Arc<dyn Observer>>),
    /// Members whose last [`MetaNode::call_app`] got no answer (until one does).
    unanswered: dashmap::DashSet<String>,
    /// Whether each member answered the background watch's last ping
    /// ([`MetaNode::unreachable`] starts the watch).
    reach: dashmap::DashMap<String, bool>,
    watching: std::sync::atomic::AtomicBool,
    /// Writes waiting for the one in flight ([`batch`]).
    writes: batch::Writes<ClusterError>,
}

impl std::fmt::Debug for MetaNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaNode")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MetaNode {
    /// Starts the node on `store` (catching up from what it holds) and its peer listener.
    /// A new node is not yet in a cluster: [`MetaNode::initialize`] or [`MetaNode::join`].
    pub async fn start(
        store: Store,
        config: NodeConfig,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<MetaNode, ClusterError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|e| ClusterError::Listen {
                    addr: config.listen,
                    cause: e.to_string(),
                })?;
        let bound = listener.local_addr().map_err(|e| ClusterError::Listen {
            addr: config.listen,
            cause: e.to_string(),
        })?;
        let addr = config
            .advertise
            .clone()
            .unwrap_or_else(|| bound.to_string());
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let raft_config = openraft::Config {
            cluster_name: "warren".into(),
            heartbeat_interval: millis(config.heartbeat),
            election_timeout_min: millis(config.election_timeout.0),
            election_timeout_max: millis(config.election_timeout.1),
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_logs),
            max_in_snapshot_log_to_keep: config.snapshot_logs / 5,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ClusterError::Start(e.to_string()))?;
        let id = node_id(&config.name);
        let secret: Arc<[u8]> = config.secret.clone().into();
        let (acceptor, connector) = match &config.tls {
            Some(t) => (Some(t.acceptor.clone()), Some(t.connector.clone())),
            None => (None, None),
        };
        // Connections to peers leave from the listener's address when it names one, so a
        // node bound to one interface talks to its peers from it (RabbitMQ's
        // `inet_dist_use_interface`).
        let bind = Some(config.listen.ip()).filter(|ip| !ip.is_unspecified());
        let peers = Arc::new(Peers::new(secret.clone(), id, connector, bind));
        let started = (store.clone(), config.clone(), observer.clone());
        let log = LogStore::new(store.clone(), METADATA_GROUP);
        let groups = Arc::new(Groups::new(
            id,
            store.clone(),
            peers.clone(),
            config.snapshot_logs,
            config.write_timeout,
        )?);
        let sm = StateMachine::open(store, METADATA_GROUP, observer)
            .map_err(|e| ClusterError::Start(e.to_string()))?;
        let state = sm.state();
        let raft = MetaRaft::new(
            id,
            Arc::new(raft_config),
            NetworkFactory::new(peers.clone(), METADATA_GROUP),
            log,
            sm,
        )
        .await
        .map_err(|e| ClusterError::Start(e.to_string()))?;
        let serving = Arc::new(Serving {
            raft: raft.clone(),
            name: config.name.clone(),
            app: OnceLock::new(),
            groups: groups.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(transport::serve(
            listener,
            secret,
            acceptor,
            serving.clone(),
            stopped,
        ));
        groups.resume(METADATA_GROUP).await?;
        groups.supervise();
        Ok(MetaNode {
            id,
            name: config.name,
            addr,
            raft,
            state,
            peers,
            serving,
            groups,
            write_timeout: config.write_timeout,
            stop,
            server: Mutex::new(Some(server)),
            started,
            unanswered: dashmap::DashSet::new(),
            reach: dashmap::DashMap::new(),
            watching: std::sync::atomic::AtomicBool::new(false),
            writes: Default::default(),
        })
    }

    /// The replicated queue groups this node is a member of.
    pub fn groups(&self) -> &Arc<Groups> {
        &self.groups
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address peers reach this node at.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The leader this node knows of (id, address).
    pub fn leader(&self) -> Option<(NodeId, String)> {
        leader_of(&self.raft)
    }

    /// The metadata group's term as this node knows it.
    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    /// Whether this node leads the group now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// This node as the membership records it.
    pub fn member(&self) -> Member {
        Member {
            name: self.name.clone(),
            addr: self.addr.clone(),
        }
    }

    /// This node's links to the other members: (member, bytes sent, bytes received) by this
    /// node's calls to it (zeros for one it has not called).
    pub fn links(&self) -> Vec<(Member, u64, u64)> {
        self.members()
            .into_iter()
            .filter(|(m, _)| m.name != self.name)
            .map(|(m, _)| {
                let (sent, received) = self
                    .peers
                    .known(node_id(&m.name))
                    .map_or((0, 0), |p| p.traffic());
                (m, sent, received)
            })
            .collect()
    }

    /// Whether the membership this node last applied has another node in it.
    pub fn has_peers(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let peers = m
            .membership_config
            .membership()
            .nodes()
            .any(|(id, _)| *id != self.id);
        peers
    }

    /// The members and whether each votes, as this node last applied them, by name.
    pub fn members(&self) -> Vec<(Member, bool)> {
        members_of(&self.raft)
    }

    /// Every member, whether it votes and whether it answers a ping within `timeout` (all
    /// pinged at once), by name.
    pub async fn member_status(self: &Arc<Self>, timeout: Duration) -> Vec<MemberStatus> {
        let members = self.members();
        let mut pings = tokio::task::JoinSet::new();
        for (i, (member, _)) in members.iter().enumerate() {
            let (node, member) = (self.clone(), member.clone());
            pings.spawn(async move { (i, node.ping(&member, timeout).await) });
        }
        let mut running = vec![false; members.len()];
        while let Some(Ok((i, up))) = pings.join_next().await {
            if let Some(r) = running.get_mut(i) {
                *r = up;
            }
        }
        members
            .into_iter()
            .zip(running)
            .map(|((member, voter), running)| MemberStatus {
                member,
                voter,
                running,
            })
            .collect()
    }

    /// Whether `member` answers a ping within `timeout` (this node always does).
    pub async fn ping(&self, member: &Member, timeout: Duration) -> bool {
        if member.name == self.name {
            return true;
        }
        let peer = self.peers.get(node_id(&member.name), &member.addr);
        matches!(
            peer.call(&Request::Ping, timeout).await,
            Ok(Response::Pong(name)) if name == member.name
        )
    }

    /// Hands [`Request::App`] from other nodes to `handler` from now on (set once, when the
    /// core is ready; until then such requests are refused as "starting").
    pub fn set_app_handler(&self, handler: AppHandler) {
        let _ = self.serving.app.set(handler);
    }

    /// Sends `request` to the core of the member named `name` and waits up to `timeout` for
    /// its answer. [`ClusterError::Unreachable`] when it is not a member, is down, or is
    /// still starting.
    pub async fn call_app(
        &self,
        name: &str,
        request: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ClusterError> {
        let unreachable = || ClusterError::Unreachable(name.to_owned());
        let member = self
            .members()
            .into_iter()
            .map(|(m, _)| m)
            .find(|m| m.name == name)
            .ok_or_else(unreachable)?;
        let peer = self.peers.get(node_id(&member.name), &member.addr);
        match peer.call(&Request::App(request), timeout).await {
            Ok(Response::App(Ok(answer))) => {
                self.unanswered.remove(name);
                Ok(answer.into_vec())
            }
            _ => {
                self.unanswered.insert(name.to_owned());
                Err(unreachable())
            }
        }
    }

    /// The members that did not answer the last ping of a watch that pings every member
    /// each second, started by the first call (which therefore finds none): what
    /// `/api/nodes` reports without waiting on pings of its own.
    pub fn unreachable(self: &Arc<Self>) -> Vec<String> {
        use std::sync::atomic::Ordering;
        if !self.watching.swap(true, Ordering::AcqRel) {
            let weak = Arc::downgrade(self);
            tokio::spawn(async move {
                while let Some(node) = weak.upgrade() {
                    for s in node.member_status(REACH_TIMEOUT).await {
                        node.reach.insert(s.member.name, s.running);
                    }
                    drop(node);
                    tokio::time::sleep(REACH_EVERY).await;
                }
            });
        }
        self.members()
            .into_iter()
            .map(|(m, _)| m.name)
            .filter(|n| *n != self.name && self.reach.get(n).is_some_and(|r| !*r))
            .collect()
    }

    /// Whether the member named `name` answered the last [`MetaNode::call_app`] to it (true
    /// before the first): who a node need not wait for.
    pub fn answered_last(&self, name: &str) -> bool {
        !self.unanswered.contains(name)
    }

    /// Whether this node has applied the log up to `index` within `timeout`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "applied for another node")
            .await
            .is_ok()
    }

    /// The index of the last entry this node applied.
    pub fn applied_index(&self) -> Option<u64> {
        self.raft.metrics().borrow().last_applied.map(|id| id.index)
    }

    /// The last log index removed from this node's log (a snapshot covers it).
    pub fn purged_index(&self) -> Option<u64> {
        self.raft.metrics().borrow().purged.map(|id| id.index)
    }

    /// Makes this node, with `others`, a new cluster. Nothing happens when the group already
    /// has members (a restarted node, or a seed list read again); every node of a seed list
    /// may call it with the same members (openraft allows that).
    pub async fn initialize(&self, others: &[Member]) -> Result<(), ClusterError> {
        let mut members = BTreeMap::new();
        members.insert(self.id, self.member());
        for m in others {
            members.insert(node_id(&m.name), m.clone());
        }
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ClusterError::Refused(e.to_string())),
        }
    }

    /// Asks the cluster that the node at `seed` belongs to to take this node in as a voter,
    /// and waits until it has (this node has then caught up with the group's log).
    pub async fn join(&self, seed: &str) -> Result<(), ClusterError> {
        let req = Request::Join(self.member());
        let deadline = Instant::now() + self.write_timeout;
        let mut target = seed.to_string();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ClusterError::Timeout(self.write_timeout));
            }
            let peer = self.peers.unlisted(&target);
            match peer.call(&req, remaining).await {
                Ok(Response::Membership(Ok(()))) => {
                    // The leader saw our log catch up; apply what it committed before we
                    // answer, so the joined node serves the cluster's state at once.
                    return self.read_linearizable(|_| ()).await;
                }
                Ok(Response::Membership(Err(Refused::NotLeader(Some((_, leader)))))) => {
                    target = leader;
                }
                Ok(Response::Membership(Err(Refused::Failed(e)))) => {
                    return Err(ClusterError::Refused(e))
                }
                _ => {
                    target = seed.to_string();
                    tokio::time::sleep(remaining.min(Duration::from_millis(100))).await;
                }
            }
        }
    }

    /// Removes the node named `name` from the members (RabbitMQ's forget_cluster_node).
    pub async fn forget(&self, name: &str) -> Result<(), ClusterError> {
        match self.on_leader(Request::Forget(node_id(name))).await? {
            (Response::Membership(Ok(())), _) => Ok(()),
            _ => Err(ClusterError::Refused("unexpected answer".into())),
        }
    }

    /// Carries out `req` on the leader (here, or forwarded), retrying while there is none or
    /// it moves, until the write timeout.
    async fn on_leader(&self, req: Request) -> Result<(Response, Instant), ClusterError> {
        let deadline = Instant::now() + self.write_timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ClusterError::Timeout(self.write_timeout));
            }
            let answer = match self.leader() {
                Some((id, _)) if id == self.id => {
                    tokio::time::timeout(remaining, self.serving.handle(self.id, req.clone()))
                        .await
                        .ok()
                }
                Some((id, addr)) => self.peers.get(id, &addr).call(&req, remaining).await.ok(),
                None => None,
            };
            if let Some(a) = answer {
                match refused_in(&a).cloned() {
                    None => return Ok((a, deadline)),
                    Some(Refused::Failed(e)) => return Err(ClusterError::Refused(e)),
                    // The leader moved on: ask again once the election has settled.
                    Some(Refused::NotLeader(_)) => {}
                }
            }
            tokio::time::sleep(remaining.min(Duration::from_millis(50))).await;
        }
    }

    async fn await_applied(&self, index: u64, deadline: Instant) -> Result<(), ClusterError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        self.raft
            .wait(Some(remaining))
            .applied_index_at_least(Some(index), "applied here")
            .await
            .map(|_| ())
            .map_err(|_| ClusterError::Timeout(self.write_timeout))
    }

    /// Proposes `cmd` and answers once it is committed and applied on this node; writes made
    /// while another is in flight share an entry ([`batch`]).
    pub async fn write(self: &Arc<Self>, cmd: Command) -> Result<Reply, ClusterError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.writes.push(cmd, tx) {
            let node = self.clone();
            tokio::spawn(async move {
                batch::flush(&node.writes, |cmd| node.write_entry(cmd)).await;
            });
        }
        rx.await
            .unwrap_or_else(|_| Err(ClusterError::Refused("the write was lost".into())))
    }

    /// Proposes `cmd` as one entry and answers once it is committed and applied on this node.
    async fn write_entry(&self, cmd: Command) -> Result<Reply, ClusterError> {
        match self.on_leader(Request::Write(cmd)).await? {
            (Response::Write(Ok((index, reply))), deadline) => {
                self.await_applied(index, deadline).await?;
                Ok(reply)
            }
            _ => Err(ClusterError::Refused("unexpected answer".into())),
        }
    }

    /// Reads the tree as this node has applied it (no round trip; may lag the leader). `f`
    /// runs under the tree's read lock: it must not read the tree again (a second read waits
    /// behind a write the state machine queued meanwhile, which waits for the first) nor do
    /// more than look; copy out what is needed and act after.
    pub fn read<R>(&self, f: impl FnOnce(&Tree) -> R) -> R {
        match self.state.read() {
            Ok(state) => f(&state.tree),
            Err(poisoned) => f(&poisoned.into_inner().tree),
        }
    }

    /// Reads the tree once this node has applied everything committed before the call (the
    /// leader's read index): what a node must do before it reports an entity missing.
    pub async fn read_linearizable<R>(
        &self,
        f: impl FnOnce(&Tree) -> R,
    ) -> Result<R, ClusterError> {
        match self.on_leader(Request::ReadIndex).await? {
            (Response::ReadIndex(Ok(index)), deadline) => {
                self.await_applied(index, deadline).await?;
                Ok(self.read(f))
            }
            _ => Err(ClusterError::Refused("unexpected answer".into())),
        }
    }

    /// The name of the node whose inter-node listener is at `addr`, if it answers a ping
    /// within `timeout` (it must hold the cluster secret to answer at all).
    pub async fn name_at(&self, addr: &str, timeout: Duration) -> Option<String> {
        match self
            .peers
            .unlisted(addr)
            .call(&Request::Ping, timeout)
            .await
        {
            Ok(Response::Pong(name)) => Some(name),
            _ => None,
        }
    }

    /// RabbitMQ's reset of the node's membership: stops this node (listener, connections,
    /// Raft instance), wipes the metadata group's log, Raft state and tree from the store,
    /// and starts a fresh node with the same settings, in no cluster yet (then
    /// [`MetaNode::join`] or [`MetaNode::initialize`]). What the core built from the tree
    /// is left to the core.
    pub async fn restart_empty(&self) -> Result<Arc<MetaNode>, ClusterError> {
        self.shutdown().await;
        let (store, config, observer) = self.started.clone();
        let wiped = store.delete_raft_group(METADATA_GROUP).await
            && store
                .replace_meta_tree(METADATA_GROUP, &[], Vec::new())
                .await;
        if !wiped {
            return Err(ClusterError::Start(
                "the store could not wipe the metadata group".into(),
            ));
        }
        MetaNode::start(store, config, observer).await.map(Arc::new)
    }

    /// Stops the node: its listener, its connections and its Raft instance.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        self.groups.shutdown().await;
        let _ = self.raft.shutdown().await;
        let server = self.server.lock().ok().and_then(|mut s| s.take());
        if let Some(server) = server {
            server.abort();
            let _ = server.await;
        }
    }
}
