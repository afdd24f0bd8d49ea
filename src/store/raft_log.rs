//! Raft logs in the store, for the cluster's metadata group and the quorum queues' groups.
//! Every group's entries go to one table keyed by (group, index) and are written by the one
//! writer thread, so the appends of all groups on a node share its group commit (one fsync per
//! batch, DESIGN's shared write-ahead log). Entries, votes and log ids are opaque bytes here:
//! `cluster/` encodes them for its consensus engine; only this file and the writer know the
//! tables.

use super::schema::{RAFT_LOG, RAFT_STATE};
use super::writer::{Flushed, Op};
use super::{io, Store, StoreError};
use std::ops::RangeInclusive;

/// A piece of a Raft group's state kept beside its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RaftState {
    /// The vote (term and candidate) the node granted or holds.
    Vote = 0,
    /// The highest log id known committed.
    Committed = 1,
    /// The last log id removed by a purge (the log starts after it).
    Purged = 2,
    /// The last log id applied to the group's state machine.
    Applied = 3,
    /// The last membership applied to the group's state machine.
    Membership = 4,
    /// The key a replicated queue group's state machine gives the next value it adds.
    NextKey = 5,
}

impl Store {
    /// Appends entries (index, bytes) of Raft group `group`; `done` is called once they are
    /// durable (true) or could not be written (false). It runs on the writer thread, so it must
    /// only hand the outcome on.
    pub fn append_log(
        &self,
        group: u64,
        entries: Vec<(u64, Vec<u8>)>,
        done: Box<dyn FnOnce(bool) + Send>,
    ) {
        self.submit(Op::AppendLog {
            group,
            entries,
            done: Some(Flushed(done)),
        });
    }

    /// Removes `group`'s entries from index `from` on (a tail that conflicts with the
    /// leader's), and waits for the commit.
    pub async fn truncate_log(&self, group: u64, from: u64) -> bool {
        self.submit(Op::TruncateLog { group, from });
        self.sync().await
    }

    /// Removes `group`'s entries up to and including `upto`, recording `purged` (the encoded
    /// log id of `upto`) as [`RaftState::Purged`], and waits for the commit.
    pub async fn purge_log(&self, group: u64, upto: u64, purged: Vec<u8>) -> bool {
        self.submit(Op::PurgeLog {
            group,
            upto,
            key: RaftState::Purged as u8,
            purged,
        });
        self.sync().await
    }

    /// Saves one of `group`'s state values and waits for the commit (a vote must be durable
    /// before it is answered).
    pub async fn save_raft_state(&self, group: u64, key: RaftState, value: Vec<u8>) -> bool {
        self.submit(Op::PutRaftState {
            group,
            key: key as u8,
            value,
        });
        self.sync().await
    }

    /// Drops `group`'s log and state (its queue was deleted, or the node left the group).
    pub async fn delete_raft_group(&self, group: u64) -> bool {
        self.submit(Op::DeleteRaftGroup(group));
        self.sync().await
    }

    /// One of `group`'s state values, as last committed.
    pub fn raft_state(&self, group: u64, key: RaftState) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(RAFT_STATE).map_err(io)?;
        let value = table.get((group, key as u8)).map_err(io)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// `group`'s committed entries with an index in `range`, in order.
    pub fn read_log(
        &self,
        group: u64,
        range: RangeInclusive<u64>,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(RAFT_LOG).map_err(io)?;
        let mut out = Vec::new();
        let (from, to) = range.into_inner();
        for entry in table.range((group, from)..=(group, to)).map_err(io)? {
            let (k, v) = entry.map_err(io)?;
            out.push((k.value().1, v.value().to_vec()));
        }
        Ok(out)
    }

