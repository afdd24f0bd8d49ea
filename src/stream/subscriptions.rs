//! A stream connection's consumers: `subscribe`, `credit`, `unsubscribe`, the
//! `ConsumerUpdate`s of single active consumers with their answers, and the bookkeeping of
//! delivered chunks (the connection's write backlog, each subscription's credits, consumed
//! count and offset, kept on the connection's registry entry for the management API).

use super::frame::{code, key, Frame};
use super::session::{send, Next, Session, Subscription};
use crate::permissions::Access;
use crate::queue::stream::{SingleActive, StreamCmd, MAX_BACKLOG};
use crate::store::stream::bloom::BloomMatcher;
use crate::store::stream::chunk::HEADER_LEN;
use crate::store::stream::OffsetSpec;
use crate::stream_stats::ConsumerStats;
use bytes::Bytes;
use std::sync::atomic::Ordering::{self, Relaxed};
use std::sync::Arc;
use tokio::io::AsyncWrite;

impl Session {
    /// Whether subscription `id` is current (chunks for one that ended are dropped).
    pub(super) fn subscribed(&self, id: u8) -> bool {
        self.subscriptions.contains_key(&id)
    }

    /// Counts a chunk (its header) delivered to subscription `id`: one credit spent, its
    /// entries consumed, its last offset reached.
    pub(super) fn delivered(&self, id: u8, header: &[u8; HEADER_LEN]) {
        let Some(s) = self.subscriptions.get(&id) else {
            return;
        };
        let entries = u64::from(u16::from_be_bytes([header[2], header[3]]));
        let mut first = [0u8; 8];
        first.copy_from_slice(&header[24..32]);
        let first = u64::from_be_bytes(first);
        s.stats.credits.fetch_sub(1, Relaxed);
        s.stats.consumed.fetch_add(entries, Relaxed);
        s.stats
            .offset
            .store((first + entries).saturating_sub(1), Relaxed);
        let counters = &self.broker.connections.stream;
        counters.delivered.fetch_add(entries, Relaxed);
    }

    /// A chunk of `bytes` was written: when that brings the backlog back under its bound, the
    /// streams are asked to go on (a credit of 0 wakes a stream's deliveries).
    pub(super) async fn chunk_written(&self, bytes: usize) {
        let before = self.backlog.fetch_sub(bytes, Ordering::AcqRel);
        if before >= MAX_BACKLOG && before - bytes < MAX_BACKLOG {
            for (id, s) in &self.subscriptions {
                let cmd = StreamCmd::Credit {
                    connection: self.id,
                    id: *id,
                    credit: 0,
                };
                s.queue.stream_request(cmd).await;
            }
        }
    }

    /// The frame telling the client subscription `id` is now (or no longer) the active
    /// member of its group; its answer is awaited under a correlation id of the server's.
    pub(super) fn consumer_update(&mut self, id: u8, active: bool) -> Bytes {
        if let Some(s) = self.subscriptions.get(&id) {
            s.stats.active.store(active, Relaxed);
        }
        self.next_corr = self.next_corr.wrapping_add(1);
        self.updates.insert(self.next_corr, id);
        Frame::command(key::CONSUMER_UPDATE, 1)
            .u32(self.next_corr)
            .u8(id)
            .u8(u8::from(active))
            .finish()
    }

    /// The client answered a `ConsumerUpdate`: its subscription's stream hears the offset.
    pub(super) async fn consumer_update_response(
        &mut self,
        corr: u32,
        c: u16,
        offset: Option<OffsetSpec>,
    ) {
        let Some(id) = self.updates.remove(&corr) else {
            tracing::debug!(peer = %self.peer, corr, "consumer update response to nothing");
            return;
        };
        if c != code::OK {
            tracing::info!(peer = %self.peer, code = c, "unexpected consumer update response code");
        }
        if let Some(s) = self.subscriptions.get(&id) {
            let cmd = StreamCmd::ConsumerUpdated {
                connection: self.id,
                id,
                offset,
            };
            s.queue.stream_request(cmd).await;
        }
    }

