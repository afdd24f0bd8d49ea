//! Federation (RabbitMQ's federation plugin, built in): the `federation-upstream` and
//! `federation-upstream-set` runtime-parameter components, and exchange federation. An
//! exchange whose policy names `federation-upstream` (one upstream) or
//! `federation-upstream-set` (a set, or `all`) gets one link per upstream (`link`), which
//! brings the upstream exchange's messages for the local exchange's binding keys here. The
//! links wanted are worked out again from the policies, upstreams and exchanges whenever a
//! parameter changes and every second (which catches policy changes and new or deleted
//! exchanges); links no longer wanted, or whose upstream changed, are stopped.
//!
//! Not yet: queue federation, `federation-upstream-pattern`, links on a clustered node (the
//! parameters are refused there, as shovels are), the `x-federation-upstream` exchange type
//! on Warren as an upstream (links to a Warren upstream use a fanout exchange instead).

pub mod headers;
pub mod link;
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

/// (vhost, exchange, upstream name).
type LinkKey = (String, String, String);

/// A running link.
struct Running {
    ctx: Arc<link::Ctx>,
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
        let mut out = Vec::new();
        for v in broker.vhosts() {
            for x in v.exchanges() {
                let Some(p) = x.policy() else { continue };
                if x.name.is_empty() || x.is_deleted() {
                    continue;
                }
                let def = &p.definition;
                if !def.contains_key("federation-upstream")
                    && !def.contains_key("federation-upstream-set")
                {
                    continue;
                }
                for u in upstream::for_policy(&broker.parameters, &v.name, &x.name, def) {
                    let key = (v.name.clone(), x.name.clone(), u.name.clone());
                    out.push((key, p.name.clone(), u));
                }
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
                tracing::info!(vhost = %k.0, exchange = %k.1, upstream = %k.2, "federation link removed");
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
            let ctx = Arc::new(link::Ctx {
                vhost: key.0.clone(),
                exchange: key.1.clone(),
                policy,
                upstream: u,
                status: Arc::new(status::Status::new(uri)),
                broker: self.broker.clone(),
            });
            let (stop, rx) = watch::channel(false);
            tokio::spawn(link::run(ctx.clone(), rx));
            tracing::info!(vhost = %key.0, exchange = %key.1, upstream = %key.2, "federation link started");
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
                let (vhost, x, up) = e.key();
                let ctx = &e.value().ctx;
                let mut id = Map::new();
                id.insert("node".into(), json!(node));
                id.insert("exchange".into(), json!(x));
                id.insert("upstream_exchange".into(), json!(ctx.upstream.exchange));
                id.insert("type".into(), json!("exchange"));
                id.insert("vhost".into(), json!(vhost));
                id.insert("upstream".into(), json!(up));
                id.insert("id".into(), json!(link_id(e.key(), &ctx.upstream.exchange)));
                (e.key().clone(), ctx.status.to_json(&id))
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter().map(|(_, v)| v).collect()
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
}
