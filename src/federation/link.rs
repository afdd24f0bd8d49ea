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
//! `resource-cleanup-mode` is `never` (`clean_up`, called by the link's task in `runner`);
//! when the node stops they stay, holding what arrives.

use super::conn::{
    connect_upstream, connection_name, flow_control, on_own_channel, short, uri_for, Connected, Ctx,
};
use super::headers::{Stamp, Verdict};
use crate::amqp::codec;
use crate::client::local::LocalNode;
use crate::client::relay::{AckMode, Delivery, Route, Transfer};
use crate::client::{Client, Closed};
use crate::exchange::{federation_upstream, Exchange};
use amq_protocol::protocol::{basic, exchange, queue, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::BytesMut;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

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

/// Sets an exchange link's run up; Err with the reason.
pub(super) async fn setup(ctx: &Ctx, exchange: &str) -> Result<Connected<Link>, String> {
    let broker = ctx.broker.upgrade().ok_or("the node is stopping")?;
    let x = broker
        .vhost(&ctx.vhost)
        .and_then(|v| v.exchange(exchange).ok())
        .ok_or_else(|| format!("exchange '{exchange}' not found"))?;
    let local = LocalNode::of(&broker).ok_or("this node's AMQP listener is not up")?;
    let cluster = broker.cluster_name();
    drop(broker);
    let u = &ctx.upstream;
    let name = connection_name(ctx);
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
    let queue = upstream_queue_name(&u.exchange, &uri.vhost, &cluster, &ctx.vhost, exchange);
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
        exchange: exchange.to_owned(),
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
    flow_control(&mut up, &mut down, u).await?;
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
    Ok(Connected {
        up,
        down,
        transfer: link,
        uri: shown,
        owned: Some((queue, internal_x)),
    })
}

/// An exchange link's part in the relay: where messages go, and the bindings kept in step.
pub(super) struct Link {
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
pub(super) async fn clean_up(up: &mut Client, queue: &str, internal_x: &str) {
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
