//! The registry of open AMQP connections: what `max_connections` counts and what the management
//! API reports. A connection is admitted at connection.open; its [`Registration`] removes it
//! when dropped, however the connection ends.

use dashmap::DashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// What the broker knows of one open connection.
#[derive(Debug)]
pub struct ConnectionInfo {
    /// Broker-unique id.
    pub id: u64,
    /// The authenticated user.
    pub user: String,
    /// The virtual host it opened.
    pub vhost: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// Whether it came over TLS.
    pub tls: bool,
    /// The `connection_name` client property, if the client set one.
    pub client_name: Option<String>,
    /// When connection.open succeeded.
    pub opened_at: SystemTime,
}

/// Open connections.
#[derive(Debug, Default)]
pub struct Connections {
    map: DashMap<u64, Arc<ConnectionInfo>>,
    open: AtomicUsize,
}

impl Connections {
    /// Registers a connection unless `max` (0: no limit) connections are already open.
    pub fn admit(self: &Arc<Self>, info: ConnectionInfo, max: usize) -> Option<Registration> {
        let before = self.open.fetch_add(1, Ordering::AcqRel);
        if max != 0 && before >= max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let id = info.id;
        self.map.insert(id, Arc::new(info));
        Some(Registration {
            registry: self.clone(),
            id,
        })
    }

    /// How many are open.
    pub fn len(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every open connection.
    pub fn list(&self) -> Vec<Arc<ConnectionInfo>> {
        self.map.iter().map(|e| e.value().clone()).collect()
    }
}

/// A connection's place in the registry; dropping it unregisters the connection.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Connections>,
    /// The connection's id.
    pub id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.map.remove(&self.id);
        self.registry.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u64) -> ConnectionInfo {
        ConnectionInfo {
            id,
            user: "guest".into(),
            vhost: "/".into(),
            peer: SocketAddr::from(([127, 0, 0, 1], 1000)),
            tls: false,
            client_name: None,
            opened_at: SystemTime::now(),
        }
    }

    #[test]
    fn the_limit_counts_open_registrations() {
        let c = Arc::new(Connections::default());
        let a = c.admit(info(1), 2).expect("first");
        let _b = c.admit(info(2), 2).expect("second");
        assert!(c.admit(info(3), 2).is_none());
        assert_eq!(c.len(), 2);
        drop(a);
        assert_eq!(c.list().len(), 1);
        assert!(c.admit(info(4), 2).is_some());
        assert!(c.admit(info(5), 0).is_some(), "0 is no limit");
    }
}
