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
        let Some(topics) = &self.topic_permissions else {
            return Ok(());
        };
        if x.kind != ExchangeKind::Topic {
            return Ok(());
        }
        match topics.iter().find(|t| t.exchange == x.name) {
            Some(t) if !t.allows_write(routing_key) => Err(crate::error::AmqpError::access_refused(
                format!(
                    "write access to topic '{routing_key}' in exchange '{}' in vhost '{}' refused for user '{}'",
                    x.name, self.vhost.name, self.user
                ),
            )),
            _ => Ok(()),
        }
    }
}
