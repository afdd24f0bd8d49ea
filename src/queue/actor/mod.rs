//! The queue task: the ready list (kept in publish order; requeued messages go back to their
//! original place), the unacked map, round-robin push delivery within consumer credit, and the
//! queue's side of persistence: stored messages are written (and deleted on ack) through the
//! store writer, the delivery high-water mark is recorded for the redelivered flag, and bodies
//! of recovered messages stay on disk until the head of the queue reaches them.

use super::consumer::{ConsumerEvent, ConsumerSpec, PENDING_WINDOW};
use super::deadletter::Reason;
use super::ready::{Ready, ReadyList};
use super::stats::{Counter, Stats};
use super::{GetResult, QueueCmd, QueueRef};
use crate::confirm::ConfirmToken;
use crate::error::{CoreError, Kind, Precondition};
use crate::message::Message;
use crate::store::{Op, Store};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tokio::sync::{mpsc, oneshot};

mod consumers;
mod delivery;
mod dlx;
mod enqueuers;
mod expiry;
mod info;

/// Commands handled per wake-up before delivering.
const BATCH: usize = 256;
/// Commands handled per wake-up while messages are paged out and consumers wait.
const PAGING_BATCH: usize = 8;
/// Bodies read from the store at a time when the head of the queue is on disk.
const READ_AHEAD: usize = 256;

/// Milliseconds on a monotonic clock (tokio's, so tests can pause it).
fn now_ms() -> u64 {
    static BASE: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(tokio::time::Instant::now);
    tokio::time::Instant::now()
        .saturating_duration_since(base)
        .as_millis() as u64
}

#[derive(Debug)]
struct Unacked {
    msg: Arc<Message>,
    consumer: Option<u64>,
    returns: u32,
    /// When it was handed to a consumer (consumer timeout), on `now_ms`'s clock.
    since: u64,
}

#[derive(Debug)]
struct Consumer {
    spec: ConsumerSpec,
    unacked: u32,
    /// Its channel was told to close for a timed-out delivery.
    timed_out: bool,
}

impl Consumer {
    /// Checks credit; takes channel credit only when every other check passed.
    fn take_credit(&self) -> bool {
        if self.spec.pending.load(Ordering::Acquire) >= PENDING_WINDOW {
            return false;
        }
        if self.spec.no_ack {
            return true;
        }
        if self.spec.prefetch != 0 && self.unacked >= self.spec.prefetch {
            return false;
        }
        self.spec.limiter.try_acquire()
    }
}

/// A store (or journal) write waiting for the end of the current batch (kept in order).
#[derive(Debug)]
enum Pending {
    Put(u64, Arc<Message>, Option<u64>, Option<ConfirmToken>),
    /// The confirm of a copy of a message taken before: it follows the first copy's write.
    Confirm(ConfirmToken),
    /// Stored messages that are gone (acked, dropped, purged).
    Forget(Vec<u64>),
    /// The paged-out range `from..=to` was purged.
    ForgetRange(u64, u64),
    /// A message dead-lettered at least once: its copy takes its place ([`dlx`]).
    DeadLettered(u64, Arc<Message>),
    /// Dead-lettered copies confirmed by their targets (or dropped).
    DeadLettersSent(Vec<u64>),
    Op(Op),
}

