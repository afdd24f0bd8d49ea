//! A quorum queue's membership changed by operators (#18): RabbitMQ's `add_member`,
//! `delete_member`, `grow`, `shrink` and `quorum_status`. The group's membership is changed
//! through its leader (a new member joins as a learner and votes once it has caught up) and
//! the queue's record follows, so every node knows the members: a node added starts its
//! member when it applies the record, a node removed stops its member and wipes its copy.
//! Records are rewritten only from what was read ([`rewrite`]), so a change racing with a
//! new leader's takeover is read again, never lost.

use super::queue_record::{decode_queue, queue_path, QueueDef, Quorum, QUEUES};
use super::{unavailable, VHOSTS};
use crate::broker::Broker;
use crate::cluster::messages::MemberReport;
use crate::cluster::types::{Command, Member};
use crate::cluster::{ClusterError, MetaNode};
use crate::error::{CoreError, CoreResult, Kind};
use std::sync::Arc;

/// How many times a record rewrite is tried again after another change got there first.
const REWRITE_TRIES: usize = 20;

/// What `grow` or `shrink` did to one queue: its vhost, its name, and its member count
/// after, or why it was left.
#[derive(Debug, Clone)]
pub struct MemberChange {
    /// The queue's vhost.
    pub vhost: String,
    /// The queue.
    pub name: String,
    /// Its members after, or the error.
    pub result: Result<usize, String>,
}

/// One member of a quorum queue's group as `quorum_status` shows it.
#[derive(Debug, Clone)]
pub struct MemberStatusRow {
    /// The member's node.
    pub node: String,
    /// What it reports; None when it does not answer.
    pub report: Option<MemberReport>,
}

/// One quorum queue member of this node, as Prometheus shows it.
#[derive(Debug, Clone)]
pub struct RaftSeries {
    /// The queue's vhost.
    pub vhost: String,
    /// The queue.
    pub name: String,
    /// What its member reports.
    pub report: MemberReport,
}

/// Which queues `grow` adds a member to: `all`, or those with an `even` number of members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrowStrategy {
    /// Every matching queue.
    All,
    /// Matching queues with an even number of members.
    Even,
}

impl std::str::FromStr for GrowStrategy {
    type Err = CoreError;
    fn from_str(s: &str) -> CoreResult<GrowStrategy> {
        match s {
            "all" => Ok(GrowStrategy::All),
            "even" => Ok(GrowStrategy::Even),
            other => Err(CoreError::Internal(format!(
                "strategy must be 'all' or 'even', not '{other}'"
            ))),
        }
    }
}

/// Rewrites the record of `vhost`/`name` with `change` (None: nothing to do) as long as it
/// still holds what `change` read, reading again when another change got there first.
/// Answers the record as written (or as found when there was nothing to do); None when the
/// queue is gone.
pub(super) async fn rewrite(
    node: &Arc<MetaNode>,
    vhost: &str,
    name: &str,
    change: impl Fn(&QueueDef) -> Option<QueueDef>,
) -> Result<Option<QueueDef>, ClusterError> {
    let path = queue_path(vhost, name);
    for _ in 0..REWRITE_TRIES {
        let Some(old) = node.read(|t| t.get(&path).cloned()) else {
            return Ok(None);
        };
        let Some(def) = decode_queue(&old) else {
            return Ok(None);
        };
        let Some(new) = change(&def) else {
            return Ok(Some(def));
        };
        let cmd = Command::IfEquals {
            path: path.clone(),
            value: old.clone(),
            then: vec![Command::Put {
                path: path.clone(),
                value: new.encode(),
            }],
        };
        let reply = node.write(cmd).await?;
        match reply.before.first() {
            Some(Some(found)) if *found == old => return Ok(Some(new)),
            Some(None) => return Ok(None),
            _ => {}
        }
    }
    Err(ClusterError::Refused(format!(
        "the record of queue '{name}' in vhost '{vhost}' kept changing"
    )))
}

/// The inter-node addresses of the members named.
pub(super) fn members_named(node: &MetaNode, names: &[String]) -> Vec<Member> {
    node.members()
        .into_iter()
        .map(|(m, _)| m)
        .filter(|m| names.contains(&m.name))
        .collect()
}

