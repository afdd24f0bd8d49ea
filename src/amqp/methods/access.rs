//! Permission checks of AMQP operations, as RabbitMQ makes them: configure to declare and delete,
//! write to publish and to be a binding's destination, read to consume, get, purge and to be a
//! binding's source; topic permissions on the routing keys of publishes to topic exchanges.
//! Refusals are 403 ACCESS_REFUSED channel errors with RabbitMQ's text.

use crate::amqp::error::AmqpResult;
use crate::amqp::session::Session;
use crate::error::Kind;
use crate::permissions::{self, Access};
use crate::vhost::publish;

impl Session {
    /// Checks `access` to the `kind` resource named `name`. The default exchange is checked
    /// under the name `amq.default`, as RabbitMQ does.
    pub(crate) fn authorize(&self, access: Access, kind: Kind, name: &str) -> AmqpResult<()> {
        if self.internal {
            return Ok(());
        }
        if access == Access::Write && kind == Kind::Exchange {
            return Ok(publish::authorize_write(
                &self.broker.permissions,
                &self.vhost.name,
                &self.user,
                name,
            )?);
        }
        let name = if kind == Kind::Exchange && name.is_empty() {
            "amq.default"
        } else {
            name
        };
        match self.broker.permissions.get(&self.vhost.name, &self.user) {
            Some(p) if p.allows(access, name) => Ok(()),
            _ => Err(permissions::refused(kind, name, &self.vhost.name, &self.user).into()),
        }
    }

    /// Checks the topic read permission of a binding from `source` (a topic exchange) with
    /// `routing_key`, as RabbitMQ checks queue.bind and exchange.bind.
    pub(crate) fn authorize_topic_read(&self, source: &str, routing_key: &str) -> AmqpResult<()> {
        match self.vhost.exchange(source) {
            Ok(x) => Ok(permissions::check_topic(
                self.topic_permissions.as_deref().map(Vec::as_slice),
                &x,
                &self.vhost.name,
                &self.user,
                routing_key,
                true,
            )?),
            Err(_) => Ok(()),
        }
    }

    /// A new queue with a dead-letter exchange (or a new exchange with an alternate one) needs
    /// read on itself and write on that exchange, as in RabbitMQ.
    pub(crate) fn authorize_forwarding(
        &self,
        kind: Kind,
        name: &str,
        args: &amq_protocol::types::FieldTable,
        key: &str,
    ) -> AmqpResult<()> {
        if let Some(target) = args.inner().get(key).and_then(crate::args::text) {
            self.authorize(Access::Read, kind, name)?;
            self.authorize(Access::Write, Kind::Exchange, &target)?;
        }
        Ok(())
    }
}
