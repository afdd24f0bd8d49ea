//! Exclusive queues across the cluster (#17). An exclusive queue stays out of the metadata
//! group, so an RPC client's reply queue per request costs no consensus round trip (as in
//! RabbitMQ); yet a client on any node can publish to it, reach it through its bindings, and
//! is refused it (405) as another connection is. Its node tells every other member directly
//! when it is declared, bound, unbound and gone, and they hold a handle on it as on another
//! node's replicated queue ([`Home::owner`] marks it exclusive). A declare or a bind waits
//! (up to a second) for the members that answered their last request, the others get it
//! unawaited; a removal waits for none.
//!
//! What a member missed (it was down, cut off or restarted, or a notice overtook another) is
//! mended by a digest: every two seconds each node asks every other for one of its exclusive
//! queues and their bindings, and pulls the whole set when its own handles differ. A handle
//! missing from two pulls in a row goes (a notice on the wire may be newer than a pull), and
//! so do all of a node's handles when it misses two digests in a row: its connections, and so
//! its exclusive queues, are gone or out of reach, as RabbitMQ drops a down node's.

use super::exchanges::{hex_table, table_hex};
use super::forward;
use crate::broker::Broker;
use crate::cluster::codec;
use crate::error::CoreError;
use crate::exchange::{Binding, Destination};
use crate::queue::remote::{Home, REMOTE_OWNER};
use crate::queue::{QueueRef, QueueShared};
use crate::vhost::VHost;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::task::JoinSet;

/// How long a declare or a bind waits for each member to take its notice.
const NOTICE_WAIT: Duration = Duration::from_secs(1);
/// How often a node compares its handles with each other node's exclusive queues.
const DIGEST_EVERY: Duration = Duration::from_secs(2);
/// Digests in a row a node may miss before its handles go.
const DIGEST_MISSES: u32 = 2;

/// A binding to an exclusive queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct Bound {
    exchange: String,
    key: String,
    /// The arguments as the tree writes them (hex of an AMQP field table).
    arguments: String,
}

/// An exclusive queue as other nodes learn it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct Exclusive {
    vhost: String,
    name: String,
    /// This queue among those of that name its node had (see [`instance`]).
    id: u64,
    durable: bool,
    auto_delete: bool,
    arguments: String,
    /// Sorted.
    bindings: Vec<Bound>,
}

/// What one node tells or asks another about its exclusive queues.
#[derive(Debug, Serialize, Deserialize)]
enum Notice {
    /// A new exclusive queue (without bindings yet).
    Declared(Exclusive),
    /// The queue `id` named `name` went.
    Gone {
        vhost: String,
        name: String,
        id: u64,
    },
    /// queue.bind (`add`) or queue.unbind of the queue `id`.
    Rebound {
        vhost: String,
        name: String,
        id: u64,
        binding: Bound,
        add: bool,
    },
    /// A digest of the receiver's exclusive queues, answered with [`Answer::Digest`].
    Digest,
    /// The receiver's exclusive queues, answered with [`Answer::Set`].
    Pull,
}

/// The answer to a [`Notice`].
#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    Done,
    Digest(u64),
    Set(Vec<Exclusive>),
}

/// An exclusive queue here, told apart from an earlier one of the same name.
fn instance(q: &QueueShared) -> u64 {
    let at = std::ptr::from_ref(q) as usize as u64;
    (at ^ q.exclusive_owner.unwrap_or_default().rotate_left(32)) & !REMOTE_OWNER
}

fn bound(exchange: &str, key: &str, arguments: &amq_protocol::types::FieldTable) -> Bound {
    Bound {
        exchange: exchange.to_owned(),
        key: key.to_owned(),
        arguments: table_hex(arguments),
    }
}

