//! Permissions set over the management API and enforced on AMQP operations with RabbitMQ's
//! codes and texts: vhost access at connection.open (530), configure/write/read per resource
//! (403), topic permissions on publishes to topic exchanges (403), persistence across restarts.

mod common;

use common::http::request;
use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

async fn put(b: &TestBroker, path: &str, body: &str) -> u16 {
    request(b.server.http_addr, "PUT", path, ADMIN, Some(body))
        .await
        .status
}

/// Creates user `name` (password `pw`) with the given patterns on vhost `/`.
async fn user_with(b: &TestBroker, name: &str, configure: &str, write: &str, read: &str) {
    assert_eq!(
        put(
            b,
            &format!("/api/users/{name}"),
            r#"{"password":"pw","tags":""}"#
        )
        .await,
        201
    );
    let body = serde_json::json!({"configure": configure, "write": write, "read": read});
    assert_eq!(
        put(
            b,
            &format!("/api/permissions/%2F/{name}"),
            &body.to_string()
        )
        .await,
        201
    );
}

async fn channel_as(b: &TestBroker, name: &str) -> (lapin::Connection, Channel) {
    let c = b.connect_as(name, "pw").await.expect("connect");
    let ch = within(c.create_channel()).await.expect("channel");
    (c, ch)
}

/// Asserts a 403 with RabbitMQ's text.
fn refused<T: std::fmt::Debug>(r: lapin::Result<T>, text: &str) {
    match r {
        Ok(v) => panic!("expected 403 ({text}), got {v:?}"),
        Err(e) => {
            assert_eq!(code(&e), Some(403), "{e}");
            assert!(e.to_string().contains(text), "{e} lacks {text}");
        }
    }
}

