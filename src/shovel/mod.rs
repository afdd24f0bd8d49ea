//! Dynamic shovels (RabbitMQ's shovel plugin, built in): the `shovel` runtime-parameter
//! component. Setting a parameter validates it (`definition`) and (re)starts its task
//! (`worker`), which consumes from the source broker and publishes to the destination over
//! Warren's own AMQP client (`session` sets a run up, the client's relay moves the
//! messages, `props` rewrites properties and picks the destination on the way). Clearing the parameter, or deleting its vhost, stops the
//! task; the task ends its connections, so the source requeues what it had not settled.
//!
//! A destination may also be an `http(s)://` webhook (`webhook`, LavinMQ's addition),
//! which the run POSTs each message to instead of publishing. A shovel can be paused and
//! resumed (LavinMQ's addition too): pausing stops its task as a delete does (the run
//! settles what the destination confirms within a few seconds, the source requeues the
//! rest; the pause answers once that is done) and shows it `paused` until it is resumed,
//! restarted, set again or the node restarts.
//!
//! A URI without a host (`amqp://`) names this node, as in RabbitMQ: the shovel connects to
//! its own AMQP listener as the internal user, with every permission (RabbitMQ's direct
//! connection). Not yet: shovels on a clustered node (the parameter is refused
//! there), AMQP 1.0 endpoints.

pub mod definition;
mod props;
mod session;
pub mod status;
pub mod webhook;
pub mod worker;

use crate::broker::Broker;
use crate::parameters::{Component, Stopped};
use dashmap::DashMap;
use serde_json::Value;
use status::Status;
use std::sync::{Arc, Weak};
use tokio::sync::watch;
use worker::Ctx;

/// The runtime-parameter component's name.
pub const COMPONENT: &str = "shovel";

/// A running shovel.
struct Running {
    ctx: Arc<Ctx>,
    /// Dropping it (or sending) stops the task.
    stop: watch::Sender<bool>,
    /// Paused: its task was stopped, the shovel stays listed.
    paused: bool,
    /// Closed (its sender dropped) when the task has ended.
    ended: watch::Receiver<()>,
}

/// The node's shovels.
pub struct Shovels {
    broker: Weak<Broker>,
    running: DashMap<(String, String), Running>,
}

impl Shovels {
    /// Registers the component with the broker, which starts the shovels it holds.
    pub fn install(broker: &Arc<Broker>) {
        let shovels = Arc::new(Shovels {
            broker: Arc::downgrade(broker),
            running: DashMap::new(),
        });
        broker.parameters.register(COMPONENT, shovels);
    }

    fn start(&self, vhost: &str, name: &str, value: &Value) {
        self.stop(vhost, name);
        let Ok(def) = definition::ShovelDef::parse(name, value) else {
            tracing::warn!(
                vhost,
                name,
                "stored shovel definition is not valid; not started"
            );
            return;
        };
        let Some(broker) = self.broker.upgrade() else {
            return;
        };
        let ctx = Arc::new(Ctx {
            vhost: vhost.to_owned(),
            name: name.to_owned(),
            def,
            cluster_name: broker.cluster_name(),
            status: Arc::new(Status::default()),
            broker: self.broker.clone(),
        });
        let (stop, rx) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(());
        let run = worker::run(ctx.clone(), rx);
        tokio::spawn(async move {
            run.await;
            drop(ended_tx);
        });
        self.running.insert(
            (vhost.to_owned(), name.to_owned()),
            Running {
                ctx,
                stop,
                paused: false,
                ended,
            },
        );
    }

    fn stop(&self, vhost: &str, name: &str) -> bool {
        match self.running.remove(&(vhost.to_owned(), name.to_owned())) {
            Some((_, r)) => {
                let _ = r.stop.send(true);
                true
            }
            None => false,
        }
    }
}

impl Component for Shovels {
    fn validate(&self, _vhost: &str, name: &str, value: &Value, user: Option<&str>) -> Vec<String> {
        let mut errors = definition::validate(name, value);
        // RabbitMQ's validate_params_user: a URI naming this node reaches a vhost only the
        // user has permissions in (the node's own connections have every permission).
        if let (Some(user), Some(b), true) = (user, self.broker.upgrade(), errors.is_empty()) {
            for vhost in definition::local_vhosts(value) {
                if b.vhost(&vhost).is_none() || b.permissions.get(&vhost, user).is_none() {
                    errors.push(format!(
                        "user \"{user}\" may not connect to vhost \"{vhost}\""
                    ));
                    break;
                }
            }
        }
        errors
    }

    fn notify(&self, vhost: &str, name: &str, value: &Value) {
        self.start(vhost, name, value);
    }

    fn notify_clear(&self, vhost: &str, name: &str) {
        self.stop(vhost, name);
    }

    fn status(&self) -> Vec<Value> {
        let node = self
            .broker
            .upgrade()
            .map(|b| b.config.node_name.clone())
            .unwrap_or_default();
        let mut all: Vec<((String, String), Value)> = self
            .running
            .iter()
            .map(|e| {
                let mut status = e.value().ctx.status_json(&node);
                if e.value().paused {
                    status["state"] = Value::from("paused");
                }
                (e.key().clone(), status)
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all.into_iter().map(|(_, v)| v).collect()
    }

    fn restart(&self, vhost: &str, name: &str) -> bool {
        let Some(b) = self.broker.upgrade() else {
            return false;
        };
        match b.parameters.get(COMPONENT, vhost, name) {
            Some(value)
                if self
                    .running
                    .contains_key(&(vhost.to_owned(), name.to_owned())) =>
            {
                tracing::info!(vhost, name, "shovel will be restarted");
                self.start(vhost, name, &value);
                true
            }
            _ => false,
        }
    }

    fn set_paused(&self, vhost: &str, name: &str, paused: bool) -> Option<bool> {
        let key = (vhost.to_owned(), name.to_owned());
        if paused {
            let mut r = self.running.get_mut(&key)?;
            let running = matches!(r.ctx.status.state().0, status::State::Running { .. });
            if r.paused || !running {
                return Some(false);
            }
            tracing::info!(vhost, name, "shovel paused");
            let _ = r.stop.send(true);
            r.paused = true;
            return Some(true);
        }
        if !self.running.get(&key)?.paused {
            return Some(false);
        }
        let value = self
            .broker
            .upgrade()?
            .parameters
            .get(COMPONENT, vhost, name)?;
        tracing::info!(vhost, name, "shovel resumed");
        self.start(vhost, name, &value);
        Some(true)
    }

    fn stopped(&self, vhost: &str, name: &str) -> Stopped {
        let ended = self
            .running
            .get(&(vhost.to_owned(), name.to_owned()))
            .filter(|r| r.paused)
            .map(|r| r.ended.clone());
        Box::pin(async move {
            if let Some(mut ended) = ended {
                while ended.changed().await.is_ok() {}
            }
        })
    }
}
