//! Exchanges: predeclared ones, declare/redeclare rules, reserved names, deletion, internal and
//! auto-delete exchanges, exchange-to-exchange bindings, and routing for every type.

mod common;

use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

async fn declare_x(
    ch: &Channel,
    name: &str,
    kind: ExchangeKind,
    o: ExchangeDeclareOptions,
) -> Result<(), lapin::Error> {
    within(ch.exchange_declare(name.into(), kind, o, FieldTable::default())).await
}

async fn queue(ch: &Channel, name: &str) {
    within(ch.queue_declare(
        name.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("queue declare");
}

async fn bind(ch: &Channel, q: &str, x: &str, key: &str, args: FieldTable) {
    within(ch.queue_bind(
        q.into(),
        x.into(),
        key.into(),
        QueueBindOptions::default(),
        args,
    ))
    .await
    .expect("bind");
}

async fn publish(ch: &Channel, x: &str, key: &str, headers: Option<FieldTable>) {
    let mut props = BasicProperties::default();
    if let Some(h) = headers {
        props = props.with_headers(h);
    }
    within(ch.basic_publish(
        x.into(),
        key.into(),
        BasicPublishOptions::default(),
        b"m",
        props,
    ))
    .await
    .expect("publish");
}

async fn count(ch: &Channel, q: &str) -> u32 {
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("passive declare")
    .message_count()
}

/// Publishing is asynchronous: a round trip on the same channel orders it before the count.
async fn counts(ch: &Channel, qs: &[&str]) -> Vec<u32> {
    let mut v = Vec::new();
    for q in qs {
        v.push(count(ch, q).await);
    }
    v
}

fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

#[tokio::test]
async fn predeclared_exchanges_exist() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    for x in [
        "amq.direct",
        "amq.fanout",
        "amq.topic",
        "amq.headers",
        "amq.match",
    ] {
        declare_x(&ch, x, ExchangeKind::Direct, passive)
            .await
            .expect(x);
    }
    // Redeclaring one with its own properties is fine.
    declare_x(
        &ch,
        "amq.direct",
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
    )
    .await
    .expect("equivalent redeclare");
}

#[tokio::test]
async fn default_exchange_cannot_be_declared_deleted_or_bound() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    assert_code(
        declare_x(&ch, "", ExchangeKind::Direct, Default::default()).await,
        403,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        within(ch.exchange_delete("".into(), Default::default())).await,
        403,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    queue(&ch, "q").await;
    assert_code(
        within(ch.queue_bind(
            "q".into(),
            "".into(),
            "q".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        403,
    );
}

#[tokio::test]
async fn reserved_names_unknown_types_and_inequivalent_redeclares() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    assert_code(
        declare_x(&ch, "amq.custom", ExchangeKind::Direct, Default::default()).await,
        403,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        declare_x(
            &ch,
            "x",
            ExchangeKind::Custom("x-nonsense".into()),
            Default::default(),
        )
        .await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    declare_x(&ch, "x", ExchangeKind::Direct, Default::default())
        .await
        .expect("declare");
    declare_x(&ch, "x", ExchangeKind::Direct, Default::default())
        .await
        .expect("same again");
    assert_code(
        declare_x(&ch, "x", ExchangeKind::Fanout, Default::default()).await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        declare_x(
            &ch,
            "x",
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
        )
        .await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    assert_code(
        declare_x(
            &ch,
            "nope",
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .await,
        404,
    );
    // The connection survived all of those channel errors.
    let ch = within(c.create_channel()).await.expect("channel");
    declare_x(
        &ch,
        "x",
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
    )
    .await
    .expect("still there");
}

#[tokio::test]
async fn delete_if_unused_and_system_exchanges() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    declare_x(&ch, "x", ExchangeKind::Direct, Default::default())
        .await
        .expect("declare");
    queue(&ch, "q").await;
    bind(&ch, "q", "x", "k", FieldTable::default()).await;
    assert_code(
        within(ch.exchange_delete(
            "x".into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        ))
        .await,
        406,
    );
    let ch = within(c.create_channel()).await.expect("channel");
    within(ch.exchange_delete("x".into(), Default::default()))
        .await
        .expect("delete");
    // Deleting a missing exchange is fine (RabbitMQ 3.13).
    within(ch.exchange_delete("x".into(), Default::default()))
        .await
        .expect("idempotent");
    assert_code(
        within(ch.exchange_delete("amq.direct".into(), Default::default())).await,
        403,
    );
}

#[tokio::test]
async fn publishing_to_missing_or_internal_exchange() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    assert_eq!(
        publish_error(&ch, "nope", "k", b"m", Default::default()).await,
        Some(404)
    );
    let ch = within(c.create_channel()).await.expect("channel");
    declare_x(
        &ch,
        "ix",
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            internal: true,
            ..Default::default()
        },
    )
    .await
    .expect("declare internal");
    assert_eq!(
        publish_error(&ch, "ix", "k", b"m", Default::default()).await,
        Some(403)
    );
}

#[tokio::test]
async fn direct_fanout_and_default_routing() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    for q in ["a", "b"] {
        queue(&ch, q).await;
    }
    bind(&ch, "a", "amq.direct", "ka", FieldTable::default()).await;
    bind(&ch, "b", "amq.direct", "kb", FieldTable::default()).await;
    bind(&ch, "a", "amq.fanout", "", FieldTable::default()).await;
    bind(&ch, "b", "amq.fanout", "whatever", FieldTable::default()).await;
    publish(&ch, "amq.direct", "ka", None).await;
    publish(&ch, "amq.direct", "kb", None).await;
    publish(&ch, "amq.direct", "kc", None).await;
    publish(&ch, "amq.fanout", "zzz", None).await;
    publish(&ch, "", "b", None).await;
    assert_eq!(counts(&ch, &["a", "b"]).await, vec![2, 3]);
}

#[tokio::test]
async fn topic_routing_follows_rabbitmq_word_rules() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let cases: &[(&str, &str)] = &[
        ("star", "a.*.c"),
        ("hash", "a.#"),
        ("all", "#"),
        ("exact", "a.b.c"),
        ("empty", ""),
        ("mid", "*.b.#"),
    ];
    for (q, pattern) in cases {
        queue(&ch, q).await;
        bind(&ch, q, "amq.topic", pattern, FieldTable::default()).await;
    }
    for key in ["a.b.c", "a", "a.b", "x.b", "", "a..c", "a.b.c.d"] {
        publish(&ch, "amq.topic", key, None).await;
    }
    let names: Vec<&str> = cases.iter().map(|(q, _)| *q).collect();
    // star: a.b.c, a..c; hash: a.b.c, a, a.b, a..c, a.b.c.d; all: 7; exact: a.b.c;
    // empty: ""; mid: a.b.c, a.b, x.b, a.b.c.d
    assert_eq!(counts(&ch, &names).await, vec![2, 5, 7, 1, 1, 4]);
}

