//! The registry of open client connections, AMQP 0-9-1 and stream protocol alike: what
//! `max_connections` and the connection limits count and what the management API reports.
//! A connection is admitted when it opens (AMQP's connection.open, the stream protocol's
//! open); its [`Registration`] removes it when dropped, however the connection ends.

use crate::channels::{ChannelInfo, ChannelTotals};
use crate::stream_stats::{StreamActivity, StreamCounters};
use amq_protocol::types::FieldTable;
use dashmap::DashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::SystemTime;
use tokio::sync::Notify;

/// The protocol a client connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// AMQP 0-9-1 (port 5672).
    Amqp091,
    /// RabbitMQ's stream protocol (port 5552).
    Stream,
}

impl Protocol {
    /// The name RabbitMQ's management API gives it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Amqp091 => "AMQP 0-9-1",
            Protocol::Stream => "stream",
        }
    }
}

/// What the broker knows of one open connection.
#[derive(Debug)]
pub struct ConnectionInfo {
    /// Broker-unique id.
    pub id: u64,
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// A stream connection's publishers and consumers (empty for AMQP).
    pub stream: StreamActivity,
    /// The authenticated user.
    pub user: String,
    /// The virtual host it opened.
    pub vhost: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's address of the connection.
    pub local: SocketAddr,
    /// What TLS negotiated, when it came over TLS.
    pub tls: Option<Arc<TlsInfo>>,
    /// The `connection_name` client property, if the client set one.
    pub client_name: Option<String>,
    /// Every client property it sent in connection.start-ok.
    pub client_properties: FieldTable,
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
    /// The open channels' records.
    channel_list: Mutex<Vec<Arc<ChannelInfo>>>,
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

    /// RabbitMQ's name of one of its channels: "client ip:port -> broker ip:port (N)".
    pub fn channel_name(&self, number: u16) -> String {
        format!("{} ({number})", self.name())
    }

    /// Asks the connection to close with 320 CONNECTION_FORCED and this reason.
    pub fn force_close(&self, reason: &str) {
        if let Ok(mut r) = self.close_reason.lock() {
            *r = Some(reason.to_owned());
        }
        self.kill.notify_one();
    }

    /// The open channels' records, by number.
    pub fn channel_list(&self) -> Vec<Arc<ChannelInfo>> {
        let mut v = self
            .channel_list
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        v.sort_by_key(|c| c.number);
        v
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
    /// The protocol it speaks.
    pub protocol: Protocol,
    /// The authenticated user.
    pub user: String,
    /// The virtual host it opened.
    pub vhost: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's address of the connection.
    pub local: SocketAddr,
    /// What TLS negotiated, when it came over TLS.
    pub tls: Option<Arc<TlsInfo>>,
    /// The `connection_name` client property.
    pub client_name: Option<String>,
    /// Every client property.
    pub client_properties: FieldTable,
    /// SASL mechanism.
    pub mechanism: String,
    /// Negotiated heartbeat (s).
    pub heartbeat: u16,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Negotiated channel_max.
    pub channel_max: u16,
}

/// What a TLS connection negotiated, in RabbitMQ's terms (its `ssl_*` and `peer_cert_*`
/// connection items).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    /// "tlsv1.3" or "tlsv1.2".
    pub protocol: &'static str,
    /// The bulk cipher: "aes_256_gcm", "aes_128_gcm", "chacha20_poly1305".
    pub cipher: &'static str,
    /// "any" under TLS 1.3, else "ecdhe_rsa" or "ecdhe_ecdsa".
    pub key_exchange: &'static str,
    /// The MAC: "aead" for every suite rustls offers.
    pub hash: &'static str,
    /// The client's certificate, when it sent one.
    pub peer_cert: Option<PeerCert>,
}

/// A client certificate as RabbitMQ shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    /// Subject DN ("O=Example,CN=client").
    pub subject: String,
    /// Issuer DN.
    pub issuer: String,
    /// "2026-12-06T03:14:15Z - 2027-01-05T03:14:15Z".
    pub validity: String,
}

/// Open connections.
#[derive(Debug, Default)]
pub struct Connections {
    map: DashMap<u64, Arc<ConnectionInfo>>,
    open: AtomicUsize,
    /// Connections opened since start.
    pub opened_total: AtomicU64,
    /// Connections closed since start.
    pub closed_total: AtomicU64,
    /// Counts of closed channels and channel open/close totals.
    pub channel_totals: ChannelTotals,
    /// The stream protocol's node-wide counters.
    pub stream: StreamCounters,
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
            protocol: new.protocol,
            stream: StreamActivity::default(),
            user: new.user,
            vhost: new.vhost,
            peer: new.peer,
            local: new.local,
            tls: new.tls,
            client_name: new.client_name,
            client_properties: new.client_properties,
            opened_at: SystemTime::now(),
            mechanism: new.mechanism,
            heartbeat: new.heartbeat,
            frame_max: new.frame_max,
            channel_max: new.channel_max,
            channels: AtomicUsize::new(0),
            channel_list: Mutex::new(Vec::new()),
            close_reason: Mutex::new(None),
            kill: Notify::new(),
        });
        self.map.insert(new.id, info.clone());
        self.opened_total.fetch_add(1, Ordering::Relaxed);
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

    /// How many are open in virtual host `vhost`.
    pub fn in_vhost(&self, vhost: &str) -> usize {
        self.map.iter().filter(|e| e.value().vhost == vhost).count()
    }

    /// How many user `user` has open.
    pub fn of_user(&self, user: &str) -> usize {
        self.map.iter().filter(|e| e.value().user == user).count()
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

    /// Every open channel with its connection.
    pub fn channels(&self) -> Vec<(Arc<ConnectionInfo>, Arc<ChannelInfo>)> {
        let mut out = Vec::new();
        for c in self.list() {
            for ch in c.channel_list() {
                out.push((c.clone(), ch));
            }
        }
        out
    }

    /// Lists a newly opened channel on its connection; dropping the registration unlists it
    /// and folds its counts into the node totals.
    pub fn open_channel(
        self: &Arc<Self>,
        conn: &Arc<ConnectionInfo>,
        number: u16,
    ) -> ChannelRegistration {
        let info = Arc::new(ChannelInfo::new(number));
        if let Ok(mut l) = conn.channel_list.lock() {
            l.push(info.clone());
        }
        self.channel_totals.opened.fetch_add(1, Ordering::Relaxed);
        ChannelRegistration {
            info,
            conn: conn.clone(),
            registry: self.clone(),
        }
    }
}

/// A channel's record on its connection (derefs to the [`ChannelInfo`] its owner updates).
#[derive(Debug)]
pub struct ChannelRegistration {
    info: Arc<ChannelInfo>,
    conn: Arc<ConnectionInfo>,
    registry: Arc<Connections>,
}

impl std::ops::Deref for ChannelRegistration {
    type Target = ChannelInfo;

    fn deref(&self) -> &ChannelInfo {
        &self.info
    }
}

impl Drop for ChannelRegistration {
    fn drop(&mut self) {
        if let Ok(mut l) = self.conn.channel_list.lock() {
            l.retain(|c| !Arc::ptr_eq(c, &self.info));
        }
        self.registry.channel_totals.fold(&self.info);
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
        self.registry.closed_total.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u64) -> NewConnection {
        NewConnection {
            id,
            protocol: Protocol::Amqp091,
            user: "guest".into(),
            vhost: "/".into(),
            peer: SocketAddr::from(([127, 0, 0, 1], 1000)),
            local: SocketAddr::from(([127, 0, 0, 1], 5672)),
            tls: None,
            client_name: None,
            client_properties: FieldTable::default(),
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
