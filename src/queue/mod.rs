//! Queues. Each queue is one tokio task (`actor/`; a stream's is `stream/`, over its segment
//! log) that owns its messages and consumers outright; everyone else holds a `QueueRef` and
//! talks to it through a bounded mailbox, whose bound is the backpressure that slows
//! publishers when a queue cannot keep up.

mod actor;
pub mod consumer;
pub mod deadletter;
mod enqueuer;
mod handover;
mod home_tasks;
pub mod journal;
mod ready;
pub mod remote;
pub mod remote_ops;
pub mod stats;
pub mod stream;
mod summary;

pub use summary::{ConsumerSummary, QueueInfo, StreamOffsets};

use crate::confirm::ConfirmToken;
use crate::error::{CoreError, CoreResult, Kind};
use crate::message::Message;
use crate::policy::Applied;
use crate::store::{RecoveredQueue, Store};
use amq_protocol::types::FieldTable;
use consumer::ConsumerSpec;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tokio::sync::{mpsc, oneshot};

/// Mailbox capacity of a queue task.
const MAILBOX: usize = 4096;

/// What a queue asks of the vhost it lives in. `vhost::VHost` implements it; a queue holds it
/// weakly, so queues sit below vhosts and never name them.
pub trait QueueHost: Send + Sync + 'static {
    /// The vhost's name.
    fn vhost_name(&self) -> &str;
    /// The store the queue's messages and definition go to.
    fn store(&self) -> &Store;
    /// The policies that apply to a queue of this name and arguments.
    fn policies_for(
        &self,
        name: &str,
        args: &crate::args::QueueArgs,
        arguments: &FieldTable,
    ) -> Applied;
    /// Drops the queue from the registry and its bindings (auto-delete, x-expires).
    fn forget_queue(&self, q: &QueueRef);
    /// Publishes dead-lettered copies through the exchange `dlx` (gone: dropped), off the
    /// queue's task so two queues dead-lettering into each other cannot deadlock.
    fn dead_letter(self: Arc<Self>, dlx: &str, copies: Vec<Arc<Message>>);
    /// Publishes one dead-lettered copy through the exchange `dlx` and answers whether it
    /// reached a queue and every queue it reached confirmed it (at-least-once).
    fn dead_letter_confirmed(
        self: Arc<Self>,
        dlx: &str,
        copy: Arc<Message>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;
}

/// A cheap handle on a queue.
pub type QueueRef = Arc<QueueShared>;

/// The immutable facts about a queue plus its mailbox.
#[derive(Debug)]
pub struct QueueShared {
    /// Queue name.
    pub name: String,
    /// Virtual host name.
    pub vhost: String,
    /// Survives a restart.
    pub durable: bool,
    /// Connection id owning an exclusive queue.
    pub exclusive_owner: Option<u64>,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Declare arguments.
    pub arguments: FieldTable,
    /// The declared arguments, parsed (what applies is [`QueueShared::applied`]).
    pub args: crate::args::QueueArgs,
    /// The policies in force and the arguments the queue acts on.
    applied: std::sync::RwLock<Arc<Applied>>,
    /// The effective arguments can refuse a publish (a length limit with reject-publish).
    may_reject: std::sync::atomic::AtomicBool,
    /// Id of its messages in the store; None for queues that do not survive a restart
    /// (non-durable or exclusive), whose messages are never written.
    pub store_id: Option<u64>,
    tx: mpsc::Sender<QueueCmd>,
    /// Consumer commands (consume, cancel, ack, nack, reject): served before the next data
    /// command, so settlements never wait behind a mailbox full of publishes.
    ctl: mpsc::UnboundedSender<QueueCmd>,
    /// Large messages sent to the task and not yet taken.
    inflight: InFlight,
    /// Set when the queue is deleted, so cached handles notice.
    deleted: std::sync::atomic::AtomicBool,
    /// The node the queue lives on when that is another node ([`remote`]); None: here.
    pub home: Option<Arc<str>>,
    /// Where a replicated queue led here records its messages (instead of the store).
    pub journal: Option<Arc<dyn journal::Journal>>,
    /// Acks and rejects of another node's queue that its home did not take (unreachable, or
    /// for deliveries its task no longer holds): a sync after one answers false.
    lost_settlements: std::sync::atomic::AtomicU64,
    /// Tells this task of the queue from another (a replicated queue's task is started
    /// afresh after a failover): other nodes' acks name the task that made the deliveries.
    pub instance: u64,
    /// The replaced handle this one's publishes wait for ([`handover`]); set at most once,
    /// before the handle is registered.
    handover: std::sync::OnceLock<handover::Handover>,
    /// How a quorum queue's proxy numbers what it forwards ([`enqueuer`]): the replaced
    /// proxy's when it follows one, else its own from its first publish.
    enqueuer: std::sync::OnceLock<Arc<enqueuer::Enqueuer>>,
}

