//! The single writer. It owns every write transaction: it takes everything pending, applies it
//! in one transaction, commits with `Durability::Immediate` (one fsync for the whole batch;
//! a batch of Raft groups' applied values alone waits for the next one), and only then
//! completes the confirms of that batch. Under load, batches grow while a commit
//! is in progress, so messages per fsync rise with the publish rate.

use super::schema::{
    self, BINDINGS, DELAYED, DELIVERED, EXCHANGES, EXPIRES, GROUP_VALUES, MESSAGES, META_TREE,
    PARAMETERS, PERMISSIONS, QUEUES, QUEUE_INDEX, RAFT_LOG, RAFT_STATE, USERS, VHOSTS,
    VHOST_LIMITS,
};
use crate::confirm::ConfirmToken;
use crate::message::Message;
use redb::{Database, Durability, ReadableTable};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify};

/// Operations per transaction at most.
const MAX_BATCH: usize = 8192;

/// A change to persist.
#[derive(Debug)]
pub(crate) enum Op {
    PutMessage {
        queue: u64,
        seq: u64,
        msg: Arc<Message>,
        /// When it expires, Unix milliseconds (a TTL survives a restart).
        expires_at: Option<u64>,
        token: Option<ConfirmToken>,
    },
    DeleteMessages {
        queue: u64,
        seqs: Vec<u64>,
    },
    /// Every stored message of a queue with a sequence in `from..=to`.
    DeleteRange {
        queue: u64,
        from: u64,
        to: u64,
    },
    Delivered {
        queue: u64,
        seq: u64,
    },
    PutExchange {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    DeleteExchange {
        key: Vec<u8>,
    },
    PutQueue {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    DeleteQueue {
        key: Vec<u8>,
        id: u64,
    },
    PutBinding {
        key: Vec<u8>,
    },
    DeleteBinding {
        key: Vec<u8>,
    },
    PutDelayed {
        key: (u64, u64),
        value: Vec<u8>,
        token: Option<ConfirmToken>,
    },
    DeleteDelayed {
        key: (u64, u64),
    },
    PutVhost(String),
    DeleteVhost(String),
    /// A vhost's limits as JSON (empty: none).
    PutVhostLimits {
        vhost: String,
        json: String,
    },
    PutUser {
        name: String,
        value: Vec<u8>,
    },
    DeleteUser(String),
    /// A permission or topic permission (key and value as `schema::encode_parts`).
    PutPermission {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    DeletePermission {
        key: Vec<u8>,
    },
    /// A runtime parameter (key as `schema::encode_parts` of component, vhost, name; JSON).
    PutParameter {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    DeleteParameter {
        key: Vec<u8>,
    },
    /// Entries (index, bytes) of a Raft group; `done` runs after their commit.
    AppendLog {
        group: u64,
        entries: Vec<(u64, Vec<u8>)>,
        done: Option<Flushed>,
    },
    /// A Raft group's entries from `from` on.
    TruncateLog {
        group: u64,
        from: u64,
    },
    /// A Raft group's entries up to `upto`, and in the same commit the state value `key`
    /// (the last purged log id) set to `purged`.
    PurgeLog {
        group: u64,
        upto: u64,
        key: u8,
        purged: Vec<u8>,
    },
    /// One of a Raft group's state values (`raft_log::RaftState` as a byte).
    PutRaftState {
        group: u64,
        key: u8,
        value: Vec<u8>,
    },
    /// Everything of a Raft group.
    DeleteRaftGroup(u64),
    /// Changes to the metadata tree and, in the same commit, state values of `group`.
    MetaTree {
        group: u64,
        /// Clear the whole tree first (a snapshot replaces it).
        clear: bool,
        changes: Vec<TreeOp>,
        state: Vec<(u8, Vec<u8>)>,
    },
    /// Changes to a Raft group's values and, in the same commit, its state values.
    GroupValues {
        group: u64,
        /// Clear the group's values first (a snapshot replaces them).
        clear: bool,
        changes: Vec<GroupChange>,
        state: Vec<(u8, Vec<u8>)>,
    },
    Barrier(oneshot::Sender<bool>),
    Shutdown,
}

/// One change to a Raft group's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupChange {
    /// Sets the value at a key.
    Put(u64, Vec<u8>),
    /// Removes the value at a key.
    Delete(u64),
    /// Removes the values at keys `from..=to`.
    DeleteRange(u64, u64),
    /// Removes every value.
    Clear,
}

/// One change to the metadata tree, keys as `schema::encode_parts` of a path.
#[derive(Debug)]
pub(crate) enum TreeOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Every key that starts with these bytes.
    DeletePrefix(Vec<u8>),
}

/// Called on the writer thread once an append is durable (true) or failed (false); it must
/// only hand the outcome on (send on a channel), never block.
pub(crate) struct Flushed(pub Box<dyn FnOnce(bool) + Send>);

impl std::fmt::Debug for Flushed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Flushed")
    }
}

