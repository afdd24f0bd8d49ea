//! Deliveries sent without copying bodies through the broker (#19): chunk data the stream
//! protocol takes as it lies on disk goes from the segment file to a plain TCP socket by
//! `sendfile`, counted by the node; a TLS connection, and a chunk whose AMQP 0-9-1 records must
//! be converted, get the same messages read and written by the broker. Bodies must arrive byte
//! for byte whichever way they went.

mod common;

use common::pki::pki;
use common::stream_client::env;
use common::{start_with, within};
use futures_lite::StreamExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::BasicProperties;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::{Consumer, Environment, TlsConfiguration};
use std::sync::atomic::Ordering::Relaxed;

/// A body of `len` bytes that differs with `seed` throughout.
fn body(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (j * 31 + seed * 7 + j / 251) as u8)
        .collect()
}

/// The next `n` bodies `consumer` gets.
async fn bodies(consumer: &mut Consumer, n: usize) -> Vec<Vec<u8>> {
    within(async {
        let mut got = Vec::new();
        while got.len() < n {
            let d = consumer.next().await.expect("open").expect("delivery");
            got.push(d.message().data().map(|b| b.to_vec()).unwrap_or_default());
        }
        got
    })
    .await
}

async fn consumer(env: &Environment, offset: OffsetSpecification) -> Consumer {
    within(env.consumer().offset(offset).build("big"))
        .await
        .expect("consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_chunks_go_from_the_file_to_plain_sockets_and_arrive_whole_everywhere() {
    let pki = pki();
    let files = pki.server_files();
    let b = start_with(|c| files.stream_listeners(c)).await;
    let counters = &b.server.broker.connections.stream;
    let plain = env(&b).await;
    within(plain.stream_creator().create("big"))
        .await
        .expect("created");

    // Large messages make chunks worth a sendfile; a few small ones make chunks that are not.
    let sizes: Vec<usize> = (0..24)
        .map(|i| if i % 6 == 5 { 40 } else { 150_000 + i * 997 })
        .collect();
    let sent: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, n)| body(i, *n)).collect();
    let producer = within(plain.producer().build("big"))
        .await
        .expect("producer");
    for chunk in sent.chunks(4) {
        let messages = chunk
            .iter()
            .map(|m| Message::builder().body(m.clone()).build())
            .collect();
        let confirms = within(producer.batch_send_with_confirm(messages))
            .await
            .expect("published");
        assert!(confirms.iter().all(|c| c.confirmed()));
    }
    assert_eq!(counters.sent_from_file.load(Relaxed), 0, "nothing read yet");

    let mut reader = consumer(&plain, OffsetSpecification::First).await;
    assert!(
        bodies(&mut reader, sent.len()).await == sent,
        "plain TCP bodies differ"
    );
    let large: usize = sizes.iter().filter(|n| **n > 1000).sum();
    let from_file = counters.sent_from_file.load(Relaxed);
    assert!(
        from_file as usize >= large,
        "{from_file} bytes were sent from the file, of {large} in large messages"
    );

    // A large message published over AMQP 0-9-1 is converted for stream readers, so it is
    // read and rewritten, never sent as it lies.
    let (_conn, ch) = b.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let amqp_body = body(99, 300_000);
    let confirm = ch
        .basic_publish(
            "".into(),
            "big".into(),
            BasicPublishOptions::default(),
            &amqp_body,
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    assert!(within(confirm).await.expect("confirm").is_ack());
    let mut at_end = consumer(&plain, OffsetSpecification::Offset(sent.len() as u64)).await;
    assert_eq!(bodies(&mut at_end, 1).await, vec![amqp_body.clone()]);
    assert_eq!(counters.sent_from_file.load(Relaxed), from_file);

    // Over TLS every byte passes through the broker (it encrypts them): all arrive, and
    // none is counted as sent from the file.
    let tls = TlsConfiguration::builder()
        .add_root_certificates(files.ca.clone())
        .build()
        .expect("tls configuration");
    let port = b.server.stream_tls_addr.expect("TLS listener").port();
    let secure = within(
        Environment::builder()
            .host("localhost")
            .port(port)
            .tls(tls)
            .build(),
    )
    .await
    .expect("stream connection over TLS");
    let mut tls_reader = consumer(&secure, OffsetSpecification::First).await;
    let mut expected = sent.clone();
    expected.push(amqp_body);
    assert!(
        bodies(&mut tls_reader, expected.len()).await == expected,
        "TLS bodies differ"
    );
    assert_eq!(counters.sent_from_file.load(Relaxed), from_file);
    within(producer.close()).await.expect("closed");
}
