//! What a stream protocol client sends, decoded from a frame body. Bodies are read with
//! [`Reader`], so a short or forged frame is an error, never a panic; message bodies share the
//! frame's buffer (a publish is not copied before it reaches the log).

use super::frame::{key, Malformed, Reader};
use crate::store::stream::OffsetSpec;
use bytes::Bytes;

/// One message of a publish: its publishing id, the AMQP 1.0 message, and (version 2) its
/// filter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub id: u64,
    pub message: Bytes,
    pub filter: Option<String>,
}

/// A decoded client frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    PeerProperties {
        corr: u32,
        properties: Vec<(String, String)>,
    },
    SaslHandshake {
        corr: u32,
    },
    SaslAuthenticate {
        corr: u32,
        mechanism: String,
        response: Bytes,
    },
    Tune {
        frame_max: u32,
        heartbeat: u32,
    },
    Open {
        corr: u32,
        vhost: String,
    },
    Close {
        corr: u32,
        code: u16,
        reason: String,
    },
    Heartbeat,
    DeclarePublisher {
        corr: u32,
        id: u8,
        reference: Option<String>,
        stream: String,
    },
    Publish {
        publisher: u8,
        messages: Vec<Published>,
    },
    QueryPublisherSequence {
        corr: u32,
        reference: String,
        stream: String,
    },
    DeletePublisher {
        corr: u32,
        id: u8,
    },
    Subscribe {
        corr: u32,
        id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: Vec<(String, String)>,
    },
    Credit {
        id: u8,
        credit: u16,
    },
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    QueryOffset {
        corr: u32,
        reference: String,
        stream: String,
    },
    Unsubscribe {
        corr: u32,
        id: u8,
    },
    Create {
        corr: u32,
        stream: String,
        arguments: Vec<(String, String)>,
    },
    Delete {
        corr: u32,
        stream: String,
    },
    Metadata {
        corr: u32,
        streams: Vec<String>,
    },
    /// The client's commands with their (key, min version, max version).
    ExchangeCommandVersions {
        corr: u32,
        versions: Vec<(u16, u16, u16)>,
    },
    StreamStats {
        corr: u32,
        stream: String,
    },
    CreateSuperStream {
        corr: u32,
        name: String,
        partitions: Vec<String>,
        binding_keys: Vec<String>,
        arguments: Vec<(String, String)>,
    },
    DeleteSuperStream {
        corr: u32,
        name: String,
    },
    Partitions {
        corr: u32,
        super_stream: String,
    },
    Route {
        corr: u32,
        routing_key: String,
        super_stream: String,
    },
    ResolveOffsetSpec {
        corr: u32,
        stream: String,
        offset: OffsetSpec,
    },
    /// The client's answer to a `ConsumerUpdate`: the offset an activated single active
    /// consumer reads from (`None`: the one it subscribed with).
    ConsumerUpdateResponse {
        corr: u32,
        code: u16,
        offset: Option<OffsetSpec>,
    },
    /// Another response the client sent (to the server's close).
    Response {
        key: u16,
    },
    /// A key this server does not handle.
    Unknown {
        key: u16,
        version: u16,
    },
}

