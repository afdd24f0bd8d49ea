//! One exchange federation link (RabbitMQ's `rabbit_federation_exchange_link`): for a local
//! exchange X and one upstream, it connects to the upstream and to this node, and on the
//! upstream declares X if it is missing, an internal exchange `federation: X -> NODE A`
//! (`x-federation-upstream`, or `fanout` where the upstream has no such type) bound to X
//! with every binding key of the local X, and a durable queue bound to that exchange, which
//! it consumes; each message is published to the local X with its routing key and a table
//! added to `x-received-from` (and dropped at `max-hops` or at a broker it already passed).
//! The local X's bindings are followed twice a second (`exchange.bind` / `unbind` with
//! `nowait` on a command channel). When the link is removed (its policy, upstream or
//! exchange went) it deletes the upstream queue and internal exchange, unless
//! `resource-cleanup-mode` is `never`; when the node stops they stay, holding what arrives.

use super::headers::{Stamp, Verdict};
use super::status::{State, Status};
use super::upstream::Upstream;
use crate::amqp::codec;
use crate::broker::Broker;
use crate::client::local::LocalNode;
use crate::client::relay::{self, AckMode, Delivery, Ended, Route, Transfer};
use crate::client::{AmqpUri, Client, Closed};
use crate::exchange::{federation_upstream, Exchange};
use amq_protocol::protocol::{basic, confirm, exchange, queue, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::BytesMut;
use rand::seq::SliceRandom;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Weak};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// What a link's task needs.
pub struct Ctx {
    /// The federated exchange's vhost.
    pub vhost: String,
    /// The federated exchange.
    pub exchange: String,
    /// The policy that federates it (for the connection's name).
    pub policy: String,
    /// The upstream.
    pub upstream: Upstream,
    /// Its status.
    pub status: Arc<Status>,
    /// The broker it runs in.
    pub broker: Weak<Broker>,
}

fn short(s: &str) -> amq_protocol::types::ShortString {
    crate::shortstr::truncated(s).into()
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()))
}

/// RabbitMQ's `upstream_queue_name`.
fn upstream_queue_name(
    upstream_x: &str,
    upstream_vhost: &str,
    cluster: &str,
    vhost: &str,
    x: &str,
) -> String {
    let down = if vhost == upstream_vhost {
        if x == upstream_x {
            String::new()
        } else {
            format!(":{x}")
        }
    } else {
        format!(":{vhost}:{x}")
    };
    format!("federation: {upstream_x} -> {cluster}{down}")
}

fn purpose() -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-internal-purpose".into(), long("federation"));
    t
}

fn exchange_declare(
    name: &str,
    kind: &str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    passive: bool,
    args: FieldTable,
) -> AMQPClass {
    AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
        exchange: short(name),
        kind: short(kind),
        passive,
        durable,
        auto_delete,
        internal,
        nowait: false,
        arguments: args,
    }))
}

/// A method on a channel of its own, opened and closed around it (RabbitMQ's
/// `disposable_channel_call`); a channel error is returned, the connection stays.
async fn on_own_channel(c: &mut Client, m: AMQPClass) -> io::Result<AMQPClass> {
    c.open_channel(3).await?;
    let r = c.call(3, m).await;
    if r.is_ok() {
        c.close_channel(3).await?;
    }
    r
}

/// A set-up link, ready to move messages.
struct Run {
    up: Client,
    down: Client,
    transfer: Link,
    uri: String,
    queue: String,
    internal_x: String,
}

