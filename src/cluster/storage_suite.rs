//! openraft's own storage test suite over the store-backed log and the state machines of the
//! metadata group and of the replicated queue groups.

use super::group_machine::GroupMachine;
use super::group_types::GroupConfig;
use super::log_store::LogStore;
use super::state_machine::StateMachine;
use super::types::{MetaConfig, NodeId};
use super::METADATA_GROUP;
use crate::store::Store;
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct Builder;

impl StoreBuilder<MetaConfig, LogStore<MetaConfig>, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<MetaConfig>, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().map_err(|e| openraft::StorageIOError::write(&e))?;
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default())
            .map_err(|e| openraft::StorageIOError::write(&e))?;
        let log = LogStore::new(store.clone(), METADATA_GROUP);
        let sm = StateMachine::open(store, METADATA_GROUP, None)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn the_store_passes_openraft_storage_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(Builder)
}

struct GroupBuilder;

/// The group id the suite's stores use (any but the metadata group's).
const SUITE_GROUP: u64 = 42;

impl StoreBuilder<GroupConfig, LogStore<GroupConfig>, GroupMachine, tempfile::TempDir>
    for GroupBuilder
{
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<GroupConfig>, GroupMachine), StorageError<NodeId>>
    {
        let dir = tempfile::tempdir().map_err(|e| openraft::StorageIOError::write(&e))?;
        let (store, _) = Store::open(dir.path(), 8 << 20, Default::default())
            .map_err(|e| openraft::StorageIOError::write(&e))?;
        let log = LogStore::new(store.clone(), SUITE_GROUP);
        let sm = GroupMachine::open(store, SUITE_GROUP)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn the_queue_groups_store_passes_openraft_storage_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(GroupBuilder)
}
