//! A stream's stream-protocol clients, as its task sees them: publishers whose records are
//! appended as they came (AMQP 1.0 messages) and confirmed by publishing id after the write
//! is synced, deduplicated by publisher reference (a publishing id at or below the last one
//! stored for the reference is confirmed, not stored again); subscriptions that get whole
//! chunks, as they are on disk, within a credit counted in chunks (a single active consumer
//! only while its group makes it active: `single_active`); and the offsets consumers store
//! by reference, saved with the next write (or the next statistics tick).

use super::single_active::{Member, Role, SingleActive};
use super::StreamQueue;
use crate::store::stream::bloom::BloomMatcher;
use crate::store::stream::chunk::{self, ChunkBuilder, Entries, Entry, CHUNK_USER};
use crate::store::stream::record;
use crate::store::stream::{FileSpan, LogReader, OffsetSpec};
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Where a connection hears from the streams it uses.
pub type EventSink = mpsc::UnboundedSender<StreamEvent>;

/// Bytes of chunks a connection may have sent to it but not yet written to its socket: past
/// this, its subscriptions wait (whatever their credit) until it wrote some and asks again
/// (a credit of 0), so a slow reader holds at most this much in memory.
pub const MAX_BACKLOG: usize = 4 << 20;

/// What a stream's task tells a stream-protocol connection.
#[derive(Debug)]
pub enum StreamEvent {
    /// These publishing ids of publisher `publisher` are on disk (or were already).
    Confirmed { publisher: u8, ids: Vec<u64> },
    /// These publishing ids were not stored.
    Refused { publisher: u8, ids: Vec<u64> },
    /// A chunk for subscription `subscription` as a reader of data gets it (osiris sends
    /// data readers the same): its header, with no Bloom filter or trailer counted, and its
    /// data entries as on disk.
    Chunk {
        subscription: u8,
        header: [u8; chunk::HEADER_LEN],
        data: ChunkData,
        /// The id (first offset) of the stream's last committed chunk, for deliver v2.
        committed_chunk: u64,
    },
    /// The stream was deleted: its subscriptions ended.
    Deleted { stream: String },
    /// Single active consumer: subscription `subscription` is now the active member of its
    /// group (it reads once the client answered with an offset) or no longer is.
    ConsumerUpdate { subscription: u8, active: bool },
}

/// A delivered chunk's data entries.
#[derive(Debug)]
pub enum ChunkData {
    /// Read, with records converted for stream-protocol readers, by the stream's task.
    Bytes(Bytes),
    /// As they lie in the segment file, for the connection to send from there.
    File(FileSpan),
}

