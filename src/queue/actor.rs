//! The queue task: the ready list (kept in publish order, requeued messages go back to their
//! original place), the unacked map, and round-robin push delivery within consumer credit.

use super::consumer::{ConsumerEvent, ConsumerSpec, Delivery, PENDING_WINDOW};
use super::{GetResult, QueueCmd, QueueRef};
use crate::error::AmqpError;
use crate::message::Message;
use crate::vhost::VHost;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// Commands handled per wake-up before delivering.
const BATCH: usize = 256;

#[derive(Debug)]
struct Ready {
    seq: u64,
    msg: Arc<Message>,
    redelivered: bool,
}

#[derive(Debug)]
struct Unacked {
    msg: Arc<Message>,
    consumer: Option<u64>,
}

#[derive(Debug)]
struct Consumer {
    spec: ConsumerSpec,
    unacked: u32,
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

struct QueueActor {
    shared: QueueRef,
    vhost: Weak<VHost>,
    ready: VecDeque<Ready>,
    unacked: HashMap<u64, Unacked>,
    next_seq: u64,
    consumers: Vec<Consumer>,
    next_consumer: usize,
    had_consumers: bool,
    stopped: bool,
}

/// Spawns the task of a queue.
pub(super) fn start(shared: QueueRef, vhost: Weak<VHost>, rx: mpsc::Receiver<QueueCmd>) {
    let actor = QueueActor {
        shared,
        vhost,
        ready: VecDeque::new(),
        unacked: HashMap::new(),
        next_seq: 0,
        consumers: Vec::new(),
        next_consumer: 0,
        had_consumers: false,
        stopped: false,
    };
    tokio::spawn(actor.run(rx));
}

impl QueueActor {
    async fn run(mut self, mut rx: mpsc::Receiver<QueueCmd>) {
        let mut batch = Vec::with_capacity(BATCH);
        while !self.stopped {
            if rx.recv_many(&mut batch, BATCH).await == 0 {
                break;
            }
            for cmd in batch.drain(..) {
                self.handle(cmd);
                if self.stopped {
                    break;
                }
            }
            if !self.stopped {
                self.deliver();
            }
        }
    }

