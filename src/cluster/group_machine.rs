//! A replicated queue group's state machine: committed commands applied to the group's map in
//! the store (`store::group_values`), each applied batch in one write with the applied log id,
//! the membership and the next key beside it, handed to the store's writer without waiting
//! (the log holds what is not yet durable here; after a crash the log is applied again from
//! the last committed point). Only the applied point, membership and next key are in memory:
//! values are read from the store when the core needs them.
//!
//! A snapshot is the group's map as last committed, with the applied point committed beside
//! it (one read transaction), so a snapshot never claims more than it holds.

use super::codec;
use super::group_types::{GroupCommand, GroupConfig, GroupReply};
use super::log_store::read_state;
use super::types::{Member, NodeId};
use crate::store::{GroupChange, RaftState, Store};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{Entry, EntryPayload, LogId, StorageError, StorageIOError, StoredMembership};
use std::io::Cursor;

/// A snapshot's data: the next key and every (key, value).
type Image = (u64, Vec<(u64, Vec<u8>)>);

/// The state machine of one replicated queue group.
pub struct GroupMachine {
    store: Store,
    group: u64,
    applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
    next_key: u64,
}

fn read_err(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(e).into()
}

fn write_err(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(e).into()
}

impl GroupMachine {
    /// The state machine of `group`, as the store last committed it.
    pub fn open(store: Store, group: u64) -> Result<GroupMachine, StorageError<NodeId>> {
        Ok(GroupMachine {
            applied: read_state(&store, group, RaftState::Applied)?.flatten(),
            membership: read_state(&store, group, RaftState::Membership)?.unwrap_or_default(),
            next_key: read_state(&store, group, RaftState::NextKey)?.unwrap_or(1),
            store,
            group,
        })
    }

    fn state_values(&self) -> Result<Vec<(RaftState, Vec<u8>)>, StorageError<NodeId>> {
        Ok(vec![
            (
                RaftState::Applied,
                codec::encode(&self.applied).map_err(|e| write_err(&e))?,
            ),
            (
                RaftState::Membership,
                codec::encode(&self.membership).map_err(|e| write_err(&e))?,
            ),
            (
                RaftState::NextKey,
                codec::encode(&self.next_key).map_err(|e| write_err(&e))?,
            ),
        ])
    }

    /// Applies `cmd`, of an entry proposed in `term`.
    fn apply_command(
        &mut self,
        cmd: GroupCommand,
        term: u64,
        ops: &mut Vec<GroupChange>,
        reply: &mut GroupReply,
    ) {
        match cmd {
            GroupCommand::Add(value) => {
                let key = self.next_key;
                self.next_key = self.next_key.saturating_add(1);
                ops.push(GroupChange::Put(key, value));
                reply.added.push(key);
            }
            GroupCommand::Set(key, value) => {
                self.next_key = self.next_key.max(key.saturating_add(1));
                ops.push(GroupChange::Put(key, value));
            }
            GroupCommand::Remove(keys) => ops.extend(keys.into_iter().map(GroupChange::Delete)),
            GroupCommand::RemoveRange(from, to) => ops.push(GroupChange::DeleteRange(from, to)),
            GroupCommand::Clear => ops.push(GroupChange::Clear),
            GroupCommand::Batch(cmds) => {
                for c in cmds {
                    self.apply_command(c, term, ops, reply);
                }
            }
            GroupCommand::InTerm(of, cmd) if of == term => {
                self.apply_command(*cmd, term, ops, reply)
            }
            GroupCommand::InTerm(..) => reply.stale = true,
        }
    }
}

/// A snapshot's description and its data.
type Built = (SnapshotMeta<NodeId, Member>, Vec<u8>);

/// Builds snapshots from what the store last committed.
pub struct GroupSnapshots {
    store: Store,
    group: u64,
}

fn decode<T: serde::de::DeserializeOwned>(
    bytes: Option<Vec<u8>>,
) -> Result<Option<T>, StorageError<NodeId>> {
    Ok(match bytes {
        Some(b) => Some(codec::decode(&b).map_err(|e| read_err(&e))?),
        None => None,
    })
}

