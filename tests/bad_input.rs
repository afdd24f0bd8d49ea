//! Hostile and malformed input on a raw socket: each case gets the connection close RabbitMQ
//! gives (501, 503, 504, 505, 540...), never a hang or a crash, and the broker keeps serving
//! other clients afterwards.

mod common;

use amq_protocol::protocol::{basic, AMQPClass};
use common::raw::{content_header, frame, method, publish_to, raw_method, short_str, Raw};
use common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

/// Sends `bytes` on an opened connection and returns the connection.close code.
async fn close_code_after(b: &TestBroker, bytes: &[u8]) -> Option<u16> {
    let mut r = Raw::open(b.server.amqp_addr).await;
    r.send(bytes).await;
    let code = r.connection_close_code().await;
    still_serving(b).await;
    code
}

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

#[tokio::test]
async fn oversize_frame_is_501_without_allocating_it() {
    let b = start().await;
    let mut bytes = vec![3u8, 0, 1, 0x7f, 0xff, 0xff, 0xff];
    bytes.extend_from_slice(b"xxxxxxxx");
    assert_eq!(close_code_after(&b, &bytes).await, Some(501));
}

#[tokio::test]
async fn bad_frame_end_is_501() {
    let b = start().await;
    let mut bytes = frame(1, 1, &[0, 20, 0, 10, 0]);
    let last = bytes.len() - 1;
    bytes[last] = 0;
    assert_eq!(close_code_after(&b, &bytes).await, Some(501));
}

#[tokio::test]
async fn unknown_frame_type_is_501() {
    let b = start().await;
    assert_eq!(close_code_after(&b, &frame(9, 1, b"abc")).await, Some(501));
}

#[tokio::test]
async fn method_on_unopened_channel_is_504() {
    let b = start().await;
    let mut args = vec![0, 0];
    args.extend(short_str(b"q"));
    args.extend_from_slice(&[0, 0, 0, 0, 0]);
    assert_eq!(
        close_code_after(&b, &raw_method(5, 50, 10, &args)).await,
        Some(504)
    );
}

#[tokio::test]
async fn content_header_without_method_is_505() {
    let b = start().await;
    assert_eq!(
        close_code_after(&b, &content_header(60, 3)).await,
        Some(505)
    );
    assert_eq!(close_code_after(&b, &frame(3, 1, b"abc")).await, Some(505));
}

#[tokio::test]
async fn method_instead_of_content_header_is_505() {
    let b = start().await;
    let mut bytes = publish_to("q");
    bytes.extend(publish_to("q"));
    assert_eq!(close_code_after(&b, &bytes).await, Some(505));
}

#[tokio::test]
async fn content_header_of_another_class_is_505() {
    let b = start().await;
    let mut bytes = publish_to("q");
    bytes.extend(content_header(50, 0));
    assert_eq!(close_code_after(&b, &bytes).await, Some(505));
}

#[tokio::test]
async fn body_longer_than_declared_is_501() {
    let b = start().await;
    let mut bytes = publish_to("q");
    bytes.extend(content_header(60, 3));
    bytes.extend(frame(3, 1, b"abcdef"));
    assert_eq!(close_code_after(&b, &bytes).await, Some(501));
}

#[tokio::test]
async fn truncated_arguments_are_501() {
    let b = start().await;
    assert_eq!(
        close_code_after(&b, &raw_method(1, 50, 10, &[0, 0, 3, b'a', b'b'])).await,
        Some(501)
    );
}

#[tokio::test]
async fn invalid_field_table_type_is_501() {
    let b = start().await;
    let mut args = vec![0, 0];
    args.extend(short_str(b"q"));
    args.push(0);
    let mut table = short_str(b"x");
    table.extend_from_slice(b"Z\0\0\0\0");
    args.extend_from_slice(&(table.len() as u32).to_be_bytes());
    args.extend(table);
    assert_eq!(
        close_code_after(&b, &raw_method(1, 50, 10, &args)).await,
        Some(501)
    );
}

#[tokio::test]
async fn invalid_utf8_short_string_is_501() {
    let b = start().await;
    let mut args = vec![0, 0];
    args.extend(short_str(&[0xff, 0xfe]));
    args.extend_from_slice(&[0, 0, 0, 0, 0]);
    assert_eq!(
        close_code_after(&b, &raw_method(1, 50, 10, &args)).await,
        Some(501)
    );
}

