//! Wire behaviours real clients' suites found different from RabbitMQ (issue #16, items 2-6):
//! channel_max counts channels, the empty queue name means the channel's last declared queue,
//! a frame payload of exactly frame_max is accepted, errors name the method that caused them,
//! and reply texts longer than a short string are cut instead of killing the connection.

mod common;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{channel, connection, AMQPClass};
use common::raw::{content_header, frame, method, publish_to, raw_method, short_str, Raw};
use common::{assert_code, start, start_with, within};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, ExchangeKind};

fn open(ch: u16) -> Vec<u8> {
    method(
        ch,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    )
}

fn is_open_ok(f: &Option<AMQPFrame>, ch: u16) -> bool {
    matches!(f, Some(AMQPFrame::Method(c, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)))) if *c == ch)
}

/// The next connection.close: (code, text, class, method).
async fn connection_close(r: &mut Raw) -> (u16, String, u16, u16) {
    loop {
        match r.frame().await {
            Some(AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Close(c)))) => {
                return (
                    c.reply_code,
                    c.reply_text.to_string(),
                    c.class_id,
                    c.method_id,
                )
            }
            Some(_) => continue,
            None => panic!("socket closed without connection.close"),
        }
    }
}

#[tokio::test]
async fn channel_max_bounds_the_count_of_channels_not_their_numbers() {
    let b = start().await;
    let mut r = Raw::handshake(b.server.amqp_addr, 0).await;
    // channel_max is 2047; channel number 65535 is still a valid channel.
    r.send(&open(65535)).await;
    assert!(is_open_ok(&r.frame().await, 65535));
    r.send(&open(2048)).await;
    assert!(is_open_ok(&r.frame().await, 2048));

    let b = start_with(|c| c.channel_max = 3).await;
    let mut r = Raw::handshake(b.server.amqp_addr, 0).await;
    for ch in [7, 300, 40000] {
        r.send(&open(ch)).await;
        assert!(is_open_ok(&r.frame().await, ch), "channel {ch}");
    }
    // Closing one makes room for another.
    r.send(&method(
        300,
        AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: 200,
            reply_text: "".into(),
            class_id: 0,
            method_id: 0,
        })),
    ))
    .await;
    assert!(matches!(
        r.frame().await,
        Some(AMQPFrame::Method(
            300,
            AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))
        ))
    ));
    r.send(&open(1)).await;
    assert!(is_open_ok(&r.frame().await, 1));
    r.send(&open(2)).await;
    let (code, text, class, id) = connection_close(&mut r).await;
    assert_eq!(code, 530);
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)"
    );
    assert_eq!((class, id), (20, 10));
}