struct QueueActor {
    shared: QueueRef,
    /// The arguments in force (declared, combined with policies).
    args: Arc<crate::args::QueueArgs>,
    host: Weak<dyn super::QueueHost>,
    store: Store,
    ready: ReadyList,
    unacked: rustc_hash::FxHashMap<u64, Unacked>,
    next_seq: u64,
    consumers: Vec<Consumer>,
    /// Message counters for the management API.
    stats: Stats,
    /// Consumer capacity (share of time consumers could take messages).
    capacity: super::stats::Capacity,
    /// Unix ms of the last publish, delivery, settle or consumer change.
    last_activity: u64,
    /// When the unacked deliveries are next scanned for consumer timeouts.
    timeout_check_at: Option<u64>,
    next_consumer: usize,
    had_consumers: bool,
    stopped: bool,
    /// Writes to hand to the store after this batch.
    pending: Vec<Pending>,
    /// Highest stored sequence handed to a client, and whether the store has it yet.
    delivered_mark: u64,
    mark_dirty: bool,
    /// A replicated queue's delivered mark as its group has committed it: what it may hand
    /// out (`may_hand_out`), and whether a further one is being written.
    reserved: Option<u64>,
    reserving: bool,
    /// What a replicated queue took from enqueuers that may send it again.
    enqueuers: enqueuers::Enqueuers,
    /// basic.get requests waiting for that mark.
    held_gets: Vec<(bool, oneshot::Sender<Option<super::GetResult>>)>,
    flush_waiters: Vec<oneshot::Sender<()>>,
    /// Asked whether the settlements before them are committed ([`QueueCmd::Sync`]).
    sync_waiters: Vec<oneshot::Sender<bool>>,
    /// Messages to dead-letter after this batch.
    dead: Vec<(Arc<Message>, Reason)>,
    /// Dead-lettered copies held until confirmed (at-least-once dead-lettering).
    dlx: dlx::DeadLetters,
    /// When the queue was last used (x-expires), on `now_ms`'s clock.
    last_used: u64,
    /// Answer to queue.delete, sent once the deletion is handed to the store.
    delete_reply: Option<(oneshot::Sender<Result<u32, CoreError>>, u32)>,
}

/// What a queue task reads: the bounded data mailbox (publishes, gets, admin commands) and
/// the consumer commands, which are always served first.
pub(super) struct Mailbox {
    data: mpsc::Receiver<QueueCmd>,
    control: mpsc::UnboundedReceiver<QueueCmd>,
}

impl Mailbox {
    /// The data and control receivers.
    pub(super) fn into_parts(
        self,
    ) -> (mpsc::Receiver<QueueCmd>, mpsc::UnboundedReceiver<QueueCmd>) {
        (self.data, self.control)
    }
}

/// The senders of a new queue's two channels (data bounded to `size`), and its mailbox.
pub(super) fn mailbox(
    size: usize,
) -> (
    mpsc::Sender<QueueCmd>,
    mpsc::UnboundedSender<QueueCmd>,
    Mailbox,
) {
    let (tx, data) = mpsc::channel(size);
    let (ctl, control) = mpsc::unbounded_channel();
    (tx, ctl, Mailbox { data, control })
}