#[tokio::test]
async fn unknown_method_is_503() {
    let b = start().await;
    assert_eq!(
        close_code_after(&b, &raw_method(1, 60, 99, &[])).await,
        Some(503)
    );
    assert_eq!(
        close_code_after(&b, &raw_method(1, 99, 10, &[])).await,
        Some(503)
    );
}

#[tokio::test]
async fn heartbeat_on_a_channel_is_505() {
    let b = start().await;
    assert_eq!(close_code_after(&b, &frame(8, 1, &[])).await, Some(505));
}

#[tokio::test]
async fn wrong_channel_for_the_method_class() {
    let b = start().await;
    // connection.close on channel 1: 503; channel.open on channel 0: 504.
    let mut close = 200u16.to_be_bytes().to_vec();
    close.extend(short_str(b""));
    close.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        close_code_after(&b, &raw_method(1, 10, 50, &close)).await,
        Some(503)
    );
    assert_eq!(
        close_code_after(&b, &raw_method(0, 20, 10, &short_str(b""))).await,
        Some(504)
    );
}

#[tokio::test]
async fn qos_prefetch_size_and_immediate_are_540() {
    let b = start().await;
    let qos = method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Qos(basic::Qos {
            prefetch_count: 1,
            global: false,
        })),
    );
    // Patch in a non-zero prefetch_size (the 4 bytes after class and method ids).
    let mut patched = qos.clone();
    patched[11..15].copy_from_slice(&10u32.to_be_bytes());
    assert_eq!(close_code_after(&b, &patched).await, Some(540));
    let mut immediate = publish_to("q");
    let flags = immediate.len() - 2;
    immediate[flags] = 2;
    immediate.extend(content_header(60, 0));
    assert_eq!(close_code_after(&b, &immediate).await, Some(540));
}

#[tokio::test]
async fn garbage_before_the_handshake_is_answered_and_closed() {
    let b = start().await;
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(&[0xff; 64]).await;
    assert_eq!(
        r.read_exact_bytes(8).await.as_deref(),
        Some(&b"AMQP\x00\x00\x09\x01"[..])
    );
    assert!(r.closed_by_peer().await);
    still_serving(&b).await;
}

#[tokio::test]
async fn half_open_handshake_times_out() {
    let b = start_with(|c| c.handshake_timeout = 1).await;
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(b"AMQP").await;
    assert!(r.closed_by_peer().await);
    still_serving(&b).await;
}

#[tokio::test]
async fn header_tables_pass_through_byte_for_byte() {
    let b = start().await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    let mut declare = vec![0, 0];
    declare.extend(short_str(b"q"));
    declare.extend_from_slice(&[0, 0, 0, 0, 0]);
    r.send(&raw_method(1, 50, 10, &declare)).await;
    r.frame().await;
    // Properties: flags with only `headers` (bit 13) set, then a table whose keys are not in
    // sorted order and hold types a re-encoder might normalise ('l' 64-bit, 'x' byte array).
    let mut table = short_str(b"zeta");
    table.push(b'l');
    table.extend_from_slice(&5i64.to_be_bytes());
    table.extend(short_str(b"alpha"));
    table.push(b'x');
    table.extend_from_slice(&3u32.to_be_bytes());
    table.extend_from_slice(b"abc");
    let mut props = (1u16 << 13).to_be_bytes().to_vec();
    props.extend_from_slice(&(table.len() as u32).to_be_bytes());
    props.extend(table);
    let mut header = 60u16.to_be_bytes().to_vec();
    header.extend_from_slice(&[0, 0]);
    header.extend_from_slice(&4u64.to_be_bytes());
    header.extend_from_slice(&props);
    let mut bytes = publish_to("q");
    bytes.extend(frame(2, 1, &header));
    bytes.extend(frame(3, 1, b"body"));
    let mut get = vec![0, 0];
    get.extend(short_str(b"q"));
    get.push(1);
    bytes.extend(raw_method(1, 60, 70, &get));
    r.send(&bytes).await;
    match r.frame().await {
        Some(amq_protocol::frame::AMQPFrame::Method(
            1,
            AMQPClass::Basic(basic::AMQPMethod::GetOk(_)),
        )) => {}
        other => panic!("expected get-ok, got {other:?}"),
    }
    // The content header frame as delivered: 7-byte frame header, then class, weight, size.
    let head = r.read_exact_bytes(7).await.expect("header frame");
    assert_eq!(head[0], 2);
    let len = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
    let payload = r.read_exact_bytes(len + 1).await.expect("payload");
    assert_eq!(
        &payload[12..len],
        &props[..],
        "properties changed in transit"
    );
}
