//! channel.close and channel.flow, and releasing what a closing channel holds.

use crate::amqp::channel::{group_by_queue, Channel};
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use amq_protocol::protocol::{channel, AMQPClass};

impl Session {
    /// channel.close from the client: released, answered, finished. The `close-ok` waits
    /// until the replicated (and other nodes') queues the channel acked on have committed
    /// those acks, so an ack followed by `close-ok` is never undone by a failover; when they
    /// cannot be committed the connection is closed instead (541).
    pub(super) async fn channel_close(&mut self, ch: &mut Channel) -> AmqpResult<()> {
        self.release_channel(ch).await;
        sync_acks(std::mem::take(&mut ch.acked_far)).await?;
        self.send_method(
            ch.id,
            AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
        );
        ch.finished = true;
        Ok(())
    }

    /// channel.flow: only `active=true` (RabbitMQ refuses to stop a channel's deliveries).
    pub(super) fn channel_flow(&mut self, ch: &mut Channel, f: channel::Flow) -> AmqpResult<()> {
        if !f.active {
            return Err(AmqpError::not_implemented("active=false"));
        }
        self.send_method(
            ch.id,
            AMQPClass::Channel(channel::AMQPMethod::FlowOk(channel::FlowOk {
                active: true,
            })),
        );
        Ok(())
    }

    /// Sends channel.close for a channel error and releases what the channel held.
    pub(crate) async fn close_channel(&mut self, ch: &mut Channel, e: AmqpError) {
        tracing::debug!(connection = self.id, channel = ch.id, code = e.code, text = %e.text, "closing channel");
        self.send_method(
            ch.id,
            AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
                reply_code: e.code,
                reply_text: crate::shortstr::short(&e.text),
                class_id: e.class_id,
                method_id: e.method_id,
            })),
        );
        self.release_channel(ch).await;
        ch.closing = true;
    }

    /// Cancels the channel's consumers and requeues its unacked messages.
    pub(crate) async fn release_channel(&mut self, ch: &mut Channel) {
        ch.content = None;
        self.drop_reply_to(ch);
        for (_, c) in ch.consumers.drain() {
            c.queue.cancel(c.id).await;
        }
        if let Some(tx) = ch.tx.take() {
            let entries = tx.settles.into_iter().map(|(e, _)| e).collect();
            ch.restore_unacked(entries);
        }
        let entries: Vec<_> = ch.unacked.drain(..).map(|e| (e.queue, e.seq)).collect();
        for (q, seqs) in group_by_queue(entries) {
            q.requeue(seqs).await;
        }
    }
}

/// Waits until the queues in `far` (with each one's settle mark, [`Channel::acked_far`]) have
/// committed the acks sent to them; a 541 error for the connection when one cannot.
pub(crate) async fn sync_acks(far: Vec<(crate::queue::QueueRef, u64)>) -> AmqpResult<()> {
    for (q, mark) in far {
        if !q.sync(mark).await {
            return Err(AmqpError::internal(format!(
                "acknowledgements to queue '{}' in vhost '{}' could not be committed",
                q.name, q.vhost
            )));
        }
    }
    Ok(())
}