/// Spawns the task of a queue, with the sequence numbers of recovered messages (bodies in
/// the store) and what a replicated queue's journal held (`from`; for a queue recovered
/// from the store, only its delivered mark).
pub(super) fn start<H: super::QueueHost>(
    shared: QueueRef,
    host: &Arc<H>,
    rx: Mailbox,
    recovered: Vec<crate::store::RecoveredMessage>,
    from: super::journal::Journaled,
) {
    let super::journal::Journaled {
        messages: loaded,
        delivered,
        enqueuers,
        dead,
    } = from;
    // Never below a number already handed out: an ack still on its way for a message that
    // was delivered (up to the mark) must not take a new message that reused its number.
    let next_seq = recovered
        .iter()
        .map(|m| m.seq + 1)
        .chain(loaded.last().map(|(seq, _, _)| seq + 1))
        .chain(dead.iter().map(|(seq, _)| seq + 1))
        .chain(delivered.map(|d| d + 1))
        .max()
        .unwrap_or(0);
    let page_file = host.store().paging().page_file();
    let mut ready = ReadyList::new(shared.args.max_priority, Some(page_file));
    let (now, unix_now) = (now_ms(), crate::clock::unix_ms());
    for m in recovered {
        let priority = ready.level_of(Some(m.priority));
        ready.insert(Ready {
            seq: m.seq,
            msg: None,
            redelivered: delivered.is_some_and(|d| m.seq <= d),
            // A TTL keeps running across the restart.
            expires: m.expires_at.map(|at| now + at.saturating_sub(unix_now)),
            size: u64::from(m.size),
            returns: 0,
            priority,
        });
    }
    for (seq, msg, returns) in loaded {
        let priority = ready.level_of(msg.priority);
        ready.insert(Ready {
            seq,
            size: msg.body_len() as u64,
            msg: Some(msg),
            redelivered: returns > 0 || delivered.is_some_and(|d| seq <= d),
            expires: None,
            returns,
            priority,
        });
    }
    let mut actor = QueueActor {
        args: shared.applied().args.clone(),
        shared,
        host: Arc::downgrade(host) as Weak<dyn super::QueueHost>,
        store: host.store().clone(),
        ready,
        unacked: Default::default(),
        next_seq,
        consumers: Vec::new(),
        stats: Stats::default(),
        capacity: Default::default(),
        last_activity: crate::clock::unix_ms(),
        timeout_check_at: None,
        next_consumer: 0,
        had_consumers: false,
        stopped: false,
        pending: Vec::new(),
        delivered_mark: delivered.unwrap_or(0),
        mark_dirty: false,
        reserved: delivered,
        reserving: false,
        enqueuers: enqueuers::Enqueuers::from(enqueuers),
        held_gets: Vec::new(),
        flush_waiters: Vec::new(),
        sync_waiters: Vec::new(),
        dead: Vec::new(),
        dlx: Default::default(),
        last_used: now_ms(),
        delete_reply: None,
    };
    actor.resume_dead_letters(dead);
    actor.drop_dead_letters_unless_at_least_once();
    tokio::spawn(actor.run(rx));
}

impl QueueActor {
    async fn run(mut self, mut rx: Mailbox) {
        // A replicated queue writes its delivered mark when it first hands a message out
        // (`may_hand_out`), not before: a leader move with nothing handed out since flags
        // nothing redelivered.
        // Grown on demand: most of a node's queues never see a full batch.
        let mut batch = Vec::new();
        // Dead letters a new leader's task took over go at once.
        self.forward_dead_letters();
        while !self.stopped {
            let idle_deadline = self
                .args
                .expires
                .filter(|_| self.consumers.is_empty())
                .map(|e| self.last_used + e);
            let timeout_check = self.next_timeout_check();
            let next_expiry = [
                self.ready.front().and_then(|r| r.expires),
                idle_deadline,
                timeout_check,
                self.dlx.retry_at(),
            ]
            .into_iter()
            .flatten()
            .min();
            let wake = async {
                match next_expiry {
                    Some(at) => {
                        let wait = at.saturating_sub(now_ms()) + 1;
                        tokio::time::sleep(std::time::Duration::from_millis(wait)).await
                    }
                    None => std::future::pending().await,
                }
            };
            // Paging with consumers waiting: short batches, so publishers (slowed through the
            // mailbox) cannot starve the consumers that would drain the paged tail.
            let paging = self.ready.paged().0 > 0 && !self.consumers.is_empty();
            let limit = if paging { PAGING_BATCH } else { BATCH };
            tokio::select! {
                Some(cmd) = rx.control.recv() => {
                    self.handle_control(cmd, &mut rx.control);
                    self.last_activity = crate::clock::unix_ms();
                }
                n = rx.data.recv_many(&mut batch, limit) => {
                    if n == 0 {
                        break;
                    }
                    let mut active = false;
                    for cmd in batch.drain(..) {
                        // Consumer commands sent before this one are served first.
                        if let Ok(c) = rx.control.try_recv() {
                            self.handle_control(c, &mut rx.control);
                            active = true;
                            if self.stopped {
                                break;
                            }
                        }
                        active |= !matches!(
                            cmd,
                            QueueCmd::Info(_)
                                | QueueCmd::Stats(_)
                                | QueueCmd::TakenFrom(..)
                                | QueueCmd::Consumers(_)
                                | QueueCmd::Sample
                                | QueueCmd::Flush(_)
                                | QueueCmd::Sync(_)
                                | QueueCmd::Reserved(..)
                                | QueueCmd::Kick
                                | QueueCmd::Policy(_)
                        );
                        self.handle(cmd);
                        if self.stopped {
                            break;
                        }
                    }
                    if active {
                        self.last_activity = crate::clock::unix_ms();
                    }
                }
                _ = wake => {}
            }
            if !self.stopped {
                self.expire_head();
                self.expire_queue();
                self.check_consumer_timeouts();
            }
            if !self.stopped {
                self.deliver();
                self.capacity
                    .set_blocked(!self.consumers.is_empty() && !self.ready.is_empty());
            }
            self.send_dead_letters();
            self.forward_dead_letters();
            self.write_pending().await;
            if paging {
                // Paging does file I/O on this worker thread: let the connections (the
                // consumers' writers above all) run between batches.
                tokio::task::yield_now().await;
            }
        }
        self.shared.closed();
        self.write_pending().await;
        if let Some((reply, n)) = self.delete_reply.take() {
            let _ = reply.send(Ok(n));
        }
    }

