//! What a channel's method handlers may touch (`methods/`): the connection's identity, its
//! vhost handle and user, the outbox replies are encoded into, and the caches of the publish
//! path. The connection task owns one next to the socket, heartbeats, channel table and writer,
//! and hands it with the channel to the handler of each method; a handler never sees the
//! socket or the other channels.

use crate::amqp::codec;
use crate::broker::Broker;
use crate::queue::consumer::ConsumerSink;
use crate::queue::QueueRef;
use crate::vhost::VHost;
use amq_protocol::protocol::AMQPClass;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// The narrow context of the method handlers.
pub(crate) struct Session {
    /// Broker-unique id of the connection.
    pub id: u64,
    pub broker: Arc<Broker>,
    pub vhost: Arc<VHost>,
    pub user: String,
    /// The node's own connection: every permission, no user-id check.
    pub internal: bool,
    /// Negotiated frame size (content is split into body frames of at most this).
    pub frame_max: u32,
    /// Frames for the writer, in order after `out_chunks`.
    pub out: BytesMut,
    /// Output queued before `out`: large bodies by reference, with the frames around them.
    pub out_chunks: Vec<Bytes>,
    /// The connection's inbox, as queues deliver to it.
    pub sink: ConsumerSink,
    /// The same inbox, as confirm tokens hold it.
    pub confirm_sink: Arc<dyn crate::confirm::ConfirmSink>,
    /// Exclusive queues declared by this connection (deleted when it closes).
    pub exclusive_queues: Vec<QueueRef>,
    /// Routing buffers and the default-exchange cache of the core's publish.
    pub route_state: crate::vhost::publish::RouteState,
    /// The exchange last published to (saves a registry lookup per message).
    pub exchange_cache: Option<Arc<crate::exchange::Exchange>>,
    /// The user's topic permissions in this vhost, read at connection.open (None: unrestricted).
    pub topic_permissions: Option<Arc<Vec<crate::permissions::TopicPermission>>>,
    /// Channels with publishes waiting for their confirm.
    pub confirm_dirty: Vec<u16>,
    /// A message was published since the connection last checked its resource alarms.
    pub published: bool,
}

impl Session {
    /// Encodes a method frame into the outbox.
    pub fn send_method(&mut self, channel: u16, method: AMQPClass) {
        codec::encode_method(&mut self.out, channel, &method);
    }
}
