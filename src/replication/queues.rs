//! Queue definitions and bindings to queues in the tree: `["vhosts", v, "queues", q]` -> the
//! queue as JSON (`node`: its home node, `durable`, `auto_delete`, `arguments` as the hex of
//! an AMQP field table), and bindings under `["vhosts", v, "bindings", "q", queue, ...]` (see
//! [`super::exchanges`]). Every node installs every queue: its home node runs the queue, the
//! others a handle that forwards to it ([`crate::queue::remote`], [`super::forward`]).
//! Exclusive queues stay on their connection's node and out of the tree, with their
//! bindings, so RPC reply queues cost no consensus round trip (as in RabbitMQ); the other
//! nodes learn them directly ([`super::exclusive`]).
//!
//! A queue is created by the group (the first of racing declares wins; the others are
//! checked for equivalence against it) and installed where the entry applies: on its home
//! node that starts it. A delete removes the record, the bindings to it, and the auto-delete
//! exchanges whose last binding led to it, in one entry.

use super::exchanges::{
    binding_path, bindings_to, emptied_sources, with_exchanges, End, SOURCE_AT,
};
use super::queue_record::{decode_queue, encode_queue, queue_path, QUEUES};
use super::{forward, unavailable, Record, VHOSTS};
use crate::broker::Broker;
use crate::cluster::types::Command;
use crate::error::{CoreError, CoreResult};
use crate::queue::remote::Home;
use crate::queue::QueueRef;
use crate::vhost::{QueueOptions, VHost};
use amq_protocol::types::FieldTable;
use std::collections::BTreeMap;
use std::sync::Arc;

/// This node's name in the cluster (None: not in one).
fn me(b: &Broker) -> Option<String> {
    b.cluster.get().map(|n| n.name().to_owned())
}

/// Every non-exclusive queue this node knows, with its home node, as tree records.
pub(super) fn records(b: &Broker) -> Vec<Record> {
    let Some(me) = me(b) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for v in b.vhosts() {
        for q in v.queues() {
            if q.exclusive_owner.is_none() {
                let node = q.home.as_deref().unwrap_or(&me);
                out.push((
                    queue_path(&v.name, &q.name),
                    encode_queue(node, q.durable, q.auto_delete, &q.arguments, None),
                ));
            }
        }
    }
    out
}

/// Applies a put of a queue record; false when it does not decode.
pub(super) fn apply_put(b: &Broker, path: &[String], value: &[u8]) -> bool {
    let [_, vhost, _, name] = path else {
        return true;
    };
    let Some(def) = decode_queue(value) else {
        return false;
    };
    let (Some(v), Some(node)) = (b.vhost(vhost), b.cluster.get()) else {
        return true;
    };
    if def.quorum.is_some() {
        return super::quorum::apply(b, &v, name, value);
    }
    let home = (def.node != node.name()).then(|| Home {
        node: &def.node,
        link: forward::link(&b.cluster, b.incarnation),
        owner: None,
    });
    v.install_queue(name, def.durable, def.auto_delete, &def.arguments, home);
    true
}

/// Applies a delete of a queue record.
pub(super) fn apply_delete(b: &Broker, path: &[String]) {
    if let ([_, vhost, _, name], Some(v)) = (path, path.get(1).and_then(|v| b.vhost(v))) {
        debug_assert_eq!(&v.name, vhost);
        v.drop_queue(name);
    }
    // A quorum queue's group goes with its record on the nodes that were its members.
    super::drop_orphans(b);
}

/// Removes a queue's record and the bindings to it, and the auto-delete exchanges (of those
/// committed here) whose last binding led to it.
pub(super) fn removal(v: &VHost, name: &str) -> Command {
    let mut batch = emptied_sources(v, End::Queue(name));
    batch.push(Command::DeleteWhere {
        prefix: bindings_to(&v.name, End::Queue(name)),
        at: SOURCE_AT - 1,
        name: name.into(),
    });
    batch.push(Command::Delete {
        path: queue_path(&v.name, name),
    });
    Command::Batch(batch)
}

/// Queues in the cluster from which `balanced` picks a node at random rather than counting
/// (RabbitMQ's `queue_count_start_random_selection`).
const COUNT_UP_TO: usize = 1000;