#[tokio::test]
async fn a_user_without_permissions_on_the_vhost_is_refused_at_open() {
    let b = start_with(|c| c.loopback_users = vec![]).await;
    assert_eq!(
        put(&b, "/api/users/nobody", r#"{"password":"pw","tags":""}"#).await,
        201
    );
    match b.connect_as("nobody", "pw").await {
        Err(e) => {
            assert_eq!(code(&e), Some(530), "{e}");
            assert!(
                e.to_string()
                    .contains("access to vhost '/' refused for user 'nobody'"),
                "{e}"
            );
        }
        Ok(_) => panic!("connected without permissions"),
    }
}

#[tokio::test]
async fn configure_write_and_read_are_enforced_per_resource() {
    let b = start().await;
    let (_g, admin) = b.channel().await;
    within(admin.queue_declare(
        "shared".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("shared");
    user_with(&b, "bob", "^bob\\.", "^bob\\.", "^bob\\.").await;

    let (_c, ch) = channel_as(&b, "bob").await;
    within(ch.queue_declare(
        "bob.q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bob may configure bob.*");
    let (_c, ch) = channel_as(&b, "bob").await;
    refused(
        within(ch.queue_declare(
            "other".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ))
        .await,
        "access to queue 'other' in vhost '/' refused for user 'bob'",
    );
    // Publishing through the default exchange needs write on amq.default.
    let (_c, ch) = channel_as(&b, "bob").await;
    let _ = within(ch.basic_publish(
        "".into(),
        "bob.q".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default(),
    ))
    .await;
    let closed = within(async {
        loop {
            if !ch.status().connected() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    closed.await;
    // Reading someone else's queue.
    let (_c, ch) = channel_as(&b, "bob").await;
    refused(
        within(ch.basic_get("shared".into(), BasicGetOptions::default())).await,
        "access to queue 'shared' in vhost '/' refused for user 'bob'",
    );
    // Binding needs read on the source exchange.
    let (_c, ch) = channel_as(&b, "bob").await;
    refused(
        within(ch.queue_bind(
            "bob.q".into(),
            "amq.topic".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ))
        .await,
        "access to exchange 'amq.topic' in vhost '/' refused for user 'bob'",
    );
    // Deleting needs configure.
    let (_c, ch) = channel_as(&b, "bob").await;
    refused(
        within(ch.queue_delete("shared".into(), QueueDeleteOptions::default())).await,
        "access to queue 'shared' in vhost '/' refused for user 'bob'",
    );
    // The admin's own queue is untouched and bob's publish never reached bob.q.
    let q = within(admin.queue_declare(
        "bob.q".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("bob.q exists");
    assert_eq!(q.message_count(), 0);
}

#[tokio::test]
async fn publishing_to_a_refused_exchange_closes_the_channel_with_403() {
    let b = start().await;
    user_with(&b, "carol", ".*", "^amq\\.topic$", ".*").await;
    let (_c, ch) = channel_as(&b, "carol").await;
    within(ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirms");
    let r = within(async {
        ch.basic_publish(
            "amq.direct".into(),
            "k".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await?
        .await
    })
    .await;
    refused(
        r,
        "access to exchange 'amq.direct' in vhost '/' refused for user 'carol'",
    );
}

#[tokio::test]
async fn topic_permissions_limit_routing_keys_and_persist() {
    let b = start().await;
    user_with(&b, "dave", ".*", ".*", ".*").await;
    let body = r#"{"exchange":"amq.topic","write":"^{username}\\.","read":".*"}"#;
    assert_eq!(put(&b, "/api/topic-permissions/%2F/dave", body).await, 201);
    let listed = request(
        b.server.http_addr,
        "GET",
        "/api/topic-permissions",
        ADMIN,
        None,
    )
    .await
    .json();
    assert_eq!(listed[0]["exchange"], "amq.topic");
    assert_eq!(listed[0]["write"], "^{username}\\.");
    let publish = |ch: Channel, key: &'static str| async move {
        within(ch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .expect("confirms");
        within(async {
            ch.basic_publish(
                "amq.topic".into(),
                key.into(),
                BasicPublishOptions::default(),
                b"x",
                BasicProperties::default(),
            )
            .await?
            .await
        })
        .await
    };
    let (_c, ch) = channel_as(&b, "dave").await;
    publish(ch, "dave.orders").await.expect("own prefix");
    let (_c, ch) = channel_as(&b, "dave").await;
    refused(
        publish(ch, "erin.orders").await,
        "write access to topic 'erin.orders' in exchange 'amq.topic' in vhost '/' refused for user 'dave'",
    );
    // Other exchanges are not restricted by it.
    let (_c, ch) = channel_as(&b, "dave").await;
    within(async {
        ch.basic_publish(
            "amq.direct".into(),
            "erin.orders".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
    })
    .await
    .expect("amq.direct is not topic-restricted");
    // Permissions survive a restart; removing the vhost permission refuses new connections.
    let b = b.restart().await;
    let (_c, ch) = channel_as(&b, "dave").await;
    refused(
        publish(ch, "erin.orders").await,
        "write access to topic 'erin.orders'",
    );
    let r = request(
        b.server.http_addr,
        "DELETE",
        "/api/permissions/%2F/dave",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    let e = b
        .connect_as("dave", "pw")
        .await
        .expect_err("no vhost access");
    assert_eq!(code(&e), Some(530));
}

#[tokio::test]
async fn forwarding_targets_and_topic_binds_are_checked_as_in_rabbitmq() {
    let b = start().await;
    // frank may configure and read anything, but write only to "ok-*".
    user_with(&b, "frank", ".*", "^ok-", ".*").await;
    let mut dlx = FieldTable::default();
    dlx.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("secret".into()),
    );
    let (_c, ch) = channel_as(&b, "frank").await;
    refused(
        within(ch.queue_declare("ok-q".into(), QueueDeclareOptions::default(), dlx.clone())).await,
        "access to exchange 'secret' in vhost '/' refused for user 'frank'",
    );
    let mut ok_dlx = FieldTable::default();
    ok_dlx.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("ok-dlx".into()),
    );
    let (_c, ch) = channel_as(&b, "frank").await;
    within(ch.queue_declare("ok-q".into(), QueueDeclareOptions::default(), ok_dlx))
        .await
        .expect("a dead-letter exchange frank may write to");
    let mut ae = FieldTable::default();
    ae.insert(
        "alternate-exchange".into(),
        AMQPValue::LongString("secret".into()),
    );
    refused(
        within(ch.exchange_declare(
            "ok-x".into(),
            lapin::ExchangeKind::Direct,
            Default::default(),
            ae,
        ))
        .await,
        "access to exchange 'secret' in vhost '/' refused for user 'frank'",
    );
    // Topic read permissions restrict binding keys on topic exchanges.
    let body = r#"{"exchange":"amq.topic","write":".*","read":"^public\\."}"#;
    assert_eq!(put(&b, "/api/topic-permissions/%2F/frank", body).await, 201);
    let (_c, ch) = channel_as(&b, "frank").await;
    within(ch.queue_declare(
        "ok-mine".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    within(ch.queue_bind(
        "ok-mine".into(),
        "amq.topic".into(),
        "public.news".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("an allowed key");
    refused(
        within(ch.queue_bind("ok-mine".into(), "amq.topic".into(), "private.#".into(), Default::default(), FieldTable::default())).await,
        "read access to topic 'private.#' in exchange 'amq.topic' in vhost '/' refused for user 'frank'",
    );
}
