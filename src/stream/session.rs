//! A stream protocol connection's state and its request handlers, named after the protocol's
//! commands (the handshake's are in `handshake`): streams (`create`, `delete`, `metadata`, `stream_stats`),
//! publishers (`declare_publisher`, `publish`, `query_publisher_sequence`,
//! `delete_publisher`) and consumers (`subscribe`, `credit`, `unsubscribe`, `store_offset`,
//! `query_offset`, and the `ConsumerUpdate`s of single active consumers with their
//! answers). Answers use RabbitMQ's response codes.

use super::frame::{code, key, Frame};
use super::request::Request;
use super::Transport;
use crate::broker::Broker;
use crate::connections::{ConnectionInfo, Registration, TlsInfo};
use crate::error::CoreError;
use crate::permissions::Access;
use crate::queue::stream::{EventSink, LogStats, StreamCmd};
use crate::queue::QueueRef;
use crate::store::stream::OffsetSpec;
use crate::stream_stats::{ConsumerStats, PublisherStats};
use crate::vhost::VHost;
use bytes::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// The largest frame accepted before tune settles one (RabbitMQ's default `frame_max`).
pub const DEFAULT_FRAME_MAX: u32 = 1_048_576;

/// The heartbeat interval the server proposes, in seconds (RabbitMQ's default).
pub const DEFAULT_HEARTBEAT: u32 = 60;

/// What a handled request leaves the connection to do.
pub(super) enum Next {
    Continue,
    /// Flush what was written and close the socket.
    Close,
}

/// Where the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before a successful SASL authenticate.
    Unauthenticated,
    /// Authenticated, tune sent; waiting for the client's tune and open.
    Authenticated,
    /// Open: requests on streams are served.
    Open,
}

/// A declared publisher.
pub(super) struct Publisher {
    pub(super) queue: QueueRef,
    pub(super) reference: Option<Arc<str>>,
    pub(super) stats: Arc<PublisherStats>,
}

/// A subscription: the stream it reads and its counters.
pub(super) struct Subscription {
    pub(super) queue: QueueRef,
    pub(super) stats: Arc<ConsumerStats>,
}

/// A connection's state.
pub(super) struct Session {
    pub(super) broker: Arc<Broker>,
    pub(super) peer: SocketAddr,
    /// The broker's address of the connection.
    pub(super) local: SocketAddr,
    /// What TLS negotiated, when it came over TLS.
    pub(super) tls: Option<Arc<TlsInfo>>,
    /// The user its verified TLS certificate names (for EXTERNAL).
    pub(super) cert_user: Option<String>,
    pub(super) id: u64,
    pub(super) phase: Phase,
    pub(super) mechanism: Option<String>,
    pub(super) user: Option<String>,
    pub(super) vhost: Option<Arc<VHost>>,
    pub(super) frame_max: u32,
    pub(super) heartbeat: u32,
    /// The deliver version the client reads (2 once it said so in ExchangeCommandVersions).
    pub(super) deliver_version: u16,
    /// What the client sent in peer properties.
    pub(super) client_properties: Vec<(String, String)>,
    /// Its place in the broker's connection registry, once open.
    pub(super) registration: Option<Registration>,
    pub(super) publishers: HashMap<u8, Publisher>,
    pub(super) subscriptions: HashMap<u8, Subscription>,
    /// `ConsumerUpdate`s sent and not answered yet: correlation id -> subscription.
    pub(super) updates: HashMap<u32, u8>,
    pub(super) next_corr: u32,
    pub(super) events: EventSink,
    /// Bytes of chunks the streams sent this connection that it has not written yet.
    pub(super) backlog: Arc<AtomicUsize>,
}

/// Writes a frame; a failed write shows up at the next flush.
pub(super) async fn send<W: AsyncWrite + Unpin>(wr: &mut W, frame: Bytes) {
    let _ = wr.write_all(&frame).await;
}

/// A response carrying only its code.
pub(super) fn reply(k: u16, corr: u32, c: u16) -> Bytes {
    Frame::response(k, 1, corr, c).finish()
}

/// The stream-protocol code of a core error.
pub(super) fn code_of(e: &CoreError) -> u16 {
    match e {
        CoreError::AccessRefused(_) => code::ACCESS_REFUSED,
        CoreError::NotFound { .. } => code::STREAM_DOES_NOT_EXIST,
        CoreError::PreconditionFailed(_) => code::PRECONDITION_FAILED,
        _ => code::INTERNAL_ERROR,
    }
}

