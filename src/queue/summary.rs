//! What the management API reads of a queue: its counters, a stream's log position, and
//! its consumers.

use super::stats;
use std::sync::Arc;

/// Counters of a queue for the management API.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueInfo {
    /// Ready messages.
    pub messages_ready: u32,
    /// Delivered, not yet acknowledged.
    pub messages_unacknowledged: u32,
    /// Dead-lettered, held until their targets confirm them (at-least-once).
    pub messages_dlx: u32,
    /// Their body bytes.
    pub message_bytes_dlx: u64,
    /// Consumers.
    pub consumers: u32,
    /// Body bytes of the ready messages.
    pub message_bytes_ready: u64,
    /// Body bytes of the unacknowledged messages.
    pub message_bytes_unacknowledged: u64,
    /// Messages whose bodies are in memory (ready and unacknowledged).
    pub messages_ram: u32,
    /// Their body bytes.
    pub message_bytes_ram: u64,
    /// Ready messages paged out to disk (beyond the queue's in-memory window).
    pub messages_paged_out: u32,
    /// Their body bytes.
    pub message_bytes_paged_out: u64,
    /// Estimated heap bytes the queue holds: bodies in memory plus per-message bookkeeping.
    pub memory: u64,
    /// Share of the last sampling interval its consumers could take messages (0 without
    /// consumers).
    pub consumer_utilisation: f64,
    /// When the queue last saw activity (publish, delivery, settle, consume), Unix ms.
    pub last_activity: u64,
    /// The `timestamp` property of the message at the head, if it has one and is in memory.
    pub head_message_timestamp: Option<u64>,
    /// Message counters and rates.
    pub message_stats: stats::MessageStats,
    /// A stream's log: its offsets and segments.
    pub stream: Option<StreamOffsets>,
}

/// Where a stream's log stands, for the management API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOffsets {
    /// The oldest offset kept.
    pub first: u64,
    /// The offset the next record gets; every record before it is on disk.
    pub next: u64,
    /// The first offset of the newest committed chunk (osiris's `committed_offset`), None
    /// while the log is empty.
    pub committed_chunk: Option<u64>,
    /// Segment files kept, the one being written included.
    pub segments: usize,
    /// Bytes in segment files.
    pub bytes: u64,
}

/// A consumer as the management API shows it.
#[derive(Clone, Debug)]
pub struct ConsumerSummary {
    /// Consumer tag.
    pub tag: Arc<str>,
    /// Channel number.
    pub channel: u16,
    /// Owning connection id.
    pub connection: u64,
    /// Deliveries need acks.
    pub ack_required: bool,
    /// Exclusive consumer.
    pub exclusive: bool,
    /// Per-consumer prefetch (0: none).
    pub prefetch: u32,
    /// Consumer priority.
    pub priority: i32,
    /// Milliseconds a delivery may stay unacknowledged (0: no limit).
    pub timeout: u64,
}
