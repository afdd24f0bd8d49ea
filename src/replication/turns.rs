//! The order in which a queue's home node takes the batches of publishes another node's handle
//! forwards (`RemoteOp::Publish`). A handle of a quorum queue keeps several calls in flight;
//! each travels on its own connection, so they may arrive in either order. The queue knows a
//! copy of a publish sent again by a number at or below the highest it took from that
//! enqueuer, so a batch taken before one sent earlier would make the earlier one's messages
//! look like copies. A batch sent while an earlier one was unanswered therefore waits here
//! until the home has taken everything numbered before it, for [`TURN_WAIT`] at most (the
//! earlier call failed: this one is answered as not stored, and its publisher nacked).
//! After a leader move, the earlier batches may have been taken by the old leader: the new
//! one asks the queue, whose group carries what it took from each enqueuer.

use crate::queue::Sent;
use dashmap::DashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a batch waits for the batches sent before it.
const TURN_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting batch asks the queue what it took from an enqueuer not known here.
const ASK_EVERY: Duration = Duration::from_millis(50);
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
    /// Waits until the publishes of `sent.enqueuer` numbered below `sent.seq` have been taken:
    /// here, or by the queue before this node led it (the enqueuer's batches went to the
    /// queue's old leader until it moved). `taken` asks the queue the highest number it took
    /// from the enqueuer, which a new leader knows from the queue's group: at once when this
    /// node has no record of the enqueuer, else after [`ASK_EVERY`] of waiting, and every
    /// [`ASK_EVERY`] after. False when they are not taken within [`TURN_WAIT`].
    pub(super) async fn wait<F, Fut>(&self, vhost: &str, queue: &str, sent: Sent, taken: F) -> bool
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Option<u64>>,
    {
        let key = (vhost.to_owned(), queue.to_owned(), sent.enqueuer);
        let deadline = Instant::now() + TURN_WAIT;
        let mut next_ask = match self.next.contains_key(&key) {
            true => Instant::now() + ASK_EVERY,
            false => Instant::now(),
        };
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            let here = self.next.get(&key).map(|n| n.0);
            if here.is_some_and(|next| next >= sent.seq) {
                return true;
            }
            if Instant::now() >= next_ask {
                next_ask = Instant::now() + ASK_EVERY;
                if let Some(high) = taken().await {
                    let next = high.saturating_add(1);
                    self.record(key.clone(), next);
                    if next >= sent.seq {
                        return true;
                    }
                    continue;
                }
            }
            if tokio::time::timeout_at(deadline.min(next_ask), moved)
                .await
                .is_err()
                && Instant::now() >= deadline
            {
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
        self.record((vhost.to_owned(), queue.to_owned(), sent.enqueuer), end);
    }

    /// Raises the number after the last publish taken from an enqueuer to `end`.
    fn record(&self, key: (String, String, u64), end: u64) {
        let now = Instant::now();
        self.next
            .entry(key)
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

    /// The queue took nothing from the enqueuer.
    async fn nothing() -> Option<u64> {
        None
    }

    #[tokio::test]
    async fn a_batch_waits_for_those_sent_before_it() {
        let turns = Arc::new(Turns::default());
        let later = tokio::spawn({
            let turns = turns.clone();
            async move { turns.wait("/", "q", sent(10), nothing).await }
        });
        tokio::task::yield_now().await;
        assert!(!later.is_finished());
        turns.taken("/", "q", sent(0), 5);
        tokio::task::yield_now().await;
        assert!(!later.is_finished(), "5 of the 10 before it were taken");
        turns.taken("/", "q", sent(5), 5);
        assert!(later.await.expect("joins"));
        // Another queue's or enqueuer's numbers are their own.
        assert!(turns.wait("/", "q", sent(3), nothing).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_whose_predecessor_never_comes_is_refused() {
        let turns = Turns::default();
        turns.taken("/", "other", sent(0), 100);
        assert!(!turns.wait("/", "q", sent(10), nothing).await);
    }

    /// After a leader move: the batches before this one went to the old leader, which took
    /// them; the new one knows it from the queue, not from its own record.
    #[tokio::test(start_paused = true)]
    async fn a_batch_whose_predecessors_the_queue_took_elsewhere_goes_on() {
        let turns = Turns::default();
        let asked = std::sync::atomic::AtomicU32::new(0);
        let high = std::sync::Mutex::new(None);
        let queue = || {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let h = *high.lock().expect("lock");
            async move { h }
        };
        let start = Instant::now();
        let wait = turns.wait("/", "q", sent(10), queue);
        tokio::pin!(wait);
        // The queue has not applied the old leader's last batch yet: asked again later.
        assert!(
            tokio::time::timeout(Duration::from_millis(120), wait.as_mut())
                .await
                .is_err()
        );
        let times = asked.load(std::sync::atomic::Ordering::Relaxed);
        assert!((2..=4).contains(&times), "asked every 50 ms, {times} times");
        *high.lock().expect("lock") = Some(9);
        assert!(wait.await, "numbers 0 to 9 were taken");
        assert!(start.elapsed() < TURN_WAIT);
        // Recorded here: the next batch does not ask.
        let before = asked.load(std::sync::atomic::Ordering::Relaxed);
        assert!(turns.wait("/", "q", sent(10), queue).await);
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), before);
        // What the queue took short of this batch's predecessors is not enough, until it
        // has taken them all.
        *high.lock().expect("lock") = Some(3);
        assert!(!turns.wait("/", "q2", sent(10), queue).await);
        let wait = turns.wait("/", "q2", sent(10), queue);
        tokio::pin!(wait);
        assert!(
            tokio::time::timeout(Duration::from_millis(120), wait.as_mut())
                .await
                .is_err()
        );
        *high.lock().expect("lock") = Some(9);
        assert!(wait.await);
    }
}