/// Messages at least this large count against `MAILBOX_BYTES` (smaller ones are bounded well
/// enough by the mailbox's length).
const LARGE_MESSAGE: u64 = 4096;
/// Body bytes of large messages a queue's mailbox may hold before publishers wait: the
/// mailbox is bounded in bytes as well as in commands.
const MAILBOX_BYTES: u64 = 16 << 20;

/// Body bytes of large messages sent to a queue task and not yet taken, and publishers
/// waiting for room.
#[derive(Debug, Default)]
struct InFlight {
    bytes: std::sync::atomic::AtomicU64,
    room: tokio::sync::Notify,
    /// The task ended: nobody waits any more.
    closed: std::sync::atomic::AtomicBool,
}

/// A message handed out by basic.get.
#[derive(Debug)]
pub struct GetResult {
    /// Queue sequence number (for the ack).
    pub seq: u64,
    /// The message.
    pub msg: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
    /// Messages left ready.
    pub remaining: u32,
}

/// A ready message looked at without being taken (the management API's peek).
#[derive(Debug)]
pub struct Peeked {
    /// The message, as a consumer would receive it.
    pub msg: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
}

/// Where a publish came from when its sender may send it again: the enqueuer (another
/// node's handles of a quorum queue, one after another) and the publish's number from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sent {
    /// The sending node's numbering for the queue, chosen at random and carried from a
    /// replaced handle to its successor (`queue::enqueuer`).
    pub enqueuer: u64,
    /// The publish's number from it.
    pub seq: u64,
}

/// Commands a queue task accepts.
#[derive(Debug)]
pub(crate) enum QueueCmd {
    Publish(Arc<Message>, Option<ConfirmToken>),
    Consume(ConsumerSpec, oneshot::Sender<CoreResult<()>>),
    Cancel(u64),
    /// The queue is served by this handle from now on: this node's consumers move to it.
    Handoff(QueueRef),
    Ack(Vec<u64>),
    Requeue(Vec<u64>),
    Discard(Vec<u64>),
    Undelivered(u64, Arc<Message>),
    Get(bool, oneshot::Sender<Option<GetResult>>),
    /// The first ready messages, in delivery order, left where they are.
    Peek(u32, oneshot::Sender<Vec<Peeked>>),
    Purge(oneshot::Sender<u32>),
    Delete {
        if_unused: bool,
        if_empty: bool,
        reply: oneshot::Sender<CoreResult<u32>>,
    },
    Stats(oneshot::Sender<(u32, u32)>),
    Info(oneshot::Sender<QueueInfo>),
    Consumers(oneshot::Sender<Vec<ConsumerSummary>>),
    Flush(oneshot::Sender<()>),
    /// Answered once the settlements sent before it are committed where the queue keeps
    /// them (true), or could not be (false): a closing channel waits for its acks.
    Sync(oneshot::Sender<bool>),
    /// A replicated queue's delivered mark was written (committed or not).
    Reserved(u64, bool),
    /// The dead-lettered copy of message `.0` was confirmed by its targets (true) or did not
    /// get through (at-least-once dead-lettering).
    DeadLetterSent(u64, bool),
    /// A publish its sender may send again ([`Sent`]): a replicated queue takes it once.
    PublishFrom(Arc<Message>, Option<ConfirmToken>, Sent),
    /// The highest publish number a replicated queue has taken from enqueuer `.0`; `None`
    /// when it took none (or keeps no such numbers).
    TakenFrom(u64, oneshot::Sender<Option<u64>>),
    Touch,
    Sample,
    Policy(Arc<crate::args::QueueArgs>),
    Shutdown,
    Kick,
    /// Deliveries the home node of a remote queue made to a consumer here.
    RemoteDeliveries(u64, Vec<remote::RemoteDelivery>),
    /// The home node of a remote queue cancelled a consumer here.
    RemoteCancelled(u64),
    /// The home node found a delivery to consumer `.0` here unacked past its timeout `.1`
    /// (ms): its channel is closed, as a local consumer's would be.
    RemoteTimedOut(u64, u64),
    /// A stream-protocol request to a stream (other queue types never get one).
    Stream(stream::StreamCmd),
}

