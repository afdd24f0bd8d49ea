//! At-least-once dead-lettering, as RabbitMQ's quorum queues do it (`dead-letter-strategy:
//! at-least-once` with `overflow: reject-publish` and a dead-letter exchange): a message the
//! queue dead-letters stays in it (`messages_dlx`), its dead-lettered copy written in its
//! place in the journal, until every queue the dead-letter exchange routes the copy to has
//! confirmed it. A copy that reaches no queue (no exchange, no binding, a cycle) or that a
//! target refuses or does not confirm in time is sent again after [`RETRY`] (RabbitMQ: three
//! minutes). A new leader's task sends again what its journal still holds. A queue that is
//! not replicated (a single node's quorum queue) keeps the message itself in the store until
//! its copy is confirmed. When the strategy no longer applies (a policy changed), what is
//! held is dropped, as RabbitMQ drops it.

use super::{now_ms, Pending, QueueActor};
use crate::message::Message;
use crate::queue::deadletter::Reason;
use crate::queue::QueueCmd;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Copies on their way to their targets at once, per queue.
const WINDOW: usize = 64;
/// How long a copy that did not get through waits before it is sent again, ms.
const RETRY: u64 = 5_000;

/// The dead-lettered copies a queue holds until their targets confirm them.
#[derive(Debug, Default)]
pub(super) struct DeadLetters {
    held: BTreeMap<u64, Held>,
    bytes: u64,
    /// Sequence numbers to send, in order.
    to_send: VecDeque<u64>,
    /// Ones that did not get through, sent again at `retry_at`.
    failed: Vec<u64>,
    retry_at: Option<u64>,
    in_flight: usize,
    /// A warning was logged for copies that reached no queue (once per task, as RabbitMQ).
    warned: bool,
}

#[derive(Debug)]
struct Held {
    copy: Arc<Message>,
    /// The message is in the store under its number (a queue without a journal).
    stored: bool,
}

impl DeadLetters {
    /// Copies held, and their body bytes.
    pub(super) fn count(&self) -> (usize, u64) {
        (self.held.len(), self.bytes)
    }

    /// When copies that did not get through go again.
    pub(super) fn retry_at(&self) -> Option<u64> {
        self.retry_at
    }

    fn hold(&mut self, seq: u64, copy: Arc<Message>, stored: bool) {
        self.bytes += copy.body_len() as u64;
        if self.held.insert(seq, Held { copy, stored }).is_none() {
            self.to_send.push_back(seq);
        }
    }

    fn take(&mut self, seq: u64) -> Option<Held> {
        let h = self.held.remove(&seq)?;
        self.bytes = self.bytes.saturating_sub(h.copy.body_len() as u64);
        Some(h)
    }
}

impl QueueActor {
    /// Whether this queue dead-letters at least once now.
    pub(super) fn at_least_once(&self) -> bool {
        self.args.dead_letters_at_least_once()
    }

    /// Keeps `msg`, dead-lettered for `reason`, until its copy is confirmed.
    pub(super) fn hold_dead_letter(&mut self, seq: u64, msg: &Message, reason: Reason) {
        let Some(copy) = self.dead_letter_copy(msg, reason, crate::clock::unix_secs()) else {
            return;
        };
        let copy = Arc::new(copy);
        let stored = self.shared.journal.is_none() && self.shared.persists(msg);
        if self.shared.journal.is_some() {
            self.pending.push(Pending::DeadLettered(seq, copy.clone()));
        }
        self.dlx.hold(seq, copy, stored);
    }

    /// Starts copies on their way, within the window; those that failed go again once
    /// their retry time has come.
    pub(super) fn forward_dead_letters(&mut self) {
        if self.dlx.held.is_empty() {
            return;
        }
        if self.dlx.retry_at.is_some_and(|at| now_ms() >= at) {
            self.dlx.retry_at = None;
            let mut failed = std::mem::take(&mut self.dlx.failed);
            failed.sort_unstable();
            self.dlx.to_send.extend(failed);
        }
        let (Some(dlx), Some(host)) = (self.args.dead_letter_exchange.clone(), self.host.upgrade())
        else {
            return;
        };
        while self.dlx.in_flight < WINDOW {
            let Some(seq) = self.dlx.to_send.pop_front() else {
                break;
            };
            let Some(copy) = self.dlx.held.get(&seq).map(|h| h.copy.clone()) else {
                continue;
            };
            self.dlx.in_flight += 1;
            let (host, q, dlx) = (host.clone(), self.shared.clone(), dlx.clone());
            tokio::spawn(async move {
                let sent = host.dead_letter_confirmed(&dlx, copy).await;
                q.control(QueueCmd::DeadLetterSent(seq, sent));
            });
        }
    }

    /// A copy's targets confirmed it (`sent`), or it did not get through.
    pub(super) fn dead_letter_sent(&mut self, seq: u64, sent: bool) {
        self.dlx.in_flight = self.dlx.in_flight.saturating_sub(1);
        if !sent {
            if self.dlx.held.contains_key(&seq) {
                if !self.dlx.warned {
                    self.dlx.warned = true;
                    tracing::warn!(
                        queue = %self.shared.name,
                        vhost = %self.shared.vhost,
                        dlx = ?self.args.dead_letter_exchange,
                        "cannot forward dead-lettered messages (no queue bound, or a target \
                         did not confirm): they stay in the queue and are sent again"
                    );
                }
                self.dlx.failed.push(seq);
                self.dlx.retry_at.get_or_insert(now_ms() + RETRY);
            }
            return;
        }
        if let Some(h) = self.dlx.take(seq) {
            self.forget_dead(vec![(seq, h)]);
        }
    }

    /// Drops every held copy, when the queue no longer dead-letters at least once.
    pub(super) fn drop_dead_letters_unless_at_least_once(&mut self) {
        if self.dlx.held.is_empty() || self.at_least_once() {
            return;
        }
        let held = std::mem::take(&mut self.dlx.held);
        self.dlx = DeadLetters {
            in_flight: self.dlx.in_flight,
            ..DeadLetters::default()
        };
        self.forget_dead(held.into_iter().collect());
    }

    /// Starts with the copies a journal held (a new leader's task).
    pub(super) fn resume_dead_letters(&mut self, dead: Vec<(u64, Arc<Message>)>) {
        for (seq, copy) in dead {
            self.dlx.hold(seq, copy, false);
        }
    }

    fn forget_dead(&mut self, gone: Vec<(u64, Held)>) {
        if self.shared.journal.is_some() {
            self.pending.push(Pending::DeadLettersSent(
                gone.into_iter().map(|(seq, _)| seq).collect(),
            ));
        } else {
            let stored = gone
                .into_iter()
                .filter(|(_, h)| h.stored)
                .map(|(seq, _)| seq)
                .collect();
            self.forget_stored(stored);
        }
    }
}