impl ChunkData {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            ChunkData::Bytes(b) => b.len(),
            ChunkData::File(f) => f.len(),
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The consumer tag of a stream-protocol subscription, before its id (RabbitMQ's).
pub const STREAM_TAG_PREFIX: &str = "stream.subid-";

/// What a stream-protocol connection asks of a stream's task.
#[derive(Debug)]
pub enum StreamCmd {
    /// Appends `messages` (publishing id, AMQP 1.0 message, filter value) of publisher
    /// `publisher`; with a `reference`, ids at or below the last stored for it are not stored
    /// again.
    Append {
        publisher: u8,
        reference: Option<Arc<str>>,
        messages: Vec<(u64, Bytes, Option<String>)>,
        events: EventSink,
    },
    /// Starts subscription `id` of connection `connection` at `start` with `credit` chunks;
    /// `backlog` counts the bytes sent to the connection and not yet written by it. A single
    /// active consumer joins its group and reads only when made active.
    Subscribe {
        connection: u64,
        id: u8,
        start: OffsetSpec,
        credit: u16,
        single_active: Option<SingleActive>,
        filter: Option<BloomMatcher>,
        events: EventSink,
        backlog: Arc<AtomicUsize>,
    },
    /// The client of subscription `id` answered a `ConsumerUpdate`, with the offset to read
    /// from when active (`None`: where it subscribed).
    ConsumerUpdated {
        connection: u64,
        id: u8,
        offset: Option<OffsetSpec>,
    },
    /// Gives subscription `id` of `connection` `credit` more chunks.
    Credit {
        connection: u64,
        id: u8,
        credit: u16,
    },
    /// Ends subscription `id` of `connection`.
    Unsubscribe { connection: u64, id: u8 },
    /// Ends every subscription of `connection` (it closed), and its watch.
    Forget { connection: u64 },
    /// Tells `connection` (through `events`) when the stream is deleted: it has publishers on
    /// it, which RabbitMQ sends a metadata update too.
    Watch { connection: u64, events: EventSink },
    /// Stores `offset` for consumer `reference`.
    StoreOffset { reference: String, offset: u64 },
    /// The offset stored for `reference`.
    QueryOffset {
        reference: String,
        reply: oneshot::Sender<Option<u64>>,
    },
    /// The last publishing id stored for publisher `reference` (0: none).
    QuerySequence {
        reference: String,
        reply: oneshot::Sender<u64>,
    },
    /// The offset a reader from `spec` would start at (None: the log cannot be read).
    Resolve {
        spec: OffsetSpec,
        reply: oneshot::Sender<Option<u64>>,
    },
    /// Where the log stands.
    Stats { reply: oneshot::Sender<LogStats> },
}

/// Where a stream's log stands, as `StreamStats` and the management API report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStats {
    /// The first offset kept.
    pub first: u64,
    /// The first offset of the last committed chunk (None: nothing written).
    pub committed_chunk: Option<u64>,
    /// The offset the next message written gets.
    pub next: u64,
}

/// Publishing ids waiting for a write to be synced.
#[derive(Debug)]
pub(super) struct PendingAppend {
    publisher: u8,
    ids: Vec<u64>,
    events: EventSink,
}

impl PendingAppend {
    /// Tells the publisher how its write went.
    pub(super) fn complete(self, ok: bool) {
        let (publisher, ids) = (self.publisher, self.ids);
        let _ = self.events.send(match ok {
            true => StreamEvent::Confirmed { publisher, ids },
            false => StreamEvent::Refused { publisher, ids },
        });
    }
}

/// A stream-protocol subscription.
pub(super) struct Subscription {
    pub(super) connection: u64,
    pub(super) id: u8,
    pub(super) start: OffsetSpec,
    pub(super) reader: Option<LogReader>,
    /// Not reading (an inactive single active consumer, or one waiting for its client).
    pub(super) parked: bool,
    pub(super) single_active: Option<Member>,
    /// The chunks it takes (None: all).
    filter: Option<BloomMatcher>,
    credit: u32,
    events: EventSink,
    backlog: Arc<AtomicUsize>,
}

impl Subscription {
    /// How the management API lists it among the stream's consumers, as RabbitMQ does: tag
    /// `stream.subid-<id>`, no channel, no acks, no prefetch.
    pub(super) fn summary(&self) -> crate::queue::ConsumerSummary {
        crate::queue::ConsumerSummary {
            tag: Arc::from(format!("{STREAM_TAG_PREFIX}{}", self.id)),
            channel: 0,
            connection: self.connection,
            ack_required: false,
            exclusive: false,
            prefetch: 0,
            priority: 0,
            timeout: 0,
        }
    }

