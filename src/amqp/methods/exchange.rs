//! exchange.declare / delete / bind / unbind.

use crate::amqp::channel::Channel;
use crate::amqp::connection::Connection;
use crate::error::{AmqpError, AmqpResult};
use crate::permissions::Access;
use crate::vhost::ExchangeOptions;
use amq_protocol::protocol::{exchange, AMQPClass};

impl Connection {
    pub(crate) async fn on_exchange_method(
        &mut self,
        ch: &mut Channel,
        m: exchange::AMQPMethod,
    ) -> AmqpResult<()> {
        // Durable changes are committed before the reply (still in the output buffer) is sent.
        let mark = self.vhost.store.submitted();
        let reply_at = self.out.len();
        let r = match m {
            exchange::AMQPMethod::Declare(d) => self.exchange_declare(ch, d),
            exchange::AMQPMethod::Delete(d) => self.exchange_delete(ch, d),
            exchange::AMQPMethod::Bind(b) => self.exchange_bind(ch, b),
            exchange::AMQPMethod::Unbind(u) => self.exchange_unbind(ch, u),
            _ => Err(AmqpError::command_invalid("unexpected exchange method")),
        };
        if !self.vhost.store.sync_since(mark).await && r.is_ok() {
            // Take back the reply: the change is not durable.
            self.out.truncate(reply_at);
            return Err(AmqpError::internal("the change could not be stored"));
        }
        r
    }

    /// Write on the destination, read on the source (the default exchange is refused later
    /// with its own error).
    fn authorize_binding(&self, destination: &str, source: &str, key: &str) -> AmqpResult<()> {
        if !destination.is_empty() {
            self.authorize(Access::Write, "exchange", destination)?;
        }
        if !source.is_empty() {
            self.authorize(Access::Read, "exchange", source)?;
            self.authorize_topic_read(source, key)?;
        }
        Ok(())
    }

    fn exchange_declare(&mut self, ch: &mut Channel, d: exchange::Declare) -> AmqpResult<()> {
        if !d.passive && !d.exchange.as_str().is_empty() {
            self.authorize(Access::Configure, "exchange", d.exchange.as_str())?;
            self.authorize_forwarding(
                "exchange",
                d.exchange.as_str(),
                &d.arguments,
                "alternate-exchange",
            )?;
        }
        self.vhost.exchange_declare(
            d.exchange.as_str(),
            d.kind.as_str(),
            &ExchangeOptions {
                passive: d.passive,
                durable: d.durable,
                auto_delete: d.auto_delete,
                internal: d.internal,
                arguments: d.arguments,
            },
        )?;
        if !d.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {})),
            );
        }
        Ok(())
    }

    fn exchange_delete(&mut self, ch: &mut Channel, d: exchange::Delete) -> AmqpResult<()> {
        if !d.exchange.as_str().is_empty() {
            self.authorize(Access::Configure, "exchange", d.exchange.as_str())?;
        }
        self.vhost
            .exchange_delete(d.exchange.as_str(), d.if_unused)?;
        if !d.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {})),
            );
        }
        Ok(())
    }

    fn exchange_bind(&mut self, ch: &mut Channel, b: exchange::Bind) -> AmqpResult<()> {
        self.authorize_binding(
            b.destination.as_str(),
            b.source.as_str(),
            b.routing_key.as_str(),
        )?;
        self.vhost.exchange_bind(
            b.destination.as_str(),
            b.source.as_str(),
            b.routing_key.as_str(),
            &b.arguments,
        )?;
        if !b.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::BindOk(exchange::BindOk {})),
            );
        }
        Ok(())
    }

    fn exchange_unbind(&mut self, ch: &mut Channel, u: exchange::Unbind) -> AmqpResult<()> {
        self.authorize_binding(
            u.destination.as_str(),
            u.source.as_str(),
            u.routing_key.as_str(),
        )?;
        self.vhost.exchange_unbind(
            u.destination.as_str(),
            u.source.as_str(),
            u.routing_key.as_str(),
            &u.arguments,
        )?;
        if !u.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Exchange(exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {})),
            );
        }
        Ok(())
    }
}
