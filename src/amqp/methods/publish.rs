//! basic.publish: content assembly (method, header, body frames), then routing and enqueueing,
//! basic.return for unroutable mandatory messages, and publisher confirms.

use crate::amqp::channel::{BodyFrame, Channel, HeaderSeen, PendingContent};
use crate::amqp::codec::{self, ContentHeader};
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use crate::channels::Counter;
use crate::confirm::ConfirmToken;
use crate::error::{code, Kind};
use crate::exchange::Exchange;
use crate::message::Message;
use crate::vhost::publish::{Confirmer, PublishContext, Routed, Waiters};
use amq_protocol::protocol::basic;
use bytes::BytesMut;
use std::sync::Arc;

impl Session {
    pub(super) fn basic_publish(&mut self, ch: &mut Channel, p: basic::Publish) -> AmqpResult<()> {
        ch.content = Some(PendingContent {
            publish: p,
            header: None,
            data: BytesMut::new(),
            props_len: 0,
        });
        Ok(())
    }

    pub(crate) async fn on_content_header(
        &mut self,
        ch: &mut Channel,
        h: Box<ContentHeader>,
    ) -> AmqpResult<()> {
        let Some(pc) = ch.content.as_mut() else {
            return Err(unexpected_content());
        };
        if pc.header.is_some() {
            return Err(AmqpError::unexpected_frame(format!(
                "expected content body, got non content body frame instead on channel {}",
                ch.id
            )));
        }
        if h.class_id != 60 {
            return Err(AmqpError::unexpected_frame(format!(
                "expected content header for class 60, got one for class {} instead",
                h.class_id
            )));
        }
        if pc.publish.immediate {
            // RabbitMQ refuses immediate once the content has arrived.
            return Err(AmqpError::not_implemented("immediate=true"));
        }
        let max = self.broker.config.max_message_size;
        if h.body_size > max {
            return Err(AmqpError::precondition_failed(format!(
                "message size {} is larger than configured max size {max}",
                h.body_size
            )));
        }
        if let Some(e) = &h.expiration {
            if h.hot.expiration_ms.is_none() {
                return Err(AmqpError::precondition_failed(format!(
                    "invalid expiration '{e}'"
                )));
            }
        }
        if let Some(uid) = h.user_id.as_ref().filter(|_| !self.internal) {
            if uid.as_str() != self.user {
                return Err(AmqpError::precondition_failed(format!(
                    "user_id property set to '{uid}' but authenticated user was '{}'",
                    self.user
                )));
            }
        }
        pc.props_len = h.raw_properties.len();
        // Reserve what a declared size promises only up to a bound: a client could declare huge
        // bodies on many channels and never send them.
        const UPFRONT: u64 = 1 << 20;
        // One more byte: a large body frame is read into this buffer with its end octet.
        pc.data = BytesMut::with_capacity(pc.props_len + h.body_size.min(UPFRONT) as usize + 1);
        pc.data.extend_from_slice(&h.raw_properties);
        let complete = h.body_size == 0;
        pc.header = Some(HeaderSeen {
            body_size: h.body_size,
            hot: h.hot,
        });
        if complete {
            self.finish_content(ch).await?;
        }
        Ok(())
    }

    pub(crate) async fn on_content_body(
        &mut self,
        ch: &mut Channel,
        body: BodyFrame,
    ) -> AmqpResult<()> {
        let pc = match ch.content.as_mut() {
            Some(pc) if pc.header.is_some() => pc,
            _ => return Err(unexpected_content()),
        };
        let expected = pc.header.as_ref().map_or(0, |h| h.body_size);
        let have = match body {
            BodyFrame::Buffered(body) => {
                let have = (pc.data.len() - pc.props_len) as u64;
                if have + body.len() as u64 > expected {
                    return Err(AmqpError::frame_error(format!(
                        "content body exceeds the declared size {expected}"
                    )));
                }
                pc.data.extend_from_slice(&body);
                have + body.len() as u64
            }
            // Checked against the declared size before it was read.
            BodyFrame::Direct(data) => {
                pc.data = data;
                (pc.data.len() - pc.props_len) as u64
            }
        };
        if have == expected {
            self.finish_content(ch).await?;
        }
        Ok(())
    }

    async fn finish_content(&mut self, ch: &mut Channel) -> AmqpResult<()> {
        let Some(pc) = ch.content.take() else {
            return Ok(());
        };
        let Some(header) = pc.header else {
            return Ok(());
        };
        let publish = pc.publish;
        let msg = Arc::new(Message::assemble(
            publish.exchange.clone(),
            publish.routing_key.clone(),
            pc.data.freeze(),
            pc.props_len,
            header.hot,
        ));
        // A whole message is in: under a resource alarm, the connection blocks after it.
        self.published = true;
        if let Some(tx) = ch.tx.as_mut() {
            self.broker
                .find_exchange(&self.vhost, publish.exchange.as_str())
                .await?;
            tx.publishes.push((publish, msg));
            return Ok(());
        }
        self.route_publish(ch, &publish, msg, None).await?;
        if ch.confirm {
            self.confirm_ready(ch);
        }
        Ok(())
    }

