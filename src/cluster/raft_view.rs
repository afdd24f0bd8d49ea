//! What a node reads off any of its Raft groups (the metadata group's or a queue's): the
//! leader it knows of, the members, and a write refusal in the form peers are told.

use super::messages::Refused;
use super::types::{Member, NodeId};
use openraft::error::{ForwardToLeader, RaftError};
use openraft::{Raft, RaftTypeConfig};
use std::collections::BTreeSet;

/// The leader `raft` knows of (id, inter-node address).
pub fn leader_of<C: RaftTypeConfig<NodeId = NodeId, Node = Member>>(
    raft: &Raft<C>,
) -> Option<(NodeId, String)> {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    let id = m.current_leader?;
    let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
    Some((id, addr))
}

/// The members and whether each votes, as `raft` last applied them, by name.
pub fn members_of<C: RaftTypeConfig<NodeId = NodeId, Node = Member>>(
    raft: &Raft<C>,
) -> Vec<(Member, bool)> {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let mut out: Vec<(Member, bool)> = membership
        .nodes()
        .map(|(id, n)| (n.clone(), voters.contains(id)))
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    out
}

/// Why `raft` did not carry out a request: not the leader (the one it knows of), or failed.
pub fn refusal<C, E>(raft: &Raft<C>, e: RaftError<NodeId, E>) -> Refused
where
    C: RaftTypeConfig<NodeId = NodeId, Node = Member>,
    E: std::error::Error + openraft::TryAsRef<ForwardToLeader<NodeId, Member>>,
{
    match e.forward_to_leader() {
        Some(f) => Refused::NotLeader(
            f.leader_id
                .zip(f.leader_node.as_ref().map(|n| n.addr.clone()))
                .or_else(|| leader_of(raft)),
        ),
        None => Refused::Failed(e.to_string()),
    }
}
