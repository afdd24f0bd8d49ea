//! A queue whose home is another node of the cluster, as this node sees it: a [`QueueShared`]
//! like any other (so exchanges bind to it, publishers route to it and channels consume from
//! it unchanged), whose task forwards each command to the home node through a
//! [`RemoteLink`] instead of holding messages. Publishes are sent in batches (what piles up
//! in the mailbox while a batch is on the wire goes in the next; to a quorum queue, several
//! batches at once, which the home takes in the order sent), and their confirms complete
//! when the home node has stored them; any other command waits for those in flight.
//! Deliveries to consumers here come back from the home node
//! ([`QueueShared::remote_deliveries`]) and are pushed to the consumers' own connections;
//! acks, rejects and cancels go home.
//!
//! The operations and their answers ([`RemoteOp`], [`RemoteReply`]) are the queue's; how they
//! travel (the cluster's inter-node connections) is the link's.

use super::consumer::{ConsumerEvent, ConsumerSpec, Delivery};
pub use super::remote_ops::*;
use super::{GetResult, QueueCmd, QueueRef, QueueShared};
use crate::error::CoreError;
use crate::message::Message;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The bit that marks the owner id of another node's exclusive queue as this node holds it
/// ([`Home::owner`]): no connection id here has it, so only the owner's node may use it.
pub const REMOTE_OWNER: u64 = 1 << 63;

/// Where a queue on another node lives and how it is reached.
pub struct Home<'a> {
    /// The home node's name.
    pub node: &'a str,
    /// The link to it.
    pub link: Arc<dyn RemoteLink>,
    /// For another node's exclusive queue, the owner id it has here ([`REMOTE_OWNER`] set):
    /// clients here are refused as another connection's would be.
    pub owner: Option<u64>,
}

/// Messages forwarded to the home node in one batch at most.
const PUBLISH_BATCH: usize = 512;
/// How long a quorum queue's leader has to count its messages and consumers before they
/// count as none (RabbitMQ's `rabbit_quorum_queue:stat/1`, 250 ms).
const QUORUM_STATS_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(250);
/// How often a remote queue with consumers here checks that its home node answers.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// Checks in a row the home node may miss before the consumers here are cancelled.
const WATCH_MISSES: u32 = 2;
/// How long deliveries to give back are sent again while the home node does not answer.
const GIVE_BACK_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// A boxed future of a link's answer.
pub type LinkFuture = Pin<Box<dyn Future<Output = Result<RemoteReply, CoreError>> + Send>>;

/// Carries operations to a queue's home node; the error is what this node reports when the
/// home node does not answer.
pub trait RemoteLink: Send + Sync + 'static {
    /// Sends `op` for the queue `q` to its home node.
    fn call(&self, q: &QueueShared, op: RemoteOp) -> LinkFuture;
    /// Whether the home node of `q` answers.
    fn alive(&self, q: &QueueShared) -> Pin<Box<dyn Future<Output = bool> + Send>>;
}

/// The settlement commands, which a remote queue merges before sending them home.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Settle {
    Ack,
    Requeue,
    Discard,
}

fn settlement(cmd: QueueCmd) -> Result<(Settle, Vec<u64>), QueueCmd> {
    match cmd {
        QueueCmd::Ack(s) => Ok((Settle::Ack, s)),
        QueueCmd::Requeue(s) => Ok((Settle::Requeue, s)),
        QueueCmd::Discard(s) => Ok((Settle::Discard, s)),
        other => Err(other),
    }
}

/// `cmd` with the settlements of the same kind queued behind it merged in, so a consumer
/// acking one message at a time costs one round trip per batch, not per ack; the first
/// command of another kind is kept in `held` for the next turn.
fn merged(
    cmd: QueueCmd,
    control: &mut tokio::sync::mpsc::UnboundedReceiver<QueueCmd>,
    held: &mut Option<QueueCmd>,
) -> QueueCmd {
    let (kind, mut seqs) = match settlement(cmd) {
        Ok(s) => s,
        Err(other) => return other,
    };
    while let Ok(next) = control.try_recv() {
        match settlement(next) {
            Ok((k, more)) if k == kind => seqs.extend(more),
            Ok((k, more)) => {
                *held = Some(settle_cmd(k, more));
                break;
            }
            Err(other) => {
                *held = Some(other);
                break;
            }
        }
    }
    settle_cmd(kind, seqs)
}

