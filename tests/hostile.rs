//! Hostile input at scale: deeply nested tables, lengths that point past the frame, a slow-loris
//! of half-open sockets, random bytes after a good handshake and randomly mutated valid frames.
//! Each case asserts how the broker answered (the close codes RabbitMQ uses, or a socket close,
//! never 541 INTERNAL_ERROR) and that a normal client is still served afterwards.

mod common;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{channel, connection, AMQPClass};
use common::raw::{frame, publish_to, raw_method, short_str, Raw};
use common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connection close codes a broker may answer garbage with (RabbitMQ's set).
const GARBAGE_CODES: [u16; 7] = [501, 502, 503, 504, 505, 530, 540];

/// Another client can still connect and work.
async fn still_serving(b: &TestBroker) {
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "alive".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("broker still serves");
}

/// A table holding one entry whose value nests `depth` tables.
fn nested_table(depth: usize) -> Vec<u8> {
    let mut value = vec![b'V'];
    for _ in 0..depth {
        let mut inner = short_str(b"a");
        inner.extend_from_slice(&value);
        value = vec![b'F'];
        value.extend_from_slice(&(inner.len() as u32).to_be_bytes());
        value.extend(inner);
    }
    let mut entry = short_str(b"a");
    entry.extend(value);
    let mut t = (entry.len() as u32).to_be_bytes().to_vec();
    t.extend(entry);
    t
}

fn queue_declare_with(table: &[u8]) -> Vec<u8> {
    let mut args = vec![0, 0];
    args.extend(short_str(b"q"));
    args.push(0);
    args.extend_from_slice(table);
    raw_method(1, 50, 10, &args)
}

/// Sends `bytes`, half-closes, and reads until the broker closes the socket. Returns the
/// connection.close code if one came, and panics on a 541 channel or connection close.
async fn outcome(r: &mut Raw, bytes: &[u8]) -> Option<u16> {
    r.send(bytes).await;
    let _ = r.sock.shutdown().await;
    let mut code = None;
    while let Some(f) = r.frame().await {
        match f {
            AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => {
                assert_ne!(c.reply_code, 541, "internal error: {}", c.reply_text);
                code = Some(c.reply_code);
            }
            AMQPFrame::Method(_, AMQPClass::Channel(channel::AMQPMethod::Close(c))) => {
                assert_ne!(c.reply_code, 541, "internal error: {}", c.reply_text);
            }
            _ => {}
        }
    }
    code
}

#[tokio::test]
async fn deeply_nested_tables_are_501_not_a_stack_overflow() {
    let b = start().await;
    for depth in [200, 20_000] {
        let mut r = Raw::open(b.server.amqp_addr).await;
        assert_eq!(
            outcome(&mut r, &queue_declare_with(&nested_table(depth))).await,
            Some(501)
        );
    }
    // The same nesting in a message's headers.
    let mut props = vec![0x20, 0x00];
    props.extend(nested_table(20_000));
    let mut header = 60u16.to_be_bytes().to_vec();
    header.extend_from_slice(&[0, 0]);
    header.extend_from_slice(&0u64.to_be_bytes());
    header.extend(props);
    let mut bytes = publish_to("q");
    bytes.extend(frame(2, 1, &header));
    let mut r = Raw::open(b.server.amqp_addr).await;
    assert_eq!(outcome(&mut r, &bytes).await, Some(501));
    // Shallow nesting is still fine.
    let mut r = Raw::open(b.server.amqp_addr).await;
    r.send(&queue_declare_with(&nested_table(8))).await;
    assert!(matches!(
        r.frame().await,
        Some(AMQPFrame::Method(1, AMQPClass::Queue(_)))
    ));
    still_serving(&b).await;
}

#[tokio::test]
async fn field_table_length_past_the_frame_is_501() {
    let b = start().await;
    let mut table = nested_table(1);
    table[..4].copy_from_slice(&1_000_000u32.to_be_bytes());
    let mut r = Raw::open(b.server.amqp_addr).await;
    assert_eq!(
        outcome(&mut r, &queue_declare_with(&table)).await,
        Some(501)
    );
    still_serving(&b).await;
}

#[tokio::test]
async fn a_slow_loris_of_1000_half_open_sockets_does_not_stop_real_clients() {
    let b = start_with(|c| c.handshake_timeout = 2).await;
    let mut lorises = Vec::with_capacity(1000);
    for i in 0..1000 {
        let mut s = TcpStream::connect(b.server.amqp_addr)
            .await
            .expect("connect");
        // Half stop inside the protocol header, half after it (waiting in connection.start).
        let part: &[u8] = if i % 2 == 0 {
            b"AMQ"
        } else {
            b"AMQP\x00\x00\x09\x01"
        };
        s.write_all(part).await.expect("write");
        lorises.push(s);
    }
    still_serving(&b).await;
    // The handshake timeout closes every one of them.
    for mut s in lorises {
        let mut sink = [0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match s.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a half-open socket was left open");
    }
    still_serving(&b).await;
}

#[tokio::test]
async fn random_bytes_after_a_good_handshake() {
    let b = start().await;
    let mut closes = 0;
    for seed in 0..64u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes = vec![0u8; rng.random_range(1..512)];
        rng.fill(&mut bytes[..]);
        let mut r = Raw::open(b.server.amqp_addr).await;
        if let Some(code) = outcome(&mut r, &bytes).await {
            assert!(GARBAGE_CODES.contains(&code), "seed {seed}: close {code}");
            closes += 1;
        }
    }
    // Random bytes are almost never a valid frame: nearly every run ends in a close.
    assert!(
        closes >= 48,
        "only {closes} of 64 runs were answered with a close"
    );
    still_serving(&b).await;
}

/// A valid session on channel 1: declare with arguments, publish with headers, get, consume.
fn valid_session() -> Vec<u8> {
    let mut args = short_str(b"x-max-length");
    args.push(b'I');
    args.extend_from_slice(&10i32.to_be_bytes());
    let mut table = (args.len() as u32).to_be_bytes().to_vec();
    table.extend(args);
    let mut bytes = queue_declare_with(&table);
    let mut props = vec![0xB0, 0x00]; // content-type, headers, delivery-mode
    props.extend(short_str(b"text/plain"));
    props.extend(nested_table(2));
    props.push(2);
    let mut header = 60u16.to_be_bytes().to_vec();
    header.extend_from_slice(&[0, 0]);
    header.extend_from_slice(&5u64.to_be_bytes());
    header.extend(props);
    bytes.extend(publish_to("q"));
    bytes.extend(frame(2, 1, &header));
    bytes.extend(frame(3, 1, b"hello"));
    let mut get = vec![0, 0];
    get.extend(short_str(b"q"));
    get.push(0);
    bytes.extend(raw_method(1, 60, 70, &get));
    let mut consume = vec![0, 0];
    consume.extend(short_str(b"q"));
    consume.extend(short_str(b"tag"));
    consume.push(0);
    consume.extend_from_slice(&[0, 0, 0, 0]);
    bytes.extend(raw_method(1, 60, 20, &consume));
    bytes
}

#[tokio::test]
async fn randomly_mutated_valid_frames() {
    let b = start().await;
    let session = valid_session();
    let mut r = Raw::open(b.server.amqp_addr).await;
    assert_eq!(
        outcome(&mut r, &session).await,
        None,
        "the unmutated session is valid"
    );
    for seed in 0..200u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut bytes = session.clone();
        for _ in 0..rng.random_range(1..=4) {
            let at = rng.random_range(0..bytes.len());
            match rng.random_range(0..4) {
                0 => bytes[at] = rng.random(),
                1 => bytes[at] ^= 1 << rng.random_range(0..8),
                2 => bytes.truncate(at.max(1)),
                _ => bytes.insert(at, rng.random()),
            }
        }
        let mut r = Raw::open(b.server.amqp_addr).await;
        if let Some(code) = outcome(&mut r, &bytes).await {
            assert!(GARBAGE_CODES.contains(&code), "seed {seed}: close {code}");
        }
    }
    still_serving(&b).await;
}

