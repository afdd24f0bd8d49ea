//! openraft's log storage for a Raft group (the metadata group's or a replicated queue's: any
//! type configuration with our node ids), on the store's Raft log tables: entries, the vote and
//! the last purged log id as postcard bytes under the group's id.
//!
//! An append returns once the store's writer has the entries, and reports their flush through
//! openraft's callback when the writer has committed them. Until then the group's log readers
//! find them in [`Unflushed`] (the store's readers see committed state only), so a leader
//! replicates entries while it flushes them; the vendored openraft counts them towards a
//! commit on the leader only once flushed, and a follower still answers an append only after
//! its flush. The store's writer serialises appends, votes, truncations and purges in
//! submission order, which is the ordering openraft requires of log I/O.

use super::codec;
use super::types::NodeId;
use super::unflushed::Unflushed;
use crate::store::{RaftState, Store};
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, RaftLogId, RaftTypeConfig, StorageError, StorageIOError, Vote};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

/// A type configuration whose log this store can hold (its entries are copied for readers
/// while they are being flushed).
pub trait Logged: RaftTypeConfig<NodeId = NodeId, Entry = Entry<Self>, D: Clone> {}

impl<C: RaftTypeConfig<NodeId = NodeId, Entry = Entry<C>, D: Clone>> Logged for C {}

/// The log of one Raft group.
pub struct LogStore<C: Logged> {
    store: Store,
    group: u64,
    /// Appended entries the writer has not committed yet (shared with the readers).
    unflushed: Unflushed<Entry<C>>,
}

impl<C: Logged> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            store: self.store.clone(),
            group: self.group,
            unflushed: self.unflushed.clone(),
        }
    }
}

impl<C: Logged> LogStore<C> {
    /// The log of `group` in `store`.
    pub fn new(store: Store, group: u64) -> LogStore<C> {
        LogStore {
            store,
            group,
            unflushed: Unflushed::default(),
        }
    }

    fn purged(&self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        read_state(&self.store, self.group, RaftState::Purged)
    }
}

/// One of `group`'s state values, decoded (the log's and the state machine's alike).
pub(super) fn read_state<T: serde::de::DeserializeOwned>(
    store: &Store,
    group: u64,
    key: RaftState,
) -> Result<Option<T>, StorageError<NodeId>> {
    let failed = |e: &dyn std::fmt::Display| -> StorageError<NodeId> {
        StorageIOError::read(&std::io::Error::other(format!("raft state {key:?}: {e}"))).into()
    };
    match store.raft_state(group, key).map_err(|e| failed(&e))? {
        Some(bytes) => Ok(Some(codec::decode(&bytes).map_err(|e| failed(&e))?)),
        None => Ok(None),
    }
}

fn io_failed(what: &str) -> std::io::Error {
    std::io::Error::other(format!("the store could not commit {what}"))
}

impl<C: Logged> RaftLogReader<C> for LogStore<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<C>>, StorageError<NodeId>> {
        let from = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&0) => return Ok(Vec::new()),
            Bound::Excluded(&i) => i - 1,
            Bound::Unbounded => u64::MAX,
        };
        if from > to {
            return Ok(Vec::new());
        }
        // Before the store: what the writer commits meanwhile is then in the store.
        let mut entries = self.unflushed.range(from, to);
        let raw = self
            .store
            .read_log(self.group, from..=to)
            .map_err(|e| StorageIOError::read_logs(&e))?;
        for (index, bytes) in &raw {
            if !entries.contains_key(index) {
                let entry = codec::decode(bytes).map_err(|e| StorageIOError::read_logs(&e))?;
                entries.insert(*index, entry);
            }
        }
        Ok(entries.into_values().collect())
    }
}

impl<C: Logged> LogStore<C> {
    /// The id of the last entry in the log (or of the last one purged).
    pub fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        if let Some(id) = self.unflushed.last() {
            return Ok(Some(id));
        }
        let last = self
            .store
            .last_log(self.group)
            .map_err(|e| StorageIOError::read_logs(&e))?;
        match last {
            Some((_, bytes)) => {
                let entry: Entry<C> =
                    codec::decode(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
                Ok(Some(*entry.get_log_id()))
            }
            None => self.purged(),
        }
    }
}

impl<C: Logged> RaftLogStorage<C> for LogStore<C> {
    type LogReader = LogStore<C>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<NodeId>> {
        Ok(LogState {
            last_purged_log_id: self.purged()?,
            last_log_id: self.last_log_id()?,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore<C> {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let bytes = codec::encode(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        if self
            .store
            .save_raft_state(self.group, RaftState::Vote, bytes)
            .await
        {
            Ok(())
        } else {
            Err(StorageIOError::write_vote(&io_failed("the vote")).into())
        }
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        read_state(&self.store, self.group, RaftState::Vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<C>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry<C>> = entries.into_iter().collect();
        let mut raw = Vec::with_capacity(entries.len());
        for entry in &entries {
            let bytes = codec::encode(entry).map_err(|e| StorageIOError::write_logs(&e))?;
            raw.push((entry.get_log_id().index, bytes));
        }
        let ids: Vec<LogId<NodeId>> = entries.iter().map(|e| *e.get_log_id()).collect();
        self.unflushed.add(entries);
        let unflushed = self.unflushed.clone();
        self.store.append_log(
            self.group,
            raw,
            Box::new(move |ok| {
                unflushed.flushed(&ids);
                callback.log_io_completed(match ok {
                    true => Ok(()),
                    false => Err(io_failed("log entries")),
                });
            }),
        );
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.unflushed.truncate(log_id.index);
        if self.store.truncate_log(self.group, log_id.index).await {
            Ok(())
        } else {
            Err(StorageIOError::write_logs(&io_failed("a truncation")).into())
        }
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let bytes = codec::encode(&log_id).map_err(|e| StorageIOError::write_logs(&e))?;
        self.unflushed.purge(log_id.index);
        if self.store.purge_log(self.group, log_id.index, bytes).await {
            Ok(())
        } else {
            Err(StorageIOError::write_logs(&io_failed("a purge")).into())
        }
    }
}
