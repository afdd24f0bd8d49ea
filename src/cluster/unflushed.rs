//! A Raft group's log entries handed to the store's writer and not committed by it yet. A
//! leader's append returns before its flush (the vendored openraft reports the flush
//! separately, so replication to the followers overlaps it); until the writer has committed
//! them, the group's log readers find them here. Entries leave once committed, or when a
//! truncation or purge covers them.
//!
//! Readers look here before they read the store: an entry committed between the two looks is
//! then found twice (and taken once), never missed.

use super::types::NodeId;
use openraft::{LogId, RaftLogId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The entries (`E`) of one group in the writer's hands, by index.
pub(super) struct Unflushed<E>(Arc<Mutex<BTreeMap<u64, E>>>);

impl<E> Clone for Unflushed<E> {
    fn clone(&self) -> Self {
        Unflushed(self.0.clone())
    }
}

impl<E> Default for Unflushed<E> {
    fn default() -> Self {
        Unflushed(Arc::default())
    }
}

impl<E: RaftLogId<NodeId> + Clone> Unflushed<E> {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<u64, E>) -> T) -> T {
        let mut map = match self.0.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut map)
    }

    /// Holds `entries` until [`Unflushed::flushed`].
    pub(super) fn add(&self, entries: Vec<E>) {
        self.with(|map| {
            for e in entries {
                map.insert(e.get_log_id().index, e);
            }
        });
    }

    /// The writer has committed (or failed to commit) the entries `ids`: they are read from
    /// the store from now on. An index holding another entry since (a new leader's) keeps it.
    pub(super) fn flushed(&self, ids: &[LogId<NodeId>]) {
        self.with(|map| {
            for id in ids {
                if map.get(&id.index).map(|e| e.get_log_id()) == Some(id) {
                    map.remove(&id.index);
                }
            }
        });
    }

    /// Forgets the entries from index `from` on (a truncation).
    pub(super) fn truncate(&self, from: u64) {
        self.with(|map| drop(map.split_off(&from)));
    }

    /// Forgets the entries up to index `upto`, inclusive (a purge).
    pub(super) fn purge(&self, upto: u64) {
        self.with(|map| *map = map.split_off(&upto.saturating_add(1)));
    }

    /// Copies of the entries with indexes `from..=to`.
    pub(super) fn range(&self, from: u64, to: u64) -> BTreeMap<u64, E> {
        self.with(|map| map.range(from..=to).map(|(i, e)| (*i, e.clone())).collect())
    }

    /// The id of the last entry held.
    pub(super) fn last(&self) -> Option<LogId<NodeId>> {
        self.with(|map| map.values().next_back().map(|e| *e.get_log_id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::group_types::{GroupCommand, GroupConfig};
    use openraft::{CommittedLeaderId, Entry, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry<GroupConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(GroupCommand::Clear),
        }
    }

    #[test]
    fn entries_stay_until_flushed_truncated_or_purged() {
        let u = Unflushed::<Entry<GroupConfig>>::default();
        u.add((1..=6).map(|i| entry(1, i)).collect());
        assert_eq!(u.last().map(|id| id.index), Some(6));
        u.flushed(&[*entry(1, 1).get_log_id(), *entry(1, 2).get_log_id()]);
        assert_eq!(
            u.range(0, 10).keys().copied().collect::<Vec<_>>(),
            [3, 4, 5, 6]
        );
        u.truncate(5);
        u.add(vec![entry(2, 5)]);
        // The flush of the truncated entry 5 of term 1 leaves term 2's in place.
        u.flushed(&[*entry(1, 5).get_log_id()]);
        assert_eq!(u.range(4, 5).keys().copied().collect::<Vec<_>>(), [4, 5]);
        assert_eq!(u.last(), Some(*entry(2, 5).get_log_id()));
        u.purge(4);
        assert_eq!(u.range(0, 10).keys().copied().collect::<Vec<_>>(), [5]);
    }
}