/// The exclusive queues of `v` that `pick` accepts (with the id it gives them), with their
/// bindings.
fn collect(v: &VHost, pick: impl Fn(&QueueShared) -> Option<u64>) -> Vec<Exclusive> {
    let mut found: HashMap<*const QueueShared, Exclusive> = HashMap::new();
    for q in v.queues() {
        if let Some(id) = pick(&q) {
            let e = Exclusive {
                vhost: v.name.clone(),
                name: q.name.clone(),
                id,
                durable: q.durable,
                auto_delete: q.auto_delete,
                arguments: table_hex(&q.arguments),
                bindings: Vec::new(),
            };
            found.insert(Arc::as_ptr(&q), e);
        }
    }
    if found.is_empty() {
        return Vec::new();
    }
    for x in v.exchanges() {
        for b in x.bindings().list() {
            if let Destination::Queue(q) = &b.destination {
                if let Some(e) = found.get_mut(&Arc::as_ptr(q)) {
                    e.bindings.push(bound(&x.name, &b.key, &b.arguments));
                }
            }
        }
    }
    let mut out: Vec<Exclusive> = found.into_values().collect();
    for e in &mut out {
        e.bindings.sort();
    }
    out
}

/// The exclusive queues of every vhost that `pick` accepts, in (vhost, name) order.
fn collect_all(b: &Broker, pick: impl Fn(&QueueShared) -> Option<u64> + Copy) -> Vec<Exclusive> {
    let mut out: Vec<Exclusive> = b.vhosts().iter().flat_map(|v| collect(v, pick)).collect();
    out.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    out
}

/// This node's own exclusive queues.
fn mine(b: &Broker) -> Vec<Exclusive> {
    collect_all(b, |q| {
        (q.exclusive_owner.is_some() && q.home.is_none()).then(|| instance(q))
    })
}

/// The handles this node holds on node `from`'s exclusive queues.
fn held(b: &Broker, from: &str) -> Vec<Exclusive> {
    collect_all(b, |q| match (q.home.as_deref(), q.exclusive_owner) {
        (Some(home), Some(owner)) if home == from => Some(owner & !REMOTE_OWNER),
        _ => None,
    })
}

fn digest(set: &[Exclusive]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    set.hash(&mut h);
    h.finish()
}

/// The handle of node `from`'s queue `name` with id `id` in `v`, when this node holds it.
fn handle(v: &VHost, from: &str, name: &str, id: u64) -> Option<QueueRef> {
    v.queue(name)
        .ok()
        .filter(|q| q.home.as_deref() == Some(from) && q.exclusive_owner == Some(REMOTE_OWNER | id))
}

/// Installs (or replaces) the handle of node `from`'s exclusive queue `e`, with its bindings;
/// nothing when a queue of this node or a replicated one has the name.
async fn install(b: &Broker, from: &str, e: &Exclusive) {
    let Some(v) = b.find_vhost(&e.vhost).await else {
        return;
    };
    if let Ok(q) = v.queue(&e.name) {
        if q.home.is_none() || q.exclusive_owner.is_none() {
            return;
        }
    }
    let Some(arguments) = hex_table(&e.arguments) else {
        return;
    };
    let home = Home {
        node: from,
        link: forward::link(&b.cluster, b.incarnation),
        owner: Some(REMOTE_OWNER | e.id),
    };
    v.install_queue(&e.name, e.durable, e.auto_delete, &arguments, Some(home));
    for binding in &e.bindings {
        bind(b, &v, from, &e.name, e.id, binding, true).await;
    }
}

/// Adds (`add`) or removes a binding to the handle of node `from`'s queue.
async fn bind(b: &Broker, v: &VHost, from: &str, name: &str, id: u64, to: &Bound, add: bool) {
    let (Some(q), Some(arguments)) = (handle(v, from, name, id), hex_table(&to.arguments)) else {
        return;
    };
    let binding = Binding {
        key: to.key.clone(),
        destination: Destination::Queue(q),
        arguments,
    };
    if add {
        // The exchange may be one declared a moment ago that this node has yet to apply.
        if b.find_exchange(v, &to.exchange).await.is_ok() {
            v.install_binding(&to.exchange, binding);
        }
    } else {
        v.drop_binding(&to.exchange, &binding);
    }
}

