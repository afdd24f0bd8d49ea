//! Reading the store back at boot: entities, and for each durable queue the order of its
//! messages (from the index table, never the bodies) and how far it had been delivered.

use super::schema::{
    self, flags, BINDINGS, DELAYED, DELIVERED, EXCHANGES, EXPIRES, MESSAGES, PARAMETERS,
    PERMISSIONS, QUEUES, QUEUE_INDEX, USERS, VHOSTS, VHOST_LIMITS,
};
use super::StoreError;
use amq_protocol::types::FieldTable;
use redb::{Database, ReadableDatabase, ReadableTable, WriteTransaction};
use std::collections::HashMap;

/// A permission read back: key parts (`p`, vhost, user) or (`t`, vhost, user, exchange), and
/// the patterns (configure, write, read) or (write, read).
#[derive(Debug)]
pub struct RecoveredPermission {
    /// Key parts.
    pub key: Vec<String>,
    /// Patterns.
    pub patterns: Vec<String>,
}

/// A user read back.
#[derive(Debug)]
pub struct RecoveredUser {
    /// Name.
    pub name: String,
    /// Base64 salted hash (empty: no password).
    pub hash: String,
    /// Name of the hash's algorithm (`rabbit_password_hashing_sha256`...; empty: the
    /// default).
    pub hashing: String,
    /// Tags.
    pub tags: Vec<String>,
}

/// A durable exchange read back.
#[derive(Debug)]
pub struct RecoveredExchange {
    /// Virtual host.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Type name.
    pub kind: String,
    /// auto-delete.
    pub auto_delete: bool,
    /// internal.
    pub internal: bool,
    /// Arguments.
    pub arguments: FieldTable,
}

/// A stored message as recovery sees it (its body stays on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredMessage {
    /// Sequence number in its queue.
    pub seq: u64,
    /// Body size.
    pub size: u32,
    /// Priority.
    pub priority: u8,
    /// Expiry, Unix milliseconds.
    pub expires_at: Option<u64>,
}

/// A durable queue read back.
#[derive(Debug)]
pub struct RecoveredQueue {
    /// Virtual host.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// Store id.
    pub id: u64,
    /// auto-delete.
    pub auto_delete: bool,
    /// Arguments.
    pub arguments: FieldTable,
    /// Its stored messages in sequence order.
    pub messages: Vec<RecoveredMessage>,
    /// Highest sequence delivered before the restart (0 when none).
    pub delivered: Option<u64>,
}

/// A durable binding read back.
#[derive(Debug)]
pub struct RecoveredBinding {
    /// Virtual host.
    pub vhost: String,
    /// Source exchange.
    pub source: String,
    /// Destination is a queue (else an exchange).
    pub to_queue: bool,
    /// Destination name.
    pub destination: String,
    /// Routing key.
    pub key: String,
    /// Arguments.
    pub arguments: FieldTable,
}

/// Everything durable.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The database was created just now.
    pub fresh: bool,
    /// Virtual hosts.
    pub vhosts: Vec<String>,
    /// Users: (name, base64 password hash, tags).
    pub users: Vec<RecoveredUser>,
    /// Exchanges.
    pub exchanges: Vec<RecoveredExchange>,
    /// Queues.
    pub queues: Vec<RecoveredQueue>,
    /// Bindings.
    pub bindings: Vec<RecoveredBinding>,
    /// Delayed messages: (due Unix ms, id, vhost, exchange, message).
    pub delayed: Vec<(u64, u64, String, String, crate::message::Message)>,
    /// Virtual host limits: (vhost, JSON).
    pub vhost_limits: Vec<(String, String)>,
    /// Permissions and topic permissions, as stored.
    pub permissions: Vec<RecoveredPermission>,
    /// Runtime parameters: (component, vhost, name, JSON).
    pub parameters: Vec<(String, String, String, String)>,
}

