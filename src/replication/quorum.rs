//! Quorum queues on the cluster (#18). A quorum queue's record in the tree carries its Raft
//! group's id and members (chosen at declare: the declaring node, which leads first, and the
//! next running nodes, `x-quorum-initial-group-size` in all, default 3). The group (see
//! `cluster::groups`) holds the queue's messages: key 0 the delivered mark, key `seq + 1` the
//! message with that sequence number and the times it came back (an `Entry`), key
//! `2^63 + seq` its dead-lettered copy while it waits for its targets (at-least-once
//! dead-lettering), key `u64::MAX` the enqueuers' publish numbers.
//!
//! The queue's task runs on the group's leader, a classic queue task whose store writes go
//! to the group instead ([`GroupJournal`]): a confirm is sent once a majority has the message
//! on disk. Every other node holds a handle that forwards to the leader, as for a classic
//! queue on another node. When another member comes to lead the group (its node was lost),
//! it applies what the group committed, starts the queue's task from the group's messages
//! (those handed out before are flagged redelivered) and writes itself into the record as
//! the queue's node; every node then points its handle at it, bindings kept.

use super::exchanges::{bindings_to, End};
use super::queue_record::{decode_queue, encode_queue, queue_path, QueueDef, Quorum, QUEUES};
use super::quorum_members::{members_named, rewrite};
use super::{forward, unavailable, VHOSTS};
use crate::broker::Broker;
use crate::cluster::codec;
use crate::cluster::group_types::GroupCommand;
use crate::cluster::groups::LEADER_LEASE;
use crate::cluster::MetaNode;
use crate::confirm::ConfirmToken;
use crate::error::CoreResult;
use crate::message::Message;
use crate::queue::journal::{Journal, Journaled};
use crate::queue::remote::{Home, WireMessage};
use crate::vhost::VHost;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::oneshot;

/// The group key of a queue's delivered mark (messages are at `seq + 1`).
const MARK: u64 = 0;
/// The group key of the publishes the queue took from each recent enqueuer.
const ENQUEUERS: u64 = u64::MAX;
/// Where the dead-lettered copies waiting for their targets' confirms are: the copy of
/// message `seq` at `DEAD + seq` (sequence numbers stay far below).
const DEAD: u64 = 1 << 63;
/// Commands one group entry carries at most.
const MOST: usize = 1024;

/// The journal of a quorum queue led here: its group, written one entry at a time, the
/// commands made meanwhile waiting to go together in the next.
#[derive(Clone)]
pub(super) struct GroupJournal(Arc<Inner>);

struct Inner {
    group: u64,
    node: Weak<MetaNode>,
    /// The group's leadership term the task writing here was started for (0: not tied yet,
    /// a queue just declared).
    term: std::sync::atomic::AtomicU64,
    /// Until when (microseconds on [`micros`]'s clock) no other member can lead the group:
    /// the start of the last write that committed, plus [`LEADER_LEASE`].
    lease_until: std::sync::atomic::AtomicU64,
    pending: Mutex<Pending>,
}

/// Microseconds since the first call (tokio's clock, as openraft's lease runs on).
fn micros() -> u64 {
    static BASE: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(tokio::time::Instant::now);
    u64::try_from(base.elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[derive(Default)]
struct Pending {
    queue: Vec<(GroupCommand, Option<ConfirmToken>)>,
    flushing: bool,
    /// Waiting for every command queued before them to be written ([`Journal::sync`]).
    syncs: Vec<oneshot::Sender<bool>>,
    /// A write failed: what the task holds may differ from what the group committed. Later
    /// commands are dropped (their confirms nacked, syncs answered false) until the task is
    /// started again from the group.
    broken: bool,
}

impl std::fmt::Debug for GroupJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GroupJournal({})", self.0.group)
    }
}

impl GroupJournal {
    fn new(group: u64, node: &Arc<MetaNode>, term: u64) -> GroupJournal {
        GroupJournal(Arc::new(Inner {
            group,
            node: Arc::downgrade(node),
            term: term.into(),
            lease_until: 0.into(),
            pending: Mutex::new(Pending::default()),
        }))
    }

    fn push(&self, cmd: GroupCommand, token: Option<ConfirmToken>) {
        let start = match self.0.pending.lock() {
            Ok(mut p) => {
                p.queue.push((cmd, token));
                !std::mem::replace(&mut p.flushing, true)
            }
            Err(_) => false,
        };
        if start {
            tokio::spawn(flush(self.0.clone()));
        }
    }
}

