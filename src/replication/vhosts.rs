//! Virtual hosts and what hangs off them, in the tree: the vhost (`["vhosts", name]`), its
//! limits (`["vhosts", v, "limits", limit]` -> a number), its policies and operator policies
//! (`["vhosts", v, "policy" | "operator_policy", name]` -> the policy's JSON, RabbitMQ's
//! runtime-parameter components), and the broker's global parameters
//! (`["global-parameters", name]` -> JSON). A vhost's records live below it, so deleting it
//! is one `DeleteTree` (with its share of the permissions); writes below a vhost are guarded
//! by `IfPresent` so none outlives it.
//!
//! Deleting a vhost is applied at once on every node ([`Broker::detach_vhost`]); its queues
//! are then removed in the background, from the detached vhost only, so a vhost re-created
//! under the same name is never touched by the old one's clean-up.

use super::{access, unavailable, vhost_path, Record, VHOSTS};
use crate::broker::Broker;
use crate::cluster::types::{Command, Path};
use crate::error::CoreResult;
use crate::policy::Policy;
use crate::vhost::policies::component;
use crate::vhost::{VHost, VhostLimits};
use std::sync::Arc;

/// The subtree of global runtime parameters.
pub(super) const GLOBAL_PARAMETERS: &str = "global-parameters";
/// Where a vhost's limits live below it.
const LIMITS: &str = "limits";

fn limit_path(vhost: &str, limit: &str) -> Path {
    vec![VHOSTS.into(), vhost.into(), LIMITS.into(), limit.into()]
}

fn policy_path(vhost: &str, name: &str, operator: bool) -> Path {
    vec![
        VHOSTS.into(),
        vhost.into(),
        component(operator).into(),
        name.into(),
    ]
}

fn global_path(name: &str) -> Path {
    vec![GLOBAL_PARAMETERS.into(), name.into()]
}

/// A vhost's own value: nothing yet beyond its existence (RabbitMQ's description and tags
/// are not kept).
const VHOST_VALUE: &[u8] = b"{}";

fn is_policy(kind: &str) -> bool {
    kind == component(false) || kind == component(true)
}

fn decode_json(bytes: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(bytes).ok()
}

/// This node's vhosts with their limits and policies, and its global parameters, as tree
/// records.
pub(super) fn records(b: &Broker) -> Vec<Record> {
    let mut out = Vec::new();
    for v in b.vhosts() {
        out.push((vhost_path(&v.name), VHOST_VALUE.to_vec()));
        for (limit, value) in v.limits.to_json() {
            if let Some(n) = value.as_i64() {
                out.push((limit_path(&v.name, &limit), n.to_string().into_bytes()));
            }
        }
        for operator in [false, true] {
            for p in v.policies.list(operator) {
                out.push((
                    policy_path(&v.name, &p.name, operator),
                    p.to_json().to_string().into_bytes(),
                ));
            }
        }
    }
    for (name, value) in b.global_parameters() {
        out.push((global_path(&name), value.to_string().into_bytes()));
    }
    out
}

/// Re-evaluates a vhost's policies in the background (applying a replicated entry must not
/// wait on its queues).
fn reapply_policies(v: Arc<VHost>) {
    tokio::spawn(async move { v.apply_policies().await });
}

/// Applies a put under one of this file's roots; false when the value does not decode.
pub(super) fn apply_put(b: &Broker, path: &[String], value: &[u8]) -> bool {
    match path {
        [root, name] if root == VHOSTS => {
            b.add_vhost(name);
            true
        }
        [root, vhost, limits, limit] if root == VHOSTS && limits == LIMITS => {
            match std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()) {
                Some(n) => {
                    b.set_vhost_limit(vhost, limit, n);
                    true
                }
                None => false,
            }
        }
        [root, vhost, kind, name] if root == VHOSTS && is_policy(kind) => {
            let operator = kind == component(true);
            let Some(v) = b.vhost(vhost) else {
                return true;
            };
            match decode_json(value).map(|j| Policy::from_json(vhost, name, &j, operator)) {
                Some(Ok(p)) => {
                    v.set_policy(p, operator);
                    reapply_policies(v);
                    true
                }
                _ => false,
            }
        }
        [root, name] if root == GLOBAL_PARAMETERS => match decode_json(value) {
            Some(j) => {
                b.put_global_parameter(name, j);
                true
            }
            None => false,
        },
        _ => true,
    }
}

