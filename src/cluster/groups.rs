//! Replicated queue groups (#18): one Raft group (openraft) per quorum queue, over a few of the
//! cluster's nodes, each replicating a map of opaque values ([`GroupCommand`]); the
//! core decides what the values mean. The tricks that make many groups affordable, as Ra and
//! TiKV do:
//! - every group's log is in the store's one Raft log table, written by its one writer, so the
//!   appends of all groups on a node share commits and fsyncs ([`super::log_store`]);
//! - groups send no heartbeats and never call elections on their own timers: a member that
//!   finds its group's leader node down (one ping per node, not per group) or knows no leader
//!   calls the election itself, members ranked per group so that one goes first
//!   ([`supervisor`]);
//! - all groups share the node's inter-node connections ([`super::network`]).

use super::error::ClusterError;
use super::group_machine::GroupMachine;
use super::group_types::{GroupCommand, GroupRaft, GroupReply};
use super::log_store::LogStore;
use super::messages::{GroupResponse, GroupRpc, MemberReport, Refused, Request, Response};
use super::network::{NetworkFactory, Peers};
use super::raft_view::{leader_of, refusal};
use super::types::{node_id, Member, NodeId};
use crate::store::Store;
use dashmap::DashMap;
use openraft::error::RaftError;
use openraft::ServerState;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use supervisor::{PING_TIMEOUT, TICK};
use tokio::time::Instant;

mod supervisor;

/// How long a new group's designated leader has before the others step in.
const START_GRACE: Duration = Duration::from_secs(1);
/// Raft's election timeout in the groups: with no timer-driven elections, it only bounds how
/// long a member refuses votes after it last heard from a leader (openraft's leader lease),
/// so it is kept short for a quick failover.
const ELECTION_TIMEOUT: (Duration, Duration) =
    (Duration::from_millis(300), Duration::from_millis(600));
/// How long after the start of a write that committed in its term a leader may take it that
/// no other member leads yet. A member refuses votes for `ELECTION_TIMEOUT.1` after it last
/// heard from its leader (openraft's lease), and calls no election of its own within that
/// time ([`Groups::supervise`]); a write commits only once a majority has heard it, so no
/// other leader can be elected within that time of its start. The margin is for what
/// the leader does within its lease to reach a client (a delivery on its way to a socket).
pub const LEADER_LEASE: Duration = Duration::from_millis(400);