fn settle_cmd(kind: Settle, seqs: Vec<u64>) -> QueueCmd {
    match kind {
        Settle::Ack => QueueCmd::Ack(seqs),
        Settle::Requeue => QueueCmd::Requeue(seqs),
        Settle::Discard => QueueCmd::Discard(seqs),
    }
}

/// Publishes with their confirms, as a remote queue forwards them.
type Batch = Vec<(Arc<Message>, Option<crate::confirm::ConfirmToken>)>;

/// Publish calls to a quorum queue's home in flight at most per handle: the next batch goes
/// while the last waits for its commit (one at a time, publishing through another node than
/// the leader's ran at two thirds of the rate of publishing on it).
const PUBLISHES_IN_FLIGHT: usize = 4;

/// Sends one batch of publishes home and completes their confirms with its answer.
async fn forward(
    link: Arc<dyn RemoteLink>,
    q: QueueRef,
    batch: Batch,
    sent: Option<super::Sent>,
    follows: bool,
) {
    let wire = |batch: &Batch| {
        let items = batch
            .iter()
            .map(|(m, t)| (WireMessage::of(m), t.is_some()))
            .collect();
        RemoteOp::Publish(items, sent, follows)
    };
    let call = link.call(&q, wire(&batch));
    let reply = if q.args.quorum {
        // A quorum queue's leader may move while the call waits on its old node (cut
        // off, the call runs to its timeout): once this handle is replaced, the batch
        // goes to the new leader at once, so the publishes that wait for this handle
        // ([`super::handover`]) do not overtake it. One the old leader had committed is
        // then there twice, as at-least-once allows.
        tokio::pin!(call);
        tokio::select! {
            r = &mut call => r,
            () = replaced(&q) => {
                tracing::debug!(queue = %q.name, ?sent, "a replaced handle sends its batch again");
                link.call(&q, wire(&batch)).await
            }
        }
    } else {
        call.await
    };
    let stored = match reply {
        Ok(RemoteReply::Published(v)) => v,
        _ => Vec::new(),
    };
    for (i, (_, token)) in batch.into_iter().enumerate() {
        if let Some(t) = token {
            t.complete(stored.get(i).copied().unwrap_or(false));
        }
    }
}

/// The task of a remote queue.
struct Proxy {
    q: QueueRef,
    link: Arc<dyn RemoteLink>,
    /// Consumers here, by id.
    consumers: HashMap<u64, ConsumerSpec>,
    /// The home tasks deliveries came from (their numbers here name them).
    tasks: super::home_tasks::HomeTasks,
    /// The home task the last ack or drop was sent to, which a sync asks.
    settled_to: Option<u64>,
    /// Publish calls in flight, oldest first (to a quorum queue).
    in_flight: std::collections::VecDeque<tokio::task::JoinHandle<()>>,
}

/// Starts the task of the remote queue `q`.
pub(super) fn start(q: QueueRef, link: Arc<dyn RemoteLink>, rx: super::actor::Mailbox) {
    let proxy = Proxy {
        q,
        link,
        consumers: HashMap::new(),
        tasks: Default::default(),
        settled_to: None,
        in_flight: Default::default(),
    };
    tokio::spawn(proxy.run(rx));
}

/// How long a publish call to a quorum queue's leader runs before its handle is looked at,
/// and how often then, for a replacement ([`Proxy::publish`]).
const REPLACED_CHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// Completes once `q` is replaced or deleted (looked at after [`REPLACED_CHECK`], then every
/// [`REPLACED_CHECK`]).
async fn replaced(q: &QueueShared) {
    loop {
        tokio::time::sleep(REPLACED_CHECK).await;
        if q.is_deleted() {
            return;
        }
    }
}

