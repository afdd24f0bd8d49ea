//! openraft's own storage test suite over the store-backed log and state machine.

use super::log_store::LogStore;
use super::state_machine::StateMachine;
use super::types::{MetaConfig, NodeId};
use super::METADATA_GROUP;
use crate::store::Store;
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct Builder;

impl StoreBuilder<MetaConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
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
