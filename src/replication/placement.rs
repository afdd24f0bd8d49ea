//! Where a new replicated group's members go (#18): its first leader and the next running
//! nodes by name, at most one per node. Quorum queues and delayed exchanges place their
//! groups alike.

use crate::cluster::MetaNode;
use std::sync::Arc;

/// Members of a new group unless told otherwise (`x-quorum-initial-group-size`).
const DEFAULT_SIZE: usize = 3;

/// A new group's id and its members led by `leader`: it and the next running nodes by name,
/// `size` in all (default [`DEFAULT_SIZE`], at most the cluster's size).
pub(super) async fn place(
    node: &Arc<MetaNode>,
    leader: &str,
    size: Option<usize>,
) -> (u64, Vec<String>) {
    let mut running: Vec<String> = node
        .member_status(std::time::Duration::from_millis(500))
        .await
        .into_iter()
        .filter(|m| m.running && m.member.name != leader)
        .map(|m| m.member.name)
        .collect();
    running.sort();
    let mut members = vec![leader.to_owned()];
    members.extend(
        running
            .into_iter()
            .take(size.unwrap_or(DEFAULT_SIZE).saturating_sub(1)),
    );
    let mut group: u64 = rand::random();
    while group == crate::cluster::METADATA_GROUP {
        group = rand::random();
    }
    (group, members)
}