fn snapshot_of(meta: SnapshotMeta<NodeId, Member>, data: Vec<u8>) -> Snapshot<GroupConfig> {
    Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data)),
    }
}

impl GroupSnapshots {
    /// The group's current snapshot: its map and the state committed with it.
    fn current(&self) -> Result<Built, StorageError<NodeId>> {
        let image = self
            .store
            .group_image(self.group)
            .map_err(|e| read_err(&e))?;
        let applied: Option<LogId<NodeId>> = decode(image.applied)?.flatten();
        let membership: StoredMembership<NodeId, Member> =
            decode(image.membership)?.unwrap_or_default();
        let next_key: u64 = decode(image.next_key)?.unwrap_or(1);
        let data = codec::encode(&(next_key, image.values))
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let snapshot_id = match applied {
            Some(id) => format!("{}-{}-{}", self.group, id.leader_id, id.index),
            None => format!("{}-empty", self.group),
        };
        Ok((
            SnapshotMeta {
                last_log_id: applied,
                last_membership: membership,
                snapshot_id,
            },
            data,
        ))
    }
}

impl RaftSnapshotBuilder<GroupConfig> for GroupSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<GroupConfig>, StorageError<NodeId>> {
        // What the writer was handed before this point is part of the image.
        self.store.sync().await;
        let (meta, data) = self.current()?;
        Ok(snapshot_of(meta, data))
    }
}

impl RaftStateMachine<GroupConfig> for GroupMachine {
    type SnapshotBuilder = GroupSnapshots;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Member>), StorageError<NodeId>>
    {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<GroupReply>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<GroupConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut replies = Vec::new();
        let mut ops = Vec::new();
        for entry in entries {
            let mut reply = GroupReply::default();
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(cmd) => {
                    let term = entry.log_id.leader_id.term;
                    self.apply_command(cmd, term, &mut ops, &mut reply)
                }
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m);
                }
            }
            self.applied = Some(entry.log_id);
            replies.push(reply);
        }
        let state = self.state_values()?;
        self.store.apply_group_values(self.group, ops, state);
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> GroupSnapshots {
        GroupSnapshots {
            store: self.store.clone(),
            group: self.group,
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let sig = Some(meta.signature());
        let (next_key, values): Image = codec::decode(&snapshot.into_inner())
            .map_err(|e| StorageIOError::read_snapshot(sig.clone(), &e))?;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.next_key = next_key;
        let state = self.state_values()?;
        if !self
            .store
            .replace_group_values(self.group, values, state)
            .await
        {
            let e = std::io::Error::other("the store could not commit the snapshot");
            return Err(StorageIOError::write_snapshot(sig, &e).into());
        }
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<GroupConfig>>, StorageError<NodeId>> {
        self.store.sync().await;
        let (meta, data) = GroupSnapshots {
            store: self.store.clone(),
            group: self.group,
        }
        .current()?;
        Ok(meta.last_log_id.map(|_| snapshot_of(meta, data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn entry(term: u64, index: u64, cmd: GroupCommand) -> Entry<GroupConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    fn fenced(term: u64, key: u64) -> GroupCommand {
        GroupCommand::InTerm(term, Box::new(GroupCommand::Set(key, vec![key as u8])))
    }

    /// A queue task's write proposed after its node stopped leading and led again (in a
    /// later term than the task's) is not applied, on any member: every member sees the
    /// same entry's term.
    #[tokio::test]
    async fn a_write_fenced_to_a_term_applies_only_in_it() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
        let mut sm = GroupMachine::open(store.clone(), 7).expect("machine");
        let replies = sm
            .apply(vec![
                entry(3, 1, fenced(3, 5)),
                entry(5, 2, fenced(3, 6)),
                entry(5, 3, fenced(5, 7)),
                entry(5, 4, GroupCommand::Set(8, vec![8])),
            ])
            .await
            .expect("applies");
        let stale: Vec<bool> = replies.iter().map(|r| r.stale).collect();
        assert_eq!(stale, [false, true, false, false]);
        store.sync().await;
        let keys: Vec<u64> = store
            .group_image(7)
            .expect("image")
            .values
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, [5, 7, 8]);
        assert_eq!(sm.applied.map(|l| l.index), Some(4));
    }
}
