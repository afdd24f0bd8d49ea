//! Large message bodies: frames of 16 KiB or more are read from the socket straight into the
//! message and delivered by reference (vectored writes). Bodies arrive byte for byte however
//! the frames are cut into reads, multi-frame bodies and small negotiated frame sizes work both
//! ways, and malformed large frames get the same closes as small ones.

mod common;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{basic, channel, AMQPClass};
use common::raw::{content_header, frame, method, publish_to, Raw};
use common::*;
use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use std::time::Duration;

/// A body whose bytes depend on `seed` and their position.
fn body(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

/// basic.publish, content header and body frames of at most `frame_payload` bytes each.
fn publish_bytes(queue: &str, body: &[u8], frame_payload: usize) -> Vec<u8> {
    let mut bytes = publish_to(queue);
    bytes.extend(content_header(60, body.len() as u64));
    for part in body.chunks(frame_payload) {
        bytes.extend(frame(3, 1, part));
    }
    bytes
}

async fn declare(b: &TestBroker, queue: &str) -> (lapin::Connection, lapin::Channel) {
    let (c, ch) = b.channel().await;
    within(ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    (c, ch)
}

#[tokio::test]
async fn large_bodies_arrive_byte_for_byte_however_they_are_read() {
    let b = start().await;
    let (_c, ch) = declare(&b, "big").await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    // Below and at the direct threshold, a frame as large as frame_max allows (131,072), a
    // body over three frames, and a small one between them.
    let sizes = [16_383, 16_384, 65_536, 131_064, 300_000, 10, 70_000];
    let bodies: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| body(i as u8, n))
        .collect();
    for (i, m) in bodies.iter().enumerate() {
        let bytes = publish_bytes("big", m, 131_064);
        if i % 2 == 0 {
            r.send(&bytes).await;
        } else {
            // Trickled: the frames reach the broker in many reads of odd sizes.
            for piece in bytes.chunks(7_777) {
                r.send(piece).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
    let mut consumer = within(ch.basic_consume(
        "big".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    for (i, expected) in bodies.iter().enumerate() {
        let d = within(consumer.next())
            .await
            .expect("delivery")
            .expect("delivery ok");
        assert_eq!(d.data.len(), expected.len(), "message {i}");
        assert!(d.data == *expected, "message {i} differs");
    }
}

/// Publishes `body` to `queue` through lapin.
async fn publish(ch: &lapin::Channel, queue: &str, body: &[u8]) {
    within(ch.basic_publish(
        "".into(),
        queue.into(),
        Default::default(),
        body,
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
}

/// Reads the next delivered body: it must be `sent`, in frames that fit a frame_max of 4096.
async fn assert_body_in_small_frames(r: &mut Raw, sent: &[u8]) {
    let mut got = Vec::new();
    let mut frames = 0;
    while got.len() < sent.len() {
        match r.frame().await.expect("frame") {
            AMQPFrame::Body(1, part) => {
                assert!(part.len() <= 4096 - 8, "body frame of {}", part.len());
                frames += 1;
                got.extend_from_slice(&part);
            }
            AMQPFrame::Method(..) | AMQPFrame::Header(..) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(frames, sent.len().div_ceil(4096 - 8));
    assert!(got == sent);
}

#[tokio::test]
async fn large_deliveries_are_cut_to_a_small_frame_max() {
    let b = start().await;
    let (_c, ch) = declare(&b, "small-frames").await;
    let sent = body(7, 65_536);
    publish(&ch, "small-frames", &sent).await;
    let mut r = Raw::handshake_tuned(b.server.amqp_addr, 0, Some(4096)).await;
    r.send(&method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    ))
    .await;
    assert!(matches!(r.frame().await, Some(AMQPFrame::Method(1, _))));
    r.send(&method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Get(basic::Get {
            queue: "small-frames".into(),
            no_ack: true,
        })),
    ))
    .await;
    r.send(&method(
        1,
        AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
            queue: "small-frames".into(),
            consumer_tag: "t".into(),
            no_local: false,
            no_ack: true,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        })),
    ))
    .await;
    // basic.get takes the message (its body copied into the frames).
    assert_body_in_small_frames(&mut r, &sent).await;

    // The same message through a consumer (delivered by reference) on that connection.
    publish(&ch, "small-frames", &sent).await;
    assert_body_in_small_frames(&mut r, &sent).await;
}

#[tokio::test]
async fn bad_frame_end_of_a_large_body_is_501() {
    let b = start().await;
    let _q = declare(&b, "q").await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    let mut bytes = publish_bytes("q", &body(1, 65_536), 131_064);
    let last = bytes.len() - 1;
    bytes[last] = 0;
    // The frame's header first, so the rest is read into the message.
    r.send(&bytes[..bytes.len() - 30_000]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    r.send(&bytes[bytes.len() - 30_000..]).await;
    assert_eq!(r.connection_close_code().await, Some(501));
    let (_c, ch) = b.channel().await;
    let get = within(ch.basic_get("q".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get");
    assert!(get.is_none(), "the broken message was not enqueued");
}

#[tokio::test]
async fn large_body_frame_beyond_the_declared_size_is_501() {
    let b = start().await;
    let _q = declare(&b, "q").await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    let mut bytes = publish_to("q");
    bytes.extend(content_header(60, 20_000));
    bytes.extend(frame(3, 1, &body(2, 40_000)));
    r.send(&bytes).await;
    assert_eq!(r.connection_close_code().await, Some(501));
}

#[tokio::test]
async fn large_body_frame_without_a_publish_is_505() {
    let b = start().await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    r.send(&frame(3, 1, &body(3, 50_000))).await;
    assert_eq!(r.connection_close_code().await, Some(505));
}