    /// Serves a consumer command and every other one waiting, then uses the credit they
    /// returned at once (rather than after a batch of possibly paged, slower publishes).
    fn handle_control(&mut self, first: QueueCmd, control: &mut mpsc::UnboundedReceiver<QueueCmd>) {
        self.handle(first);
        while !self.stopped {
            match control.try_recv() {
                Ok(cmd) => self.handle(cmd),
                Err(_) => break,
            }
        }
        if !self.stopped {
            self.deliver();
        }
    }

    /// The message as a client receives it: with `x-delivery-count` on a redelivery from a
    /// queue with a delivery limit.
    fn as_delivered(&self, msg: Arc<Message>, returns: u32) -> Arc<Message> {
        if returns > 0 && self.args.delivery_limit.is_some() {
            Arc::new(msg.with_delivery_count(returns))
        } else {
            msg
        }
    }

    /// Pops the head, keeping the byte count.
    fn pop_ready(&mut self) -> Option<Ready> {
        self.ready.pop_front()
    }

    /// Hands this batch's writes to the store (or the journal), in order, then answers
    /// flush requests.
    async fn write_pending(&mut self) {
        if let Some(journal) = self.shared.journal.clone() {
            if self.mark_dirty {
                self.mark_dirty = false;
                journal.delivered(self.delivered_mark);
            }
            for p in self.pending.drain(..) {
                match p {
                    Pending::Put(seq, msg, _, token) => journal.put(seq, msg, token),
                    Pending::Confirm(token) => journal.confirm(token),
                    Pending::Forget(seqs) => journal.remove(seqs),
                    Pending::ForgetRange(from, to) => journal.remove_range(from, to),
                    Pending::DeadLettered(seq, copy) => journal.dead_lettered(seq, &copy),
                    Pending::DeadLettersSent(seqs) => journal.dead_letters_sent(seqs),
                    Pending::Op(_) => {}
                }
            }
            if self.enqueuers.dirty {
                self.enqueuers.dirty = false;
                journal.enqueuers(self.enqueuers.list());
            }
        } else if let Some(id) = self.shared.store_id {
            if self.mark_dirty {
                self.mark_dirty = false;
                self.pending.push(Pending::Op(Op::Delivered {
                    queue: id,
                    seq: self.delivered_mark,
                }));
            }
            for p in self.pending.drain(..) {
                match p {
                    Pending::Put(seq, msg, expires_at, token) => {
                        self.store
                            .put_message(id, seq, msg, expires_at, token)
                            .await
                    }
                    Pending::Confirm(token) => token.complete(true),
                    Pending::Forget(seqs) => {
                        self.store.submit(Op::DeleteMessages { queue: id, seqs })
                    }
                    Pending::ForgetRange(from, to) => self.store.submit(Op::DeleteRange {
                        queue: id,
                        from,
                        to,
                    }),
                    Pending::Op(op) => self.store.submit(op),
                    // Without a journal the message itself stays stored until its copy is
                    // confirmed (`forget_stored` then).
                    Pending::DeadLettered(..) | Pending::DeadLettersSent(_) => {}
                }
            }
        }
        for w in self.flush_waiters.drain(..) {
            let _ = w.send(());
        }
        for w in self.sync_waiters.drain(..) {
            match &self.shared.journal {
                Some(journal) => journal.sync(w),
                None => {
                    let _ = w.send(true);
                }
            }
        }
    }

