//! Setting up one run of a shovel, as RabbitMQ's AMQP 0-9-1 shovel does: connect to the
//! source and the destination (a URI picked at random from each list, the others tried if it
//! fails), declare what the definition names (the source queue durable if it is missing, or
//! an exclusive queue bound to the source exchange; the destination queue likewise), count
//! the source queue for `delete-after: queue-length`, then basic.qos, confirm.select and
//! basic.consume. Channel 1 carries the work on both connections. A webhook destination
//! has no connection to set up (its run connects when it first POSTs).

use super::definition::{AckMode, DeleteAfter, ShovelDef, Source};
use super::webhook::Webhook;
use crate::client::local::LocalNode;
use crate::client::{AmqpUri, Client, Closed};
use amq_protocol::protocol::{basic, confirm, queue, AMQPClass};
use amq_protocol::types::FieldTable;
use rand::seq::SliceRandom;
use std::io;

/// Where a run publishes.
pub enum Dest {
    /// An AMQP connection, publishing on channel 1.
    Amqp(Client),
    /// A webhook, POSTed to ([`Webhook`]).
    Webhook(Webhook),
}

/// A connected, set-up shovel run.
pub struct Session {
    /// The source connection, consuming on channel 1.
    pub src: Client,
    /// The destination.
    pub dst: Dest,
    /// The source URI connected to, without credentials.
    pub src_uri: String,
    /// The destination URI connected to, without credentials.
    pub dst_uri: String,
    /// Messages left to move before the shovel deletes itself (None: no limit).
    pub remaining: Option<u64>,
}

/// How a run's setup ended.
pub enum Setup {
    /// Consuming.
    Ready(Box<Session>),
    /// `delete-after` found nothing to move.
    NothingToMove,
}

/// Connects to one of `uris`, in random order; the last failure when none answers.
async fn connect_any(
    uris: &[AmqpUri],
    name: &str,
    local: Option<&LocalNode>,
) -> Result<(Client, String), String> {
    let mut order: Vec<&AmqpUri> = uris.iter().collect();
    order.shuffle(&mut rand::rng());
    let mut last = "no URI to connect to".to_owned();
    for uri in order {
        let target = match (uri.is_local(), local) {
            (false, _) => uri.clone(),
            (true, Some(l)) => l.reach(uri),
            (true, None) => {
                last = "this node's AMQP listener is not up".to_owned();
                continue;
            }
        };
        match Client::connect_named(&target, name).await {
            Ok(c) => return Ok((c, uri.redacted())),
            Err(e) => {
                tracing::warn!(shovel = name, uri = %uri.redacted(), error = %e, "shovel failed to connect");
                last = format!("{}: {e}", uri.redacted());
            }
        }
    }
    Err(last)
}

fn text(e: io::Error) -> String {
    e.to_string()
}

fn declare(name: &str, passive: bool, durable: bool, args: FieldTable) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: crate::shortstr::truncated(name).into(),
        passive,
        durable,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments: args,
    }))
}

/// The message count of a queue, by a passive declare on channel `ch`.
async fn count(c: &mut Client, ch: u16, name: &str) -> io::Result<u32> {
    match c
        .call(ch, declare(name, true, false, FieldTable::default()))
        .await?
    {
        AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => Ok(ok.message_count),
        other => Err(crate::client::connection::err(format!(
            "expected queue.declare-ok, got {other:?}"
        ))),
    }
}

/// RabbitMQ's `ensure_queue`: a passive declare on a channel of its own; when the queue is
/// missing (404), a durable declare with `args` on another. With `predeclared`, only the
/// check.
async fn ensure_queue(
    c: &mut Client,
    name: &str,
    args: &FieldTable,
    predeclared: bool,
) -> io::Result<()> {
    c.open_channel(2).await?;
    match count(c, 2, name).await {
        Ok(_) => c.close_channel(2).await,
        Err(e) if !predeclared && Closed::of(&e).is_some_and(|x| x.code == 404) => {
            c.open_channel(3).await?;
            c.call(3, declare(name, false, true, args.clone())).await?;
            c.close_channel(3).await
        }
        Err(e) => Err(e),
    }
}

