//! What every federation link shares: its context (target, upstream, status), the
//! connections it makes (to one of the upstream's URIs, to this node) under RabbitMQ's
//! connection name, and a method on a disposable channel.

use super::status::Status;
use super::upstream::Upstream;
use super::Target;
use crate::broker::Broker;
use crate::client::local::LocalNode;
use crate::client::relay::AckMode;
use crate::client::{AmqpUri, Client};
use amq_protocol::protocol::{basic, confirm, AMQPClass};
use rand::seq::SliceRandom;
use std::io;
use std::sync::{Arc, Weak};

/// What a link's task needs.
pub struct Ctx {
    /// The federated exchange's or queue's vhost.
    pub vhost: String,
    /// The federated exchange or queue.
    pub target: Target,
    /// The policy that federates it (for the connection's name).
    pub policy: String,
    /// The upstream.
    pub upstream: Upstream,
    /// Its status.
    pub status: Arc<Status>,
    /// The broker it runs in.
    pub broker: Weak<Broker>,
}

impl Ctx {
    /// The exchange or queue on the upstream that the link reads.
    pub fn upstream_target(&self) -> &str {
        match self.target {
            Target::Exchange(_) => &self.upstream.exchange,
            Target::Queue(_) => &self.upstream.queue,
        }
    }
}

/// A short string field, cut to fit.
pub fn short(s: &str) -> amq_protocol::types::ShortString {
    crate::shortstr::truncated(s).into()
}

/// A method on a channel of its own, opened and closed around it (RabbitMQ's
/// `disposable_channel_call`); a channel error is returned, the connection stays.
pub async fn on_own_channel(c: &mut Client, m: AMQPClass) -> io::Result<AMQPClass> {
    c.open_channel(3).await?;
    let r = c.call(3, m).await;
    if r.is_ok() {
        c.close_channel(3).await?;
    }
    r
}

/// A set-up link, ready to move messages.
pub struct Connected<T> {
    /// The connection to the upstream.
    pub up: Client,
    /// The connection to this node.
    pub down: Client,
    /// What the relay does with deliveries.
    pub transfer: T,
    /// The upstream URI connected to, without credentials.
    pub uri: String,
    /// The upstream queue and internal exchange to delete when the link is removed.
    pub owned: Option<(String, String)>,
}

impl<T> Connected<T> {
    /// The same link with its transfer wrapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Connected<U> {
        Connected {
            up: self.up,
            down: self.down,
            transfer: f(self.transfer),
            uri: self.uri,
            owned: self.owned,
        }
    }
}

/// The name of a link's connections (RabbitMQ's).
pub fn connection_name(ctx: &Ctx) -> String {
    format!(
        "Federation link (upstream: {}, policy: {})",
        ctx.upstream.name, ctx.policy
    )
}

/// Connects to one of the upstream's URIs, in random order.
pub async fn connect_upstream(ctx: &Ctx, name: &str) -> Result<(Client, AmqpUri), String> {
    let mut order: Vec<&String> = ctx.upstream.uris.iter().collect();
    order.shuffle(&mut rand::rng());
    let mut last = "the upstream has no URI".to_owned();
    for text in order {
        let uri = match AmqpUri::parse_in(text, &ctx.vhost) {
            Ok(u) => u,
            Err(e) => {
                last = e.0;
                continue;
            }
        };
        let target = match (
            uri.is_local(),
            ctx.broker.upgrade().and_then(|b| LocalNode::of(&b)),
        ) {
            (false, _) => uri.clone(),
            (true, Some(l)) => l.reach(&uri),
            (true, None) => {
                last = "this node's AMQP listener is not up".to_owned();
                continue;
            }
        };
        match Client::connect_named(&target, name).await {
            Ok(c) => return Ok((c, uri)),
            Err(e) => last = format!("{}: {e}", uri.redacted()),
        }
    }
    Err(last)
}

/// The URI to reach the upstream again (this node's address for a local one).
pub fn uri_for(ctx: &Ctx, uri: &AmqpUri) -> Result<AmqpUri, String> {
    if !uri.is_local() {
        return Ok(uri.clone());
    }
    ctx.broker
        .upgrade()
        .and_then(|b| LocalNode::of(&b))
        .map(|l| l.reach(uri))
        .ok_or_else(|| "this node's AMQP listener is not up".to_owned())
}

/// basic.qos with the upstream's prefetch on channel 1 upstream (unless `no-ack`), and
/// confirm.select on channel 1 of this node's connection (with `on-confirm`).
pub async fn flow_control(up: &mut Client, down: &mut Client, u: &Upstream) -> Result<(), String> {
    let fail = |what: &str, e: io::Error| format!("{what}: {e}");
    if u.ack_mode != AckMode::NoAck {
        let qos = basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: u.prefetch,
            global: false,
        });
        up.call(1, AMQPClass::Basic(qos))
            .await
            .map_err(|e| fail("basic.qos", e))?;
    }
    if u.ack_mode == AckMode::OnConfirm {
        let select = confirm::AMQPMethod::Select(confirm::Select { nowait: false });
        down.call(1, AMQPClass::Confirm(select))
            .await
            .map_err(|e| fail("confirm.select", e))?;
    }
    Ok(())
}
