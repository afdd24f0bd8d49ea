//! A replicated queue's task, installed by a vhost, against a journal that records what it
//! is asked to write.

use crate::confirm::ConfirmToken;
use crate::message::Message;
use crate::queue::journal::{Journal, Journaled};
use crate::queue::Sent;
use amq_protocol::protocol::BasicProperties;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// What the task wrote, in order; every write commits at once.
#[derive(Debug, Default)]
struct Recorded(Mutex<Vec<String>>);

impl Recorded {
    fn note(&self, what: String) {
        self.0.lock().expect("lock").push(what);
    }
}

impl Journal for Recorded {
    fn put(&self, seq: u64, _: Arc<Message>, token: Option<ConfirmToken>) {
        self.note(format!("put {seq}"));
        if let Some(t) = token {
            t.complete(true);
        }
    }
    fn remove(&self, seqs: Vec<u64>) {
        self.note(format!("remove {seqs:?}"));
    }
    fn remove_range(&self, from: u64, to: u64) {
        self.note(format!("remove {from}..={to}"));
    }
    fn delivered(&self, _: u64) {}
    fn dead_lettered(&self, seq: u64, _: &Arc<Message>) {
        self.note(format!("dead-lettered {seq}"));
    }
    fn dead_letters_sent(&self, seqs: Vec<u64>) {
        self.note(format!("dead letters sent {seqs:?}"));
    }
    fn returned(&self, _: u64, _: &Arc<Message>, _: u32) {}
    fn enqueuers(&self, seen: &[(u64, u64)]) {
        self.note(format!("enqueuers {seen:?}"));
    }
    fn confirm(&self, token: ConfirmToken) {
        self.note("confirm".into());
        token.complete(true);
    }
    fn sync(&self, done: oneshot::Sender<bool>) {
        let _ = done.send(true);
    }
    fn broken(&self) -> bool {
        false
    }
    fn leased(&self) -> bool {
        true
    }
    fn lead(&self, _: u64) -> bool {
        true
    }
    fn detach(&self) {}
}

fn message(body: &str) -> Arc<Message> {
    let props = BasicProperties::default().with_delivery_mode(2);
    let mut raw = cookie_factory::gen_simple(
        amq_protocol::protocol::basic::gen_properties(&props),
        Vec::new(),
    )
    .expect("encodes");
    let len = raw.len();
    raw.extend_from_slice(body.as_bytes());
    Arc::new(Message::new(
        "".into(),
        "q".into(),
        Bytes::from(raw),
        len,
        &props,
    ))
}

/// A publish sent again by its enqueuer (it did not hear back) is taken once, and its
/// confirm follows the first copy's; the table of what was taken is written after the
/// message, and a task started from it (a new leader's) drops copies too.
#[tokio::test]
async fn a_publish_sent_again_is_taken_once() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, _) =
        crate::store::Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
    let v = crate::vhost::VHost::new("/", store, 100);
    let journal = Arc::new(Recorded::default());
    let args = amq_protocol::types::FieldTable::default();
    v.install_journaled(
        "q",
        true,
        false,
        &args,
        journal.clone(),
        Journaled::default(),
    );
    let q = v.queue("q").expect("queue");
    let sent = |seq| Some(Sent { enqueuer: 7, seq });
    let mut confirms = Vec::new();
    for (body, seq) in [("a", 0), ("b", 1), ("a", 0), ("b", 1), ("c", 2)] {
        let (token, rx) = ConfirmToken::waiter();
        assert!(q.relay_from(message(body), Some(token), sent(seq)).await);
        confirms.push(rx);
    }
    for rx in confirms {
        assert_eq!(rx.await, Ok(true), "every copy confirmed");
    }
    assert_eq!(
        q.stats().await.expect("stats"),
        (3, 0),
        "a, b and c once each"
    );
    let written = journal.0.lock().expect("lock").clone();
    let puts: Vec<&String> = written.iter().filter(|w| w.starts_with("put")).collect();
    assert_eq!(puts, ["put 0", "put 1", "put 2"], "{written:?}");
    assert_eq!(written.iter().filter(|w| *w == "confirm").count(), 2);
    assert_eq!(
        written.last().map(String::as_str),
        Some("enqueuers [(7, 2)]")
    );

    // A new leader's task, started from what the group holds (no messages left, say: acked).
    let from = Journaled {
        enqueuers: vec![(7, 2)],
        ..Default::default()
    };
    let fresh = Arc::new(Recorded::default());
    v.drop_queue("q");
    v.install_journaled("q", true, false, &args, fresh.clone(), from);
    let q = v.queue("q").expect("queue");
    let (token, rx) = ConfirmToken::waiter();
    assert!(q.relay_from(message("b"), Some(token), sent(1)).await);
    let (token, next) = ConfirmToken::waiter();
    assert!(q.relay_from(message("d"), Some(token), sent(3)).await);
    assert_eq!((rx.await, next.await), (Ok(true), Ok(true)));
    assert_eq!(q.stats().await.expect("stats"), (1, 0), "only d");
    // Numbers from another enqueuer are its own.
    assert!(
        q.relay_from(
            message("e"),
            None,
            Some(Sent {
                enqueuer: 8,
                seq: 1
            })
        )
        .await
    );
    assert_eq!(q.stats().await.expect("stats"), (2, 0));
}