    /// Takes a published message in (`sent`: numbered by an enqueuer that may send it again).
    fn enqueue(
        &mut self,
        msg: Arc<Message>,
        token: Option<ConfirmToken>,
        sent: Option<super::Sent>,
    ) {
        self.shared.taken(&msg);
        let sent = sent.filter(|_| self.shared.journal.is_some());
        if sent.is_some_and(|s| self.enqueuers.taken(s)) {
            // A copy of a message taken before (its sender did not hear back): its confirm
            // follows the first copy's write.
            if let Some(t) = token {
                self.pending.push(Pending::Confirm(t));
            }
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if !self.admit(&msg) {
            if let Some(t) = token {
                t.complete(false);
            }
            return;
        }
        if let Some(sent) = sent {
            self.enqueuers.take(sent);
        }
        let ttl = match (self.args.message_ttl, msg.expiration_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.shared.persists(&msg) {
            let expires_at = ttl.map(|t| crate::clock::unix_ms().saturating_add(t));
            self.pending
                .push(Pending::Put(seq, msg.clone(), expires_at, token));
        } else if let Some(t) = token {
            t.complete(true);
        }
        self.stats.add(Counter::Publish, 1);
        let priority = self.ready.level_of(msg.priority);
        self.ready.insert(Ready {
            seq,
            size: msg.body_len() as u64,
            msg: Some(msg),
            redelivered: false,
            expires: ttl.map(|t| now_ms() + t),
            returns: 0,
            priority,
        });
        self.enforce_limits();
    }

    fn handle(&mut self, cmd: QueueCmd) {
        match cmd {
            QueueCmd::Publish(msg, token) => self.enqueue(msg, token, None),
            QueueCmd::PublishFrom(msg, token, sent) => self.enqueue(msg, token, Some(sent)),
            QueueCmd::Policy(args) => {
                self.args = args;
                self.drop_dead_letters_unless_at_least_once();
                self.enforce_limits();
            }
            QueueCmd::DeadLetterSent(seq, sent) => self.dead_letter_sent(seq, sent),
            QueueCmd::Consume(spec, reply) => {
                self.last_used = now_ms();
                let _ = reply.send(self.add_consumer(spec));
            }
            QueueCmd::Cancel(id) => self.remove_consumer(id),
            QueueCmd::Handoff(to) => self.hand_off(&to),
            QueueCmd::Ack(seqs) => {
                let mut stored = Vec::new();
                for seq in seqs {
                    if let Some(u) = self.settle(seq) {
                        self.stats.add(Counter::Ack, 1);
                        if self.shared.persists(&u.msg) {
                            stored.push(seq);
                        }
                    }
                }
                self.forget_stored(stored);
            }
            QueueCmd::Discard(seqs) => {
                for seq in seqs {
                    if let Some(u) = self.settle(seq) {
                        self.drop_message(seq, u.msg, Reason::Rejected);
                    }
                }
            }
            QueueCmd::Requeue(seqs) => {
                let limit = self.args.delivery_limit;
                for seq in seqs {
                    if let Some(u) = self.settle(seq) {
                        let returns = u.returns + 1;
                        if limit.is_some_and(|l| u64::from(returns) > l) {
                            self.drop_message(seq, u.msg, Reason::DeliveryLimit);
                        } else {
                            if let Some(journal) = &self.shared.journal {
                                journal.returned(seq, &u.msg, returns);
                            }
                            self.insert_ready(seq, Some(u.msg), true, returns);
                        }
                    }
                }
            }
            QueueCmd::Undelivered(seq, msg) => {
                let returns = self.settle(seq).map_or(0, |u| u.returns);
                self.insert_ready(seq, Some(msg), true, returns);
            }
            QueueCmd::Get(no_ack, reply) => {
                self.last_used = now_ms();
                self.expire_head();
                let got = self.take_head().map(|(seq, msg, redelivered, returns)| {
                    self.note_delivered(seq, &msg);
                    self.stats.add(
                        if no_ack {
                            Counter::GetNoAck
                        } else {
                            Counter::Get
                        },
                        1,
                    );
                    self.stats.add(Counter::Redeliver, u64::from(redelivered));
                    if no_ack {
                        if self.shared.persists(&msg) {
                            self.forget_stored(vec![seq]);
                        }
                    } else {
                        self.unacked.insert(
                            seq,
                            Unacked {
                                msg: msg.clone(),
                                consumer: None,
                                returns,
                                since: now_ms(),
                            },
                        );
                    }
                    GetResult {
                        seq,
                        msg: self.as_delivered(msg, returns),
                        redelivered,
                        remaining: self.ready.len() as u32,
                    }
                });
                if got.is_none() && self.reserving && !self.ready.is_empty() {
                    // Answered once the replicated queue's delivered mark is written.
                    self.held_gets.push((no_ack, reply));
                    return;
                }
                let _ = reply.send(got);
            }
            QueueCmd::Peek(count, reply) => {
                // Expired messages are not shown: they would never be delivered.
                self.expire_head();
                let _ = reply.send(self.peek(count as usize));
            }
            QueueCmd::Purge(reply) => {
                let n = self.ready.len() as u32;
                let journaled = self.shared.journal.is_some();
                let stored: Vec<u64> = if journaled || self.shared.store_id.is_some() {
                    // Bodies of recovered messages are not loaded; they are stored by definition.
                    self.ready
                        .iter()
                        .filter(|r| journaled || r.msg.as_ref().is_none_or(|m| m.persistent))
                        .map(|r| r.seq)
                        .collect()
                } else {
                    Vec::new()
                };
                let paged = self.ready.clear();
                self.forget_stored(stored);
                if let Some((from, to)) =
                    paged.filter(|_| journaled || self.shared.store_id.is_some())
                {
                    // Persistent messages among the paged ones are in the store too.
                    self.pending.push(Pending::ForgetRange(from, to));
                }
                let _ = reply.send(n);
            }
            QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            } => {
                let r = if if_unused && !self.consumers.is_empty() {
                    Err(CoreError::from(Precondition::InUse {
                        kind: Kind::Queue,
                        name: self.shared.name.clone(),
                        vhost: self.shared.vhost.clone(),
                    }))
                } else if if_empty && !self.ready.is_empty() {
                    Err(CoreError::from(Precondition::NotEmpty {
                        queue: self.shared.name.clone(),
                        vhost: self.shared.vhost.clone(),
                    }))
                } else {
                    Ok(self.ready.len() as u32)
                };
                match r {
                    Ok(n) => {
                        self.stop();
                        self.delete_reply = Some((reply, n));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            QueueCmd::Stats(reply) => {
                let _ = reply.send((self.ready.len() as u32, self.consumers.len() as u32));
            }
            QueueCmd::Info(reply) => {
                let _ = reply.send(self.info());
            }
            QueueCmd::Consumers(reply) => {
                let list = self
                    .consumers
                    .iter()
                    .map(|c| super::ConsumerSummary {
                        tag: c.spec.tag.clone(),
                        channel: c.spec.channel,
                        connection: c.spec.connection,
                        ack_required: !c.spec.no_ack,
                        exclusive: c.spec.exclusive,
                        prefetch: c.spec.prefetch,
                        priority: c.spec.priority,
                        timeout: c.spec.timeout,
                    })
                    .collect();
                let _ = reply.send(list);
            }
            QueueCmd::Flush(reply) => self.flush_waiters.push(reply),
            QueueCmd::Sync(reply) => self.sync_waiters.push(reply),
            QueueCmd::Reserved(mark, committed) => {
                self.reserving = false;
                if committed {
                    self.reserved = self.reserved.max(Some(mark));
                }
                for (no_ack, reply) in std::mem::take(&mut self.held_gets) {
                    self.handle(QueueCmd::Get(no_ack, reply));
                }
            }
            QueueCmd::Touch => self.last_used = now_ms(),
            QueueCmd::TakenFrom(enqueuer, reply) => {
                let _ = reply.send(self.enqueuers.highest(enqueuer));
            }
            QueueCmd::Sample => {
                self.stats.sample();
                self.capacity.sample();
            }
            QueueCmd::Shutdown => self.stopped = true,
            QueueCmd::Kick
            | QueueCmd::RemoteDeliveries(..)
            | QueueCmd::RemoteCancelled(_)
            | QueueCmd::RemoteTimedOut(..)
            | QueueCmd::Stream(_) => {}
        }
    }

    /// Deletes acknowledged or dropped messages from the store (or the journal).
    fn forget_stored(&mut self, seqs: Vec<u64>) {
        let kept = self.shared.store_id.is_some() || self.shared.journal.is_some();
        if kept && !seqs.is_empty() {
            self.pending.push(Pending::Forget(seqs));
        }
    }

    /// Remembers that a stored message reached a client, for the redelivered flag after a
    /// crash (a replicated queue's mark goes ahead of its deliveries instead: `may_hand_out`).
    fn note_delivered(&mut self, seq: u64, msg: &Message) {
        let journaled = self.shared.journal.is_some();
        if seq > self.delivered_mark && !journaled && self.shared.persists(msg) {
            self.delivered_mark = seq;
            self.mark_dirty = true;
        }
    }

    /// Removes an unacked entry and returns the consumer's credit.
    fn settle(&mut self, seq: u64) -> Option<Unacked> {
        let u = self.unacked.remove(&seq)?;
        if let Some(id) = u.consumer {
            if let Some(c) = self.consumers.iter_mut().find(|c| c.spec.id == id) {
                c.unacked = c.unacked.saturating_sub(1);
            }
        }
        Some(u)
    }

    /// Puts a message back at its original position (the ready list is ordered by sequence).
    fn insert_ready(
        &mut self,
        seq: u64,
        msg: Option<Arc<Message>>,
        redelivered: bool,
        returns: u32,
    ) {
        let priority = self.ready.level_of(msg.as_ref().and_then(|m| m.priority));
        self.ready.insert(Ready {
            seq,
            size: msg.as_ref().map_or(0, |m| m.body_len() as u64),
            msg,
            redelivered,
            expires: None,
            returns,
            priority,
        });
    }

    /// Ends the task because the queue is deleted: consumers are told with basic.cancel and
    /// its stored messages go.
    fn stop(&mut self) {
        for c in self.consumers.drain(..) {
            let _ = c.spec.sink.send(ConsumerEvent::Cancelled {
                channel: c.spec.channel,
                tag: c.spec.tag.clone(),
            });
        }
        self.ready.clear();
        self.unacked.clear();
        if let Some(id) = self.shared.store_id {
            self.pending.push(Pending::Op(Op::delete_queue(
                &self.shared.vhost,
                &self.shared.name,
                id,
            )));
        }
        self.stopped = true;
    }
}
