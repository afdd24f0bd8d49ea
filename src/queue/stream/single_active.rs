//! Single active consumer for stream-protocol subscriptions, as RabbitMQ's SAC coordinator
//! runs it: subscriptions with `single-active-consumer` and the same `name` on a stream form
//! a group in which one reads. The stream's task owns its groups (the streams are not
//! replicated, so no Raft group is needed to agree on them); a group's members are its
//! subscriptions in the order they came.
//!
//! A member told it is active (`ConsumerUpdate` with active set) reads from the offset its
//! client answers with (or the one it subscribed with), not before. In a plain group the
//! first member is active and the next takes over when it leaves. In a group on a partition
//! of a super stream (`super-stream` given) the active member is the one at the partition's
//! index modulo the group's size, so the partitions spread over the consumers; when a member
//! comes or goes and that changes, the active one is told to step down first, and the next
//! is activated once its client answered (so two never read at once).

use super::StreamQueue;
use crate::store::stream::OffsetSpec;
use std::sync::Arc;

/// A subscription's group: its consumer name and, on a partition of a super stream, the
/// partition's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleActive {
    pub name: Arc<str>,
    pub partition: Option<u32>,
}

/// Where a member of a group is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Inactive,
    /// Told it is active: reads once its client answered.
    Active,
    /// Told to step down: the next is activated once its client answered.
    SteppingDown,
}

/// A subscription's place in its group.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) group: SingleActive,
    pub(super) role: Role,
}

impl StreamQueue {
    /// The positions in `subscriptions` of group `g`'s members, in the order they came.
    fn members(&self, g: &SingleActive) -> Vec<usize> {
        self.subscriptions
            .iter()
            .enumerate()
            .filter(|(_, s)| s.single_active.as_ref().is_some_and(|m| m.group == *g))
            .map(|(i, _)| i)
            .collect()
    }

    fn role(&self, i: usize) -> Option<Role> {
        self.subscriptions[i].single_active.as_ref().map(|m| m.role)
    }

    /// The member that should be active among `members` of a partition group.
    fn elected(members: &[usize], partition: u32) -> usize {
        members[partition as usize % members.len()]
    }

    /// Gives member `i` its role and tells its connection (an active member reads once its
    /// client answered; one that stops being active stops reading now).
    fn assign(&mut self, i: usize, role: Role) {
        let s = &mut self.subscriptions[i];
        if let Some(m) = s.single_active.as_mut() {
            m.role = role;
        }
        s.reader = None;
        s.parked = true;
        s.tell_consumer_update(role == Role::Active);
    }

    /// A member's client answered a `ConsumerUpdate`: an active member starts reading (from
    /// `offset`, or where it subscribed), one that stepped down hands over.
    pub(super) fn consumer_updated(&mut self, connection: u64, id: u8, offset: Option<OffsetSpec>) {
        let Some(i) = self
            .subscriptions
            .iter()
            .position(|s| s.connection == connection && s.id == id)
        else {
            return;
        };
        match self.role(i) {
            Some(Role::Active) if self.subscriptions[i].parked => {
                let s = &mut self.subscriptions[i];
                if let Some(o) = offset {
                    s.start = o;
                }
                s.parked = false;
                self.attach_readers();
            }
            Some(Role::SteppingDown) => {
                let Some(g) = self.subscriptions[i]
                    .single_active
                    .as_ref()
                    .map(|m| m.group.clone())
                else {
                    return;
                };
                if let Some(m) = self.subscriptions[i].single_active.as_mut() {
                    m.role = Role::Inactive;
                }
                self.hand_over(&g);
            }
            _ => {}
        }
    }

    /// Activates the member of partition group `g` elected now, unless one is still active or
    /// stepping down.
    fn hand_over(&mut self, g: &SingleActive) {
        let members = self.members(g);
        if members.is_empty()
            || members
                .iter()
                .any(|&i| matches!(self.role(i), Some(Role::Active | Role::SteppingDown)))
        {
            return;
        }
        let next = match g.partition {
            Some(p) => Self::elected(&members, p),
            None => members[0],
        };
        self.assign(next, Role::Active);
    }

    /// After a member joined or left group `g`: a group without an active member gets one
    /// (unless one is stepping down); in a partition group an active member no longer elected
    /// steps down.
    pub(super) fn regroup(&mut self, g: &SingleActive) {
        let members = self.members(g);
        let active = members
            .iter()
            .copied()
            .find(|&i| self.role(i) == Some(Role::Active));
        match (g.partition, active) {
            (Some(p), Some(current)) if Self::elected(&members, p) != current => {
                self.assign(current, Role::SteppingDown);
            }
            (_, Some(_)) => {}
            (_, None) => self.hand_over(g),
        }
    }
}