    pub(super) async fn subscribe(
        &mut self,
        id: u8,
        stream: &str,
        offset: OffsetSpec,
        credit: u16,
        properties: Vec<(String, String)>,
    ) -> u16 {
        if self.subscriptions.contains_key(&id) {
            return code::SUBSCRIPTION_ID_ALREADY_EXISTS;
        }
        let q = match self.stream_for(stream, Access::Read) {
            Ok(q) => q,
            Err(c) => return c,
        };
        let property = |k: &str| {
            properties
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.as_str())
        };
        let single_active = match (property("single-active-consumer"), property("name")) {
            (Some("true"), None) => {
                tracing::warn!(peer = %self.peer, id, "a single active consumer must have a name");
                return code::PRECONDITION_FAILED;
            }
            (Some("true"), Some(name)) => Some(SingleActive {
                name: Arc::from(name),
                partition: property("super-stream").and_then(|s| self.partition_index(s, stream)),
            }),
            _ => None,
        };
        // `filter.<anything>` properties, as RabbitMQ reads them; none, no filter.
        let values: Vec<Vec<u8>> = properties
            .iter()
            .filter(|(k, _)| k.starts_with("filter."))
            .map(|(_, v)| v.as_bytes().to_vec())
            .collect();
        let filter = (!values.is_empty()).then(|| BloomMatcher {
            values,
            match_unfiltered: property("match-unfiltered") == Some("true"),
        });
        let active = single_active.is_none();
        let cmd = StreamCmd::Subscribe {
            connection: self.id,
            id,
            start: offset,
            credit,
            single_active,
            filter,
            events: self.events.clone(),
            backlog: self.backlog.clone(),
        };
        if !q.stream_request(cmd).await {
            return code::STREAM_NOT_AVAILABLE;
        }
        let stats = Arc::new(ConsumerStats {
            id,
            stream: stream.to_owned(),
            properties,
            credits: i64::from(credit).into(),
            consumed: 0.into(),
            offset: 0.into(),
            active: active.into(),
            at_end: offset == OffsetSpec::Next,
        });
        if let Some(r) = &self.registration {
            r.info.stream.add_consumer(stats.clone());
        }
        self.subscriptions
            .insert(id, Subscription { queue: q, stats });
        code::OK
    }

    pub(super) async fn credit<W: AsyncWrite + Unpin>(
        &mut self,
        id: u8,
        credit: u16,
        wr: &mut W,
    ) -> Next {
        match self.subscriptions.get(&id) {
            Some(s) => {
                s.stats.credits.fetch_add(i64::from(credit), Relaxed);
                let cmd = StreamCmd::Credit {
                    connection: self.id,
                    id,
                    credit,
                };
                s.queue.stream_request(cmd).await;
            }
            None => {
                // The only answer credit ever gets: its key, version, code, subscription.
                let c = self.counted(code::SUBSCRIPTION_ID_DOES_NOT_EXIST);
                let f = Frame::command(key::CREDIT | key::RESPONSE, 1).u16(c).u8(id);
                send(wr, f.finish()).await;
            }
        }
        Next::Continue
    }

    pub(super) async fn unsubscribe(&mut self, id: u8) -> u16 {
        self.updates.retain(|_, sub| *sub != id);
        match self.subscriptions.remove(&id) {
            Some(s) => {
                self.unlist_consumer(id);
                let cmd = StreamCmd::Unsubscribe {
                    connection: self.id,
                    id,
                };
                s.queue.stream_request(cmd).await;
                code::OK
            }
            None => code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
        }
    }

    /// Takes subscription `id` off the connection's registry entry.
    pub(super) fn unlist_consumer(&self, id: u8) {
        if let Some(r) = &self.registration {
            r.info.stream.remove_consumer(id);
        }
    }
}
