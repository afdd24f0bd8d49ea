//! RabbitMQ's stream protocol (#19) through the official Rust client, `rabbitmq-stream-client`:
//! create and delete, publish with confirms and deduplication, consume from every offset
//! type, server-side offset tracking, what survives a restart, and bad input on the port.

mod common;

use common::stream_client::env;
use common::stream_raw::{chunk_of, frame_key, Offset, StreamRaw, DELIVER};
use common::{start_with, within, TestBroker};
use futures_lite::StreamExt;
use rabbitmq_stream_client::error::{ConsumerStoreOffsetError, StreamCreateError};
use rabbitmq_stream_client::types::{Message, OffsetSpecification, ResponseCode};
use rabbitmq_stream_client::{Consumer, Environment};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren::config::Config;
use warren::Server;

fn with_streams(c: &mut Config) {
    c.stream_listen = Some("127.0.0.1:0".parse().expect("addr"));
}

async fn broker() -> TestBroker {
    start_with(with_streams).await
}

/// The broker stopped cleanly and started again on its data directory.
async fn restarted(b: TestBroker) -> TestBroker {
    let TestBroker { server, dir } = b;
    within(server.shutdown()).await;
    let mut config = Config {
        amqp_listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    with_streams(&mut config);
    let server = Server::start(config).await.expect("broker restarts");
    TestBroker { server, dir }
}

fn bodies(range: std::ops::Range<u32>) -> Vec<Message> {
    range
        .map(|i| Message::builder().body(format!("m-{i}")).build())
        .collect()
}

/// Publishes `messages` and waits for every confirm.
async fn publish_all(env: &Environment, stream: &str, messages: Vec<Message>) {
    let producer = within(env.producer().build(stream))
        .await
        .expect("producer");
    let n = messages.len();
    let confirms = within(producer.batch_send_with_confirm(messages))
        .await
        .expect("published");
    assert_eq!(confirms.len(), n);
    assert!(
        confirms.iter().all(|c| c.confirmed()),
        "every message confirmed"
    );
    within(producer.close()).await.expect("producer closed");
}

/// The next `n` deliveries: (offset, body).
async fn take(consumer: &mut Consumer, n: usize) -> Vec<(u64, String)> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let d = within(consumer.next())
            .await
            .expect("consumer open")
            .expect("delivery");
        let body = String::from_utf8(d.message().data().expect("body").to_vec()).expect("utf-8");
        out.push((d.offset(), body));
    }
    out
}

/// Asserts nothing more arrives for a moment.
async fn quiet(consumer: &mut Consumer) {
    let more = tokio::time::timeout(Duration::from_millis(300), consumer.next()).await;
    assert!(more.is_err(), "no further delivery expected, got {more:?}");
}

