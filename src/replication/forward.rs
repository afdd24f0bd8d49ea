//! Queue operations between nodes: what a node sends a queue's home node on behalf of its
//! clients (publishes, gets, settlements, consumers, deletes), and what the home node sends
//! back to the nodes its remote consumers are on (deliveries, cancellations). The requests
//! travel as the cluster's opaque `App` requests (`MetaNode::call_app`), in the cluster's
//! encoding.
//!
//! A consumer on another node is registered at home as an ordinary consumer whose connection
//! is a forwarding task (`outbound`): it batches what the queue delivers, sends it to the consumer's node,
//! and gives the queue its delivery window back once the batch is there. If that node stops
//! answering, the batch is requeued and the consumer cancelled.

use super::wire::{origin_alive, send, App, Origin, PING_TIMEOUT};
use crate::broker::Broker;
use crate::cluster::codec;
use crate::cluster::node::AppHandler;
use crate::cluster::{Current, MetaNode};
use crate::confirm::ConfirmToken;
use crate::error::{code, CoreError, CoreResult, Kind};
use crate::queue::consumer::{ChannelLimiter, ConsumerSpec, REMOTE_CONNECTION};
use crate::queue::remote::{
    LinkFuture, RemoteConsumer, RemoteGot, RemoteInfo, RemoteLink, RemoteOp, RemoteReply,
    WireMessage,
};
use crate::queue::{QueueRef, QueueShared};
use crate::vhost::VHost;
use dashmap::DashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a node's view may take to arrive (a member that does not answer is left out).
const VIEW_TIMEOUT: Duration = Duration::from_secs(1);
use super::outbound::{Outbound, Outstanding, WATCH_EVERY, WATCH_MISSES};
use super::turns::Turns;

