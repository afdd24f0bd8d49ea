//! Stream queues (`x-queue-type: stream`) over AMQP 0-9-1: an append-only log that any
//! number of consumers read from an offset of their choosing, as RabbitMQ's stream queues.
//! The queue's task owns the segment log (`store::stream`). Publishes that arrive while the
//! previous write is under way are gathered into the next chunk, and each chunk is written
//! and synced off the task (the blocking pool) before its publishers are confirmed: a
//! confirm means the message is on disk, as on every other queue. Consumers read chunks
//! through their own file handles, never past what is synced, within their prefetch: an ack
//! (or a nack, or a reject) only gives credit back, nothing is removed. Retention
//! (`x-max-length-bytes`, `x-max-age` and their policies) deletes whole old segments after
//! writes and on every statistics sample. Stream-protocol publishers and subscriptions
//! (`clients`) share the same writes and the same log.

mod clients;
mod consumers;
mod single_active;

pub use clients::{
    ChunkData, EventSink, LogStats, StreamCmd, StreamEvent, MAX_BACKLOG, STREAM_TAG_PREFIX,
};
pub use consumers::{consume_filter, consume_offset};
pub use single_active::SingleActive;

use super::actor::Mailbox;
use super::stats::{Counter, Stats};
use super::{QueueCmd, QueueRef};
use crate::confirm::ConfirmToken;
use crate::error::{CoreError, Kind, Precondition};
use crate::store::stream::bloom::DEFAULT_FILTER_SIZE;
use crate::store::stream::chunk::ChunkBuilder;
use crate::store::stream::{record, LogOptions, OffsetSpec, StreamLog, StreamLogError};
use crate::store::{Op, Store};
use clients::{PendingAppend, Subscription};
use consumers::StreamConsumer;
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Commands handled per wake-up.
const BATCH: usize = 512;

/// A chunk is closed at this many bytes of records and the next one started.
const CHUNK_BYTES: usize = 1 << 20;

/// What a write on the blocking pool gives back: the log and the write's outcome.
type Written = (StreamLog, Result<(), StreamLogError>);

/// A write under way on the blocking pool.
type Write = JoinHandle<Written>;

/// Who waits for a write: AMQP publishers' tokens and stream-protocol publishing ids.
#[derive(Default)]
struct Waiting {
    tokens: Vec<ConfirmToken>,
    appends: Vec<PendingAppend>,
}

impl Waiting {
    fn complete(self, ok: bool) {
        for t in self.tokens {
            t.complete(ok);
        }
        for a in self.appends {
            a.complete(ok);
        }
    }
}

struct StreamQueue {
    shared: QueueRef,
    args: Arc<crate::args::QueueArgs>,
    store: Store,
    /// None while a write has it (or when it could not be opened: `broken`).
    log: Option<StreamLog>,
    /// The log failed: publishes are refused (negative confirms) until a restart.
    broken: bool,
    /// The offset after the last synced record: readers never go past it.
    committed: u64,
    /// The oldest offset kept (as of the last time the log was here).
    first: u64,
    /// The log's offsets and size as of the last time it was here (for the management API,
    /// which must not wait for a write).
    facts: super::StreamOffsets,
    /// Chunks gathered for the next write, and their publishers' tokens.
    chunks: Vec<ChunkBuilder>,
    tokens: Vec<ConfirmToken>,
    /// Stream-protocol publishing ids of the gathered chunks.
    pending: Vec<PendingAppend>,
    /// The last publishing id of each deduplicating publisher (gathered ones included).
    writers: FxHashMap<Arc<str>, u64>,
    /// Offsets consumers stored, and whether they changed since last saved.
    offsets: HashMap<String, u64>,
    offsets_dirty: bool,
    consumers: Vec<StreamConsumer>,
    subscriptions: Vec<Subscription>,
    /// Stream-protocol connections with publishers on the stream, told when it is deleted.
    watchers: Vec<(u64, EventSink)>,
    /// `ResolveOffsetSpec`s waiting for the log.
    resolving: Vec<(OffsetSpec, tokio::sync::oneshot::Sender<Option<u64>>)>,
    /// Delivery sequence number -> consumer id, for the credit an ack returns.
    unacked: rustc_hash::FxHashMap<u64, u64>,
    next_seq: u64,
    stats: Stats,
    last_activity: u64,
    stopped: bool,
    /// The queue was deleted: its files go once the last write is back.
    deleting: Option<tokio::sync::oneshot::Sender<crate::error::CoreResult<u32>>>,
}

/// A max age as the log takes it (an absurdly long one is as good as forever).
fn age_ms(age: u64) -> i64 {
    i64::try_from(age).unwrap_or(i64::MAX)
}

