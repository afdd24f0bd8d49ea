//! The order in which a queue's home node takes the batches of publishes another node's handle
//! forwards (`RemoteOp::Publish`). A handle of a quorum queue keeps several calls in flight;
//! each travels on its own connection, so they may arrive in either order. The queue knows a
//! copy of a publish sent again by a number at or below the highest it took from that
//! enqueuer, so a batch taken before one sent earlier would make the earlier one's messages
//! look like copies. A batch sent while an earlier one was unanswered therefore waits here
//! until the home has taken everything numbered before it, for [`TURN_WAIT`] at most (the
//! earlier call failed: this one is answered as not stored, and its publisher nacked).

use crate::queue::Sent;
use dashmap::DashMap;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a batch waits for the batches sent before it.
const TURN_WAIT: Duration = Duration::from_secs(2);
/// Enqueuers remembered before those not heard from for [`FORGET_AFTER`] are dropped.
const KEEP: usize = 1024;
/// How long an enqueuer not heard from is remembered once there are more than [`KEEP`].
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Per (vhost, queue, enqueuer): the number after the last publish taken, and when.
#[derive(Default)]
pub(super) struct Turns {
    next: DashMap<(String, String, u64), (u64, Instant)>,
    moved: Notify,
}

impl Turns {
    /// Waits until the publishes of `sent.enqueuer` numbered below `sent.seq` have been taken
    /// here; false when they are not within [`TURN_WAIT`].
    pub(super) async fn wait(&self, vhost: &str, queue: &str, sent: Sent) -> bool {
        let key = (vhost.to_owned(), queue.to_owned(), sent.enqueuer);
        let deadline = Instant::now() + TURN_WAIT;
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.next.get(&key).is_some_and(|n| n.0 >= sent.seq) {
                return true;
            }
            if tokio::time::timeout_at(deadline, moved).await.is_err() {
                return false;
            }
        }
    }

    /// Records that the `count` publishes numbered from `sent.seq` have been taken.
    pub(super) fn taken(&self, vhost: &str, queue: &str, sent: Sent, count: u64) {
        let now = Instant::now();
        if self.next.len() > KEEP {
            self.next
                .retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
        }
        let end = sent.seq.saturating_add(count);
        self.next
            .entry((vhost.to_owned(), queue.to_owned(), sent.enqueuer))
            .and_modify(|(next, at)| {
                *next = (*next).max(end);
                *at = now;
            })
            .or_insert((end, now));
        self.moved.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn sent(seq: u64) -> Sent {
        Sent { enqueuer: 7, seq }
    }

    #[tokio::test]
    async fn a_batch_waits_for_those_sent_before_it() {
        let turns = Arc::new(Turns::default());
        let later = tokio::spawn({
            let turns = turns.clone();
            async move { turns.wait("/", "q", sent(10)).await }
        });
        tokio::task::yield_now().await;
        assert!(!later.is_finished());
        turns.taken("/", "q", sent(0), 5);
        tokio::task::yield_now().await;
        assert!(!later.is_finished(), "5 of the 10 before it were taken");
        turns.taken("/", "q", sent(5), 5);
        assert!(later.await.expect("joins"));
        // Another queue's or enqueuer's numbers are their own.
        assert!(turns.wait("/", "q", sent(3)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_whose_predecessor_never_comes_is_refused() {
        let turns = Turns::default();
        turns.taken("/", "other", sent(0), 100);
        assert!(!turns.wait("/", "q", sent(10)).await);
    }
}
