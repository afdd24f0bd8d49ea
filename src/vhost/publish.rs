//! The one publish operation every front end and the broker itself go through (AMQP
//! basic.publish, HTTP publish, dead-lettering, the delayed-message exchange releasing a
//! message): the checks a publisher must pass, then the exchange's delay, direct reply-to, or
//! routing (exchange-to-exchange bindings, CC/BCC, alternate exchanges) and enqueueing, with a
//! confirm token for each copy that will be stored. What a front end does with the outcome
//! (basic.return for a mandatory publish, counters, `{"routed": ..}`) stays with it.

use super::replies::{self, ReplyTargets};
use super::VHost;
use crate::confirm::ConfirmToken;
use crate::delayed::Delayer;
use crate::error::{CoreResult, Kind, Refusal};
use crate::exchange::Exchange;
use crate::message::Message;
use crate::permissions::{self, Access, Permissions, TopicPermission};
use crate::queue::QueueRef;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Hands out a confirm token for each copy of a publish that will be stored; what the token
/// reports to is the caller's (a confirm-mode channel, a transaction's or an HTTP request's
/// waiters, or nobody).
pub trait Confirmer {
    /// A token for one more stored copy; None when nobody waits for it.
    fn token(&mut self) -> Option<ConfirmToken>;
}

/// Nobody waits for the store (no confirms; dead letters; released delayed messages).
pub struct NoConfirms;

impl Confirmer for NoConfirms {
    fn token(&mut self) -> Option<ConfirmToken> {
        None
    }
}

/// Collects a receiver per stored copy, to be awaited before answering (tx.commit, HTTP).
#[derive(Default)]
pub struct Waiters(pub Vec<oneshot::Receiver<bool>>);

impl Confirmer for Waiters {
    fn token(&mut self) -> Option<ConfirmToken> {
        let (token, rx) = ConfirmToken::waiter();
        self.0.push(rx);
        Some(token)
    }
}

impl Waiters {
    /// Waits for every copy's store; false when any of them failed.
    pub async fn stored(self) -> bool {
        let mut ok = true;
        for w in self.0 {
            ok &= w.await.unwrap_or(false);
        }
        ok
    }
}

/// Buffers and caches a publisher keeps between publishes (no allocation per message).
#[derive(Default)]
pub struct RouteState {
    targets: Vec<QueueRef>,
    /// The queue last reached through the default exchange.
    default_route: Option<QueueRef>,
}

/// What the broker's services a publish may need.
#[derive(Clone, Copy, Default)]
pub struct PublishContext<'a> {
    /// Holds messages published to `x-delayed-message` exchanges (None: route them now, as
    /// when the delayer releases one).
    pub delayer: Option<&'a Delayer>,
    /// Direct reply-to consumers (None: replies are dropped).
    pub replies: Option<&'a ReplyTargets>,
    /// The message is a dead letter: a queue it already died in is skipped unless a rejection
    /// happened since (RabbitMQ's cycle rule).
    pub dead_letter: bool,
}

/// What became of a publish.
#[derive(Clone, Debug)]
pub enum Routed {
    /// Enqueued in this many queues (at least one).
    Queues(usize),
    /// Reached no queue: the message as routed (sender-selected keys applied, BCC removed),
    /// for a front end to return.
    Unroutable(Arc<Message>),
    /// Held by a delayed-message exchange.
    Delayed,
    /// A direct reply; false when its requester is gone.
    Reply(bool),
}

impl Routed {
    /// Whether the message reached anything now (a queue or a requester).
    pub fn routed(&self) -> bool {
        matches!(self, Routed::Queues(_) | Routed::Reply(true))
    }
}

/// Checks `user`'s write permission on the exchange named `name` in `vhost` (the default
/// exchange under RabbitMQ's name `amq.default`).
pub fn authorize_write(perms: &Permissions, vhost: &str, user: &str, name: &str) -> CoreResult<()> {
    let name = if name.is_empty() { "amq.default" } else { name };
    match perms.get(vhost, user) {
        Some(p) if p.allows(Access::Write, name) => Ok(()),
        _ => Err(permissions::refused(Kind::Exchange, name, vhost, user)),
    }
}

impl VHost {
    /// The checks of a publish to `x` beyond write permission (which publishers check when
    /// they look the exchange up): not internal, and the user's topic permission for the key.
    pub fn check_publish(
        &self,
        x: &Exchange,
        user: &str,
        topics: Option<&[TopicPermission]>,
        routing_key: &str,
    ) -> CoreResult<()> {
        if x.internal {
            return Err(Refusal::InternalExchange {
                name: x.name.clone(),
                vhost: self.name.clone(),
            }
            .into());
        }
        permissions::check_topic(topics, x, &self.name, user, routing_key, false)
    }

    /// Publishes `msg` to `x`: delays it, hands it to a direct-reply requester, or routes it and
    /// enqueues it in every queue it reaches, with a token from `confirmer` for each copy that
    /// will be stored (for a durable delayed exchange, the held message).
    pub async fn publish(
        &self,
        x: &Exchange,
        msg: Arc<Message>,
        ctx: PublishContext<'_>,
        confirmer: &mut impl Confirmer,
        state: &mut RouteState,
    ) -> Routed {
        if x.delayed {
            if let (Some(delay), Some(delayer)) = (crate::delayed::delay_of(&msg), ctx.delayer) {
                let token = if x.durable { confirmer.token() } else { None };
                delayer.schedule(&self.name, &x.name, msg, delay, x.durable, token);
                return Routed::Delayed;
            }
        }
        let key = msg.routing_key.as_str();
        if x.name.is_empty() && replies::is_reply_address(key) {
            let delivered = ctx
                .replies
                .is_some_and(|r| replies::deliver_reply(r, key, &msg));
            return Routed::Reply(delivered);
        }
        let (msg, extra_keys) = msg.sender_selected();
        let mut targets = std::mem::take(&mut state.targets);
        if x.name.is_empty() && extra_keys.is_empty() {
            if let Some(q) = self.default_queue(&mut state.default_route, msg.routing_key.as_str())
            {
                targets.push(q);
            }
        } else {
            self.route(x, &msg, &extra_keys, &mut targets);
        }
        if ctx.dead_letter {
            targets.retain(|q| !crate::queue::deadletter::is_cycle(&msg, &q.name));
        }
        let reached = targets.len();
        if reached == 0 {
            state.targets = targets;
            return Routed::Unroutable(msg);
        }
        for q in targets.drain(..) {
            let token = if q.confirms_later(&msg) {
                confirmer.token()
            } else {
                None
            };
            q.publish(msg.clone(), token).await;
        }
        state.targets = targets;
        Routed::Queues(reached)
    }

    /// The queue the default exchange routes `routing_key` to, from the one-entry cache when it
    /// is still current.
    fn default_queue(&self, cache: &mut Option<QueueRef>, routing_key: &str) -> Option<QueueRef> {
        if let Some(q) = cache {
            if q.name == routing_key && !q.is_deleted() {
                return Some(q.clone());
            }
        }
        let q = self.queue(routing_key).ok()?;
        *cache = Some(q.clone());
        Some(q)
    }
}