fn log_options(args: &crate::args::QueueArgs) -> LogOptions {
    let mut o = LogOptions::default();
    if let Some(n) = args.max_segment_size_bytes.filter(|n| *n > 0) {
        o.max_segment_bytes = n;
    }
    o
}

/// Starts the task of stream queue `shared`, opening (or creating) its log.
pub(super) fn start<H: super::QueueHost>(shared: QueueRef, host: &Arc<H>, rx: Mailbox) {
    let store = host.store().clone();
    let args = shared.applied().args.clone();
    let log = match shared.store_id {
        Some(id) => match store.open_stream(id, log_options(&args)) {
            Ok(log) => Some(log),
            Err(e) => {
                tracing::error!(queue = %shared.name, error = %e, "cannot open the stream's log");
                None
            }
        },
        None => None,
    };
    let committed = log.as_ref().map_or(0, |l| l.next_offset());
    let writers = log.as_ref().map_or_else(FxHashMap::default, |l| {
        l.writers()
            .iter()
            .map(|(r, s)| (Arc::from(r.as_str()), *s))
            .collect()
    });
    let offsets = match log.as_ref().map(StreamLog::stored_offsets) {
        Some(Ok(o)) => o,
        Some(Err(e)) => {
            tracing::error!(queue = %shared.name, error = %e, "cannot read the stream's stored offsets");
            HashMap::new()
        }
        None => HashMap::new(),
    };
    let first = log.as_ref().map_or(0, |l| l.first_offset());
    let facts = log.as_ref().map(facts_of).unwrap_or_default();
    let q = StreamQueue {
        broken: log.is_none(),
        shared,
        args,
        store,
        log,
        committed,
        first,
        facts,
        chunks: Vec::new(),
        tokens: Vec::new(),
        pending: Vec::new(),
        writers,
        offsets,
        offsets_dirty: false,
        consumers: Vec::new(),
        subscriptions: Vec::new(),
        watchers: Vec::new(),
        resolving: Vec::new(),
        unacked: Default::default(),
        next_seq: 1,
        stats: Stats::default(),
        last_activity: crate::clock::unix_ms(),
        stopped: false,
        deleting: None,
    };
    tokio::spawn(q.run(rx));
}

/// Where `log` stands (its last chunk counts as committed: called when no write is under way
/// or after one was synced).
fn facts_of(log: &StreamLog) -> super::StreamOffsets {
    super::StreamOffsets {
        first: log.first_offset(),
        next: log.next_offset(),
        committed_chunk: log.last_chunk().map(|(id, _)| id),
        segments: log.segments(),
        bytes: log.size_bytes(),
    }
}

/// Waits for the write under way (forever when there is none): its outcome and who waits.
async fn finish(
    w: &mut Option<(Write, Waiting)>,
) -> (Result<Written, tokio::task::JoinError>, Waiting) {
    match w.as_mut() {
        Some((handle, _)) => {
            let r = handle.await;
            let tokens = w.take().map(|(_, t)| t).unwrap_or_default();
            (r, tokens)
        }
        None => std::future::pending().await,
    }
}

impl StreamQueue {
    async fn run(mut self, rx: Mailbox) {
        let (mut data, mut control) = rx.into_parts();
        let mut batch = Vec::new();
        let mut writing: Option<(Write, Waiting)> = None;
        while !self.stopped {
            tokio::select! {
                Some(cmd) = control.recv() => self.handle(cmd),
                n = data.recv_many(&mut batch, BATCH) => {
                    if n == 0 {
                        break;
                    }
                    for cmd in batch.drain(..) {
                        self.handle(cmd);
                        if self.stopped {
                            break;
                        }
                    }
                }
                (done, waiting) = finish(&mut writing) => self.written(done, waiting),
            }
            // One clock read per wake-up, not per command.
            self.last_activity = crate::clock::unix_ms();
            if writing.is_none() {
                writing = self.start_write();
            }
            self.deliver();
            self.deliver_chunks();
        }
        self.shared.closed();
        // A stop that is no deletion (the broker shuts down) still writes what it gathered.
        if writing.is_none() && self.deleting.is_none() {
            writing = self.start_write();
        }
        while writing.is_some() {
            let (done, waiting) = finish(&mut writing).await;
            self.written(done, waiting);
            if self.deleting.is_none() {
                writing = self.start_write();
            }
        }
        Waiting {
            tokens: std::mem::take(&mut self.tokens),
            appends: std::mem::take(&mut self.pending),
        }
        .complete(false);
        if let Some(reply) = self.deleting.take() {
            if let Some(log) = self.log.take() {
                if let Err(e) = log.destroy() {
                    tracing::error!(queue = %self.shared.name, error = %e, "cannot delete the stream's files");
                }
            }
            let _ = reply.send(Ok(0));
        }
    }