    /// `group`'s last committed entry, if its log holds any.
    pub fn last_log(&self, group: u64) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(RAFT_LOG).map_err(io)?;
        let last = table
            .range((group, 0)..=(group, u64::MAX))
            .map_err(io)?
            .next_back()
            .transpose()
            .map_err(io)?;
        Ok(last.map(|(k, v)| (k.value().1, v.value().to_vec())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn entries(group: u64, range: RangeInclusive<u64>) -> Vec<(u64, Vec<u8>)> {
        range
            .map(|i| (i, format!("g{group}-e{i}").into_bytes()))
            .collect()
    }

    /// A flush callback and the receiver of its outcome.
    fn notify() -> (Box<dyn FnOnce(bool) + Send>, oneshot::Receiver<bool>) {
        let (tx, rx) = oneshot::channel();
        (
            Box::new(move |ok| {
                let _ = tx.send(ok);
            }),
            rx,
        )
    }

    async fn append(store: &Store, group: u64, range: RangeInclusive<u64>) -> bool {
        let (done, rx) = notify();
        store.append_log(group, entries(group, range), done);
        rx.await.unwrap_or(false)
    }

    #[tokio::test]
    async fn groups_share_the_log_table_and_keep_apart() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
        assert_eq!(store.last_log(1).expect("read"), None);
        assert!(append(&store, 1, 1..=10).await, "durable");
        assert!(append(&store, 2, 1..=3).await, "durable");
        assert_eq!(store.read_log(1, 4..=6).expect("read"), entries(1, 4..=6));
        assert_eq!(
            store.read_log(2, 0..=u64::MAX).expect("read"),
            entries(2, 1..=3)
        );
        assert_eq!(
            store.last_log(1).expect("read"),
            Some((10, b"g1-e10".to_vec()))
        );
        // A conflicting tail goes; the other group is untouched.
        assert!(store.truncate_log(1, 8).await);
        assert_eq!(
            store.read_log(1, 0..=u64::MAX).expect("read"),
            entries(1, 1..=7)
        );
        assert_eq!(store.last_log(2).expect("read").map(|e| e.0), Some(3));
        // A purge removes the head and records where the log now starts.
        assert!(store.purge_log(1, 4, b"log-id-4".to_vec()).await);
        assert_eq!(
            store.read_log(1, 0..=u64::MAX).expect("read"),
            entries(1, 5..=7)
        );
        assert_eq!(
            store.raft_state(1, RaftState::Purged).expect("read"),
            Some(b"log-id-4".to_vec())
        );
        assert!(
            store
                .save_raft_state(1, RaftState::Vote, b"term 3 for 2".to_vec())
                .await
        );
        assert_eq!(store.raft_state(2, RaftState::Vote).expect("read"), None);
        store.close().await;
        // Everything above was durable: it is there after a reopen.
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("reopen");
        assert_eq!(
            store.read_log(1, 0..=u64::MAX).expect("read"),
            entries(1, 5..=7)
        );
        assert_eq!(
            store.raft_state(1, RaftState::Vote).expect("read"),
            Some(b"term 3 for 2".to_vec())
        );
        assert!(store.delete_raft_group(1).await);
        assert_eq!(store.last_log(1).expect("read"), None);
        assert_eq!(store.raft_state(1, RaftState::Purged).expect("read"), None);
        assert_eq!(
            store.read_log(2, 0..=u64::MAX).expect("read"),
            entries(2, 1..=3)
        );
        store.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_of_many_groups_share_commits() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
        let (before, _) = store.commit_stats();
        let mut waits = Vec::new();
        for group in 0..64u64 {
            for i in 1..=8u64 {
                let (done, rx) = notify();
                store.append_log(group, entries(group, i..=i), done);
                waits.push(rx);
            }
        }
        for w in waits {
            assert!(w.await.expect("completed"), "durable");
        }
        let (after, _) = store.commit_stats();
        // 512 appends submitted without waiting: far fewer commits than appends.
        assert!(after - before < 256, "{} commits", after - before);
        for group in [0, 31, 63] {
            assert_eq!(
                store.read_log(group, 0..=u64::MAX).expect("read"),
                entries(group, 1..=8)
            );
        }
        store.close().await;
    }
}
