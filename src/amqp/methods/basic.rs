//! basic.qos / consume / cancel / get / ack / nack / reject / recover (publish is in publish.rs).

use super::generated_name;
use crate::amqp::channel::{group_by_queue, Channel, ChannelConsumer, Settle, UnackedEntry};
use crate::amqp::codec;
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use crate::channels::Counter;
use crate::error::Kind;
use crate::permissions::Access;
use crate::queue::consumer::ConsumerSpec;
use amq_protocol::protocol::{basic, AMQPClass};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

impl Session {
    /// basic.ack.
    pub(super) async fn basic_ack(&mut self, ch: &mut Channel, a: basic::Ack) -> AmqpResult<()> {
        self.settle(ch, a.delivery_tag, a.multiple, Settle::Ack)
            .await
    }

    /// basic.nack.
    pub(super) async fn basic_nack(&mut self, ch: &mut Channel, n: basic::Nack) -> AmqpResult<()> {
        let how = if n.requeue {
            Settle::Requeue
        } else {
            Settle::Discard
        };
        self.settle(ch, n.delivery_tag, n.multiple, how).await
    }

    /// basic.reject.
    pub(super) async fn basic_reject(
        &mut self,
        ch: &mut Channel,
        r: basic::Reject,
    ) -> AmqpResult<()> {
        let how = if r.requeue {
            Settle::Requeue
        } else {
            Settle::Discard
        };
        self.settle(ch, r.delivery_tag, false, how).await
    }

