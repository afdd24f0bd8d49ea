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