/// Applies a delete under one of this file's roots.
pub(super) fn apply_delete(b: &Broker, path: &[String]) {
    match path {
        [root, name] if root == VHOSTS => {
            if let Some(v) = b.detach_vhost(name) {
                tokio::spawn(async move { Broker::drop_queues(&v).await });
            }
        }
        [root, vhost, limits, limit] if root == VHOSTS && limits == LIMITS => {
            b.set_vhost_limit(vhost, limit, -1);
        }
        [root, vhost, kind, name] if root == VHOSTS && is_policy(kind) => {
            if let Some(v) = b.vhost(vhost) {
                if v.clear_policy(name, kind == component(true)) {
                    reapply_policies(v);
                }
            }
        }
        [root, name] if root == GLOBAL_PARAMETERS => {
            b.delete_global_parameter(name);
        }
        _ => {}
    }
}

/// `then`, applied only while the vhost exists.
fn in_vhost(vhost: &str, then: Command) -> Command {
    Command::IfPresent {
        path: vhost_path(vhost),
        then: vec![then],
    }
}

impl Broker {
    /// Creates a virtual host, through the cluster when the node is in one; false when it
    /// already exists.
    pub async fn save_vhost(&self, name: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.add_vhost(name));
        };
        let cmd = Command::Create {
            path: vhost_path(name),
            value: VHOST_VALUE.to_vec(),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_none))
    }

    /// Deletes a virtual host and everything in it ([`Broker::delete_vhost`]), through the
    /// cluster when the node is in one; false when there was none.
    pub async fn remove_vhost(&self, name: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.delete_vhost(name).await);
        };
        let mut batch = vec![Command::DeleteTree {
            path: vhost_path(name),
        }];
        batch.extend(access::vhost_share(name));
        let reply = node
            .write(Command::Batch(batch))
            .await
            .map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets (value ≥ 0) or clears (negative) a vhost limit, through the cluster when the
    /// node is in one; false when the vhost or the limit name is unknown.
    pub async fn save_vhost_limit(&self, vhost: &str, name: &str, value: i64) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.set_vhost_limit(vhost, name, value));
        };
        if VhostLimits::default().by_name(name).is_none() {
            return Ok(false);
        }
        let path = limit_path(vhost, name);
        let change = if value < 0 {
            Command::Delete { path }
        } else {
            Command::Put {
                path,
                value: value.to_string().into_bytes(),
            }
        };
        let reply = node
            .write(in_vhost(vhost, change))
            .await
            .map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets a policy in a vhost and applies it, through the cluster when the node is in one;
    /// `Some(true)` when it is new, None when the vhost is gone.
    pub async fn save_policy(
        &self,
        v: &VHost,
        p: Policy,
        operator: bool,
    ) -> CoreResult<Option<bool>> {
        let Some(node) = self.cluster.get() else {
            return Ok(Some(v.put_policy(p, operator).await));
        };
        let cmd = in_vhost(
            &v.name,
            Command::Put {
                path: policy_path(&v.name, &p.name, operator),
                value: p.to_json().to_string().into_bytes(),
            },
        );
        let reply = node.write(cmd).await.map_err(unavailable)?;
        v.apply_policies().await;
        Ok(match reply.before.as_slice() {
            [Some(_), before] => Some(before.is_none()),
            _ => None,
        })
    }

    /// Clears a policy in a vhost and applies what is left, through the cluster when the node
    /// is in one; false when there was none.
    pub async fn remove_policy(&self, v: &VHost, name: &str, operator: bool) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(v.delete_policy(name, operator).await);
        };
        let cmd = Command::Delete {
            path: policy_path(&v.name, name, operator),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        v.apply_policies().await;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }

    /// Sets a global parameter, through the cluster when the node is in one; true when it is
    /// new.
    pub async fn save_global_parameter(
        &self,
        name: &str,
        value: serde_json::Value,
    ) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.put_global_parameter(name, value));
        };
        let cmd = Command::Put {
            path: global_path(name),
            value: value.to_string().into_bytes(),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_none))
    }

    /// Clears a global parameter, through the cluster when the node is in one; false when it
    /// was not set.
    pub async fn remove_global_parameter(&self, name: &str) -> CoreResult<bool> {
        let Some(node) = self.cluster.get() else {
            return Ok(self.delete_global_parameter(name));
        };
        let cmd = Command::Delete {
            path: global_path(name),
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        Ok(reply.before.first().is_some_and(Option::is_some))
    }
}
