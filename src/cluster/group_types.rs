//! The replicated queue groups' type configuration for openraft, and their commands and
//! replies: a group replicates a map from keys to opaque values (a quorum queue's messages and
//! what it keeps beside them), keys given in the order values are added.

use super::types::{Member, NodeId};
use serde::{Deserialize, Serialize};
use std::io::Cursor;

openraft::declare_raft_types!(
    /// openraft's types for a replicated queue's group.
    pub GroupConfig:
        D = GroupCommand,
        R = GroupReply,
        NodeId = NodeId,
        Node = Member,
        Entry = openraft::Entry<GroupConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A replicated queue group's Raft handle.
pub type GroupRaft = openraft::Raft<GroupConfig>;

/// One change to a group's map, as proposed to the group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupCommand {
    /// Adds a value under the group's next key (keys grow by one per added value).
    Add(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Sets the value at a key (keys below it are not given to `Add`s afterwards).
    Set(u64, #[serde(with = "serde_bytes")] Vec<u8>),
    /// Removes the values at these keys.
    Remove(Vec<u64>),
    /// Removes the values at keys `from..=to`.
    RemoveRange(u64, u64),
    /// Removes every value.
    Clear,
    /// Several commands applied as one entry, in order.
    Batch(Vec<GroupCommand>),
    /// The command, applied only if its entry was proposed in this term (by that term's
    /// leader); otherwise nothing, and the reply says `stale`. A queue's task writes so:
    /// its node may have stopped leading and led again between the task's check of the
    /// term and the proposal, and a write of a task started for an earlier term must not
    /// land after what the next task started from.
    InTerm(u64, Box<GroupCommand>),
}

/// What applying a command did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupReply {
    /// The keys the `Add`s got, in order.
    pub added: Vec<u64>,
    /// An [`GroupCommand::InTerm`] proposed in another term: nothing was applied.
    pub stale: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands as they were encoded before their values were marked as bytes.
    #[derive(Serialize)]
    enum Before {
        Add(Vec<u8>),
        Set(u64, Vec<u8>),
    }

    #[test]
    fn values_encode_as_they_did_when_they_were_a_sequence_of_bytes() {
        let value: Vec<u8> = (0..=255).chain(0..40).collect();
        let now = GroupCommand::Set(7, value.clone());
        let then = Before::Set(7, value.clone());
        let bytes = super::super::codec::encode(&now).expect("encodes");
        assert_eq!(bytes, super::super::codec::encode(&then).expect("encodes"));
        let again: GroupCommand = super::super::codec::decode(&bytes).expect("decodes");
        assert_eq!(again, now);
        let add = super::super::codec::encode(&GroupCommand::Add(value.clone())).expect("encodes");
        assert_eq!(
            add,
            super::super::codec::encode(&Before::Add(value)).expect("encodes")
        );
    }
}