/// Told that this node leads `group` (once per term, until it answers true): the core
/// makes the group's queue served here.
pub type LeadingHook = Arc<
    dyn Fn(u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>> + Send + Sync,
>;

/// The replicated queue groups this node is a member of.
pub struct Groups {
    me: NodeId,
    store: Store,
    peers: Arc<Peers>,
    config: Arc<openraft::Config>,
    write_timeout: Duration,
    map: DashMap<u64, GroupRaft>,
    /// Since when each group has had no leader that answers (as the supervisor saw it).
    leaderless: DashMap<u64, Instant>,
    /// The member each group should be led by, when this node was told.
    preferred: DashMap<u64, NodeId>,
    /// Told when this node leads a group.
    leading_hook: std::sync::OnceLock<LeadingHook>,
    /// The term in which the hook last answered true, per group; groups whose hook runs.
    settled: Arc<DashMap<u64, u64>>,
    settling: Arc<dashmap::DashSet<u64>>,
    /// How long the last write this node led took to commit, per group.
    latency: DashMap<u64, Duration>,
    /// When this node last heard from each group's leader (an append or a snapshot).
    heard: DashMap<u64, Instant>,
    /// The leader each group's member takes for its own but that asked who leads
    /// ([`GroupRpc::Hello`]): it leads no longer, so it counts as down in that group.
    gone: DashMap<u64, NodeId>,
    /// When these groups were started (the node's boot): what it heard before is forgotten.
    booted: Instant,
    /// Something calls for the supervisor to look at every group on its next tick.
    woken: std::sync::atomic::AtomicBool,
}

impl Groups {
    /// The groups of node `me` on `store`, reaching peers through `peers`, with a snapshot
    /// after `snapshot_logs` entries and writes bounded by `write_timeout` (as the metadata
    /// group's).
    pub fn new(
        me: NodeId,
        store: Store,
        peers: Arc<Peers>,
        snapshot_logs: u64,
        write_timeout: Duration,
    ) -> Result<Groups, ClusterError> {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let config = openraft::Config {
            cluster_name: "warren-queues".into(),
            // No heartbeats are sent, but openraft wakes each group's tick task every 1.5
            // heartbeat intervals whether ticks are enabled or not (the bulk of an idle
            // node's CPU with many groups), and bounds an append's RPC by one: as long as
            // the election timeout allows.
            heartbeat_interval: millis(ELECTION_TIMEOUT.0) - 1,
            election_timeout_min: millis(ELECTION_TIMEOUT.0),
            election_timeout_max: millis(ELECTION_TIMEOUT.1),
            enable_heartbeat: false,
            enable_elect: false,
            // Elections and heartbeats are driven by the supervisor; openraft's own tick
            // would only wake every group five times a second to flush its metrics. It is
            // turned on for a member that removes itself (`change_members`): a leader
            // steps down on a tick once its removal is committed.
            enable_tick: false,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(snapshot_logs),
            max_in_snapshot_log_to_keep: snapshot_logs / 5,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ClusterError::Start(e.to_string()))?;
        Ok(Groups {
            me,
            store,
            peers,
            config: Arc::new(config),
            write_timeout,
            map: DashMap::new(),
            leaderless: DashMap::new(),
            preferred: DashMap::new(),
            leading_hook: std::sync::OnceLock::new(),
            settled: Default::default(),
            settling: Default::default(),
            latency: DashMap::new(),
            heard: DashMap::new(),
            gone: DashMap::new(),
            booted: Instant::now(),
            woken: Default::default(),
        })
    }

    fn raft(&self, group: u64) -> Result<GroupRaft, ClusterError> {
        self.map
            .get(&group)
            .map(|r| r.clone())
            .ok_or_else(|| ClusterError::Refused(format!("this node is not in group {group}")))
    }

    /// Starts this node's member of `group` (from what the store holds of it). `leader`
    /// names the member the group should be led by (where the queue was placed): a new group
    /// is formed there alone, with `members` (this node among them), so its first election
    /// is that node's and no other member can win one before it led (the others learn the
    /// members from its first append); whenever the group has no leader, that node goes first
    /// among the members with the longest log. With no `leader`, any member given `members`
    /// forms the group. Starting a running group only records the preferred leader.
    pub async fn start(
        &self,
        group: u64,
        members: &[Member],
        leader: Option<&str>,
    ) -> Result<(), ClusterError> {
        if let Some(name) = leader {
            self.prefer(group, name);
        }
        if self.map.contains_key(&group) {
            return Ok(());
        }
        let lead = self.preferred.get(&group).is_some_and(|p| *p == self.me);
        let start = |e: &dyn std::fmt::Display| ClusterError::Start(format!("group {group}: {e}"));
        let log = LogStore::new(self.store.clone(), group);
        let sm = GroupMachine::open(self.store.clone(), group).map_err(|e| start(&e))?;
        let raft = GroupRaft::new(
            self.me,
            self.config.clone(),
            NetworkFactory::new(self.peers.clone(), group),
            log,
            sm,
        )
        .await
        .map_err(|e| start(&e))?;
        let forms = !members.is_empty() && (lead || leader.is_none());
        let mut elected = false;
        if forms && !raft.is_initialized().await.map_err(|e| start(&e))? {
            let members: BTreeMap<NodeId, Member> = members
                .iter()
                .map(|m| (node_id(&m.name), m.clone()))
                .collect();
            // openraft's initialize calls the first election.
            match raft.initialize(members).await {
                Ok(()) => elected = true,
                Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(start(&e)),
            }
        }
        if lead && !elected {
            let _ = raft.trigger().elect().await;
        }
        // The designated leader's own election gets a round before anyone calls another
        // (its first may find members that have not started theirs yet: it calls again
        // on the next tick).
        let grace = if lead { TICK } else { START_GRACE };
        self.leaderless.insert(group, Instant::now() + grace);
        self.map.insert(group, raft);
        Ok(())
    }

    /// Records that `group` should be led by the node named `leader`.
    pub fn prefer(&self, group: u64, leader: &str) {
        self.preferred.insert(group, node_id(leader));
    }

    /// Whether this node holds nothing of `group` yet: no log, no vote (a group it was never
    /// a member of, or one about to be formed).
    pub fn is_new(&self, group: u64) -> bool {
        !self.map.contains_key(&group)
            && self.store.last_log(group).is_ok_and(|l| l.is_none())
            && self
                .store
                .raft_state(group, crate::store::RaftState::Vote)
                .is_ok_and(|v| v.is_none())
    }

    /// Starts every group the store holds a member of (a restart), without electing.
    pub async fn resume(&self, except: u64) -> Result<Vec<u64>, ClusterError> {
        let groups = self
            .store
            .raft_groups(except)
            .map_err(|e| ClusterError::Start(e.to_string()))?;
        for &g in &groups {
            self.start(g, &[], None).await?;
        }
        Ok(groups)
    }

    /// Whether this node runs a member of `group`.
    pub fn is_member(&self, group: u64) -> bool {
        self.map.contains_key(&group)
    }

    /// The ids of the groups this node runs a member of.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.map.iter().map(|e| *e.key()).collect();
        ids.sort_unstable();
        ids
    }

    /// The leader of `group` this node knows of (id, address).
    pub fn leader(&self, group: u64) -> Option<(NodeId, String)> {
        self.map.get(&group).and_then(|r| leader_of(&r))
    }

    /// What this node's member of `group` reports of itself (state, term, vote, log, leader).
    pub fn metrics(&self, group: u64) -> Option<openraft::RaftMetrics<NodeId, Member>> {
        self.map.get(&group).map(|r| r.metrics().borrow().clone())
    }

    /// How `member`'s member of `group` is doing, asked over the network unless it is this
    /// node; None when it does not answer in time or runs no such group.
    pub async fn report(&self, group: u64, member: &Member) -> Option<MemberReport> {
        let id = node_id(&member.name);
        if id == self.me {
            return self.report_here(group);
        }
        let req = Request::Group {
            group,
            rpc: GroupRpc::Report,
        };
        match self
            .peers
            .get(id, &member.addr)
            .call(&req, PING_TIMEOUT * 4)
            .await
        {
            Ok(Response::Group(GroupResponse::Report(r))) => Some(r),
            _ => None,
        }
    }

    /// How this node's member of `group` is doing; None when it runs none.
    pub fn report_here(&self, group: u64) -> Option<MemberReport> {
        let raft = self.raft(group).ok()?;
        let mut report = report_of(&raft);
        report.commit_latency = self.latency.get(&group).map(|d| *d);
        Some(report)
    }

    /// Whether this node leads `group`.
    pub fn is_leader(&self, group: u64) -> bool {
        self.map
            .get(&group)
            .is_some_and(|r| r.metrics().borrow().state == ServerState::Leader)
    }

    /// The term in which this node leads `group`, if it does.
    pub fn leading_term(&self, group: u64) -> Option<u64> {
        let raft = self.map.get(&group)?;
        let m = raft.metrics();
        let m = m.borrow();
        (m.state == ServerState::Leader).then_some(m.current_term)
    }

    /// Waits up to `timeout` for `group` to have a leader this node knows of.
    pub async fn wait_leader(&self, group: u64, timeout: Duration) -> Option<(NodeId, String)> {
        let raft = self.raft(group).ok()?;
        raft.wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "a leader")
            .await
            .ok()?;
        leader_of(&raft)
    }

    /// Proposes `cmd` to `group` through its leader (here, or forwarded), retrying while
    /// there is none or it moves, and answers once the entry is committed (on a majority's
    /// disks) and applied on the leader. [`ClusterError::Timeout`] after the write timeout:
    /// then it may or may not have been committed.
    pub async fn write(&self, group: u64, cmd: GroupCommand) -> Result<GroupReply, ClusterError> {
        let rpc = GroupRpc::Write(cmd.clone());
        let here = move |raft: GroupRaft| {
            let cmd = cmd.clone();
            async move {
                match raft.client_write(cmd).await {
                    Ok(r) => Ok(r.data),
                    Err(e) => Err(refusal(&raft, e)),
                }
            }
        };
        self.at_leader(group, rpc, here, &[], |r| match r {
            Response::Group(GroupResponse::Write(r)) => Some(r),
            _ => None,
        })
        .await
    }

    /// [`Self::write`] from any node: one that is not a member of `group` asks its `members`
    /// who leads.
    pub async fn write_via(
        &self,
        group: u64,
        cmd: GroupCommand,
        members: &[Member],
    ) -> Result<GroupReply, ClusterError> {
        if self.map.contains_key(&group) {
            return self.write(group, cmd).await;
        }
        let rpc = GroupRpc::Write(cmd);
        let here = |_: GroupRaft| async { Err(Refused::NotLeader(None)) };
        self.at_leader(group, rpc, here, members, |r| match r {
            Response::Group(GroupResponse::Write(r)) => Some(r),
            _ => None,
        })
        .await
    }

    /// Makes `members` the voting members of `group` (new ones join as learners and vote
    /// once they have caught up; the others leave), through its leader as [`Self::write`]
    /// goes; a node that is not a member asks the group's `current` members who leads.
    /// Done once the new membership is committed; a leader that is no longer a member then
    /// steps down and the remaining members elect one.
    pub async fn set_members(
        &self,
        group: u64,
        members: Vec<Member>,
        current: &[Member],
    ) -> Result<(), ClusterError> {
        let rpc = GroupRpc::Members(members.clone());
        let here = move |raft: GroupRaft| change_members(raft, members.clone());
        self.at_leader(group, rpc, here, current, |r| match r {
            Response::Group(GroupResponse::Members(r)) => Some(r),
            _ => None,
        })
        .await
    }

    /// Carries out a request on `group`'s leader: `here` when this node leads, else `rpc`
    /// sent to the leader it knows of (its answer read by `there`), again while there is no
    /// leader or it moves, until the write timeout. A node that runs no member of the group
    /// asks the members of `via` in turn, then the leader a refusal names.
    async fn at_leader<T, F, Fut>(
        &self,
        group: u64,
        rpc: GroupRpc,
        here: F,
        via: &[Member],
        there: fn(Response) -> Option<Result<T, Refused>>,
    ) -> Result<T, ClusterError>
    where
        F: Fn(GroupRaft) -> Fut,
        Fut: std::future::Future<Output = Result<T, Refused>>,
    {
        let local = self.raft(group);
        if let (Err(e), true) = (&local, via.is_empty()) {
            return Err(e.clone());
        }
        let local = local.ok();
        let deadline = Instant::now() + self.write_timeout;
        let req = Request::Group { group, rpc };
        let (mut hint, mut next) = (None, 0usize);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(ClusterError::Timeout(self.write_timeout));
            }
            let target = match &local {
                Some(raft) => leader_of(raft),
                None => hint.take().or_else(|| {
                    let m = via.get(next % via.len().max(1))?;
                    next += 1;
                    Some((node_id(&m.name), m.addr.clone()))
                }),
            };
            let answer = match (target, &local) {
                (Some((id, _)), Some(raft)) if id == self.me => {
                    tokio::time::timeout(remaining, here(raft.clone()))
                        .await
                        .ok()
                }
                (Some((id, addr)), _) => {
                    match self.peers.get(id, &addr).call(&req, remaining).await {
                        Ok(r) => there(r),
                        Err(_) => None,
                    }
                }
                (None, _) => None,
            };
            match answer {
                Some(Ok(reply)) => return Ok(reply),
                Some(Err(Refused::Failed(e))) => return Err(ClusterError::Refused(e)),
                // The leader moved on, or none answered: ask again once things settle.
                Some(Err(Refused::NotLeader(leader))) => hint = leader,
                None => {}
            }
            tokio::time::sleep(remaining.min(Duration::from_millis(50))).await;
        }
    }

    /// Proposes `cmd` to `group` only if this node leads it in `term` (any term: 0), waiting
    /// up to the write timeout while the group has no leader yet, and answers once it is
    /// committed and applied here: the writes of a queue's task, which must never reach a
    /// group it does not lead (nor one another leader wrote to since the task started).
    pub async fn write_here(
        &self,
        group: u64,
        term: u64,
        cmd: GroupCommand,
    ) -> Result<GroupReply, ClusterError> {
        let not_leader = || ClusterError::Refused(format!("this node does not lead group {group}"));
        let deadline = Instant::now() + self.write_timeout;
        // A group being started here (its queue was just declared) is waited for.
        let raft = loop {
            match self.raft(group) {
                Ok(raft) => break raft,
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        loop {
            match leader_of(&raft) {
                Some((id, _)) if id == self.me => break,
                Some(_) => return Err(not_leader()),
                None if Instant::now() >= deadline => {
                    return Err(ClusterError::Timeout(self.write_timeout))
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let cmd = match term {
            0 => cmd,
            _ if raft.metrics().borrow().current_term != term => return Err(not_leader()),
            // Fenced: this node may lose the group and lead it again in a later term before
            // the proposal reaches its core.
            _ => GroupCommand::InTerm(term, Box::new(cmd)),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let started = Instant::now();
        match tokio::time::timeout(remaining, raft.client_write(cmd)).await {
            Ok(Ok(r)) if r.data.stale => Err(ClusterError::Refused(format!(
                "this node led group {group} in a later term than {term} when the write was proposed"
            ))),
            Ok(Ok(r)) => {
                self.latency.insert(group, started.elapsed());
                Ok(r.data)
            }
            Ok(Err(e)) => Err(match refusal(&raft, e) {
                Refused::NotLeader(_) => not_leader(),
                Refused::Failed(e) => ClusterError::Refused(e),
            }),
            Err(_) => Err(ClusterError::Timeout(self.write_timeout)),
        }
    }

    /// Waits until this node, as `group`'s leader, has applied everything committed before
    /// it led (what a new leader's queue must start from).
    pub async fn linearize(&self, group: u64) -> Result<(), ClusterError> {
        let raft = self.raft(group)?;
        match tokio::time::timeout(self.write_timeout, raft.ensure_linearizable()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ClusterError::Refused(e.to_string())),
            Err(_) => Err(ClusterError::Timeout(self.write_timeout)),
        }
    }

    /// Calls `hook` whenever this node comes to lead a group (set once, by the core).
    pub fn on_leading(&self, hook: LeadingHook) {
        let _ = self.leading_hook.set(hook);
    }

    /// `group`'s values as this node has applied them, in key order.
    pub async fn values(&self, group: u64) -> Result<Vec<(u64, Vec<u8>)>, ClusterError> {
        self.raft(group)?;
        self.store.sync().await;
        self.store
            .group_image(group)
            .map(|i| i.values)
            .map_err(|e| ClusterError::Refused(e.to_string()))
    }

    /// `group`'s values from key `from` on, as last committed here (what was applied
    /// lately may not be there yet).
    pub fn values_from(&self, group: u64, from: u64) -> Result<Vec<(u64, Vec<u8>)>, ClusterError> {
        self.raft(group)?;
        self.store
            .group_values_from(group, from)
            .map_err(|e| ClusterError::Refused(e.to_string()))
    }

    /// Stops this node's member of `group`, keeping what the store holds of it.
    pub async fn stop(&self, group: u64) {
        self.leaderless.remove(&group);
        self.preferred.remove(&group);
        self.settled.remove(&group);
        self.latency.remove(&group);
        self.heard.remove(&group);
        if let Some((_, raft)) = self.map.remove(&group) {
            let _ = raft.shutdown().await;
        }
    }

    /// Stops this node's member of `group` and removes its log and values from the store
    /// (the queue was deleted).
    pub async fn delete(&self, group: u64) -> bool {
        self.stop(group).await;
        self.store.delete_raft_group(group).await
    }

    /// Stops every group (the node shuts down).
    pub async fn shutdown(&self) {
        for g in self.ids() {
            self.stop(g).await;
        }
    }

    /// Answers a peer's request to `group`.
    pub(super) async fn handle(&self, group: u64, rpc: GroupRpc) -> GroupResponse {
        let Ok(raft) = self.raft(group) else {
            return GroupResponse::NotMember;
        };
        if matches!(rpc, GroupRpc::Append(_) | GroupRpc::Snapshot(_)) {
            self.heard.insert(group, Instant::now());
        }
        match rpc {
            GroupRpc::Append(r) => GroupResponse::Append(raft.append_entries(r).await),
            GroupRpc::Vote(r) => GroupResponse::Vote(raft.vote(r).await),
            GroupRpc::Snapshot(r) => GroupResponse::Snapshot(raft.install_snapshot(r).await),
            GroupRpc::Write(cmd) => GroupResponse::Write(match raft.client_write(cmd).await {
                Ok(r) => Ok(r.data),
                Err(e) => Err(refusal(&raft, e)),
            }),
            GroupRpc::Report => match self.report_here(group) {
                Some(r) => GroupResponse::Report(r),
                None => GroupResponse::NotMember,
            },
            GroupRpc::Members(members) => {
                GroupResponse::Members(change_members(raft, members).await)
            }
            GroupRpc::Hello { from } => {
                let (leading, leader) = {
                    let m = raft.metrics();
                    let m = m.borrow();
                    (m.state == ServerState::Leader, m.current_leader)
                };
                if leading {
                    let _ = raft.trigger().heartbeat().await;
                } else if leader == Some(from) {
                    // Its leader knows no leader: it restarted, and does not lead its old
                    // term again. The supervisor takes it for down in this group.
                    self.gone.insert(group, from);
                    self.woken.store(true, std::sync::atomic::Ordering::Release);
                }
                GroupResponse::Status {
                    leading,
                    leader,
                    last: self.last_log_id(group),
                }
            }
        }
    }
}

/// Makes `members` the voters of the group `raft` leads: the new ones added as learners
/// first (waiting until they have caught up), then one membership change.
async fn change_members(raft: GroupRaft, members: Vec<Member>) -> Result<(), Refused> {
    let voters: std::collections::BTreeSet<NodeId> = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    for m in members {
        let id = node_id(&m.name);
        ids.insert(id);
        if !voters.contains(&id) {
            raft.add_learner(id, m, true)
                .await
                .map_err(|e| refusal(&raft, e))?;
        }
    }
    if ids.is_empty() {
        return Err(Refused::Failed("a group needs a member".into()));
    }
    let me = raft.metrics().borrow().id;
    if !ids.contains(&me) {
        raft.runtime_config().tick(true);
    }
    raft.change_membership(ids, false)
        .await
        .map_err(|e| refusal(&raft, e))?;
    Ok(())
}

/// What the member `raft` runs reports of itself.
fn report_of(raft: &GroupRaft) -> MemberReport {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    let state = match m.state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    };
    MemberReport {
        state: state.into(),
        term: m.current_term,
        last_index: m.last_log_index,
        applied: m.last_applied.map(|l| l.index),
        snapshot: m.snapshot.map(|l| l.index),
        commit_latency: None,
    }
}