impl Request {
    /// Decodes a frame body.
    pub fn decode(body: Bytes) -> Result<Request, Malformed> {
        let mut r = Reader::new(body);
        let k = r.u16()?;
        let version = r.u16()?;
        if k == key::CONSUMER_UPDATE | key::RESPONSE {
            let corr = r.u32()?;
            let code = r.u16()?;
            // Offset type 0 (none) has no value; a client that sent nothing means none too.
            let offset = match r.remaining() {
                0 => None,
                _ => opt_offset_spec(&mut r)?,
            };
            return Ok(Request::ConsumerUpdateResponse { corr, code, offset });
        }
        if k & key::RESPONSE != 0 {
            return Ok(Request::Response {
                key: k & !key::RESPONSE,
            });
        }
        let req = match k {
            key::PEER_PROPERTIES => Request::PeerProperties {
                corr: r.u32()?,
                properties: r.properties()?,
            },
            key::SASL_HANDSHAKE => Request::SaslHandshake { corr: r.u32()? },
            key::SASL_AUTHENTICATE => Request::SaslAuthenticate {
                corr: r.u32()?,
                mechanism: r.string()?,
                response: r.bytes()?,
            },
            key::TUNE => Request::Tune {
                frame_max: r.u32()?,
                heartbeat: r.u32()?,
            },
            key::OPEN => Request::Open {
                corr: r.u32()?,
                vhost: r.string()?,
            },
            key::CLOSE => Request::Close {
                corr: r.u32()?,
                code: r.u16()?,
                reason: r.string()?,
            },
            key::HEARTBEAT => Request::Heartbeat,
            key::DECLARE_PUBLISHER => Request::DeclarePublisher {
                corr: r.u32()?,
                id: r.u8()?,
                reference: r.opt_string()?.filter(|s| !s.is_empty()),
                stream: r.string()?,
            },
            key::PUBLISH => publish(&mut r, version)?,
            key::QUERY_PUBLISHER_SEQUENCE => Request::QueryPublisherSequence {
                corr: r.u32()?,
                reference: r.string()?,
                stream: r.string()?,
            },
            key::DELETE_PUBLISHER => Request::DeletePublisher {
                corr: r.u32()?,
                id: r.u8()?,
            },
            key::SUBSCRIBE => Request::Subscribe {
                corr: r.u32()?,
                id: r.u8()?,
                stream: r.string()?,
                offset: offset_spec(&mut r)?,
                credit: r.u16()?,
                // Version 1 clients may leave the properties out.
                properties: if r.remaining() == 0 {
                    Vec::new()
                } else {
                    r.properties()?
                },
            },
            key::CREDIT => Request::Credit {
                id: r.u8()?,
                credit: r.u16()?,
            },
            key::STORE_OFFSET => Request::StoreOffset {
                reference: r.string()?,
                stream: r.string()?,
                offset: r.u64()?,
            },
            key::QUERY_OFFSET => Request::QueryOffset {
                corr: r.u32()?,
                reference: r.string()?,
                stream: r.string()?,
            },
            key::UNSUBSCRIBE => Request::Unsubscribe {
                corr: r.u32()?,
                id: r.u8()?,
            },
            key::CREATE => Request::Create {
                corr: r.u32()?,
                stream: r.string()?,
                arguments: r.properties()?,
            },
            key::DELETE => Request::Delete {
                corr: r.u32()?,
                stream: r.string()?,
            },
            key::METADATA => Request::Metadata {
                corr: r.u32()?,
                streams: r.strings()?,
            },
            key::CREATE_SUPER_STREAM => Request::CreateSuperStream {
                corr: r.u32()?,
                name: r.string()?,
                partitions: r.strings()?,
                binding_keys: r.strings()?,
                arguments: r.properties()?,
            },
            key::DELETE_SUPER_STREAM => Request::DeleteSuperStream {
                corr: r.u32()?,
                name: r.string()?,
            },
            key::PARTITIONS => Request::Partitions {
                corr: r.u32()?,
                super_stream: r.string()?,
            },
            key::ROUTE => Request::Route {
                corr: r.u32()?,
                routing_key: r.string()?,
                super_stream: r.string()?,
            },
            key::RESOLVE_OFFSET_SPEC => {
                let corr = r.u32()?;
                let stream = r.string()?;
                let offset = offset_spec(&mut r)?;
                // Its properties (chunk selector, filters) change nothing for this log.
                let _ = r.properties()?;
                Request::ResolveOffsetSpec {
                    corr,
                    stream,
                    offset,
                }
            }
            key::EXCHANGE_COMMAND_VERSIONS => {
                let corr = r.u32()?;
                // Some clients send no list at all.
                let n = if r.remaining() == 0 { 0 } else { r.count(6)? };
                let mut versions = Vec::with_capacity(n);
                for _ in 0..n {
                    versions.push((r.u16()?, r.u16()?, r.u16()?));
                }
                Request::ExchangeCommandVersions { corr, versions }
            }
            key::STREAM_STATS => Request::StreamStats {
                corr: r.u32()?,
                stream: r.string()?,
            },
            other => Request::Unknown {
                key: other,
                version,
            },
        };
        Ok(req)
    }
}