/// Writes what waits, an entry at a time, until nothing does; completes each confirm with
/// whether its entry was committed, and each sync with whether the entry that held the last
/// command before it was.
async fn flush(inner: Arc<Inner>) {
    loop {
        let (batch, syncs) = match inner.pending.lock() {
            Ok(mut p) if p.queue.is_empty() => {
                p.flushing = false;
                let ok = !p.broken;
                for s in p.syncs.drain(..) {
                    let _ = s.send(ok);
                }
                return;
            }
            Ok(mut p) => {
                let n = p.queue.len().min(MOST);
                let batch: Vec<_> = p.queue.drain(..n).collect();
                // Syncs made after commands still queued wait for a later entry.
                let syncs = match p.queue.is_empty() {
                    true => std::mem::take(&mut p.syncs),
                    false => Vec::new(),
                };
                (batch, syncs)
            }
            Err(_) => return,
        };
        let (cmds, tokens): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let removed = tracing::enabled!(tracing::Level::DEBUG).then(|| removals(&cmds));
        let broken = inner.pending.lock().map_or(true, |p| p.broken);
        let committed = match inner.node.upgrade() {
            Some(_) if broken => false,
            Some(node) => {
                let started = micros();
                let r = node
                    .groups()
                    .write_here(
                        inner.group,
                        inner.term.load(std::sync::atomic::Ordering::Acquire),
                        GroupCommand::Batch(cmds),
                    )
                    .await;
                let term = inner.term.load(std::sync::atomic::Ordering::Acquire);
                if r.is_ok() {
                    let until = started.saturating_add(LEADER_LEASE.as_micros() as u64);
                    inner
                        .lease_until
                        .fetch_max(until, std::sync::atomic::Ordering::AcqRel);
                }
                if let (Ok(_), Some(removed)) = (&r, &removed) {
                    tracing::debug!(
                        node = node.name(),
                        group = inner.group,
                        term,
                        ?removed,
                        "quorum queue removals committed"
                    );
                }
                if let Err(e) = &r {
                    tracing::warn!(node = node.name(), group = inner.group, term, error = %e, "a quorum queue write failed; its task starts again from the group");
                    if let Ok(mut p) = inner.pending.lock() {
                        p.broken = true;
                    }
                    node.groups().unsettle(inner.group);
                }
                r.is_ok()
            }
            None => false,
        };
        for t in tokens.into_iter().flatten() {
            t.complete(committed);
        }
        for s in syncs {
            let _ = s.send(committed);
        }
    }
}

/// The keys a batch removes (for the debug log).
fn removals(cmds: &[GroupCommand]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for c in cmds {
        match c {
            GroupCommand::Remove(keys) => out.extend(keys.iter().map(|k| (*k, *k))),
            GroupCommand::RemoveRange(from, to) => out.push((*from, *to)),
            GroupCommand::Batch(inner) => out.extend(removals(inner)),
            _ => {}
        }
    }
    out
}

/// A message as its quorum queue's group holds it: the times it came back unacknowledged
/// (`x-delivery-count`), and the message.
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    returns: u32,
    message: WireMessage,
}

