//! Durability: what survives a restart on the same data dir, in what order and with what
//! flags; acknowledged messages stay gone; large bodies come back byte-exact; and a store that
//! cannot be used stops the broker from starting with a clear error.

mod common;

use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use warren::config::Config;
use warren::Server;

fn durable_q() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        durable: true,
        ..Default::default()
    }
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

async fn publish_confirmed(ch: &Channel, x: &str, key: &str, body: &[u8], props: BasicProperties) {
    let confirm = within(ch.basic_publish(x.into(), key.into(), Default::default(), body, props))
        .await
        .expect("publish");
    assert!(within(confirm).await.expect("confirm").is_ack());
}

async fn exists_queue(b: &TestBroker, q: &str) -> bool {
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .is_ok()
}

async fn exists_exchange(b: &TestBroker, x: &str) -> bool {
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        x.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .is_ok()
}

async fn drain(ch: &Channel, q: &str) -> Vec<lapin::message::BasicGetMessage> {
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
    {
        out.push(m);
    }
    out
}

#[tokio::test]
async fn exactly_the_durable_entities_and_persistent_messages_survive() {
    let b = start().await;
    {
        let (c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        let dx = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.exchange_declare("dx".into(), ExchangeKind::Topic, dx, FieldTable::default()))
            .await
            .expect("dx");
        within(ch.exchange_declare(
            "tx".into(),
            ExchangeKind::Fanout,
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("tx");
        let mut args = FieldTable::default();
        args.insert("x-custom".into(), AMQPValue::LongString("kept".into()));
        within(ch.queue_declare("dq".into(), durable_q(), args))
            .await
            .expect("dq");
        within(ch.queue_declare("tq".into(), Default::default(), FieldTable::default()))
            .await
            .expect("tq");
        within(ch.queue_declare(
            "eq".into(),
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        .expect("eq");
        within(ch.queue_bind(
            "dq".into(),
            "dx".into(),
            "a.#".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind");
        within(ch.queue_bind(
            "dq".into(),
            "tx".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind");
        within(ch.queue_bind(
            "tq".into(),
            "dx".into(),
            "#".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind");
        let mut headers = FieldTable::default();
        headers.insert("zz".into(), AMQPValue::LongLongInt(7));
        headers.insert("aa".into(), AMQPValue::LongString("first".into()));
        for i in 0..5 {
            let props = persistent()
                .with_headers(headers.clone())
                .with_message_id(format!("m{i}").into())
                .with_content_type("text/plain".into());
            publish_confirmed(
                &ch,
                "dx",
                "a.b",
                format!("persistent {i}").as_bytes(),
                props,
            )
            .await;
            publish_confirmed(
                &ch,
                "",
                "dq",
                format!("transient {i}").as_bytes(),
                BasicProperties::default(),
            )
            .await;
        }
        // Acknowledge the first persistent message: it must not come back.
        let first = within(ch.basic_get("dq".into(), Default::default()))
            .await
            .expect("get")
            .expect("msg");
        assert_eq!(first.delivery.data, b"persistent 0");
        within(first.delivery.ack(Default::default()))
            .await
            .expect("ack");
        within(c.close(200, "bye".into())).await.expect("close");
    }
    let b = b.restart().await;
    assert!(exists_exchange(&b, "dx").await);
    assert!(!exists_exchange(&b, "tx").await);
    assert!(exists_queue(&b, "dq").await);
    assert!(!exists_queue(&b, "tq").await, "transient queue survived");
    assert!(!exists_queue(&b, "eq").await, "exclusive queue survived");
    let (_c, ch) = b.channel().await;
    // The durable binding still routes; the redeclare with the same arguments is equivalent.
    let mut args = FieldTable::default();
    args.insert("x-custom".into(), AMQPValue::LongString("kept".into()));
    within(ch.queue_declare("dq".into(), durable_q(), args))
        .await
        .expect("equivalent redeclare");
    let got = drain(&ch, "dq").await;
    let bodies: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.delivery.data).into_owned())
        .collect();
    assert_eq!(
        bodies,
        vec![
            "persistent 1",
            "persistent 2",
            "persistent 3",
            "persistent 4"
        ]
    );
    let m = &got[0].delivery;
    assert_eq!(
        m.properties.message_id().as_ref().map(|s| s.as_str()),
        Some("m1")
    );
    assert_eq!(m.properties.delivery_mode(), &Some(2));
    assert_eq!(m.routing_key.as_str(), "a.b");
    assert_eq!(m.exchange.as_str(), "dx");
    let headers = m.properties.headers().as_ref().expect("headers");
    assert_eq!(headers.inner().get("zz"), Some(&AMQPValue::LongLongInt(7)));
    assert!(!m.redelivered, "never delivered before the restart");
    within(ch.basic_publish(
        "dx".into(),
        "a.c".into(),
        Default::default(),
        b"routed",
        persistent(),
    ))
    .await
    .expect("publish");
    let q = within(ch.queue_declare("dq".into(), passive(), FieldTable::default()))
        .await
        .expect("passive");
    assert_eq!(q.message_count(), 1, "durable binding dx -> dq survived");
}

#[tokio::test]
async fn delivered_but_unacked_messages_come_back_redelivered_in_order() {
    let b = start().await;
    {
        let (c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        within(ch.queue_declare("q".into(), durable_q(), FieldTable::default()))
            .await
            .expect("q");
        for i in 0..6 {
            publish_confirmed(&ch, "", "q", format!("{i}").as_bytes(), persistent()).await;
        }
        let cch = within(c.create_channel()).await.expect("channel");
        within(cch.basic_qos(3, Default::default()))
            .await
            .expect("qos");
        let mut cons = within(cch.basic_consume(
            "q".into(),
            "c".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("consume");
        let d0 = within(cons.next()).await.expect("d0").expect("ok");
        let _d1 = within(cons.next()).await.expect("d1").expect("ok");
        let _d2 = within(cons.next()).await.expect("d2").expect("ok");
        within(d0.ack(Default::default())).await.expect("ack");
        // Make sure the ack reached the broker before the restart.
        within(cch.basic_qos(3, Default::default()))
            .await
            .expect("round trip");
    }
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    let got = drain(&ch, "q").await;
    let seen: Vec<(String, bool)> = got
        .iter()
        .map(|m| {
            (
                String::from_utf8_lossy(&m.delivery.data).into_owned(),
                m.delivery.redelivered,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("1".into(), true),
            ("2".into(), true),
            ("3".into(), true),
            ("4".into(), false),
            ("5".into(), false)
        ]
    );
}

#[tokio::test]
async fn deleted_queues_and_exchanges_stay_deleted_and_auto_delete_survives() {
    let b = start().await;
    {
        let (_c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        within(ch.queue_declare("gone".into(), durable_q(), FieldTable::default()))
            .await
            .expect("q");
        publish_confirmed(&ch, "", "gone", b"x", persistent()).await;
        within(ch.queue_delete("gone".into(), Default::default()))
            .await
            .expect("delete");
        let dx = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        within(ch.exchange_declare("gx".into(), ExchangeKind::Direct, dx, FieldTable::default()))
            .await
            .expect("x");
        within(ch.exchange_delete("gx".into(), Default::default()))
            .await
            .expect("delete x");
        let ad = QueueDeclareOptions {
            durable: true,
            auto_delete: true,
            ..Default::default()
        };
        within(ch.queue_declare("ad".into(), ad, FieldTable::default()))
            .await
            .expect("ad");
        // Recreated with the same name: must start empty after the restart.
        within(ch.queue_declare("gone".into(), durable_q(), FieldTable::default()))
            .await
            .expect("again");
    }
    let b = b.restart().await;
    assert!(!exists_exchange(&b, "gx").await);
    assert!(
        exists_queue(&b, "ad").await,
        "a durable auto-delete queue is recovered"
    );
    let (_c, ch) = b.channel().await;
    assert!(drain(&ch, "gone").await.is_empty());
}

#[tokio::test]
async fn large_persistent_bodies_round_trip() {
    let b = start().await;
    let big: Vec<u8> = (0..8_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    {
        let (_c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        within(ch.queue_declare("big".into(), durable_q(), FieldTable::default()))
            .await
            .expect("q");
        publish_confirmed(&ch, "", "big", &big, persistent()).await;
        publish_confirmed(&ch, "", "big", b"", persistent()).await;
    }
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    let got = drain(&ch, "big").await;
    assert_eq!(got.len(), 2);
    assert!(got[0].delivery.data == big, "large body changed");
    assert!(got[1].delivery.data.is_empty());
}

#[tokio::test]
async fn message_larger_than_max_message_size_is_406() {
    let b = start_with(|c| c.max_message_size = 1024).await;
    let (c, ch) = b.channel().await;
    within(ch.queue_declare("q".into(), durable_q(), FieldTable::default()))
        .await
        .expect("q");
    assert_eq!(
        publish_error(&ch, "", "q", &[0u8; 1025], persistent()).await,
        Some(406)
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_eq!(
        publish_error(&ch, "", "q", &[0u8; 1024], persistent()).await,
        None
    );
}

async fn start_error(dir: &std::path::Path) -> String {
    let config = Config {
        amqp_listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.to_owned(),
        ..Config::default()
    };
    match Server::start(config).await {
        Ok(_) => panic!("broker started on an unusable data dir"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn unusable_data_dirs_are_refused_with_a_one_line_error() {
    // Locked by a running broker.
    let b = start().await;
    let e = start_error(b.dir.path()).await;
    assert!(e.contains("locked by another Warren"), "{e}");
    assert!(e.contains(&b.dir.path().display().to_string()), "{e}");
    assert!(!e.contains('\n'));
    // Not a directory.
    let file = tempfile::NamedTempFile::new().expect("file");
    let e = start_error(file.path()).await;
    assert!(e.contains("cannot open store"), "{e}");
    // Written by a newer schema.
    let dir = tempfile::tempdir().expect("dir");
    {
        let db = redb::Database::create(dir.path().join(warren::store::DB_FILE)).expect("db");
        let txn = db.begin_write().expect("txn");
        txn.open_table(warren::store::schema::META)
            .expect("meta")
            .insert("schema_version", warren::store::schema::SCHEMA_VERSION + 1)
            .expect("insert");
        txn.commit().expect("commit");
    }
    let e = start_error(dir.path()).await;
    assert!(e.contains("newer"), "{e}");
}

#[tokio::test]
async fn a_message_of_the_maximum_size_persists_byte_exact() {
    let b = start().await;
    let max = Config::default().max_message_size as usize;
    let body: Vec<u8> = (0..max).map(|i| (i % 253) as u8).collect();
    {
        let (_c, ch) = b.channel().await;
        within(ch.confirm_select(Default::default()))
            .await
            .expect("confirm");
        within(ch.queue_declare("max".into(), durable_q(), FieldTable::default()))
            .await
            .expect("q");
        let confirm = tokio::time::timeout(
            std::time::Duration::from_secs(120),
            ch.basic_publish(
                "".into(),
                "max".into(),
                Default::default(),
                &body,
                persistent(),
            ),
        )
        .await
        .expect("publish in time")
        .expect("publish");
        let confirmed = tokio::time::timeout(std::time::Duration::from_secs(120), confirm)
            .await
            .expect("confirm in time")
            .expect("confirm");
        assert!(confirmed.is_ack());
    }
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    let got = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        ch.basic_get("max".into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("get in time")
    .expect("get")
    .expect("message");
    assert_eq!(got.delivery.data.len(), max);
    assert!(got.delivery.data == body, "body changed");
}

#[tokio::test]
async fn passwords_are_stored_as_rabbitmq_sha256_hashes() {
    let b = start_with(|c| c.default_pass = "s3cret-pass".into()).await;
    let dir = b.dir.path().to_owned();
    let TestBroker { server, dir: tmp } = b;
    within(server.shutdown()).await;
    {
        use redb::ReadableDatabase;
        let db = redb::Database::create(dir.join(warren::store::DB_FILE)).expect("db");
        let txn = db.begin_read().expect("read");
        let users = txn.open_table(warren::store::schema::USERS).expect("users");
        let value = users
            .get("guest")
            .expect("get")
            .expect("guest stored")
            .value()
            .to_vec();
        assert!(
            !value.windows(11).any(|w| w == b"s3cret-pass"),
            "plain-text password in the store"
        );
        let parts = warren::store::schema::decode_parts(&value).expect("parts");
        let user = warren::auth::User::with_hash(
            "guest",
            std::str::from_utf8(parts[0]).expect("utf8"),
            &[],
        )
        .expect("a rabbit_password_hashing_sha256 hash");
        assert!(user.password_matches("s3cret-pass"));
    }
    let config = Config {
        amqp_listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: "127.0.0.1:0".parse().expect("addr"),
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.clone(),
        ..Config::default()
    };
    let server = Server::start(config).await.expect("restart");
    let url = format!("amqp://guest:s3cret-pass@{}/%2f", server.amqp_addr);
    within(lapin::Connection::connect(&url, Default::default()))
        .await
        .expect("login with the stored hash");
    drop(tmp);
}