/// The running member `balanced` places a new queue on: the one homing the fewest queues
/// (this node on a tie), or a random running one once the cluster holds many queues.
async fn least_loaded(node: &Arc<crate::cluster::MetaNode>) -> String {
    let running: Vec<String> = node
        .member_status(std::time::Duration::from_millis(500))
        .await
        .into_iter()
        .filter(|m| m.running)
        .map(|m| m.member.name)
        .collect();
    let me = node.name().to_owned();
    let mut counts: BTreeMap<&str, usize> = running.iter().map(|n| (n.as_str(), 0)).collect();
    let total = node.read(|t| {
        let mut total = 0;
        for (path, value) in t.children(&[VHOSTS.to_string()]) {
            if path.get(2).is_some_and(|k| k == QUEUES) && path.len() == 4 {
                total += 1;
                let home = decode_queue(value).map(|d| d.node);
                if let Some(c) = home.and_then(|h| counts.get_mut(h.as_str())) {
                    *c += 1;
                }
            }
        }
        total
    });
    if running.is_empty() {
        return me;
    }
    if total >= COUNT_UP_TO {
        let pick = crate::clock::unix_ms() as usize % running.len();
        return running.get(pick).cloned().unwrap_or(me);
    }
    counts
        .into_iter()
        .min_by_key(|(n, c)| (*c, *n != me))
        .map_or(me.clone(), |(n, _)| n.to_owned())
}

/// The queues in the tree whose home is `node`, by vhost and name.
fn homed_on(t: &crate::cluster::tree::Tree, node: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, value) in t.children(&[VHOSTS.to_string()]) {
        if let [_, vhost, kind, name] = path.as_slice() {
            if kind == QUEUES && decode_queue(value).is_some_and(|d| d.node == node) {
                out.push((vhost.clone(), name.clone()));
            }
        }
    }
    out
}

impl Broker {
    /// A queue by name, with a miss confirmed against the cluster ([`Broker::catch_up`]).
    pub async fn find_queue(&self, v: &VHost, name: &str) -> CoreResult<QueueRef> {
        match v.queue(name) {
            Err(CoreError::NotFound { .. }) if self.catch_up().await => v.queue(name),
            found => found,
        }
    }

