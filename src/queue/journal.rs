//! Where a replicated (quorum) queue's task records its messages instead of the node's store:
//! its Raft group, through the cluster ([`crate::replication`] implements it). The task calls
//! it exactly where a durable classic queue writes to the store, in the same order; confirms
//! complete once the group has committed (a majority of members have it on disk).

use crate::confirm::ConfirmToken;
use crate::message::Message;
use std::sync::Arc;

/// A replicated queue's log of changes, as its task sees it.
pub trait Journal: Send + Sync + std::fmt::Debug {
    /// Records a message under its sequence number; `token` completes (true) once it is
    /// committed, false when it could not be.
    fn put(&self, seq: u64, msg: Arc<Message>, token: Option<ConfirmToken>);
    /// Forgets messages (acked, dropped or purged).
    fn remove(&self, seqs: Vec<u64>);
    /// Forgets the messages with sequence numbers `from..=to`.
    fn remove_range(&self, from: u64, to: u64);
    /// Records that any message up to `seq` may have been handed to a client (a new
    /// leader's task flags them redelivered and numbers new messages after `seq`).
    fn delivered(&self, seq: u64);
    /// Records that the message `seq` (`msg`) has come back unacknowledged `returns` times,
    /// so its `x-delivery-count` and delivery limit hold under a new leader too.
    fn returned(&self, seq: u64, msg: &Arc<Message>, returns: u32);
    /// Records that the message `seq` was dead-lettered at least once: it leaves the queue's
    /// messages and its dead-lettered `copy` is kept in their place, in one write, until
    /// [`Journal::dead_letters_sent`] (a new leader's task sends it again).
    fn dead_lettered(&self, seq: u64, copy: &Arc<Message>);
    /// Forgets the dead-lettered copies `seqs` (their targets confirmed them, or the queue no
    /// longer dead-letters at least once).
    fn dead_letters_sent(&self, seqs: Vec<u64>);
    /// Records the highest publish number taken from each recent enqueuer, after the
    /// messages it counts: a new leader drops copies of them sent again.
    fn enqueuers(&self, seen: &[(u64, u64)]);
    /// Completes `token` once everything recorded before it is committed (true), or could
    /// not be (false): the confirm of a copy of a message taken before.
    fn confirm(&self, token: ConfirmToken);
    /// Answers `done` once everything recorded before this call is committed (true), or
    /// could not be (false): what a channel's `close-ok` waits for after its acks.
    fn sync(&self, done: tokio::sync::oneshot::Sender<bool>);
    /// Whether a write failed: the task's state may differ from what was committed, so it
    /// is to be started again from the journal.
    fn broken(&self) -> bool;
    /// Whether the task's leadership is current enough to hand a message out: a write of its
    /// started less than a lease ago and committed, so no other member can lead yet (a
    /// leader cut off from the others learns it is deposed only when a write fails, and a
    /// redelivery writes nothing). False until a write has committed.
    fn leased(&self) -> bool;
    /// Ties the journal to its group's leadership `term` (when it is not tied to one yet) and
    /// says whether its task may go on leading: false when it is broken, or tied to an
    /// earlier term (another leader may have written since; it is broken from now on, and
    /// a task is started afresh from what the group committed).
    fn lead(&self, term: u64) -> bool;
    /// The task is being replaced (by another node's leader or a fresh task) or deleted:
    /// nothing it does from now on is written (its shutdown must not empty the journal).
    fn detach(&self);
}

/// What a replicated queue's journal held, for a new task (a new leader's) to start from.
#[derive(Debug, Default)]
pub struct Journaled {
    /// The messages, by sequence number, in order, with the times each came back.
    pub messages: Vec<(u64, Arc<Message>, u32)>,
    /// The highest sequence number handed to a client.
    pub delivered: Option<u64>,
    /// The highest publish number taken from each recent enqueuer ([`Journal::enqueuers`]).
    pub enqueuers: Vec<(u64, u64)>,
    /// The dead-lettered copies not yet confirmed by their targets, by the sequence number
    /// of their message ([`Journal::dead_lettered`]).
    pub dead: Vec<(u64, Arc<Message>)>,
}