    /// basic.recover (answered with recover-ok).
    pub(super) async fn basic_recover(
        &mut self,
        ch: &mut Channel,
        r: basic::Recover,
    ) -> AmqpResult<()> {
        self.recover(ch, r.requeue).await?;
        self.send_method(
            ch.id,
            AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})),
        );
        Ok(())
    }

    /// basic.recover-async.
    pub(super) async fn basic_recover_async(
        &mut self,
        ch: &mut Channel,
        r: basic::RecoverAsync,
    ) -> AmqpResult<()> {
        self.recover(ch, r.requeue).await
    }

    pub(super) fn basic_qos(&mut self, ch: &mut Channel, q: basic::Qos) -> AmqpResult<()> {
        if q.global {
            ch.limiter.set_limit(u32::from(q.prefetch_count));
            if ch.limiter.take_blocked() {
                kick_consumers(ch);
            }
        } else {
            ch.prefetch = u32::from(q.prefetch_count);
        }
        self.send_method(
            ch.id,
            AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})),
        );
        Ok(())
    }

    pub(super) async fn basic_consume(
        &mut self,
        ch: &mut Channel,
        c: basic::Consume,
    ) -> AmqpResult<()> {
        if c.queue.as_str() == super::REPLY_QUEUE {
            return self.consume_reply_to(ch, c);
        }
        self.authorize(Access::Read, Kind::Queue, c.queue.as_str())?;
        let q = self
            .broker
            .find_queue(&self.vhost, c.queue.as_str())
            .await?;
        self.vhost.check_exclusive(&q, self.id)?;
        let tag: Arc<str> = match c.consumer_tag.as_str() {
            "" => generated_name("amq.ctag-").into(),
            t => t.into(),
        };
        if ch.consumers.contains_key(&tag) {
            return Err(AmqpError::not_allowed(format!(
                "attempt to reuse consumer tag '{tag}'"
            )));
        }
        let max = self.broker.config.max_consumers_per_channel;
        if max != 0 && ch.consumers.len() >= max {
            return Err(AmqpError::not_allowed(format!(
                "reached maximum ({max}) of consumers per channel"
            )));
        }
        let stream_offset = if q.args.stream {
            Some(crate::queue::stream::consume_offset(
                &q,
                &c.arguments,
                c.no_ack,
                ch.prefetch,
                ch.limiter.limit(),
            )?)
        } else {
            None
        };
        let Some(priority) = crate::args::consumer_priority(&c.arguments) else {
            return Err(AmqpError::precondition_failed(format!(
                "invalid arg 'x-priority' for consumer on {}",
                q.describe()
            )));
        };
        let pending = Arc::new(AtomicU32::new(0));
        let id = self.broker.next_id();
        q.consume(ConsumerSpec {
            id,
            tag: tag.clone(),
            channel: ch.id,
            connection: self.id,
            sink: self.sink.clone(),
            no_ack: c.no_ack,
            exclusive: c.exclusive,
            prefetch: ch.prefetch,
            limiter: ch.limiter.clone(),
            pending,
            priority,
            timeout: crate::args::consumer_timeout(&c.arguments)
                .or(q.applied().args.consumer_timeout)
                .unwrap_or(self.broker.config.consumer_timeout),
            stream_offset,
            stream_filter: q
                .args
                .stream
                .then(|| crate::queue::stream::consume_filter(&c.arguments))
                .flatten(),
        })
        .await?;
        ch.consumers
            .insert(tag.clone(), ChannelConsumer { id, queue: q });
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

    pub(super) async fn basic_cancel(
        &mut self,
        ch: &mut Channel,
        c: basic::Cancel,
    ) -> AmqpResult<()> {
        if ch
            .reply_to
            .as_ref()
            .is_some_and(|(t, _)| t.as_ref() == c.consumer_tag.as_str())
        {
            self.drop_reply_to(ch);
        }
        if let Some(consumer) = ch.consumers.remove(c.consumer_tag.as_str()) {
            consumer.queue.cancel(consumer.id).await;
        }
        if !c.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Basic(basic::AMQPMethod::CancelOk(basic::CancelOk {
                    consumer_tag: c.consumer_tag,
                })),
            );
        }
        Ok(())
    }

    pub(super) async fn basic_get(&mut self, ch: &mut Channel, g: basic::Get) -> AmqpResult<()> {
        self.authorize(Access::Read, Kind::Queue, g.queue.as_str())?;
        let q = self
            .broker
            .find_queue(&self.vhost, g.queue.as_str())
            .await?;
        self.vhost.check_exclusive(&q, self.id)?;
        let cap = self.broker.config.max_unacked_per_channel as usize;
        if !g.no_ack && cap != 0 && ch.unacked.len() >= cap {
            return Err(AmqpError::precondition_failed(format!(
                "unacknowledged message limit ({cap}) reached on channel {}",
                ch.id
            )));
        }
        match q.get(g.no_ack).await? {
            None => {
                ch.stats.add(Counter::GetEmpty, 1);
                self.send_method(
                    ch.id,
                    AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {})),
                )
            }
            Some(r) => {
                ch.stats.add(
                    if g.no_ack {
                        Counter::GetNoAck
                    } else {
                        Counter::Get
                    },
                    1,
                );
                if r.redelivered {
                    ch.stats.add(Counter::Redeliver, 1);
                }
                let tag = ch.next_delivery_tag();
                codec::encode_get_ok(
                    &mut self.out,
                    ch.id,
                    tag,
                    r.redelivered,
                    r.msg.exchange.as_str(),
                    r.msg.routing_key.as_str(),
                    r.remaining,
                );
                codec::encode_content(
                    &mut self.out,
                    ch.id,
                    r.msg.raw_properties(),
                    r.msg.body(),
                    self.frame_max,
                );
                if !g.no_ack {
                    ch.unacked.push_back(UnackedEntry {
                        tag,
                        queue: q,
                        seq: r.seq,
                        counted: false,
                    });
                }
            }
        }
        Ok(())
    }

    async fn settle(
        &mut self,
        ch: &mut Channel,
        tag: u64,
        multiple: bool,
        how: Settle,
    ) -> AmqpResult<()> {
        let entries = ch.take_unacked(tag, multiple)?;
        if let Some(tx) = ch.tx.as_mut() {
            tx.settles.extend(entries.into_iter().map(|e| (e, how)));
            return Ok(());
        }
        apply_settles(ch, entries, how).await;
        Ok(())
    }

    async fn recover(&mut self, ch: &mut Channel, requeue: bool) -> AmqpResult<()> {
        if !requeue {
            return Err(AmqpError::not_implemented("requeue=false"));
        }
        let entries: Vec<_> = ch.unacked.drain(..).collect();
        apply_settles(ch, entries, Settle::Requeue).await;
        Ok(())
    }
}

/// Tells the queues what became of settled deliveries and returns channel-wide credit.
pub(crate) async fn apply_settles(ch: &mut Channel, entries: Vec<UnackedEntry>, how: Settle) {
    let counted = entries.iter().filter(|e| e.counted).count() as u32;
    if how == Settle::Ack {
        ch.stats.add(Counter::Ack, entries.len() as u64);
    }
    for (q, seqs) in group_by_queue(entries.into_iter().map(|e| (e.queue, e.seq))) {
        match how {
            Settle::Ack => {
                if q.syncs_acks() && !ch.acked_far.iter().any(|(f, _)| Arc::ptr_eq(f, &q)) {
                    ch.acked_far.push((q.clone(), q.settle_mark()));
                }
                q.ack(seqs).await
            }
            Settle::Requeue => q.requeue(seqs).await,
            Settle::Discard => q.discard(seqs).await,
        }
    }
    if ch.limiter.release(counted) {
        kick_consumers(ch);
    }
}

/// Wakes every queue this channel consumes from (channel-wide credit came back).
fn kick_consumers(ch: &Channel) {
    for c in ch.consumers.values() {
        c.queue.kick();
    }
}
