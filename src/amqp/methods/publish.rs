//! basic.publish: content assembly (method, header, body frames), then routing and enqueueing,
//! basic.return for unroutable mandatory messages, and publisher confirms.

use crate::amqp::channel::{Channel, PendingContent};
use crate::amqp::codec::{self, ContentHeader};
use crate::amqp::connection::Connection;
use crate::amqp::direct::BodyFrame;
use crate::channels::Counter;
use crate::confirm::ConfirmToken;
use crate::error::{code, AmqpError, AmqpResult};
use crate::exchange::Exchange;
use crate::message::Message;
use crate::queue::QueueRef;
use amq_protocol::protocol::basic;
use bytes::BytesMut;
use std::sync::Arc;
use tokio::sync::oneshot;

impl Connection {
    pub(crate) fn basic_publish(&mut self, ch: &mut Channel, p: basic::Publish) -> AmqpResult<()> {
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
        if let Some(e) = h.properties.expiration() {
            if crate::queue::args::parse_expiration(e.as_str()).is_none() {
                return Err(AmqpError::precondition_failed(format!(
                    "invalid expiration '{e}'"
                )));
            }
        }
        if let Some(uid) = h.properties.user_id() {
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
        pc.header = Some(*h);
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
        let msg = Arc::new(Message::new(
            publish.exchange.clone(),
            publish.routing_key.clone(),
            pc.data.freeze(),
            pc.props_len,
            &header.properties,
        ));
        // A whole message is in: under a resource alarm, the connection blocks after it.
        self.note_publish();
        if let Some(tx) = ch.tx.as_mut() {
            self.vhost.exchange(publish.exchange.as_str())?;
            tx.publishes.push((publish, msg));
            return Ok(());
        }
        self.route_publish(ch, &publish, msg, None).await?;
        if ch.confirm {
            self.confirm_ready(ch);
        }
        Ok(())
    }

    /// Routes a message and enqueues it in every queue it reaches. On a confirm-mode channel
    /// the publish is recorded and each persistent copy carries a token that reports its
    /// commit; in a transaction, `waiters` collects those tokens' receivers instead.
    pub(crate) async fn route_publish(
        &mut self,
        ch: &mut Channel,
        p: &basic::Publish,
        msg: Arc<Message>,
        mut waiters: Option<&mut Vec<oneshot::Receiver<bool>>>,
    ) -> AmqpResult<()> {
        let x = self.exchange_for_publish(p.exchange.as_str())?;
        if x.internal {
            return Err(AmqpError::access_refused(format!(
                "cannot publish to internal exchange '{}' in vhost '{}'",
                x.name, self.vhost.name
            )));
        }
        self.authorize_topic(&x, msg.routing_key.as_str())?;
        let msg = self.rewrite_reply_to(ch, msg)?;
        ch.stats.add(Counter::Publish, 1);
        if x.delayed {
            if let (Some(delay), Some(delayer)) =
                (crate::delayed::delay_of(&msg), self.broker.delayer())
            {
                // Held until the delay is over; stored (and confirmed after the commit) when the
                // exchange is durable.
                let token = (ch.confirm && x.durable).then(|| {
                    ConfirmToken::for_channel(
                        self.sink.clone(),
                        ch.id,
                        ch.uid,
                        ch.confirms.next_seq(),
                    )
                });
                let waits = u32::from(token.is_some());
                delayer.schedule(&self.vhost.name, &x.name, msg, delay, x.durable, token);
                if ch.confirm {
                    ch.confirms.publish(waits);
                }
                return Ok(());
            }
        }
        if x.name.is_empty() && super::is_reply_address(msg.routing_key.as_str()) {
            if !self.deliver_reply(msg.routing_key.as_str(), &msg) && p.mandatory {
                ch.stats.add(Counter::ReturnUnroutable, 1);
                self.return_unroutable(ch.id, &msg);
            }
            if ch.confirm {
                ch.confirms.publish(0);
            }
            return Ok(());
        }
        let (msg, extra_keys) = msg.sender_selected();
        let mut targets = std::mem::take(&mut self.route_buf);
        if x.name.is_empty() && extra_keys.is_empty() {
            if let Some(q) = self.default_queue(msg.routing_key.as_str()) {
                targets.push(q);
            }
        } else {
            self.vhost.route(&x, &msg, &extra_keys, &mut targets);
        }
        if targets.is_empty() {
            if p.mandatory {
                ch.stats.add(Counter::ReturnUnroutable, 1);
                self.return_unroutable(ch.id, &msg);
            } else {
                ch.stats.add(Counter::DropUnroutable, 1);
            }
        }
        let seq = ch.confirms.next_seq();
        let mut waits = 0;
        for q in targets.drain(..) {
            let token = if !q.confirms_later(&msg) {
                None
            } else if ch.confirm {
                waits += 1;
                Some(ConfirmToken::for_channel(
                    self.sink.clone(),
                    ch.id,
                    ch.uid,
                    seq,
                ))
            } else if let Some(w) = waiters.as_deref_mut() {
                let (token, rx) = ConfirmToken::waiter();
                w.push(rx);
                Some(token)
            } else {
                None
            };
            q.publish(msg.clone(), token).await;
        }
        if ch.confirm {
            ch.confirms.publish(waits);
        }
        self.route_buf = targets;
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
    fn exchange_for_publish(&mut self, name: &str) -> AmqpResult<Arc<Exchange>> {
        if let Some(x) = &self.exchange_cache {
            if x.name == name && !x.is_deleted() {
                return Ok(x.clone());
            }
        }
        // Checked on a cache miss only: later publishes to the same exchange reuse the decision,
        // as RabbitMQ's channels cache theirs.
        self.authorize(crate::permissions::Access::Write, "exchange", name)?;
        let x = self.vhost.exchange(name)?;
        self.exchange_cache = Some(x.clone());
        Ok(x)
    }

    /// The queue the default exchange routes `routing_key` to, from the one-entry cache when
    /// it is still current.
    fn default_queue(&mut self, routing_key: &str) -> Option<QueueRef> {
        if let Some(q) = &self.default_route {
            if q.name == routing_key && !q.is_deleted() {
                return Some(q.clone());
            }
        }
        let q = self.vhost.queue(routing_key).ok()?;
        self.default_route = Some(q.clone());
        Some(q)
    }

    /// Notes that a confirm-mode channel has publishes to acknowledge at the next flush.
    fn confirm_ready(&mut self, ch: &Channel) {
        if !self.confirm_dirty.contains(&ch.id) {
            self.confirm_dirty.push(ch.id);
        }
    }

    /// Reports settled publishes of the channels that have some: one basic.ack (multiple when
    /// several) per run of stored publishes, a basic.nack for each failed one.
    pub(crate) fn flush_confirms(&mut self) {
        let dirty = std::mem::take(&mut self.confirm_dirty);
        for id in &dirty {
            let out = &mut self.out;
            if let Some(ch) = self.channels.get_mut(*id) {
                if ch.closing {
                    continue;
                }
                let acked = ch.confirms.drain(|ack, tag, multiple| {
                    codec::encode_confirm(out, *id, ack, tag, multiple)
                });
                ch.stats.add(Counter::Confirm, acked);
                ch.update_gauges();
            }
        }
        self.confirm_dirty = dirty;
        self.confirm_dirty.clear();
    }
}

fn unexpected_content() -> AmqpError {
    AmqpError::unexpected_frame("expected method frame, got non method frame instead")
}
