//! One client connection after the handshake: the task that reads the socket and owns the
//! channel table, and the writer task that coalesces everything queued for the socket into few
//! writes and sends heartbeats. Deliveries from queues arrive in this task's inbox and are
//! handled in `events.rs`. Methods on an open channel go to `methods::dispatch` with the
//! connection's `Session`, the narrow context the handlers see. Closing half-closes the socket
//! and reads until the peer closes, so a close is never lost to a reset.

mod buffers;
mod direct;
mod events;
mod flow;

pub(crate) use buffers::BUFFER_SMALL;

use crate::amqp::channel::{BodyFrame, Channel};
use crate::amqp::channel_table::ChannelTable;
use crate::amqp::codec::{self, Frame};
use crate::amqp::error::{AmqpError, AmqpResult, Scope};
use crate::amqp::handshake::Opened;
use crate::amqp::methods;
use crate::amqp::session::Session;
use crate::broker::Broker;
use crate::connections::ConnectionInfo;
use crate::error::code;
use amq_protocol::protocol::{channel, connection, AMQPClass};
use buffers::{read_some, BUFFER_LARGE};
use bytes::{Bytes, BytesMut};
use direct::DirectBody;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Output chunks queued for the writer before the connection task waits.
const WRITER_QUEUE: usize = 16;
/// How long a closing connection waits for close-ok.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a closed connection keeps reading (and discarding) until the peer closes.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// State of one open connection.
pub(crate) struct Connection {
    /// What the method handlers may touch: vhost, user, outbox, publish caches.
    pub s: Session,
    /// This connection in the broker's registry.
    pub info: Arc<ConnectionInfo>,
    /// A large body frame being read straight into its message (`direct.rs`).
    pub direct: Option<DirectBody>,
    pub channel_max: u16,
    pub cancel_notify: bool,
    /// The client takes connection.blocked / unblocked.
    pub blocked_notify: bool,
    /// Resource-alarm flow control (`flow.rs`).
    pub flow: flow::Flow,
    pub channels: ChannelTable,
    /// connection.close was sent; waiting for close-ok until this instant.
    pub(crate) closing: Option<Instant>,
    /// The connection is finished.
    pub(crate) done: bool,
}