#[tokio::test]
async fn a_body_frame_over_frame_max_is_501() {
    let b = start().await;
    let mut header = 60u16.to_be_bytes().to_vec();
    header.extend_from_slice(&[0, 0]);
    header.extend_from_slice(&200_000u64.to_be_bytes());
    header.extend_from_slice(&[0, 0]);
    let mut bytes = publish_to("q");
    bytes.extend(frame(2, 1, &header));
    // A payload one byte over the negotiated frame_max of 131072 (RabbitMQ allows the
    // payload itself to be frame_max bytes), sent in full.
    bytes.extend(frame(3, 1, &vec![b'x'; 131_072 + 1]));
    let mut r = Raw::open(b.server.amqp_addr).await;
    assert_eq!(outcome(&mut r, &bytes).await, Some(501));
    still_serving(&b).await;
}

#[tokio::test]
async fn an_http_request_on_the_amqp_port_gets_the_amqp_header_and_a_close() {
    let b = start().await;
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    assert_eq!(
        r.read_exact_bytes(8).await.as_deref(),
        Some(&b"AMQP\x00\x00\x09\x01"[..])
    );
    assert!(r.closed_by_peer().await);
    still_serving(&b).await;
}

#[tokio::test]
async fn half_open_http_requests_are_dropped_after_the_handshake_timeout() {
    let b = start_with(|c| c.handshake_timeout = 1).await;
    for addr in [b.server.http_addr, b.server.metrics_addr] {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\n")
            .await
            .expect("partial request");
        let mut sink = [0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match s.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "a half-sent request was kept open on {addr}"
        );
    }
    let r = common::http::request(
        b.server.http_addr,
        "GET",
        "/api/overview",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
}