async fn consumer(env: &Environment, stream: &str, offset: OffsetSpecification) -> Consumer {
    within(env.consumer().offset(offset).build(stream))
        .await
        .expect("consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_confirm_and_consume_from_every_offset_type() {
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("events"))
        .await
        .expect("created");
    let again = within(env.stream_creator().create("events")).await;
    assert!(
        matches!(
            again,
            Err(StreamCreateError::Create {
                status: ResponseCode::StreamAlreadyExists,
                ..
            })
        ),
        "{again:?}"
    );
    publish_all(&env, "events", bodies(0..100)).await;
    let before = warren_now_ms();
    tokio::time::sleep(Duration::from_millis(20)).await;
    publish_all(&env, "events", bodies(100..150)).await;

    // first: everything, at consecutive offsets from 0.
    let mut first = consumer(&env, "events", OffsetSpecification::First).await;
    let got = take(&mut first, 150).await;
    let expected: Vec<(u64, String)> = (0..150u64).map(|i| (i, format!("m-{i}"))).collect();
    assert_eq!(got, expected);
    quiet(&mut first).await;

    // offset: from that offset on (the client drops the head of the chunk it lands in).
    let mut at = consumer(&env, "events", OffsetSpecification::Offset(120)).await;
    assert_eq!(take(&mut at, 30).await, expected[120..].to_vec());

    // timestamp: the chunks written at or after it (the second publish).
    let mut since = consumer(&env, "events", OffsetSpecification::Timestamp(before)).await;
    assert_eq!(take(&mut since, 50).await, expected[100..].to_vec());

    // last: the newest chunk; next: only what comes after.
    let mut last = consumer(&env, "events", OffsetSpecification::Last).await;
    let newest = take(&mut last, 1).await;
    assert!(
        newest[0].0 >= 100,
        "the last chunk is the second publish's: {newest:?}"
    );
    let mut next = consumer(&env, "events", OffsetSpecification::Next).await;
    quiet(&mut next).await;
    publish_all(&env, "events", bodies(150..153)).await;
    assert_eq!(
        take(&mut next, 3).await,
        (150..153u64)
            .map(|i| (i, format!("m-{i}")))
            .collect::<Vec<_>>()
    );
    // A consumer already reading sees the new messages too.
    assert_eq!(take(&mut first, 3).await, take_expected(150..153));

    // The stream is a stream queue over AMQP and in the management API.
    let (_c, ch) = b.channel().await;
    let ok = within(ch.queue_declare(
        "events".into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        Default::default(),
    ))
    .await;
    assert!(ok.is_ok(), "{ok:?}");
    let auth = Some(("guest", "guest"));
    let r = common::http::request(
        b.server.http_addr,
        "GET",
        "/api/queues/%2F/events",
        auth,
        None,
    )
    .await;
    let q = r.json();
    assert_eq!(q["type"], "stream");
    assert_eq!(q["messages_ready"], 153);

    within(env.delete_stream("events")).await.expect("deleted");
    let gone = within(env.producer().build("events")).await;
    assert!(gone.is_err(), "a deleted stream takes no producer");
    within(b.server.shutdown()).await;
}

fn take_expected(range: std::ops::Range<u64>) -> Vec<(u64, String)> {
    range.map(|i| (i, format!("m-{i}"))).collect()
}