/// Answers node `from`'s encoded notice (the [`forward::NoticeHandler`] of this node).
pub(super) fn receive_notice(
    b: Arc<Broker>,
    from: String,
    bytes: Vec<u8>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send>> {
    Box::pin(async move {
        match codec::decode::<Notice>(&bytes) {
            Ok(notice) => receive(&b, &from, notice).await,
            Err(_) => Vec::new(),
        }
    })
}

/// Answers node `from`'s `notice`.
async fn receive(b: &Arc<Broker>, from: &str, notice: Notice) -> Vec<u8> {
    let answer = match notice {
        Notice::Declared(e) => {
            install(b, from, &e).await;
            Answer::Done
        }
        Notice::Gone { vhost, name, id } => {
            if let Some(v) = b.vhost(&vhost) {
                if handle(&v, from, &name, id).is_some() {
                    v.drop_queue(&name);
                }
            }
            Answer::Done
        }
        Notice::Rebound {
            vhost,
            name,
            id,
            binding,
            add,
        } => {
            if let Some(v) = b.vhost(&vhost) {
                bind(b, &v, from, &name, id, &binding, add).await;
            }
            Answer::Done
        }
        Notice::Digest => Answer::Digest(digest(&mine(b))),
        Notice::Pull => Answer::Set(mine(b)),
    };
    codec::encode(&answer).unwrap_or_default()
}

/// Tells every other member `notice`, waiting (up to [`NOTICE_WAIT`]) when `wait` for those
/// that answered their last request; the others get it too, unawaited (a member paused or
/// cut off would hold every declare up for the whole wait).
async fn tell(b: &Broker, notice: Notice, wait: bool) {
    let Some(node) = b.cluster.get() else {
        return;
    };
    let Ok(request) = codec::encode(&notice)
        .map_err(|e| CoreError::Internal(e.to_string()))
        .and_then(|notice| super::wire::exclusive_request(node.name(), notice))
    else {
        return;
    };
    let (mut awaited, mut unawaited) = (JoinSet::new(), JoinSet::new());
    for (m, _) in node.members() {
        if m.name == node.name() {
            continue;
        }
        let calls = match wait && node.answered_last(&m.name) {
            true => &mut awaited,
            false => &mut unawaited,
        };
        let (node, request) = (node.clone(), request.clone());
        calls.spawn(async move { node.call_app(&m.name, request, NOTICE_WAIT).await });
    }
    unawaited.detach_all();
    while awaited.join_next().await.is_some() {}
}

/// This node's exclusive queue `q` was declared: the other members get a handle on it.
pub(super) async fn declared(b: &Broker, q: &QueueShared) {
    let e = Exclusive {
        vhost: q.vhost.clone(),
        name: q.name.clone(),
        id: instance(q),
        durable: q.durable,
        auto_delete: q.auto_delete,
        arguments: table_hex(&q.arguments),
        bindings: Vec::new(),
    };
    tell(b, Notice::Declared(e), true).await;
}

/// This node's exclusive queue `q` was bound (`add`) or unbound.
pub(super) async fn rebound(
    b: &Broker,
    q: &QueueShared,
    exchange: &str,
    key: &str,
    args: &amq_protocol::types::FieldTable,
    add: bool,
) {
    let notice = Notice::Rebound {
        vhost: q.vhost.clone(),
        name: q.name.clone(),
        id: instance(q),
        binding: bound(exchange, key, args),
        add,
    };
    tell(b, notice, true).await;
}

/// This node's exclusive queue `q` went: the other members drop their handles, in the
/// background.
pub(super) fn gone(b: &Arc<Broker>, q: &QueueShared) {
    let notice = Notice::Gone {
        vhost: q.vhost.clone(),
        name: q.name.clone(),
        id: instance(q),
    };
    let b = b.clone();
    tokio::spawn(async move { tell(&b, notice, false).await });
}

/// Asks member `to` `notice`.
async fn ask(b: &Broker, to: &str, notice: Notice) -> Option<Answer> {
    let node = b.cluster.get()?;
    let notice = codec::encode(&notice).ok()?;
    let request = super::wire::exclusive_request(node.name(), notice).ok()?;
    let answer = node.call_app(to, request, NOTICE_WAIT).await.ok()?;
    codec::decode(&answer).ok()
}

/// A handle or one of its bindings, as the mending compares them.
type Item = (String, String, u64, Option<Bound>);

fn items(set: &[Exclusive]) -> BTreeSet<Item> {
    let mut out = BTreeSet::new();
    for e in set {
        out.insert((e.vhost.clone(), e.name.clone(), e.id, None));
        for binding in &e.bindings {
            out.insert((e.vhost.clone(), e.name.clone(), e.id, Some(binding.clone())));
        }
    }
    out
}

/// What the mending remembers of each other node between rounds.
#[derive(Default)]
struct Peer {
    /// Digests missed in a row.
    missed: u32,
    /// What the last pull did not have and this node held.
    suspect: BTreeSet<Item>,
}

/// Brings the handles of node `from` in line with `set`, its exclusive queues: what is
/// missing is installed; what this node holds beyond it goes when the previous pull had not
/// had it either (`suspect`, updated).
async fn mend(b: &Broker, from: &str, set: &[Exclusive], suspect: &mut BTreeSet<Item>) {
    let theirs = items(set);
    let ours = items(&held(b, from));
    for e in set {
        let ok = ours.contains(&(e.vhost.clone(), e.name.clone(), e.id, None));
        if !ok {
            install(b, from, e).await;
            continue;
        }
        if let Some(v) = b.vhost(&e.vhost) {
            for binding in &e.bindings {
                let item = (e.vhost.clone(), e.name.clone(), e.id, Some(binding.clone()));
                if !ours.contains(&item) {
                    bind(b, &v, from, &e.name, e.id, binding, true).await;
                }
            }
        }
    }
    let extra: BTreeSet<Item> = ours.difference(&theirs).cloned().collect();
    for (vhost, name, id, binding) in extra.intersection(suspect) {
        let Some(v) = b.vhost(vhost) else { continue };
        match binding {
            None => {
                if handle(&v, from, name, *id).is_some() {
                    v.drop_queue(name);
                }
            }
            Some(binding) => bind(b, &v, from, name, *id, binding, false).await,
        }
    }
    *suspect = extra;
}

/// Drops every handle this node holds on node `from`'s exclusive queues.
fn forget(b: &Broker, from: &str) {
    for e in held(b, from) {
        if let Some(v) = b.vhost(&e.vhost) {
            if handle(&v, from, &e.name, e.id).is_some() {
                v.drop_queue(&e.name);
            }
        }
    }
}

/// Keeps this node's handles on other nodes' exclusive queues in line with them (see the
/// module's note), for as long as the broker lives.
pub async fn mend_handles(broker: Weak<Broker>) {
    let mut peers: HashMap<String, Peer> = HashMap::new();
    let first = tokio::time::Instant::now() + DIGEST_EVERY;
    let mut tick = tokio::time::interval_at(first, DIGEST_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(b) = broker.upgrade() else { return };
        let Some(node) = b.cluster.get() else {
            continue;
        };
        let others: BTreeSet<String> = node
            .members()
            .into_iter()
            .map(|(m, _)| m.name)
            .filter(|n| n != node.name())
            .collect();
        let homes: BTreeSet<String> = b
            .vhosts()
            .iter()
            .flat_map(|v| v.queues())
            .filter(|q| q.exclusive_owner.is_some())
            .filter_map(|q| q.home.as_deref().map(str::to_owned))
            .collect();
        for gone in homes.difference(&others) {
            forget(&b, gone);
        }
        peers.retain(|n, _| others.contains(n));
        for other in &others {
            let peer = peers.entry(other.clone()).or_default();
            match ask(&b, other, Notice::Digest).await {
                Some(Answer::Digest(d)) => {
                    peer.missed = 0;
                    if d == digest(&held(&b, other)) {
                        peer.suspect.clear();
                    } else if let Some(Answer::Set(set)) = ask(&b, other, Notice::Pull).await {
                        mend(&b, other, &set, &mut peer.suspect).await;
                    }
                }
                _ => {
                    peer.missed += 1;
                    if peer.missed >= DIGEST_MISSES {
                        forget(&b, other);
                        peer.suspect.clear();
                    }
                }
            }
        }
    }
}
