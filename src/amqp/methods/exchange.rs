//! exchange.declare / delete / bind / unbind.

use crate::amqp::channel::Channel;
use crate::amqp::error::AmqpResult;
use crate::amqp::session::Session;
use crate::error::Kind;
use crate::permissions::Access;
use crate::vhost::ExchangeOptions;
use amq_protocol::protocol::{exchange, AMQPClass};

impl Session {
    /// Write on the destination, read on the source (the default exchange is refused later
    /// with its own error).
    fn authorize_binding(&self, destination: &str, source: &str, key: &str) -> AmqpResult<()> {
        if !destination.is_empty() {
            self.authorize(Access::Write, Kind::Exchange, destination)?;
        }
        if !source.is_empty() {
            self.authorize(Access::Read, Kind::Exchange, source)?;
            self.authorize_topic_read(source, key)?;
        }
        Ok(())
    }

    pub(super) async fn exchange_declare(
        &mut self,
        ch: &mut Channel,
        d: exchange::Declare,
    ) -> AmqpResult<()> {
        if !d.passive && !d.exchange.as_str().is_empty() {
            self.authorize(Access::Configure, Kind::Exchange, d.exchange.as_str())?;
            self.authorize_forwarding(
                Kind::Exchange,
                d.exchange.as_str(),
                &d.arguments,
                "alternate-exchange",
            )?;
        }
        let options = ExchangeOptions {
            passive: d.passive,
            durable: d.durable,
            auto_delete: d.auto_delete,
            internal: d.internal,
            arguments: d.arguments,
        };
        self.broker
            .declare_exchange(&self.vhost, d.exchange.as_str(), d.kind.as_str(), &options)
            .await?;
        if !d.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {})),
            );
        }
        Ok(())
    }

    pub(super) async fn exchange_delete(
        &mut self,
        ch: &mut Channel,
        d: exchange::Delete,
    ) -> AmqpResult<()> {
        if !d.exchange.as_str().is_empty() {
            self.authorize(Access::Configure, Kind::Exchange, d.exchange.as_str())?;
        }
        self.broker
            .delete_exchange(&self.vhost, d.exchange.as_str(), d.if_unused)
            .await?;
        if !d.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {})),
            );
        }
        Ok(())
    }

    pub(super) async fn exchange_bind(
        &mut self,
        ch: &mut Channel,
        b: exchange::Bind,
    ) -> AmqpResult<()> {
        self.authorize_binding(
            b.destination.as_str(),
            b.source.as_str(),
            b.routing_key.as_str(),
        )?;
        self.broker
            .bind_exchange(
                &self.vhost,
                b.destination.as_str(),
                b.source.as_str(),
                b.routing_key.as_str(),
                &b.arguments,
            )
            .await?;
        if !b.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::BindOk(exchange::BindOk {})),
            );
        }
        Ok(())
    }

    pub(super) async fn exchange_unbind(
        &mut self,
        ch: &mut Channel,
        u: exchange::Unbind,
    ) -> AmqpResult<()> {
        self.authorize_binding(
            u.destination.as_str(),
            u.source.as_str(),
            u.routing_key.as_str(),
        )?;
        self.broker
            .unbind_exchange(
                &self.vhost,
                u.destination.as_str(),
                u.source.as_str(),
                u.routing_key.as_str(),
                &u.arguments,
            )
            .await?;
        if !u.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {})),
            );
        }
        Ok(())
    }
}