/// `def` without the member on `member` (None when it has none there).
fn without(def: &QueueDef, member: &str) -> Option<QueueDef> {
    let mut d = def.clone();
    let q = d.quorum.as_mut()?;
    let before = q.members.len();
    q.members.retain(|m| m != member);
    (q.members.len() != before).then_some(d)
}

/// A reason as RabbitMQ gives it (`{error, Reason}` rendered).
fn refused(reason: &str) -> CoreError {
    CoreError::Unavailable(reason.to_owned())
}

impl Broker {
    /// The group and members of the quorum queue `vhost`/`name`, as the tree has them.
    fn quorum_of(&self, node: &MetaNode, vhost: &str, name: &str) -> CoreResult<Quorum> {
        let def = node
            .read(|t| {
                t.get(&queue_path(vhost, name))
                    .and_then(|v| decode_queue(v))
            })
            .ok_or_else(|| CoreError::NotFound {
                kind: Kind::Queue,
                name: name.to_owned(),
                vhost: vhost.to_owned(),
            })?;
        def.quorum
            .ok_or_else(|| refused("classic_queue_not_supported"))
    }

    fn cluster_node(&self) -> CoreResult<Arc<MetaNode>> {
        self.cluster
            .get()
            .ok_or_else(|| refused("not_clustered: this node runs no cluster"))
    }

    /// Adds a member on `member` (a running node of the cluster) to the quorum queue
    /// `vhost`/`name`; nothing to do when it has one there. Done once the member has caught
    /// up and votes.
    pub async fn quorum_add_member(&self, vhost: &str, name: &str, member: &str) -> CoreResult<()> {
        let node = self.cluster_node()?;
        let quorum = self.quorum_of(&node, vhost, name)?;
        let running = node
            .member_status(std::time::Duration::from_millis(500))
            .await
            .into_iter()
            .any(|m| m.running && m.member.name == member);
        if !running {
            return Err(refused("node_not_running"));
        }
        if quorum.members.iter().any(|m| m == member) {
            return Ok(());
        }
        // The record first: the new node starts its member when it applies it, so the
        // leader has someone to bring up to date.
        let joined = rewrite(&node, vhost, name, |d| {
            let mut d = d.clone();
            let q = d.quorum.as_mut()?;
            if q.members.iter().any(|m| m == member) {
                return None;
            }
            q.members.push(member.to_owned());
            Some(d)
        })
        .await
        .map_err(unavailable)?;
        let Some(members) = joined.and_then(|d| d.quorum).map(|q| q.members) else {
            return Err(self
                .quorum_of(&node, vhost, name)
                .err()
                .unwrap_or_else(|| refused("the queue changed while a member was added")));
        };
        let changed = node
            .groups()
            .set_members(
                quorum.group,
                members_named(&node, &members),
                &members_named(&node, &quorum.members),
            )
            .await;
        if let Err(e) = changed {
            // Undo the record (the group did not take the member).
            let _ = rewrite(&node, vhost, name, |d| without(d, member)).await;
            return Err(unavailable(e));
        }
        tracing::info!(queue = %name, vhost = %vhost, node = %member, "added a quorum queue member");
        Ok(())
    }

    /// Removes the member on `member` from the quorum queue `vhost`/`name` (its copy is
    /// wiped); nothing to do when it has none there. The last member cannot go
    /// (`last_node`). When it led, the others elect a leader, which takes the queue over.
    pub async fn quorum_delete_member(
        &self,
        vhost: &str,
        name: &str,
        member: &str,
    ) -> CoreResult<()> {
        let node = self.cluster_node()?;
        let quorum = self.quorum_of(&node, vhost, name)?;
        if !quorum.members.iter().any(|m| m == member) {
            return Ok(());
        }
        let remaining: Vec<String> = quorum
            .members
            .iter()
            .filter(|m| *m != member)
            .cloned()
            .collect();
        if remaining.is_empty() {
            return Err(refused("last_node"));
        }
        // The group first: the record never names fewer members than vote.
        node.groups()
            .set_members(
                quorum.group,
                members_named(&node, &remaining),
                &members_named(&node, &quorum.members),
            )
            .await
            .map_err(unavailable)?;
        rewrite(&node, vhost, name, |d| without(d, member))
            .await
            .map_err(unavailable)?;
        tracing::info!(queue = %name, vhost = %vhost, node = %member, "deleted a quorum queue member");
        Ok(())
    }

