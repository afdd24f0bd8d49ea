//! What nodes say to each other after the handshake: openraft's three RPCs, and the two
//! requests a follower sends its leader on a client's behalf (a write, the read index a
//! linearizable read waits for, a membership change), and requests between the core's own
//! halves on two nodes (queue operations forwarded to a queue's home node), opaque here; and
//! the same RPCs and forwarded writes for the replicated queues' groups, by group id.

use super::group_types::{GroupCommand, GroupConfig, GroupReply};
use super::types::{Command, Member, MetaConfig, NodeId, Reply};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::LogId;
use serde::{Deserialize, Serialize};

/// A request from one node to another.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// Raft's AppendEntries.
    Append(AppendEntriesRequest<MetaConfig>),
    /// Raft's RequestVote.
    Vote(VoteRequest<NodeId>),
    /// A chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<MetaConfig>),
    /// A command for the leader to propose.
    Write(Command),
    /// The leader's committed index, once it has confirmed it still leads.
    ReadIndex,
    /// Make this node a voting member (it asks to join the cluster).
    Join(Member),
    /// Remove node `id` from the members (forget_cluster_node).
    Forget(NodeId),
    /// Is the receiver up? (`running` in the management API's node list.)
    Ping,
    /// A request for the receiver's core (see [`super::node::AppHandler`]).
    App(#[serde(with = "serde_bytes")] Vec<u8>),
    /// A request to one of the receiver's replicated queue groups.
    Group {
        /// The group's id.
        group: u64,
        /// What for.
        rpc: GroupRpc,
    },
}

/// A request to a replicated queue group on another node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum GroupRpc {
    /// Raft's AppendEntries.
    Append(AppendEntriesRequest<GroupConfig>),
    /// Raft's RequestVote.
    Vote(VoteRequest<NodeId>),
    /// A chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<GroupConfig>),
    /// A command for the group's leader to propose.
    Write(GroupCommand),
    /// Make these nodes the group's voting members (adding new ones as learners first, who
    /// catch up before they vote), for the group's leader to carry out.
    Members(Vec<Member>),
    /// How the receiver's member is doing ([`MemberReport`]).
    Report,
    /// Who leads? (A member that knows no leader asks before it calls an election; a leader
    /// asked so sends its followers an append at once, which tells them. A follower asked
    /// so by the member it takes for its leader learns that it leads no longer: a leader
    /// that restarts does not lead its old term again.)
    Hello {
        /// The member asking.
        from: NodeId,
    },
}

/// The answer of a replicated queue group, of the request's kind.
#[derive(Debug, Serialize, Deserialize)]
pub enum GroupResponse {
    /// To `Append`.
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To `Vote`.
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To `Snapshot`.
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// To `Write`: what applying the entry did.
    Write(Result<GroupReply, Refused>),
    /// To `Report`.
    Report(MemberReport),
    /// To `Members`: done once the new membership is committed.
    Members(Result<(), Refused>),
    /// To `Hello`: whether the receiver leads the group, the leader it knows of, and the id
    /// of its last log entry (who has the longest log should be the one to call an election).
    Status {
        /// It leads.
        leading: bool,
        /// The leader it knows of (itself when it leads).
        leader: Option<NodeId>,
        /// Its last log entry's id.
        last: Option<LogId<NodeId>>,
    },
    /// The receiver runs no such group.
    NotMember,
}

/// One member of a group as it reports itself (RabbitMQ's `quorum_status` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    /// `leader`, `follower`, `candidate` or `learner`.
    pub state: String,
    /// Its current term.
    pub term: u64,
    /// Its last log entry's index.
    pub last_index: Option<u64>,
    /// The last index it knows committed (what it applied, for a follower).
    pub applied: Option<u64>,
    /// The last index its snapshot covers.
    pub snapshot: Option<u64>,
    /// How long its last write as the leader took to commit.
    pub commit_latency: Option<std::time::Duration>,
}

/// Why the leader did not carry out a forwarded request.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum Refused {
    /// The receiver does not lead (any more); the leader it knows of (id, address), if any.
    #[error("not the leader")]
    NotLeader(Option<(NodeId, String)>),
    /// The group failed the request.
    #[error("{0}")]
    Failed(String),
}

/// The answer to a [`Request`], of the same kind.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// To `Append`.
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To `Vote`.
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To `Snapshot`.
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// To `Write`: the entry's index and what applying it found.
    Write(Result<(u64, Reply), Refused>),
    /// To `ReadIndex`.
    ReadIndex(Result<u64, Refused>),
    /// To `Join` and `Forget`.
    Membership(Result<(), Refused>),
    /// To `Ping`: the receiver's node name.
    Pong(String),
    /// To `App`: the core's answer, or why the receiver could not hand it the request.
    App(Result<serde_bytes::ByteBuf, String>),
    /// To `Group`.
    Group(GroupResponse),
}
