//! A stream's consumers: what basic.consume must carry for a stream (a prefetch, acks, no
//! global QoS, an `x-stream-offset` that parses), and each consumer's reading — its own
//! reader on the log, the records of the chunk it is in, and its credit. Every delivery
//! carries the record's offset in the `x-stream-offset` header. A consumer with
//! `x-stream-filter` gets only the messages its filter admits (see `StreamFilter`).

use super::StreamQueue;
use crate::error::{CoreError, CoreResult, Precondition};
use crate::message::Message;
use crate::queue::consumer::{ConsumerEvent, ConsumerSpec, Delivery, StreamFilter, PENDING_WINDOW};
use crate::queue::stats::Counter;
use crate::queue::{ConsumerSummary, QueueShared};
use crate::store::stream::chunk::{Entries, Entry};
use crate::store::stream::{record, LogReader, OffsetSpec};
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Checks a basic.consume on stream `q` as RabbitMQ does (in its order: the arguments, a
/// prefetch, acks, no global QoS) and returns where the consumer starts.
pub fn consume_offset(
    q: &QueueShared,
    arguments: &FieldTable,
    no_ack: bool,
    prefetch: u32,
    global_prefetch: u32,
) -> CoreResult<OffsetSpec> {
    if arguments.inner().contains_key("x-priority") {
        return Err(Precondition::ArgForType {
            arg: "x-priority".to_owned(),
            queue: q.name.clone(),
            vhost: q.vhost.clone(),
            queue_type: "rabbit_stream_queue",
        }
        .into());
    }
    let spec = match arguments.inner().get("x-stream-offset") {
        None => OffsetSpec::Next,
        Some(v) => parse_offset(v).ok_or_else(|| {
            CoreError::from(Precondition::InvalidArg {
                arg: "x-stream-offset".to_owned(),
                queue: q.name.clone(),
                vhost: q.vhost.clone(),
                why: format!("{{invalid_stream_offset_arg,{}}}", erlang_term(v)),
            })
        })?,
    };
    if prefetch == 0 {
        return Err(Precondition::NoPrefetch {
            queue: q.name.clone(),
            vhost: q.vhost.clone(),
        }
        .into());
    }
    if no_ack {
        return Err(CoreError::NotImplemented(format!(
            "automatic acknowledgement not supported by stream {}",
            q.describe()
        )));
    }
    if global_prefetch != 0 {
        return Err(CoreError::NotImplemented(format!(
            "{} does not support global qos",
            q.describe()
        )));
    }
    Ok(spec)
}

/// The filter a basic.consume on a stream asks for, as RabbitMQ reads it: `x-stream-filter`
/// (a string, or an array whose strings count), and `x-stream-match-unfiltered` (a boolean,
/// false unless given); no `x-stream-filter`, no filter.
pub fn consume_filter(arguments: &FieldTable) -> Option<Arc<StreamFilter>> {
    let values = match arguments.inner().get("x-stream-filter")? {
        AMQPValue::FieldArray(a) => a.as_slice().iter().filter_map(crate::args::text).collect(),
        v => vec![crate::args::text(v)?],
    };
    let match_unfiltered = matches!(
        arguments.inner().get("x-stream-match-unfiltered"),
        Some(AMQPValue::Boolean(true))
    );
    Some(Arc::new(StreamFilter {
        values,
        match_unfiltered,
    }))
}

/// A message's `x-stream-filter-value` (a string), if it has one; the headers are decoded
/// only when their bytes hold the name.
pub(super) fn filter_value(m: &Message) -> Option<String> {
    const NAME: &[u8] = b"x-stream-filter-value";
    if !m.has_headers() || !m.raw_properties().windows(NAME.len()).any(|w| w == NAME) {
        return None;
    }
    crate::args::text(m.headers().inner().get("x-stream-filter-value")?)
}

/// `x-stream-offset` as RabbitMQ reads it: `first`, `last`, `next`, an AMQP timestamp
/// (seconds), an interval back from now (`1h`, units of `x-max-age`), or an offset (a
/// negative one is the first).
fn parse_offset(v: &AMQPValue) -> Option<OffsetSpec> {
    if let Some(text) = crate::args::text(v) {
        return match text.as_str() {
            "first" => Some(OffsetSpec::First),
            "last" => Some(OffsetSpec::Last),
            "next" => Some(OffsetSpec::Next),
            interval => {
                let back = crate::args::parse_max_age(interval)?;
                let now = crate::clock::unix_ms();
                Some(OffsetSpec::Timestamp(now.saturating_sub(back) as i64))
            }
        };
    }
    let n: i128 = match v {
        AMQPValue::Timestamp(secs) => {
            return Some(OffsetSpec::Timestamp(
                (*secs).min(i64::MAX as u64 / 1000) as i64 * 1000,
            ))
        }
        AMQPValue::ShortShortInt(n) => (*n).into(),
        AMQPValue::ShortShortUInt(n) => (*n).into(),
        AMQPValue::ShortInt(n) => (*n).into(),
        AMQPValue::ShortUInt(n) => (*n).into(),
        AMQPValue::LongInt(n) => (*n).into(),
        AMQPValue::LongUInt(n) => (*n).into(),
        AMQPValue::LongLongInt(n) => (*n).into(),
        _ => return None,
    };
    Some(OffsetSpec::Offset(n.clamp(0, i128::from(u64::MAX)) as u64))
}

/// A value as Erlang prints RabbitMQ's `{Type, Value}` table entries in error texts.
fn erlang_term(v: &AMQPValue) -> String {
    match crate::args::text(v) {
        Some(s) => format!("{{longstr,<<\"{s}\">>}}"),
        None => format!("{v:?}"),
    }
}

/// One consumer of a stream.
pub(super) struct StreamConsumer {
    pub(super) spec: ConsumerSpec,
    start: OffsetSpec,
    /// Records before this offset are skipped (a numeric start inside a chunk).
    from: u64,
    /// Its reader, once the log was there to place it.
    reader: Option<LogReader>,
    /// Records of the chunk being delivered: (offset, record).
    buffered: VecDeque<(u64, Bytes)>,
    /// Deliveries not yet acked (its credit is the prefetch minus these).
    pub(super) unacked: u32,
}

impl StreamConsumer {
    pub(super) fn new(spec: ConsumerSpec) -> Self {
        let start = spec.stream_offset.unwrap_or(OffsetSpec::Next);
        let from = match start {
            OffsetSpec::Offset(o) => o,
            _ => 0,
        };
        StreamConsumer {
            spec,
            start,
            from,
            reader: None,
            buffered: VecDeque::new(),
            unacked: 0,
        }
    }

    pub(super) fn summary(&self) -> ConsumerSummary {
        ConsumerSummary {
            tag: self.spec.tag.clone(),
            channel: self.spec.channel,
            connection: self.spec.connection,
            ack_required: true,
            exclusive: self.spec.exclusive,
            prefetch: self.spec.prefetch,
            priority: 0,
            timeout: 0,
        }
    }

    /// Tells the consumer's channel that the queue went (basic.cancel).
    pub(super) fn cancelled(self) {
        let _ = self.spec.sink.send(ConsumerEvent::Cancelled {
            channel: self.spec.channel,
            tag: self.spec.tag.clone(),
        });
    }

    fn has_credit(&self) -> bool {
        self.unacked < self.spec.prefetch
            && self.spec.pending.load(Ordering::Acquire) < PENDING_WINDOW
    }

    /// The next record to hand out, reading the next chunk when the last one is used up.
    fn next_record(&mut self, committed: u64, queue: &str) -> Option<(u64, Bytes)> {
        loop {
            if let Some(r) = self.buffered.pop_front() {
                return Some(r);
            }
            let reader = self.reader.as_mut()?;
            let (h, bytes) = match reader.next_chunk(committed) {
                Ok(Some(c)) => c,
                Ok(None) => return None,
                Err(e) => {
                    tracing::error!(queue, error = %e, "reading the stream failed");
                    return None;
                }
            };
            let bytes = Bytes::from(bytes);
            let data = bytes.slice(h.data_start()..h.data_start() + h.data_len as usize);
            let mut offset = h.first_offset;
            for e in Entries::new(&data) {
                match e {
                    Ok(Entry::Simple(r)) => {
                        if offset >= self.from {
                            self.buffered.push_back((offset, data.slice_ref(r)));
                        }
                        offset += 1;
                    }
                    // Sub-batches come from the stream protocol, whose consumers get them whole.
                    Ok(entry) => offset += u64::from(entry.records()),
                    Err(_) => break,
                }
            }
        }
    }
}

impl StreamQueue {
    /// Places the readers of consumers that have none yet (the log was lent to a write when
    /// they came).
    pub(super) fn attach_readers(&mut self) {
        let Some(log) = self.log.as_ref() else {
            return;
        };
        for c in self.consumers.iter_mut().filter(|c| c.reader.is_none()) {
            match log.reader(c.start) {
                Ok(r) => c.reader = Some(r),
                Err(e) => {
                    tracing::error!(queue = %self.shared.name, error = %e, "cannot read the stream");
                }
            }
        }
        self.attach_subscriptions();
    }

    /// Hands records to every consumer with credit.
    pub(super) fn deliver(&mut self) {
        let mut gone = Vec::new();
        for c in self.consumers.iter_mut() {
            while c.has_credit() {
                let Some((offset, rec)) = c.next_record(self.committed, &self.shared.name) else {
                    break;
                };
                let Some(msg) = record::read_message(rec) else {
                    continue;
                };
                if let Some(f) = &c.spec.stream_filter {
                    if !f.admits(filter_value(&msg).as_deref()) {
                        continue;
                    }
                }
                let msg =
                    msg.with_long_header("x-stream-offset", offset.min(i64::MAX as u64) as i64);
                let seq = self.next_seq;
                self.next_seq += 1;
                c.spec.pending.fetch_add(1, Ordering::AcqRel);
                let d = Delivery::to(&c.spec, self.shared.clone(), seq, false, Arc::new(msg));
                if c.spec.sink.send(ConsumerEvent::Deliver(d)).is_err() {
                    c.spec.pending.fetch_sub(1, Ordering::AcqRel);
                    gone.push(c.spec.id);
                    break;
                }
                c.unacked += 1;
                self.unacked.insert(seq, c.spec.id);
                self.stats.add(Counter::Deliver, 1);
            }
        }
        self.consumers.retain(|c| !gone.contains(&c.spec.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_as_rabbitmq_reads_them() {
        let s = |t: &str| parse_offset(&AMQPValue::LongString(t.into()));
        assert_eq!(s("first"), Some(OffsetSpec::First));
        assert_eq!(s("last"), Some(OffsetSpec::Last));
        assert_eq!(s("next"), Some(OffsetSpec::Next));
        assert_eq!(s("1X"), None);
        assert_eq!(s("abc"), None);
        let now = crate::clock::unix_ms() as i64;
        let Some(OffsetSpec::Timestamp(t)) = s("1h") else {
            panic!("an interval is a time");
        };
        assert!((now - 3_600_000 - 1000..=now - 3_600_000 + 1000).contains(&t));
        assert_eq!(
            parse_offset(&AMQPValue::Timestamp(1_700_000_000)),
            Some(OffsetSpec::Timestamp(1_700_000_000_000))
        );
        assert_eq!(
            parse_offset(&AMQPValue::LongInt(5)),
            Some(OffsetSpec::Offset(5))
        );
        assert_eq!(
            parse_offset(&AMQPValue::LongInt(-1)),
            Some(OffsetSpec::Offset(0))
        );
        assert_eq!(parse_offset(&AMQPValue::Boolean(true)), None);
        assert_eq!(
            erlang_term(&AMQPValue::LongString("1X".into())),
            "{longstr,<<\"1X\">>}"
        );
    }
}
