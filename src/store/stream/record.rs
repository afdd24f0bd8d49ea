//! A message as a stream record. Messages published over AMQP 0-9-1 are kept as they came
//! (exchange, routing key, the raw property bytes and the body) after a tag byte, so a
//! consumer over AMQP 0-9-1 gets back exactly what was published. AMQP 1.0 messages, which
//! RabbitMQ's stream protocol carries, start with a described-type constructor (0x00): the tag
//! tells the two apart, so records written by the stream protocol can sit in the same log.

use crate::message::{HotProperties, Message};
use bytes::Bytes;

use super::chunk::ChunkBuilder;
pub use super::chunk::AMQP_091;

/// Appends `msg` to a chunk as one record; false when the chunk has no room for it.
pub fn push_message(chunk: &mut ChunkBuilder, msg: &Message, filter: Option<&[u8]>) -> bool {
    let (exchange, key) = (msg.exchange.as_str(), msg.routing_key.as_str());
    let props_len = (msg.raw_properties().len() as u32).to_be_bytes();
    chunk.push_filtered(
        &[
            &[AMQP_091, exchange.len() as u8],
            exchange.as_bytes(),
            &[key.len() as u8],
            key.as_bytes(),
            &props_len,
            msg.data(),
        ],
        filter,
    )
}

/// The message in a record (`record` shares the chunk's buffer: the body is not copied, the
/// properties are not decoded); None when the record is not an AMQP 0-9-1 message or is
/// malformed.
pub fn read_message(record: Bytes) -> Option<Message> {
    let b = record.as_ref();
    if *b.first()? != AMQP_091 {
        return from_amqp_10(b);
    }
    let xl = usize::from(*b.get(1)?);
    let exchange = std::str::from_utf8(b.get(2..2 + xl)?).ok()?;
    let at = 2 + xl;
    let kl = usize::from(*b.get(at)?);
    let key = std::str::from_utf8(b.get(at + 1..at + 1 + kl)?).ok()?;
    let at = at + 1 + kl;
    let props_len = u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize;
    let data = record.slice(at + 4..);
    match HotProperties::from_raw(data.get(..props_len)?) {
        Some(hot) => Some(Message::assemble(
            crate::shortstr::short(exchange),
            crate::shortstr::short(key),
            data,
            props_len,
            hot,
        )),
        None => Message::from_stored_bytes(exchange, key, props_len, data),
    }
}

/// An AMQP 1.0 record (published over the stream protocol) as a 0-9-1 message.
fn from_amqp_10(b: &[u8]) -> Option<Message> {
    let d = crate::message_amqp10::decode(b)?;
    let raw = cookie_factory::gen_simple(
        amq_protocol::protocol::basic::gen_properties(&d.properties),
        Vec::new(),
    )
    .ok()?;
    let props_len = raw.len();
    let mut data = raw;
    data.extend_from_slice(&d.body);
    Some(Message::new(
        crate::shortstr::short(d.exchange.as_deref().unwrap_or_default()),
        crate::shortstr::short(d.routing_key.as_deref().unwrap_or_default()),
        Bytes::from(data),
        props_len,
        &d.properties,
    ))
}

/// The record as an AMQP 1.0 message: as it is when it is one, converted when it holds a
/// message published over AMQP 0-9-1; None when it is malformed.
pub fn as_amqp_10(record: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    if record.first() != Some(&AMQP_091) {
        return Some(std::borrow::Cow::Borrowed(record));
    }
    let msg = read_message(Bytes::copy_from_slice(record))?;
    let props = msg.properties();
    Some(std::borrow::Cow::Owned(crate::message_amqp10::encode(
        &crate::message_amqp10::Parts {
            exchange: msg.exchange.as_str(),
            routing_key: msg.routing_key.as_str(),
            properties: &props,
            body: msg.body(),
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::stream::chunk::{Entries, Entry};
    use amq_protocol::protocol::BasicProperties;

    #[test]
    fn a_message_round_trips_through_a_chunk() {
        let props = BasicProperties::default().with_message_id("m-1".into());
        let raw = cookie_factory::gen_simple(
            amq_protocol::protocol::basic::gen_properties(&props),
            Vec::new(),
        )
        .expect("props");
        let mut data = raw.clone();
        data.extend_from_slice(b"body");
        let msg = Message::new("ex".into(), "rk".into(), data.into(), raw.len(), &props);
        let mut chunk = ChunkBuilder::default();
        assert!(push_message(&mut chunk, &msg, None));
        let (h, bytes) = chunk.finish(0, 0, 0);
        let bytes = Bytes::from(bytes);
        let Some(Ok(Entry::Simple(record))) = Entries::new(&bytes[h.data_start()..]).next() else {
            panic!("one simple entry");
        };
        let back = read_message(bytes.slice_ref(record)).expect("message");
        assert_eq!(back.exchange.as_str(), "ex");
        assert_eq!(back.routing_key.as_str(), "rk");
        assert_eq!(back.body(), b"body");
        assert_eq!(back.properties().message_id(), &Some("m-1".into()));
        assert!(read_message(Bytes::from_static(&[0x00, 0x53, 0x75])).is_none());
        assert!(read_message(Bytes::from_static(&[AMQP_091, 9])).is_none());
    }
}
