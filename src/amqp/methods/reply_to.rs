//! Direct reply-to (`amq.rabbitmq.reply-to`), as RabbitMQ does it: a channel consumes from the
//! pseudo-queue in no-ack mode; its requests published with `reply_to = amq.rabbitmq.reply-to`
//! get a private `amq.rabbitmq.reply-to.<token>` address; replies published to that routing key
//! on the default exchange go straight to the requesting consumer, through no queue.

use super::generated_name;
use crate::amqp::channel::Channel;
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use crate::message::Message;
use crate::vhost::replies::{ReplyTarget, REPLY_PREFIX, REPLY_QUEUE};
use amq_protocol::protocol::{basic, AMQPClass};
use std::sync::Arc;

impl Session {
    /// basic.consume on the pseudo-queue.
    pub(crate) fn consume_reply_to(
        &mut self,
        ch: &mut Channel,
        c: basic::Consume,
    ) -> AmqpResult<()> {
        if !c.no_ack {
            return Err(AmqpError::precondition_failed(
                "reply consumer cannot acknowledge",
            ));
        }
        if ch.reply_to.is_some() {
            return Err(AmqpError::precondition_failed("reply consumer already set"));
        }
        let tag: Arc<str> = match c.consumer_tag.as_str() {
            "" => generated_name("amq.ctag-").into(),
            t => t.into(),
        };
        let token = generated_name("");
        self.broker.reply_targets().insert(
            token.clone(),
            ReplyTarget {
                sink: self.sink.clone(),
                channel: ch.id,
                channel_uid: ch.uid,
                tag: tag.clone(),
            },
        );
        ch.reply_to = Some((tag.clone(), token));
        if !c.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                    consumer_tag: tag.as_ref().into(),
                })),
            );
        }
        Ok(())
    }

    /// Forgets the channel's reply consumer (cancel or channel close).
    pub(crate) fn drop_reply_to(&mut self, ch: &mut Channel) {
        if let Some((_, token)) = ch.reply_to.take() {
            self.broker.reply_targets().remove(&token);
        }
    }

    /// Gives a request's `reply_to = amq.rabbitmq.reply-to` the channel's private address.
    pub(crate) fn rewrite_reply_to(
        &self,
        ch: &Channel,
        msg: Arc<Message>,
    ) -> AmqpResult<Arc<Message>> {
        if !msg.has_reply_to() {
            return Ok(msg);
        }
        let props = msg.properties();
        if props.reply_to().as_ref().map(|r| r.as_str()) != Some(REPLY_QUEUE) {
            return Ok(msg);
        }
        let Some((_, token)) = &ch.reply_to else {
            return Err(AmqpError::precondition_failed(
                "fast reply consumer does not exist",
            ));
        };
        let address = format!("{REPLY_PREFIX}{token}");
        Ok(Arc::new(msg.with_properties(
            &props.with_reply_to(address.into()),
            None,
            None,
        )))
    }
}