impl Proxy {
    async fn run(mut self, rx: super::actor::Mailbox) {
        let (mut data, mut control) = rx.into_parts();
        let mut watch = tokio::time::interval(WATCH_EVERY);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut missed = 0;
        let mut lost = false;
        let mut held = None;
        loop {
            let cmd = if let Some(cmd) = held.take() {
                cmd
            } else {
                tokio::select! {
                    biased;
                    Some(cmd) = control.recv() => merged(cmd, &mut control, &mut held),
                    Some(cmd) = data.recv() => cmd,
                    _ = watch.tick(), if !self.consumers.is_empty() => {
                        let alive = self.link.alive(&self.q).await;
                        missed = if alive { 0 } else { missed + 1 };
                        if !self.q.args.quorum {
                            if missed >= WATCH_MISSES {
                                self.home_lost();
                            }
                        } else if missed >= WATCH_MISSES {
                            // A quorum queue's consumers wait for its next leader: this
                            // handle is replaced then and hands them over.
                            lost = true;
                        } else if alive && lost {
                            // Its node answers again and still leads: its registrations
                            // went with its last run.
                            lost = false;
                            self.home_lost();
                        }
                        continue;
                    }
                    else => break,
                }
            };
            let QueueCmd::Publish(msg, token) = cmd else {
                if self.handle(cmd).await {
                    continue;
                }
                break;
            };
            let mut batch = vec![(msg, token)];
            let mut after = None;
            while batch.len() < PUBLISH_BATCH {
                match data.try_recv() {
                    Ok(QueueCmd::Publish(m, t)) => batch.push((m, t)),
                    Ok(other) => {
                        after = Some(other);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.publish(batch).await;
            if let Some(cmd) = after {
                if !self.handle(cmd).await {
                    break;
                }
            }
        }
        self.drain().await;
        self.q.closed();
    }

    /// The home node stopped answering: its consumers here are cancelled (basic.cancel to
    /// their clients, as RabbitMQ does when a queue's node goes down); their registrations
    /// there went with it.
    fn home_lost(&mut self) {
        for (_, spec) in self.consumers.drain() {
            let _ = spec.sink.send(ConsumerEvent::Cancelled {
                channel: spec.channel,
                tag: spec.tag.clone(),
            });
        }
    }

    async fn call(&self, op: RemoteOp) -> Result<RemoteReply, CoreError> {
        match self.link.call(&self.q, op).await? {
            RemoteReply::Failed(code, text) => Err(CoreError::Remote { code, text }),
            reply => Ok(reply),
        }
    }

    /// Returns deliveries (numbered here) home: at once, and again from a task of its own
    /// while the home node does not answer. Those of a home task that is gone are not: its
    /// successor has them already.
    async fn give_back(&self, local: Vec<u64>) {
        let (seqs, _) = self.tasks.newest(local);
        if seqs.is_empty() {
            return;
        }
        let op = RemoteOp::Requeue(seqs.clone());
        if self.link.call(&self.q, op).await.is_err() {
            tokio::spawn(give_back(self.link.clone(), self.q.clone(), seqs));
        }
    }

    /// Sends an ack or a drop of deliveries (numbered here) home; one that is not taken
    /// there, or was for a home task that is gone, is counted, so the sync of the channel
    /// that made it answers false. So are those sent to an earlier task than this one's:
    /// a sync can no longer ask it.
    async fn settle(&mut self, local: Vec<u64>, op: fn(Vec<u64>) -> RemoteOp) {
        let (seqs, gone) = self.tasks.newest(local);
        let to = self.tasks.newest_task();
        let moved = self.settled_to.is_some_and(|t| Some(t) != to);
        if to.is_some() {
            self.settled_to = to;
        }
        let taken = seqs.is_empty() || matches!(self.call(op(seqs)).await, Ok(RemoteReply::Done));
        if gone > 0 || !taken || moved {
            self.q.settlement_lost();
        }
    }

    /// Sends a batch of publishes home. To a quorum queue, up to [`PUBLISHES_IN_FLIGHT`]
    /// batches travel at once (each call waits for its batch's commit), the home taking
    /// each after those sent before it; to a classic queue, one at a time.
    async fn publish(&mut self, batch: Batch) {
        for (m, _) in &batch {
            self.q.taken(m);
        }
        if !self.q.args.quorum {
            forward(self.link.clone(), self.q.clone(), batch, None, false).await;
            return;
        }
        while self.in_flight.front().is_some_and(|c| c.is_finished()) {
            self.in_flight.pop_front();
        }
        if self.in_flight.len() >= PUBLISHES_IN_FLIGHT {
            if let Some(call) = self.in_flight.pop_front() {
                let _ = call.await;
            }
        }
        // Numbered by the queue's enqueuer here, which a replaced proxy may share: a batch
        // follows any call of it still unanswered, this proxy's or its predecessor's.
        let (sent, follows, unanswered) = self.q.enqueuer().number(batch.len() as u64);
        let (link, q) = (self.link.clone(), self.q.clone());
        self.in_flight.push_back(tokio::spawn(async move {
            forward(link, q, batch, Some(sent), follows).await;
            drop(unanswered);
        }));
    }

    /// Waits for every publish call in flight (what is sent next must not overtake them).
    async fn drain(&mut self) {
        while let Some(call) = self.in_flight.pop_front() {
            let _ = call.await;
        }
    }

    /// Carries out one command; false when the task should end.
    async fn handle(&mut self, cmd: QueueCmd) -> bool {
        if !matches!(cmd, QueueCmd::Publish(..) | QueueCmd::PublishFrom(..)) {
            self.drain().await;
        }
        match cmd {
            QueueCmd::Publish(msg, token) | QueueCmd::PublishFrom(msg, token, _) => {
                self.publish(vec![(msg, token)]).await
            }
            QueueCmd::Consume(spec, reply) => {
                let prefetch = match (spec.prefetch, spec.limiter.limit()) {
                    (0, l) | (l, 0) => l,
                    (a, b) => a.min(b),
                };
                let op = RemoteOp::Consume(RemoteConsumer {
                    id: spec.id,
                    tag: spec.tag.to_string(),
                    channel: spec.channel,
                    no_ack: spec.no_ack,
                    exclusive: spec.exclusive,
                    prefetch,
                    priority: spec.priority,
                    timeout: spec.timeout,
                });
                let id = spec.id;
                self.consumers.insert(id, spec);
                let done = self.call(op).await.map(|_| ());
                if done.is_err() {
                    self.consumers.remove(&id);
                }
                let _ = reply.send(done);
            }
            QueueCmd::Cancel(id) => {
                if self.consumers.remove(&id).is_some() {
                    let _ = self.call(RemoteOp::Cancel(id)).await;
                }
            }
            QueueCmd::Handoff(to) => {
                // The queue's leader moved: the consumers register with the new handle, and
                // go from the old home if it still answers.
                for (id, spec) in self.consumers.drain() {
                    let (link, q) = (self.link.clone(), self.q.clone());
                    tokio::spawn(async move { link.call(&q, RemoteOp::Cancel(id)).await });
                    let sink = spec.sink.clone();
                    let _ = sink.send(ConsumerEvent::Moved {
                        spec: Box::new(spec),
                        to: to.clone(),
                    });
                }
            }
            QueueCmd::Ack(seqs) => self.settle(seqs, RemoteOp::Ack).await,
            QueueCmd::Requeue(seqs) => self.give_back(seqs).await,
            QueueCmd::Discard(seqs) => self.settle(seqs, RemoteOp::Discard).await,
            QueueCmd::Undelivered(seq, _) => self.give_back(vec![seq]).await,
            QueueCmd::RemoteDeliveries(consumer, items) => self.deliver(consumer, items),
            QueueCmd::RemoteCancelled(consumer) => {
                if let Some(spec) = self.consumers.remove(&consumer) {
                    let _ = spec.sink.send(ConsumerEvent::Cancelled {
                        channel: spec.channel,
                        tag: spec.tag.clone(),
                    });
                }
            }
            // Streams of other nodes are not served over the stream protocol here (the
            // connection sends their clients to the stream's node).
            QueueCmd::Stream(_) => {}
            QueueCmd::RemoteTimedOut(consumer, timeout) => {
                if let Some(spec) = self.consumers.get(&consumer) {
                    let _ = spec.sink.send(ConsumerEvent::TimedOut {
                        channel: spec.channel,
                        timeout,
                    });
                }
            }
            QueueCmd::Get(no_ack, reply) => {
                let call = self.call(RemoteOp::Get { no_ack });
                // A quorum queue's leader may move while the call waits on its old node (cut
                // off, the call runs to its timeout): once this handle is replaced, the get
                // answers empty and the client's next one goes to the new leader.
                let answer = match self.q.args.quorum {
                    true => tokio::select! {
                        r = call => r,
                        () = replaced(&self.q) => Ok(RemoteReply::Got(None)),
                    },
                    false => call.await,
                };
                let got = match answer {
                    Ok(RemoteReply::Got(Some(g))) => g.msg.message().map(|msg| GetResult {
                        seq: self.tasks.local(g.instance, g.seq),
                        msg: Arc::new(msg),
                        redelivered: g.redelivered,
                        remaining: g.remaining,
                    }),
                    Ok(_) => None,
                    // Dropping the reply reports the home node down.
                    Err(_) => return true,
                };
                let _ = reply.send(got);
            }
            QueueCmd::Peek(count, reply) => {
                let peeked = match self.call(RemoteOp::Peek(count)).await {
                    Ok(RemoteReply::Peeked(all)) => all
                        .into_iter()
                        .filter_map(|(m, redelivered)| {
                            Some(super::Peeked {
                                msg: Arc::new(m.message()?),
                                redelivered,
                            })
                        })
                        .collect(),
                    Ok(_) => Vec::new(),
                    Err(_) => return true,
                };
                let _ = reply.send(peeked);
            }
            QueueCmd::Purge(reply) => {
                if let Ok(RemoteReply::Count(n)) = self.call(RemoteOp::Purge).await {
                    let _ = reply.send(n);
                }
            }
            QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            } => {
                let done = self.call(RemoteOp::Delete {
                    if_unused,
                    if_empty,
                });
                let _ = reply.send(match done.await {
                    Ok(RemoteReply::Count(n)) => Ok(n),
                    Ok(_) => Ok(0),
                    Err(e) => Err(e),
                });
            }
            QueueCmd::Stats(reply) => {
                if self.q.args.quorum {
                    // A quorum queue whose leader does not answer in time counts nothing, as
                    // RabbitMQ's does (its other members are there; it is led again soon).
                    let asked =
                        tokio::time::timeout(QUORUM_STATS_TIMEOUT, self.call(RemoteOp::Stats));
                    let _ = reply.send(match asked.await {
                        Ok(Ok(RemoteReply::Stats(ready, consumers))) => (ready, consumers),
                        _ => (0, 0),
                    });
                } else if let Ok(RemoteReply::Stats(ready, consumers)) =
                    self.call(RemoteOp::Stats).await
                {
                    let _ = reply.send((ready, consumers));
                }
            }
            QueueCmd::Info(reply) => {
                if let Ok(RemoteReply::Info(i)) = self.call(RemoteOp::Info).await {
                    let _ = reply.send(i.info());
                }
            }
            QueueCmd::Consumers(reply) => {
                let _ = reply.send(self.consumers.values().map(summary).collect());
            }
            QueueCmd::Flush(reply) => {
                let _ = reply.send(());
            }
            QueueCmd::Sync(reply) => {
                let synced = match self.settled_to {
                    Some(task) => {
                        matches!(self.call(RemoteOp::Sync(task)).await, Ok(RemoteReply::Done))
                    }
                    // Nothing was sent home (what was settled here was counted lost).
                    None => true,
                };
                let _ = reply.send(synced);
            }
            QueueCmd::Shutdown => return false,
            QueueCmd::Touch => {
                // Told without waiting: a redeclare here must not wait on the home node.
                let (link, q) = (self.link.clone(), self.q.clone());
                tokio::spawn(async move {
                    let _ = link.call(&q, RemoteOp::Touch).await;
                });
            }
            QueueCmd::Sample
            | QueueCmd::Policy(_)
            | QueueCmd::TakenFrom(..)
            | QueueCmd::Kick
            | QueueCmd::Reserved(..)
            | QueueCmd::DeadLetterSent(..) => {}
        }
        true
    }

    /// Pushes deliveries from the home node to a consumer here.
    fn deliver(&mut self, consumer: u64, items: Vec<RemoteDelivery>) {
        let Some(spec) = self.consumers.get(&consumer) else {
            // Cancelled meanwhile (or from before this node restarted): they go back, and
            // the home node stops delivering to it.
            let seqs = items.into_iter().map(|d| d.seq).collect();
            let (link, q) = (self.link.clone(), self.q.clone());
            tokio::spawn(async move {
                let _ = link.call(&q, RemoteOp::Cancel(consumer)).await;
                give_back(link, q, seqs).await
            });
            return;
        };
        let mut refused = Vec::new();
        for d in items {
            let seq = self.tasks.local(d.instance, d.seq);
            let Some(msg) = d.msg.message() else {
                continue;
            };
            if !refused.is_empty() {
                refused.push(seq);
                continue;
            }
            if !spec.no_ack {
                spec.limiter.acquire_granted();
            }
            spec.pending.fetch_add(1, Ordering::AcqRel);
            let sent = spec.sink.send(ConsumerEvent::Deliver(Delivery {
                channel: spec.channel,
                tag: spec.tag.clone(),
                consumer: spec.id,
                queue: self.q.clone(),
                seq,
                redelivered: d.redelivered,
                msg: Arc::new(msg),
                no_ack: spec.no_ack,
                pending: spec.pending.clone(),
            }));
            if sent.is_err() {
                // The consumer's connection is gone (its cleanup cancels the consumer): what
                // it can no longer take goes back.
                if !spec.no_ack {
                    spec.limiter.release(1);
                }
                spec.pending.fetch_sub(1, Ordering::AcqRel);
                refused.push(seq);
            }
        }
        if !refused.is_empty() {
            self.consumers.remove(&consumer);
            let (seqs, _) = self.tasks.newest(refused);
            let (link, q) = (self.link.clone(), self.q.clone());
            tokio::spawn(async move {
                let _ = link.call(&q, RemoteOp::Cancel(consumer)).await;
                give_back(link, q, seqs).await
            });
        }
    }
}

/// Sends deliveries back to the home node of `q`, trying again while it does not answer (for
/// [`GIVE_BACK_FOR`]): one lost on the way would stay held there, for a consumer that is
/// gone, as long as this node answers.
async fn give_back(link: Arc<dyn RemoteLink>, q: QueueRef, seqs: Vec<u64>) {
    if seqs.is_empty() {
        return;
    }
    let until = tokio::time::Instant::now() + GIVE_BACK_FOR;
    while link
        .call(&q, RemoteOp::Requeue(seqs.clone()))
        .await
        .is_err()
    {
        if tokio::time::Instant::now() >= until {
            tracing::warn!(queue = %q.name, vhost = %q.vhost, n = seqs.len(), "deliveries could not be given back to the queue's node");
            return;
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// A consumer here of a remote queue, as the management API shows it.
fn summary(spec: &ConsumerSpec) -> super::ConsumerSummary {
    super::ConsumerSummary {
        tag: spec.tag.clone(),
        channel: spec.channel,
        connection: spec.connection,
        ack_required: !spec.no_ack,
        exclusive: spec.exclusive,
        prefetch: spec.prefetch,
        priority: spec.priority,
        timeout: spec.timeout,
    }
}

impl QueueShared {
    /// Hands deliveries the home node made to consumer `consumer` here to its connection.
    pub fn remote_deliveries(&self, consumer: u64, items: Vec<RemoteDelivery>) {
        self.control(QueueCmd::RemoteDeliveries(consumer, items));
    }

    /// The home node cancelled consumer `consumer` here (its queue went away there).
    pub fn remote_cancelled(&self, consumer: u64) {
        self.control(QueueCmd::RemoteCancelled(consumer));
    }

    /// A delivery to consumer `consumer` here stayed unacked past `timeout` ms at home.
    pub fn remote_timed_out(&self, consumer: u64, timeout: u64) {
        self.control(QueueCmd::RemoteTimedOut(consumer, timeout));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settlements_queued_behind_one_are_merged_until_another_kind() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for cmd in [
            QueueCmd::Ack(vec![2]),
            QueueCmd::Ack(vec![3, 4]),
            QueueCmd::Requeue(vec![5]),
            QueueCmd::Ack(vec![6]),
        ] {
            tx.send(cmd).expect("send");
        }
        let mut held = None;
        let first = merged(QueueCmd::Ack(vec![1]), &mut rx, &mut held);
        assert!(matches!(first, QueueCmd::Ack(ref s) if s == &[1, 2, 3, 4]));
        assert!(matches!(held, Some(QueueCmd::Requeue(ref s)) if s == &[5]));
        let mut held = None;
        let other = merged(QueueCmd::Kick, &mut rx, &mut held);
        assert!(matches!(other, QueueCmd::Kick) && held.is_none());
        let last = merged(QueueCmd::Discard(vec![7]), &mut rx, &mut held);
        assert!(matches!(last, QueueCmd::Discard(ref s) if s == &[7]));
        assert!(matches!(held, Some(QueueCmd::Ack(ref s)) if s == &[6]));
    }
}
