//! Federation (RabbitMQ's federation plugin, built in): the `federation-upstream` and
//! `federation-upstream-set` runtime-parameter components, and exchange and queue
//! federation. An exchange or queue whose policy names `federation-upstream` (one upstream),
//! `federation-upstream-set` (a set, or `all`) or `federation-upstream-pattern` (the
//! upstreams whose names match a regular expression) gets one link per upstream: an exchange
//! link (`link`) brings the upstream exchange's messages for the local exchange's binding
//! keys here; a queue link (`queue_link`) moves messages from the upstream queue while the
//! local one has consumers waiting. The links wanted are worked out again from the
//! policies, upstreams, exchanges and queues whenever a parameter changes and every second
//! (which catches policy changes and new or deleted exchanges and queues); links no longer
//! wanted, or whose upstream changed, are stopped. (The `x-federation-upstream` exchange
//! type, which upstreams need, lives with the other exchange types.)
//!
//! Not yet: links on a clustered node (the parameters are refused there, as shovels are).

pub mod conn;
pub mod headers;
pub mod link;
pub mod queue_link;
pub mod runner;
pub mod status;
pub mod upstream;

use crate::broker::Broker;
use crate::parameters::Component;
use dashmap::DashMap;
use serde_json::{json, Map, Value};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use upstream::{Upstream, UPSTREAM, UPSTREAM_SET};

/// What a link federates.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// An exchange, by name.
    Exchange(String),
    /// A queue, by name.
    Queue(String),
}

impl Target {
    /// The exchange's or queue's name.
    pub fn name(&self) -> &str {
        match self {
            Target::Exchange(n) | Target::Queue(n) => n,
        }
    }
}

/// (vhost, exchange or queue, upstream name).
type LinkKey = (String, Target, String);

/// Whether a policy definition federates what it applies to.
fn federates(def: &Map<String, Value>) -> bool {
    [
        "federation-upstream",
        "federation-upstream-set",
        "federation-upstream-pattern",
    ]
    .iter()
    .any(|k| def.contains_key(*k))
}

/// A running link.
struct Running {
    ctx: Arc<conn::Ctx>,
    /// Set to true when the link is removed; dropped when the node stops.
    stop: watch::Sender<bool>,
}

/// The node's federation links.
pub struct Federation {
    broker: Weak<Broker>,
    links: DashMap<LinkKey, Running>,
    wake: Notify,
}

/// One of the two parameter components.
struct Params {
    federation: Arc<Federation>,
    set: bool,
}

impl Federation {
    /// Registers the components with the broker and starts following its federated
    /// exchanges.
    pub fn install(broker: &Arc<Broker>) {
        let federation = Arc::new(Federation {
            broker: Arc::downgrade(broker),
            links: DashMap::new(),
            wake: Notify::new(),
        });
        for set in [false, true] {
            let name = if set { UPSTREAM_SET } else { UPSTREAM };
            let params = Params {
                federation: federation.clone(),
                set,
            };
            broker.parameters.register(name, Arc::new(params));
        }
        tokio::spawn(follow(federation));
    }

    /// The links wanted now, with the policy that wants each.
    fn wanted(&self, broker: &Broker) -> Vec<(LinkKey, String, Upstream)> {
        let mut federated = Vec::new();
        for v in broker.vhosts() {
            for x in v.exchanges() {
                let Some(p) = x.policy() else { continue };
                if !x.name.is_empty() && !x.is_deleted() && federates(&p.definition) {
                    federated.push((v.name.clone(), Target::Exchange(x.name.clone()), p));
                }
            }
            for q in v.queues() {
                // Not a link's own queue, a stream, or another node's queue.
                let internal = q.arguments.inner().contains_key("x-internal-purpose");
                if internal || q.args.stream || q.home.is_some() || q.is_deleted() {
                    continue;
                }
                let Some(p) = q.applied().policy.clone() else {
                    continue;
                };
                if federates(&p.definition) {
                    federated.push((v.name.clone(), Target::Queue(q.name.clone()), p));
                }
            }
        }
        let mut out = Vec::new();
        for (vhost, target, p) in federated {
            for u in upstream::for_policy(&broker.parameters, &vhost, target.name(), &p.definition)
            {
                let key = (vhost.clone(), target.clone(), u.name.clone());
                out.push((key, p.name.clone(), u));
            }
        }
        out
    }