/// Connects to one of the upstream's URIs, in random order.
async fn connect_upstream(ctx: &Ctx, name: &str) -> Result<(Client, AmqpUri), String> {
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

/// Sets a run up; Err with the reason.
async fn setup(ctx: &Ctx) -> Result<Run, String> {
    let broker = ctx.broker.upgrade().ok_or("the node is stopping")?;
    let x = broker
        .vhost(&ctx.vhost)
        .and_then(|v| v.exchange(&ctx.exchange).ok())
        .ok_or_else(|| format!("exchange '{}' not found", ctx.exchange))?;
    let local = LocalNode::of(&broker).ok_or("this node's AMQP listener is not up")?;
    let cluster = broker.cluster_name();
    drop(broker);
    let u = &ctx.upstream;
    let name = format!(
        "Federation link (upstream: {}, policy: {})",
        u.name, ctx.policy
    );
    let (mut up, uri) = connect_upstream(ctx, &name).await?;
    let shown = uri.redacted();
    let fail = |what: &str, e: io::Error| format!("{what}: {e}");
    let mut down = Client::connect_named(&local.vhost(&ctx.vhost), &name)
        .await
        .map_err(|e| fail("connecting to this node", e))?;
    let upstream_cluster = match up.server_properties.inner().get("cluster_name") {
        Some(AMQPValue::LongString(s)) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        _ => None,
    };
    let queue = upstream_queue_name(&u.exchange, &uri.vhost, &cluster, &ctx.vhost, &ctx.exchange);
    let internal_x = format!("{queue} A");
    // The upstream exchange, declared like the local one where it is missing.
    let passive = exchange_declare(
        &u.exchange,
        x.type_name(),
        x.durable,
        x.auto_delete,
        x.internal,
        true,
        FieldTable::default(),
    );
    match on_own_channel(&mut up, passive).await {
        Ok(_) => {}
        Err(e) if Closed::of(&e).is_some_and(|c| c.code == 404) => {
            let decl = exchange_declare(
                &u.exchange,
                x.type_name(),
                x.durable,
                x.auto_delete,
                x.internal,
                false,
                x.arguments.clone(),
            );
            up.call(1, decl)
                .await
                .map_err(|e| fail("declaring the upstream exchange", e))?;
        }
        Err(e) => return Err(fail("checking the upstream exchange", e)),
    }
    // A fresh internal exchange: the upstream's federation type (which filters by hops),
    // or a fanout where the upstream refuses that type (which closes the connection, so
    // it is tried on one of its own).
    let delete = AMQPClass::Exchange(exchange::AMQPMethod::Delete(exchange::Delete {
        exchange: short(&internal_x),
        if_unused: false,
        nowait: false,
    }));
    on_own_channel(&mut up, delete)
        .await
        .map_err(|e| fail("resetting the internal exchange", e))?;
    let mut xfu_args = purpose();
    xfu_args.insert(
        federation_upstream::MAX_HOPS_ARG.into(),
        AMQPValue::LongLongInt(i64::from(u.max_hops)),
    );
    xfu_args.insert("x-downstream-name".into(), long(&cluster));
    xfu_args.insert("x-downstream-vhost".into(), long(&ctx.vhost));
    let xfu = exchange_declare(
        &internal_x,
        federation_upstream::TYPE_NAME,
        true,
        true,
        true,
        false,
        xfu_args,
    );
    let typed = match Client::connect_named(&uri_for(ctx, &uri)?, &name).await {
        Ok(mut once) => {
            let r = once.call(1, xfu).await;
            let ok = r.is_ok();
            if ok {
                once.close("federation").await;
            }
            match r {
                Ok(_) => true,
                // RabbitMQ without the plugin closes the connection (503); Warren refuses
                // the type on the channel.
                Err(e) if Closed::of(&e).is_some() => false,
                Err(e) => return Err(fail("declaring the internal exchange", e)),
            }
        }
        Err(e) => return Err(fail("connecting to the upstream", e)),
    };
    if !typed {
        let fanout = exchange_declare(&internal_x, "fanout", true, true, true, false, purpose());
        up.call(1, fanout)
            .await
            .map_err(|e| fail("declaring the internal exchange", e))?;
    }
    let mut qargs = purpose();
    if let Some(ms) = u.expires {
        qargs.insert("x-expires".into(), AMQPValue::LongLongInt(ms));
    }
    if let Some(ms) = u.message_ttl {
        qargs.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ms));
    }
    qargs.insert("x-queue-type".into(), long(&u.queue_type));
    let declare = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: short(&queue),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: qargs,
    }));
    up.call(1, declare)
        .await
        .map_err(|e| fail("declaring the upstream queue", e))?;
    let bind = AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
        queue: short(&queue),
        exchange: short(&internal_x),
        routing_key: "".into(),
        nowait: false,
        arguments: FieldTable::default(),
    }));
    up.call(1, bind)
        .await
        .map_err(|e| fail("binding the upstream queue", e))?;
    up.open_channel(2)
        .await
        .map_err(|e| fail("opening the command channel", e))?;
    let stamp = Stamp {
        uri: shown.clone(),
        exchange: ctx.exchange.clone(),
        upstream_cluster,
        upstream_vhost: uri.vhost.clone(),
        trust_user_id: u.trust_user_id,
        cluster,
        vhost: ctx.vhost.clone(),
        max_hops: u.max_hops,
    };
    let mut link = Link {
        ack_mode: u.ack_mode,
        exchange: x,
        stamp,
        upstream_x: u.exchange.clone(),
        internal_x: internal_x.clone(),
        bound: HashMap::new(),
    };
    // The bindings as they are now, made before the first message is consumed.
    let mut out = BytesMut::new();
    link.sync_bindings(&mut out);
    up.wr
        .write_all_buf(&mut out)
        .await
        .map_err(|e| fail("binding upstream", e))?;
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
    let consume = basic::AMQPMethod::Consume(basic::Consume {
        queue: short(&queue),
        consumer_tag: "".into(),
        no_local: false,
        no_ack: u.ack_mode == AckMode::NoAck,
        exclusive: false,
        nowait: false,
        arguments: FieldTable::default(),
    });
    up.call(1, AMQPClass::Basic(consume))
        .await
        .map_err(|e| fail("consuming from the upstream queue", e))?;
    Ok(Run {
        up,
        down,
        transfer: link,
        uri: shown,
        queue,
        internal_x,
    })
}

