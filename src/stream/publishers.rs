//! A stream connection's publishers: `declare_publisher`, `publish`, `delete_publisher` and
//! `query_publisher_sequence`, and the confirms and publish errors written back. Each
//! publisher's counters (published, confirmed, errored) are kept on the connection's
//! registry entry for the management API, bumped once per frame.

use super::frame::{code, key, publish_error, Frame};
use super::request::Published;
use super::session::{send, Next, Publisher, Session};
use crate::permissions::Access;
use crate::queue::stream::StreamCmd;
use crate::stream_stats::PublisherStats;
use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

impl Session {
    pub(super) async fn declare_publisher(
        &mut self,
        id: u8,
        reference: Option<String>,
        stream: &str,
    ) -> u16 {
        if self.publishers.contains_key(&id) {
            return code::PRECONDITION_FAILED;
        }
        match self.stream_for(stream, Access::Write) {
            Ok(queue) => {
                let stats = Arc::new(PublisherStats {
                    id,
                    stream: stream.to_owned(),
                    reference: reference.clone().unwrap_or_default(),
                    published: Default::default(),
                    confirmed: Default::default(),
                    errored: Default::default(),
                });
                if let Some(r) = &self.registration {
                    r.info.stream.add_publisher(stats.clone());
                }
                let watch = StreamCmd::Watch {
                    connection: self.id,
                    events: self.events.clone(),
                };
                if !queue.stream_request(watch).await {
                    return code::STREAM_NOT_AVAILABLE;
                }
                let reference = reference.map(|r| Arc::from(r.as_str()));
                let p = Publisher {
                    queue,
                    reference,
                    stats,
                };
                self.publishers.insert(id, p);
                code::OK
            }
            Err(c) => c,
        }
    }

    pub(super) fn delete_publisher(&mut self, id: u8) -> u16 {
        match self.publishers.remove(&id) {
            Some(_) => {
                self.unlist_publisher(id);
                code::OK
            }
            None => code::PUBLISHER_DOES_NOT_EXIST,
        }
    }

    /// Takes publisher `id` off the connection's registry entry.
    pub(super) fn unlist_publisher(&self, id: u8) {
        if let Some(r) = &self.registration {
            r.info.stream.remove_publisher(id);
        }
    }

    pub(super) async fn publish<W: AsyncWrite + Unpin>(
        &mut self,
        publisher: u8,
        messages: Vec<Published>,
        wr: &mut W,
    ) -> Next {
        let counters = &self.broker.connections.stream;
        counters.received.fetch_add(messages.len() as u64, Relaxed);
        let Some(p) = self.publishers.get(&publisher) else {
            let ids: Vec<u64> = messages.iter().map(|m| m.id).collect();
            let c = counters.answered(code::PUBLISHER_DOES_NOT_EXIST);
            send(wr, publish_error(publisher, &ids, c)).await;
            return Next::Continue;
        };
        p.stats.published.fetch_add(messages.len() as u64, Relaxed);
        let ids: Vec<u64> = messages.iter().map(|m| m.id).collect();
        let cmd = StreamCmd::Append {
            publisher,
            reference: p.reference.clone(),
            messages: messages
                .into_iter()
                .map(|m| (m.id, m.message, m.filter))
                .collect(),
            events: self.events.clone(),
        };
        if !p.queue.stream_request(cmd).await {
            self.refused(publisher, ids.len());
            let c = counters.answered(code::STREAM_NOT_AVAILABLE);
            send(wr, publish_error(publisher, &ids, c)).await;
        }
        Next::Continue
    }

    /// The frame confirming `ids` to `publisher`, counted.
    pub(super) fn confirmed(&self, publisher: u8, ids: Vec<u64>) -> Bytes {
        let n = ids.len() as u64;
        self.broker
            .connections
            .stream
            .confirmed
            .fetch_add(n, Relaxed);
        if let Some(p) = self.publishers.get(&publisher) {
            p.stats.confirmed.fetch_add(n, Relaxed);
        }
        let mut f = Frame::command(key::PUBLISH_CONFIRM, 1)
            .u8(publisher)
            .u32(ids.len() as u32);
        for id in ids {
            f = f.u64(id);
        }
        f.finish()
    }

    /// Counts `n` messages of `publisher` answered with a publish error.
    pub(super) fn refused(&self, publisher: u8, n: usize) {
        if let Some(p) = self.publishers.get(&publisher) {
            p.stats.errored.fetch_add(n as u64, Relaxed);
        }
    }

    pub(super) async fn query_publisher_sequence<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        reference: String,
        stream: &str,
        wr: &mut W,
    ) {
        let (c, seq) = match self.stream_for(stream, Access::Read) {
            Err(c) => (c, 0),
            Ok(q) => {
                let (tx, rx) = oneshot::channel();
                let cmd = StreamCmd::QuerySequence {
                    reference,
                    reply: tx,
                };
                match q.stream_request(cmd).await {
                    true => rx
                        .await
                        .map_or((code::STREAM_NOT_AVAILABLE, 0), |s| (code::OK, s)),
                    false => (code::STREAM_NOT_AVAILABLE, 0),
                }
            }
        };
        let c = self.counted(c);
        let f = Frame::response(key::QUERY_PUBLISHER_SEQUENCE, 1, corr, c).u64(seq);
        send(wr, f.finish()).await;
    }
}