#[tokio::test]
async fn headers_routing_all_any_and_with_x() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    let s = |v: &str| AMQPValue::LongString(v.into());
    for q in ["all", "any", "allx", "anyx"] {
        queue(&ch, q).await;
    }
    bind(
        &ch,
        "all",
        "amq.headers",
        "",
        table(&[
            ("x-match", s("all")),
            ("a", s("1")),
            ("b", AMQPValue::LongInt(2)),
        ]),
    )
    .await;
    bind(
        &ch,
        "any",
        "amq.headers",
        "",
        table(&[
            ("x-match", s("any")),
            ("a", s("1")),
            ("b", AMQPValue::LongInt(2)),
        ]),
    )
    .await;
    bind(
        &ch,
        "allx",
        "amq.match",
        "",
        table(&[("x-match", s("all-with-x")), ("x-k", s("v"))]),
    )
    .await;
    bind(
        &ch,
        "anyx",
        "amq.match",
        "",
        table(&[("x-match", s("any-with-x")), ("x-k", s("v")), ("z", s("z"))]),
    )
    .await;
    publish(
        &ch,
        "amq.headers",
        "",
        Some(table(&[("a", s("1")), ("b", AMQPValue::ShortShortInt(2))])),
    )
    .await;
    publish(&ch, "amq.headers", "", Some(table(&[("a", s("1"))]))).await;
    publish(
        &ch,
        "amq.headers",
        "",
        Some(table(&[("b", AMQPValue::LongString("2".into()))])),
    )
    .await;
    publish(&ch, "amq.headers", "", None).await;
    publish(&ch, "amq.match", "", Some(table(&[("x-k", s("v"))]))).await;
    assert_eq!(
        counts(&ch, &["all", "any", "allx", "anyx"]).await,
        vec![1, 2, 1, 1]
    );
    assert_code(
        within(ch.queue_bind(
            "all".into(),
            "amq.headers".into(),
            "".into(),
            Default::default(),
            table(&[("x-match", s("most"))]),
        ))
        .await,
        406,
    );
    drop(c);
}