impl Journal for GroupJournal {
    fn put(&self, seq: u64, msg: Arc<Message>, token: Option<ConfirmToken>) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let body =
                String::from_utf8_lossy(&msg.body()[..msg.body().len().min(40)]).into_owned();
            let term = self.0.term.load(std::sync::atomic::Ordering::Acquire);
            tracing::trace!(group = self.0.group, term, seq, %body, "put");
        }
        let entry = Entry {
            returns: 0,
            message: WireMessage::of(&msg),
        };
        match codec::encode(&entry) {
            Ok(bytes) => self.push(GroupCommand::Set(seq + 1, bytes), token),
            Err(_) => {
                if let Some(t) = token {
                    t.complete(false);
                }
            }
        }
    }

    fn remove(&self, seqs: Vec<u64>) {
        self.push(
            GroupCommand::Remove(seqs.into_iter().map(|s| s + 1).collect()),
            None,
        );
    }

    fn remove_range(&self, from: u64, to: u64) {
        self.push(GroupCommand::RemoveRange(from + 1, to + 1), None);
    }

    fn delivered(&self, seq: u64) {
        if let Ok(bytes) = codec::encode(&seq) {
            self.push(GroupCommand::Set(MARK, bytes), None);
        }
    }

    fn dead_lettered(&self, seq: u64, copy: &Arc<Message>) {
        let entry = Entry {
            returns: 0,
            message: WireMessage::of(copy),
        };
        // One command: the message never leaves the group without its copy in its place.
        if let Ok(bytes) = codec::encode(&entry) {
            self.push(
                GroupCommand::Batch(vec![
                    GroupCommand::Remove(vec![seq + 1]),
                    GroupCommand::Set(DEAD + seq, bytes),
                ]),
                None,
            );
        }
    }

    fn dead_letters_sent(&self, seqs: Vec<u64>) {
        self.push(
            GroupCommand::Remove(seqs.into_iter().map(|s| DEAD + s).collect()),
            None,
        );
    }

    fn sync(&self, done: oneshot::Sender<bool>) {
        let Ok(mut p) = self.0.pending.lock() else {
            let _ = done.send(false);
            return;
        };
        if p.flushing {
            p.syncs.push(done);
        } else {
            // Nothing queued or in flight: what came before was written (or failed) already.
            let _ = done.send(!p.broken);
        }
    }

    fn detach(&self) {
        if let Ok(mut p) = self.0.pending.lock() {
            p.broken = true;
        }
    }

    fn broken(&self) -> bool {
        self.0.pending.lock().map_or(true, |p| p.broken)
    }

    fn leased(&self) -> bool {
        micros()
            < self
                .0
                .lease_until
                .load(std::sync::atomic::Ordering::Acquire)
    }

    fn lead(&self, term: u64) -> bool {
        use std::sync::atomic::Ordering;
        let tied = match self
            .0
            .term
            .compare_exchange(0, term, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(was) => was == term,
        };
        if !tied {
            tracing::info!(
                group = self.0.group,
                term,
                was = self.0.term.load(Ordering::Acquire),
                "a quorum queue task of an earlier term is detached"
            );
            self.detach();
        }
        tied && !self.broken()
    }

    fn enqueuers(&self, seen: &[(u64, u64)]) {
        if let Ok(bytes) = codec::encode(&seen) {
            self.push(GroupCommand::Set(ENQUEUERS, bytes), None);
        }
    }

    fn confirm(&self, token: ConfirmToken) {
        // Committed with the entry that carries it: after what was recorded before.
        self.push(GroupCommand::Batch(Vec::new()), Some(token));
    }

    fn returned(&self, seq: u64, msg: &Arc<Message>, returns: u32) {
        let entry = Entry {
            returns,
            message: WireMessage::of(msg),
        };
        if let Ok(bytes) = codec::encode(&entry) {
            self.push(GroupCommand::Set(seq + 1, bytes), None);
        }
    }
}

/// What `group` holds on this node, as a queue task starts from it.
async fn load(node: &MetaNode, group: u64) -> Result<Journaled, crate::cluster::ClusterError> {
    let mut out = Journaled::default();
    for (key, bytes) in node.groups().values(group).await? {
        if key == MARK {
            out.delivered = codec::decode(&bytes).ok();
            continue;
        }
        if key == ENQUEUERS {
            out.enqueuers = codec::decode(&bytes).unwrap_or_default();
            continue;
        }
        let entry = codec::decode::<Entry>(&bytes)
            .ok()
            .and_then(|e| Some((e.message.message()?, e.returns)));
        match entry {
            Some((m, _)) if key >= DEAD => out.dead.push((key - DEAD, Arc::new(m))),
            Some((m, returns)) => out.messages.push((key - 1, Arc::new(m), returns)),
            None => tracing::error!(group, key, "undecodable quorum queue message; skipped"),
        }
    }
    Ok(out)
}

/// The group of a new quorum queue led by `leader` ([`super::placement::place`]).
pub(super) async fn place(node: &Arc<MetaNode>, leader: &str, size: Option<usize>) -> Quorum {
    let (group, members) = super::placement::place(node, leader, size).await;
    Quorum { group, members }
}