/// Counters shared between the writer and the store handle.
#[derive(Debug, Default)]
pub(crate) struct WriterStats {
    /// Committed transactions.
    pub commits: AtomicU64,
    /// Operations applied.
    pub ops: AtomicU64,
    /// Bytes of message data submitted and not yet committed.
    pub inflight: AtomicUsize,
    /// Signalled after each commit (publishers waiting for `inflight` to drop).
    pub drained: Notify,
    /// A commit failed since the last success (disk alarm).
    pub failing: AtomicBool,
}

/// The open database, shared with readers; None while it is being reopened after an I/O error.
pub(crate) type SharedDb = Arc<RwLock<Option<Arc<Database>>>>;

/// Opens the database again (redb refuses all work after an I/O error until it is reopened).
pub(crate) type Reopen = Box<dyn Fn() -> Result<Database, redb::DatabaseError> + Send>;

/// Current database, if open.
pub(crate) fn current(db: &SharedDb) -> Option<Arc<Database>> {
    db.read().ok().and_then(|d| d.clone())
}

/// Closes and reopens the database after a failed commit, so that the store heals as soon as
/// the disk does. Readers that still hold the old handle are waited for briefly.
fn reopen(shared: &SharedDb, reopen: &Reopen) {
    if let Ok(mut slot) = shared.write() {
        slot.take();
    }
    for _ in 0..100 {
        match reopen() {
            Ok(db) => {
                if let Ok(mut slot) = shared.write() {
                    *slot = Some(Arc::new(db));
                }
                return;
            }
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => {
                tracing::error!(error = %e, "reopening the store failed; retrying with the next write");
                return;
            }
        }
    }
}

