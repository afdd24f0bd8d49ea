//! The core's metadata in the cluster's tree (#17): which records are replicated, under which
//! paths and in which encoding, and how this node's registries follow what the metadata group
//! applies. `cluster/` replicates paths and bytes; this file is where they mean users.
//!
//! Replicated so far: users (`["users", name]` -> their hash, hashing and tags, as RabbitMQ's
//! definitions spell them). A change is proposed through the group and applied on every node by
//! [`Replica`], which updates the registry and the node's own tables, so recovery after a
//! restart starts from them and the group's log replays what the node missed. The tree is
//! seeded once, by the first node to reach a majority, with that node's users; every other node
//! then adopts the tree's users and drops its own (joining a cluster wipes the joining node's
//! definitions, as RabbitMQ's reset does).

use crate::auth::{Hashing, User};
use crate::broker::Broker;
use crate::cluster::state_machine::Observer;
use crate::cluster::tree::Tree;
use crate::cluster::types::{Command, Path};
use crate::cluster::MetaNode;
use crate::error::{CoreError, CoreResult};
use crate::store::TreeChange;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The subtree of users.
const USERS: &str = "users";
/// Set once, with the seeding node's name, when the tree got its first definitions.
const SEEDED: &str = "seeded";

fn user_path(name: &str) -> Path {
    vec![USERS.into(), name.into()]
}

#[derive(Serialize, Deserialize)]
struct UserValue {
    password_hash: String,
    hashing_algorithm: String,
    tags: Vec<String>,
}

fn encode_user(u: &User) -> Vec<u8> {
    let v = UserValue {
        password_hash: u.password_hash(),
        hashing_algorithm: u.hashing.name().into(),
        tags: u.tags.clone(),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

fn decode_user(name: &str, bytes: &[u8]) -> Option<User> {
    let v: UserValue = serde_json::from_slice(bytes).ok()?;
    let tags: Vec<&str> = v.tags.iter().map(String::as_str).collect();
    let hashing = Hashing::from_name(&v.hashing_algorithm)?;
    User::with_hashing(name, &v.password_hash, hashing, &tags)
}

fn unavailable(e: crate::cluster::ClusterError) -> CoreError {
    CoreError::Unavailable(e.to_string())
}

/// Follows the metadata group's applied changes into the broker's registries.
pub struct Replica {
    broker: Weak<Broker>,
}

impl Replica {
    /// The observer for `broker`.
    pub fn new(broker: &Arc<Broker>) -> Arc<Replica> {
        Arc::new(Replica {
            broker: Arc::downgrade(broker),
        })
    }
}

impl Observer for Replica {
    fn applied(&self, changes: &[TreeChange]) {
        let Some(b) = self.broker.upgrade() else {
            return;
        };
        for change in changes {
            match change {
                TreeChange::Put(path, value) => {
                    if let [root, name] = path.as_slice() {
                        if root == USERS {
                            match decode_user(name, value) {
                                Some(u) => {
                                    b.put_user(u);
                                }
                                None => tracing::warn!(user = %name, "undecodable replicated user"),
                            }
                        }
                    }
                }
                TreeChange::Delete(path) => {
                    if let [root, name] = path.as_slice() {
                        if root == USERS {
                            b.delete_user(name);
                        }
                    }
                }
                TreeChange::DeleteTree(_) => {
                    if let Some(node) = b.cluster.get() {
                        node.read(|t| adopt(&b, t));
                    }
                }
            }
        }
    }

    fn replaced(&self) {
        if let Some(b) = self.broker.upgrade() {
            if let Some(node) = b.cluster.get() {
                node.read(|t| adopt(&b, t));
            }
        }
    }
}

/// Makes this node's users those of the tree, once the tree has been seeded.
fn adopt(b: &Broker, tree: &Tree) {
    if tree.get(&[SEEDED.to_string()]).is_none() {
        return;
    }
    let root = vec![USERS.to_string()];
    let mut keep = std::collections::HashSet::new();
    for (path, value) in tree.children(&root) {
        if let [_, name] = path.as_slice() {
            if let Some(u) = decode_user(name, value) {
                let same = b
                    .user(name)
                    .is_some_and(|old| encode_user(&old) == encode_user(&u));
                if !same {
                    b.put_user(u);
                }
                keep.insert(name.clone());
            }
        }
    }
    for u in b.users() {
        if !keep.contains(&u.name) {
            b.delete_user(&u.name);
        }
    }
}

/// Seeds the tree with this node's users unless another node did first, then adopts the
/// tree's users. Runs in the background from the start, retrying each second until a majority
/// answers (a node joining through seeds is not a member before that).
pub async fn join_metadata(broker: Weak<Broker>, node: Arc<MetaNode>) {
    loop {
        let Some(b) = broker.upgrade() else {
            return;
        };
        let then = b
            .users()
            .iter()
            .map(|u| Command::Put {
                path: user_path(&u.name),
                value: encode_user(u),
            })
            .collect();
        let seed = Command::IfAbsent {
            path: vec![SEEDED.into()],
            value: node.name().as_bytes().to_vec(),
            then,
        };
        match node.write(seed).await {
            Ok(reply) => {
                node.read(|t| adopt(&b, t));
                if reply.before.first().is_some_and(Option::is_none) {
                    tracing::info!("this node seeded the cluster's metadata with its users");
                } else {
                    tracing::info!(
                        "this node adopted the cluster's users; its own were replaced, as a reset does"
                    );
                }
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cluster metadata not reachable yet; retrying"),
        }
        drop(b);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl Broker {
    /// Creates or replaces a user, through the cluster when the node is in one (answered once
    /// applied on this node); true when it is new.
    pub async fn save_user(&self, user: User) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.put_user(user));
        };
        let cmd = Command::Put {
            path: user_path(&user.name),
            value: encode_user(&user),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_none))
    }

    /// Deletes a user, through the cluster when the node is in one; false when there was none.
    pub async fn remove_user(&self, name: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.delete_user(name));
        };
        let cmd = Command::Delete {
            path: user_path(name),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_round_trip_through_their_tree_value() {
        let u = User::new("alice", "s3cret", &["administrator", "monitoring"]);
        let back = decode_user("alice", &encode_user(&u)).expect("decodes");
        assert!(back.password_matches("s3cret"));
        assert_eq!(back.tags, u.tags);
        assert_eq!(encode_user(&back), encode_user(&u));
        assert!(decode_user("alice", b"not json").is_none());
    }
}
