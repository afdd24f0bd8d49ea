//! Who may do what, in the tree: users (`["users", name]` -> their hash, hashing and tags, as
//! RabbitMQ's definitions spell them), their limits (`["user-limits", user, limit]` -> a
//! number), permissions (`["permissions", user, vhost]`) and topic permissions
//! (`["topic-permissions", user, vhost, exchange]`). Everything is keyed by user first, so
//! deleting a user removes what hangs off it in the same entry; a vhost's share is removed by
//! `DeleteWhere` on the vhost part. Writes that need a user or a vhost are guarded by
//! `IfPresent`, so one racing with their deletion leaves nothing behind.

use super::{unavailable, vhost_path, Record};
use crate::auth::{Hashing, User};
use crate::broker::Broker;
use crate::cluster::types::{Command, Path};
use crate::error::CoreResult;
use crate::permissions::{Access, Permission, TopicPermission};
use serde::{Deserialize, Serialize};

/// The subtree of users.
pub(super) const USERS: &str = "users";
/// The subtree of users' limits, by user then limit.
pub(super) const USER_LIMITS: &str = "user-limits";
/// The subtree of permissions, by user then vhost.
pub(super) const PERMISSIONS: &str = "permissions";
/// The subtree of topic permissions, by user, vhost, then exchange.
pub(super) const TOPIC_PERMISSIONS: &str = "topic-permissions";

fn user_path(name: &str) -> Path {
    vec![USERS.into(), name.into()]
}

fn user_limit_path(user: &str, limit: &str) -> Path {
    vec![USER_LIMITS.into(), user.into(), limit.into()]
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

fn decode_number(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// This node's users, limits and permissions as tree records.
pub(super) fn records(b: &Broker) -> Vec<Record> {
    let mut out: Vec<Record> = b
        .users()
        .iter()
        .map(|u| (user_path(&u.name), encode_user(u)))
        .collect();
    for (user, limits) in b.user_limits() {
        for (name, value) in limits {
            if let Some(n) = value.as_i64() {
                out.push((user_limit_path(&user, &name), n.to_string().into_bytes()));
            }
        }
    }
    for (vhost, user, p) in b.permissions.list() {
        out.push((permission_path(&user, &vhost), encode_permission(&p)));
    }
    for (vhost, user, t) in b.permissions.list_topics() {
        out.push((topic_path(&user, &vhost, &t.exchange), encode_topic(&t)));
    }
    out
}

/// Applies a put under one of this file's roots; false when the value does not decode.
pub(super) fn apply_put(b: &Broker, path: &[String], value: &[u8]) -> bool {
    match path {
        [root, name] if root == USERS => decode_user(name, value).map(|u| {
            b.put_user(u);
        }),
        [root, user, limit] if root == USER_LIMITS => decode_number(value).map(|n| {
            b.set_user_limit(user, limit, Some(n));
        }),
        [root, user, vhost] if root == PERMISSIONS => {
            decode_permission(value).map(|p| b.set_permission(vhost, user, p))
        }
        [root, user, vhost, exchange] if root == TOPIC_PERMISSIONS => {
            decode_topic(user, vhost, exchange, value)
                .map(|t| b.set_topic_permission(vhost, user, t))
        }
        _ => Some(()),
    }
    .is_some()
}

/// Applies a delete under one of this file's roots.
pub(super) fn apply_delete(b: &Broker, path: &[String]) {
    match path {
        [root, name] if root == USERS => {
            b.delete_user(name);
        }
        [root, user, limit] if root == USER_LIMITS => {
            b.set_user_limit(user, limit, None);
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

/// `then`, applied only while the user and the vhost exist.
fn for_user_in_vhost(user: &str, vhost: &str, then: Command) -> Command {
    Command::IfPresent {
        path: user_path(user),
        then: vec![Command::IfPresent {
            path: vhost_path(vhost),
            then: vec![then],
        }],
    }
}

/// The commands that remove a vhost's share of every user's permissions.
pub(super) fn vhost_share(vhost: &str) -> Vec<Command> {
    [PERMISSIONS, TOPIC_PERMISSIONS]
        .into_iter()
        .map(|root| Command::DeleteWhere {
            prefix: vec![root.into()],
            at: 2,
            name: vhost.into(),
        })
        .collect()
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

    /// Deletes a user with its limits and permissions, through the cluster when the node is
    /// in one; false when there was none.
    pub async fn remove_user(&self, name: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.delete_user(name));
        };
        let mut batch = vec![Command::Delete {
            path: user_path(name),
        }];
        for root in [USER_LIMITS, PERMISSIONS, TOPIC_PERMISSIONS] {
            batch.push(Command::DeleteTree {
                path: vec![root.into(), name.into()],
            });
        }
        let reply = node
            .write(Command::Batch(batch))
            .await
            .map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets (`Some`) or clears (`None`) one of a user's limits, through the cluster when the
    /// node is in one; false when the user does not exist.
    pub async fn save_user_limit(
        &self,
        user: &str,
        name: &str,
        value: Option<i64>,
    ) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.set_user_limit(user, name, value));
        };
        let path = user_limit_path(user, name);
        let change = match value {
            Some(n) => Command::Put {
                path,
                value: n.to_string().into_bytes(),
            },
            None => Command::Delete { path },
        };
        let cmd = Command::IfPresent {
            path: user_path(user),
            then: vec![change],
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets a user's permissions in a vhost, through the cluster when the node is in one.
    pub async fn save_permission(&self, vhost: &str, user: &str, p: Permission) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            self.set_permission(vhost, user, p);
            return Ok(());
        };
        let cmd = for_user_in_vhost(
            user,
            vhost,
            Command::Put {
                path: permission_path(user, vhost),
                value: encode_permission(&p),
            },
        );
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
        let cmd = for_user_in_vhost(
            user,
            vhost,
            Command::Put {
                path: topic_path(user, vhost, &t.exchange),
                value: encode_topic(&t),
            },
        );
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
        assert_eq!(decode_number(b"-1"), Some(-1));
        assert_eq!(decode_number(b"x"), None);
    }
}
