//! The core's metadata in the cluster's tree (#17): which records are replicated, under which
//! paths and in which encoding, and how this node's registries follow what the metadata group
//! applies. `cluster/` replicates paths and bytes; this file is where they mean users
//! and permissions.
//!
//! Replicated so far: users (`["users", name]` -> their hash, hashing and tags, as RabbitMQ's
//! definitions spell them), permissions (`["permissions", user, vhost]`) and topic permissions
//! (`["topic-permissions", user, vhost, exchange]`), keyed by user first so that deleting a
//! user removes its permissions in the same entry. A change is proposed through the group and applied on every node by
//! [`Replica`], which updates the registry and the node's own tables, so recovery after a
//! restart starts from them and the group's log replays what the node missed. The tree is
//! seeded once, by the first node to reach a majority, with that node's users and permissions;
//! every other node then adopts the tree's and drops its own (joining a cluster wipes the joining node's
//! definitions, as RabbitMQ's reset does).

use crate::auth::{Hashing, User};
use crate::broker::Broker;
use crate::cluster::state_machine::Observer;
use crate::cluster::tree::Tree;
use crate::cluster::types::{Command, Path};
use crate::cluster::MetaNode;
use crate::error::{CoreError, CoreResult};
use crate::permissions::{Access, Permission, TopicPermission};
use crate::store::TreeChange;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The subtree of users.
const USERS: &str = "users";
/// The subtree of permissions, by user then vhost.
const PERMISSIONS: &str = "permissions";
/// The subtree of topic permissions, by user, vhost, then exchange.
const TOPIC_PERMISSIONS: &str = "topic-permissions";
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

fn permission_path(user: &str, vhost: &str) -> Path {
    vec![PERMISSIONS.into(), user.into(), vhost.into()]
}

fn topic_path(user: &str, vhost: &str, exchange: &str) -> Path {
    vec![
        TOPIC_PERMISSIONS.into(),
        user.into(),
        vhost.into(),
        exchange.into(),
    ]
}

#[derive(Serialize, Deserialize)]
struct PermissionValue {
    configure: String,
    write: String,
    read: String,
}