/// The URI to reach the upstream again (this node's address for a local one).
fn uri_for(ctx: &Ctx, uri: &AmqpUri) -> Result<AmqpUri, String> {
    if !uri.is_local() {
        return Ok(uri.clone());
    }
    ctx.broker
        .upgrade()
        .and_then(|b| LocalNode::of(&b))
        .map(|l| l.reach(uri))
        .ok_or_else(|| "this node's AMQP listener is not up".to_owned())
}

/// The link's part in the relay: where messages go, and the bindings kept in step.
struct Link {
    ack_mode: AckMode,
    exchange: Arc<Exchange>,
    stamp: Stamp,
    upstream_x: String,
    internal_x: String,
    /// Upstream bindings made: (key, encoded arguments) to the arguments.
    bound: HashMap<(String, Vec<u8>), FieldTable>,
}

fn encoded(t: &FieldTable) -> Vec<u8> {
    cookie_factory::gen_simple(
        amq_protocol::types::generation::gen_field_table(t),
        Vec::new(),
    )
    .unwrap_or_default()
}

impl Link {
    /// exchange.bind / unbind (nowait, on channel 2) for what changed in the local
    /// exchange's bindings since the last call.
    fn sync_bindings(&mut self, out: &mut BytesMut) {
        let mut want: HashMap<(String, Vec<u8>), FieldTable> = HashMap::new();
        for b in self.exchange.bindings().list() {
            if let Some(args) = self.stamp.binding_args(&b.arguments) {
                want.insert((b.key.clone(), encoded(&args)), args);
            }
        }
        for ((key, _), args) in want.iter().filter(|(k, _)| !self.bound.contains_key(*k)) {
            let m = exchange::AMQPMethod::Bind(exchange::Bind {
                destination: short(&self.internal_x),
                source: short(&self.upstream_x),
                routing_key: short(key),
                nowait: true,
                arguments: args.clone(),
            });
            codec::encode_method(out, 2, &AMQPClass::Exchange(m));
        }
        for ((key, _), args) in self.bound.iter().filter(|(k, _)| !want.contains_key(*k)) {
            let m = exchange::AMQPMethod::Unbind(exchange::Unbind {
                destination: short(&self.internal_x),
                source: short(&self.upstream_x),
                routing_key: short(key),
                nowait: true,
                arguments: args.clone(),
            });
            codec::encode_method(out, 2, &AMQPClass::Exchange(m));
        }
        self.bound = want;
    }
}