    /// Hands the gathered chunks (and the stored offsets, when they changed) to the blocking
    /// pool: appended, synced, then retention.
    fn start_write(&mut self) -> Option<(Write, Waiting)> {
        if self.chunks.is_empty() && !self.offsets_dirty {
            return None;
        }
        let mut log = self.log.take()?;
        let chunks = std::mem::take(&mut self.chunks);
        let waiting = Waiting {
            tokens: std::mem::take(&mut self.tokens),
            appends: std::mem::take(&mut self.pending),
        };
        let offsets: Option<Vec<(String, u64)>> = std::mem::take(&mut self.offsets_dirty)
            .then(|| self.offsets.iter().map(|(r, o)| (r.clone(), *o)).collect());
        let (max_bytes, max_age) = (self.args.max_length_bytes, self.args.max_age);
        let queue = self.shared.name.clone();
        let handle = tokio::task::spawn_blocking(move || {
            if let Some(o) = offsets {
                if let Err(e) = log.save_offsets(&o) {
                    tracing::error!(%queue, error = %e, "cannot save the stream's stored offsets");
                }
            }
            let now = crate::clock::unix_ms() as i64;
            let mut outcome = Ok(());
            for c in chunks {
                if let Err(e) = log.append(c, now) {
                    outcome = Err(e);
                    break;
                }
            }
            let outcome = outcome.and_then(|()| log.sync());
            // Retention failing does not undo the write: its publishers are confirmed.
            if let Err(e) = log.apply_retention(max_bytes, max_age.map(age_ms), now) {
                tracing::error!(%queue, error = %e, "stream retention failed");
            }
            (log, outcome)
        });
        Some((handle, waiting))
    }

