//! One queue federation link (RabbitMQ's `rabbit_federation_queue_link`): for a local queue
//! Q and one upstream, it connects to the upstream and to this node, declares the upstream
//! queue (the upstream's `queue`, default Q's name) like Q where it is missing, and moves
//! its messages to Q through the default exchange, only while Q wants them: while Q has
//! consumers and no ready messages. Upstream it consumes with priority -1, so the upstream's
//! own consumers come first (which needs an upstream with consumer priorities). Q's state is
//! sampled every 100 ms; the relay is woken to consume (`nowait`) or cancel when it changes.
//! Nothing is deleted upstream when the link goes.

use super::conn::{
    connect_upstream, connection_name, flow_control, on_own_channel, short, Connected, Ctx,
};
use super::headers::QueueStamp;
use crate::amqp::codec;
use crate::client::local::LocalNode;
use crate::client::relay::{AckMode, Delivery, Route, Transfer};
use crate::client::{Client, Closed};
use crate::queue::QueueWeak;
use amq_protocol::protocol::{basic, queue, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::BytesMut;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the local queue's state is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Whether the local queue wants messages, as last sampled.
#[derive(Default)]
struct Want {
    run: AtomicBool,
    changed: Arc<Notify>,
}

/// A queue link's part in the relay.
pub struct QueueLink {
    ack_mode: AckMode,
    stamp: QueueStamp,
    upstream_queue: String,
    consumer_tag: String,
    want: Arc<Want>,
    consuming: bool,
    sampler: tokio::task::JoinHandle<()>,
}

impl Drop for QueueLink {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// Samples the local queue until it goes (or the link does, which aborts this).
async fn sample(q: QueueWeak, want: Weak<Want>) {
    loop {
        let Some(q) = q.upgrade() else { return };
        let stats = q.stats().await;
        drop(q);
        let Ok((ready, consumers)) = stats else {
            return;
        };
        let Some(want) = want.upgrade() else { return };
        let run = ready == 0 && consumers > 0;
        if want.run.swap(run, Ordering::Relaxed) != run {
            want.changed.notify_one();
        }
        drop(want);
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// Whether the upstream announced `consumer_priorities` (RabbitMQ's
/// `check_upstream_suitable`).
fn has_consumer_priorities(up: &Client) -> bool {
    match up.server_properties.inner().get("capabilities") {
        Some(AMQPValue::FieldTable(caps)) => {
            caps.inner().get("consumer_priorities") == Some(&AMQPValue::Boolean(true))
        }
        _ => false,
    }
}

/// Sets a queue link's run up; Err with the reason.
pub(super) async fn setup(ctx: &Ctx, queue: &str) -> Result<Connected<QueueLink>, String> {
    let broker = ctx.broker.upgrade().ok_or("the node is stopping")?;
    let q = broker
        .vhost(&ctx.vhost)
        .and_then(|v| v.queue(queue).ok())
        .ok_or_else(|| format!("queue '{queue}' not found"))?;
    let local = LocalNode::of(&broker).ok_or("this node's AMQP listener is not up")?;
    drop(broker);
    let u = &ctx.upstream;
    let name = connection_name(ctx);
    let (mut up, uri) = connect_upstream(ctx, &name).await?;
    if !has_consumer_priorities(&up) {
        return Err("upstream_lacks_consumer_priorities".into());
    }
    let shown = uri.redacted();
    let fail = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let mut down = Client::connect_named(&local.vhost(&ctx.vhost), &name)
        .await
        .map_err(|e| fail("connecting to this node", e))?;
    // The upstream queue, declared like the local one where it is missing.
    let declare = |passive: bool| {
        AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
            queue: short(&u.queue),
            passive,
            durable: q.durable,
            exclusive: false,
            auto_delete: q.auto_delete,
            nowait: false,
            arguments: q.arguments.clone(),
        }))
    };
    match on_own_channel(&mut up, declare(true)).await {
        Ok(_) => {}
        Err(e) if Closed::of(&e).is_some_and(|c| c.code == 404) => {
            up.call(1, declare(false))
                .await
                .map_err(|e| fail("declaring the upstream queue", e))?;
        }
        Err(e) => return Err(fail("checking the upstream queue", e)),
    }
    flow_control(&mut up, &mut down, u).await?;
    let want = Arc::new(Want::default());
    let sampler = tokio::spawn(sample(Arc::downgrade(&q), Arc::downgrade(&want)));
    let link = QueueLink {
        ack_mode: u.ack_mode,
        stamp: QueueStamp {
            uri: shown.clone(),
            queue: queue.to_owned(),
            trust_user_id: u.trust_user_id,
        },
        upstream_queue: u.queue.clone(),
        consumer_tag: u.consumer_tag.clone(),
        want,
        consuming: false,
        sampler,
    };
    Ok(Connected {
        up,
        down,
        transfer: link,
        uri: shown,
        owned: None,
    })
}

impl Transfer for QueueLink {
    fn ack_mode(&self) -> AckMode {
        self.ack_mode
    }

    fn destination<'a>(&'a self, d: &Delivery<'a>) -> Route<'a> {
        Route::Publish {
            exchange: Cow::Borrowed(""),
            routing_key: Cow::Borrowed(&self.stamp.queue),
            props: self
                .stamp
                .apply(d.props, d.redelivered, d.exchange, d.routing_key),
        }
    }

    /// Consumes upstream (priority -1) when the local queue wants messages, cancels when it
    /// no longer does (RabbitMQ's `run` / `pause`).
    fn tick(&mut self, src_out: &mut BytesMut) {
        let run = self.want.run.load(Ordering::Relaxed);
        if run == self.consuming {
            return;
        }
        let m = if run {
            let mut args = FieldTable::default();
            args.insert("x-priority".into(), AMQPValue::LongLongInt(-1));
            basic::AMQPMethod::Consume(basic::Consume {
                queue: short(&self.upstream_queue),
                consumer_tag: short(&self.consumer_tag),
                no_local: false,
                no_ack: self.ack_mode == AckMode::NoAck,
                exclusive: false,
                nowait: true,
                arguments: args,
            })
        } else {
            basic::AMQPMethod::Cancel(basic::Cancel {
                consumer_tag: short(&self.consumer_tag),
                nowait: true,
            })
        };
        codec::encode_method(src_out, 1, &AMQPClass::Basic(m));
        self.consuming = run;
    }

    fn wake(&self) -> Option<Arc<Notify>> {
        Some(self.want.changed.clone())
    }
}