impl Session {
    pub(super) fn new(broker: Arc<Broker>, transport: Transport, events: EventSink) -> Session {
        Session {
            id: broker.next_id(),
            broker,
            peer: transport.peer,
            local: transport.local,
            tls: transport.tls,
            cert_user: transport.cert_user,
            phase: Phase::Unauthenticated,
            mechanism: None,
            user: None,
            vhost: None,
            frame_max: DEFAULT_FRAME_MAX,
            heartbeat: DEFAULT_HEARTBEAT,
            deliver_version: 1,
            client_properties: Vec::new(),
            registration: None,
            publishers: HashMap::new(),
            subscriptions: HashMap::new(),
            updates: HashMap::new(),
            next_corr: 0,
            events,
            backlog: Arc::default(),
        }
    }

    /// The largest frame the client may send (0: no limit).
    pub(super) fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// The heartbeat interval in seconds (0: none).
    pub(super) fn heartbeat(&self) -> u32 {
        if self.phase == Phase::Open {
            self.heartbeat
        } else {
            0
        }
    }

    /// Whether the handshake is over.
    pub(super) fn opened(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Its registry entry, once open (a management close wakes its `kill`).
    pub(super) fn info(&self) -> Option<Arc<ConnectionInfo>> {
        self.registration.as_ref().map(|r| r.info.clone())
    }

    /// Counts an answer's response code in the node's stream error counters.
    pub(super) fn counted(&self, c: u16) -> u16 {
        self.broker.connections.stream.answered(c)
    }

    /// Forgets the publishers and subscriptions of a deleted stream; whether it had any (a
    /// stream's deletion is told once per connection).
    pub(super) fn stream_deleted(&mut self, stream: &str) -> bool {
        let subscriptions: Vec<u8> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.queue.name == stream)
            .map(|(id, _)| *id)
            .collect();
        self.updates.retain(|_, sub| !subscriptions.contains(sub));
        for &id in &subscriptions {
            self.subscriptions.remove(&id);
            self.unlist_consumer(id);
        }
        let publishers: Vec<u8> = self
            .publishers
            .iter()
            .filter(|(_, p)| p.queue.name == stream)
            .map(|(id, _)| *id)
            .collect();
        let had = !subscriptions.is_empty() || !publishers.is_empty();
        for id in publishers {
            self.publishers.remove(&id);
            self.unlist_publisher(id);
        }
        had
    }

    /// Sends the server's close.
    pub(super) async fn close<W: AsyncWrite + Unpin>(
        &mut self,
        wr: &mut W,
        c: u16,
        reason: &str,
    ) -> Next {
        let c = self.counted(c);
        let f = Frame::command(key::CLOSE, 1).u32(0).u16(c).string(reason);
        send(wr, f.finish()).await;
        Next::Close
    }

    /// The connection ended: its subscriptions and its streams' watches go.
    pub(super) async fn closed(&mut self) {
        let mut queues: Vec<QueueRef> = self.subscriptions.drain().map(|(_, s)| s.queue).collect();
        queues.extend(self.publishers.drain().map(|(_, p)| p.queue));
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        queues.dedup_by(|a, b| a.name == b.name);
        for q in queues {
            q.stream_request(StreamCmd::Forget {
                connection: self.id,
            })
            .await;
        }
    }

    /// Handles one request.
    pub(super) async fn handle<W: AsyncWrite + Unpin>(&mut self, req: Request, wr: &mut W) -> Next {
        match (self.phase, req) {
            (_, Request::Heartbeat) | (_, Request::Response { .. }) => Next::Continue,
            (
                _,
                Request::Close {
                    corr,
                    code: c,
                    reason,
                },
            ) => {
                tracing::debug!(peer = %self.peer, code = c, %reason, "stream client closed");
                send(wr, reply(key::CLOSE, corr, code::OK)).await;
                Next::Close
            }
            (Phase::Unauthenticated, Request::PeerProperties { corr, properties }) => {
                self.client_properties = properties;
                self.peer_properties(corr, wr).await
            }
            (Phase::Unauthenticated, Request::SaslHandshake { corr }) => {
                self.sasl_handshake(corr, wr).await
            }
            (
                Phase::Unauthenticated,
                Request::SaslAuthenticate {
                    corr,
                    mechanism,
                    response,
                },
            ) => self.sasl_authenticate(corr, mechanism, response, wr).await,
            (
                Phase::Authenticated,
                Request::Tune {
                    frame_max,
                    heartbeat,
                },
            ) => {
                self.tune(frame_max, heartbeat);
                Next::Continue
            }
            (Phase::Authenticated, Request::Open { corr, vhost }) => {
                self.open(corr, vhost, wr).await
            }
            (Phase::Open, req) => self.serve(req, wr).await,
            (_, req) => {
                tracing::warn!(peer = %self.peer, ?req, "stream request out of order, closing");
                self.close(wr, code::UNKNOWN_FRAME, "unexpected frame")
                    .await
            }
        }
    }