    fn handle(&mut self, cmd: QueueCmd) {
        match cmd {
            QueueCmd::Publish(msg) => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.ready.push_back(Ready {
                    seq,
                    msg,
                    redelivered: false,
                });
            }
            QueueCmd::Consume(spec, reply) => {
                let _ = reply.send(self.add_consumer(spec));
            }
            QueueCmd::Cancel(id) => self.remove_consumer(id),
            QueueCmd::Ack(seqs) => {
                for seq in seqs {
                    self.settle(seq);
                }
            }
            QueueCmd::Discard(seqs) => {
                for seq in seqs {
                    self.settle(seq);
                }
            }
            QueueCmd::Requeue(seqs) => {
                for seq in seqs {
                    if let Some(u) = self.settle(seq) {
                        self.requeue(seq, u.msg);
                    }
                }
            }
            QueueCmd::Undelivered(seq, msg, redelivered) => {
                self.settle(seq);
                self.insert_ready(seq, msg, redelivered);
            }
            QueueCmd::Get(no_ack, reply) => {
                let got = self.ready.pop_front().map(|r| {
                    if !no_ack {
                        self.unacked.insert(
                            r.seq,
                            Unacked {
                                msg: r.msg.clone(),
                                consumer: None,
                            },
                        );
                    }
                    GetResult {
                        seq: r.seq,
                        msg: r.msg,
                        redelivered: r.redelivered,
                        remaining: self.ready.len() as u32,
                    }
                });
                let _ = reply.send(got);
            }
            QueueCmd::Purge(reply) => {
                let n = self.ready.len() as u32;
                self.ready.clear();
                let _ = reply.send(n);
            }
            QueueCmd::Delete {
                if_unused,
                if_empty,
                reply,
            } => {
                let r = if if_unused && !self.consumers.is_empty() {
                    Err(AmqpError::precondition_failed(format!(
                        "{} in use",
                        self.shared.describe()
                    )))
                } else if if_empty && !self.ready.is_empty() {
                    Err(AmqpError::precondition_failed(format!(
                        "{} is not empty",
                        self.shared.describe()
                    )))
                } else {
                    Ok(self.ready.len() as u32)
                };
                if r.is_ok() {
                    self.stop();
                }
                let _ = reply.send(r);
            }
            QueueCmd::Stats(reply) => {
                let _ = reply.send((self.ready.len() as u32, self.consumers.len() as u32));
            }
            QueueCmd::Kick => {}
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
    fn requeue(&mut self, seq: u64, msg: Arc<Message>) {
        self.insert_ready(seq, msg, true);
    }

    fn insert_ready(&mut self, seq: u64, msg: Arc<Message>, redelivered: bool) {
        let entry = Ready {
            seq,
            msg,
            redelivered,
        };
        if self.ready.back().is_none_or(|r| r.seq < seq) {
            self.ready.push_back(entry);
        } else {
            let pos = self.ready.partition_point(|r| r.seq < seq);
            self.ready.insert(pos, entry);
        }
    }

    fn add_consumer(&mut self, spec: ConsumerSpec) -> Result<(), AmqpError> {
        if self.consumers.iter().any(|c| c.spec.exclusive)
            || (spec.exclusive && !self.consumers.is_empty())
        {
            return Err(AmqpError::access_refused(format!(
                "{} in exclusive use",
                self.shared.describe()
            )));
        }
        self.consumers.push(Consumer { spec, unacked: 0 });
        self.had_consumers = true;
        Ok(())
    }

    fn remove_consumer(&mut self, id: u64) {
        let before = self.consumers.len();
        self.consumers.retain(|c| c.spec.id != id);
        if before == self.consumers.len() {
            return;
        }
        for u in self.unacked.values_mut() {
            if u.consumer == Some(id) {
                u.consumer = None;
            }
        }
        if self.consumers.is_empty() && self.had_consumers && self.shared.auto_delete {
            if let Some(vhost) = self.vhost.upgrade() {
                vhost.forget_queue(&self.shared);
            }
            self.stop();
        }
    }

    /// Ends the task; consumers are told with basic.cancel.
    fn stop(&mut self) {
        for c in self.consumers.drain(..) {
            let _ = c.spec.sink.send(ConsumerEvent::Cancelled {
                channel: c.spec.channel,
                tag: c.spec.tag.clone(),
            });
        }
        self.ready.clear();
        self.unacked.clear();
        self.stopped = true;
    }

    /// Pushes ready messages to consumers round-robin while any has credit.
    fn deliver(&mut self) {
        let n = self.consumers.len();
        if n == 0 {
            return;
        }
        while !self.ready.is_empty() {
            let start = self.next_consumer % n;
            let Some(idx) = (0..n)
                .map(|i| (start + i) % n)
                .find(|&i| self.consumers[i].take_credit())
            else {
                return;
            };
            self.next_consumer = idx + 1;
            let Some(r) = self.ready.pop_front() else {
                return;
            };
            let c = &mut self.consumers[idx];
            if !c.spec.no_ack {
                c.unacked += 1;
                self.unacked.insert(
                    r.seq,
                    Unacked {
                        msg: r.msg.clone(),
                        consumer: Some(c.spec.id),
                    },
                );
            }
            c.spec.pending.fetch_add(1, Ordering::AcqRel);
            let d = Delivery {
                channel: c.spec.channel,
                tag: c.spec.tag.clone(),
                consumer: c.spec.id,
                queue: self.shared.clone(),
                seq: r.seq,
                redelivered: r.redelivered,
                msg: r.msg,
                no_ack: c.spec.no_ack,
                pending: c.spec.pending.clone(),
            };
            if let Err(mpsc::error::SendError(ConsumerEvent::Deliver(d))) =
                c.spec.sink.send(ConsumerEvent::Deliver(d))
            {
                // The connection is gone: the message was never delivered, so it goes back as it
                // was; the consumer is dropped (its channel's cleanup will follow).
                let id = c.spec.id;
                if !c.spec.no_ack {
                    c.spec.limiter.release(1);
                }
                self.settle(d.seq);
                self.insert_ready(d.seq, d.msg, d.redelivered);
                self.remove_consumer(id);
                if self.stopped {
                    return;
                }
                return self.deliver();
            }
        }
    }
}