fn io<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Io(e.to_string())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Creates every table so readers never meet a missing one.
pub(super) fn create_tables(txn: &WriteTransaction) -> Result<(), StoreError> {
    txn.open_table(VHOSTS).map_err(io)?;
    txn.open_table(VHOST_LIMITS).map_err(io)?;
    txn.open_table(USERS).map_err(io)?;
    txn.open_table(PERMISSIONS).map_err(io)?;
    txn.open_table(PARAMETERS).map_err(io)?;
    txn.open_table(EXCHANGES).map_err(io)?;
    txn.open_table(QUEUES).map_err(io)?;
    txn.open_table(BINDINGS).map_err(io)?;
    txn.open_table(MESSAGES).map_err(io)?;
    txn.open_table(QUEUE_INDEX).map_err(io)?;
    txn.open_table(DELIVERED).map_err(io)?;
    txn.open_table(DELAYED).map_err(io)?;
    txn.open_table(EXPIRES).map_err(io)?;
    txn.open_table(super::schema::RAFT_LOG).map_err(io)?;
    txn.open_table(super::schema::RAFT_STATE).map_err(io)?;
    txn.open_table(super::schema::META_TREE).map_err(io)?;
    txn.open_table(super::schema::GROUP_VALUES).map_err(io)?;
    Ok(())
}