/// Applies a quorum queue's record on this node: its member of the group started if this
/// node is one, and the queue served here (its leader) or reached through its leader.
pub(super) fn apply(b: &Broker, v: &Arc<VHost>, name: &str, value: &[u8]) -> bool {
    let (Some(def), Some(node)) = (decode_queue(value), b.cluster.get()) else {
        return false;
    };
    let Some(quorum) = def.quorum.clone() else {
        return false;
    };
    let me = node.name().to_owned();
    let group = quorum.group;
    let here = v.queue(name).ok();
    let led_here = here.as_ref().is_some_and(|q| q.journal.is_some());
    // Asked before this node's member starts (which writes the group's first state).
    let fresh = def.node == me && !led_here && node.groups().is_new(group);
    if !quorum.members.contains(&me) && node.groups().is_member(group) {
        // This node's member was removed from the group: its copy goes.
        let node = node.clone();
        tokio::spawn(async move {
            node.groups().delete(group).await;
        });
    } else if quorum.members.contains(&me) {
        if node.groups().is_member(group) {
            node.groups().prefer(group, &def.node);
        } else {
            let (node, members) = (node.clone(), members_named(&node, &quorum.members));
            let leader = def.node.clone();
            tokio::spawn(async move {
                if let Err(e) = node.groups().start(group, &members, Some(&leader)).await {
                    tracing::error!(group, error = %e, "cannot start a quorum queue's group");
                }
            });
        }
    }
    if def.node == me {
        if fresh {
            // Just declared here: an empty queue, led here once the group elects this node.
            // Tied to a term when the group first elects this node (`take_over`).
            let journal = GroupJournal::new(group, &node, 0);
            install_led(b, v, name, &def, journal, Journaled::default());
        }
        // Otherwise (a restart) the queue starts once the group has a leader here
        // (`leading_hook`), or its node is rewritten by the member that leads.
        return true;
    }
    let moved = here
        .as_ref()
        .is_none_or(|q| q.home.as_deref() != Some(&def.node));
    let home = Home {
        node: &def.node,
        link: forward::link(&b.cluster, b.incarnation),
        owner: None,
    };
    v.install_queue(
        name,
        def.durable,
        def.auto_delete,
        &def.arguments,
        Some(home),
    );
    if moved {
        rebind(b, v, name);
    }
    true
}

/// Starts the queue's task here from `from`, with its group's `journal`, and binds it as the
/// tree says.
fn install_led(
    b: &Broker,
    v: &Arc<VHost>,
    name: &str,
    def: &QueueDef,
    journal: GroupJournal,
    from: Journaled,
) {
    let journal = Arc::new(journal);
    v.install_journaled(
        name,
        def.durable,
        def.auto_delete,
        &def.arguments,
        journal,
        from,
    );
    rebind(b, v, name);
}

/// Applies the tree's bindings to `name` again (its handle here was replaced).
fn rebind(b: &Broker, v: &VHost, name: &str) {
    let Some(node) = b.cluster.get() else {
        return;
    };
    let bindings: Vec<(Vec<String>, Vec<u8>)> = node.read(|t| {
        t.children(&bindings_to(&v.name, End::Queue(name)))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect()
    });
    for (path, value) in bindings {
        super::exchanges::apply_put(b, &path, &value);
    }
}

/// The quorum queue whose group is `group`, as the tree has it: (vhost, name, record).
pub(super) fn queue_of_group(node: &MetaNode, group: u64) -> Option<(String, String, Vec<u8>)> {
    node.read(|t| {
        t.children(&[VHOSTS.to_string()])
            .filter_map(|(path, value)| match path.as_slice() {
                [_, vhost, kind, name] if kind == QUEUES => {
                    let def = decode_queue(value)?;
                    (def.quorum?.group == group)
                        .then(|| (vhost.clone(), name.clone(), value.clone()))
                }
                _ => None,
            })
            .next()
    })
}

