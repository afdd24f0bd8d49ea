//! How the node's own connections reach it (a URI without a host, a federation link's
//! downstream side): its AMQP listener over loopback, as the internal user with the per-boot
//! secret, which has every permission (RabbitMQ's direct connection).

use super::AmqpUri;
use crate::broker::{Broker, INTERNAL_USER};

/// This node as its own connections reach it.
#[derive(Debug, Clone)]
pub struct LocalNode {
    /// Its AMQP listener, as this machine reaches it.
    pub addr: std::net::SocketAddr,
    /// The user its own connections log in as.
    pub user: String,
    /// The password.
    pub secret: String,
}

impl LocalNode {
    /// The node's AMQP listener (a wildcard address as loopback), once bound.
    pub fn of(broker: &Broker) -> Option<LocalNode> {
        let (_, addr) = broker.listeners().iter().find(|(p, _)| *p == "amqp")?;
        let mut addr = *addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        Some(LocalNode {
            addr,
            user: INTERNAL_USER.to_owned(),
            secret: broker.internal_secret.clone(),
        })
    }

    /// A URI naming this node (its vhost and options), made connectable.
    pub fn reach(&self, uri: &AmqpUri) -> AmqpUri {
        uri.at(self.addr, &self.user, &self.secret)
    }

    /// Vhost `vhost` of this node.
    pub fn vhost(&self, vhost: &str) -> AmqpUri {
        self.reach(&AmqpUri::local(vhost))
    }
}