impl Transfer for Link {
    fn ack_mode(&self) -> AckMode {
        self.ack_mode
    }

    fn destination<'a>(&'a self, d: &Delivery<'a>) -> Route<'a> {
        let props = match self.stamp.apply(d.props, d.redelivered) {
            Verdict::Drop => return Route::Drop,
            Verdict::Forward(p) => Some(p),
            Verdict::Unchanged => None,
        };
        Route::Publish {
            exchange: Cow::Borrowed(&self.stamp.exchange),
            routing_key: Cow::Borrowed(d.routing_key),
            props,
        }
    }

    fn tick(&mut self, src_out: &mut BytesMut) {
        self.sync_bindings(src_out);
    }
}

/// Deletes the upstream queue and internal exchange (the link was removed).
async fn clean_up(up: &mut Client, queue: &str, internal_x: &str) {
    let q = AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
        queue: short(queue),
        if_unused: false,
        if_empty: false,
        nowait: false,
    }));
    let x = AMQPClass::Exchange(exchange::AMQPMethod::Delete(exchange::Delete {
        exchange: short(internal_x),
        if_unused: false,
        nowait: false,
    }));
    for m in [q, x] {
        if let Err(e) = on_own_channel(up, m).await {
            tracing::debug!(error = %e, "federation clean-up upstream");
        }
    }
}

/// The link's task: runs until `stop` is set (the link was removed: upstream resources are
/// deleted) or its sender goes (the node stops: they stay).
pub async fn run(ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let removed = |stop: &watch::Receiver<bool>| *stop.borrow();
    loop {
        let first_uri = ctx
            .upstream
            .uris
            .first()
            .map(|u| crate::client::uri::redact(u))
            .unwrap_or_default();
        ctx.status.set(State::Starting, &first_uri);
        let setup = tokio::select! {
            r = setup(&ctx) => r,
            _ = stop.changed() => return,
        };
        let (reason, uri) = match setup {
            Ok(mut run) => {
                let local_connection = format!(
                    "Federation link (upstream: {}, policy: {})",
                    ctx.upstream.name, ctx.policy
                );
                ctx.status
                    .set(State::Running { local_connection }, &run.uri);
                let counters = &ctx.status.counters;
                let r = relay::run(
                    &mut run.up,
                    &mut run.down,
                    None,
                    &mut run.transfer,
                    counters,
                    &mut stop,
                )
                .await;
                counters
                    .pending
                    .store(0, std::sync::atomic::Ordering::Relaxed);
                match r {
                    Ok(Ended::Stopped) => {
                        run.down.close("federation link stopped").await;
                        if removed(&stop) && !ctx.upstream.keep_resources {
                            clean_up(&mut run.up, &run.queue, &run.internal_x).await;
                        }
                        run.up.close("federation link stopped").await;
                        return;
                    }
                    Ok(Ended::Completed) => ("the link ended".to_owned(), run.uri),
                    Err(reason) => (reason, run.uri),
                }
            }
            Err(reason) => (reason, first_uri),
        };
        tracing::warn!(vhost = %ctx.vhost, exchange = %ctx.exchange, upstream = %ctx.upstream.name, %reason, "federation link failed");
        ctx.status.set(State::Error { reason }, &uri);
        let delay = ctx.upstream.reconnect_delay;
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
    }
}
