//! One dynamic shovel's task and the status it reports: it sets up a run, moves messages
//! until stopped, and after a failure reports `terminated` with the reason, waits its
//! `reconnect-delay` and starts again (a delay of 0 leaves it terminated, as RabbitMQ's
//! temporary workers). When `delete-after` is reached it asks for its own parameter to be
//! cleared, as RabbitMQ's shovel does.

use super::definition::{ShovelDef, Source};
use super::props::Rewrite;
use super::session::{self, Dest, Session, Setup};
use super::status::{State, Status};
use super::webhook;
use crate::broker::Broker;
use crate::client::local::LocalNode;
use crate::client::relay::{self, Ended};
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tokio::sync::watch;

/// What a shovel's task needs.
pub struct Ctx {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its definition.
    pub def: ShovelDef,
    /// The cluster's name (the `shovelled-by` of forward headers).
    pub cluster_name: String,
    /// Its status.
    pub status: Arc<Status>,
    /// The broker it runs in (its listener for `amqp://`; its parameter, cleared once
    /// `delete-after` is reached).
    pub broker: Weak<Broker>,
}

impl Ctx {
    /// The status as `/api/shovels` shows it, on node `node`.
    pub fn status_json(&self, node: &str) -> Value {
        let (state, since) = self.status.state();
        let mut o = Map::new();
        o.insert("node".into(), json!(node));
        o.insert(
            "timestamp".into(),
            json!(crate::json::erlang_local_time(since)),
        );
        o.insert("name".into(), json!(self.name));
        o.insert("vhost".into(), json!(self.vhost));
        o.insert("type".into(), json!("dynamic"));
        match state {
            State::Starting => {
                o.insert("state".into(), json!("starting"));
            }
            State::Terminated { reason } => {
                o.insert("state".into(), json!("terminated"));
                o.insert("reason".into(), json!(reason));
            }
            State::Running { src_uri, dest_uri } => {
                o.insert("state".into(), json!("running"));
                o.insert("src_uri".into(), json!(src_uri));
                o.insert("src_protocol".into(), json!("amqp091"));
                o.insert("dest_protocol".into(), json!("amqp091"));
                o.insert("dest_uri".into(), json!(dest_uri));
                match &self.def.source {
                    Source::Queue { name, .. } => {
                        o.insert("src_queue".into(), json!(name));
                    }
                    Source::Exchange { name, key } => {
                        o.insert("src_exchange".into(), json!(name));
                        o.insert("src_exchange_key".into(), json!(key));
                    }
                }
                for (k, v) in [
                    ("dest_queue", &self.def.dest_queue),
                    ("dest_exchange", &self.def.dest_exchange),
                    ("dest_exchange_key", &self.def.dest_exchange_key),
                ] {
                    if let Some(v) = v {
                        o.insert(k.into(), json!(v));
                    }
                }
                o.insert(
                    "forwarded".into(),
                    json!(self.status.counters.forwarded.load(Ordering::Relaxed)),
                );
                o.insert(
                    "pending".into(),
                    json!(self.status.counters.pending.load(Ordering::Relaxed)),
                );
            }
        }
        Value::Object(o)
    }
}

/// Closes a run's connections: the destination first (what it confirmed is settled), then
/// the source (which requeues what is still unsettled).
async fn close(s: Session, text: &str) {
    if let Dest::Amqp(dst) = s.dst {
        dst.close(text).await;
    }
    s.src.close(text).await;
}

/// The shovel's task: runs until `stop` changes (or its sender goes).
pub async fn run(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    loop {
        ctx.status.set(State::Starting);
        let local = ctx.broker.upgrade().and_then(|b| LocalNode::of(&b));
        let setup = tokio::select! {
            r = session::start(&ctx.def, &ctx.name, local.as_ref()) => r,
            _ = stop.changed() => return,
        };
        let outcome = match setup {
            Ok(Setup::NothingToMove) => Ok(Ended::Completed),
            Ok(Setup::Ready(mut s)) => {
                ctx.status.set(State::Running {
                    src_uri: s.src_uri.clone(),
                    dest_uri: s.dst_uri.clone(),
                });
                let mut rewrite = Rewrite::new(
                    &ctx.def,
                    &ctx.cluster_name,
                    &ctx.vhost,
                    &ctx.name,
                    &s.src_uri,
                    &s.dst_uri,
                );
                let Session {
                    src,
                    dst,
                    remaining,
                    ..
                } = &mut *s;
                let counters = &ctx.status.counters;
                let r = match dst {
                    Dest::Amqp(dst) => {
                        relay::run(src, dst, *remaining, &mut rewrite, counters, &mut stop).await
                    }
                    Dest::Webhook(hook) => {
                        let (name, ack) = (&ctx.name, ctx.def.ack_mode);
                        webhook::run(src, hook, name, ack, *remaining, counters, &mut stop).await
                    }
                };
                counters.pending.store(0, Ordering::Relaxed);
                if r.is_ok() {
                    close(*s, "shovel stopped").await;
                }
                r
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Ended::Stopped) => return,
            Ok(Ended::Completed) => {
                tracing::info!(vhost = %ctx.vhost, shovel = %ctx.name, "shovel finished (delete-after)");
                if let Some(b) = ctx.broker.upgrade() {
                    b.clear_parameter(super::COMPONENT, &ctx.vhost, &ctx.name);
                }
                return;
            }
            Err(reason) => {
                tracing::warn!(vhost = %ctx.vhost, shovel = %ctx.name, %reason, "shovel run failed");
                ctx.status.set(State::Terminated { reason });
                let delay = ctx.def.reconnect_delay;
                tokio::select! {
                    _ = tokio::time::sleep(delay), if !delay.is_zero() => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}
