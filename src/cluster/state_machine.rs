//! The metadata group's state machine: committed commands applied to the metadata tree, in
//! memory (local reads) and in the store (each applied batch with its log id, in one commit).
//!
//! A snapshot is the whole tree, built from memory and kept in memory: after a restart openraft
//! rebuilds one from the state when its log was purged. Installing a snapshot replaces the tree
//! in memory and in the store and waits for the commit. An observer on the node (the core, once
//! it keeps its registries in step) hears of each applied batch and of each replacement.

use super::codec;
use super::log_store::read_state;
use super::tree::Tree;
use super::types::{Member, MetaConfig, NodeId, Path, Reply};
use crate::store::{RaftState, Store, TreeChange};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{Entry, EntryPayload, LogId, StorageError, StorageIOError, StoredMembership};
use std::io::Cursor;
use std::sync::{Arc, Mutex, RwLock};

/// The applied state: the tree and the point of the log it reflects.
#[derive(Debug, Default)]
pub struct MetaState {
    /// The metadata tree.
    pub tree: Tree,
    /// The last applied log id.
    pub applied: Option<LogId<NodeId>>,
    /// The last applied membership.
    pub membership: StoredMembership<NodeId, Member>,
}

/// The applied state, shared with the node's readers.
pub type SharedState = Arc<RwLock<MetaState>>;

/// Told, on the applying task, what changed on this node. It must not block.
pub trait Observer: Send + Sync {
    /// A committed batch changed the tree.
    fn applied(&self, changes: &[TreeChange]);
    /// A snapshot replaced the whole tree.
    fn replaced(&self);
}

#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, Member>,
    data: Vec<u8>,
}

type SnapshotSlot = Arc<Mutex<Option<StoredSnapshot>>>;

/// The state machine of one metadata group.
pub struct StateMachine {
    store: Store,
    group: u64,
    state: SharedState,
    snapshot: SnapshotSlot,
    observer: Option<Arc<dyn Observer>>,
    /// How long each apply waits first ([`APPLY_DELAY_ENV`]; None in production).
    apply_delay: Option<std::time::Duration>,
}

/// Fault injection for tests: a node started with this variable set to N waits N ms before
/// it applies each batch of committed entries, so it lags behind the others' answers by a
/// known amount (the window in which a miss there must be confirmed against the cluster).
pub const APPLY_DELAY_ENV: &str = "WARREN_FAULT_APPLY_DELAY_MS";

fn read_err(e: &(impl std::error::Error + 'static)) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(e).into()
}

fn lock_err() -> StorageError<NodeId> {
    StorageIOError::read_state_machine(&std::io::Error::other("state lock poisoned")).into()
}

impl StateMachine {
    /// The state machine of `group`, as the store last committed it.
    pub fn open(
        store: Store,
        group: u64,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<StateMachine, StorageError<NodeId>> {
        let tree = Tree::from_entries(store.meta_tree().map_err(|e| read_err(&e))?);
        let applied = read_state(&store, group, RaftState::Applied)?.flatten();
        let membership = read_state(&store, group, RaftState::Membership)?.unwrap_or_default();
        Ok(StateMachine {
            store,
            group,
            state: Arc::new(RwLock::new(MetaState {
                tree,
                applied,
                membership,
            })),
            snapshot: Arc::new(Mutex::new(None)),
            observer,
            apply_delay: std::env::var(APPLY_DELAY_ENV)
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map(std::time::Duration::from_millis),
        })
    }

    /// The applied state, for reads.
    pub fn state(&self) -> SharedState {
        self.state.clone()
    }

    fn state_values(
        applied: &Option<LogId<NodeId>>,
        membership: &StoredMembership<NodeId, Member>,
    ) -> Result<Vec<(RaftState, Vec<u8>)>, StorageError<NodeId>> {
        let write_err = |e: postcard::Error| StorageIOError::write_state_machine(&e);
        Ok(vec![
            (
                RaftState::Applied,
                codec::encode(applied).map_err(write_err)?,
            ),
            (
                RaftState::Membership,
                codec::encode(membership).map_err(write_err)?,
            ),
        ])
    }
}

/// Builds snapshots from the shared state.
pub struct SnapshotBuilder {
    state: SharedState,
    slot: SnapshotSlot,
}

impl RaftSnapshotBuilder<MetaConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<MetaConfig>, StorageError<NodeId>> {
        let (entries, applied, membership) = {
            let state = self.state.read().map_err(|_| lock_err())?;
            let entries: Vec<(&Path, &Vec<u8>)> = state.tree.entries().collect();
            let bytes =
                codec::encode(&entries).map_err(|e| StorageIOError::write_snapshot(None, &e))?;
            (bytes, state.applied, state.membership.clone())
        };
        let snapshot_id = match applied {
            Some(id) => format!("{}-{}-{}", id.leader_id, id.index, crate::clock::unix_ms()),
            None => format!("empty-{}", crate::clock::unix_ms()),
        };
        let meta = SnapshotMeta {
            last_log_id: applied,
            last_membership: membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: entries.clone(),
        };
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some(stored);
        }
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(entries)),
        })
    }
}

impl RaftStateMachine<MetaConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Member>), StorageError<NodeId>>
    {
        let state = self.state.read().map_err(|_| lock_err())?;
        Ok((state.applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<MetaConfig>> + Send,
        I::IntoIter: Send,
    {
        if let Some(delay) = self.apply_delay {
            tokio::time::sleep(delay).await;
        }
        let mut replies = Vec::new();
        let mut changes = Vec::new();
        let values = {
            let mut state = self.state.write().map_err(|_| lock_err())?;
            for entry in entries {
                let mut reply = Reply::default();
                match &entry.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(cmd) => state.tree.apply(cmd, &mut changes, &mut reply),
                    EntryPayload::Membership(m) => {
                        state.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    }
                }
                state.applied = Some(entry.log_id);
                replies.push(reply);
            }
            Self::state_values(&state.applied, &state.membership)?
        };
        self.store.apply_meta_tree(self.group, &changes, values);
        if let Some(observer) = &self.observer {
            if !changes.is_empty() {
                observer.applied(&changes);
            }
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            state: self.state.clone(),
            slot: self.snapshot.clone(),
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
        let data = snapshot.into_inner();
        let sig = Some(meta.signature());
        let entries: Vec<(Path, Vec<u8>)> =
            codec::decode(&data).map_err(|e| StorageIOError::read_snapshot(sig.clone(), &e))?;
        let values = Self::state_values(&meta.last_log_id, &meta.last_membership)?;
        if !self
            .store
            .replace_meta_tree(self.group, &entries, values)
            .await
        {
            let e = std::io::Error::other("the store could not commit the snapshot");
            return Err(StorageIOError::write_snapshot(sig, &e).into());
        }
        {
            let mut state = self.state.write().map_err(|_| lock_err())?;
            state.tree = Tree::from_entries(entries);
            state.applied = meta.last_log_id;
            state.membership = meta.last_membership.clone();
        }
        if let Ok(mut slot) = self.snapshot.lock() {
            *slot = Some(StoredSnapshot {
                meta: meta.clone(),
                data,
            });
        }
        if let Some(observer) = &self.observer {
            observer.replaced();
        }
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<MetaConfig>>, StorageError<NodeId>> {
        let stored = self.snapshot.lock().map_err(|_| lock_err())?.clone();
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
