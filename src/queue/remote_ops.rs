//! What a node asks a queue's home node and what it answers ([`RemoteOp`], [`RemoteReply`]),
//! with the message, consumer and counter forms they carry. Serialized on the cluster's
//! inter-node connections; [`super::remote`] sends them and re-exports them.

use super::QueueInfo;
use crate::message::Message;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A message as it travels between nodes: where it was published, its raw properties and
/// body.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireMessage {
    /// Exchange it was published to.
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// Length of the properties at the start of `data`.
    pub props_len: u32,
    /// Properties then body.
    pub data: Bytes,
}

impl WireMessage {
    /// The wire form of `m`.
    pub fn of(m: &Message) -> WireMessage {
        WireMessage {
            exchange: m.exchange.to_string(),
            routing_key: m.routing_key.to_string(),
            props_len: u32::try_from(m.raw_properties().len()).unwrap_or(u32::MAX),
            data: Bytes::copy_from_slice(m.data()),
        }
    }

    /// The message again; None when its properties do not parse.
    pub fn message(self) -> Option<Message> {
        Message::from_stored_bytes(
            &self.exchange,
            &self.routing_key,
            self.props_len as usize,
            self.data,
        )
    }
}

/// A consumer on another node, as its queue's home node registers it.
#[derive(Debug, Serialize, Deserialize)]
pub struct RemoteConsumer {
    /// The consumer's id on its own node.
    pub id: u64,
    /// Consumer tag.
    pub tag: String,
    /// Channel number.
    pub channel: u16,
    /// Deliveries need no ack.
    pub no_ack: bool,
    /// Exclusive consumer.
    pub exclusive: bool,
    /// Unacked deliveries it may hold (0: no limit): its own prefetch or its channel's.
    pub prefetch: u32,
    /// Consumer priority.
    pub priority: i32,
    /// Consumer timeout, milliseconds (0: none).
    pub timeout: u64,
}

/// What a queue's home node is asked on behalf of another node.
#[derive(Debug, Serialize, Deserialize)]
pub enum RemoteOp {
    /// Enqueue these, each with whether its publisher waits for a confirm; numbered from
    /// `.1` when they may be sent again (to a quorum queue), so copies are dropped. `.2`: a
    /// batch of the same enqueuer sent before this one was unanswered when this one was
    /// sent, so the home enqueues this one only after it (their calls may arrive in either
    /// order, and a copy is known by a number below the highest taken).
    Publish(Vec<(WireMessage, bool)>, Option<super::Sent>, bool),
    /// (ready messages, consumers).
    Stats,
    /// Counters for the management API.
    Info,
    /// basic.get.
    Get {
        /// Settled on delivery.
        no_ack: bool,
    },
    /// Acknowledge by sequence number.
    Ack(Vec<u64>),
    /// Return to the queue, redelivered.
    Requeue(Vec<u64>),
    /// Drop (reject, nack without requeue).
    Discard(Vec<u64>),
    /// Drop every ready message.
    Purge,
    /// queue.delete.
    Delete {
        /// Only when it has no consumers.
        if_unused: bool,
        /// Only when it has no messages.
        if_empty: bool,
    },
    /// Register a consumer whose connection is on another node.
    Consume(RemoteConsumer),
    /// Remove the consumer with this id on the asking node.
    Cancel(u64),
    /// The queue was used (redeclared) on the asking node: its `x-expires` starts again.
    Touch,
    /// Answered `Done` once the settlements the asking node sent before are committed, by
    /// the home task they went to (this [`super::QueueShared::instance`]; refused when that task
    /// has been replaced since: what it took may not have been written).
    Sync(u64),
    /// Up to this many ready messages from the head, left where they are.
    Peek(u32),
}

/// Counters of a remote queue (the management API's subset).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RemoteInfo {
    /// Ready messages.
    pub ready: u32,
    /// Unacknowledged.
    pub unacked: u32,
    /// Consumers.
    pub consumers: u32,
    /// Body bytes ready.
    pub bytes_ready: u64,
    /// Body bytes unacknowledged.
    pub bytes_unacked: u64,
    /// Estimated memory.
    pub memory: u64,
}

impl RemoteInfo {
    /// The counters of `i`.
    pub fn of(i: &QueueInfo) -> RemoteInfo {
        RemoteInfo {
            ready: i.messages_ready,
            unacked: i.messages_unacknowledged,
            consumers: i.consumers,
            bytes_ready: i.message_bytes_ready,
            bytes_unacked: i.message_bytes_unacknowledged,
            memory: i.memory,
        }
    }

    pub(super) fn info(&self) -> QueueInfo {
        QueueInfo {
            messages_ready: self.ready,
            messages_unacknowledged: self.unacked,
            consumers: self.consumers,
            message_bytes_ready: self.bytes_ready,
            message_bytes_unacknowledged: self.bytes_unacked,
            memory: self.memory,
            ..QueueInfo::default()
        }
    }
}

/// What basic.get on a remote queue handed out.
#[derive(Debug, Serialize, Deserialize)]
pub struct RemoteGot {
    /// The home queue's sequence number.
    pub seq: u64,
    /// The message.
    pub msg: WireMessage,
    /// Delivered before.
    pub redelivered: bool,
    /// Ready messages left.
    pub remaining: u32,
    /// The home task that handed it out ([`super::QueueShared::instance`]).
    pub instance: u64,
}

/// One delivery from the home node to a consumer here.
#[derive(Debug, Serialize, Deserialize)]
pub struct RemoteDelivery {
    /// The home queue's sequence number.
    pub seq: u64,
    /// Delivered before.
    pub redelivered: bool,
    /// The message.
    pub msg: WireMessage,
    /// The home task that made it ([`super::QueueShared::instance`]).
    pub instance: u64,
}

/// The home node's answer to a [`RemoteOp`].
#[derive(Debug, Serialize, Deserialize)]
pub enum RemoteReply {
    /// To `Publish`: stored (or accepted) per message.
    Published(Vec<bool>),
    /// To `Stats`.
    Stats(u32, u32),
    /// To `Info`.
    Info(RemoteInfo),
    /// To `Get`.
    Got(Option<RemoteGot>),
    /// To `Purge` and `Delete`: a message count.
    Count(u32),
    /// To settlements, `Consume` and `Cancel`.
    Done,
    /// The operation failed there: its reply code and text.
    Failed(u16, String),
    /// To `Peek`: each message with whether it was delivered before.
    Peeked(Vec<(WireMessage, bool)>),
}