impl QueueShared {
    /// Creates the queue and starts its task, under the vhost's policies; a durable,
    /// non-exclusive queue is written to the store.
    pub fn spawn<H: QueueHost>(
        name: String,
        host: &Arc<H>,
        durable: bool,
        exclusive_owner: Option<u64>,
        auto_delete: bool,
        arguments: FieldTable,
        args: crate::args::QueueArgs,
    ) -> QueueRef {
        let vhost_name = host.vhost_name();
        let applied = host.policies_for(&name, &args, &arguments);
        let store_id =
            (durable && exclusive_owner.is_none()).then(|| host.store().allocate_queue_id());
        if let Some(id) = store_id {
            host.store().put_queue(&crate::store::QueueRecord {
                vhost: vhost_name,
                name: &name,
                id,
                auto_delete,
                arguments: &arguments,
            });
        }
        let (tx, ctl, rx) = actor::mailbox(MAILBOX);
        let q = Arc::new(QueueShared {
            name,
            vhost: vhost_name.to_owned(),
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            args,
            may_reject: applied.args.may_reject().into(),
            applied: std::sync::RwLock::new(Arc::new(applied)),
            store_id,
            tx,
            ctl,
            inflight: Default::default(),
            deleted: Default::default(),
            home: None,
            journal: None,
            lost_settlements: Default::default(),
            handover: Default::default(),
            enqueuer: Default::default(),
            instance: rand::random(),
        });
        if q.args.stream {
            stream::start(q.clone(), host, rx);
        } else {
            actor::start(q.clone(), host, rx, Vec::new(), Default::default());
        }
        q
    }

    /// A replicated queue led by this node: its task records messages in `journal` and
    /// starts with what the journal held (`from`).
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_journaled<H: QueueHost>(
        name: String,
        host: &Arc<H>,
        durable: bool,
        auto_delete: bool,
        arguments: FieldTable,
        args: crate::args::QueueArgs,
        journal: Arc<dyn journal::Journal>,
        from: journal::Journaled,
    ) -> QueueRef {
        let applied = host.policies_for(&name, &args, &arguments);
        let (tx, ctl, rx) = actor::mailbox(MAILBOX);
        let q = Arc::new(QueueShared {
            name,
            vhost: host.vhost_name().to_owned(),
            durable,
            exclusive_owner: None,
            auto_delete,
            arguments,
            args,
            may_reject: applied.args.may_reject().into(),
            applied: std::sync::RwLock::new(Arc::new(applied)),
            store_id: None,
            tx,
            ctl,
            inflight: Default::default(),
            deleted: Default::default(),
            home: None,
            journal: Some(journal),
            lost_settlements: Default::default(),
            handover: Default::default(),
            enqueuer: Default::default(),
            instance: rand::random(),
        });
        actor::start(q.clone(), host, rx, Vec::new(), from);
        q
    }