    async fn serve<W: AsyncWrite + Unpin>(&mut self, req: Request, wr: &mut W) -> Next {
        match req {
            Request::Publish {
                publisher,
                messages,
            } => return self.publish(publisher, messages, wr).await,
            Request::ConsumerUpdateResponse { corr, code, offset } => {
                self.consumer_update_response(corr, code, offset).await
            }
            Request::Credit { id, credit } => return self.credit(id, credit, wr).await,
            Request::DeclarePublisher {
                corr,
                id,
                reference,
                stream,
            } => {
                let c = self.declare_publisher(id, reference, &stream).await;
                let c = self.counted(c);
                send(wr, reply(key::DECLARE_PUBLISHER, corr, c)).await;
            }
            Request::DeletePublisher { corr, id } => {
                let c = self.delete_publisher(id);
                let c = self.counted(c);
                send(wr, reply(key::DELETE_PUBLISHER, corr, c)).await;
            }
            Request::QueryPublisherSequence {
                corr,
                reference,
                stream,
            } => {
                self.query_publisher_sequence(corr, reference, &stream, wr)
                    .await
            }
            Request::Subscribe {
                corr,
                id,
                stream,
                offset,
                credit,
                properties,
            } => {
                let c = self
                    .subscribe(id, &stream, offset, credit, properties)
                    .await;
                let c = self.counted(c);
                send(wr, reply(key::SUBSCRIBE, corr, c)).await;
            }
            Request::Unsubscribe { corr, id } => {
                let c = self.unsubscribe(id).await;
                let c = self.counted(c);
                send(wr, reply(key::UNSUBSCRIBE, corr, c)).await;
            }
            Request::StoreOffset {
                reference,
                stream,
                offset,
            } => {
                // No answer, as RabbitMQ: a refused store is only logged.
                match self.stream_for(&stream, Access::Read) {
                    Ok(q) => {
                        q.stream_request(StreamCmd::StoreOffset { reference, offset })
                            .await;
                    }
                    Err(c) => {
                        tracing::debug!(peer = %self.peer, %stream, code = c, "store offset refused")
                    }
                }
            }
            Request::QueryOffset {
                corr,
                reference,
                stream,
            } => {
                let (c, offset) = match self.stream_for(&stream, Access::Read) {
                    Err(c) => (c, 0),
                    Ok(q) => {
                        let (tx, rx) = oneshot::channel();
                        let cmd = StreamCmd::QueryOffset {
                            reference,
                            reply: tx,
                        };
                        match q.stream_request(cmd).await {
                            true => match rx.await {
                                Ok(Some(o)) => (code::OK, o),
                                Ok(None) => (code::NO_OFFSET, 0),
                                Err(_) => (code::STREAM_NOT_AVAILABLE, 0),
                            },
                            false => (code::STREAM_NOT_AVAILABLE, 0),
                        }
                    }
                };
                let c = self.counted(c);
                let f = Frame::response(key::QUERY_OFFSET, 1, corr, c).u64(offset);
                send(wr, f.finish()).await;
            }
            Request::Create {
                corr,
                stream,
                arguments,
            } => {
                let c = self.create(&stream, &arguments).await;
                let c = self.counted(c);
                send(wr, reply(key::CREATE, corr, c)).await;
            }
            Request::Delete { corr, stream } => {
                let c = self.delete(&stream).await;
                let c = self.counted(c);
                send(wr, reply(key::DELETE, corr, c)).await;
            }
            Request::Metadata { corr, streams } => {
                send(wr, self.metadata(corr, &streams)).await;
            }
            Request::ExchangeCommandVersions { corr, versions } => {
                // A client that reads deliver version 2 gets the committed chunk id with
                // every chunk, as RabbitMQ sends it.
                if versions
                    .iter()
                    .any(|&(k, _, max)| k == key::DELIVER && max >= 2)
                {
                    self.deliver_version = 2;
                }
                send(wr, exchange_command_versions(corr)).await;
            }
            Request::ResolveOffsetSpec {
                corr,
                stream,
                offset,
            } => {
                send(wr, self.resolve_offset_spec(corr, &stream, offset).await).await;
            }
            Request::StreamStats { corr, stream } => {
                send(wr, self.stream_stats(corr, &stream).await).await;
            }
            Request::CreateSuperStream {
                corr,
                name,
                partitions,
                binding_keys,
                arguments,
            } => {
                self.create_super_stream(corr, &name, &partitions, &binding_keys, &arguments, wr)
                    .await
            }
            Request::DeleteSuperStream { corr, name } => {
                self.delete_super_stream(corr, &name, wr).await
            }
            Request::Partitions { corr, super_stream } => {
                self.partitions(corr, &super_stream, wr).await
            }
            Request::Route {
                corr,
                routing_key,
                super_stream,
            } => self.route(corr, &routing_key, &super_stream, wr).await,
            Request::Unknown { key: k, version } => {
                tracing::warn!(peer = %self.peer, key = k, version, "unknown stream command, closing");
                return self.close(wr, code::UNKNOWN_FRAME, "unknown frame").await;
            }
            other => {
                tracing::warn!(peer = %self.peer, req = ?other, "stream request out of order, closing");
                return self
                    .close(wr, code::UNKNOWN_FRAME, "unexpected frame")
                    .await;
            }
        }
        Next::Continue
    }