    /// Every quorum queue in the tree: (vhost, name, group and members).
    fn quorum_queues(&self, node: &MetaNode) -> Vec<(String, String, Quorum)> {
        node.read(|t| {
            t.children(&[VHOSTS.to_string()])
                .filter_map(|(path, value)| match path.as_slice() {
                    [_, vhost, kind, name] if kind == QUEUES => {
                        let q = decode_queue(value)?.quorum?;
                        Some((vhost.clone(), name.clone(), q))
                    }
                    _ => None,
                })
                .collect()
        })
    }

    /// The Raft figures of every quorum queue member this node runs, by queue (Prometheus'
    /// `rabbitmq_raft_*` families).
    pub fn quorum_raft_series(&self) -> Vec<RaftSeries> {
        let Some(node) = self.cluster.get() else {
            return Vec::new();
        };
        self.quorum_queues(&node)
            .into_iter()
            .filter_map(|(vhost, name, q)| {
                let report = node.groups().report_here(q.group)?;
                Some(RaftSeries {
                    vhost,
                    name,
                    report,
                })
            })
            .collect()
    }

    /// Adds a member on `member` to every quorum queue whose vhost matches `vhost_pattern`
    /// and name `queue_pattern` (regular expressions), has none there, and suits `strategy`
    /// (RabbitMQ's `grow`).
    pub async fn quorum_grow(
        &self,
        member: &str,
        vhost_pattern: &str,
        queue_pattern: &str,
        strategy: GrowStrategy,
    ) -> CoreResult<Vec<MemberChange>> {
        let node = self.cluster_node()?;
        let pattern = |p: &str| {
            regex::Regex::new(p).map_err(|e| CoreError::Internal(format!("bad pattern: {e}")))
        };
        let (vhosts, queues) = (pattern(vhost_pattern)?, pattern(queue_pattern)?);
        let mut out = Vec::new();
        for (vhost, name, Quorum { members, .. }) in self.quorum_queues(&node) {
            let suits = match strategy {
                GrowStrategy::All => true,
                GrowStrategy::Even => members.len() % 2 == 0,
            };
            if !suits
                || members.iter().any(|m| m == member)
                || !vhosts.is_match(&vhost)
                || !queues.is_match(&name)
            {
                continue;
            }
            let result = self
                .quorum_add_member(&vhost, &name, member)
                .await
                .map(|()| members.len() + 1)
                .map_err(|e| e.to_string());
            out.push(MemberChange {
                vhost,
                name,
                result,
            });
        }
        Ok(out)
    }

    /// Removes the member on `member` from every quorum queue that has one there (RabbitMQ's
    /// `shrink`); a queue whose only member it is keeps it (`last_node`).
    pub async fn quorum_shrink(&self, member: &str) -> CoreResult<Vec<MemberChange>> {
        let node = self.cluster_node()?;
        let mut out = Vec::new();
        for (vhost, name, Quorum { members, .. }) in self.quorum_queues(&node) {
            if !members.iter().any(|m| m == member) {
                continue;
            }
            let result = self
                .quorum_delete_member(&vhost, &name, member)
                .await
                .map(|()| members.len() - 1)
                .map_err(|e| e.to_string());
            out.push(MemberChange {
                vhost,
                name,
                result,
            });
        }
        Ok(out)
    }

    /// Each member of the quorum queue `vhost`/`name` as it reports itself (RabbitMQ's
    /// `quorum_status`), by node name.
    pub async fn quorum_member_status(
        &self,
        vhost: &str,
        name: &str,
    ) -> CoreResult<Vec<MemberStatusRow>> {
        let node = self.cluster_node()?;
        let quorum = self.quorum_of(&node, vhost, name)?;
        let mut names = quorum.members.clone();
        names.sort();
        let members = members_named(&node, &names);
        let mut out = Vec::new();
        for n in names {
            let report = match members.iter().find(|m| m.name == n) {
                Some(m) => node.groups().report(quorum.group, m).await,
                None => None,
            };
            out.push(MemberStatusRow { node: n, report });
        }
        Ok(out)
    }
}