fn warren_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_producer_is_deduplicated_across_a_restart() {
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("orders"))
        .await
        .expect("created");
    let mut p = within(env.producer().name("app-1").build("orders"))
        .await
        .expect("producer");
    let sent = within(p.batch_send_with_confirm(bodies(0..10)))
        .await
        .expect("sent");
    assert!(sent.iter().all(|c| c.confirmed()));
    // The same publishing ids again (a publisher retrying after a reconnect): confirmed, not
    // stored twice.
    let again: Vec<Message> = (0..10)
        .map(|i| {
            Message::builder()
                .body(format!("dup-{i}"))
                .publishing_id(i)
                .build()
        })
        .collect();
    let confirms = within(p.batch_send_with_confirm(again))
        .await
        .expect("sent");
    assert!(
        confirms.iter().all(|c| c.confirmed()),
        "duplicates are confirmed"
    );
    within(p.close()).await.expect("closed");

    let b = restarted(b).await;
    let env = self::env(&b).await;
    // The sequence survived: a producer of the same name goes on from id 10, and ids at or
    // below 9 are still recognised.
    let mut p = within(env.producer().name("app-1").build("orders"))
        .await
        .expect("producer");
    let stale = Message::builder().body("stale").publishing_id(9).build();
    let fresh = Message::builder().body("fresh").publishing_id(10).build();
    let confirms = within(p.batch_send_with_confirm(vec![stale, fresh]))
        .await
        .expect("sent");
    assert!(confirms.iter().all(|c| c.confirmed()));
    within(p.close()).await.expect("closed");
    let mut c = consumer(&env, "orders", OffsetSpecification::First).await;
    let mut expected = take_expected(0..10);
    expected.push((10, "fresh".into()));
    assert_eq!(take(&mut c, 11).await, expected);
    quiet(&mut c).await;
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_offsets_are_kept_and_survive_a_restart() {
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("log"))
        .await
        .expect("created");
    publish_all(&env, "log", bodies(0..20)).await;
    let mut c = within(
        env.consumer()
            .name("reader")
            .offset(OffsetSpecification::First)
            .build("log"),
    )
    .await
    .expect("consumer");
    let none = within(c.query_offset()).await;
    assert!(
        matches!(none, Err(ConsumerStoreOffsetError::Client(_))),
        "no offset stored yet: {none:?}"
    );
    take(&mut c, 12).await;
    within(c.store_offset(11)).await.expect("stored");
    // StoreOffset has no answer: the query after it is answered after it.
    assert_eq!(within(c.query_offset()).await.expect("queried"), 11);
    within(c.store_offset(12)).await.expect("stored");
    assert_eq!(within(c.query_offset()).await.expect("queried"), 12);

    let b = restarted(b).await;
    let env = self::env(&b).await;
    let c = within(
        env.consumer()
            .name("reader")
            .offset(OffsetSpecification::Next)
            .build("log"),
    )
    .await
    .expect("consumer");
    assert_eq!(within(c.query_offset()).await.expect("queried"), 12);
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_use_the_protocols_codes() {
    let b = broker().await;
    let env = env(&b).await;
    let missing = within(env.producer().build("nowhere")).await;
    assert!(missing.is_err(), "no producer on a missing stream");
    let bad = within(
        env.stream_creator()
            .max_age(Duration::from_secs(0))
            .create("bad-age"),
    )
    .await;
    assert!(
        matches!(
            bad,
            Err(StreamCreateError::Create {
                status: ResponseCode::PrecoditionFailed,
                ..
            })
        ),
        "{bad:?}"
    );
    // A classic queue is no stream.
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare("classic".into(), Default::default(), Default::default()))
        .await
        .expect("declared");
    let not_stream = within(env.consumer().build("classic")).await;
    assert!(
        not_stream.is_err(),
        "a classic queue is not consumed as a stream"
    );

    let port = b.server.stream_addr.expect("stream listener").port();
    let wrong = within(
        Environment::builder()
            .host("127.0.0.1")
            .port(port)
            .password("wrong")
            .build(),
    )
    .await;
    assert!(wrong.is_err(), "a wrong password is refused");
    let no_vhost = within(
        Environment::builder()
            .host("127.0.0.1")
            .port(port)
            .virtual_host("nope")
            .build(),
    )
    .await;
    assert!(no_vhost.is_err(), "a missing vhost is refused");
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_stream_port_closes_only_that_connection() {
    let b = broker().await;
    let addr = b.server.stream_addr.expect("stream listener");
    // A frame claiming 2 GiB, a truncated peer-properties request, and a request before the
    // handshake: each connection is closed, the broker goes on.
    for junk in [
        vec![0x7f, 0xff, 0xff, 0xff, 0, 0x11],
        vec![0, 0, 0, 6, 0, 0x11, 0, 1, 0, 0],
        vec![0, 0, 0, 10, 0, 0x0d, 0, 1, 0, 0, 0, 1, 0, 0],
    ] {
        let mut s = within(tokio::net::TcpStream::connect(addr))
            .await
            .expect("connect");
        s.write_all(&junk).await.expect("write");
        let mut buf = Vec::new();
        let read = within(s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "the server closes the socket");
    }
    let env = env(&b).await;
    within(env.stream_creator().create("still-fine"))
        .await
        .expect("created");
    publish_all(&env, "still-fine", bodies(0..3)).await;
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_091_and_the_stream_protocol_share_a_stream() {
    use lapin::options::{BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
    use lapin::types::{AMQPValue, FieldTable};
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("mixed"))
        .await
        .expect("created");
    // Over AMQP 0-9-1 first, with properties and a header.
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    let mut headers = FieldTable::default();
    headers.insert("region".into(), AMQPValue::LongString("eu".into()));
    let props = lapin::BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_message_id("amqp-1".into())
        .with_headers(headers);
    within(ch.basic_publish(
        "".into(),
        "mixed".into(),
        BasicPublishOptions::default(),
        b"from-091",
        props,
    ))
    .await
    .expect("publish");
    assert!(within(ch.wait_for_confirms())
        .await
        .expect("confirms")
        .is_empty());
    // Then over the stream protocol, with an application property.
    let m = Message::builder()
        .body("from-stream")
        .application_properties()
        .insert("team", "blue")
        .message_builder()
        .properties()
        .content_type("application/json")
        .message_builder()
        .build();
    publish_all(&env, "mixed", vec![m]).await;

    // A stream-protocol reader gets both as AMQP 1.0 messages.
    let mut c = consumer(&env, "mixed", OffsetSpecification::First).await;
    let first = within(c.next()).await.expect("open").expect("delivery");
    assert_eq!(first.offset(), 0);
    assert_eq!(first.message().data(), Some(&b"from-091"[..]));
    let p = first.message().properties().expect("properties");
    assert_eq!(
        p.content_type.as_ref().map(|s| s.to_string()),
        Some("text/plain".to_owned())
    );
    let app = first
        .message()
        .application_properties()
        .expect("headers as application properties");
    assert!(format!("{app:?}").contains("eu"), "{app:?}");
    assert_eq!(take(&mut c, 1).await, vec![(1, "from-stream".to_owned())]);

    // An AMQP 0-9-1 reader gets both as 0-9-1 messages.
    within(ch.basic_qos(10, BasicQosOptions::default()))
        .await
        .expect("qos");
    let mut args = FieldTable::default();
    args.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString("first".into()),
    );
    let mut consumer = within(ch.basic_consume(
        "mixed".into(),
        "".into(),
        BasicConsumeOptions::default(),
        args,
    ))
    .await
    .expect("consume");
    let d = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    assert_eq!(&d.data[..], b"from-091");
    assert_eq!(
        d.properties.message_id().as_ref().map(|s| s.as_str()),
        Some("amqp-1")
    );
    let d = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    assert_eq!(&d.data[..], b"from-stream");
    assert_eq!(
        d.properties.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    let h = d.properties.headers().clone().expect("headers");
    assert_eq!(
        h.inner().get("team"),
        Some(&AMQPValue::LongString("blue".into()))
    );
    assert_eq!(
        h.inner().get("x-stream-offset"),
        Some(&AMQPValue::LongLongInt(1))
    );
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_with_much_credit_gets_everything_without_holding_it_all() {
    // No statistics tick wakes the stream meanwhile: only the reader's drain can.
    let b = start_with(|c| {
        with_streams(c);
        c.collect_statistics_interval = 600_000;
    })
    .await;
    let env = env(&b).await;
    within(env.stream_creator().create("big"))
        .await
        .expect("created");
    // Publish frames under the 1 MiB frame_max: 16 of 100 messages of 8 KiB.
    let body = vec![b'x'; 8 * 1024];
    for _ in 0..16 {
        let messages: Vec<Message> = (0..100)
            .map(|_| Message::builder().body(body.clone()).build())
            .collect();
        publish_all(&env, "big", messages).await;
    }
    // 12.5 MiB and credit for every chunk at once: the server holds back past its backlog
    // bound and goes on as the reader drains its socket.
    let mut r = StreamRaw::open(b.server.stream_addr.expect("stream listener")).await;
    let c = r.subscribe(0, "big", Offset::First, 1000, &[]).await;
    assert_eq!(c, 1, "subscribed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut records = 0u32;
    let mut next_offset = 0u64;
    while records < 1600 {
        let f = r.frame().await;
        assert_eq!(frame_key(&f), DELIVER, "only deliveries: {:?}", &f[..2]);
        let (_, first, n) = chunk_of(&f);
        assert_eq!(first, next_offset, "chunks in order, none missing");
        next_offset += u64::from(n);
        records += n;
    }
    assert_eq!(records, 1600);
    within(b.server.shutdown()).await;
}

/// The routing key of a test message: its body up to the first ':'.
fn key_of(m: &Message) -> String {
    let body = m.data().unwrap_or_default();
    let text = String::from_utf8_lossy(body);
    text.split(':').next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn super_streams_route_by_key_to_their_partitions() {
    use rabbitmq_stream_client::types::{RoutingKeyRoutingStrategy, RoutingStrategy};
    let b = broker().await;
    let env = env(&b).await;
    within(
        env.stream_creator()
            .create_super_stream("invoices", 3, None),
    )
    .await
    .expect("created");
    let again = within(
        env.stream_creator()
            .create_super_stream("invoices", 3, None),
    )
    .await;
    assert!(
        matches!(
            again,
            Err(StreamCreateError::Create {
                status: ResponseCode::StreamAlreadyExists,
                ..
            })
        ),
        "{again:?}"
    );
    // Through the super stream producer: `route` asked per key, each partition its producer.
    let strategy = RoutingStrategy::RoutingKeyStrategy(RoutingKeyRoutingStrategy {
        routing_extractor: &key_of,
    });
    let mut producer = within(env.super_stream_producer(strategy).build("invoices"))
        .await
        .expect("producer");
    let (tx, mut confirmed) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..9 {
        let body = format!("{}:{i}", i % 3);
        let tx = tx.clone();
        within(
            producer.send(Message::builder().body(body).build(), move |r| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(r.map(|c| c.confirmed()).unwrap_or(false));
                }
            }),
        )
        .await
        .expect("sent");
    }
    for _ in 0..9 {
        assert_eq!(within(confirmed.recv()).await, Some(true));
    }
    // Over AMQP 0-9-1: the super stream is a direct exchange, key "2" goes to invoices-2.
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    within(ch.basic_publish(
        "invoices".into(),
        "2".into(),
        Default::default(),
        b"2:amqp",
        Default::default(),
    ))
    .await
    .expect("publish");
    assert!(within(ch.wait_for_confirms())
        .await
        .expect("confirms")
        .is_empty());

    for (p, expected) in [
        ("invoices-0", vec!["0:0", "0:3", "0:6"]),
        ("invoices-1", vec!["1:1", "1:4", "1:7"]),
        ("invoices-2", vec!["2:2", "2:5", "2:8", "2:amqp"]),
    ] {
        let mut c = consumer(&env, p, OffsetSpecification::First).await;
        let got: Vec<String> = take(&mut c, expected.len())
            .await
            .into_iter()
            .map(|(_, body)| body)
            .collect();
        assert_eq!(got, expected, "partition {p}");
        quiet(&mut c).await;
    }
    // The super stream consumer reads every partition.
    let mut all = within(
        env.super_stream_consumer()
            .offset(OffsetSpecification::First)
            .build("invoices"),
    )
    .await
    .expect("super stream consumer");
    let mut bodies = Vec::new();
    while bodies.len() < 10 {
        let d = within(all.next()).await.expect("open").expect("delivery");
        bodies.push(String::from_utf8_lossy(d.message().data().unwrap_or_default()).into_owned());
    }
    bodies.sort();
    assert_eq!(bodies.len(), 10);
    assert_eq!(bodies[9], "2:amqp");

    within(env.delete_super_stream("invoices"))
        .await
        .expect("deleted");
    for p in ["invoices-0", "invoices-1", "invoices-2"] {
        assert!(
            within(env.producer().build(p)).await.is_err(),
            "{p} is gone"
        );
    }
    let passive = within(ch.exchange_declare(
        "invoices".into(),
        lapin::ExchangeKind::Direct,
        lapin::options::ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        Default::default(),
    ))
    .await;
    assert!(passive.is_err(), "the exchange is gone");
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_subscriptions_skip_the_chunks_their_values_are_not_in() {
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("regions"))
        .await
        .expect("created");
    // One chunk per batch (each waits for its confirms): eu at 0-2, us at 3-5, unfiltered
    // at 6-8, then apac at 9 over AMQP 0-9-1 with the x-stream-filter-value header.
    for region in ["eu", "us"] {
        let producer = within(
            env.producer()
                .filter_value_extractor(|m| {
                    let body = String::from_utf8_lossy(m.data().unwrap_or_default()).into_owned();
                    body.split(':').next().unwrap_or_default().to_owned()
                })
                .build("regions"),
        )
        .await
        .expect("filtering producer");
        let messages = (0..3)
            .map(|i| Message::builder().body(format!("{region}:{i}")).build())
            .collect();
        let confirms = within(producer.batch_send_with_confirm(messages))
            .await
            .expect("published");
        assert!(confirms.iter().all(|c| c.confirmed()));
        within(producer.close()).await.expect("closed");
    }
    publish_all(&env, "regions", bodies(0..3)).await;
    let (_c, ch) = b.channel().await;
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    let mut headers = lapin::types::FieldTable::default();
    headers.insert(
        "x-stream-filter-value".into(),
        lapin::types::AMQPValue::LongString("apac".into()),
    );
    within(ch.basic_publish(
        "".into(),
        "regions".into(),
        Default::default(),
        b"apac:0",
        lapin::BasicProperties::default().with_headers(headers),
    ))
    .await
    .expect("publish");
    assert!(within(ch.wait_for_confirms())
        .await
        .expect("confirms")
        .is_empty());

    let addr = b.server.stream_addr.expect("stream listener");
    // (subscription properties, the offsets of the chunks it gets). A batch may have been
    // split over several chunks, never mixed with another batch.
    type Case<'a> = (&'a [(&'a str, &'a str)], Vec<u64>);
    let cases: [Case; 4] = [
        (&[("filter.0", "eu")], (0..3).collect()),
        (
            &[("filter.1", "us"), ("filter.2", "apac")],
            (3..6).chain(9..10).collect(),
        ),
        (
            &[("filter.0", "eu"), ("match-unfiltered", "true")],
            (0..3).chain(6..9).collect(),
        ),
        // A filter no chunk may hold: nothing, and the credit is kept for later chunks.
        (&[("filter.0", "latam")], vec![]),
    ];
    for (properties, offsets) in cases {
        let mut r = StreamRaw::open(addr).await;
        assert_eq!(
            r.subscribe(0, "regions", Offset::First, 1, properties)
                .await,
            1
        );
        let mut got = Vec::new();
        while got.len() < offsets.len() {
            let f = r.expect(DELIVER).await;
            let (_, first, n) = chunk_of(&f);
            got.extend(first..first + u64::from(n));
            r.send(&[0, 0x09, 0, 1, 0, 0, 1]).await;
        }
        assert_eq!(got, offsets, "{properties:?}");
        r.quiet(300).await;
    }
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_offset_spec_answers_where_a_reader_would_start() {
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("ledger"))
        .await
        .expect("created");
    // Three batches: 0-2, 3-5, 6-8.
    for i in 0..3 {
        publish_all(&env, "ledger", bodies(i * 3..i * 3 + 3)).await;
    }
    let mut r = StreamRaw::open(b.server.stream_addr.expect("stream listener")).await;
    let resolve = |stream: &str, spec: &[u8]| {
        let mut f = common::stream_raw::string(stream);
        f.extend_from_slice(spec);
        f.extend(0u32.to_be_bytes());
        f
    };
    let offset = |o: u64| [&4u16.to_be_bytes()[..], &o.to_be_bytes()].concat();
    // (request, the offsets it may resolve to): the client may split a batch over chunks, so
    // the last chunk starts somewhere in the last batch.
    let cases: [(Vec<u8>, std::ops::RangeInclusive<u64>); 6] = [
        (resolve("ledger", &[0, 1]), 0..=0),
        (resolve("ledger", &[0, 2]), 6..=8),
        (resolve("ledger", &[0, 3]), 9..=9),
        (resolve("ledger", &offset(4)), 4..=4),
        (resolve("ledger", &offset(100)), 9..=9),
        (
            resolve("ledger", &[&[0, 5][..], &1i64.to_be_bytes()].concat()),
            0..=0,
        ),
    ];
    for (fields, want) in cases {
        let (c, f) = r.call_full(0x001f, &fields).await;
        assert_eq!(c, 1);
        assert_eq!(&f[10..12], &[0, 4], "an offset");
        let got = u64::from_be_bytes(f[12..20].try_into().expect("8"));
        assert!(want.contains(&got), "{got} not in {want:?}");
    }
    let (c, _) = r.call_full(0x001f, &resolve("nope", &[0, 1])).await;
    assert_eq!(c, 2, "stream does not exist");
    within(b.server.shutdown()).await;
}
