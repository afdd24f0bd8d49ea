//! Delayed delivery for `x-delayed-message` exchanges: a message published with an `x-delay`
//! header (milliseconds) is held, in the store when its exchange is durable, and routed
//! through its exchange once the delay is over. One task keeps the timers in a heap ordered by
//! due time; pending delays survive a restart. What "route it now" means is the broker's
//! business ([`Release`]), so the scheduler sits below the vhosts that schedule into it.
//!
//! On a cluster, a durable delayed exchange's messages are held by a replicated group
//! instead ([`Replica`], `replication::delayed`): a publish is confirmed once the group has
//! it, and the timers run on the node leading the group, which feeds them here
//! ([`Delayer::feed`]) and releases each only while it still leads in the term it was fed
//! in ([`Held::Group`]).

use crate::clock::unix_ms;
use crate::confirm::ConfirmToken;
use crate::message::Message;
use crate::store::Store;
use dashmap::DashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// A message waiting for its delay.
#[derive(Debug)]
pub struct Delayed {
    /// Due time, Unix milliseconds.
    pub due: u64,
    /// Unique id (ties between equal due times).
    pub id: u64,
    /// Virtual host of the exchange.
    pub vhost: String,
    /// The delayed-message exchange.
    pub exchange: String,
    /// The message.
    pub msg: Arc<Message>,
    /// Where it is held (to delete it from there once routed).
    pub held: Held,
}

/// Where a delayed message is held until it is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// In memory only (a transient exchange).
    Memory,
    /// In this node's store.
    Store,
    /// In a replicated group, under `key`, fed by the node leading it in `term`.
    Group {
        /// The group.
        group: u64,
        /// The message's key in the group.
        key: u64,
        /// The term the feeding node led the group in.
        term: u64,
    },
}

/// Holds the messages of the delayed exchanges that are replicated (implemented by the
/// cluster's replication).
pub trait Replica: Send + Sync + 'static {
    /// Adds `msg`, due at `due` (Unix milliseconds), to `group` (its members named by
    /// `members`); `token` completes once the group has it (or fails).
    fn hold(
        &self,
        group: u64,
        members: &[String],
        due: u64,
        msg: Arc<Message>,
        token: Option<ConfirmToken>,
    );
    /// Whether this node still leads `group` in `term` (else another node releases).
    fn leads(&self, group: u64, term: u64) -> bool;
    /// Removes `keys` from `group`: their messages were routed.
    fn released(&self, group: u64, keys: Vec<u64>);
}

/// Routes a message whose delay is over (implemented by the broker: through its vhost's
/// exchange, dropped when either is gone).
pub trait Release: Send + Sync + 'static {
    /// Routes `d.msg` through `d.exchange` of `d.vhost` now.
    fn release(&self, d: Delayed) -> impl Future<Output = ()> + Send;
}

/// A replicated exchange's group and its members' names.
type Replicated = (u64, Arc<[String]>);

/// Handle on the delay scheduler.
pub struct Delayer {
    tx: mpsc::UnboundedSender<Delayed>,
    next_id: AtomicU64,
    store: Store,
    /// The group holding each replicated exchange's messages and its members' names, by
    /// (vhost, exchange).
    groups: DashMap<(String, String), Replicated>,
    replica: Arc<OnceLock<Arc<dyn Replica>>>,
}

impl std::fmt::Debug for Delayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delayer")
            .field("replicated", &self.groups.len())
            .finish_non_exhaustive()
    }
}

/// The `x-delay` header of a message, when positive.
pub fn delay_of(msg: &Message) -> Option<u64> {
    if !msg.has_headers() {
        return None;
    }
    let h = msg.headers();
    let v = h.inner().get("x-delay")?;
    use amq_protocol::types::AMQPValue as V;
    let n: i128 = match v {
        V::ShortShortInt(n) => (*n).into(),
        V::ShortShortUInt(n) => (*n).into(),
        V::ShortInt(n) => (*n).into(),
        V::ShortUInt(n) => (*n).into(),
        V::LongInt(n) => (*n).into(),
        V::LongUInt(n) => (*n).into(),
        V::LongLongInt(n) => (*n).into(),
        V::LongString(s) => String::from_utf8_lossy(s.as_bytes()).trim().parse().ok()?,
        V::ShortString(s) => s.as_str().trim().parse().ok()?,
        _ => return None,
    };
    (n > 0).then(|| n.min(i128::from(u64::MAX)) as u64)
}

impl Delayer {
    /// Starts the scheduler with the delayed messages read back from the store.
    pub fn start<R: Release>(target: Weak<R>, store: Store, recovered: Vec<Delayed>) -> Delayer {
        let next_id = recovered.iter().map(|d| d.id + 1).max().unwrap_or(1);
        let (tx, rx) = mpsc::unbounded_channel();
        let replica = Arc::new(OnceLock::new());
        tokio::spawn(run(target, store.clone(), replica.clone(), rx, recovered));
        Delayer {
            tx,
            next_id: AtomicU64::new(next_id),
            store,
            groups: DashMap::new(),
            replica,
        }
    }

    /// Makes `replica` hold the messages of the exchanges given a group (set once).
    pub fn set_replica(&self, replica: Arc<dyn Replica>) {
        let _ = self.replica.set(replica);
    }

    /// Has `group` (whose members are named by `members`) hold the messages of `exchange`
    /// in `vhost` from now on.
    pub fn replicate(&self, vhost: &str, exchange: &str, group: u64, members: &[String]) {
        self.groups.insert(
            (vhost.to_owned(), exchange.to_owned()),
            (group, members.into()),
        );
    }