    /// A queue whose home is another node, reached through its link ([`remote`]).
    pub fn spawn_remote(
        name: String,
        vhost: String,
        durable: bool,
        auto_delete: bool,
        arguments: FieldTable,
        home: remote::Home<'_>,
    ) -> QueueRef {
        let args = crate::args::QueueArgs::parse(&arguments, &name, &vhost).unwrap_or_default();
        let applied = Applied::none(args.clone());
        let (tx, ctl, rx) = actor::mailbox(MAILBOX);
        let q = Arc::new(QueueShared {
            name,
            vhost,
            durable,
            exclusive_owner: home.owner,
            auto_delete,
            arguments,
            args,
            applied: std::sync::RwLock::new(Arc::new(applied)),
            may_reject: true.into(),
            store_id: None,
            tx,
            ctl,
            inflight: Default::default(),
            deleted: Default::default(),
            home: Some(home.node.into()),
            journal: None,
            lost_settlements: Default::default(),
            handover: Default::default(),
            enqueuer: Default::default(),
            instance: rand::random(),
        });
        remote::start(q.clone(), home.link, rx);
        q
    }

    /// Restarts a durable queue read from the store, with its stored messages (bodies stay on
    /// disk until consumers get near them).
    pub fn recover<H: QueueHost>(host: &Arc<H>, r: RecoveredQueue) -> QueueRef {
        let (tx, ctl, rx) = actor::mailbox(MAILBOX);
        let args = crate::args::QueueArgs::parse(&r.arguments, &r.name, host.vhost_name())
            .unwrap_or_default();
        let applied = host.policies_for(&r.name, &args, &r.arguments);
        let q = Arc::new(QueueShared {
            name: r.name,
            vhost: host.vhost_name().to_owned(),
            durable: true,
            exclusive_owner: None,
            auto_delete: r.auto_delete,
            args,
            may_reject: applied.args.may_reject().into(),
            applied: std::sync::RwLock::new(Arc::new(applied)),
            arguments: r.arguments,
            store_id: Some(r.id),
            tx,
            ctl,
            inflight: Default::default(),
            deleted: Default::default(),
            home: None,
            journal: None,
            lost_settlements: Default::default(),
            handover: Default::default(),
            enqueuer: Default::default(),
            instance: rand::random(),
        });
        if q.args.stream {
            stream::start(q.clone(), host, rx);
        } else {
            let from = journal::Journaled {
                delivered: r.delivered,
                ..Default::default()
            };
            actor::start(q.clone(), host, rx, r.messages, from);
        }
        q
    }