/// Connects and sets up a run of shovel `name` (its connections are named after it).
pub async fn start(
    def: &ShovelDef,
    name: &str,
    local: Option<&LocalNode>,
) -> Result<Setup, String> {
    let conn_name = format!("Shovel {name}");
    let (mut src, src_uri) = connect_any(&def.src_uris, &conn_name, local).await?;
    let (mut dst, dst_uri) = match &def.webhook {
        Some(hook) => (Dest::Webhook(hook.clone()), hook.shown.clone()),
        None => {
            let (c, uri) = connect_any(&def.dest_uris, &conn_name, local).await?;
            (Dest::Amqp(c), uri)
        }
    };
    let queue = match &def.source {
        Source::Queue {
            name,
            args,
            predeclared,
        } => {
            ensure_queue(&mut src, name, args, *predeclared)
                .await
                .map_err(|e| format!("source queue '{name}': {e}"))?;
            name.clone()
        }
        Source::Exchange { name, key } => {
            let exclusive = AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
                queue: "".into(),
                passive: false,
                durable: false,
                exclusive: true,
                auto_delete: false,
                nowait: false,
                arguments: FieldTable::default(),
            }));
            let q = match src.call(1, exclusive).await.map_err(text)? {
                AMQPClass::Queue(queue::AMQPMethod::DeclareOk(ok)) => ok.queue.to_string(),
                other => return Err(format!("expected queue.declare-ok, got {other:?}")),
            };
            let bind = AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
                queue: q.as_str().into(),
                exchange: crate::shortstr::truncated(name).into(),
                routing_key: crate::shortstr::truncated(key).into(),
                nowait: false,
                arguments: FieldTable::default(),
            }));
            src.call(1, bind)
                .await
                .map_err(|e| format!("source exchange '{name}': {e}"))?;
            q
        }
    };
    if let (Some(q), Dest::Amqp(dst)) = (&def.dest_queue, &mut dst) {
        ensure_queue(dst, q, &def.dest_queue_args, def.dest_predeclared)
            .await
            .map_err(|e| format!("destination queue '{q}': {e}"))?;
    }
    let remaining = match def.delete_after {
        DeleteAfter::Never => None,
        DeleteAfter::Count(n) => Some(n),
        DeleteAfter::QueueLength => {
            Some(u64::from(count(&mut src, 1, &queue).await.map_err(text)?))
        }
    };
    if remaining == Some(0) {
        src.close("shovel finished").await;
        if let Dest::Amqp(dst) = dst {
            dst.close("shovel finished").await;
        }
        return Ok(Setup::NothingToMove);
    }
    if def.ack_mode != AckMode::NoAck {
        let qos = basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: def.prefetch,
            global: false,
        });
        src.call(1, AMQPClass::Basic(qos)).await.map_err(text)?;
    }
    if let (AckMode::OnConfirm, Dest::Amqp(dst)) = (def.ack_mode, &mut dst) {
        let select = confirm::AMQPMethod::Select(confirm::Select { nowait: false });
        dst.call(1, AMQPClass::Confirm(select))
            .await
            .map_err(text)?;
    }
    let consume = basic::AMQPMethod::Consume(basic::Consume {
        queue: crate::shortstr::truncated(&queue).into(),
        consumer_tag: crate::shortstr::truncated(&def.consumer_name).into(),
        no_local: false,
        no_ack: def.ack_mode == AckMode::NoAck,
        exclusive: false,
        nowait: false,
        arguments: def.consumer_args.clone(),
    });
    src.call(1, AMQPClass::Basic(consume))
        .await
        .map_err(|e| format!("consuming from '{queue}': {e}"))?;
    Ok(Setup::Ready(Box::new(Session {
        src,
        dst,
        src_uri,
        dst_uri,
        remaining,
    })))
}