/// Runs the writer until `Op::Shutdown` or until every sender is gone.
pub(crate) fn run(
    shared: SharedDb,
    reopener: Reopen,
    mut rx: mpsc::UnboundedReceiver<Op>,
    stats: Arc<WriterStats>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut stop = false;
    while !stop {
        match rx.blocking_recv() {
            Some(op) => batch.push(op),
            None => break,
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let bytes: usize = batch
            .iter()
            .map(|op| match op {
                Op::PutMessage { msg, .. } => msg.stored_size(),
                _ => 0,
            })
            .sum();
        let result = match current(&shared) {
            Some(db) => apply(&db, &batch),
            None => Err(redb::Error::DatabaseClosed),
        };
        let ok = result.is_ok();
        if let Err(e) = result {
            tracing::error!(error = %e, "store commit failed; the batch's publishes are nacked");
            reopen(&shared, &reopener);
        }
        let was_failing = stats.failing.swap(!ok, Ordering::AcqRel);
        if !ok && !was_failing {
            tracing::error!(
                "disk alarm raised: the store cannot write; persistent publishes are nacked"
            );
        } else if ok && was_failing {
            tracing::warn!("disk alarm cleared: the store writes again");
        }
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats.ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
        for op in batch.drain(..) {
            match op {
                Op::PutMessage { token: Some(t), .. } | Op::PutDelayed { token: Some(t), .. } => {
                    t.complete(ok)
                }
                Op::Barrier(tx) => {
                    let _ = tx.send(ok);
                }
                Op::AppendLog { done: Some(f), .. } => (f.0)(ok),
                Op::Shutdown => stop = true,
                _ => {}
            }
        }
        stats.inflight.fetch_sub(bytes, Ordering::AcqRel);
        stats.drained.notify_waiters();
    }
}

/// How a batch is committed: with an fsync, unless all it holds is Raft groups applying
/// committed entries to their values (nothing waits for those; their log holds them, and is
/// applied again after a crash from the applied point committed with them). Such a commit
/// becomes durable with the next one that is, and no longer holds up the log appends queued
/// behind it with an fsync of its own.
fn durability(batch: &[Op]) -> Durability {
    match batch
        .iter()
        .all(|op| matches!(op, Op::GroupValues { clear: false, .. }))
    {
        true => Durability::None,
        false => Durability::Immediate,
    }
}

fn apply(db: &Database, batch: &[Op]) -> Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(durability(batch))
        .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
    {
        let mut messages = txn.open_table(MESSAGES)?;
        let mut index = txn.open_table(QUEUE_INDEX)?;
        let mut delivered = txn.open_table(DELIVERED)?;
        let mut exchanges = txn.open_table(EXCHANGES)?;
        let mut queues = txn.open_table(QUEUES)?;
        let mut bindings = txn.open_table(BINDINGS)?;
        let mut vhosts = txn.open_table(VHOSTS)?;
        let mut vhost_limits = txn.open_table(VHOST_LIMITS)?;
        let mut users = txn.open_table(USERS)?;
        let mut permissions = txn.open_table(PERMISSIONS)?;
        let mut parameters = txn.open_table(PARAMETERS)?;
        let mut delayed = txn.open_table(DELAYED)?;
        let mut expires = txn.open_table(EXPIRES)?;
        let mut raft_log = txn.open_table(RAFT_LOG)?;
        let mut raft_state = txn.open_table(RAFT_STATE)?;
        let mut meta_tree = txn.open_table(META_TREE)?;
        let mut group_values = txn.open_table(GROUP_VALUES)?;
        for op in batch {
            match op {
                Op::PutMessage {
                    queue,
                    seq,
                    msg,
                    expires_at,
                    ..
                } => {
                    if let Some(at) = expires_at {
                        expires.insert((*queue, *seq), *at)?;
                    }
                    let value = schema::encode_message(
                        msg.exchange.as_str(),
                        msg.routing_key.as_str(),
                        msg.raw_properties().len(),
                        msg.data(),
                    );
                    messages.insert((*queue, *seq), value.as_slice())?;
                    index.insert(
                        (*queue, *seq),
                        schema::index_entry(msg.body_len(), msg.priority.unwrap_or(0)),
                    )?;
                }
                Op::DeleteMessages { queue, seqs } => {
                    for seq in seqs {
                        expires.remove((*queue, *seq))?;
                        messages.remove((*queue, *seq))?;
                        index.remove((*queue, *seq))?;
                    }
                }
                Op::DeleteRange { queue, from, to } => {
                    let range = (*queue, *from)..=(*queue, *to);
                    messages.retain_in(range.clone(), |_, _| false)?;
                    index.retain_in(range.clone(), |_, _| false)?;
                    expires.retain_in(range, |_, _| false)?;
                }
                Op::Delivered { queue, seq } => {
                    delivered.insert(*queue, *seq)?;
                }
                Op::PutExchange { key, value } => {
                    exchanges.insert(key.as_slice(), value.as_slice())?;
                }
                Op::DeleteExchange { key } => {
                    exchanges.remove(key.as_slice())?;
                }
                Op::PutQueue { key, value } => {
                    queues.insert(key.as_slice(), value.as_slice())?;
                }
                Op::DeleteQueue { key, id } => {
                    // The row may already be a newer queue's of the same name (a vhost
                    // deleted and re-created while the old queue was being removed).
                    let same = queues.get(key.as_slice())?.is_some_and(|row| {
                        schema::decode_parts(row.value())
                            .and_then(|p| p.first().map(|i| i.to_vec()))
                            .is_some_and(|i| i == id.to_be_bytes())
                    });
                    if same {
                        queues.remove(key.as_slice())?;
                    }
                    messages.retain_in((*id, 0)..=(*id, u64::MAX), |_, _| false)?;
                    index.retain_in((*id, 0)..=(*id, u64::MAX), |_, _| false)?;
                    expires.retain_in((*id, 0)..=(*id, u64::MAX), |_, _| false)?;
                    delivered.remove(*id)?;
                }
                Op::PutBinding { key } => {
                    bindings.insert(key.as_slice(), ())?;
                }
                Op::DeleteBinding { key } => {
                    bindings.remove(key.as_slice())?;
                }
                Op::PutDelayed { key, value, .. } => {
                    delayed.insert(*key, value.as_slice())?;
                }
                Op::DeleteDelayed { key } => {
                    delayed.remove(*key)?;
                }
                Op::PutVhost(name) => {
                    vhosts.insert(name.as_str(), ())?;
                }
                Op::DeleteVhost(name) => {
                    vhosts.remove(name.as_str())?;
                    vhost_limits.remove(name.as_str())?;
                }
                Op::PutVhostLimits { vhost, json } => {
                    if json.is_empty() {
                        vhost_limits.remove(vhost.as_str())?;
                    } else {
                        vhost_limits.insert(vhost.as_str(), json.as_bytes())?;
                    }
                }
                Op::PutUser { name, value } => {
                    users.insert(name.as_str(), value.as_slice())?;
                }
                Op::DeleteUser(name) => {
                    users.remove(name.as_str())?;
                }
                Op::PutPermission { key, value } => {
                    permissions.insert(key.as_slice(), value.as_slice())?;
                }
                Op::DeletePermission { key } => {
                    permissions.remove(key.as_slice())?;
                }
                Op::PutParameter { key, value } => {
                    parameters.insert(key.as_slice(), value.as_slice())?;
                }
                Op::DeleteParameter { key } => {
                    parameters.remove(key.as_slice())?;
                }
                Op::AppendLog { group, entries, .. } => {
                    for (index, bytes) in entries {
                        raft_log.insert((*group, *index), bytes.as_slice())?;
                    }
                }
                Op::TruncateLog { group, from } => {
                    raft_log.retain_in((*group, *from)..=(*group, u64::MAX), |_, _| false)?;
                }
                Op::PurgeLog {
                    group,
                    upto,
                    key,
                    purged,
                } => {
                    raft_log.retain_in((*group, 0)..=(*group, *upto), |_, _| false)?;
                    raft_state.insert((*group, *key), purged.as_slice())?;
                }
                Op::PutRaftState { group, key, value } => {
                    raft_state.insert((*group, *key), value.as_slice())?;
                }
                Op::DeleteRaftGroup(group) => {
                    raft_log.retain_in((*group, 0)..=(*group, u64::MAX), |_, _| false)?;
                    raft_state.retain_in((*group, 0)..=(*group, u8::MAX), |_, _| false)?;
                    group_values.retain_in((*group, 0)..=(*group, u64::MAX), |_, _| false)?;
                }
                Op::GroupValues {
                    group,
                    clear,
                    changes,
                    state,
                } => {
                    let all = (*group, 0)..=(*group, u64::MAX);
                    if *clear {
                        group_values.retain_in(all.clone(), |_, _| false)?;
                    }
                    for change in changes {
                        match change {
                            GroupChange::Put(key, value) => {
                                group_values.insert((*group, *key), value.as_slice())?;
                            }
                            GroupChange::Delete(key) => {
                                group_values.remove((*group, *key))?;
                            }
                            GroupChange::DeleteRange(from, to) => {
                                group_values
                                    .retain_in((*group, *from)..=(*group, *to), |_, _| false)?;
                            }
                            GroupChange::Clear => {
                                group_values.retain_in(all.clone(), |_, _| false)?;
                            }
                        }
                    }
                    for (key, value) in state {
                        raft_state.insert((*group, *key), value.as_slice())?;
                    }
                }
                Op::MetaTree {
                    group,
                    clear,
                    changes,
                    state,
                } => {
                    if *clear {
                        meta_tree.retain(|_, _| false)?;
                    }
                    for change in changes {
                        apply_tree_op(&mut meta_tree, change)?;
                    }
                    for (key, value) in state {
                        raft_state.insert((*group, *key), value.as_slice())?;
                    }
                }
                Op::Barrier(_) | Op::Shutdown => {}
            }
        }
    }
    txn.commit()?;
    Ok(())
}

fn apply_tree_op(
    tree: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    op: &TreeOp,
) -> Result<(), redb::Error> {
    match op {
        TreeOp::Put(key, value) => {
            tree.insert(key.as_slice(), value.as_slice())?;
        }
        TreeOp::Delete(key) => {
            tree.remove(key.as_slice())?;
        }
        TreeOp::DeletePrefix(prefix) => match prefix_end(prefix) {
            Some(end) => tree.retain_in(prefix.as_slice()..end.as_slice(), |_, _| false)?,
            None => tree.retain_in(prefix.as_slice().., |_, _| false)?,
        },
    }
    Ok(())
}

/// The first key after every key that starts with `prefix` (None: there is none).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
