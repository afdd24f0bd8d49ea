//! Policies and operator policies set over the management API and seen in AMQP behaviour:
//! applied to future and existing queues and exchanges, combined with queue arguments as
//! RabbitMQ combines them, shown on queues, persisted across a restart; runtime and global
//! parameters; RabbitMQ's validation texts and access rules.

mod common;

use common::http::request;
use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::{json, Value};

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

async fn put(b: &TestBroker, path: &str, body: Value) -> (u16, Value) {
    let r = request(
        b.server.http_addr,
        "PUT",
        path,
        ADMIN,
        Some(&body.to_string()),
    )
    .await;
    let json = if r.body.is_empty() {
        Value::Null
    } else {
        r.json()
    };
    (r.status, json)
}

async fn get(b: &TestBroker, path: &str) -> Value {
    let r = request(b.server.http_addr, "GET", path, ADMIN, None).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.json()
}

/// Publishes `n` messages to a queue with confirms; returns how many were acked.
async fn publish_confirmed(ch: &lapin::Channel, queue: &str, n: usize) -> usize {
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let mut acked = 0;
    for i in 0..n {
        let c = within(ch.basic_publish(
            "".into(),
            queue.into(),
            Default::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
        if within(c).await.expect("confirm").is_ack() {
            acked += 1;
        }
    }
    acked
}

async fn declare(ch: &lapin::Channel, queue: &str, args: FieldTable) {
    within(ch.queue_declare(queue.into(), QueueDeclareOptions::default(), args))
        .await
        .expect("declare");
}

#[tokio::test]
async fn a_policy_limits_future_and_existing_queues() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    declare(&ch, "jobs.old", FieldTable::default()).await;
    assert_eq!(publish_confirmed(&ch, "jobs.old", 5).await, 5);
    let (status, _) = put(
        &b,
        "/api/policies/%2F/cap",
        json!({"pattern": "^jobs\\.", "definition": {"max-length": 2}, "apply-to": "queues"}),
    )
    .await;
    assert_eq!(status, 201);
    // The existing queue drops its oldest messages down to the new limit at once.
    within(async {
        while ready(&ch, "jobs.old").await != 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let got = within(ch.basic_get("jobs.old".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("a message");
    assert_eq!(got.delivery.data, b"m3");
    // A queue declared later gets it too, and the API shows what applies.
    declare(&ch, "jobs.new", FieldTable::default()).await;
    let (_c2, ch2) = b.channel().await;
    assert_eq!(publish_confirmed(&ch2, "jobs.new", 4).await, 4);
    assert_eq!(ready(&ch, "jobs.new").await, 2);
    let q = get(&b, "/api/queues/%2F/jobs.new").await;
    assert_eq!(q["policy"], "cap");
    assert_eq!(q["operator_policy"], Value::Null);
    assert_eq!(q["effective_policy_definition"], json!({"max-length": 2}));
    // Not matching: untouched.
    declare(&ch, "other", FieldTable::default()).await;
    let q = get(&b, "/api/queues/%2F/other").await;
    assert_eq!(q["policy"], Value::Null);
    assert_eq!(q["effective_policy_definition"], json!({}));
    // Priority picks between overlapping policies; a replaced policy applies at once.
    let (status, _) = put(
        &b,
        "/api/policies/%2F/reject",
        json!({"pattern": "^jobs\\.new$", "priority": 5,
               "definition": {"max-length": 3, "overflow": "reject-publish"}}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(
        get(&b, "/api/queues/%2F/jobs.new").await["policy"],
        "reject"
    );
    let (_c3, ch3) = b.channel().await;
    assert_eq!(publish_confirmed(&ch3, "jobs.new", 3).await, 1);
    assert_eq!(ready(&ch, "jobs.new").await, 3);
    // Deleting the policy hands the queue back to the lower-priority one.
    let r = request(
        b.server.http_addr,
        "DELETE",
        "/api/policies/%2F/reject",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(get(&b, "/api/queues/%2F/jobs.new").await["policy"], "cap");
    assert_eq!(ready(&ch, "jobs.new").await, 2);
}

#[tokio::test]
async fn arguments_and_policies_combine_as_in_rabbitmq() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    for q in ["dead.arg", "dead.policy"] {
        declare(&ch, q, FieldTable::default()).await;
    }
    for (q, key) in [("dead.arg", "arg"), ("dead.policy", "policy")] {
        within(ch.queue_bind(
            q.into(),
            "amq.direct".into(),
            key.into(),
            Default::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind");
    }
    put(
        &b,
        "/api/policies/%2F/ttl",
        json!({"pattern": "^work$", "definition": {
            "message-ttl": 100, "max-length": 100,
            "dead-letter-exchange": "amq.direct", "dead-letter-routing-key": "policy"}}),
    )
    .await;
    // The argument wins for the dead-letter keys; the lower value wins for limits.
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString("arg".into()),
    );
    args.insert("x-max-length".into(), AMQPValue::LongInt(1));
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(60_000));
    declare(&ch, "work", args).await;
    assert_eq!(publish_confirmed(&ch, "work", 2).await, 2);
    // One message dead-lettered by max-length (1 < 100), then the other by the TTL (100 ms < 60 s).
    within(async {
        while ready(&ch, "dead.arg").await != 2 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(ready(&ch, "dead.policy").await, 0);
    assert_eq!(ready(&ch, "work").await, 0);
}

#[tokio::test]
async fn operator_policies_merge_with_the_lower_limit() {
    let b = start().await;
    put(
        &b,
        "/api/policies/%2F/user",
        json!({"pattern": ".*", "definition": {"max-length": 10, "message-ttl": 60000}}),
    )
    .await;
    let (status, _) = put(
        &b,
        "/api/operator-policies/%2F/ops",
        json!({"pattern": ".*", "definition": {"max-length": 3, "expires": 3600000}}),
    )
    .await;
    assert_eq!(status, 201);
    let (_c, ch) = b.channel().await;
    declare(&ch, "q", FieldTable::default()).await;
    assert_eq!(publish_confirmed(&ch, "q", 6).await, 6);
    assert_eq!(ready(&ch, "q").await, 3);
    let q = get(&b, "/api/queues/%2F/q").await;
    assert_eq!(q["policy"], "user");
    assert_eq!(q["operator_policy"], "ops");
    assert_eq!(
        q["effective_policy_definition"],
        json!({"max-length": 3, "message-ttl": 60000, "expires": 3600000})
    );
    // Operator policies only take the keys RabbitMQ allows them.
    let (status, body) = put(
        &b,
        "/api/operator-policies/%2F/bad",
        json!({"pattern": ".*", "definition": {"dead-letter-exchange": "x"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body["reason"],
        "Validation failed\n\n[{<<\"dead-letter-exchange\">>,<<\"x\">>}] are not recognised policy settings\n"
    );
    let listed = get(&b, "/api/parameters").await;
    assert_eq!(listed[0]["component"], "operator_policy");
    assert_eq!(listed[0]["value"]["definition"]["max-length"], 3);
}

#[tokio::test]
async fn an_alternate_exchange_policy_catches_unroutable_messages() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.exchange_declare(
        "orders".into(),
        lapin::ExchangeKind::Direct,
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("exchange");
    within(ch.exchange_declare(
        "unrouted".into(),
        lapin::ExchangeKind::Fanout,
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("ae");
    declare(&ch, "lost", FieldTable::default()).await;
    within(ch.queue_bind(
        "lost".into(),
        "unrouted".into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    put(
        &b,
        "/api/policies/%2F/ae",
        json!({"pattern": "^orders$", "apply-to": "exchanges", "definition": {"alternate-exchange": "unrouted"}}),
    )
    .await;
    assert_eq!(get(&b, "/api/exchanges/%2F/orders").await["policy"], "ae");
    assert!(get(&b, "/api/exchanges/%2F/unrouted")
        .await
        .get("policy")
        .is_none());
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm");
    within(
        within(ch.basic_publish(
            "orders".into(),
            "nobody".into(),
            Default::default(),
            b"x",
            BasicProperties::default(),
        ))
        .await
        .expect("publish"),
    )
    .await
    .expect("confirm");
    assert_eq!(ready(&ch, "lost").await, 1);
}

#[tokio::test]
async fn policies_and_global_parameters_survive_a_restart() {
    let b = start().await;
    put(
        &b,
        "/api/policies/%2F/cap",
        json!({"pattern": "^q$", "definition": {"max-length": 1}}),
    )
    .await;
    put(
        &b,
        "/api/global-parameters/region",
        json!({"value": {"name": "eu"}}),
    )
    .await;
    {
        let (_c, ch) = b.channel().await;
        within(ch.queue_declare(
            "q".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        ))
        .await
        .expect("declare");
    }
    let id = get(&b, "/api/global-parameters/internal_cluster_id").await["value"].clone();
    assert!(id
        .as_str()
        .is_some_and(|s| s.starts_with("rabbitmq-cluster-id-")));
    let b = b.restart().await;
    let (_c, ch) = b.channel().await;
    assert_eq!(publish_confirmed(&ch, "q", 3).await, 3);
    assert_eq!(ready(&ch, "q").await, 1);
    assert_eq!(
        get(&b, "/api/policies/%2F/cap").await["definition"]["max-length"],
        1
    );
    let globals = get(&b, "/api/global-parameters").await;
    assert_eq!(
        globals,
        json!([{"name": "internal_cluster_id", "value": id}, {"name": "region", "value": {"name": "eu"}}])
    );
    let r = request(
        b.server.http_addr,
        "DELETE",
        "/api/global-parameters/region",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    let r = request(
        b.server.http_addr,
        "DELETE",
        "/api/global-parameters/region",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn bad_policies_get_rabbitmqs_answers() {
    let b = start().await;
    let cases = [
        (json!({"pattern": ".*", "definition": {"max-length": -5}}),
         "Validation failed\n\n-5 is not a valid maximum length\n"),
        (json!({"pattern": ".*", "definition": {"expires": 0}}),
         "Validation failed\n\n0 is not a valid queue expiry\n"),
        (json!({"pattern": ".*", "definition": {"message-ttl": "5"}}),
         "Validation failed\n\n&lt;&lt;\"5\"&gt;&gt; is not a valid message TTL\n"),
        (json!({"pattern": ".*", "definition": {"dead-letter-strategy": "foo"}}),
         "Validation failed\n\n&lt;&lt;\"foo\"&gt;&gt; is not a valid dead letter strategy\n"),
        (json!({"pattern": ".*", "definition": {"dead-letter-strategy": 5}}),
         "Validation failed\n\n5 is not a valid dead letter strategy\n"),
        (json!({"pattern": ".*", "definition": {}}), "Validation failed\n\nno policy provided\n"),
        (json!({"pattern": ".*", "definition": {"foo": 1, "bar": 2}}),
         "Validation failed\n\n[{&lt;&lt;\"bar\"&gt;&gt;,2},{&lt;&lt;\"foo\"&gt;&gt;,1}] are not recognised policy settings\n"),
        (json!({"pattern": ".*", "definition": {"max-length": 1}, "priority": "3"}),
         "Validation failed\n\npriority should be a number, actually was &lt;&lt;\"3\"&gt;&gt;\n"),
        (json!({"definition": {"max-length": 1}}), "[{key_missing,pattern}]"),
        (json!({"pattern": ".*"}), "[{key_missing,definition}]"),
    ];
    for (body, reason) in cases {
        let (status, json) = put(&b, "/api/policies/%2F/p", body.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(json["error"], "bad_request");
        assert_eq!(json["reason"], reason, "{body}");
    }
    let (status, json) = put(
        &b,
        "/api/policies/%2F/p",
        json!({"pattern": "(", "definition": {"max-length": 1}}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(json["reason"].as_str().is_some_and(
        |r| r.starts_with("Validation failed\n\npattern should be regular expression")
    ));
    let (status, json) = put(
        &b,
        "/api/policies/nope/p",
        json!({"pattern": ".*", "definition": {"max-length": 1}}),
    )
    .await;
    assert_eq!(
        (status, json),
        (
            404,
            json!({"error": "not_found", "reason": "vhost_not_found"})
        )
    );
    assert_eq!(get(&b, "/api/policies").await, json!([]));
    // A plugin key RabbitMQ knows is accepted (so exported definitions import).
    let (status, _) = put(
        &b,
        "/api/policies/%2F/ha",
        json!({"pattern": ".*", "definition": {"ha-mode": "all"}}),
    )
    .await;
    assert_eq!(status, 201);
    let path = "/api/parameters/no-such-component/%2F/s";
    let (status, json) = put(&b, path, json!({"value": {}})).await;
    assert_eq!(status, 400);
    assert_eq!(
        json["reason"],
        "Validation failed\n\ncomponent no-such-component not found\n"
    );
}

#[tokio::test]
async fn policy_access_follows_user_tags() {
    let b = start().await;
    for (user, tags) in [("mg", "management"), ("pm", "policymaker")] {
        let (status, _) = put(
            &b,
            &format!("/api/users/{user}"),
            json!({"password": user, "tags": tags}),
        )
        .await;
        assert_eq!(status, 201);
        put(
            &b,
            &format!("/api/permissions/%2F/{user}"),
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        )
        .await;
    }
    let body = json!({"pattern": ".*", "definition": {"max-length": 1}}).to_string();
    let addr = b.server.http_addr;
    let r = request(
        addr,
        "PUT",
        "/api/policies/%2F/p",
        Some(("mg", "mg")),
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.json(),
        json!({"error": "not_authorised", "reason": "User not authorised to access object"})
    );
    let r = request(
        addr,
        "PUT",
        "/api/policies/%2F/p",
        Some(("pm", "pm")),
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 201);
    let r = request(
        addr,
        "PUT",
        "/api/operator-policies/%2F/p",
        Some(("pm", "pm")),
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["reason"], "Not administrator user");
    let r = request(addr, "GET", "/api/policies", Some(("mg", "mg")), None).await;
    assert_eq!(r.json()[0]["name"], "p");
    let r = request(addr, "GET", "/api/parameters", Some(("mg", "mg")), None).await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn a_consumer_timeout_policy_closes_a_stuck_consumers_channel() {
    use common::raw::{method, Raw};
    use lapin::protocol::{basic as b, AMQPClass};
    let broker = start().await;
    let (status, _) = put(
        &broker,
        "/api/policies/%2F/stuck",
        json!({"pattern": "^slow$", "definition": {"consumer-timeout": 100}}),
    )
    .await;
    assert_eq!(status, 201);
    let (_c, ch) = broker.channel().await;
    declare(&ch, "slow", FieldTable::default()).await;
    assert_eq!(publish_confirmed(&ch, "slow", 1).await, 1);
    let mut r = Raw::open(broker.server.amqp_addr).await;
    r.send(&method(
        1,
        AMQPClass::Basic(b::AMQPMethod::Consume(b::Consume {
            queue: "slow".into(),
            consumer_tag: "c".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        })),
    ))
    .await;
    // Delivered, never acked: the policy's 100 ms close the channel with 406 and requeue.
    assert_eq!(r.channel_close_code().await, Some((1, 406)));
    within(async {
        while ready(&ch, "slow").await != 1 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let got = within(ch.basic_get("slow".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("requeued");
    assert!(got.delivery.redelivered);
}
