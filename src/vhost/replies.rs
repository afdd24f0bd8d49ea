//! Direct reply-to's registry side: the private `amq.rabbitmq.reply-to.<token>` addresses and
//! where each one's replies go. A reply published to such a routing key on the default exchange
//! is handed straight to the requesting consumer, through no queue (the AMQP front end sets
//! the consumers up, in `amqp/methods/reply_to.rs`).

use crate::message::Message;
use crate::queue::consumer::{ConsumerEvent, ConsumerSink};
use dashmap::DashMap;
use std::sync::Arc;

/// The pseudo-queue name.
pub const REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";
/// What a private reply address starts with.
pub const REPLY_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Where replies for one token go.
#[derive(Clone, Debug)]
pub struct ReplyTarget {
    /// The requester's connection inbox.
    pub sink: ConsumerSink,
    /// Its channel.
    pub channel: u16,
    /// That channel instance.
    pub channel_uid: u64,
    /// Its reply consumer's tag.
    pub tag: Arc<str>,
}

/// Direct reply-to consumers by token.
pub type ReplyTargets = DashMap<String, ReplyTarget>;

/// Whether a routing key addresses a direct reply.
pub fn is_reply_address(routing_key: &str) -> bool {
    routing_key.starts_with(REPLY_PREFIX)
}

/// Delivers a reply addressed to `amq.rabbitmq.reply-to.<token>`; false when no requester has
/// that token any more.
pub fn deliver_reply(targets: &ReplyTargets, routing_key: &str, msg: &Arc<Message>) -> bool {
    let Some(token) = routing_key.strip_prefix(REPLY_PREFIX) else {
        return false;
    };
    let Some(target) = targets.get(token).map(|t| t.clone()) else {
        return false;
    };
    target
        .sink
        .send(ConsumerEvent::DirectReply {
            channel: target.channel,
            channel_uid: target.channel_uid,
            tag: target.tag,
            msg: msg.clone(),
        })
        .is_ok()
}
