//! Closing a connection never resets the socket under the client (issue #16, item 1): after
//! close-ok, after a connection error and after a refused login the broker half-closes and
//! reads what the client still had in flight until the client closes, so the client reads the
//! close (or close-ok) and then a clean EOF, never ECONNRESET, and its writes never fail with
//! EPIPE.

mod common;

use amq_protocol::frame::{parsing::parse_frame, AMQPFrame};
use amq_protocol::protocol::{connection, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable};
use common::raw::{content_header, frame, method, publish_to, Raw};
use common::start;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `n` publishes of a 10-byte message on channel 1 to queue `q`.
fn publishes(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.extend(publish_to("q"));
        v.extend(content_header(60, 10));
        v.extend(frame(3, 1, b"0123456789"));
    }
    v
}

/// 16 MiB of body frames on channel 1: more than the socket buffers hold, so a client sending
/// them is still writing when the broker has read the frame before them.
fn trailing() -> Vec<u8> {
    let one = frame(3, 1, &[7u8; 65536]);
    one.repeat(256)
}

fn close() -> Vec<u8> {
    method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    )
}

fn close_ok() -> Vec<u8> {
    method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
    )
}

/// Writes `bytes` while reading everything the broker sends until EOF; then the frames read.
/// Fails the test if the write or the read ends in an error (a reset) instead.
async fn exchange(sock: TcpStream, bytes: Vec<u8>, then: Option<Vec<u8>>) -> Vec<AMQPFrame> {
    let (mut rd, mut wr) = sock.into_split();
    let writer = tokio::spawn(async move {
        wr.write_all(&bytes).await?;
        if let Some(t) = then {
            wr.write_all(&t).await?;
        }
        // Done sending: the broker is waiting for us to close.
        wr.shutdown().await?;
        Ok::<_, std::io::Error>(wr)
    });
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), rd.read_to_end(&mut got)).await;
    let read = read.expect("the broker closes within 10 s");
    assert!(read.is_ok(), "reading ended in {read:?}, not EOF");
    let written = writer.await.expect("writer task");
    assert!(written.is_ok(), "writing failed: {:?}", written.err());
    let mut frames = Vec::new();
    let mut rest = got.as_slice();
    while let Ok((r, f)) = parse_frame(rest) {
        frames.push(f);
        rest = r;
    }
    frames
}

fn is_close_ok(f: &AMQPFrame) -> bool {
    matches!(
        f,
        AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)))
    )
}

fn close_code(f: &AMQPFrame) -> Option<u16> {
    match f {
        AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(c))) => {
            Some(c.reply_code)
        }
        _ => None,
    }
}

#[tokio::test]
async fn frames_written_after_close_do_not_reset_the_socket() {
    let b = start().await;
    let r = Raw::open(b.server.amqp_addr).await;
    // A client whose channel-1 frames are still going out behind its close on channel 0.
    let mut bytes = publishes(10);
    bytes.extend(close());
    bytes.extend(trailing());
    let frames = exchange(r.sock, bytes, None).await;
    assert!(frames.iter().any(is_close_ok), "close-ok read: {frames:?}");
}

#[tokio::test]
async fn pipelined_publishes_then_close_get_close_ok_and_eof() {
    let b = start().await;
    let r = Raw::open(b.server.amqp_addr).await;
    let mut bytes = publishes(2000);
    bytes.extend(close());
    let frames = exchange(r.sock, bytes, None).await;
    assert!(frames.last().is_some_and(is_close_ok), "{frames:?}");
    let q = b.server.broker.vhost("/").expect("vhost");
    // The publishes before the close were all taken (the default exchange drops them: no
    // queue q), and the connection is gone from the registry.
    assert!(q.queue("q").is_err());
    assert!(b.server.broker.connections.list().is_empty());
}

#[tokio::test]
async fn a_connection_error_is_read_by_a_client_still_sending() {
    let b = start().await;
    let r = Raw::open(b.server.amqp_addr).await;
    // A frame error (bad frame end) and then a stream of frames the broker must discard.
    let mut bad = frame(3, 1, b"xyz");
    let end = bad.len() - 1;
    bad[end] = 0x00;
    let mut bytes = publishes(10);
    bytes.extend(bad);
    bytes.extend(trailing());
    let frames = exchange(r.sock, bytes, Some(close_ok())).await;
    assert_eq!(frames.iter().find_map(close_code), Some(501), "{frames:?}");
}

#[tokio::test]
async fn a_server_close_waits_for_close_ok_while_the_client_sends() {
    let b = start().await;
    let r = Raw::open(b.server.amqp_addr).await;
    // A hard error (a connection method on channel 1: 503), then more publishes, then close-ok.
    let mut bytes = method(
        1,
        AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        })),
    );
    bytes.extend(publishes(3000));
    bytes.extend(trailing());
    let frames = exchange(r.sock, bytes, Some(close_ok())).await;
    assert_eq!(frames.iter().find_map(close_code), Some(503), "{frames:?}");
}

#[tokio::test]
async fn a_refused_login_is_read_before_eof_by_a_pipelining_client() {
    let b = start().await;
    let sock = TcpStream::connect(b.server.amqp_addr)
        .await
        .expect("connect");
    // Header, a wrong password, and everything a pipelining client sends behind it.
    let mut bytes = b"AMQP\x00\x00\x09\x01".to_vec();
    let mut caps = FieldTable::default();
    caps.insert(
        "authentication_failure_close".into(),
        AMQPValue::Boolean(true),
    );
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    bytes.extend(method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: props,
            mechanism: "PLAIN".into(),
            response: "\0guest\0wrong".into(),
            locale: "en_US".into(),
        })),
    ));
    bytes.extend(method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: 2047,
            frame_max: 131072,
            heartbeat: 0,
        })),
    ));
    bytes.extend(method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        })),
    ));
    bytes.extend(trailing());
    let frames = exchange(sock, bytes, Some(close_ok())).await;
    assert_eq!(frames.iter().find_map(close_code), Some(403), "{frames:?}");
}