#[tokio::test]
async fn exchange_to_exchange_bindings_route_once_per_queue() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare_x(&ch, "src", ExchangeKind::Fanout, Default::default())
        .await
        .expect("src");
    declare_x(&ch, "mid", ExchangeKind::Direct, Default::default())
        .await
        .expect("mid");
    queue(&ch, "q").await;
    within(ch.exchange_bind(
        "mid".into(),
        "src".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("e2e bind");
    // A cycle must not loop forever.
    within(ch.exchange_bind(
        "src".into(),
        "mid".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("cycle bind");
    bind(&ch, "q", "mid", "k", FieldTable::default()).await;
    bind(&ch, "q", "src", "", FieldTable::default()).await;
    publish(&ch, "src", "k", None).await;
    assert_eq!(count(&ch, "q").await, 1, "reached twice but delivered once");
    within(ch.exchange_unbind(
        "mid".into(),
        "src".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("unbind");
    assert_code(
        within(ch.exchange_bind(
            "mid".into(),
            "nope".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await,
        404,
    );
}

#[tokio::test]
async fn auto_delete_exchange_goes_with_its_last_binding() {
    let b = start().await;
    let (c, ch) = b.channel().await;
    let auto = ExchangeDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare_x(&ch, "ad", ExchangeKind::Direct, auto)
        .await
        .expect("declare");
    declare_x(&ch, "never-bound", ExchangeKind::Direct, auto)
        .await
        .expect("declare");
    queue(&ch, "q").await;
    bind(&ch, "q", "ad", "k1", FieldTable::default()).await;
    bind(&ch, "q", "ad", "k2", FieldTable::default()).await;
    within(ch.queue_unbind("q".into(), "ad".into(), "k1".into(), FieldTable::default()))
        .await
        .expect("unbind 1");
    let passive = ExchangeDeclareOptions {
        passive: true,
        auto_delete: true,
        ..Default::default()
    };
    declare_x(&ch, "ad", ExchangeKind::Direct, passive)
        .await
        .expect("still has a binding");
    within(ch.queue_unbind("q".into(), "ad".into(), "k2".into(), FieldTable::default()))
        .await
        .expect("unbind 2");
    declare_x(&ch, "never-bound", ExchangeKind::Direct, passive)
        .await
        .expect("never bound stays");
    assert_code(
        declare_x(&ch, "ad", ExchangeKind::Direct, passive).await,
        404,
    );
    // Deleting the queue of the last binding also removes the exchange.
    let ch = within(c.create_channel()).await.expect("channel");
    declare_x(&ch, "ad2", ExchangeKind::Fanout, auto)
        .await
        .expect("declare");
    bind(&ch, "q", "ad2", "", FieldTable::default()).await;
    within(ch.queue_delete("q".into(), Default::default()))
        .await
        .expect("delete q");
    assert_code(
        declare_x(&ch, "ad2", ExchangeKind::Fanout, passive).await,
        404,
    );
}

#[tokio::test]
async fn publishing_follows_deleted_and_redeclared_entities() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    // The connection caches the last exchange and default-exchange queue; deletion must show.
    queue(&ch, "q").await;
    publish(&ch, "", "q", None).await;
    within(ch.queue_delete("q".into(), Default::default()))
        .await
        .expect("delete");
    queue(&ch, "q").await;
    publish(&ch, "", "q", None).await;
    assert_eq!(count(&ch, "q").await, 1, "the new queue got the message");
    declare_x(&ch, "x", ExchangeKind::Fanout, Default::default())
        .await
        .expect("x");
    queue(&ch, "a").await;
    bind(&ch, "a", "x", "", FieldTable::default()).await;
    publish(&ch, "x", "k", None).await;
    within(ch.exchange_delete("x".into(), Default::default()))
        .await
        .expect("delete x");
    declare_x(&ch, "x", ExchangeKind::Direct, Default::default())
        .await
        .expect("x again");
    publish(&ch, "x", "k", None).await;
    assert_eq!(
        count(&ch, "a").await,
        1,
        "the new exchange has no binding to a"
    );
}