    /// The stream `name` of the open vhost, if the user has `access` to it and it is a stream
    /// served on this node; else the code to answer with.
    pub(super) fn stream_for(&self, name: &str, access: Access) -> Result<QueueRef, u16> {
        let v = self.vhost.as_ref().ok_or(code::INTERNAL_ERROR)?;
        let user = self.user.as_deref().unwrap_or_default();
        let allowed = self
            .broker
            .permissions
            .get(&v.name, user)
            .is_some_and(|p| p.allows(access, name));
        if !allowed {
            return Err(code::ACCESS_REFUSED);
        }
        match v.queue(name) {
            Ok(q) if q.args.stream && q.home.is_none() => Ok(q),
            Ok(q) if q.args.stream => Err(code::STREAM_NOT_AVAILABLE),
            _ => Err(code::STREAM_DOES_NOT_EXIST),
        }
    }

    pub(super) async fn create(&mut self, stream: &str, arguments: &[(String, String)]) -> u16 {
        let Some(stream) = correct_name(stream) else {
            return code::PRECONDITION_FAILED;
        };
        let stream = stream.as_str();
        let Some(v) = self.vhost.clone() else {
            return code::INTERNAL_ERROR;
        };
        let user = self.user.clone().unwrap_or_default();
        let allowed = self
            .broker
            .permissions
            .get(&v.name, &user)
            .is_some_and(|p| p.allows(Access::Configure, stream));
        if !allowed {
            return code::ACCESS_REFUSED;
        }
        if v.queue(stream).is_ok() {
            return code::STREAM_ALREADY_EXISTS;
        }
        let Some(arguments) = super::arguments::table(arguments) else {
            return code::PRECONDITION_FAILED;
        };
        let options = crate::vhost::QueueOptions {
            durable: true,
            arguments,
            ..Default::default()
        };
        match self
            .broker
            .declare_queue(&v, stream, &options, self.id)
            .await
        {
            Ok(_) => code::OK,
            Err(e) => code_of(&e),
        }
    }

    async fn delete(&mut self, stream: &str) -> u16 {
        let Some(v) = self.vhost.clone() else {
            return code::INTERNAL_ERROR;
        };
        if let Err(c) = self.stream_for(stream, Access::Configure) {
            return c;
        }
        match self
            .broker
            .delete_queue(&v, stream, false, false, self.id)
            .await
        {
            Ok(_) => code::OK,
            Err(e) => code_of(&e),
        }
    }

