//! The replicated metadata tree in the store: the persisted state machine of the cluster's
//! metadata group (Khepri's role in RabbitMQ). `cluster/` applies committed commands as paths
//! (sequences of names) and opaque values; each applied batch goes to the writer as one
//! operation with the group's applied log id beside it, so the tree and the point it reflects
//! never disagree after a crash. Paths become keys by `schema::encode_parts`, whose prefix
//! property makes a subtree one key range.

use super::raft_log::RaftState;
use super::schema::{self, META_TREE};
use super::writer::{Op, TreeOp};
use super::{io, Store, StoreError};
use redb::ReadableTable;

/// One change to the metadata tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeChange {
    /// Sets the value at a path.
    Put(Vec<String>, Vec<u8>),
    /// Removes the value at a path.
    Delete(Vec<String>),
    /// Removes the value at a path and every path below it.
    DeleteTree(Vec<String>),
}

/// A path in the tree and its value.
pub type TreeEntry = (Vec<String>, Vec<u8>);

fn key(path: &[String]) -> Vec<u8> {
    let parts: Vec<&[u8]> = path.iter().map(|p| p.as_bytes()).collect();
    schema::encode_parts(&parts)
}

fn tree_op(change: &TreeChange) -> TreeOp {
    match change {
        TreeChange::Put(path, value) => TreeOp::Put(key(path), value.clone()),
        TreeChange::Delete(path) => TreeOp::Delete(key(path)),
        TreeChange::DeleteTree(path) => TreeOp::DeletePrefix(key(path)),
    }
}

fn state_values(state: Vec<(RaftState, Vec<u8>)>) -> Vec<(u8, Vec<u8>)> {
    state.into_iter().map(|(k, v)| (k as u8, v)).collect()
}

impl Store {
    /// Applies `changes` to the tree and sets `group`'s `state` values in the same commit,
    /// without waiting for it (the group's log still holds what is not yet durable here).
    pub fn apply_meta_tree(
        &self,
        group: u64,
        changes: &[TreeChange],
        state: Vec<(RaftState, Vec<u8>)>,
    ) {
        self.submit(Op::MetaTree {
            group,
            clear: false,
            changes: changes.iter().map(tree_op).collect(),
            state: state_values(state),
        });
    }

    /// Replaces the whole tree with `entries` (an installed snapshot) and sets `group`'s
    /// `state` values in the same commit, and waits for it.
    pub async fn replace_meta_tree(
        &self,
        group: u64,
        entries: &[TreeEntry],
        state: Vec<(RaftState, Vec<u8>)>,
    ) -> bool {
        self.submit(Op::MetaTree {
            group,
            clear: true,
            changes: entries
                .iter()
                .map(|(path, value)| TreeOp::Put(key(path), value.clone()))
                .collect(),
            state: state_values(state),
        });
        self.sync().await
    }

    /// The whole tree as last committed, in the store's key order (length-prefixed segments,
    /// so not path order).
    pub fn meta_tree(&self) -> Result<Vec<TreeEntry>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(META_TREE).map_err(io)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(io)? {
            let (k, v) = entry.map_err(io)?;
            let parts = schema::decode_parts(k.value())
                .ok_or_else(|| StoreError::Io("undecodable metadata tree key".into()))?;
            let path = parts
                .into_iter()
                .map(|p| String::from_utf8(p.to_vec()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(io)?;
            out.push((path, v.value().to_vec()));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|p| p.to_string()).collect()
    }

    #[tokio::test]
    async fn subtrees_delete_as_one_and_snapshots_replace_everything() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
        let changes = [
            TreeChange::Put(path(&["vhosts", "a"]), b"1".to_vec()),
            TreeChange::Put(path(&["vhosts", "a", "queues", "q"]), b"2".to_vec()),
            TreeChange::Put(path(&["vhosts", "ab"]), b"3".to_vec()),
            TreeChange::Put(path(&["vhosts", "b", "queues", "q"]), b"4".to_vec()),
        ];
        store.apply_meta_tree(0, &changes, vec![(RaftState::Applied, b"5".to_vec())]);
        // "a" and everything below it; not "ab", whose name only starts the same way.
        store.apply_meta_tree(0, &[TreeChange::DeleteTree(path(&["vhosts", "a"]))], vec![]);
        assert!(store.sync().await);
        let mut left = store.meta_tree().expect("read");
        left.sort();
        assert_eq!(
            left,
            vec![
                (path(&["vhosts", "ab"]), b"3".to_vec()),
                (path(&["vhosts", "b", "queues", "q"]), b"4".to_vec()),
            ]
        );
        store.apply_meta_tree(0, &[TreeChange::Delete(path(&["vhosts", "b"]))], vec![]);
        assert!(store.sync().await);
        assert_eq!(
            store.meta_tree().expect("read").len(),
            2,
            "no value at b itself"
        );
        assert_eq!(
            store.raft_state(0, RaftState::Applied).expect("read"),
            Some(b"5".to_vec())
        );
        let snapshot = vec![(path(&["users", "guest"]), b"hash".to_vec())];
        assert!(
            store
                .replace_meta_tree(0, &snapshot, vec![(RaftState::Applied, b"9".to_vec())])
                .await
        );
        store.close().await;
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("reopen");
        assert_eq!(store.meta_tree().expect("read"), snapshot);
        assert_eq!(
            store.raft_state(0, RaftState::Applied).expect("read"),
            Some(b"9".to_vec())
        );
        store.close().await;
    }
}