fn publish(r: &mut Reader, version: u16) -> Result<Request, Malformed> {
    let publisher = r.u8()?;
    let n = r.count(12)?;
    let mut messages = Vec::with_capacity(n);
    for _ in 0..n {
        let id = r.u64()?;
        let filter = if version >= 2 { r.opt_string()? } else { None };
        messages.push(Published {
            id,
            message: r.bytes()?,
            filter,
        });
    }
    Ok(Request::Publish {
        publisher,
        messages,
    })
}

fn offset_spec(r: &mut Reader) -> Result<OffsetSpec, Malformed> {
    opt_offset_spec(r)?.ok_or(Malformed)
}

/// An offset specification where type 0 means none.
fn opt_offset_spec(r: &mut Reader) -> Result<Option<OffsetSpec>, Malformed> {
    Ok(Some(match r.u16()? {
        0 => return Ok(None),
        1 => OffsetSpec::First,
        2 => OffsetSpec::Last,
        3 => OffsetSpec::Next,
        4 => OffsetSpec::Offset(r.u64()?),
        5 => OffsetSpec::Timestamp(r.i64()?),
        _ => return Err(Malformed),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::frame::Frame;

    fn body(f: Frame) -> Bytes {
        f.finish().slice(4..)
    }

    #[test]
    fn decodes_publishes_of_both_versions_and_subscribes() {
        let v1 = Frame::command(key::PUBLISH, 1)
            .u8(3)
            .u32(2)
            .u64(10)
            .bytes(b"a")
            .u64(11)
            .bytes(b"bc");
        let Ok(Request::Publish {
            publisher,
            messages,
        }) = Request::decode(body(v1))
        else {
            panic!("a publish");
        };
        assert_eq!(publisher, 3);
        assert_eq!(messages[1].id, 11);
        assert_eq!(&messages[1].message[..], b"bc");
        let v2 = Frame::command(key::PUBLISH, 2)
            .u8(1)
            .u32(1)
            .u64(5)
            .string("eu")
            .bytes(b"m");
        let Ok(Request::Publish { messages, .. }) = Request::decode(body(v2)) else {
            panic!("a publish");
        };
        assert_eq!(messages[0].filter.as_deref(), Some("eu"));
        let sub = Frame::command(key::SUBSCRIBE, 1)
            .u32(9)
            .u8(0)
            .string("s")
            .u16(4)
            .u64(42)
            .u16(10)
            .u32(0);
        assert_eq!(
            Request::decode(body(sub)),
            Ok(Request::Subscribe {
                corr: 9,
                id: 0,
                stream: "s".into(),
                offset: OffsetSpec::Offset(42),
                credit: 10,
                properties: vec![],
            })
        );
        // A publish that claims more messages than it carries, an unknown offset type.
        let forged = Frame::command(key::PUBLISH, 1).u8(0).u32(1_000_000);
        assert_eq!(Request::decode(body(forged)), Err(Malformed));
        let bad = Frame::command(key::SUBSCRIBE, 1)
            .u32(1)
            .u8(0)
            .string("s")
            .u16(9);
        assert_eq!(Request::decode(body(bad)), Err(Malformed));
        let answer = Frame::command(key::CONSUMER_UPDATE | key::RESPONSE, 1)
            .u32(7)
            .u16(1)
            .u16(4)
            .u64(12);
        assert_eq!(
            Request::decode(body(answer)),
            Ok(Request::ConsumerUpdateResponse {
                corr: 7,
                code: 1,
                offset: Some(OffsetSpec::Offset(12)),
            })
        );
        let none = Frame::command(key::CONSUMER_UPDATE | key::RESPONSE, 1)
            .u32(8)
            .u16(1)
            .u16(0);
        assert!(matches!(
            Request::decode(body(none)),
            Ok(Request::ConsumerUpdateResponse { offset: None, .. })
        ));
        assert_eq!(
            Request::decode(body(Frame::command(0x0042, 1).u32(1))),
            Ok(Request::Unknown {
                key: 0x42,
                version: 1
            })
        );
    }
}
