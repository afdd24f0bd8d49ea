//! A federation link's task (RabbitMQ's link processes): sets its link up (an exchange
//! link or a queue link), reports it running and relays messages until the link is removed,
//! the node stops or the run fails; after a failure it reports the error and tries again
//! after the upstream's `reconnect-delay`. A removed exchange link deletes what it made
//! upstream, unless `resource-cleanup-mode` is `never`.

use super::conn::{connection_name, Connected, Ctx};
use super::link::{self, Link};
use super::queue_link::{self, QueueLink};
use super::status::State;
use super::Target;
use crate::client::relay::{self, AckMode, Delivery, Ended, Route, Transfer};
use bytes::BytesMut;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

/// An exchange link's or a queue link's part in the relay.
enum Transfers {
    Exchange(Link),
    Queue(QueueLink),
}

impl Transfer for Transfers {
    fn ack_mode(&self) -> AckMode {
        match self {
            Transfers::Exchange(l) => l.ack_mode(),
            Transfers::Queue(l) => l.ack_mode(),
        }
    }

    fn destination<'a>(&'a self, d: &Delivery<'a>) -> Route<'a> {
        match self {
            Transfers::Exchange(l) => l.destination(d),
            Transfers::Queue(l) => l.destination(d),
        }
    }

    fn tick(&mut self, src_out: &mut BytesMut) {
        match self {
            Transfers::Exchange(l) => l.tick(src_out),
            Transfers::Queue(l) => l.tick(src_out),
        }
    }

    fn wake(&self) -> Option<Arc<Notify>> {
        match self {
            Transfers::Exchange(l) => l.wake(),
            Transfers::Queue(l) => l.wake(),
        }
    }
}

/// Sets the link up.
async fn setup(ctx: &Ctx) -> Result<Connected<Transfers>, String> {
    match &ctx.target {
        Target::Exchange(x) => Ok(link::setup(ctx, x).await?.map(Transfers::Exchange)),
        Target::Queue(q) => Ok(queue_link::setup(ctx, q).await?.map(Transfers::Queue)),
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
                let local_connection = connection_name(&ctx);
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
                        if let Some((queue, internal_x)) = &run.owned {
                            if removed(&stop) && !ctx.upstream.keep_resources {
                                link::clean_up(&mut run.up, queue, internal_x).await;
                            }
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
        tracing::warn!(vhost = %ctx.vhost, target = %ctx.target.name(), upstream = %ctx.upstream.name, %reason, "federation link failed");
        ctx.status.set(State::Error { reason }, &uri);
        let delay = ctx.upstream.reconnect_delay;
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
    }
}