    /// Starts the links wanted and not running, restarts those whose upstream changed, and
    /// stops those no longer wanted.
    fn reconcile(&self, broker: &Broker) {
        let wanted = self.wanted(broker);
        let keys: std::collections::HashSet<&LinkKey> = wanted.iter().map(|(k, _, _)| k).collect();
        self.links.retain(|k, r| {
            let keep = keys.contains(k);
            if !keep {
                tracing::info!(vhost = %k.0, target = %k.1.name(), upstream = %k.2, "federation link removed");
                let _ = r.stop.send(true);
            }
            keep
        });
        for (key, policy, u) in wanted {
            if let Some(r) = self.links.get(&key) {
                if r.ctx.upstream == u && r.ctx.policy == policy {
                    continue;
                }
            }
            if let Some((_, old)) = self.links.remove(&key) {
                let _ = old.stop.send(true);
            }
            let uri = u
                .uris
                .first()
                .map(|s| crate::client::uri::redact(s))
                .unwrap_or_default();
            let ctx = Arc::new(conn::Ctx {
                vhost: key.0.clone(),
                target: key.1.clone(),
                policy,
                upstream: u,
                status: Arc::new(status::Status::new(uri)),
                broker: self.broker.clone(),
            });
            let (stop, rx) = watch::channel(false);
            tokio::spawn(runner::run(ctx.clone(), rx));
            tracing::info!(vhost = %key.0, target = %key.1.name(), upstream = %key.2, "federation link started");
            self.links.insert(key, Running { ctx, stop });
        }
    }

    fn status(&self) -> Vec<Value> {
        let node = self
            .broker
            .upgrade()
            .map(|b| b.config.node_name.clone())
            .unwrap_or_default();
        let mut all: Vec<(LinkKey, Value)> = self
            .links
            .iter()
            .map(|e| {
                let (vhost, target, up) = e.key();
                let ctx = &e.value().ctx;
                let mut id = Map::new();
                id.insert("node".into(), json!(node));
                let kind = match target {
                    Target::Exchange(_) => "exchange",
                    Target::Queue(_) => "queue",
                };
                let upstream_name = ctx.upstream_target();
                id.insert(kind.into(), json!(target.name()));
                id.insert(format!("upstream_{kind}"), json!(upstream_name));
                id.insert("type".into(), json!(kind));
                id.insert("vhost".into(), json!(vhost));
                id.insert("upstream".into(), json!(up));
                id.insert("id".into(), json!(link_id(e.key(), upstream_name)));
                (e.key().clone(), ctx.status.to_json(&id))
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter().map(|(_, v)| v).collect()
    }
}

impl Federation {
    /// Restarts the link with id `id` in `vhost` (RabbitMQ's `restart_federation_link`): its
    /// task is stopped without removing anything upstream and a new one started at once.
    /// False when there is no such link.
    fn restart(&self, vhost: &str, id: &str) -> bool {
        let found = self.links.iter().find_map(|e| {
            let key = e.key();
            let upstream_name = e.value().ctx.upstream_target();
            (key.0 == vhost && link_id(key, upstream_name) == id).then(|| key.clone())
        });
        let Some(key) = found else { return false };
        // Dropping the sender stops the task as a node stop does: what it made upstream stays.
        self.links.remove(&key);
        if let Some(b) = self.broker.upgrade() {
            self.reconcile(&b);
        }
        true
    }
}

/// A short stable id for a link (RabbitMQ shows a hash of its key).
fn link_id(key: &LinkKey, upstream_x: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (key, upstream_x).hash(&mut h);
    format!("{:08x}", h.finish() as u32)
}

/// Reconciles when a parameter changes and every second, until the node is gone.
async fn follow(federation: Arc<Federation>) {
    loop {
        tokio::select! {
            _ = federation.wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let Some(broker) = federation.broker.upgrade() else {
            federation.links.clear();
            return;
        };
        federation.reconcile(&broker);
    }
}

impl Component for Params {
    fn validate(
        &self,
        _vhost: &str,
        name: &str,
        value: &Value,
        _user: Option<&str>,
    ) -> Vec<String> {
        if self.set {
            upstream::validate_set(name, value)
        } else {
            upstream::validate_upstream(name, value)
        }
    }

    fn notify(&self, _vhost: &str, _name: &str, _value: &Value) {
        self.federation.wake.notify_one();
    }

    fn notify_clear(&self, _vhost: &str, _name: &str) {
        self.federation.wake.notify_one();
    }

    fn status(&self) -> Vec<Value> {
        self.federation.status()
    }

    /// For upstreams, `name` is a link's id (`/api/federation-links` shows it).
    fn restart(&self, vhost: &str, name: &str) -> bool {
        !self.set && self.federation.restart(vhost, name)
    }
}
