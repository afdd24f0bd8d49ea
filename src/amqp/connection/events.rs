//! What a connection's inbox brings: deliveries from queues (encoded here, where the channel's
//! delivery tags and unacked list live), confirms of stored publishes, direct replies, consumer
//! timeouts and cancellations.

use super::Connection;
use crate::amqp::codec;
use crate::amqp::error::AmqpError;
use crate::queue::consumer::{ConsumerEvent, ConsumerSpec, Delivery, PENDING_WINDOW};
use crate::queue::QueueRef;
use amq_protocol::protocol::{basic, AMQPClass};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

impl Connection {
    pub(crate) async fn on_event(&mut self, e: ConsumerEvent) {
        match e {
            ConsumerEvent::Deliver(d) => self.on_deliver(d).await,
            ConsumerEvent::Confirm {
                channel,
                channel_uid,
                seq,
                ok,
            } => {
                if let Some(ch) = self.open_channel(channel).filter(|c| c.uid == channel_uid) {
                    ch.confirms.outcome(seq, ok);
                    if !self.s.confirm_dirty.contains(&channel) {
                        self.s.confirm_dirty.push(channel);
                    }
                }
            }
            ConsumerEvent::DirectReply {
                channel,
                channel_uid,
                tag,
                msg,
            } => {
                let frame_max = self.s.frame_max;
                let closing = self.closing.is_some();
                let out = &mut self.s.out;
                if let Some(ch) = self.channels.get_mut(channel) {
                    let live = ch.uid == channel_uid
                        && ch.reply_to.as_ref().is_some_and(|(t, _)| *t == tag);
                    if live && !ch.closing && !closing {
                        let delivery_tag = ch.next_delivery_tag();
                        codec::encode_deliver(
                            out,
                            channel,
                            &codec::DeliverFields {
                                consumer_tag: &tag,
                                delivery_tag,
                                redelivered: false,
                                exchange: msg.exchange.as_str(),
                                routing_key: msg.routing_key.as_str(),
                            },
                        );
                        codec::encode_content(
                            out,
                            channel,
                            msg.raw_properties(),
                            msg.body(),
                            frame_max,
                        );
                    }
                }
            }
            ConsumerEvent::TimedOut { channel, timeout } => {
                if self.closing.is_some() {
                    return;
                }
                if let Some(mut ch) = self.channels.take(channel) {
                    if !ch.closing {
                        let e = AmqpError::precondition_failed(format!(
                            "delivery acknowledgement on channel {channel} timed out. Timeout value used: \
                             {timeout} ms. This timeout value can be configured, see consumers doc guide \
                             to learn more"
                        ));
                        self.s.close_channel(&mut ch, e).await;
                    }
                    self.channels.put(ch);
                }
            }
            ConsumerEvent::Moved { spec, to } => self.on_moved(*spec, to),
            ConsumerEvent::Cancelled { channel, tag } => {
                let notify = self.cancel_notify && self.closing.is_none();
                let Some(ch) = self.open_channel(channel) else {
                    return;
                };
                if ch.consumers.remove(&tag).is_some() && notify {
                    self.s.send_method(
                        channel,
                        AMQPClass::Basic(basic::AMQPMethod::Cancel(basic::Cancel {
                            consumer_tag: tag.as_ref().into(),
                            nowait: true,
                        })),
                    );
                }
            }
        }
    }

    /// A consumer's queue is served by handle `to` from now on (its leader moved): the
    /// consumer is registered there again under a new id, as the client set it up; the
    /// client sees nothing, unless `to` refuses it (basic.cancel then). One the channel
    /// cancelled meanwhile, or whose channel is gone, is not.
    fn on_moved(&mut self, mut spec: ConsumerSpec, to: QueueRef) {
        let id = self.s.broker.next_id();
        let sink = self.s.sink.clone();
        let Some(ch) = self.open_channel(spec.channel) else {
            return;
        };
        let Some(c) = ch.consumers.get_mut(&spec.tag).filter(|c| c.id == spec.id) else {
            return;
        };
        c.id = id;
        c.queue = to.clone();
        spec.id = id;
        spec.pending = Arc::new(AtomicU32::new(0));
        let (channel, tag) = (spec.channel, spec.tag.clone());
        let registered = to.consume_queued(spec);
        tokio::spawn(async move {
            if !matches!(registered.await, Ok(Ok(()))) {
                let _ = sink.send(ConsumerEvent::Cancelled { channel, tag });
            }
        });
    }

    async fn on_deliver(&mut self, d: Delivery) {
        if d.pending.fetch_sub(1, Ordering::AcqRel) == PENDING_WINDOW {
            d.queue.kick();
        }
        let frame_max = self.s.frame_max;
        let out = &mut self.s.out;
        let closing = self.closing.is_some();
        let ch = match self.channels.get_mut(d.channel) {
            Some(ch)
                if !closing
                    && !ch.closing
                    && ch.consumers.get(&d.tag).is_some_and(|c| c.id == d.consumer) =>
            {
                ch
            }
            other => {
                // Connection or channel closing, or consumer cancelled: the message never
                // reached the client, so it goes back.
                if let Some(ch) = other {
                    if !d.no_ack {
                        ch.limiter.release(1);
                    }
                }
                d.queue.return_undelivered(d.seq, d.msg).await;
                return;
            }
        };
        let tag = ch.next_delivery_tag();
        codec::encode_deliver(
            out,
            d.channel,
            &codec::DeliverFields {
                consumer_tag: &d.tag,
                delivery_tag: tag,
                redelivered: d.redelivered,
                exchange: d.msg.exchange.as_str(),
                routing_key: d.msg.routing_key.as_str(),
            },
        );
        if d.msg.body_len() >= codec::SHARED_BODY_MIN {
            codec::encode_content_shared(
                out,
                &mut self.s.out_chunks,
                d.channel,
                d.msg.raw_properties(),
                &d.msg.body_bytes(),
                frame_max,
            );
        } else {
            codec::encode_content(
                out,
                d.channel,
                d.msg.raw_properties(),
                d.msg.body(),
                frame_max,
            );
        }
        use crate::channels::Counter;
        if d.redelivered {
            ch.stats.add(Counter::Redeliver, 1);
        }
        if d.no_ack {
            ch.stats.add(Counter::DeliverNoAck, 1);
        } else {
            ch.stats.add(Counter::Deliver, 1);
            ch.unacked.push_back(crate::amqp::channel::UnackedEntry {
                tag,
                queue: d.queue,
                seq: d.seq,
                counted: true,
            });
            ch.update_unacked_gauge();
        }
    }

    /// Reports settled publishes of the channels that have some: one basic.ack (multiple when
    /// several) per run of stored publishes, a basic.nack for each failed one.
    pub(crate) fn flush_confirms(&mut self) {
        let dirty = std::mem::take(&mut self.s.confirm_dirty);
        for id in &dirty {
            let out = &mut self.s.out;
            if let Some(ch) = self.channels.get_mut(*id) {
                if ch.closing {
                    continue;
                }
                let acked = ch.confirms.drain(|ack, tag, multiple| {
                    codec::encode_confirm(out, *id, ack, tag, multiple)
                });
                ch.stats.add(crate::channels::Counter::Confirm, acked);
                ch.update_gauges();
            }
        }
        self.s.confirm_dirty = dirty;
        self.s.confirm_dirty.clear();
    }
}