fn args_of(pairs: &[(&str, amq_protocol::types::AMQPValue)]) -> amq_protocol::types::FieldTable {
    let mut t = amq_protocol::types::FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

/// Polls `f` every 20 ms for up to `secs` seconds.
async fn eventually<F, Fut>(secs: u64, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    while tokio::time::Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

/// At-least-once dead-lettering: a rejected message stays in the queue (its copy in its
/// place in the journal, counted against the length limit) while its target does not exist,
/// goes once the target is there, and is forgotten after the target confirmed it; a task
/// started from a journal holding a copy (a new leader's) sends it at once.
#[tokio::test]
async fn dead_letters_wait_for_their_target_at_least_once() {
    use amq_protocol::types::{AMQPValue, LongString};
    let dir = tempfile::tempdir().expect("dir");
    let (store, _) =
        crate::store::Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
    let v = crate::vhost::VHost::new("/", store, 100);
    let text = |s: &str| AMQPValue::LongString(LongString::from(s.as_bytes().to_vec()));
    let args = args_of(&[
        ("x-queue-type", text("quorum")),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text("dlq")),
        ("x-dead-letter-strategy", text("at-least-once")),
        ("x-overflow", text("reject-publish")),
        ("x-max-length", AMQPValue::LongInt(2)),
    ]);
    let journal = Arc::new(Recorded::default());
    v.install_journaled(
        "q",
        true,
        false,
        &args,
        journal.clone(),
        Journaled::default(),
    );
    let q = v.queue("q").expect("queue");
    assert!(q.publish(message("a"), None).await);
    let got = q.get(false).await.expect("get").expect("a message");
    q.discard(vec![got.seq]).await;
    let info = q.info().await.expect("info");
    assert_eq!(
        (
            info.messages_ready,
            info.messages_unacknowledged,
            info.messages_dlx
        ),
        (0, 0, 1),
        "held, neither ready nor unacked"
    );
    assert!(journal
        .0
        .lock()
        .expect("lock")
        .contains(&format!("dead-lettered {}", got.seq)));

    // Held copies count against the length limit, which a quorum queue refuses publishes
    // past once it is over it (RabbitMQ 3.10 takes b and c here and refuses d).
    let mut confirms = Vec::new();
    for body in ["b", "c", "d"] {
        let (token, rx) = ConfirmToken::waiter();
        assert!(q.publish(message(body), Some(token)).await);
        confirms.push(rx.await);
    }
    assert_eq!(
        confirms,
        [Ok(true), Ok(true), Ok(false)],
        "b and c taken, d refused"
    );

    // The target appears: the copy goes on the next retry, with its x-death, and is
    // forgotten once confirmed.
    v.install_queue("dlq", true, false, &Default::default(), None);
    let dlq = v.queue("dlq").expect("dlq");
    assert!(
        eventually(12, || async {
            dlq.stats().await.map(|s| s.0).unwrap_or(0) == 1
                && q.info().await.map(|i| i.messages_dlx).unwrap_or(1) == 0
        })
        .await,
        "the copy reached its target and left the queue"
    );
    let dead = dlq.get(true).await.expect("get").expect("the copy");
    assert_eq!(dead.msg.body(), b"a");
    let headers = dead.msg.headers();
    let deaths = match headers.inner().get("x-death") {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().to_vec(),
        other => panic!("no x-death: {other:?}"),
    };
    let reason = match deaths.first() {
        Some(AMQPValue::FieldTable(t)) => t.inner().get("reason").and_then(crate::args::text),
        _ => None,
    };
    assert_eq!(reason.as_deref(), Some("rejected"), "{deaths:?}");
    assert!(journal
        .0
        .lock()
        .expect("lock")
        .contains(&format!("dead letters sent [{}]", got.seq)));

    // A new leader's task sends what its journal held at once.
    let fresh = Arc::new(Recorded::default());
    v.drop_queue("q");
    let from = Journaled {
        dead: vec![(7, dead.msg.clone())],
        ..Default::default()
    };
    v.install_journaled("q", true, false, &args, fresh.clone(), from);
    assert!(
        eventually(3, || async {
            dlq.stats().await.map(|s| s.0).unwrap_or(0) == 1
        })
        .await,
        "sent again by the new task"
    );
    assert!(
        eventually(3, || async {
            fresh
                .0
                .lock()
                .expect("lock")
                .contains(&"dead letters sent [7]".to_string())
        })
        .await
    );
}
