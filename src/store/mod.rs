//! The store: the only user of redb and of stream segment files (`stream/`). Durable exchanges, queues, bindings, vhosts, users and
//! persistent messages live in one database file under the data dir. All writes go through the
//! writer thread (`writer.rs`, group commit); reads (recovery, paging bodies back in) use their
//! own read transactions and never wait for the writer.

mod group_values;
mod meta_tree;
mod metadata;
pub mod paging;
mod raft_log;
mod recovery;
/// Table layout and encodings. Public only for the store's own white-box tests in `tests/`
/// (schema version, stored hashes); the rest of the broker goes through the typed API.
pub mod schema;
pub mod stream;
mod writer;

pub use meta_tree::{TreeChange, TreeEntry};
pub use metadata::{BindingDestination, BindingRecord, ExchangeRecord, QueueRecord, UserRecord};
pub use raft_log::RaftState;
pub use recovery::{
    Recovered, RecoveredBinding, RecoveredExchange, RecoveredMessage, RecoveredPermission,
    RecoveredQueue,
};
pub use writer::GroupChange;

use crate::confirm::ConfirmToken;
use crate::message::Message;
use redb::{Database, ReadableDatabase, ReadableTable};
use schema::{MESSAGES, META, SCHEMA_VERSION};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
pub(crate) use writer::Op;
use writer::WriterStats;

/// File name of the database inside the data dir.
pub const DB_FILE: &str = "warren.redb";

/// Message bytes submitted to the writer and not yet committed before publishers wait.
const INFLIGHT_LIMIT: usize = 64 << 20;

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data dir or database file cannot be opened.
    #[error("cannot open store {path}: {cause}")]
    Open {
        /// Database path.
        path: PathBuf,
        /// Cause.
        cause: String,
    },
    /// Another process holds the database.
    #[error("cannot open store {path}: it is locked by another Warren process")]
    Locked {
        /// Database path.
        path: PathBuf,
    },
    /// Written by a newer Warren.
    #[error(
        "cannot open store {path}: schema version {found} is newer than this Warren's {supported}"
    )]
    Newer {
        /// Database path.
        path: PathBuf,
        /// Version found.
        found: u64,
        /// Version this build writes.
        supported: u64,
    },
    /// A read or write failed.
    #[error("store error: {0}")]
    Io(String),
}

impl From<redb::Error> for StoreError {
    fn from(e: redb::Error) -> Self {
        StoreError::Io(e.to_string())
    }
}

/// A cheap handle on the store.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Taken out at close so the file (and its lock) is released; reopened after I/O errors.
    db: writer::SharedDb,
    tx: mpsc::UnboundedSender<Op>,
    stats: Arc<WriterStats>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    next_queue_id: AtomicU64,
    submitted: AtomicU64,
    paging: Arc<paging::Paging>,
    /// Where stream queues keep their segment logs, one directory per queue id.
    streams: PathBuf,
}

fn io<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Io(e.to_string())
}

impl Store {
    /// A read transaction on the committed state.
    fn read_txn(&self) -> Result<redb::ReadTransaction, StoreError> {
        let db = writer::current(&self.inner.db)
            .ok_or_else(|| StoreError::Io("store not open".into()))?;
        db.begin_read().map_err(io)
    }