    fn metadata(&self, corr: u32, streams: &[String]) -> Bytes {
        let (host, port) = super::advertised(&self.broker, self.tls.is_some());
        // A metadata response has no code of its own: brokers, then each stream's code.
        let mut f = Frame::command(key::METADATA | key::RESPONSE, 1).u32(corr);
        f = f.u32(1).u16(0).string(&host).u32(u32::from(port));
        f = f.u32(streams.len() as u32);
        for s in streams {
            f = f.string(s);
            match self.stream_for(s, Access::Read) {
                Ok(_) => f = f.u16(code::OK).u16(0).u32(0),
                Err(c) => {
                    let c = if c == code::ACCESS_REFUSED {
                        code::STREAM_DOES_NOT_EXIST
                    } else {
                        c
                    };
                    f = f.u16(c).u16(u16::MAX).u32(0)
                }
            }
        }
        f.finish()
    }

    /// The offset a reader from `spec` would start at, as RabbitMQ answers it: type offset (4)
    /// and the value; `NO_OFFSET` when the log cannot say.
    async fn resolve_offset_spec(&self, corr: u32, stream: &str, spec: OffsetSpec) -> Bytes {
        let (c, offset) = match self.stream_for(stream, Access::Read) {
            Err(c) => (c, 0),
            Ok(q) => {
                let (tx, rx) = oneshot::channel();
                match q
                    .stream_request(StreamCmd::Resolve { spec, reply: tx })
                    .await
                {
                    false => (code::STREAM_NOT_AVAILABLE, 0),
                    true => match rx.await {
                        Ok(Some(o)) => (code::OK, o),
                        Ok(None) => (code::NO_OFFSET, 0),
                        Err(_) => (code::STREAM_NOT_AVAILABLE, 0),
                    },
                }
            }
        };
        Frame::response(key::RESOLVE_OFFSET_SPEC, 1, corr, c)
            .u16(4)
            .u64(offset)
            .finish()
    }

    async fn stream_stats(&self, corr: u32, stream: &str) -> Bytes {
        let q = match self.stream_for(stream, Access::Read) {
            Ok(q) => q,
            Err(c) => {
                return Frame::response(key::STREAM_STATS, 1, corr, c)
                    .u32(0)
                    .finish()
            }
        };
        let (tx, rx) = oneshot::channel();
        let answer = match q.stream_request(StreamCmd::Stats { reply: tx }).await {
            true => rx.await.ok(),
            false => None,
        };
        let Some(LogStats {
            first,
            committed_chunk,
            ..
        }) = answer
        else {
            return Frame::response(key::STREAM_STATS, 1, corr, code::STREAM_NOT_AVAILABLE)
                .u32(0)
                .finish();
        };
        let stats = [
            ("first_chunk_id", first as i64),
            (
                "committed_chunk_id",
                committed_chunk.map_or(-1, |c| c as i64),
            ),
        ];
        let mut f = Frame::response(key::STREAM_STATS, 1, corr, code::OK).u32(stats.len() as u32);
        for (k, v) in stats {
            f = f.string(k).i64(v);
        }
        f.finish()
    }
}

/// A stream or super stream name as RabbitMQ's stream plugin takes it: without line breaks,
/// not empty and not `amq.`-prefixed (None: refused with `PRECONDITION_FAILED`).
pub(super) fn correct_name(name: &str) -> Option<String> {
    let name: String = name.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    (!name.is_empty() && !name.starts_with("amq.")).then_some(name)
}

/// The commands and versions this server speaks (the client picks within them): the
/// client-to-server commands, in RabbitMQ's order (clients read the list by position).
fn exchange_command_versions(corr: u32) -> Bytes {
    let commands = [
        key::DECLARE_PUBLISHER,
        key::PUBLISH,
        key::QUERY_PUBLISHER_SEQUENCE,
        key::DELETE_PUBLISHER,
        key::SUBSCRIBE,
        key::CREDIT,
        key::STORE_OFFSET,
        key::QUERY_OFFSET,
        key::UNSUBSCRIBE,
        key::CREATE,
        key::DELETE,
        key::METADATA,
        key::CLOSE,
        key::HEARTBEAT,
        key::ROUTE,
        key::PARTITIONS,
        key::STREAM_STATS,
        key::CREATE_SUPER_STREAM,
        key::DELETE_SUPER_STREAM,
        key::RESOLVE_OFFSET_SPEC,
    ];
    let mut f = Frame::response(key::EXCHANGE_COMMAND_VERSIONS, 1, corr, code::OK)
        .u32(commands.len() as u32);
    for k in commands {
        // Publish version 2 carries filter values.
        let max = if k == key::PUBLISH { 2 } else { 1 };
        f = f.u16(k).u16(1).u16(max);
    }
    f.finish()
}