/// What this node does when it comes to lead a quorum queue's group: once it has applied
/// everything committed, it starts the queue's task from the group's messages (unless it
/// runs it already) and makes itself the queue's node in the tree. True when done (or when
/// the queue is gone); false to be asked again.
pub(super) async fn take_over(b: Arc<Broker>, group: u64) -> bool {
    let Some(node) = b.cluster.get() else {
        return true;
    };
    let Some((vhost, name, value)) = queue_of_group(&node, group) else {
        return true;
    };
    let (Some(v), Some(def)) = (b.vhost(&vhost), decode_queue(&value)) else {
        return true;
    };
    let term = node.groups().metrics(group).map_or(0, |m| m.current_term);
    // A task started in an earlier term is not kept: another leader may have written since.
    let led_here = v
        .queue(&name)
        .is_ok_and(|q| q.journal.as_ref().is_some_and(|j| j.lead(term)));
    if led_here && def.node == node.name() {
        return true;
    }
    if let Err(e) = node.groups().linearize(group).await {
        tracing::warn!(group, error = %e, "a new quorum queue leader could not catch up");
        return false;
    }
    if !led_here {
        let from = match load(&node, group).await {
            Ok(from) => from,
            Err(e) => {
                tracing::error!(group, error = %e, "cannot read a quorum queue's group");
                return false;
            }
        };
        tracing::info!(node = node.name(), group, term, queue = %name, vhost = %vhost, messages = from.messages.len(), delivered = ?from.delivered, first = ?from.messages.first().map(|m| m.0), last = ?from.messages.last().map(|m| m.0), "this node leads the quorum queue now");
        if tracing::enabled!(tracing::Level::DEBUG) {
            for (seq, m, returns) in &from.messages {
                let body =
                    String::from_utf8_lossy(&m.body()[..m.body().len().min(40)]).into_owned();
                tracing::debug!(group, term, seq, returns, %body, "loaded");
            }
        }
        let journal = GroupJournal::new(group, &node, term);
        install_led(&b, &v, &name, &def, journal, from);
    }
    if def.node == node.name() {
        return true;
    }
    let me = node.name().to_owned();
    let moved = rewrite(&node, &vhost, &name, |d| {
        (d.node != me && d.quorum.as_ref().is_some_and(|q| q.group == group)).then(|| QueueDef {
            node: me.clone(),
            ..d.clone()
        })
    })
    .await;
    match moved {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(group, error = %e, "cannot record a quorum queue's new leader");
            false
        }
    }
}

/// A quorum queue as the management API shows it.
#[derive(Debug, Clone)]
pub struct QuorumStatus {
    /// The node whose member leads (the queue's node).
    pub leader: String,
    /// The members' nodes, by name.
    pub members: Vec<String>,
    /// The members' nodes that answer.
    pub online: Vec<String>,
}

impl QuorumStatus {
    /// Whether a majority of the members answer (RabbitMQ's `running`, else `minority`).
    pub fn has_majority(&self) -> bool {
        self.online.len() > self.members.len() / 2
    }
}

impl Broker {
    /// A quorum queue's leader and members as this node's tree has them, and which members
    /// answer (the reachability watch's last round); None for another kind of queue.
    pub fn quorum_status(&self, vhost: &str, name: &str) -> Option<QuorumStatus> {
        let node = self.cluster.get()?;
        let def = node.read(|t| {
            t.get(&queue_path(vhost, name))
                .and_then(|v| decode_queue(v))
        })?;
        let quorum = def.quorum?;
        let down = node.unreachable();
        let mut members = quorum.members;
        members.sort();
        Some(QuorumStatus {
            leader: def.node,
            online: members
                .iter()
                .filter(|m| !down.contains(m))
                .cloned()
                .collect(),
            members,
        })
    }

    /// The quorum queues with a member on this node that stopping it would leave without a
    /// majority (`node-is-quorum-critical`): (vhost, name).
    pub fn quorum_critical(&self) -> Vec<(String, String)> {
        let Some(node) = self.cluster.get() else {
            return Vec::new();
        };
        let me = node.name().to_owned();
        let down = node.unreachable();
        node.read(|t| {
            t.children(&[VHOSTS.to_string()])
                .filter_map(|(path, value)| match path.as_slice() {
                    [_, vhost, kind, name] if kind == QUEUES => {
                        let quorum = decode_queue(value)?.quorum?;
                        let others_up = quorum
                            .members
                            .iter()
                            .filter(|m| **m != me && !down.contains(m))
                            .count();
                        let critical =
                            quorum.members.contains(&me) && others_up <= quorum.members.len() / 2;
                        critical.then(|| (vhost.clone(), name.clone()))
                    }
                    _ => None,
                })
                .collect()
        })
    }

    /// The record of a new quorum queue led by `leader` first, members placed by [`place`].
    pub(super) async fn quorum_record(
        &self,
        node: &Arc<MetaNode>,
        leader: &str,
        o: &crate::vhost::QueueOptions,
    ) -> CoreResult<Vec<u8>> {
        let size = crate::args::quorum_group_size(&o.arguments);
        let quorum = place(node, leader, size).await;
        if quorum.members.is_empty() {
            return Err(unavailable(crate::cluster::ClusterError::Refused(
                "no node to place the quorum queue on".into(),
            )));
        }
        Ok(encode_queue(
            leader,
            o.durable,
            o.auto_delete,
            &o.arguments,
            Some(&quorum),
        ))
    }
}