    /// Publishes a message through the core's one publish path and reports the outcome the
    /// AMQP way: basic.return for an unroutable mandatory message, the channel's counters, and
    /// on a confirm-mode channel the publish's place in the confirm sequence (its persistent
    /// copies report their commit with tokens); in a transaction, `waiters` collects the
    /// copies' receivers instead.
    pub(crate) async fn route_publish(
        &mut self,
        ch: &mut Channel,
        p: &basic::Publish,
        msg: Arc<Message>,
        waiters: Option<&mut Waiters>,
    ) -> AmqpResult<()> {
        let x = self.exchange_for_publish(p.exchange.as_str()).await?;
        self.vhost.check_publish(
            &x,
            &self.user,
            self.topic_permissions.as_deref().map(Vec::as_slice),
            msg.routing_key.as_str(),
        )?;
        let msg = self.rewrite_reply_to(ch, msg)?;
        ch.stats.add(Counter::Publish, 1);
        ch.stats.observe_publish(msg.body_len() as u64, ch.confirm);
        let mut confirms = match waiters {
            _ if ch.confirm => PublishConfirms::Channel {
                sink: &self.confirm_sink,
                channel: ch.id,
                uid: ch.uid,
                seq: ch.confirms.next_seq(),
                waits: 0,
            },
            Some(w) => PublishConfirms::Tx(w),
            None => PublishConfirms::Nobody,
        };
        let ctx = PublishContext {
            delayer: self.broker.delayer(),
            replies: Some(self.broker.reply_targets()),
            dead_letter: false,
        };
        let routed = self
            .broker
            .publish(
                &self.vhost,
                &x,
                msg.clone(),
                ctx,
                &mut confirms,
                &mut self.route_state,
            )
            .await;
        let waits = match confirms {
            PublishConfirms::Channel { waits, .. } => waits,
            _ => 0,
        };
        match routed {
            Routed::Unroutable(returned) => {
                if p.mandatory {
                    ch.stats.add(Counter::ReturnUnroutable, 1);
                    self.return_unroutable(ch.id, &returned);
                } else {
                    ch.stats.add(Counter::DropUnroutable, 1);
                }
            }
            Routed::Reply(false) if p.mandatory => {
                ch.stats.add(Counter::ReturnUnroutable, 1);
                self.return_unroutable(ch.id, &msg);
            }
            Routed::Queues(_) | Routed::Delayed | Routed::Reply(_) => {}
        }
        if ch.confirm {
            ch.confirms.publish(waits);
        }
        Ok(())
    }

    /// basic.return 312 NO_ROUTE with the message.
    fn return_unroutable(&mut self, channel: u16, msg: &Message) {
        codec::encode_return(
            &mut self.out,
            channel,
            code::NO_ROUTE,
            "NO_ROUTE",
            msg.exchange.as_str(),
            msg.routing_key.as_str(),
        );
        codec::encode_content(
            &mut self.out,
            channel,
            msg.raw_properties(),
            msg.body(),
            self.frame_max,
        );
    }

    /// The exchange named by a publish, from the one-entry cache when it is still current.
    async fn exchange_for_publish(&mut self, name: &str) -> AmqpResult<Arc<Exchange>> {
        if let Some(x) = &self.exchange_cache {
            if x.name == name && !x.is_deleted() {
                return Ok(x.clone());
            }
        }
        // Checked on a cache miss only: later publishes to the same exchange reuse the decision,
        // as RabbitMQ's channels cache theirs.
        self.authorize(crate::permissions::Access::Write, Kind::Exchange, name)?;
        let x = self.broker.find_exchange(&self.vhost, name).await?;
        self.exchange_cache = Some(x.clone());
        Ok(x)
    }

    /// Notes that a confirm-mode channel has publishes to acknowledge at the next flush.
    fn confirm_ready(&mut self, ch: &Channel) {
        if !self.confirm_dirty.contains(&ch.id) {
            self.confirm_dirty.push(ch.id);
        }
    }
}

/// Who waits for the stored copies of one AMQP publish.
enum PublishConfirms<'a> {
    /// A confirm-mode channel: tokens report to its connection under the publish's sequence
    /// number; `waits` counts them.
    Channel {
        sink: &'a Arc<dyn crate::confirm::ConfirmSink>,
        channel: u16,
        uid: u64,
        seq: u64,
        waits: u32,
    },
    /// A transaction's commit.
    Tx(&'a mut Waiters),
    /// Nobody.
    Nobody,
}

impl Confirmer for PublishConfirms<'_> {
    fn token(&mut self) -> Option<ConfirmToken> {
        match self {
            PublishConfirms::Channel {
                sink,
                channel,
                uid,
                seq,
                waits,
            } => {
                *waits += 1;
                Some(ConfirmToken::for_channel(
                    (*sink).clone(),
                    *channel,
                    *uid,
                    *seq,
                ))
            }
            PublishConfirms::Tx(w) => w.token(),
            PublishConfirms::Nobody => None,
        }
    }
}

fn unexpected_content() -> AmqpError {
    AmqpError::unexpected_frame("expected method frame, got non method frame instead")
}