    /// queue.declare, through the cluster when the node is in one and the queue is not
    /// exclusive: a queue already known is answered here (its home node counts its
    /// messages); a new one is created by the group with this node as its home.
    pub async fn declare_queue(
        &self,
        v: &Arc<VHost>,
        name: &str,
        o: &QueueOptions,
        connection: u64,
    ) -> CoreResult<QueueRef> {
        let Some(node) = self.cluster.get() else {
            return v.queue_declare(name, o, connection);
        };
        if v.queue(name).is_ok() {
            return v.queue_declare(name, o, connection);
        }
        if o.exclusive && !o.passive {
            let q = v.queue_declare(name, o, connection)?;
            super::exclusive::declared(self, &q).await;
            return Ok(q);
        }
        if o.passive {
            self.catch_up().await;
            return v.queue_declare(name, o, connection);
        }
        let args = v.queue_declare_checks(name, o)?;
        let policy = v.policies.for_queue(name, &args, &o.arguments);
        let balanced = policy
            .definition
            .get("queue-leader-locator")
            .and_then(serde_json::Value::as_str)
            .and_then(crate::args::locator_is_balanced)
            .unwrap_or(args.balanced);
        let home = match balanced {
            true => least_loaded(&node).await,
            false => node.name().to_owned(),
        };
        let value = match args.quorum {
            true => self.quorum_record(&node, &home, o).await?,
            false => encode_queue(&home, o.durable, o.auto_delete, &o.arguments, None),
        };
        let cmd = Command::IfPresent {
            path: super::vhost_path(&v.name),
            then: vec![Command::Create {
                path: queue_path(&v.name, name),
                value,
            }],
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        match reply.before.as_slice() {
            [Some(_), _] => v.queue_declare(name, o, connection),
            _ => Err(CoreError::Unavailable(format!(
                "vhost '{}' was deleted",
                v.name
            ))),
        }
    }

    /// forget_cluster_node: removes the member `name` (not running) from the cluster, then
    /// the queues whose home it was, with the bindings to them, in one entry, as RabbitMQ's
    /// `forget_all` does for the classic queues of a node it forgets (their messages were on
    /// that node's disk). The number of queues removed.
    pub async fn forget_cluster_node(&self, name: &str) -> CoreResult<usize> {
        let node = self
            .cluster
            .get()
            .ok_or_else(|| CoreError::Unavailable("this node is not in a cluster".into()))?;
        node.forget(name).await.map_err(unavailable)?;
        let homed = node.read(|t| homed_on(t, name));
        let batch: Vec<Command> = homed
            .iter()
            .filter_map(|(vhost, queue)| self.vhost(vhost).map(|v| removal(&v, queue)))
            .collect();
        if !batch.is_empty() {
            node.write(Command::Batch(batch))
                .await
                .map_err(unavailable)?;
            tracing::info!(
                node = name,
                queues = homed.len(),
                "removed the queues of a forgotten node"
            );
        }
        Ok(homed.len())
    }

    /// queue.delete, through the cluster when the queue is replicated: the queue is stopped
    /// where it lives (its conditions checked there), then its record, the bindings to it and
    /// the auto-delete exchanges they emptied go on every node. A missing queue deletes
    /// nothing and reports 0.
    pub async fn delete_queue(
        &self,
        v: &VHost,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: u64,
    ) -> CoreResult<u32> {
        let Some(node) = self.cluster.get() else {
            return v.queue_delete(name, if_unused, if_empty, connection).await;
        };
        let Ok(q) = self.find_queue(v, name).await else {
            return Ok(0);
        };
        if q.exclusive_owner.is_some() {
            return v.queue_delete(name, if_unused, if_empty, connection).await;
        }
        if q.home.is_some() {
            // Its home node deletes it through the group; wait until that is applied here.
            let n = q.delete(if_unused, if_empty).await?;
            self.catch_up().await;
            return Ok(n);
        }
        let n = match q.delete(if_unused, if_empty).await {
            Ok(n) => n,
            Err(CoreError::NotFound { .. }) => 0,
            Err(e) => return Err(e),
        };
        q.mark_deleted();
        node.write(removal(v, name)).await.map_err(unavailable)?;
        Ok(n)
    }

    /// queue.bind; a missing queue or exchange is confirmed against the cluster first. A
    /// binding to a replicated queue goes through the group, guarded by both ends.
    pub async fn bind_queue(
        &self,
        v: &VHost,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
        connection: u64,
    ) -> CoreResult<()> {
        let checks = match v.queue_bind_checks(queue, exchange, key, args, connection) {
            Err(CoreError::NotFound { .. }) if self.catch_up().await => {
                v.queue_bind_checks(queue, exchange, key, args, connection)
            }
            done => done,
        };
        let q = checks?;
        let Some(node) = self.cluster.get().filter(|_| q.exclusive_owner.is_none()) else {
            v.queue_bind(queue, exchange, key, args, connection)?;
            if q.exclusive_owner.is_some() && q.home.is_none() {
                super::exclusive::rebound(self, &q, exchange, key, args, true).await;
            }
            return Ok(());
        };
        let put = Command::Put {
            path: binding_path(&v.name, exchange, key, args, End::Queue(queue)),
            value: Vec::new(),
        };
        let guarded = Command::IfPresent {
            path: queue_path(&v.name, queue),
            then: vec![with_exchanges(&v.name, &[exchange], put)],
        };
        let reply = node.write(guarded).await.map_err(unavailable)?;
        let guards = 1 + usize::from(!super::exchanges::predeclared(exchange));
        if reply.before.len() <= guards {
            v.queue_bind_checks(queue, exchange, key, args, connection)?;
        }
        self.settled_everywhere().await;
        Ok(())
    }

    /// queue.unbind, through the cluster when the queue is replicated, with the exchange when
    /// it is auto-delete and this was its last binding. A missing queue or exchange unbinds
    /// nothing and succeeds, as in RabbitMQ.
    pub async fn unbind_queue(
        &self,
        v: &VHost,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
        connection: u64,
    ) -> CoreResult<()> {
        let replicated = match (self.cluster.get(), v.queue(queue)) {
            (Some(node), Ok(q)) if q.exclusive_owner.is_none() && !exchange.is_empty() => {
                Some((node, q))
            }
            _ => None,
        };
        let Some((node, q)) = replicated else {
            v.queue_unbind(queue, exchange, key, args, connection)?;
            let own = v.queue(queue).ok().filter(|q| {
                q.exclusive_owner.is_some() && q.home.is_none() && !exchange.is_empty()
            });
            if let Some(q) = own {
                super::exclusive::rebound(self, &q, exchange, key, args, false).await;
            }
            return Ok(());
        };
        v.check_exclusive(&q, connection)?;
        let path = binding_path(&v.name, exchange, key, args, End::Queue(queue));
        self.unbind_path(&node, v, exchange, path).await
    }
}