    /// Tells the connection whether this single active consumer is now active.
    pub(super) fn tell_consumer_update(&self, active: bool) {
        let _ = self.events.send(StreamEvent::ConsumerUpdate {
            subscription: self.id,
            active,
        });
    }
}

/// A chunk's data as stream-protocol readers take it: records of messages published over
/// AMQP 0-9-1 are converted to AMQP 1.0 (the chunk is rebuilt, its offsets unchanged); a
/// chunk without any is returned as it is.
fn for_stream_readers(h: chunk::ChunkHeader, data: Bytes) -> (chunk::ChunkHeader, Bytes) {
    let is_091 = |e: &Result<Entry<'_>, _>| matches!(e, Ok(Entry::Simple(r)) if r.first() == Some(&record::AMQP_091));
    if !Entries::new(&data).any(|e| is_091(&e)) {
        return (h, data);
    }
    let mut b = ChunkBuilder::with_capacity(data.len() + data.len() / 4);
    for e in Entries::new(&data) {
        match e {
            Ok(Entry::Simple(r)) => {
                let converted = record::as_amqp_10(r);
                b.push_simple(converted.as_deref().unwrap_or(r));
            }
            Ok(Entry::SubBatch {
                compression,
                records,
                uncompressed_len,
                body,
            }) => {
                b.push_sub_batch(compression, records, uncompressed_len, body);
            }
            Err(_) => return (h, data),
        }
    }
    let (rebuilt, bytes) = b.finish(h.first_offset, h.timestamp, h.epoch);
    if rebuilt.num_records != h.num_records {
        return (h, data);
    }
    let bytes = Bytes::from(bytes);
    (rebuilt, bytes.slice(chunk::HEADER_LEN..))
}

impl StreamQueue {
    pub(super) fn stream_cmd(&mut self, cmd: StreamCmd) {
        match cmd {
            StreamCmd::Append {
                publisher,
                reference,
                messages,
                events,
            } => self.append(publisher, reference, messages, events),
            StreamCmd::Subscribe {
                connection,
                id,
                start,
                credit,
                single_active,
                filter,
                events,
                backlog,
            } => {
                let group = single_active.clone();
                self.subscriptions.push(Subscription {
                    connection,
                    id,
                    start,
                    reader: None,
                    parked: single_active.is_some(),
                    single_active: single_active.map(|group| Member {
                        group,
                        role: Role::Inactive,
                    }),
                    filter,
                    credit: u32::from(credit),
                    events,
                    backlog,
                });
                match group {
                    Some(g) => self.regroup(&g),
                    None => self.attach_readers(),
                }
            }
            StreamCmd::ConsumerUpdated {
                connection,
                id,
                offset,
            } => self.consumer_updated(connection, id, offset),
            StreamCmd::Credit {
                connection,
                id,
                credit,
            } => {
                if let Some(s) = self
                    .subscriptions
                    .iter_mut()
                    .find(|s| s.connection == connection && s.id == id)
                {
                    s.credit = s.credit.saturating_add(u32::from(credit));
                }
            }
            StreamCmd::Unsubscribe { connection, id } => {
                self.remove_subscriptions(|s| s.connection == connection && s.id == id)
            }
            StreamCmd::Forget { connection } => {
                self.watchers.retain(|(c, _)| *c != connection);
                self.remove_subscriptions(|s| s.connection == connection)
            }
            StreamCmd::Watch { connection, events } => {
                if !self.watchers.iter().any(|(c, _)| *c == connection) {
                    self.watchers.push((connection, events));
                }
            }
            StreamCmd::StoreOffset { reference, offset } => {
                self.offsets.insert(reference, offset);
                self.offsets_dirty = true;
            }
            StreamCmd::QueryOffset { reference, reply } => {
                let _ = reply.send(self.offsets.get(&reference).copied());
            }
            StreamCmd::QuerySequence { reference, reply } => {
                let _ = reply.send(self.writers.get(reference.as_str()).copied().unwrap_or(0));
            }
            StreamCmd::Resolve { spec, reply } => {
                self.resolving.push((spec, reply));
                self.attach_readers();
            }
            StreamCmd::Stats { reply } => {
                let _ = reply.send(LogStats {
                    first: self.first,
                    committed_chunk: self.facts.committed_chunk,
                    next: self.committed,
                });
            }
        }
    }

    fn append(
        &mut self,
        publisher: u8,
        reference: Option<Arc<str>>,
        messages: Vec<(u64, Bytes, Option<String>)>,
        events: EventSink,
    ) {
        let mut stored = Vec::with_capacity(messages.len());
        let mut refused = Vec::new();
        let mut already = Vec::new();
        for (id, message, filter) in messages {
            if self.broken || self.stopped {
                refused.push(id);
                continue;
            }
            if let Some(r) = &reference {
                if self.writers.get(&**r).is_some_and(|last| id <= *last) {
                    already.push(id);
                    continue;
                }
            }
            let filter = filter.as_deref().map(str::as_bytes);
            if !self.gather(|c| c.push_filtered(&[&message], filter)) {
                refused.push(id);
                continue;
            }
            if let (Some(r), Some(c)) = (&reference, self.chunks.last_mut()) {
                c.track_writer(r, id);
                self.writers.insert(r.clone(), id);
            }
            stored.push(id);
        }
        self.stats
            .add(super::super::stats::Counter::Publish, stored.len() as u64);
        // Ids already stored are confirmed with the write under way, so a publisher never
        // hears of a later id before an earlier one.
        stored.extend(already);
        if !stored.is_empty() {
            let pending = PendingAppend {
                publisher,
                ids: stored,
                events: events.clone(),
            };
            if self.chunks.is_empty() && self.pending.is_empty() {
                pending.complete(true);
            } else {
                self.pending.push(pending);
            }
        }
        if !refused.is_empty() {
            PendingAppend {
                publisher,
                ids: refused,
                events,
            }
            .complete(false);
        }
    }