#[tokio::test]
async fn an_empty_queue_name_means_the_last_declared_queue() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = within(ch.queue_declare("".into(), Default::default(), FieldTable::default()))
        .await
        .expect("server-named queue");
    let name = q.name().to_string();
    within(ch.exchange_declare(
        "x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("exchange");
    // queue "" and routing key "": the queue's own name is the key.
    within(ch.queue_bind(
        "".into(),
        "x".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind to the last declared queue");
    for _ in 0..3 {
        within(ch.basic_publish(
            "x".into(),
            name.as_str().into(),
            BasicPublishOptions::default(),
            b"hello",
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    let got = within(ch.basic_get("".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get");
    assert_eq!(got.expect("a message").delivery.data, b"hello");
    let purged = within(ch.queue_purge("".into(), QueuePurgeOptions::default()))
        .await
        .expect("purge");
    assert_eq!(purged, 2);
    within(ch.basic_consume(
        "".into(),
        "c1".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume from the last declared queue");
    let deleted = within(ch.queue_delete("".into(), QueueDeleteOptions::default()))
        .await
        .expect("delete");
    assert_eq!(deleted, 0);
    assert!(b.server.broker.vhost("/").expect("/").queue(&name).is_err());

    // A channel that declared nothing: RabbitMQ's 404.
    let ch2 = within(_c.create_channel()).await.expect("channel");
    let e = within(ch2.basic_get("".into(), BasicGetOptions::default()))
        .await
        .expect_err("404");
    assert_eq!(common::code(&e), Some(404));
    assert!(
        e.to_string()
            .contains("NOT_FOUND - no previously declared queue"),
        "{e}"
    );
}

#[tokio::test]
async fn a_frame_payload_of_exactly_frame_max_is_accepted() {
    let b = start().await;
    let vhost = b.server.broker.vhost("/").expect("/");
    vhost
        .queue_declare("q", &warren::vhost::QueueOptions::default(), 0)
        .expect("queue");
    let mut r = Raw::handshake_tuned(b.server.amqp_addr, 0, Some(4096)).await;
    r.send(&open(1)).await;
    assert!(is_open_ok(&r.frame().await, 1));
    // A body frame whose payload is frame_max bytes: 4104 octets on the wire, as RabbitMQ
    // accepts (clients size body frames that way).
    let mut bytes = publish_to("q");
    bytes.extend(content_header(60, 4096));
    bytes.extend(frame(3, 1, &[1u8; 4096]));
    r.send(&bytes).await;
    assert_eq!(common::ready(&{ b.channel().await.1 }, "q").await, 1);
    // One byte more is a frame error, before the payload is read.
    let mut bytes = publish_to("q");
    bytes.extend(content_header(60, 4097));
    bytes.extend(frame(3, 1, &[1u8; 4097]));
    r.send(&bytes).await;
    let (code, text, _, _) = connection_close(&mut r).await;
    assert_eq!(code, 501);
    assert_eq!(
        text,
        "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}"
    );
}

#[tokio::test]
async fn errors_name_the_method_that_caused_them() {
    let b = start().await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    // basic.publish with immediate=true: 540 naming basic.publish (60, 40).
    let mut args = vec![0, 0];
    args.extend(short_str(b""));
    args.extend(short_str(b"q"));
    args.push(2);
    let mut bytes = raw_method(1, 60, 40, &args);
    bytes.extend(content_header(60, 1));
    bytes.extend(frame(3, 1, b"x"));
    r.send(&bytes).await;
    let (code, text, class, id) = connection_close(&mut r).await;
    assert_eq!(
        (code, text.as_str()),
        (540, "NOT_IMPLEMENTED - immediate=true")
    );
    assert_eq!((class, id), (60, 40));

    // A publish refused once its content is complete (no such exchange) names it too.
    let mut r = Raw::open(b.server.amqp_addr).await;
    let mut args = vec![0, 0];
    args.extend(short_str(b"missing"));
    args.extend(short_str(b"k"));
    args.push(0);
    let mut bytes = raw_method(1, 60, 40, &args);
    bytes.extend(content_header(60, 0));
    r.send(&bytes).await;
    loop {
        match r.frame().await {
            Some(AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::Close(c)))) => {
                assert_eq!(c.reply_code, 404);
                assert_eq!((c.class_id, c.method_id), (60, 40));
                break;
            }
            Some(_) => continue,
            None => panic!("no channel.close"),
        }
    }
    // basic.qos with prefetch_size != 0 (a method error) names basic.qos.
    let mut r = Raw::open(b.server.amqp_addr).await;
    r.send(&raw_method(1, 60, 10, &[0, 0, 0, 5, 0, 0, 0])).await;
    let (code, _, class, id) = connection_close(&mut r).await;
    assert_eq!((code, class, id), (540, 60, 10));
}

/// Every error that quotes a name, for names of every length up to 255 bytes: the reply text is
/// cut to a short string, the channel is closed with the right code, and the connection goes on.
#[tokio::test]
async fn error_replies_quoting_names_of_every_length_keep_the_connection() {
    let b = start().await;
    let (owner, owner_ch) = b.channel().await;
    let (conn, _) = b.channel().await;
    let exclusive = QueueDeclareOptions {
        exclusive: true,
        ..Default::default()
    };
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    for len in (0..=255).step_by(1) {
        let name = format!("{}{}", "n", "q".repeat(len.max(1) - 1));
        let name = &name[..len.max(1)];
        // 404 no queue; 404 no exchange (passive declare and bind); 406 inequivalent type;
        // 405 locked exclusive queue (RabbitMQ's text passes 255 bytes at 48 characters).
        within(owner_ch.queue_declare(name.into(), exclusive, FieldTable::default()))
            .await
            .expect("exclusive queue");
        within(owner_ch.exchange_declare(
            name.into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("exchange");
        let ch = within(conn.create_channel()).await.expect("channel");
        assert_code(
            within(ch.queue_declare(
                format!("x{name}")[..len.max(1)].into(),
                passive,
                FieldTable::default(),
            ))
            .await,
            404,
        );
        let ch = within(conn.create_channel()).await.expect("channel");
        assert_code(
            within(ch.exchange_declare(
                name.into(),
                ExchangeKind::Fanout,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            ))
            .await,
            406,
        );
        let ch = within(conn.create_channel()).await.expect("channel");
        assert_code(
            within(ch.queue_declare(name.into(), passive, FieldTable::default())).await,
            405,
        );
        let ch = within(conn.create_channel()).await.expect("channel");
        assert_code(
            within(ch.basic_consume(
                name.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            ))
            .await,
            405,
        );
        within(owner_ch.queue_delete(name.into(), QueueDeleteOptions::default()))
            .await
            .expect("delete");
    }
    assert!(conn.status().connected(), "the erring connection goes on");
    assert!(owner.status().connected());
}