    /// The exchange whose messages `group` holds: its vhost and name.
    pub fn exchange_of(&self, group: u64) -> Option<(String, String)> {
        self.groups
            .iter()
            .find(|e| e.value().0 == group)
            .map(|e| e.key().clone())
    }

    /// The groups holding the messages of replicated exchanges.
    pub fn groups(&self) -> Vec<u64> {
        self.groups.iter().map(|e| e.value().0).collect()
    }

    /// Forgets the group of `exchange` in `vhost` (deleted).
    pub fn forget(&self, vhost: &str, exchange: &str) {
        self.groups.remove(&(vhost.to_owned(), exchange.to_owned()));
    }

    /// Schedules a message that a group holds (this node leads it): routed when due, if this
    /// node still leads the group in the term of `held` then.
    pub fn feed(&self, vhost: &str, exchange: &str, due: u64, msg: Arc<Message>, held: Held) {
        let _ = self.tx.send(Delayed {
            due,
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            vhost: vhost.to_owned(),
            exchange: exchange.to_owned(),
            msg,
            held,
        });
    }

    /// Holds a message for `delay_ms`; if `durable`, it is stored first and the token completes
    /// after the commit.
    pub fn schedule(
        &self,
        vhost: &str,
        exchange: &str,
        msg: Arc<Message>,
        delay_ms: u64,
        durable: bool,
        token: Option<ConfirmToken>,
    ) {
        let due = unix_ms().saturating_add(delay_ms);
        if !self.groups.is_empty() {
            let group = self
                .groups
                .get(&(vhost.to_owned(), exchange.to_owned()))
                .map(|g| g.clone());
            if let (Some((group, members)), Some(replica)) = (group, self.replica.get()) {
                // The group's leader schedules it once the group has it.
                replica.hold(group, &members, due, msg, token);
                return;
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if durable {
            self.store
                .put_delayed((due, id), vhost, exchange, &msg, token);
        } else if let Some(t) = token {
            t.complete(true);
        }
        let _ = self.tx.send(Delayed {
            due,
            id,
            vhost: vhost.to_owned(),
            exchange: exchange.to_owned(),
            msg,
            held: if durable { Held::Store } else { Held::Memory },
        });
    }
}

async fn run<R: Release>(
    target: Weak<R>,
    store: Store,
    replica: Arc<OnceLock<Arc<dyn Replica>>>,
    mut rx: mpsc::UnboundedReceiver<Delayed>,
    recovered: Vec<Delayed>,
) {
    let mut heap = BinaryHeap::new();
    let mut pending = HashMap::new();
    for d in recovered {
        heap.push(Reverse((d.due, d.id)));
        pending.insert(d.id, d);
    }
    loop {
        let wait = heap
            .peek()
            .map(|Reverse((due, _))| Duration::from_millis(due.saturating_sub(unix_ms())));
        tokio::select! {
            got = rx.recv() => match got {
                Some(d) => {
                    heap.push(Reverse((d.due, d.id)));
                    pending.insert(d.id, d);
                }
                None => return,
            },
            _ = async {
                match wait {
                    Some(w) => tokio::time::sleep(w).await,
                    None => std::future::pending().await,
                }
            } => {
                let now = unix_ms();
                // The keys routed now, by group: removed in one write per group.
                let mut routed: HashMap<u64, Vec<u64>> = HashMap::new();
                while let Some(Reverse((due, id))) = heap.peek().copied() {
                    if due > now {
                        break;
                    }
                    heap.pop();
                    let Some(d) = pending.remove(&id) else {
                        continue;
                    };
                    let held = d.held;
                    match held {
                        Held::Memory => {}
                        Held::Store => store.delete_delayed((d.due, d.id)),
                        Held::Group { group, term, .. } => {
                            // Another node leads the group now: it releases the message.
                            if !replica.get().is_some_and(|r| r.leads(group, term)) {
                                continue;
                            }
                        }
                    }
                    let Some(t) = target.upgrade() else { return };
                    t.release(d).await;
                    if let Held::Group { group, key, .. } = held {
                        routed.entry(group).or_default().push(key);
                    }
                }
                if let Some(r) = replica.get() {
                    for (group, keys) in routed {
                        r.released(group, keys);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::BasicProperties;
    use amq_protocol::types::{AMQPValue, FieldTable};

    fn with_delay(v: Option<AMQPValue>) -> Message {
        let mut props = BasicProperties::default();
        if let Some(v) = v {
            let mut h = FieldTable::default();
            h.insert("x-delay".into(), v);
            props = props.with_headers(h);
        }
        let raw = cookie_factory::gen_simple(
            amq_protocol::protocol::basic::gen_properties(&props),
            Vec::new(),
        )
        .expect("gen");
        Message::new(
            "dx".into(),
            "k".into(),
            bytes::Bytes::from(raw.clone()),
            raw.len(),
            &props,
        )
    }

    #[test]
    fn x_delay_values() {
        assert_eq!(
            delay_of(&with_delay(Some(AMQPValue::LongInt(1500)))),
            Some(1500)
        );
        assert_eq!(
            delay_of(&with_delay(Some(AMQPValue::LongString("250".into())))),
            Some(250)
        );
        assert_eq!(delay_of(&with_delay(Some(AMQPValue::LongInt(-5)))), None);
        assert_eq!(delay_of(&with_delay(None)), None);
    }
}