/// What answers another node's notice about its exclusive queues: given this node's broker,
/// the sender's name and the notice's bytes, the answer's bytes.
pub type NoticeHandler =
    fn(Arc<Broker>, String, Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

fn failed(e: &CoreError) -> RemoteReply {
    let text = match e {
        CoreError::Remote { text, .. } => text.clone(),
        other => other.to_string(),
    };
    RemoteReply::Failed(e.reply_code(), text)
}

/// Carries a remote queue's operations to its home node, through the node's membership of
/// the moment (a reset replaces it).
struct Link {
    cluster: Arc<Current>,
    incarnation: u64,
}

/// The link remote queues on this node (in its run `incarnation`) use.
pub(super) fn link(cluster: &Arc<Current>, incarnation: u64) -> Arc<dyn RemoteLink> {
    Arc::new(Link {
        cluster: cluster.clone(),
        incarnation,
    })
}

impl RemoteLink for Link {
    fn call(&self, q: &QueueShared, op: RemoteOp) -> LinkFuture {
        let node = self.cluster.get();
        let incarnation = self.incarnation;
        let home = q.home.as_deref().unwrap_or_default().to_owned();
        let (vhost, queue) = (q.vhost.clone(), q.name.clone());
        let resend = q.args.quorum && matches!(op, RemoteOp::Publish(..));
        // A replaced proxy still sending what was published through it: its queue's leader
        // moved, so the record is asked first (its old node may be cut off, each call
        // waiting for its timeout).
        let replaced = resend && q.is_deleted();
        Box::pin(async move {
            let down = CoreError::HomeDown {
                node: home.clone(),
                queue: queue.clone(),
                vhost: vhost.clone(),
            };
            let node = node.ok_or_else(|| down.clone())?;
            let app = App::Queue {
                vhost,
                queue,
                origin: Origin {
                    node: node.name().to_owned(),
                    incarnation,
                },
                op,
            };
            let path = || match &app {
                App::Queue { vhost, queue, .. } => super::queue_record::queue_path(vhost, queue),
                _ => Vec::new(),
            };
            let mut home = home;
            if replaced {
                if let Some(leader) = next_leader(&node, &path(), &home, Duration::ZERO).await {
                    home = leader;
                }
            }
            let sent = send(&node, &home, &app).await;
            if resend && !published_all(&sent) {
                // Unreachable: wait for the group to elect; refused: resend only if another
                // member already leads (a refusal may be the queue's own, as reject-publish).
                let wait = if sent.is_err() {
                    LEADER_MOVE_WAIT
                } else {
                    Duration::ZERO
                };
                // The path is built only here (or for a replaced proxy): a publish that went
                // through allocates nothing for it.
                if let Some(leader) = next_leader(&node, &path(), &home, wait).await {
                    tracing::debug!(queue = ?path().last(), from = %home, to = %leader, unreachable = sent.is_err(), "a forwarded batch goes to the queue's new leader");
                    // A quorum queue's leader moved: its publishes go to the new one (a
                    // message the old one had committed may then be there twice, as
                    // at-least-once allows; RabbitMQ's quorum queue client re-sends too).
                    return send(&node, &leader, &app).await.map_err(|_| down);
                }
            }
            sent.map_err(|_| down)
        })
    }

    fn alive(&self, q: &QueueShared) -> Pin<Box<dyn Future<Output = bool> + Send>> {
        let node = self.cluster.get();
        let home = q.home.as_deref().unwrap_or_default().to_owned();
        Box::pin(async move {
            match node {
                Some(node) => answers(&node, &home).await,
                None => false,
            }
        })
    }
}

/// How long a publish to a quorum queue whose leader's node failed waits for another member
/// to lead it (the failover bound, with room).
const LEADER_MOVE_WAIT: Duration = Duration::from_secs(5);

/// Whether a forwarded publish was stored, every message of it.
fn published_all(sent: &Result<RemoteReply, CoreError>) -> bool {
    match sent {
        Ok(RemoteReply::Published(v)) => v.iter().all(|ok| *ok),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// The node a quorum queue's record at `path` names once it no longer names `old` (its new
/// leader), waiting up to `wait`; None when it does not move (or is gone).
async fn next_leader(
    node: &MetaNode,
    path: &[String],
    old: &str,
    wait: Duration,
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let now = node.read(|t| {
            t.get(path)
                .and_then(|v| super::queue_record::decode_queue(v))
                .map(|d| d.node)
        })?;
        if now != old {
            return Some(now);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The bodies of the first and last message of a forwarded batch (for the debug log).
fn span_of(items: &[(WireMessage, bool)]) -> (String, String) {
    let body = |w: Option<&(WireMessage, bool)>| {
        w.and_then(|(w, _)| w.data.get(w.props_len as usize..))
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(40)]).into_owned())
            .unwrap_or_default()
    };
    (body(items.first()), body(items.last()))
}

/// Whether the member named `name` answers a ping.
async fn answers(node: &MetaNode, name: &str) -> bool {
    let member = node.members().into_iter().find(|(m, _)| m.name == name);
    match member {
        Some((m, _)) => node.ping(&m, PING_TIMEOUT).await,
        None => false,
    }
}

/// What answers other nodes' queue requests here.
struct Forwarder {
    broker: Weak<Broker>,
    /// This node's run.
    incarnation: u64,
    /// Consumers of other nodes on queues here: (their node, their id) -> (queue, id here).
    consumers: DashMap<(Origin, u64), (QueueRef, u64)>,
    /// What each other node holds unsettled, by (node, vhost, queue), and the queue task
    /// that handed it out: requeued if the node goes.
    outstanding: DashMap<(Origin, String, String), (Weak<QueueShared>, Outstanding)>,
    /// The keys of `outstanding` whose basic.get results a watch task looks after (a
    /// consumer's forwarding task watches its own node; a node that only got messages has
    /// this one).
    watched: DashMap<(Origin, String, String), ()>,
    /// The order forwarded batches of publishes are taken in.
    turns: Turns,
}

impl Forwarder {
    /// What `origin` holds unsettled of `q`: started afresh when `q` is another task than the
    /// one that handed out what was held (the queue was replaced, as a quorum queue's task
    /// is when it is rebuilt from its group).
    fn outstanding(&self, origin: &Origin, q: &QueueRef) -> Outstanding {
        let key = (origin.clone(), q.vhost.clone(), q.name.clone());
        let mut entry = self.outstanding.entry(key).or_default();
        if !std::ptr::eq(entry.0.as_ptr(), Arc::as_ptr(q)) {
            *entry = (Arc::downgrade(q), Outstanding::default());
        }
        entry.1.clone()
    }

    /// `origin` settled these deliveries of `q`: those this task of `q` handed it out and it
    /// still held, and whether that was all of them (a settlement of a delivery the task
    /// took back, or that another task made, is not carried out).
    fn settled(&self, origin: &Origin, q: &QueueRef, seqs: Vec<u64>) -> (Vec<u64>, bool) {
        let key = (origin.clone(), q.vhost.clone(), q.name.clone());
        let held = match self.outstanding.get(&key) {
            Some(e) if std::ptr::eq(e.0.as_ptr(), Arc::as_ptr(q)) => e.1.clone(),
            _ => return (Vec::new(), seqs.is_empty()),
        };
        let Ok(mut set) = held.lock() else {
            return (Vec::new(), false);
        };
        let total = seqs.len();
        let mine: Vec<u64> = seqs.into_iter().filter(|s| set.remove(s)).collect();
        let all = mine.len() == total;
        (mine, all)
    }
}

/// The handler of other nodes' queue requests for `b`, their exclusive-queue notices
/// answered by `notices`.
pub fn handler(b: &Arc<Broker>, notices: NoticeHandler) -> AppHandler {
    let f = Arc::new(Forwarder {
        broker: Arc::downgrade(b),
        incarnation: b.incarnation,
        consumers: DashMap::new(),
        outstanding: DashMap::new(),
        watched: DashMap::new(),
        turns: Turns::default(),
    });
    Arc::new(move |bytes| {
        let f = f.clone();
        Box::pin(async move {
            let reply = match codec::decode::<App>(&bytes) {
                Ok(App::View(kind)) => return f.view(kind).await,
                Ok(App::Cli { method, path, body }) => {
                    return super::cli::answer(f.broker.upgrade(), method, path, body).await
                }
                Ok(App::Exclusive { from, notice }) => {
                    return match f.broker.upgrade() {
                        Some(b) => notices(b, from, notice).await,
                        None => Vec::new(),
                    }
                }
                Ok(app) => f.serve(app).await,
                Err(e) => RemoteReply::Failed(code::INTERNAL_ERROR, format!("bad request: {e}")),
            };
            codec::encode(&reply).unwrap_or_default()
        })
    })
}

/// The answer to a forwarded ack or drop: refused when some of it was for deliveries the
/// queue's task no longer held for that node (requeued, or made by a task since replaced).
fn settled_all(all: bool) -> RemoteReply {
    match all {
        true => RemoteReply::Done,
        false => RemoteReply::Failed(
            code::PRECONDITION_FAILED,
            "PRECONDITION_FAILED - deliveries no longer held".into(),
        ),
    }
}

/// How a forwarded publish's confirm is to be answered.
enum Wait {
    Now(bool),
    Stored(tokio::sync::oneshot::Receiver<bool>),
}

impl Forwarder {
    async fn view(&self, kind: String) -> Vec<u8> {
        let hook = self.broker.upgrade().and_then(|b| b.views.get().cloned());
        match hook {
            Some(hook) => hook(kind).await,
            None => Vec::new(),
        }
    }

    async fn serve(self: &Arc<Self>, app: App) -> RemoteReply {
        let Some(b) = self.broker.upgrade() else {
            return RemoteReply::Failed(code::INTERNAL_ERROR, "node stopping".into());
        };
        let find = |vhost: &str, queue: &str| {
            b.vhost(vhost)
                .and_then(|v| v.queue(queue).ok().map(|q| (v, q)))
                .ok_or_else(|| CoreError::not_found(Kind::Queue, queue, vhost))
        };
        match app {
            App::Deliveries { incarnation, .. }
            | App::Cancelled { incarnation, .. }
            | App::TimedOut { incarnation, .. }
            | App::Alive(incarnation)
                if incarnation != self.incarnation =>
            {
                // For consumers of an earlier run of this node: they are gone.
                RemoteReply::Failed(code::NOT_FOUND, "consumer of an earlier run".into())
            }
            App::Deliveries {
                vhost,
                queue,
                consumer,
                items,
                ..
            } => match find(&vhost, &queue) {
                Ok((_, q)) => {
                    q.remote_deliveries(consumer, items);
                    RemoteReply::Done
                }
                Err(e) => failed(&e),
            },
            App::Cancelled {
                vhost,
                queue,
                consumer,
                ..
            } => {
                if let Ok((_, q)) = find(&vhost, &queue) {
                    q.remote_cancelled(consumer);
                }
                RemoteReply::Done
            }
            App::TimedOut {
                vhost,
                queue,
                consumer,
                timeout,
                ..
            } => {
                if let Ok((_, q)) = find(&vhost, &queue) {
                    q.remote_timed_out(consumer, timeout);
                }
                RemoteReply::Done
            }
            App::Applied(index) => match b.cluster.get() {
                Some(node) if node.wait_applied(index, super::settle::SETTLE_WAIT).await => {
                    RemoteReply::Done
                }
                _ => RemoteReply::Failed(code::INTERNAL_ERROR, "not applied in time".into()),
            },
            App::View(_) | App::Alive(_) | App::Exclusive { .. } | App::Cli { .. } => {
                RemoteReply::Done
            }
            App::CloseConnection { name, reason } => match b.connections.by_name(&name) {
                Some(c) => {
                    c.force_close(&reason);
                    RemoteReply::Done
                }
                None => RemoteReply::Failed(code::NOT_FOUND, format!("no connection '{name}'")),
            },
            App::Queue {
                vhost,
                queue,
                origin,
                op,
            } => {
                let mut found = find(&vhost, &queue);
                // A queue another node's declare placed here may not be applied here yet.
                if found.is_err() && b.catch_up().await {
                    found = find(&vhost, &queue);
                }
                match found {
                    Ok((v, q)) if q.home.is_none() => self
                        .queue_op(&b, &v, q, origin, op)
                        .await
                        .unwrap_or_else(|e| failed(&e)),
                    _ => failed(&CoreError::not_found(Kind::Queue, &queue, &vhost)),
                }
            }
        }
    }

    async fn queue_op(
        self: &Arc<Self>,
        b: &Arc<Broker>,
        v: &VHost,
        q: QueueRef,
        origin: Origin,
        op: RemoteOp,
    ) -> CoreResult<RemoteReply> {
        Ok(match op {
            RemoteOp::Publish(items, sent, follows) => {
                let count = items.len() as u64;
                let bodies = tracing::enabled!(tracing::Level::DEBUG).then(|| span_of(&items));
                if let (Some(s), true) = (sent, follows) {
                    let taken = || q.taken_from(s.enqueuer);
                    if !self.turns.wait(&q.vhost, &q.name, s, taken).await {
                        tracing::debug!(queue = %q.name, enqueuer = s.enqueuer, seq = s.seq, count, ?bodies, "a forwarded batch's turn did not come");
                        return Ok(RemoteReply::Published(vec![false; items.len()]));
                    }
                }
                if let Some(s) = sent {
                    tracing::debug!(queue = %q.name, from = %origin.node, enqueuer = s.enqueuer, seq = s.seq, count, follows, ?bodies, "a forwarded batch is relayed");
                }
                let mut waits = Vec::with_capacity(items.len());
                for (i, (wire, confirm)) in items.into_iter().enumerate() {
                    // Numbered one after another from the batch's first.
                    let sent = sent.map(|s| crate::queue::Sent {
                        seq: s.seq + i as u64,
                        ..s
                    });
                    let Some(msg) = wire.message() else {
                        waits.push(Wait::Now(false));
                        continue;
                    };
                    let (token, wait) = match confirm {
                        true => {
                            let (t, rx) = ConfirmToken::waiter();
                            (Some(t), Wait::Stored(rx))
                        }
                        false => (None, Wait::Now(true)),
                    };
                    let queued = q.relay_from(Arc::new(msg), token, sent).await;
                    waits.push(if queued { wait } else { Wait::Now(false) });
                }
                if let Some(s) = sent {
                    self.turns.taken(&q.vhost, &q.name, s, count);
                }
                let mut stored = Vec::with_capacity(waits.len());
                for w in waits {
                    stored.push(match w {
                        Wait::Now(ok) => ok,
                        Wait::Stored(rx) => rx.await.unwrap_or(false),
                    });
                }
                RemoteReply::Published(stored)
            }
            RemoteOp::Stats => {
                let (ready, consumers) = q.stats().await?;
                RemoteReply::Stats(ready, consumers)
            }
            RemoteOp::Info => RemoteReply::Info(RemoteInfo::of(&q.info().await?)),
            RemoteOp::Get { no_ack } => {
                let got = q.get(no_ack).await?;
                if let (Some(g), false) = (&got, no_ack) {
                    self.hold_got(b, &origin, &q, g.seq);
                }
                RemoteReply::Got(got.map(|g| RemoteGot {
                    instance: q.instance,
                    seq: g.seq,
                    msg: WireMessage::of(&g.msg),
                    redelivered: g.redelivered,
                    remaining: g.remaining,
                }))
            }
            RemoteOp::Ack(seqs) => {
                let (mine, all) = self.settled(&origin, &q, seqs);
                if !mine.is_empty() {
                    q.ack(mine).await;
                }
                settled_all(all)
            }
            RemoteOp::Requeue(seqs) => {
                let (mine, _) = self.settled(&origin, &q, seqs);
                if !mine.is_empty() {
                    q.requeue(mine).await;
                }
                RemoteReply::Done
            }
            RemoteOp::Discard(seqs) => {
                let (mine, all) = self.settled(&origin, &q, seqs);
                if !mine.is_empty() {
                    q.discard(mine).await;
                }
                settled_all(all)
            }
            RemoteOp::Purge => RemoteReply::Count(q.purge().await?),
            RemoteOp::Peek(count) => RemoteReply::Peeked(
                q.peek(count)
                    .await?
                    .iter()
                    .map(|p| (WireMessage::of(&p.msg), p.redelivered))
                    .collect(),
            ),
            RemoteOp::Delete {
                if_unused,
                if_empty,
            } => RemoteReply::Count(b.delete_queue(v, &q.name, if_unused, if_empty, 0).await?),
            RemoteOp::Consume(c) => {
                self.consume(b, q, origin, c).await?;
                RemoteReply::Done
            }
            RemoteOp::Touch => {
                q.touch();
                RemoteReply::Done
            }
            RemoteOp::Sync(task) => match task == q.instance && q.sync(q.settle_mark()).await {
                true => RemoteReply::Done,
                false => RemoteReply::Failed(
                    541,
                    "INTERNAL_ERROR - acknowledgements could not be committed".into(),
                ),
            },
            RemoteOp::Cancel(id) => {
                if let Some((_, (q, here))) = self.consumers.remove(&(origin, id)) {
                    q.cancel(here).await;
                }
                RemoteReply::Done
            }
        })
    }

    /// Node `origin` got `seq` of `q` to ack later: it is held for that node, and requeued
    /// if the node stops answering before it settles it, as a consumer's deliveries are.
    fn hold_got(self: &Arc<Self>, b: &Arc<Broker>, origin: &Origin, q: &QueueRef, seq: u64) {
        let held = self.outstanding(origin, q);
        if let Ok(mut set) = held.lock() {
            set.insert(seq);
        }
        if let Some(node) = b.cluster.get() {
            self.watch_held(node.clone(), origin, q);
        }
    }

    /// Watches `origin` for as long as it holds deliveries of `q` unsettled, and requeues
    /// what it still holds once it stops answering. At most one watch per node and queue,
    /// following the queue's current task. A consumer's forwarding task watches its node
    /// itself while it runs; this watch covers basic.get results and what a node still held
    /// when its consumer went (cancelled, with its deliveries unacked on an open channel).
    fn watch_held(self: &Arc<Self>, node: Arc<MetaNode>, origin: &Origin, q: &QueueRef) {
        let key = (origin.clone(), q.vhost.clone(), q.name.clone());
        let dashmap::mapref::entry::Entry::Vacant(slot) = self.watched.entry(key.clone()) else {
            return;
        };
        slot.insert(());
        let (forwarder, origin) = (self.clone(), origin.clone());
        tokio::spawn(async move {
            let mut watch = tokio::time::interval(WATCH_EVERY);
            watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut missed = 0;
            let current = || {
                let e = forwarder.outstanding.get(&key)?;
                Some((e.0.clone(), e.1.clone()))
            };
            loop {
                watch.tick().await;
                // Done once nothing is held; checked under the map's lock, so a get that
                // holds one more either sees this watch or starts the next.
                let empty =
                    || current().is_none_or(|(_, held)| held.lock().map_or(true, |s| s.is_empty()));
                if forwarder.watched.remove_if(&key, |_, _| empty()).is_some() {
                    return;
                }
                missed = if origin_alive(&node, &origin).await {
                    0
                } else {
                    missed + 1
                };
                if missed >= WATCH_MISSES {
                    forwarder.watched.remove(&key);
                    let Some((task, held)) = current() else {
                        return;
                    };
                    let lost: Vec<u64> = held
                        .lock()
                        .map(|mut s| std::mem::take(&mut *s).into_iter().collect())
                        .unwrap_or_default();
                    if let Some(q) = task.upgrade().filter(|_| !lost.is_empty()) {
                        q.requeue(lost).await;
                    }
                    return;
                }
            }
        });
    }

    /// Registers a consumer of node `origin` on `q`, with a task forwarding its deliveries.
    async fn consume(
        self: &Arc<Self>,
        b: &Arc<Broker>,
        q: QueueRef,
        origin: Origin,
        c: RemoteConsumer,
    ) -> CoreResult<()> {
        let node = b
            .cluster
            .get()
            .ok_or_else(|| CoreError::Internal("not in a cluster".into()))?;
        let (sink, events) = mpsc::unbounded_channel();
        let here = b.next_id();
        let pending = Arc::new(AtomicU32::new(0));
        q.consume(ConsumerSpec {
            id: here,
            tag: c.tag.as_str().into(),
            channel: c.channel,
            connection: REMOTE_CONNECTION,
            sink,
            no_ack: c.no_ack,
            exclusive: c.exclusive,
            prefetch: c.prefetch,
            limiter: Arc::new(ChannelLimiter::default()),
            pending: pending.clone(),
            priority: c.priority,
            timeout: c.timeout,
            stream_offset: None,
            stream_filter: None,
        })
        .await?;
        let key = (origin.clone(), c.id);
        self.consumers.insert(key.clone(), (q.clone(), here));
        let outstanding = (!c.no_ack).then(|| self.outstanding(&origin, &q));
        let settles = outstanding.is_some();
        let out = Outbound {
            node: node.clone(),
            origin: origin.clone(),
            consumer: c.id,
            here,
            q: q.clone(),
            pending,
            outstanding,
        };
        let forwarder = self.clone();
        tokio::spawn(async move {
            out.run(events).await;
            forwarder.consumers.remove(&key);
            // A cancelled consumer's channel may still hold its deliveries unacked: they
            // stay watched until its node settles them or goes.
            if settles {
                forwarder.watch_held(node, &origin, &q);
            }
        });
        Ok(())
    }
}

impl Broker {
    /// The answers of the other members that answer `app` within a second, in member order.
    /// Empty when the node is not in a cluster.
    async fn ask_others(&self, app: &App) -> Vec<Vec<u8>> {
        let Some(node) = self.cluster.get() else {
            return Vec::new();
        };
        let Ok(request) = codec::encode(app) else {
            return Vec::new();
        };
        let mut calls = tokio::task::JoinSet::new();
        for (i, (m, _)) in node.members().into_iter().enumerate() {
            if m.name != node.name() {
                let (node, request) = (node.clone(), request.clone());
                calls
                    .spawn(async move { (i, node.call_app(&m.name, request, VIEW_TIMEOUT).await) });
            }
        }
        let mut got = Vec::new();
        while let Some(done) = calls.join_next().await {
            if let Ok((i, Ok(bytes))) = done {
                got.push((i, bytes));
            }
        }
        got.sort_by_key(|(i, _)| *i);
        got.into_iter().map(|(_, b)| b).collect()
    }

    /// Closes client connection `name` on whichever other member has it, with `reason`;
    /// false when none of those that answer has it.
    pub async fn close_member_connection(&self, name: &str, reason: &str) -> bool {
        let app = App::CloseConnection {
            name: name.to_owned(),
            reason: reason.to_owned(),
        };
        self.ask_others(&app)
            .await
            .iter()
            .any(|a| matches!(codec::decode::<RemoteReply>(a), Ok(RemoteReply::Done)))
    }

    /// View `kind` of member `name`, when it answers within a second.
    pub async fn member_view(&self, name: &str, kind: &str) -> Option<Vec<u8>> {
        let node = self.cluster.get()?;
        let request = codec::encode(&App::View(kind.to_owned())).ok()?;
        node.call_app(name, request, VIEW_TIMEOUT).await.ok()
    }

    /// View `kind` of every other member that answers within a second (in member order):
    /// what the management API shows cluster-wide. Empty when the node is not in a cluster.
    pub async fn member_views(&self, kind: &str) -> Vec<Vec<u8>> {
        self.ask_others(&App::View(kind.to_owned())).await
    }
}
