//! Permission checks of AMQP operations, as RabbitMQ makes them: configure to declare and delete,
//! write to publish and to be a binding's destination, read to consume, get, purge and to be a
//! binding's source; topic permissions on the routing keys of publishes to topic exchanges.
//! Refusals are 403 ACCESS_REFUSED channel errors with RabbitMQ's text.

use crate::amqp::connection::Connection;
use crate::error::AmqpResult;
use crate::exchange::{Exchange, ExchangeKind};
use crate::permissions::{self, Access};

impl Connection {
    /// Checks `access` to the resource `kind` ("queue", "exchange") named `name`. The default
    /// exchange is checked under the name `amq.default`, as RabbitMQ does.
    pub(crate) fn authorize(&self, access: Access, kind: &str, name: &str) -> AmqpResult<()> {
        let name = if kind == "exchange" && name.is_empty() {
            "amq.default"
        } else {
            name
        };
        match self.broker.permissions.get(&self.vhost.name, &self.user) {
            Some(p) if p.allows(access, name) => Ok(()),
            _ => Err(permissions::refused(
                kind,
                name,
                &self.vhost.name,
                &self.user,
            )),
        }
    }

    /// Checks the topic permissions (read when the connection opened) of a publish.
    pub(crate) fn authorize_topic(&self, x: &Exchange, routing_key: &str) -> AmqpResult<()> {
        self.check_topic(x, routing_key, false)
    }

    /// Checks the topic read permission of a binding from `source` (a topic exchange) with
    /// `routing_key`, as RabbitMQ checks queue.bind and exchange.bind.
    pub(crate) fn authorize_topic_read(&self, source: &str, routing_key: &str) -> AmqpResult<()> {
        match self.vhost.exchange(source) {
            Ok(x) => self.check_topic(&x, routing_key, true),
            Err(_) => Ok(()),
        }
    }

    fn check_topic(&self, x: &Exchange, routing_key: &str, read: bool) -> AmqpResult<()> {
        let Some(topics) = &self.topic_permissions else {
            return Ok(());
        };
        if x.kind != ExchangeKind::Topic {
            return Ok(());
        }
        let Some(t) = topics.iter().find(|t| t.exchange == x.name) else {
            return Ok(());
        };
        let (allowed, what) = if read {
            (t.allows_read(routing_key), "read")
        } else {
            (t.allows_write(routing_key), "write")
        };
        if allowed {
            return Ok(());
        }
        Err(crate::error::AmqpError::access_refused(format!(
            "{what} access to topic '{routing_key}' in exchange '{}' in vhost '{}' refused for user '{}'",
            x.name, self.vhost.name, self.user
        )))
    }

    /// A new queue with a dead-letter exchange (or a new exchange with an alternate one) needs
    /// read on itself and write on that exchange, as in RabbitMQ.
    pub(crate) fn authorize_forwarding(
        &self,
        kind: &str,
        name: &str,
        args: &amq_protocol::types::FieldTable,
        key: &str,
    ) -> AmqpResult<()> {
        if let Some(target) = args.inner().get(key).and_then(crate::queue::args::text) {
            self.authorize(Access::Read, kind, name)?;
            self.authorize(Access::Write, "exchange", &target)?;
        }
        Ok(())
    }
}
