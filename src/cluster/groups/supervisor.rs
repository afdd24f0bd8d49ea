//! The groups' supervisor (#18): groups send no heartbeats and call no elections on their
//! own timers, so one task per node watches the groups it is a member of: each [`TICK`] it
//! pings the nodes leading them, and it looks at every group only when that finds a node
//! down, when its last look left something to do, or every [`SWEEP`].
//! A group this node leads gets its leading hook run once per term ([`Groups::settle`]); a
//! group whose leader's node does not answer a ping (one per node and tick, not per group),
//! that knows no leader, or whose leader asked who leads (a restarted leader does not lead
//! its old term again) gets an election, called by its members in a per-group order: the
//! preferred member first, then the others ranked by [`rank_key`], each rank waiting
//! [`RANK_STEP`] longer than the one before, and only a member with the longest log.

use super::{Groups, ELECTION_TIMEOUT};
use crate::cluster::group_types::{self as types, GroupRaft};
use crate::cluster::log_store::LogStore;
use crate::cluster::messages::{GroupResponse, GroupRpc, Request, Response};
use crate::cluster::types::{Member, NodeId};
use openraft::ServerState;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often the supervisor looks at every group this node is a member of.
pub(super) const TICK: Duration = Duration::from_millis(250);
/// How long a leader node's ping may take before it counts as down.
pub(super) const PING_TIMEOUT: Duration = Duration::from_millis(250);
/// How long each rank waits after the one before it before calling an election.
const RANK_STEP: Duration = Duration::from_millis(500);
/// How often every group is looked at when nothing calls for it sooner: between looks only
/// the nodes leading this node's groups are pinged. (A leader that steps down with its node
/// up, removed from its group, is found by this look.)
const SWEEP: Duration = Duration::from_secs(2);

/// What the supervisor's last look at every group found.
#[derive(Default)]
pub(super) struct Look {
    /// When it was.
    at: Option<Instant>,
    /// The nodes leading groups this node follows, which answered then.
    leaders: HashMap<NodeId, Member>,
    /// A group wants another look at once: it has no leader that answers, or this node
    /// leads it and the core has not taken it over in this term yet.
    busy: bool,
    /// How many groups it looked at.
    groups: usize,
}

/// A rank of `id` among a group's members that differs from group to group, so the first to
/// call an election is not always the same node.
fn rank_key(group: u64, id: NodeId) -> u64 {
    (group ^ id)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(29)
}