    /// Opens (or creates) the database in `dir`, checks its schema version and reads back
    /// everything durable.
    pub fn open(
        dir: &Path,
        cache_bytes: usize,
        window: paging::Window,
    ) -> Result<(Store, Recovered), StoreError> {
        let path = dir.join(DB_FILE);
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
            path: path.clone(),
            cause: e.to_string(),
        })?;
        let db = Database::builder()
            .set_cache_size(cache_bytes)
            .create(&path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => {
                    StoreError::Locked { path: path.clone() }
                }
                other => StoreError::Open {
                    path: path.clone(),
                    cause: other.to_string(),
                },
            })?;
        let reopen_path = path.clone();
        let reopen: writer::Reopen = Box::new(move || {
            Database::builder()
                .set_cache_size(cache_bytes)
                .create(&reopen_path)
        });
        let streams = dir.join("streams");
        Self::start(db, path, reopen, paging::Paging::new(dir, window), streams)
    }

    /// Opens a store on another redb backend (tests inject failing storage this way).
    #[cfg(test)]
    fn open_backend<B: redb::StorageBackend>(
        make: impl Fn() -> B + Send + 'static,
    ) -> Result<(Store, Recovered), StoreError> {
        let db = Database::builder()
            .create_with_backend(make())
            .map_err(|e| StoreError::Open {
                path: PathBuf::from("<backend>"),
                cause: e.to_string(),
            })?;
        let reopen: writer::Reopen =
            Box::new(move || Database::builder().create_with_backend(make()));
        let dir = std::env::temp_dir().join(format!("warren-backend-{}", std::process::id()));
        let paging = paging::Paging::new(&dir, paging::Window::default());
        let streams = dir.join("streams");
        Self::start(db, PathBuf::from("<backend>"), reopen, paging, streams)
    }

    /// Checks the schema version, recovers, and starts the writer.
    fn start(
        db: Database,
        path: PathBuf,
        reopen: writer::Reopen,
        paging: Arc<paging::Paging>,
        streams: PathBuf,
    ) -> Result<(Store, Recovered), StoreError> {
        let found = {
            let txn = db.begin_write().map_err(io)?;
            let found = {
                let mut meta = txn.open_table(META).map_err(io)?;
                let found = meta.get("schema_version").map_err(io)?.map(|v| v.value());
                if found.is_none() {
                    meta.insert("schema_version", SCHEMA_VERSION).map_err(io)?;
                }
                found
            };
            recovery::create_tables(&txn)?;
            txn.commit().map_err(io)?;
            found
        };
        if let Some(found) = found.filter(|v| *v > SCHEMA_VERSION) {
            return Err(StoreError::Newer {
                path,
                found,
                supported: SCHEMA_VERSION,
            });
        }
        let recovered = recovery::recover(&db, found.is_none())?;
        let db: writer::SharedDb = Arc::new(RwLock::new(Some(Arc::new(db))));
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(WriterStats::default());
        let writer = {
            let (db, stats) = (db.clone(), stats.clone());
            std::thread::Builder::new()
                .name("warren-store".into())
                .spawn(move || writer::run(db, reopen, rx, stats))
                .map_err(io)?
        };
        Ok((
            Store {
                inner: Arc::new(Inner {
                    db,
                    tx,
                    stats,
                    writer: Mutex::new(Some(writer)),
                    next_queue_id: AtomicU64::new(1),
                    submitted: AtomicU64::new(0),
                    paging,
                    streams,
                }),
            },
            recovered,
        ))
    }

    /// Where queues page out the messages beyond their in-memory window.
    pub fn paging(&self) -> &Arc<paging::Paging> {
        &self.inner.paging
    }

    /// Opens (or creates) the segment log of the stream queue `id`, repairing a torn tail.
    pub fn open_stream(
        &self,
        id: u64,
        options: stream::LogOptions,
    ) -> Result<stream::StreamLog, stream::StreamLogError> {
        stream::StreamLog::open(&self.inner.streams.join(id.to_string()), options)
    }

    /// Makes sure new queue ids start above every recovered one.
    pub fn reserve_queue_ids(&self, first_free: u64) {
        self.inner
            .next_queue_id
            .fetch_max(first_free, Ordering::AcqRel);
    }

    /// A fresh queue id.
    pub fn allocate_queue_id(&self) -> u64 {
        self.inner.next_queue_id.fetch_add(1, Ordering::AcqRel)
    }

    /// How many operations were submitted so far (to tell whether a call wrote anything).
    pub fn submitted(&self) -> u64 {
        self.inner.submitted.load(Ordering::Acquire)
    }

    /// Waits for the commit of everything submitted, if anything was submitted since `mark`.
    pub async fn sync_since(&self, mark: u64) -> bool {
        if self.submitted() == mark {
            return true;
        }
        self.sync().await
    }

    /// Queues an operation for the writer.
    pub(crate) fn submit(&self, op: Op) {
        self.inner.submitted.fetch_add(1, Ordering::AcqRel);
        // A send fails only after the writer stopped (shutdown): nothing more can be stored.
        if let Err(mpsc::error::SendError(Op::Barrier(tx))) = self.inner.tx.send(op) {
            let _ = tx.send(false);
        }
    }

    /// Stores a message; the token completes after its commit. Waits while too much message
    /// data is waiting for the writer (backpressure towards publishers).
    pub async fn put_message(
        &self,
        queue: u64,
        seq: u64,
        msg: Arc<Message>,
        expires_at: Option<u64>,
        token: Option<ConfirmToken>,
    ) {
        let stats = &self.inner.stats;
        loop {
            let notified = stats.drained.notified();
            if stats.inflight.load(Ordering::Acquire) < INFLIGHT_LIMIT {
                break;
            }
            notified.await;
        }
        stats
            .inflight
            .fetch_add(msg.stored_size(), Ordering::AcqRel);
        self.submit(Op::PutMessage {
            queue,
            seq,
            msg,
            expires_at,
            token,
        });
    }

    /// Waits until everything submitted before has been committed; false if a commit failed.
    pub async fn sync(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        self.submit(Op::Barrier(tx));
        rx.await.unwrap_or(false)
    }

    /// Whether the last commit failed (the disk alarm condition).
    pub fn failing(&self) -> bool {
        self.inner.stats.failing.load(Ordering::Acquire)
    }

    /// (transactions committed, operations applied) so far.
    pub fn commit_stats(&self) -> (u64, u64) {
        (
            self.inner.stats.commits.load(Ordering::Relaxed),
            self.inner.stats.ops.load(Ordering::Relaxed),
        )
    }

    /// Reads up to `limit` stored messages of a queue from sequence `from` on.
    pub fn read_messages(
        &self,
        queue: u64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Message)>, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(MESSAGES).map_err(io)?;
        let mut out = Vec::with_capacity(limit);
        for entry in table.range((queue, from)..=(queue, u64::MAX)).map_err(io)? {
            let (k, v) = entry.map_err(io)?;
            let (_, seq) = k.value();
            let bytes = v.value();
            let msg = schema::decode_message(bytes)
                .and_then(|(x, rk, pl, data)| Message::from_stored(x, rk, pl, data))
                .ok_or_else(|| StoreError::Io(format!("corrupt message {queue}/{seq}")))?;
            out.push((seq, msg));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Commits what is pending and stops the writer.
    pub async fn close(&self) {
        self.submit(Op::Shutdown);
        let handle = self.inner.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(h) = handle {
            let _ = tokio::task::spawn_blocking(move || h.join()).await;
        }
        if let Ok(mut db) = self.inner.db.write() {
            db.take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::BasicProperties;
    use bytes::Bytes;

    fn message(i: u32) -> Arc<Message> {
        let props = BasicProperties::default().with_delivery_mode(2);
        let mut data = vec![0x10, 0x00, 2];
        data.extend_from_slice(&i.to_be_bytes());
        Arc::new(Message::new(
            "".into(),
            "q".into(),
            Bytes::from(data),
            3,
            &props,
        ))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_puts_land_in_few_transactions() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, recovered) =
            Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
        assert!(recovered.fresh);
        let mut tasks = Vec::new();
        for t in 0..8u32 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut waits = Vec::new();
                for i in 0..250u32 {
                    let (token, rx) = ConfirmToken::waiter();
                    let seq = u64::from(t * 1000 + i);
                    store
                        .put_message(7, seq, message(seq as u32), None, Some(token))
                        .await;
                    waits.push(rx);
                }
                for w in waits {
                    assert!(w.await.expect("completed"), "stored");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let (commits, ops) = store.commit_stats();
        assert_eq!(ops, 2000);
        assert!(commits <= 200, "2000 puts took {commits} commits");
        let read = store.read_messages(7, 0, 10_000).expect("read");
        assert_eq!(read.len(), 2000);
        assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "sequence order");
        assert!(read.iter().all(|(_, m)| m.persistent));
        store.close().await;
    }

    /// In-memory storage whose writes and syncs fail while `fail` is set.
    #[derive(Debug, Clone)]
    struct FlakyDisk {
        inner: Arc<redb::backends::InMemoryBackend>,
        fail: Arc<std::sync::atomic::AtomicBool>,
    }

    impl FlakyDisk {
        fn check(&self) -> std::io::Result<()> {
            if self.fail.load(Ordering::Acquire) {
                Err(std::io::Error::other("injected: no space left on device"))
            } else {
                Ok(())
            }
        }
    }

    impl redb::StorageBackend for FlakyDisk {
        fn len(&self) -> std::io::Result<u64> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.check()?;
            self.inner.set_len(len)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            self.check()?;
            self.inner.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.check()?;
            self.inner.write(offset, data)
        }
    }

    async fn put(store: &Store, seq: u64) -> bool {
        let (token, rx) = ConfirmToken::waiter();
        store
            .put_message(1, seq, message(seq as u32), None, Some(token))
            .await;
        rx.await.unwrap_or(false)
    }

    #[tokio::test]
    async fn write_failures_nack_raise_the_alarm_and_leave_the_store_usable() {
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let disk = FlakyDisk {
            inner: Arc::new(redb::backends::InMemoryBackend::new()),
            fail: fail.clone(),
        };
        let (store, _) = Store::open_backend(move || disk.clone()).expect("open");
        assert!(put(&store, 0).await);
        assert!(!store.failing());
        fail.store(true, Ordering::Release);
        assert!(
            !put(&store, 1).await,
            "a failed write must not be confirmed"
        );
        assert!(store.failing(), "disk alarm raised");
        fail.store(false, Ordering::Release);
        let mut recovered = false;
        for seq in 2..20 {
            if put(&store, seq).await {
                recovered = true;
                break;
            }
        }
        assert!(recovered, "writes succeed again once the disk does");
        assert!(!store.failing());
        let seqs: Vec<u64> = store
            .read_messages(1, 0, 100)
            .expect("read")
            .iter()
            .map(|m| m.0)
            .collect();
        assert_eq!(seqs.first(), Some(&0));
        assert!(!seqs.contains(&1), "the failed write left nothing behind");
    }

    #[tokio::test]
    async fn deleted_messages_are_gone_after_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        {
            let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("open");
            store.submit(Op::PutQueue {
                key: schema::encode_parts(&[b"/", b"q"]),
                value: schema::encode_parts(&[
                    &3u64.to_be_bytes(),
                    &[schema::flags::DURABLE],
                    &[0, 0, 0, 0],
                ]),
            });
            for seq in 0..10 {
                store
                    .put_message(3, seq, message(seq as u32), None, None)
                    .await;
            }
            store.submit(Op::DeleteMessages {
                queue: 3,
                seqs: vec![0, 5, 9],
            });
            // An index entry of a queue that does not exist is dropped at recovery.
            store.put_message(99, 1, message(1), None, None).await;
            assert!(store.sync().await);
            store.close().await;
        }
        let (store, recovered) =
            Store::open(dir.path(), 8 << 20, Default::default()).expect("reopen");
        assert!(!recovered.fresh);
        assert_eq!(recovered.queues.len(), 1);
        let seqs: Vec<u64> = recovered.queues[0].messages.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 6, 7, 8]);
        assert!(store.read_messages(99, 0, 10).expect("read").is_empty());
        store.close().await;
    }
}