    /// The policies in force and the effective arguments.
    pub fn applied(&self) -> Arc<Applied> {
        match self.applied.read() {
            Ok(a) => a.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts new policies in force (after a policy change); the queue task re-checks its
    /// limits at once.
    pub async fn set_applied(&self, applied: Applied) {
        let args = applied.args.clone();
        self.may_reject.store(args.may_reject(), Ordering::Relaxed);
        match self.applied.write() {
            Ok(mut a) => *a = Arc::new(applied),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(applied),
        }
        self.send(QueueCmd::Policy(args)).await;
    }

    /// Publishes through this handle wait for `prev`, the proxy it replaces, to have sent
    /// what was published through it ([`handover`]), and go on with its numbers
    /// ([`enqueuer`]). Called before this handle is registered.
    pub fn follow(&self, prev: &QueueRef) {
        let _ = self
            .handover
            .set(handover::Handover::after(Arc::downgrade(prev)));
        let _ = self.enqueuer.set(prev.enqueuer());
    }

    /// How this handle numbers the publishes it forwards ([`enqueuer`]).
    fn enqueuer(&self) -> Arc<enqueuer::Enqueuer> {
        self.enqueuer.get_or_init(enqueuer::Enqueuer::new).clone()
    }

    /// Marks the queue deleted.
    pub fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    /// Whether it was deleted (a cached handle must be looked up again).
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// `'q' in vhost '/'`, as RabbitMQ's texts name a queue.
    pub fn describe(&self) -> String {
        format!("queue '{}' in vhost '{}'", self.name, self.vhost)
    }

    fn gone(&self) -> CoreError {
        match &self.home {
            Some(node) if !self.is_deleted() => CoreError::HomeDown {
                node: node.to_string(),
                queue: self.name.clone(),
                vhost: self.vhost.clone(),
            },
            _ => CoreError::not_found(Kind::Queue, &self.name, &self.vhost),
        }
    }

    async fn send(&self, cmd: QueueCmd) -> bool {
        self.tx.send(cmd).await.is_ok()
    }

    /// Sends a consumer command (see `ctl`).
    fn control(&self, cmd: QueueCmd) -> bool {
        self.ctl.send(cmd).is_ok()
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> QueueCmd) -> CoreResult<T> {
        let (tx, rx) = oneshot::channel();
        if !self.send(make(tx)).await {
            return Err(self.gone());
        }
        rx.await.map_err(|_| self.gone())
    }

    /// Whether a confirm for a publish to this queue must wait for the queue (stored, or
    /// possibly refused by a length limit; a remote queue's is always its home node's).
    pub fn confirms_later(&self, msg: &Message) -> bool {
        self.persists(msg) || self.may_reject.load(Ordering::Relaxed)
    }

    /// Whether a message published to this queue is written to the store (or, for a
    /// replicated queue, to its journal, or a stream's log: every message, persistent or not,
    /// as RabbitMQ's quorum queues and streams keep them).
    pub fn persists(&self, msg: &Message) -> bool {
        self.journal.is_some() || self.args.stream || (self.store_id.is_some() && msg.persistent)
    }

    /// Enqueues a message; the token (if any) completes once the message is stored.
    /// False when the queue is gone. Waits first for the handle this one replaced, if its
    /// publishes may still be on their way ([`handover`]).
    pub async fn publish(&self, msg: Arc<Message>, token: Option<ConfirmToken>) -> bool {
        if let Some(h) = self.handover.get() {
            if !h.done() {
                h.wait().await;
            }
        }
        self.relay(msg, token).await
    }

    /// [`QueueShared::publish`] without waiting for a replaced handle: for publishes another
    /// node's handle (or a replaced one here) forwarded to this queue's node.
    pub async fn relay(&self, msg: Arc<Message>, token: Option<ConfirmToken>) -> bool {
        self.relay_from(msg, token, None).await
    }

    /// [`QueueShared::relay`] of a publish its sender may send again, numbered by `sent`.
    pub async fn relay_from(
        &self,
        msg: Arc<Message>,
        token: Option<ConfirmToken>,
        sent: Option<Sent>,
    ) -> bool {
        let size = msg.body_len() as u64;
        if size >= LARGE_MESSAGE {
            let f = &self.inflight;
            loop {
                let room = f.room.notified();
                if f.bytes.load(Ordering::Acquire) < MAILBOX_BYTES
                    || f.closed.load(Ordering::Acquire)
                {
                    break;
                }
                room.await;
            }
            f.bytes.fetch_add(size, Ordering::AcqRel);
        }
        match sent {
            Some(sent) => self.send(QueueCmd::PublishFrom(msg, token, sent)).await,
            None => self.send(QueueCmd::Publish(msg, token)).await,
        }
    }

    /// The task took a published message out of its mailbox.
    fn taken(&self, msg: &Message) {
        let size = msg.body_len() as u64;
        if size >= LARGE_MESSAGE {
            let f = &self.inflight;
            f.bytes.fetch_sub(size, Ordering::AcqRel);
            f.room.notify_waiters();
        }
    }

    /// The task ended: publishers waiting for room stop waiting.
    fn closed(&self) {
        self.inflight.closed.store(true, Ordering::Release);
        self.inflight.room.notify_waiters();
    }

    /// Waits until the queue has handed every pending write to the store.
    pub async fn flush(&self) {
        let _ = self.ask(QueueCmd::Flush).await;
    }

    /// Whether the acks sent to this queue since [`QueueShared::settle_mark`] answered `mark`
    /// are committed (for a replicated queue: on a majority of its members; for another
    /// node's queue: there, and none of them was lost on the way). Asked after the acks, on
    /// the same (consumer) mailbox, so it is answered after them.
    pub async fn sync(&self, mark: u64) -> bool {
        let (tx, rx) = oneshot::channel();
        self.control(QueueCmd::Sync(tx))
            && rx.await.unwrap_or(false)
            && self.lost_settlements.load(Ordering::Acquire) == mark
    }

    /// Tells the task that the delivered mark `mark` was written (`committed` or not).
    pub(crate) fn reserved(&self, mark: u64, committed: bool) {
        self.control(QueueCmd::Reserved(mark, committed));
    }

    /// Taken before the first ack a later [`QueueShared::sync`] answers for.
    pub fn settle_mark(&self) -> u64 {
        self.lost_settlements.load(Ordering::Acquire)
    }

    /// An ack or reject sent to this (remote) queue's home was not taken there.
    pub(crate) fn settlement_lost(&self) {
        self.lost_settlements.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a channel closing after acks to this queue waits for [`QueueShared::sync`]:
    /// the queue is replicated or lives on another node.
    pub fn syncs_acks(&self) -> bool {
        self.journal.is_some() || self.home.is_some()
    }

    /// Stops the queue's task at broker shutdown (the queue itself is kept in the store).
    pub async fn shutdown(&self) {
        self.send(QueueCmd::Shutdown).await;
    }

    /// Registers a consumer.
    pub async fn consume(&self, spec: ConsumerSpec) -> CoreResult<()> {
        self.consume_queued(spec).await.map_err(|_| self.gone())?
    }

    /// Registers a consumer: the request is queued before this returns (ahead of the
    /// caller's later commands, as a cancel); its answer comes through the receiver (closed
    /// when the queue is gone).
    pub fn consume_queued(&self, spec: ConsumerSpec) -> oneshot::Receiver<CoreResult<()>> {
        let (tx, rx) = oneshot::channel();
        self.control(QueueCmd::Consume(spec, tx));
        rx
    }

    /// This node's consumers of the queue move from this handle to `to`, which serves it
    /// from now on (a replicated queue's leader moved): queued before this returns, ahead
    /// of the handle's shutdown.
    pub fn hand_off(&self, to: &QueueRef) {
        self.control(QueueCmd::Handoff(to.clone()));
    }

    /// Sends a stream-protocol request to the stream's task, in order with publishes; false
    /// when the queue is gone.
    pub async fn stream_request(&self, cmd: stream::StreamCmd) -> bool {
        self.send(QueueCmd::Stream(cmd)).await
    }

    /// Removes a consumer (its unacked messages stay unacked).
    pub async fn cancel(&self, consumer_id: u64) {
        self.control(QueueCmd::Cancel(consumer_id));
    }

    /// Acknowledges messages by sequence number.
    pub async fn ack(&self, seqs: Vec<u64>) {
        self.control(QueueCmd::Ack(seqs));
    }

    /// Returns unacked messages to their original place, flagged redelivered.
    pub async fn requeue(&self, seqs: Vec<u64>) {
        self.control(QueueCmd::Requeue(seqs));
    }

    /// Drops unacked messages (reject / nack without requeue).
    pub async fn discard(&self, seqs: Vec<u64>) {
        self.control(QueueCmd::Discard(seqs));
    }

    /// Takes back a message that was handed to a connection but never reached its consumer.
    /// It comes back flagged redelivered, as in RabbitMQ (the queue handed it out): later
    /// messages may have been delivered meanwhile, and the flag tells the consumer so.
    pub async fn return_undelivered(&self, seq: u64, msg: Arc<Message>) {
        self.control(QueueCmd::Undelivered(seq, msg));
    }

    /// basic.get.
    pub async fn get(&self, no_ack: bool) -> CoreResult<Option<GetResult>> {
        if self.args.stream {
            return Err(CoreError::NotImplemented(format!(
                "basic.get not supported by stream queues {}",
                self.describe()
            )));
        }
        self.ask(|r| QueueCmd::Get(no_ack, r)).await
    }

    /// Up to `count` ready messages from the head, in the order they would be delivered,
    /// without taking, requeueing or reordering them.
    pub async fn peek(&self, count: u32) -> CoreResult<Vec<Peeked>> {
        if self.args.stream {
            return Err(CoreError::NotImplemented(format!(
                "peek not supported by stream queues {}",
                self.describe()
            )));
        }
        self.ask(|r| QueueCmd::Peek(count, r)).await
    }

    /// Drops every ready message; returns how many.
    pub async fn purge(&self) -> CoreResult<u32> {
        if self.args.stream {
            return Err(CoreError::NotImplemented(format!(
                "queue.purge not supported by stream queues {}",
                self.describe()
            )));
        }
        self.ask(QueueCmd::Purge).await
    }

    /// Stops the queue (after the conditions hold); returns its ready message count.
    pub async fn delete(&self, if_unused: bool, if_empty: bool) -> CoreResult<u32> {
        self.ask(|reply| QueueCmd::Delete {
            if_unused,
            if_empty,
            reply,
        })
        .await?
    }

    /// Counters for the management API.
    pub async fn info(&self) -> CoreResult<QueueInfo> {
        self.ask(QueueCmd::Info).await
    }

    /// Counters of many queues at once: every request is sent before any answer is awaited, so
    /// the queue tasks answer in parallel (a gone queue reports zeros).
    pub async fn info_many(queues: &[QueueRef]) -> Vec<QueueInfo> {
        let mut pending = Vec::with_capacity(queues.len());
        for q in queues {
            let (tx, rx) = oneshot::channel();
            pending.push(q.send(QueueCmd::Info(tx)).await.then_some(rx));
        }
        let mut out = Vec::with_capacity(pending.len());
        for rx in pending {
            out.push(match rx {
                Some(rx) => rx.await.unwrap_or_default(),
                None => QueueInfo::default(),
            });
        }
        out
    }

    /// The queue's consumers.
    pub async fn consumers(&self) -> CoreResult<Vec<ConsumerSummary>> {
        self.ask(QueueCmd::Consumers).await
    }

    /// [`QueueCmd::TakenFrom`]; `None` too when the queue did not answer.
    pub async fn taken_from(&self, enqueuer: u64) -> Option<u64> {
        self.ask(|r| QueueCmd::TakenFrom(enqueuer, r))
            .await
            .ok()
            .flatten()
    }

    /// (ready messages, consumers).
    pub async fn stats(&self) -> CoreResult<(u32, u32)> {
        self.ask(QueueCmd::Stats).await
    }

    /// Counts as a use for x-expires (a redeclare). Never waits.
    pub fn touch(&self) {
        if self.applied().args.expires.is_some() {
            let _ = self.tx.try_send(QueueCmd::Touch);
        }
    }

    /// Asks the queue to sample its message counters into rates (the stats timer). Never
    /// waits: a queue whose mailbox is full skips this tick.
    pub fn sample_stats(&self) {
        let _ = self.tx.try_send(QueueCmd::Sample);
    }

    /// Asks the queue to try delivering again (credit was freed elsewhere). Never waits.
    pub fn kick(&self) {
        let _ = self.tx.try_send(QueueCmd::Kick);
    }
}

/// A weak reference, for tasks that must not keep a queue alive.
pub type QueueWeak = Weak<QueueShared>;