impl Groups {
    /// Keeps every group led, until the groups are dropped: each tick, a group whose leader's
    /// node does not answer a ping (or that knows no leader and finds none among its members)
    /// gets an election, called by its members in a per-group order, each rank waiting
    /// [`RANK_STEP`] longer than the one before. Every group is looked at only when
    /// something calls for it ([`Groups::look_due`]); otherwise a tick pings the leaders'
    /// nodes and nothing more, whatever the number of groups.
    pub fn supervise(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last = Look::default();
            loop {
                tokio::time::sleep(TICK).await;
                let Some(groups) = weak.upgrade() else {
                    return;
                };
                if groups.look_due(&last).await {
                    last = groups.look().await;
                }
            }
        });
    }

    /// Whether every group is to be looked at now: the last look is [`SWEEP`] old or found
    /// a group wanting another, groups were started or stopped or want one since
    /// ([`Groups::unsettle`]), or a node that led groups then does not answer now.
    async fn look_due(&self, last: &Look) -> bool {
        if last.busy
            || last.at.is_none_or(|at| at.elapsed() >= SWEEP)
            || last.groups != self.map.len()
            || self.woken.swap(false, std::sync::atomic::Ordering::AcqRel)
            || !self.leaderless.is_empty()
        {
            return true;
        }
        for (id, member) in &last.leaders {
            if !self.ping(*id, member).await {
                return true;
            }
        }
        false
    }

    /// Looks at every group: elections where due, the leading hook where this node leads.
    async fn look(&self) -> Look {
        let mut look = Look {
            at: Some(Instant::now()),
            groups: self.map.len(),
            ..Look::default()
        };
        let mut alive: HashMap<NodeId, bool> = HashMap::new();
        let groups: Vec<(u64, GroupRaft)> = self
            .map
            .iter()
            .map(|e| (*e.key(), e.value().clone()))
            .collect();
        for (group, raft) in groups {
            // Cheap for the common cases (this node leads, or its leader answers): the voter
            // list is built only when an election may be needed.
            let (state, leader, formed) = {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                let membership = m.membership_config.membership();
                let leader = m
                    .current_leader
                    .filter(|l| membership.voter_ids().any(|v| v == *l));
                (m.state, leader, membership.voter_ids().next().is_some())
            };
            let gone = self.gone.get(&group).map(|g| *g);
            if gone.is_some() && (gone != leader || state == ServerState::Leader) {
                self.gone.remove(&group);
            }
            if state == ServerState::Leader {
                self.leaderless.remove(&group);
                look.busy |= !self.settle(group, &raft);
                continue;
            }
            if !formed {
                // Not formed yet: it learns its members from its leader's first append.
                continue;
            }
            let leader_up = match leader {
                // It asked who leads: it does not.
                Some(id) if gone == Some(id) => false,
                Some(id) => match alive.get(&id) {
                    Some(up) => *up,
                    None => {
                        let member = raft
                            .metrics()
                            .borrow()
                            .membership_config
                            .membership()
                            .get_node(&id)
                            .cloned();
                        let up = match member {
                            Some(member) => {
                                let up = self.ping(id, &member).await;
                                if up {
                                    look.leaders.insert(id, member);
                                }
                                up
                            }
                            None => false,
                        };
                        alive.insert(id, up);
                        up
                    }
                },
                None => false,
            };
            if leader_up {
                self.leaderless.remove(&group);
                continue;
            }
            let voters: Vec<(NodeId, Member)> = {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                let membership = m.membership_config.membership();
                membership
                    .voter_ids()
                    .filter_map(|id| membership.get_node(&id).map(|n| (id, n.clone())))
                    .collect()
            };
            look.busy = true;
            self.maybe_elect(group, &raft, leader, &voters).await;
        }
        look
    }

    /// Makes the leading hook run again for `group` (on the supervisor's next tick, if this
    /// node still leads it): the core's state of the group's queue needs rebuilding.
    pub fn unsettle(&self, group: u64) {
        self.settled.remove(&group);
        self.woken.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Runs the leading hook for `group`, which this node leads, unless it answered true in
    /// this term or is running; whether it answered true in this term.
    fn settle(&self, group: u64, raft: &GroupRaft) -> bool {
        let Some(hook) = self.leading_hook.get().cloned() else {
            return true;
        };
        let term = raft.metrics().borrow().current_term;
        if self.settled.get(&group).is_some_and(|t| *t == term) {
            return true;
        }
        if !self.settling.insert(group) {
            return false;
        }
        let (settled, settling) = (self.settled.clone(), self.settling.clone());
        tokio::spawn(async move {
            if hook(group).await {
                settled.insert(group, term);
            }
            settling.remove(&group);
        });
        false
    }

    /// Calls an election in `group`, which has no leader that answers, when this node's turn
    /// has come: no other voter leads, none has a longer log, and those with as long a log
    /// ranked before it had their chance.
    async fn maybe_elect(
        &self,
        group: u64,
        raft: &GroupRaft,
        leader: Option<NodeId>,
        voters: &[(NodeId, Member)],
    ) {
        if !voters.iter().any(|(id, _)| *id == self.me) {
            // No longer a voting member (being removed): it calls no election.
            return;
        }
        // Its own vote would not wait for the lease the others keep (see [`LEADER_LEASE`]):
        // no election within it of hearing from a leader, nor of booting (what it heard
        // before is forgotten).
        let lease = ELECTION_TIMEOUT.1;
        let heard = self.heard.get(&group).map(|t| *t);
        if self.booted.elapsed() < lease || heard.is_some_and(|t| t.elapsed() < lease) {
            return;
        }
        let since = *self.leaderless.entry(group).or_insert_with(Instant::now);
        if Instant::now() < since {
            return;
        }
        let mine = self.last_log_id(group);
        let mut best = vec![(self.me, mine)];
        let preferred = self.preferred.get(&group).map(|p| *p);
        // Whether the preferred member knows no leader either (so it calls elections itself).
        let mut preferred_leaderless = false;
        let hello = Request::Group {
            group,
            rpc: GroupRpc::Hello { from: self.me },
        };
        // A leader that asked who leads is asked too: it may have the longest log.
        let gone = leader.is_some() && self.gone.get(&group).map(|g| *g) == leader;
        for (id, member) in voters
            .iter()
            .filter(|(id, _)| *id != self.me && (Some(*id) != leader || gone))
        {
            let answer = self
                .peers
                .get(*id, &member.addr)
                .call(&hello, PING_TIMEOUT)
                .await;
            if let Ok(Response::Group(GroupResponse::Status {
                leading,
                leader,
                last,
            })) = answer
            {
                if leading {
                    // It tells this node by an append.
                    self.leaderless.remove(&group);
                    self.gone.remove(&group);
                    return;
                }
                preferred_leaderless |= Some(*id) == preferred && leader.is_none();
                best.push((*id, last));
            }
        }
        let longest = best.iter().map(|(_, last)| *last).max().flatten();
        if mine < longest {
            return;
        }
        let mut ranked: Vec<NodeId> = best
            .iter()
            .filter(|(_, last)| *last == mine)
            .map(|(id, _)| *id)
            .collect();
        if preferred_leaderless && preferred.is_some_and(|p| ranked.contains(&p)) {
            // The queue's node answers, knows no leader and has as long a log: it keeps
            // calling elections until it leads (a loaded node may need more than one round).
            // One that still follows a leader which has stepped down (a group sends no
            // heartbeats to tell it) calls none: then the ranks below go.
            return;
        }
        ranked.sort_by_key(|id| (Some(*id) != preferred, rank_key(group, *id)));
        let rank = ranked.iter().position(|id| *id == self.me).unwrap_or(0);
        if Instant::now() < since + RANK_STEP * u32::try_from(rank).unwrap_or(u32::MAX) {
            return;
        }
        tracing::info!(group, rank, "calling an election in a queue group");
        let _ = raft.trigger().elect().await;
        // If this one fails (a member still in its lease refused), try again soon.
        self.leaderless.insert(group, Instant::now() + RANK_STEP);
    }

    pub(super) fn last_log_id(&self, group: u64) -> Option<openraft::LogId<NodeId>> {
        LogStore::<types::GroupConfig>::new(self.store.clone(), group)
            .last_log_id()
            .ok()
            .flatten()
    }

    /// Whether `member` answers a ping in time.
    async fn ping(&self, id: NodeId, member: &Member) -> bool {
        matches!(
            self.peers.get(id, &member.addr).call(&Request::Ping, PING_TIMEOUT).await,
            Ok(Response::Pong(name)) if name == member.name
        )
    }
}