/// Runs an opened connection to its end.
pub(crate) async fn run<R, W>(
    broker: Arc<Broker>,
    opened: Opened,
    mut rd: R,
    wr: W,
    mut rbuf: BytesMut,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // Unregisters the connection when this function returns, however it ends.
    let registration = opened.registration;
    let topic_permissions = match opened.internal {
        true => None,
        false => broker.permissions.topics(&opened.vhost.name, &opened.user),
    };
    let (sink, mut inbox) = mpsc::unbounded_channel();
    let (wtx, wrx) = mpsc::channel::<Bytes>(WRITER_QUEUE);
    let heartbeat = Duration::from_secs(u64::from(opened.heartbeat));
    let writer = tokio::spawn(crate::amqp::writer::write_loop(wr, wrx, heartbeat));
    let mut c = Connection {
        s: Session {
            id: registration.id,
            broker,
            vhost: opened.vhost,
            user: opened.user,
            internal: opened.internal,
            frame_max: opened.frame_max,
            out: BytesMut::with_capacity(BUFFER_SMALL),
            out_chunks: Vec::new(),
            confirm_sink: Arc::new(sink.clone()),
            sink,
            exclusive_queues: Vec::new(),
            route_state: Default::default(),
            exchange_cache: None,
            topic_permissions,
            confirm_dirty: Vec::new(),
            published: false,
        },
        info: registration.info.clone(),
        direct: None,
        channel_max: opened.channel_max,
        cancel_notify: opened.cancel_notify,
        blocked_notify: opened.blocked_notify,
        flow: Default::default(),
        channels: ChannelTable::default(),
        closing: None,
        done: false,
    };
    let mut last_recv = Instant::now();
    let mut ticker = tokio::time::interval(if heartbeat.is_zero() {
        Duration::from_secs(3600)
    } else {
        heartbeat
    });
    // Grown on demand: a quiet connection never needs room for a full batch.
    let mut events = Vec::new();
    let mut read_busy = false;
    // Registered once, not per loop turn: a forced close from the management API.
    let info = registration.info.clone();
    let kill = info.kill.notified();
    tokio::pin!(kill);
    let mut alarms = c.s.broker.alarms.subscribe();
    c.flow.alarm = *alarms.borrow_and_update();
    let mut alarms_open = true;
    // Frames a client pipelined behind connection.open arrived with the handshake.
    if !rbuf.is_empty() {
        c.on_bytes(&mut rbuf).await;
        c.flush_output(&wtx).await;
    }
    while !c.done {
        let close_deadline = c
            .closing
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            _ = shutdown.changed(), if c.closing.is_none() => {
                c.close_connection(AmqpError::new(
                    code::CONNECTION_FORCED,
                    "broker forced connection closure with reason 'shutdown'",
                ));
            }
            _ = &mut kill, if c.closing.is_none() => {
                let reason = registration.info.close_reason().unwrap_or_default();
                c.close_connection(AmqpError::new(code::CONNECTION_FORCED, reason));
            }
            n = inbox.recv_many(&mut events, 256) => {
                if n == 0 {
                    break;
                }
                for e in events.drain(..) {
                    c.on_event(e).await;
                }
                c.flush_confirms();
            }
            changed = alarms.changed(), if alarms_open => {
                match changed {
                    Ok(()) => {
                        let state = *alarms.borrow_and_update();
                        if c.on_alarm(state) {
                            last_recv = Instant::now();
                            c.on_bytes(&mut rbuf).await;
                        }
                    }
                    Err(_) => alarms_open = false,
                }
            }
            r = read_some(&mut rd, &mut rbuf, &mut c.direct, &mut read_busy), if !c.flow.blocked => {
                match r {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        last_recv = Instant::now();
                        if c.on_direct_read(n).await {
                            c.on_bytes(&mut rbuf).await;
                        }
                    }
                }
            }
            _ = ticker.tick(), if !heartbeat.is_zero() => {
                // A connection blocked by an alarm is not read, so its heartbeats wait too.
                if !c.flow.blocked && last_recv.elapsed() > heartbeat * 2 {
                    tracing::info!(connection = c.s.id, "missed heartbeats from client, closing");
                    break;
                }
            }
            _ = tokio::time::sleep_until(close_deadline), if c.closing.is_some() => break,
        }
        if !c.flush_output(&wtx).await {
            break;
        }
        if rbuf.capacity() > 1 << 20 && rbuf.is_empty() {
            rbuf = BytesMut::with_capacity(BUFFER_SMALL);
        }
    }
    // After close / close-ok the peer may still have frames in flight: closing the socket
    // with unread input would make the kernel answer with RST, and the client could lose the
    // close it has not read yet. So, as RabbitMQ: the writer sends what is queued and
    // half-closes, and input is read and discarded until the peer closes (bounded).
    let drain = c.done;
    tracing::info!(
        "closing AMQP connection ({}, vhost: '{}', user: '{}')",
        c.info.name(),
        c.s.vhost.name,
        c.s.user
    );
    c.cleanup().await;
    // Deliveries already on their way here were handed out to this connection's consumers:
    // closed, the inbox refuses more (their queues keep those), and what it still holds is
    // given back as undelivered (its channels are gone).
    inbox.close();
    while let Ok(e) = inbox.try_recv() {
        c.on_event(e).await;
    }
    drop(c);
    drop(registration);
    drop(wtx);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    if drain {
        crate::amqp::drain(&mut rd, DRAIN_TIMEOUT).await;
    }
}