/// Reads every durable entity and queue index; drops messages whose queue is gone.
pub(super) fn recover(db: &Database, fresh: bool) -> Result<Recovered, StoreError> {
    let mut r = Recovered {
        fresh,
        ..Recovered::default()
    };
    let orphans = {
        let txn = db.begin_read().map_err(io)?;
        for e in txn
            .open_table(VHOST_LIMITS)
            .map_err(io)?
            .iter()
            .map_err(io)?
        {
            let (k, v) = e.map_err(io)?;
            r.vhost_limits.push((k.value().to_owned(), text(v.value())));
        }
        for e in txn.open_table(PARAMETERS).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            if let Some([component, vhost, name]) = schema::decode_parts(k.value()).as_deref() {
                r.parameters
                    .push((text(component), text(vhost), text(name), text(v.value())));
            }
        }
        for e in txn.open_table(VHOSTS).map_err(io)?.iter().map_err(io)? {
            let (k, _) = e.map_err(io)?;
            r.vhosts.push(k.value().to_owned());
        }
        for e in txn.open_table(USERS).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            if let Some(parts) = schema::decode_parts(v.value()) {
                let password = parts.first().map(|p| text(p)).unwrap_or_default();
                let tags = parts.get(1).map(|t| text(t)).unwrap_or_default();
                let tags = tags
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect();
                let hashing = parts.get(2).map(|h| text(h)).unwrap_or_default();
                r.users.push(RecoveredUser {
                    name: k.value().to_owned(),
                    hash: password,
                    hashing,
                    tags,
                });
            }
        }
        for e in txn
            .open_table(PERMISSIONS)
            .map_err(io)?
            .iter()
            .map_err(io)?
        {
            let (k, v) = e.map_err(io)?;
            if let (Some(key), Some(patterns)) = (
                schema::decode_parts(k.value()),
                schema::decode_parts(v.value()),
            ) {
                r.permissions.push(RecoveredPermission {
                    key: key.into_iter().map(text).collect(),
                    patterns: patterns.into_iter().map(text).collect(),
                });
            }
        }
        for e in txn.open_table(EXCHANGES).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            let (Some(key), Some(val)) = (
                schema::decode_parts(k.value()),
                schema::decode_parts(v.value()),
            ) else {
                continue;
            };
            if key.len() != 2 || val.len() != 3 {
                continue;
            }
            r.exchanges.push(RecoveredExchange {
                vhost: text(key[0]),
                name: text(key[1]),
                kind: text(val[0]),
                auto_delete: flag_set(val[1], flags::AUTO_DELETE),
                internal: flag_set(val[1], flags::INTERNAL),
                arguments: schema::decode_table(val[2]).unwrap_or_default(),
            });
        }
        let mut delivered = HashMap::new();
        for e in txn.open_table(DELIVERED).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            delivered.insert(k.value(), v.value());
        }
        let mut by_id: HashMap<u64, usize> = HashMap::new();
        for e in txn.open_table(QUEUES).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            let (Some(key), Some(val)) = (
                schema::decode_parts(k.value()),
                schema::decode_parts(v.value()),
            ) else {
                continue;
            };
            if key.len() != 2 || val.len() != 3 || val[0].len() != 8 {
                continue;
            }
            let id = u64::from_be_bytes(val[0].try_into().map_err(io)?);
            by_id.insert(id, r.queues.len());
            r.queues.push(RecoveredQueue {
                vhost: text(key[0]),
                name: text(key[1]),
                id,
                auto_delete: flag_set(val[1], flags::AUTO_DELETE),
                arguments: schema::decode_table(val[2]).unwrap_or_default(),
                messages: Vec::new(),
                delivered: delivered.get(&id).copied(),
            });
        }
        let mut expiries = HashMap::new();
        for e in txn.open_table(EXPIRES).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            expiries.insert(k.value(), v.value());
        }
        let mut orphans = Vec::new();
        for e in txn
            .open_table(QUEUE_INDEX)
            .map_err(io)?
            .iter()
            .map_err(io)?
        {
            let (k, v) = e.map_err(io)?;
            let (id, seq) = k.value();
            let (size, priority) = schema::index_parts(v.value());
            match by_id.get(&id) {
                Some(&i) => r.queues[i].messages.push(RecoveredMessage {
                    seq,
                    size,
                    priority,
                    expires_at: expiries.get(&(id, seq)).copied(),
                }),
                None => {
                    if orphans.last() != Some(&id) {
                        orphans.push(id);
                    }
                }
            }
        }
        for e in txn.open_table(BINDINGS).map_err(io)?.iter().map_err(io)? {
            let (k, _) = e.map_err(io)?;
            let Some(p) = schema::decode_parts(k.value()) else {
                continue;
            };
            if p.len() != 6 {
                continue;
            }
            r.bindings.push(RecoveredBinding {
                vhost: text(p[0]),
                source: text(p[1]),
                to_queue: p[2] == b"q",
                destination: text(p[3]),
                key: text(p[4]),
                arguments: schema::decode_table(p[5]).unwrap_or_default(),
            });
        }
        for e in txn.open_table(DELAYED).map_err(io)?.iter().map_err(io)? {
            let (k, v) = e.map_err(io)?;
            let (due, id) = k.value();
            let Some(p) = schema::decode_parts(v.value()) else {
                continue;
            };
            let [vhost, exchange, stored] = p.as_slice() else {
                continue;
            };
            let Some(msg) = schema::decode_message(stored).and_then(|(x, rk, pl, data)| {
                crate::message::Message::from_stored(x, rk, pl, data)
            }) else {
                continue;
            };
            r.delayed.push((due, id, text(vhost), text(exchange), msg));
        }
        orphans
    };
    if !orphans.is_empty() {
        let txn = db.begin_write().map_err(io)?;
        {
            let mut messages = txn.open_table(MESSAGES).map_err(io)?;
            let mut index = txn.open_table(QUEUE_INDEX).map_err(io)?;
            for id in &orphans {
                messages
                    .retain_in((*id, 0)..=(*id, u64::MAX), |_, _| false)
                    .map_err(io)?;
                index
                    .retain_in((*id, 0)..=(*id, u64::MAX), |_, _| false)
                    .map_err(io)?;
            }
        }
        txn.commit().map_err(io)?;
    }
    Ok(r)
}

/// Whether a stored flags part has `bit` set (an empty part: durable only).
fn flag_set(part: &[u8], bit: u8) -> bool {
    part.first().copied().unwrap_or(flags::DURABLE) & bit != 0
}