    /// A write came back: its publishers are confirmed (or refused), readers may go on.
    fn written(&mut self, done: Result<Written, tokio::task::JoinError>, waiting: Waiting) {
        let ok = match done {
            Ok((log, outcome)) => {
                self.committed = log.next_offset();
                self.first = log.first_offset();
                self.facts = facts_of(&log);
                self.log = Some(log);
                match outcome {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(queue = %self.shared.name, error = %e, "stream write failed");
                        false
                    }
                }
            }
            Err(e) => {
                tracing::error!(queue = %self.shared.name, error = %e, "stream write task failed");
                false
            }
        };
        if !ok {
            self.broken = true;
        }
        waiting.complete(ok);
        self.attach_readers();
    }

    /// Adds a record to the chunk being gathered (a new one when it is full or the record
    /// does not fit); false when the record fits in no chunk.
    fn gather(&mut self, push: impl Fn(&mut ChunkBuilder) -> bool) -> bool {
        let fits = |c: &ChunkBuilder| c.data_len() < CHUNK_BYTES;
        let fresh = |q: &Self| {
            let size = q.shared.applied().args.filter_size_bytes;
            ChunkBuilder::default().with_filter_size(size.unwrap_or(DEFAULT_FILTER_SIZE))
        };
        if !self.chunks.last().is_some_and(fits) {
            let c = fresh(self);
            self.chunks.push(c);
        }
        if self.chunks.last_mut().is_some_and(&push) {
            return true;
        }
        let mut fresh = fresh(self);
        let pushed = push(&mut fresh);
        self.chunks.push(fresh);
        pushed
    }

    fn publish(&mut self, msg: &crate::message::Message, token: Option<ConfirmToken>) {
        self.shared.taken(msg);
        if self.broken || self.stopped {
            if let Some(t) = token {
                t.complete(false);
            }
            return;
        }
        let filter = consumers::filter_value(msg);
        let filter = filter.as_deref().map(str::as_bytes);
        let pushed = self.gather(|c| record::push_message(c, msg, filter));
        match (pushed, token) {
            (true, Some(t)) => self.tokens.push(t),
            (false, Some(t)) => t.complete(false),
            _ => {}
        }
        if pushed {
            self.stats.add(Counter::Publish, 1);
        }
    }

    fn handle(&mut self, cmd: QueueCmd) {
        match cmd {
            QueueCmd::Publish(msg, token) | QueueCmd::PublishFrom(msg, token, _) => {
                self.publish(&msg, token)
            }
            QueueCmd::Consume(spec, reply) => {
                let _ = reply.send(Ok(()));
                self.consumers.push(StreamConsumer::new(spec));
                self.attach_readers();
            }
            QueueCmd::Cancel(id) => self.consumers.retain(|c| c.spec.id != id),
            QueueCmd::Ack(seqs) | QueueCmd::Requeue(seqs) | QueueCmd::Discard(seqs) => {
                self.stats.add(Counter::Ack, seqs.len() as u64);
                for s in seqs {
                    self.settle(s);
                }
            }
            QueueCmd::Undelivered(seq, _) => self.settle(seq),
            QueueCmd::Get(_, reply) => {
                let _ = reply.send(None);
            }
            QueueCmd::Peek(_, reply) => {
                let _ = reply.send(Vec::new());
            }
            QueueCmd::Purge(reply) => {
                let _ = reply.send(0);
            }
            QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            } => {
                if if_unused && !self.consumers.is_empty() {
                    let _ = reply.send(Err(CoreError::from(Precondition::InUse {
                        kind: Kind::Queue,
                        name: self.shared.name.clone(),
                        vhost: self.shared.vhost.clone(),
                    })));
                } else if if_empty && self.messages() > 0 {
                    let _ = reply.send(Err(CoreError::from(Precondition::NotEmpty {
                        queue: self.shared.name.clone(),
                        vhost: self.shared.vhost.clone(),
                    })));
                } else {
                    self.stop();
                    self.deleting = Some(reply);
                }
            }
            QueueCmd::Stats(reply) => {
                // RabbitMQ answers declare and passive declare of a stream with 0 messages.
                let _ = reply.send((0, self.consumers.len() as u32));
            }
            QueueCmd::Info(reply) => {
                let _ = reply.send(self.info());
            }
            QueueCmd::Consumers(reply) => {
                let amqp = self.consumers.iter().map(|c| c.summary());
                let stream = self.subscriptions.iter().map(|s| s.summary());
                let _ = reply.send(amqp.chain(stream).collect());
            }
            QueueCmd::Flush(reply) => {
                let _ = reply.send(());
            }
            QueueCmd::Sync(reply) => {
                let _ = reply.send(true);
            }
            QueueCmd::Policy(args) => self.args = args,
            QueueCmd::Sample => {
                self.stats.sample();
                self.apply_age_retention();
            }
            QueueCmd::Shutdown => self.stopped = true,
            QueueCmd::Touch
            | QueueCmd::TakenFrom(..)
            | QueueCmd::Kick
            | QueueCmd::Handoff(_)
            | QueueCmd::Reserved(..)
            | QueueCmd::DeadLetterSent(..)
            | QueueCmd::RemoteDeliveries(..)
            | QueueCmd::RemoteCancelled(_)
            | QueueCmd::RemoteTimedOut(..) => {}
            QueueCmd::Stream(cmd) => self.stream_cmd(cmd),
        }
    }

    /// Deletes segments past `x-max-age` when no write is under way (writes apply retention
    /// themselves).
    fn apply_age_retention(&mut self) {
        let Some(age) = self.args.max_age else {
            return;
        };
        if let Some(log) = self.log.as_mut() {
            let now = crate::clock::unix_ms() as i64;
            if let Err(e) = log.apply_retention(None, Some(age_ms(age)), now) {
                tracing::error!(queue = %self.shared.name, error = %e, "stream retention failed");
            }
            self.first = log.first_offset();
            self.facts = facts_of(log);
        }
    }

    /// Records in the log.
    fn messages(&self) -> u64 {
        self.committed.saturating_sub(self.first)
    }

    fn settle(&mut self, seq: u64) {
        if let Some(id) = self.unacked.remove(&seq) {
            if let Some(c) = self.consumers.iter_mut().find(|c| c.spec.id == id) {
                c.unacked = c.unacked.saturating_sub(1);
            }
        }
    }

    /// Ends the task because the queue is deleted: consumers are cancelled, its record goes
    /// from the store (its files when the task ends).
    fn stop(&mut self) {
        for c in self.consumers.drain(..) {
            c.cancelled();
        }
        self.end_subscriptions();
        if let Some(id) = self.shared.store_id {
            self.store
                .submit(Op::delete_queue(&self.shared.vhost, &self.shared.name, id));
        }
        self.stopped = true;
    }

    fn info(&self) -> super::QueueInfo {
        super::QueueInfo {
            messages_ready: self.messages().min(u64::from(u32::MAX)) as u32,
            messages_unacknowledged: self.unacked.len() as u32,
            consumers: (self.consumers.len() + self.subscriptions.len()) as u32,
            message_bytes_ready: self.facts.bytes,
            stream: Some(self.facts),
            last_activity: self.last_activity,
            message_stats: self.stats.snapshot(),
            ..Default::default()
        }
    }
}
