//! This node's numbering of the publishes it forwards to a quorum queue's leader ([`Sent`]).
//! The leader takes an enqueuer's batches in the order numbered and drops a copy of a number
//! it has passed (`actor::enqueuers`), so a batch that reaches it after its sender gave up on
//! it (held on the old leader's node, relayed late) is dropped instead of enqueued behind
//! later publishes. That holds across a leader move only when the handle that replaces a
//! proxy goes on with the same numbers: the numbering is shared by a queue's successive
//! proxies on this node ([`super::QueueShared::follow`]). A batch is sent as following an
//! earlier one while any call of the enqueuer is unanswered, from this handle or one it
//! replaced, and the leader then takes it only after the numbers before it: a number the
//! leader passes is never one whose sender still waits for an answer.

use super::Sent;
use std::sync::{Arc, Mutex};

/// A queue's publish numbering on this node; one per quorum queue led elsewhere, carried
/// from a replaced proxy to its successor.
#[derive(Debug)]
pub(crate) struct Enqueuer {
    id: u64,
    /// The next number, and the calls sent and not yet answered. One lock for both: a batch
    /// numbered after another must see that one's call unanswered.
    state: Mutex<(u64, usize)>,
}

impl Enqueuer {
    /// A new enqueuer, its id chosen at random.
    pub(crate) fn new() -> Arc<Enqueuer> {
        Arc::new(Enqueuer {
            id: rand::random(),
            state: Mutex::new((0, 0)),
        })
    }

    /// Numbers a batch of `count` publishes about to be sent: where it is from, whether it
    /// follows a call of this enqueuer still unanswered (the leader waits for that one's
    /// numbers), and the call's guard, which counts it unanswered until dropped.
    pub(crate) fn number(self: &Arc<Self>, count: u64) -> (Sent, bool, Call) {
        let mut state = match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let (next, calls) = &mut *state;
        let sent = Sent {
            enqueuer: self.id,
            seq: *next,
        };
        *next = next.saturating_add(count);
        let follows = *calls > 0;
        *calls += 1;
        (sent, follows, Call(self.clone()))
    }
}

/// A call of an [`Enqueuer`] not yet answered; answered once dropped.
#[derive(Debug)]
pub(crate) struct Call(Arc<Enqueuer>);

impl Drop for Call {
    fn drop(&mut self) {
        let mut state = match self.0.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        state.1 = state.1.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use crate::queue::remote::{Home, LinkFuture, RemoteLink, RemoteOp};
    use crate::queue::{QueueRef, QueueShared};
    use amq_protocol::protocol::BasicProperties;
    use amq_protocol::types::{AMQPValue, FieldTable};
    use bytes::Bytes;
    use std::future::Future;
    use std::pin::Pin;

    #[test]
    fn batches_are_numbered_one_after_another() {
        let e = Enqueuer::new();
        let (a, _, first) = e.number(10);
        drop(first);
        let (b, _, _second) = e.number(3);
        let (c, _, _third) = e.number(1);
        assert_eq!(a.enqueuer, b.enqueuer);
        assert_eq!((a.seq, b.seq, c.seq), (0, 10, 13));
    }

    #[test]
    fn a_batch_follows_while_an_earlier_call_is_unanswered() {
        let e = Enqueuer::new();
        let (_, follows, first) = e.number(1);
        assert!(!follows, "nothing was sent before");
        let (_, follows, second) = e.number(1);
        assert!(follows, "the first call is unanswered");
        drop(first);
        let (_, follows, third) = e.number(1);
        assert!(follows, "the second call is unanswered");
        drop(second);
        drop(third);
        let (_, follows, _fourth) = e.number(1);
        assert!(!follows, "every earlier call was answered");
    }

    /// Records the publishes a proxy forwards; never answers (the calls stay in flight).
    #[derive(Default)]
    struct Recording {
        sent: Mutex<Vec<(Sent, bool)>>,
    }

    impl RemoteLink for Recording {
        fn call(&self, _: &QueueShared, op: RemoteOp) -> LinkFuture {
            if let RemoteOp::Publish(_, Some(sent), follows) = op {
                if let Ok(mut v) = self.sent.lock() {
                    v.push((sent, follows));
                }
            }
            Box::pin(std::future::pending())
        }

        fn alive(&self, _: &QueueShared) -> Pin<Box<dyn Future<Output = bool> + Send>> {
            Box::pin(async { true })
        }
    }

    fn proxy(link: &Arc<Recording>) -> QueueRef {
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        let home = Home {
            node: "warren-elsewhere@127.0.0.1",
            link: link.clone(),
            owner: None,
        };
        QueueShared::spawn_remote("q".into(), "/".into(), true, false, arguments, home)
    }

    async fn publish(q: &QueueRef) {
        let props = BasicProperties::default();
        let msg = Message::new("".into(), "q".into(), Bytes::from_static(b"x"), 0, &props);
        assert!(q.publish(Arc::new(msg), None).await);
    }

    async fn forwarded(link: &Recording, n: usize) -> Vec<(Sent, bool)> {
        loop {
            let now = link.sent.lock().map(|v| v.clone()).unwrap_or_default();
            if now.len() >= n {
                return now;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// A proxy that replaces another (the queue's leader moved) forwards as the same
    /// enqueuer, numbering on from it, its first batch following the one still unanswered:
    /// a late copy of that one is then a number the leader has passed, dropped, never
    /// enqueued behind what came after (the out-of-order finding of CHAOS.md).
    #[tokio::test(start_paused = true)]
    async fn a_proxy_replacing_another_goes_on_with_its_numbers() {
        let link = Arc::new(Recording::default());
        let old = proxy(&link);
        publish(&old).await;
        let first = forwarded(&link, 1).await;
        let new = proxy(&link);
        new.follow(&old);
        publish(&new).await;
        let both = forwarded(&link, 2).await;
        assert_eq!(first[0], both[0]);
        let ((a, a_follows), (b, b_follows)) = (both[0], both[1]);
        assert!(!a_follows, "nothing was sent before the first batch");
        assert_eq!(
            b.enqueuer, a.enqueuer,
            "one enqueuer across the two handles"
        );
        assert_eq!(b.seq, a.seq + 1, "numbered on from the replaced handle");
        assert!(b_follows, "the replaced handle's call is unanswered");
        let unrelated = proxy(&link);
        publish(&unrelated).await;
        let (c, _) = forwarded(&link, 3).await[2];
        assert_ne!(
            c.enqueuer, a.enqueuer,
            "another queue handle numbers its own"
        );
    }
}
