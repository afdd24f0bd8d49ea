//! The registry of open AMQP connections: what `max_connections` counts and what the management
//! API reports. A connection is admitted at connection.open; its [`Registration`] removes it
//! when dropped, however the connection ends.

use dashmap::DashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::SystemTime;
use tokio::sync::Notify;

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
    /// The broker's address of the connection.
    pub local: SocketAddr,
    /// Whether it came over TLS.
    pub tls: bool,
    /// The `connection_name` client property, if the client set one.
    pub client_name: Option<String>,
    /// When connection.open succeeded.
    pub opened_at: SystemTime,
    /// SASL mechanism it logged in with.
    pub mechanism: String,
    /// Negotiated heartbeat (s), frame_max and channel_max.
    pub heartbeat: u16,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Negotiated channel_max.
    pub channel_max: u16,
    /// Open channels (kept by the connection task).
    pub channels: AtomicUsize,
    /// Set by [`ConnectionInfo::force_close`]; the connection closes itself with 320.
    close_reason: Mutex<Option<String>>,
    /// Wakes the connection task for a forced close.
    pub kill: Notify,
}

impl ConnectionInfo {
    /// RabbitMQ's connection name: "client ip:port -> broker ip:port".
    pub fn name(&self) -> String {
        format!("{} -> {}", self.peer, self.local)
    }

    /// Asks the connection to close with 320 CONNECTION_FORCED and this reason.
    pub fn force_close(&self, reason: &str) {
        if let Ok(mut r) = self.close_reason.lock() {
            *r = Some(reason.to_owned());
        }
        self.kill.notify_one();
    }

    /// The reason given to [`ConnectionInfo::force_close`].
    pub fn close_reason(&self) -> Option<String> {
        self.close_reason.lock().ok().and_then(|r| r.clone())
    }
}

/// What a connection reports about itself when it is admitted.
#[derive(Debug)]
pub struct NewConnection {
    /// Broker-unique id.
    pub id: u64,
    /// The authenticated user.
    pub user: String,
    /// The virtual host it opened.
    pub vhost: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's address of the connection.
    pub local: SocketAddr,
    /// Whether it came over TLS.
    pub tls: bool,
    /// The `connection_name` client property.
    pub client_name: Option<String>,
    /// SASL mechanism.
    pub mechanism: String,
    /// Negotiated heartbeat (s).
    pub heartbeat: u16,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Negotiated channel_max.
    pub channel_max: u16,
}

/// Open connections.
#[derive(Debug, Default)]
pub struct Connections {
    map: DashMap<u64, Arc<ConnectionInfo>>,
    open: AtomicUsize,
}

impl Connections {
    /// Registers a connection unless `max` (0: no limit) connections are already open.
    pub fn admit(self: &Arc<Self>, new: NewConnection, max: usize) -> Option<Registration> {
        let before = self.open.fetch_add(1, Ordering::AcqRel);
        if max != 0 && before >= max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let info = Arc::new(ConnectionInfo {
            id: new.id,
            user: new.user,
            vhost: new.vhost,
            peer: new.peer,
            local: new.local,
            tls: new.tls,
            client_name: new.client_name,
            opened_at: SystemTime::now(),
            mechanism: new.mechanism,
            heartbeat: new.heartbeat,
            frame_max: new.frame_max,
            channel_max: new.channel_max,
            channels: AtomicUsize::new(0),
            close_reason: Mutex::new(None),
            kill: Notify::new(),
        });
        self.map.insert(new.id, info.clone());
        Some(Registration {
            registry: self.clone(),
            id: new.id,
            info,
        })
    }

    /// A connection by its id.
    pub fn get(&self, id: u64) -> Option<Arc<ConnectionInfo>> {
        self.map.get(&id).map(|e| e.value().clone())
    }

    /// A connection by its name ("peer -> local").
    pub fn by_name(&self, name: &str) -> Option<Arc<ConnectionInfo>> {
        self.map
            .iter()
            .find(|e| e.value().name() == name)
            .map(|e| e.value().clone())
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
    /// What the registry shows of it.
    pub info: Arc<ConnectionInfo>,
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

    fn info(id: u64) -> NewConnection {
        NewConnection {
            id,
            user: "guest".into(),
            vhost: "/".into(),
            peer: SocketAddr::from(([127, 0, 0, 1], 1000)),
            local: SocketAddr::from(([127, 0, 0, 1], 5672)),
            tls: false,
            client_name: None,
            mechanism: "PLAIN".into(),
            heartbeat: 60,
            frame_max: 131_072,
            channel_max: 2047,
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
