//! The state machines of the replicated queues' Raft groups in the store: each group's values
//! by key, opaque here. `cluster/` applies committed entries as [`GroupChange`]s; each applied
//! batch goes to the writer as one operation with the group's applied log id beside it, so a
//! group's values and the point of its log they reflect never disagree after a crash (the
//! metadata tree's scheme, [`super::meta_tree`], per group).

use super::raft_log::RaftState;
use super::schema::{GROUP_VALUES, RAFT_STATE};
use super::writer::{GroupChange, Op};
use super::{io, Store, StoreError};
use redb::ReadableTable;

fn state_values(state: Vec<(RaftState, Vec<u8>)>) -> Vec<(u8, Vec<u8>)> {
    state.into_iter().map(|(k, v)| (k as u8, v)).collect()
}

/// A group's values with the state values committed beside them, read in one transaction.
#[derive(Debug, Default)]
pub struct GroupImage {
    /// (key, value), in key order.
    pub values: Vec<(u64, Vec<u8>)>,
    /// [`RaftState::Applied`] as stored.
    pub applied: Option<Vec<u8>>,
    /// [`RaftState::Membership`] as stored.
    pub membership: Option<Vec<u8>>,
    /// [`RaftState::NextKey`] as stored.
    pub next_key: Option<Vec<u8>>,
}

impl Store {
    /// Applies `changes` to `group`'s values and sets its `state` values in the same commit,
    /// without waiting for it (the group's log still holds what is not yet durable here).
    pub fn apply_group_values(
        &self,
        group: u64,
        changes: Vec<GroupChange>,
        state: Vec<(RaftState, Vec<u8>)>,
    ) {
        self.submit(Op::GroupValues {
            group,
            clear: false,
            changes,
            state: state_values(state),
        });
    }

    /// Replaces `group`'s values with `values` (an installed snapshot) and sets its `state`
    /// values in the same commit, and waits for it.
    pub async fn replace_group_values(
        &self,
        group: u64,
        values: Vec<(u64, Vec<u8>)>,
        state: Vec<(RaftState, Vec<u8>)>,
    ) -> bool {
        self.submit(Op::GroupValues {
            group,
            clear: true,
            changes: values
                .into_iter()
                .map(|(k, v)| GroupChange::Put(k, v))
                .collect(),
            state: state_values(state),
        });
        self.sync().await
    }

    /// `group`'s values and applied state as last committed, consistent with each other.
    pub fn group_image(&self, group: u64) -> Result<GroupImage, StoreError> {
        let txn = self.read_txn()?;
        let values_table = txn.open_table(GROUP_VALUES).map_err(io)?;
        let state = txn.open_table(RAFT_STATE).map_err(io)?;
        let mut values = Vec::new();
        for entry in values_table
            .range((group, 0)..=(group, u64::MAX))
            .map_err(io)?
        {
            let (k, v) = entry.map_err(io)?;
            values.push((k.value().1, v.value().to_vec()));
        }
        let get = |key: RaftState| -> Result<Option<Vec<u8>>, StoreError> {
            let value = state.get((group, key as u8)).map_err(io)?;
            Ok(value.map(|v| v.value().to_vec()))
        };
        Ok(GroupImage {
            values,
            applied: get(RaftState::Applied)?,
            membership: get(RaftState::Membership)?,
            next_key: get(RaftState::NextKey)?,
        })
    }

    /// `group`'s values from key `from` on as last committed, in key order.
    pub fn group_values_from(
        &self,
        group: u64,
        from: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(GROUP_VALUES).map_err(io)?;
        let mut values = Vec::new();
        for entry in table.range((group, from)..=(group, u64::MAX)).map_err(io)? {
            let (k, v) = entry.map_err(io)?;
            values.push((k.value().1, v.value().to_vec()));
        }
        Ok(values)
    }

    /// The ids of the Raft groups other than `except` that have a log or state here (the
    /// groups this node is a member of, as last committed).
    pub fn raft_groups(&self, except: u64) -> Result<Vec<u64>, StoreError> {
        let txn = self.read_txn()?;
        let state = txn.open_table(RAFT_STATE).map_err(io)?;
        let mut out: Vec<u64> = Vec::new();
        for entry in state.iter().map_err(io)? {
            let (k, _) = entry.map_err(io)?;
            let group = k.value().0;
            if group != except && out.last() != Some(&group) {
                out.push(group);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn groups_keep_their_values_apart_and_snapshots_replace_one_group() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
        let put = |k: u64, v: &str| GroupChange::Put(k, v.as_bytes().to_vec());
        store.apply_group_values(
            7,
            vec![put(1, "a"), put(2, "b"), put(3, "c")],
            vec![(RaftState::Applied, b"3".to_vec())],
        );
        store.apply_group_values(8, vec![put(1, "other")], vec![]);
        store.apply_group_values(7, vec![GroupChange::Delete(2)], vec![]);
        assert!(store.sync().await);
        let image = store.group_image(7).expect("read");
        assert_eq!(image.values, vec![(1, b"a".to_vec()), (3, b"c".to_vec())]);
        assert_eq!(image.applied, Some(b"3".to_vec()));
        assert_eq!(image.membership, None);
        assert!(
            store
                .replace_group_values(
                    7,
                    vec![(9, b"z".to_vec())],
                    vec![(RaftState::Applied, b"9".to_vec())],
                )
                .await
        );
        store.apply_group_values(8, vec![GroupChange::Clear, put(5, "e")], vec![]);
        store.close().await;
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("reopen");
        assert_eq!(
            store.group_image(7).expect("read").values,
            vec![(9, b"z".to_vec())]
        );
        assert_eq!(
            store.group_image(8).expect("read").values,
            vec![(5, b"e".to_vec())]
        );
        assert_eq!(store.raft_groups(0).expect("groups"), vec![7]);
        assert!(store.delete_raft_group(7).await);
        assert!(store.group_image(7).expect("read").values.is_empty());
        assert_eq!(store.raft_groups(0).expect("groups"), Vec::<u64>::new());
        store.close().await;
    }
}
