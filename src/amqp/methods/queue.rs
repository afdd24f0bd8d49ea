//! queue.declare / bind / unbind / purge / delete.

use super::generated_name;
use crate::amqp::channel::Channel;
use crate::amqp::error::AmqpResult;
use crate::amqp::session::Session;
use crate::error::Kind;
use crate::permissions::Access;
use crate::vhost::QueueOptions;
use amq_protocol::protocol::{queue, AMQPClass};
use std::sync::Arc;

impl Session {
    pub(super) async fn queue_declare(
        &mut self,
        ch: &mut Channel,
        d: queue::Declare,
    ) -> AmqpResult<()> {
        if d.passive && d.queue.as_str() == super::REPLY_QUEUE {
            // The direct reply-to pseudo-queue always "exists", as in RabbitMQ.
            if !d.nowait {
                self.send_method(
                    ch.id,
                    AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                        queue: d.queue,
                        message_count: 0,
                        consumer_count: 0,
                    })),
                );
            }
            return Ok(());
        }
        let server_named = d.queue.as_str().is_empty() && !d.passive;
        let name = match server_named {
            true => generated_name("amq.gen-"),
            false => d.queue.as_str().to_owned(),
        };
        if !d.passive {
            self.authorize(Access::Configure, Kind::Queue, &name)?;
            if self.vhost.queue(&name).is_err() {
                self.authorize_forwarding(
                    Kind::Queue,
                    &name,
                    &d.arguments,
                    "x-dead-letter-exchange",
                )?;
            }
        }
        let q = self
            .broker
            .declare_queue(
                &self.vhost,
                &name,
                &QueueOptions {
                    passive: d.passive,
                    durable: d.durable,
                    exclusive: d.exclusive,
                    auto_delete: d.auto_delete,
                    arguments: d.arguments,
                    server_named,
                },
                self.id,
            )
            .await?;
        if q.exclusive_owner == Some(self.id)
            && !self.exclusive_queues.iter().any(|e| Arc::ptr_eq(e, &q))
        {
            self.exclusive_queues.push(q.clone());
        }
        ch.last_queue = Some(name.as_str().into());
        if !d.nowait {
            let (message_count, consumer_count) = q.stats().await?;
            self.send_method(
                ch.id,
                AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                    queue: name.into(),
                    message_count,
                    consumer_count,
                })),
            );
        }
        Ok(())
    }

    pub(super) async fn queue_bind(&mut self, ch: &mut Channel, b: queue::Bind) -> AmqpResult<()> {
        self.authorize(Access::Write, Kind::Queue, b.queue.as_str())?;
        self.authorize(Access::Read, Kind::Exchange, b.exchange.as_str())?;
        self.authorize_topic_read(b.exchange.as_str(), b.routing_key.as_str())?;
        self.broker
            .bind_queue(
                &self.vhost,
                b.queue.as_str(),
                b.exchange.as_str(),
                b.routing_key.as_str(),
                &b.arguments,
                self.id,
            )
            .await?;
        if !b.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Queue(queue::AMQPMethod::BindOk(queue::BindOk {})),
            );
        }
        Ok(())
    }

    pub(super) async fn queue_unbind(
        &mut self,
        ch: &mut Channel,
        u: queue::Unbind,
    ) -> AmqpResult<()> {
        self.authorize(Access::Write, Kind::Queue, u.queue.as_str())?;
        self.authorize(Access::Read, Kind::Exchange, u.exchange.as_str())?;
        self.authorize_topic_read(u.exchange.as_str(), u.routing_key.as_str())?;
        self.broker
            .unbind_queue(
                &self.vhost,
                u.queue.as_str(),
                u.exchange.as_str(),
                u.routing_key.as_str(),
                &u.arguments,
                self.id,
            )
            .await?;
        self.send_method(
            ch.id,
            AMQPClass::Queue(queue::AMQPMethod::UnbindOk(queue::UnbindOk {})),
        );
        Ok(())
    }

    pub(super) async fn queue_purge(
        &mut self,
        ch: &mut Channel,
        p: queue::Purge,
    ) -> AmqpResult<()> {
        self.authorize(Access::Read, Kind::Queue, p.queue.as_str())?;
        let q = self
            .broker
            .find_queue(&self.vhost, p.queue.as_str())
            .await?;
        self.vhost.check_exclusive(&q, self.id)?;
        let message_count = q.purge().await?;
        if !p.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk { message_count })),
            );
        }
        Ok(())
    }

    pub(super) async fn queue_delete(
        &mut self,
        ch: &mut Channel,
        d: queue::Delete,
    ) -> AmqpResult<()> {
        self.authorize(Access::Configure, Kind::Queue, d.queue.as_str())?;
        let message_count = self
            .broker
            .delete_queue(
                &self.vhost,
                d.queue.as_str(),
                d.if_unused,
                d.if_empty,
                self.id,
            )
            .await?;
        self.exclusive_queues.retain(|q| q.name != d.queue.as_str());
        if !d.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                    message_count,
                })),
            );
        }
        Ok(())
    }
}