impl Connection {
    /// Hands what was encoded since the last call to the writer task; false once it is gone.
    async fn flush_output(&mut self, wtx: &mpsc::Sender<Bytes>) -> bool {
        for chunk in self.s.out_chunks.drain(..) {
            if wtx.send(chunk).await.is_err() {
                return false;
            }
        }
        if self.s.out.is_empty() {
            return true;
        }
        let chunk = self.s.out.split().freeze();
        // Room for as much as this turn wrote, so a busy connection does not grow its buffer
        // step by step (copying) every turn.
        let wanted = chunk.len().min(BUFFER_LARGE);
        if wanted > BUFFER_SMALL && self.s.out.capacity() < wanted {
            self.s.out.reserve(wanted);
        }
        wtx.send(chunk).await.is_ok()
    }

    /// The open channel with this id, if any (a closing one is not open).
    pub fn open_channel(&mut self, id: u16) -> Option<&mut Channel> {
        self.channels.get_mut(id).filter(|ch| !ch.closing)
    }

    /// Starts closing the connection with an error.
    pub fn close_connection(&mut self, e: AmqpError) {
        if self.closing.is_some() {
            return;
        }
        tracing::debug!(connection = self.s.id, code = e.code, text = %e.text, "closing connection");
        self.s.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
                reply_code: e.code,
                reply_text: crate::shortstr::short(&e.text),
                class_id: e.class_id,
                method_id: e.method_id,
            })),
        );
        self.closing = Some(Instant::now() + CLOSE_TIMEOUT);
    }

    async fn on_bytes(&mut self, rbuf: &mut BytesMut) {
        if self.apply_block() {
            self.flush_confirms();
            return;
        }
        loop {
            if self.done || self.direct.is_some() {
                return;
            }
            match codec::decode_buffered(rbuf, self.s.frame_max) {
                Ok(Some(frame)) => {
                    if let Err(e) = self.on_frame(frame).await {
                        // Channel errors were handled by their channel; what reaches here
                        // closes the connection.
                        self.close_connection(e);
                    }
                    if self.apply_block() {
                        // The rest waits in the buffer until the alarm clears.
                        self.flush_confirms();
                        return;
                    }
                }
                Ok(None) => {
                    self.start_direct(rbuf);
                    self.flush_confirms();
                    return;
                }
                Err(e) => {
                    // The stream cannot be resynchronised after a framing error.
                    rbuf.clear();
                    self.close_connection(e);
                    self.done = true;
                    return;
                }
            }
        }
    }

    async fn on_frame(&mut self, frame: Frame) -> AmqpResult<()> {
        if self.closing.is_some() {
            if let Frame::Method(0, m) = frame {
                match *m {
                    AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => self.done = true,
                    AMQPClass::Connection(connection::AMQPMethod::Close(_)) => {
                        self.s.send_method(
                            0,
                            AMQPClass::Connection(connection::AMQPMethod::CloseOk(
                                connection::CloseOk {},
                            )),
                        );
                        self.done = true;
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        match frame {
            Frame::Heartbeat(0) => Ok(()),
            Frame::Heartbeat(ch) => Err(AmqpError::unexpected_frame(format!(
                "heartbeat frame on channel {ch}"
            ))),
            Frame::Method(0, m)
                if matches!(*m, AMQPClass::Connection(connection::AMQPMethod::Close(_))) =>
            {
                self.connection_close().await
            }
            Frame::Method(0, m) => {
                let (class, method) = (m.get_amqp_class_id(), m.get_amqp_method_id());
                self.on_connection_method(*m)
                    .map_err(|e| e.with_method(class, method))
            }
            Frame::Method(ch, m) => self.on_channel_frame(ch, ChannelFrame::Method(m)).await,
            Frame::Refused(ch, e) => {
                if ch != 0 && e.scope == Scope::Channel {
                    if let Some(mut c) = self.channels.take(ch) {
                        self.s.close_channel(&mut c, e).await;
                        self.channels.put(c);
                        return Ok(());
                    }
                }
                Err(e)
            }
            Frame::Header(0, _) | Frame::Body(0, _) => {
                Err(AmqpError::unexpected_frame("content frame on channel 0"))
            }
            Frame::Header(ch, h) => self.on_channel_frame(ch, ChannelFrame::Header(h)).await,
            Frame::Body(ch, b) => {
                self.on_channel_frame(ch, ChannelFrame::Body(BodyFrame::Buffered(b)))
                    .await
            }
        }
    }

    /// A body frame read directly (`direct.rs`), handled as `on_frame` handles buffered ones.
    pub(crate) async fn on_body_frame(&mut self, channel: u16, body: BodyFrame) {
        if self.closing.is_some() {
            return;
        }
        if let Err(e) = self
            .on_channel_frame(channel, ChannelFrame::Body(body))
            .await
        {
            self.close_connection(e);
        }
    }

    fn on_connection_method(&mut self, m: AMQPClass) -> AmqpResult<()> {
        match m {
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)) => {
                self.done = true;
                Ok(())
            }
            AMQPClass::Connection(connection::AMQPMethod::UpdateSecret(_u)) => {
                // Fault injection for the cleanup tests (`cleanup_tests.rs`): a task that dies.
                #[cfg(test)]
                if _u.reason.as_str() == super::cleanup_tests::PANIC_REASON {
                    panic!("connection task fault injected by a test");
                }
                self.s.send_method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(
                        connection::UpdateSecretOk {},
                    )),
                );
                Ok(())
            }
            AMQPClass::Connection(connection::AMQPMethod::Blocked(_))
            | AMQPClass::Connection(connection::AMQPMethod::Unblocked(_)) => Ok(()),
            AMQPClass::Connection(_) => Err(AmqpError::command_invalid(
                "connection method not valid after connection.open",
            )),
            _ => Err(AmqpError::channel_error(
                "unexpected method in connection state running",
            )),
        }
    }

    /// RabbitMQ's per-user `max-channels` limit, counted over all the user's connections
    /// (a connection error, as in RabbitMQ).
    fn check_user_channel_limit(&self) -> AmqpResult<()> {
        let user = &self.info.user;
        let Some(limit) = self.s.broker.user_limit(user, "max-channels") else {
            return Ok(());
        };
        let open: usize = self
            .s
            .broker
            .connections
            .list()
            .iter()
            .filter(|c| c.user == *user)
            .map(|c| c.channels.load(Ordering::Relaxed))
            .sum();
        if open as i64 >= limit {
            return Err(AmqpError::not_allowed(format!(
                "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({limit})"
            )));
        }
        Ok(())
    }

    async fn on_channel_frame(&mut self, id: u16, frame: ChannelFrame) -> AmqpResult<()> {
        let ids = match &frame {
            ChannelFrame::Method(m) => (m.get_amqp_class_id(), m.get_amqp_method_id()),
            _ => (0, 0),
        };
        let Some(mut ch) = self.channels.take(id) else {
            return self
                .on_unopened_channel_frame(id, frame)
                .map_err(|e| e.with_method(ids.0, ids.1));
        };
        // Errors raised by a publish's content (its size, properties, routing) name
        // basic.publish, as RabbitMQ's do; framing errors name no method.
        let ids = match (&frame, ch.content.is_some()) {
            (ChannelFrame::Method(_), _) | (_, false) => ids,
            _ => (60, 40),
        };
        let result = if ch.closing {
            // After channel.close only close-ok (or a crossing close) matters.
            if let ChannelFrame::Method(m) = frame {
                match *m {
                    AMQPClass::Channel(channel::AMQPMethod::CloseOk(_)) => ch.finished = true,
                    AMQPClass::Channel(channel::AMQPMethod::Close(_)) => {
                        self.s.send_method(
                            id,
                            AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})),
                        );
                    }
                    _ => {}
                }
            }
            Ok(())
        } else {
            self.on_open_channel_frame(&mut ch, frame)
                .await
                .map_err(|e| match e.code {
                    code::FRAME_ERROR | code::UNEXPECTED_FRAME if ids == (60, 40) => e,
                    _ => e.with_method(ids.0, ids.1),
                })
        };
        let result = match result {
            Err(e) if e.scope == Scope::Channel => {
                self.s.close_channel(&mut ch, e).await;
                Ok(())
            }
            other => other,
        };
        if ch.finished {
            self.info.channels.fetch_sub(1, Ordering::Relaxed);
        } else {
            // Content frames change no gauge (a finished publish is counted at the flush).
            if ids.0 != 0 {
                ch.update_gauges();
            }
            self.channels.put(ch);
        }
        result
    }

    /// A frame on a channel number that is not open: only channel.open is valid there.
    /// `channel_max` bounds how many channels are open, not their numbers (RabbitMQ).
    fn on_unopened_channel_frame(&mut self, id: u16, frame: ChannelFrame) -> AmqpResult<()> {
        let ChannelFrame::Method(m) = frame else {
            return Err(AmqpError::channel_error("expected 'channel.open'"));
        };
        match *m {
            AMQPClass::Channel(channel::AMQPMethod::Open(_)) => {
                let open = self.channels.len();
                if self.channel_max != 0 && open >= usize::from(self.channel_max) {
                    return Err(AmqpError::not_allowed(format!(
                        "number of channels opened ({open}) has reached the negotiated channel_max ({})",
                        self.channel_max
                    )));
                }
                self.check_user_channel_limit()?;
                let uid = self.s.broker.next_id();
                self.info.channels.fetch_add(1, Ordering::Relaxed);
                let stats = self.s.broker.connections.open_channel(&self.info, id);
                self.channels.put(Box::new(Channel::new(
                    id,
                    uid,
                    self.s.broker.config.max_unacked_per_channel,
                    stats,
                )));
                self.s.send_method(
                    id,
                    AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})),
                );
                Ok(())
            }
            AMQPClass::Connection(_) => Err(AmqpError::command_invalid("unimplemented method")),
            _ => Err(AmqpError::channel_error("expected 'channel.open'")),
        }
    }

    async fn on_open_channel_frame(
        &mut self,
        ch: &mut Channel,
        frame: ChannelFrame,
    ) -> AmqpResult<()> {
        match frame {
            ChannelFrame::Method(m) => {
                if ch.content.is_some() {
                    return Err(AmqpError::unexpected_frame(
                        "expected content header for class 60, got non content header frame instead",
                    ));
                }
                methods::dispatch(&mut self.s, ch, *m).await
            }
            ChannelFrame::Header(h) => self.s.on_content_header(ch, h).await,
            ChannelFrame::Body(b) => self.s.on_content_body(ch, b).await,
        }
    }

    /// connection.close from the client: its channels are released first and, as for
    /// channel.close, the `close-ok` waits until their acks to replicated or other nodes'
    /// queues are committed (a 541 close instead when they cannot be).
    async fn connection_close(&mut self) -> AmqpResult<()> {
        let mut far = Vec::new();
        for mut ch in self.channels.drain() {
            self.s.release_channel(&mut ch).await;
            far.append(&mut ch.acked_far);
        }
        methods::sync_acks(far)
            .await
            .map_err(|e| e.with_method(10, 50))?;
        self.s.send_method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
        );
        self.done = true;
        Ok(())
    }

    /// Releases everything the connection holds: channels, then its exclusive queues.
    async fn cleanup(&mut self) {
        let mut chans = self.channels.drain();
        for ch in chans.iter_mut() {
            self.s.release_channel(ch).await;
        }
        for q in std::mem::take(&mut self.s.exclusive_queues) {
            let _ = q.delete(false, false).await;
            self.s.vhost.forget_queue(&q);
        }
    }
}

impl Drop for Connection {
    /// A connection task that ends without `cleanup` (a panic) still deletes its exclusive
    /// queues; its channels release themselves as they drop.
    fn drop(&mut self) {
        let queues = std::mem::take(&mut self.s.exclusive_queues);
        drop(self.channels.drain());
        if queues.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let vhost = self.s.vhost.clone();
        rt.spawn(async move {
            for q in queues {
                let _ = q.delete(false, false).await;
                vhost.forget_queue(&q);
            }
        });
    }
}

/// A frame addressed to a non-zero channel.
enum ChannelFrame {
    Method(Box<AMQPClass>),
    Header(Box<codec::ContentHeader>),
    Body(BodyFrame),
}