    /// Ends the subscriptions `gone` picks, and puts the groups they left in order.
    pub(super) fn remove_subscriptions(&mut self, gone: impl Fn(&Subscription) -> bool) {
        let mut left: Vec<SingleActive> = Vec::new();
        self.subscriptions.retain(|s| {
            if !gone(s) {
                return true;
            }
            if let Some(m) = &s.single_active {
                if !left.contains(&m.group) {
                    left.push(m.group.clone());
                }
            }
            false
        });
        for g in left {
            self.regroup(&g);
        }
    }

    /// Places the readers of subscriptions that have none yet.
    pub(super) fn attach_subscriptions(&mut self) {
        let Some(log) = self.log.as_ref() else {
            return;
        };
        // Resolving asked while the log was lent to a write (a numeric offset inside the
        // log is itself; anything else is where its chunk starts).
        for (spec, reply) in self.resolving.drain(..) {
            let at = match spec {
                OffsetSpec::Offset(o) if (log.first_offset()..log.next_offset()).contains(&o) => {
                    Ok(o)
                }
                spec => log.resolve(spec).map(|p| p.chunk_id),
            };
            let _ = reply.send(at.ok());
        }
        for s in self
            .subscriptions
            .iter_mut()
            .filter(|s| s.reader.is_none() && !s.parked)
        {
            match log.reader(s.start) {
                Ok(r) => s.reader = Some(r),
                Err(e) => {
                    tracing::error!(queue = %self.shared.name, error = %e, "cannot read the stream");
                }
            }
        }
    }

    /// Hands committed chunks to every subscription with credit.
    pub(super) fn deliver_chunks(&mut self) {
        let committed = self.committed;
        let mut gone = Vec::new();
        for s in self.subscriptions.iter_mut() {
            while s.credit > 0 && s.backlog.load(Ordering::Acquire) < MAX_BACKLOG {
                let Some(reader) = s.reader.as_mut() else {
                    break;
                };
                let c = match reader.next_chunk_at(committed) {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(queue = %self.shared.name, error = %e, "reading the stream failed");
                        break;
                    }
                };
                if c.header.chunk_type != CHUNK_USER {
                    continue;
                }
                // A chunk the subscription's filter rules out is skipped, its credit kept.
                if s.filter.as_ref().is_some_and(|f| !f.matches(&c.bloom)) {
                    continue;
                }
                // Its data goes as it lies in the file unless records need converting.
                let (h, data) = match c.header.verbatim {
                    true => (c.header, ChunkData::File(c.data)),
                    false => {
                        let mut bytes = Vec::new();
                        if let Err(e) = c.data.read_into(&mut bytes) {
                            tracing::error!(queue = %self.shared.name, error = %e, "reading the stream failed");
                            gone.push((s.connection, s.id));
                            break;
                        }
                        let (h, data) = for_stream_readers(c.header, Bytes::from(bytes));
                        (h, ChunkData::Bytes(data))
                    }
                };
                let header = chunk::ChunkHeader {
                    bloom_len: 0,
                    trailer_len: 0,
                    verbatim: false,
                    ..h
                };
                s.backlog
                    .fetch_add(chunk::HEADER_LEN + data.len(), Ordering::AcqRel);
                let event = StreamEvent::Chunk {
                    subscription: s.id,
                    header: header.encode(),
                    data,
                    committed_chunk: self
                        .facts
                        .committed_chunk
                        .map_or(h.first_offset, |c| c.max(h.first_offset)),
                };
                if s.events.send(event).is_err() {
                    gone.push((s.connection, s.id));
                    break;
                }
                s.credit -= 1;
            }
        }
        if !gone.is_empty() {
            self.remove_subscriptions(|s| gone.contains(&(s.connection, s.id)));
        }
    }

    /// Tells every subscriber and publisher the stream went (a connection drops repeats).
    pub(super) fn end_subscriptions(&mut self) {
        let sinks = self.subscriptions.drain(..).map(|s| s.events);
        for events in sinks.chain(self.watchers.drain(..).map(|(_, e)| e)) {
            let _ = events.send(StreamEvent::Deleted {
                stream: self.shared.name.clone(),
            });
        }
    }
}