fn encode_permission(p: &Permission) -> Vec<u8> {
    let v = PermissionValue {
        configure: p.pattern(Access::Configure).into(),
        write: p.pattern(Access::Write).into(),
        read: p.pattern(Access::Read).into(),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

fn decode_permission(bytes: &[u8]) -> Option<Permission> {
    let v: PermissionValue = serde_json::from_slice(bytes).ok()?;
    Permission::new(&v.configure, &v.write, &v.read).ok()
}

#[derive(Serialize, Deserialize)]
struct TopicValue {
    write: String,
    read: String,
}

fn encode_topic(t: &TopicPermission) -> Vec<u8> {
    let v = TopicValue {
        write: t.write().into(),
        read: t.read().into(),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

fn decode_topic(user: &str, vhost: &str, exchange: &str, bytes: &[u8]) -> Option<TopicPermission> {
    let v: TopicValue = serde_json::from_slice(bytes).ok()?;
    TopicPermission::new(exchange, &v.write, &v.read, user, vhost).ok()
}

/// Every replicated record this node holds, as the commands that would write it.
fn local_records(b: &Broker) -> Vec<Command> {
    let mut out: Vec<Command> = b
        .users()
        .iter()
        .map(|u| Command::Put {
            path: user_path(&u.name),
            value: encode_user(u),
        })
        .collect();
    for (vhost, user, p) in b.permissions.list() {
        out.push(Command::Put {
            path: permission_path(&user, &vhost),
            value: encode_permission(&p),
        });
    }
    for (vhost, user, t) in b.permissions.list_topics() {
        out.push(Command::Put {
            path: topic_path(&user, &vhost, &t.exchange),
            value: encode_topic(&t),
        });
    }
    out
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
                TreeChange::Put(path, value) => apply_put(&b, path, value),
                TreeChange::Delete(path) => apply_delete(&b, path),
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

fn apply_put(b: &Broker, path: &[String], value: &[u8]) {
    let undecodable = || tracing::warn!(path = ?path, "undecodable replicated record");
    match path {
        [root, name] if root == USERS => match decode_user(name, value) {
            Some(u) => {
                b.put_user(u);
            }
            None => undecodable(),
        },
        [root, user, vhost] if root == PERMISSIONS => match decode_permission(value) {
            Some(p) => b.set_permission(vhost, user, p),
            None => undecodable(),
        },
        [root, user, vhost, exchange] if root == TOPIC_PERMISSIONS => {
            match decode_topic(user, vhost, exchange, value) {
                Some(t) => b.set_topic_permission(vhost, user, t),
                None => undecodable(),
            }
        }
        _ => {}
    }
}

fn apply_delete(b: &Broker, path: &[String]) {
    match path {
        [root, name] if root == USERS => {
            b.delete_user(name);
        }
        [root, user, vhost] if root == PERMISSIONS => {
            b.clear_permission(vhost, user);
        }
        [root, user, vhost, exchange] if root == TOPIC_PERMISSIONS => {
            b.clear_topic_permissions(vhost, user, Some(exchange));
        }
        _ => {}
    }
}

/// Makes this node's replicated records those of the tree, once the tree has been seeded:
/// what the tree holds is put where it differs, what it lacks is removed.
fn adopt(b: &Broker, tree: &Tree) {
    if tree.get(&[SEEDED.to_string()]).is_none() {
        return;
    }
    let wanted: BTreeMap<&Path, &Vec<u8>> = tree
        .entries()
        .filter(|(p, _)| p.first().is_some_and(|r| r != SEEDED))
        .collect();
    let held: BTreeMap<Path, Vec<u8>> = local_records(b)
        .into_iter()
        .filter_map(|c| match c {
            Command::Put { path, value } => Some((path, value)),
            _ => None,
        })
        .collect();
    for path in held.keys() {
        if !wanted.contains_key(path) {
            apply_delete(b, path);
        }
    }
    for (path, value) in wanted {
        if held.get(path) != Some(value) {
            apply_put(b, path, value);
        }
    }
}

/// Seeds the tree with this node's replicated records unless another node did first, then
/// adopts the tree's. Runs in the background from the start, retrying each second until a majority
/// answers (a node joining through seeds is not a member before that).
pub async fn join_metadata(broker: Weak<Broker>, node: Arc<MetaNode>) {
    loop {
        let Some(b) = broker.upgrade() else {
            return;
        };
        let then = local_records(&b);
        let seed = Command::IfAbsent {
            path: vec![SEEDED.into()],
            value: node.name().as_bytes().to_vec(),
            then,
        };
        match node.write(seed).await {
            Ok(reply) => {
                node.read(|t| adopt(&b, t));
                if reply.before.first().is_some_and(Option::is_none) {
                    tracing::info!("this node seeded the cluster's metadata with its own");
                } else {
                    tracing::info!(
                        "this node adopted the cluster's metadata; its own was replaced, as a reset does"
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

    /// Deletes a user with its permissions, through the cluster when the node is in one;
    /// false when there was none.
    pub async fn remove_user(&self, name: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.delete_user(name));
        };
        let cmd = Command::Batch(vec![
            Command::Delete {
                path: user_path(name),
            },
            Command::DeleteTree {
                path: vec![PERMISSIONS.into(), name.into()],
            },
            Command::DeleteTree {
                path: vec![TOPIC_PERMISSIONS.into(), name.into()],
            },
        ]);
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets a user's permissions in a vhost, through the cluster when the node is in one.
    pub async fn save_permission(&self, vhost: &str, user: &str, p: Permission) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            self.set_permission(vhost, user, p);
            return Ok(());
        };
        let cmd = Command::Put {
            path: permission_path(user, vhost),
            value: encode_permission(&p),
        };
        node.write(cmd).await.map_err(unavailable).map(|_| ())
    }

    /// Removes a user's permissions in a vhost, through the cluster when the node is in one;
    /// false when there were none.
    pub async fn remove_permission(&self, vhost: &str, user: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.clear_permission(vhost, user));
        };
        let cmd = Command::Delete {
            path: permission_path(user, vhost),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets a user's topic permission on an exchange, through the cluster when the node is in
    /// one.
    pub async fn save_topic_permission(
        &self,
        vhost: &str,
        user: &str,
        t: TopicPermission,
    ) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            self.set_topic_permission(vhost, user, t);
            return Ok(());
        };
        let cmd = Command::Put {
            path: topic_path(user, vhost, &t.exchange),
            value: encode_topic(&t),
        };
        node.write(cmd).await.map_err(unavailable).map(|_| ())
    }

    /// Removes a user's topic permissions in a vhost, through the cluster when the node is in
    /// one; false when there were none (as this node saw them).
    pub async fn remove_topic_permissions(&self, vhost: &str, user: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.clear_topic_permissions(vhost, user, None));
        };
        let had = self
            .permissions
            .topics(vhost, user)
            .is_some_and(|l| !l.is_empty());
        let cmd = Command::DeleteTree {
            path: vec![TOPIC_PERMISSIONS.into(), user.into(), vhost.into()],
        };
        node.write(cmd).await.map_err(unavailable)?;
        Ok(had)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_their_tree_values() {
        let u = User::new("alice", "s3cret", &["administrator", "monitoring"]);
        let back = decode_user("alice", &encode_user(&u)).expect("decodes");
        assert!(back.password_matches("s3cret"));
        assert_eq!(back.tags, u.tags);
        assert_eq!(encode_user(&back), encode_user(&u));
        assert!(decode_user("alice", b"not json").is_none());
        let p = Permission::new("^amq", "", ".*").expect("valid");
        let back = decode_permission(&encode_permission(&p)).expect("decodes");
        assert_eq!(back.pattern(Access::Configure), "^amq");
        assert_eq!(back.pattern(Access::Read), ".*");
        let t = TopicPermission::new("amq.topic", "^{username}", ".*", "alice", "/").expect("ok");
        let back = decode_topic("alice", "/", "amq.topic", &encode_topic(&t)).expect("decodes");
        assert_eq!(back.write(), t.write());
        assert_eq!(back.exchange, "amq.topic");
    }
}
