//! The forwarding task of a consumer on another node (see `forward`): it batches what the
//! queue delivers, sends it to the consumer's node, gives the queue its delivery window back
//! once the batch is there, and requeues what that node held when it stops answering.

use super::wire::{origin_alive, send, App, Origin};
use crate::cluster::MetaNode;
use crate::queue::consumer::{ConsumerEvent, Delivery};
use crate::queue::remote::{RemoteDelivery, RemoteReply, WireMessage};
use crate::queue::QueueRef;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Deliveries sent to a consumer's node in one request at most.
const DELIVERY_BATCH: usize = 256;
/// How often a remote consumer's forwarding task checks that the consumer's node answers.
pub(super) const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Checks in a row that node may miss before its deliveries are requeued.
pub(super) const WATCH_MISSES: u32 = 2;

/// Deliveries a queue here made to another node's consumers and that node has not settled.
pub(super) type Outstanding = Arc<Mutex<BTreeSet<u64>>>;

/// The forwarding task of one remote consumer.
pub(super) struct Outbound {
    pub(super) node: Arc<MetaNode>,
    pub(super) origin: Origin,
    /// The consumer's id on its node, and here.
    pub(super) consumer: u64,
    pub(super) here: u64,
    pub(super) q: QueueRef,
    pub(super) pending: Arc<AtomicU32>,
    /// What the consumer's node holds unsettled of this queue (None: no-ack consumer).
    pub(super) outstanding: Option<Outstanding>,
}

impl Outbound {
    /// Forwards the consumer's events until it is cancelled or its node is lost; then
    /// what the queue had already handed to it goes back undelivered.
    pub(super) async fn run(self, mut events: mpsc::UnboundedReceiver<ConsumerEvent>) {
        self.forward_events(&mut events).await;
        events.close();
        while let Ok(e) = events.try_recv() {
            if let ConsumerEvent::Deliver(d) = e {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                self.q.return_undelivered(d.seq, d.msg).await;
            }
        }
    }

    async fn forward_events(&self, events: &mut mpsc::UnboundedReceiver<ConsumerEvent>) {
        let mut next = None;
        let mut watch = tokio::time::interval(WATCH_EVERY);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut missed = 0;
        loop {
            let event = match next.take() {
                Some(e) => e,
                None => tokio::select! {
                    e = events.recv() => match e {
                        Some(e) => e,
                        None => return,
                    },
                    _ = watch.tick(), if self.holds_any() => {
                        missed = if self.origin_alive().await { 0 } else { missed + 1 };
                        if missed >= WATCH_MISSES {
                            self.origin_lost().await;
                            return;
                        }
                        continue;
                    }
                },
            };
            match event {
                ConsumerEvent::Deliver(d) => {
                    let mut batch = vec![d];
                    while batch.len() < DELIVERY_BATCH {
                        match events.try_recv() {
                            Ok(ConsumerEvent::Deliver(d)) => batch.push(d),
                            Ok(other) => {
                                next = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    if !self.forward(batch).await {
                        self.origin_lost().await;
                        return;
                    }
                }
                ConsumerEvent::Cancelled { .. } => {
                    let app = App::Cancelled {
                        vhost: self.q.vhost.clone(),
                        queue: self.q.name.clone(),
                        consumer: self.consumer,
                        incarnation: self.origin.incarnation,
                    };
                    let _ = send(&self.node, &self.origin.node, &app).await;
                    return;
                }
                ConsumerEvent::TimedOut { timeout, .. } => {
                    // The consumer's node closes the channel; its cancel and the requeue of
                    // what the channel held come back here as for any channel close.
                    let app = App::TimedOut {
                        vhost: self.q.vhost.clone(),
                        queue: self.q.name.clone(),
                        consumer: self.consumer,
                        incarnation: self.origin.incarnation,
                        timeout,
                    };
                    let _ = send(&self.node, &self.origin.node, &app).await;
                }
                _ => {}
            }
        }
    }

    /// Whether the consumer's node answers in the run the consumer belongs to (a restarted
    /// node answers, but its consumers and what they held are gone).
    async fn origin_alive(&self) -> bool {
        origin_alive(&self.node, &self.origin).await
    }

    /// Whether the consumer's node holds deliveries of this queue unsettled.
    fn holds_any(&self) -> bool {
        self.outstanding
            .as_ref()
            .is_some_and(|s| s.lock().is_ok_and(|s| !s.is_empty()))
    }

    /// The consumer's node stopped answering: the consumer goes, and what that node held
    /// unsettled of this queue is requeued (its channels went with it).
    async fn origin_lost(&self) {
        self.q.cancel(self.here).await;
        let held: Vec<u64> = match &self.outstanding {
            Some(set) => set
                .lock()
                .map(|mut s| std::mem::take(&mut *s).into_iter().collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        if !held.is_empty() {
            self.q.requeue(held).await;
        }
    }

    /// Sends deliveries to the consumer's node; false (and they are requeued) when it does
    /// not take them.
    async fn forward(&self, batch: Vec<Delivery>) -> bool {
        let n = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        let seqs: Vec<u64> = batch.iter().map(|d| d.seq).collect();
        let items = batch
            .iter()
            .map(|d| RemoteDelivery {
                instance: self.q.instance,
                seq: d.seq,
                redelivered: d.redelivered,
                msg: WireMessage::of(&d.msg),
            })
            .collect();
        if let Some(Ok(mut set)) = self.outstanding.as_ref().map(|s| s.lock()) {
            set.extend(&seqs);
        }
        let app = App::Deliveries {
            vhost: self.q.vhost.clone(),
            queue: self.q.name.clone(),
            consumer: self.consumer,
            incarnation: self.origin.incarnation,
            items,
        };
        let taken = matches!(
            send(&self.node, &self.origin.node, &app).await,
            Ok(RemoteReply::Done)
        );
        self.pending.fetch_sub(n, Ordering::AcqRel);
        if !taken {
            if let Some(Ok(mut set)) = self.outstanding.as_ref().map(|s| s.lock()) {
                for s in &seqs {
                    set.remove(s);
                }
            }
            self.q.requeue(seqs).await;
        }
        self.q.kick();
        taken
    }
}
