//! The publishes a replicated queue's task has taken from each enqueuer that may send them
//! again (another node's handle of the queue, which re-sends what its old leader did not
//! answer to the new one, as RabbitMQ's quorum-queue client does). A copy of one already
//! taken is dropped instead of enqueued twice; its confirm follows the first copy's. The
//! table is written to the queue's group after the messages it counts, so a new leader
//! drops copies of what its predecessor took, even of messages acked since.

use crate::queue::Sent;

/// Enqueuers remembered at most (the most recently heard): one per node forwarding to the
/// queue (its successive handles share one, `queue::enqueuer`), a new one when the queue
/// was led there in between.
const KEEP: usize = 64;

/// The highest publish number taken from each recent enqueuer, oldest first.
#[derive(Debug, Default)]
pub(super) struct Enqueuers {
    seen: Vec<(u64, u64)>,
    /// Changed since it was last written.
    pub(super) dirty: bool,
}

impl Enqueuers {
    /// The table a new leader's task starts from (as its group held it).
    pub(super) fn from(seen: Vec<(u64, u64)>) -> Enqueuers {
        Enqueuers { seen, dirty: false }
    }

    /// Whether `sent` is a copy of a publish already taken.
    pub(super) fn taken(&self, sent: Sent) -> bool {
        self.seen
            .iter()
            .any(|(e, n)| *e == sent.enqueuer && sent.seq <= *n)
    }

    /// The highest number taken from `enqueuer`.
    pub(super) fn highest(&self, enqueuer: u64) -> Option<u64> {
        self.seen
            .iter()
            .find_map(|(e, n)| (*e == enqueuer).then_some(*n))
    }

    /// Records that `sent` was taken.
    pub(super) fn take(&mut self, sent: Sent) {
        let mut high = sent.seq;
        if let Some(i) = self.seen.iter().position(|(e, _)| *e == sent.enqueuer) {
            high = high.max(self.seen.remove(i).1);
        }
        self.seen.push((sent.enqueuer, high));
        if self.seen.len() > KEEP {
            self.seen.remove(0);
        }
        self.dirty = true;
    }

    /// The table as it is written.
    pub(super) fn list(&self) -> &[(u64, u64)] {
        &self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(enqueuer: u64, seq: u64) -> Sent {
        Sent { enqueuer, seq }
    }

    #[test]
    fn copies_of_taken_publishes_are_known_per_enqueuer() {
        let mut t = Enqueuers::default();
        assert!(!t.taken(sent(1, 0)));
        t.take(sent(1, 0));
        t.take(sent(1, 1));
        t.take(sent(2, 5));
        assert!(t.dirty);
        assert!(t.taken(sent(1, 0)) && t.taken(sent(1, 1)) && t.taken(sent(2, 3)));
        assert!(!t.taken(sent(1, 2)) && !t.taken(sent(2, 6)) && !t.taken(sent(3, 0)));
        assert_eq!(t.list(), &[(1, 1), (2, 5)]);
        assert_eq!(
            (t.highest(1), t.highest(2), t.highest(3)),
            (Some(1), Some(5), None)
        );
        // A restarted table keeps what was written.
        let again = Enqueuers::from(t.list().to_vec());
        assert!(again.taken(sent(2, 5)) && !again.taken(sent(2, 6)) && !again.dirty);
    }

    #[test]
    fn the_least_recently_heard_enqueuers_are_forgotten() {
        let mut t = Enqueuers::default();
        for e in 0..=KEEP as u64 {
            t.take(sent(e, 7));
        }
        assert!(!t.taken(sent(0, 7)), "the oldest goes");
        assert!(t.taken(sent(1, 7)) && t.taken(sent(KEEP as u64, 7)));
        assert_eq!(t.list().len(), KEEP);
    }
}
