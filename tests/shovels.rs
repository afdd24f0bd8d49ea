//! Dynamic shovels (#21) between real brokers on loopback: declared through
//! `/api/parameters/shovel`, with RabbitMQ 3.10's validation texts; a queue's backlog and
//! what follows moved in order with its properties; `delete-after: queue-length` moving
//! the backlog and deleting itself; an exchange source with forward and timestamp headers;
//! status, restart, pause, resume and delete through `/api/shovels`; a destination that restarts, and a
//! shovel that comes back with its broker; definitions export and import.

mod common;

use common::http::{request, Response};
use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use serde_json::{json, Value};
use std::time::Duration;

const GUEST: Option<(&str, &str)> = Some(("guest", "guest"));

async fn api(b: &TestBroker, method: &str, path: &str, body: Option<&Value>) -> Response {
    let text = body.map(Value::to_string);
    request(b.server.http_addr, method, path, GUEST, text.as_deref()).await
}

/// Declares shovel `name` in vhost `/` of `on`; the status code.
async fn put_shovel(on: &TestBroker, name: &str, value: Value) -> Response {
    let path = format!("/api/parameters/shovel/%2F/{name}");
    api(on, "PUT", &path, Some(&json!({ "value": value }))).await
}

fn uri(b: &TestBroker) -> String {
    format!("amqp://guest:guest@{}", b.server.amqp_addr)
}

/// Waits (up to 20 s) until `check` holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn declare(ch: &Channel, q: &str) {
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("declare");
}

/// Publishes bodies `prefix-i` for i in `range` to the default exchange, with confirms.
async fn publish(ch: &Channel, q: &str, prefix: &str, range: std::ops::Range<usize>) {
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let mut headers = FieldTable::default();
    headers.insert("origin".into(), AMQPValue::LongString("a".into()));
    for i in range {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("text/plain".into())
            .with_headers(headers.clone());
        within(ch.basic_publish(
            "".into(),
            q.into(),
            Default::default(),
            format!("{prefix}-{i}").as_bytes(),
            props,
        ))
        .await
        .expect("publish");
    }
    within(ch.wait_for_confirms()).await.expect("confirms");
}

/// Takes every message of a queue: (body, properties).
async fn drain(ch: &Channel, q: &str) -> Vec<(String, BasicProperties)> {
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("basic.get")
    {
        out.push((
            String::from_utf8_lossy(&m.delivery.data).into_owned(),
            m.delivery.properties.clone(),
        ));
    }
    out
}

/// Ready messages in a queue of `b`, 0 while it does not exist (a channel of its own,
/// which a 404 closes).
async fn count(b: &TestBroker, q: &str) -> u32 {
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
    .map_or(0, |ok| ok.message_count())
}

async fn shovel_status(on: &TestBroker, name: &str) -> Option<Value> {
    let r = api(on, "GET", &format!("/api/shovels/vhost/%2F/{name}"), None).await;
    (r.status == 200).then(|| r.json()[0].clone())
}

async fn wait_running(on: &TestBroker, name: &str) {
    eventually(&format!("shovel {name} running"), || async {
        shovel_status(on, name)
            .await
            .is_some_and(|s| s["state"] == "running")
    })
    .await;
}

#[tokio::test]
async fn a_backlog_and_what_follows_move_in_order_with_their_properties() {
    let (a, b) = (start().await, start().await);
    let (_ca, cha) = a.channel().await;
    let (_cb, chb) = b.channel().await;
    declare(&cha, "src").await;
    publish(&cha, "src", "m", 0..100).await;
    let r = put_shovel(
        &a,
        "move",
        json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
               "dest-queue": "dst", "src-prefetch-count": 10}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    eventually("the backlog on b", || async {
        count(&b, "dst").await == 100
    })
    .await;
    assert_eq!(ready(&cha, "src").await, 0);
    publish(&cha, "src", "m", 100..150).await;
    eventually("the rest on b", || async {
        ready(&chb, "dst").await == 150
    })
    .await;
    let got = drain(&chb, "dst").await;
    let bodies: Vec<&str> = got.iter().map(|(b, _)| b.as_str()).collect();
    let expected: Vec<String> = (0..150).map(|i| format!("m-{i}")).collect();
    assert_eq!(bodies, expected);
    let props = &got[0].1;
    assert_eq!(props.delivery_mode(), &Some(2));
    assert_eq!(
        props.content_type().as_ref().map(|s| s.as_str()),
        Some("text/plain")
    );
    let headers = props.headers().clone().expect("headers kept");
    assert!(headers.inner().contains_key("origin"));
    assert!(!headers.inner().contains_key("x-shovelled"));

    let s = shovel_status(&a, "move").await.expect("status");
    assert_eq!(s["state"], "running");
    assert_eq!(s["type"], "dynamic");
    assert_eq!(s["vhost"], "/");
    assert_eq!(s["src_queue"], "src");
    assert_eq!(s["dest_queue"], "dst");
    assert_eq!(s["forwarded"], 150);
    assert_eq!(s["src_uri"], format!("amqp://{}", a.server.amqp_addr));
    assert!(!s.to_string().contains("guest:guest"), "{s}");
    let all = api(&a, "GET", "/api/shovels", None).await.json();
    assert_eq!(all.as_array().map(Vec::len), Some(1));
    let listed = api(&a, "GET", "/api/parameters/shovel", None).await.json();
    assert_eq!(listed[0]["component"], "shovel");
    assert_eq!(listed[0]["value"]["src-queue"], "src");

    // Deleting the shovel stops it: later messages stay at the source.
    let r = api(&a, "DELETE", "/api/parameters/shovel/%2F/move", None).await;
    assert_eq!(r.status, 204);
    assert_eq!(shovel_status(&a, "move").await, None);
    publish(&cha, "src", "late", 0..5).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready(&cha, "src").await, 5);
    assert_eq!(ready(&chb, "dst").await, 0);
}

#[tokio::test]
async fn delete_after_queue_length_moves_the_backlog_then_deletes_itself() {
    let (a, b) = (start().await, start().await);
    let (_ca, cha) = a.channel().await;
    let (_cb, chb) = b.channel().await;
    declare(&cha, "src").await;
    publish(&cha, "src", "m", 0..30).await;
    let r = put_shovel(
        &a,
        "once",
        json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
               "dest-queue": "dst", "src-delete-after": "queue-length"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    eventually("the shovel to delete itself", || async {
        api(&a, "GET", "/api/parameters/shovel/%2F/once", None)
            .await
            .status
            == 404
    })
    .await;
    assert_eq!(ready(&chb, "dst").await, 30);
    publish(&cha, "src", "after", 0..3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ready(&cha, "src").await, 3);
    assert_eq!(ready(&chb, "dst").await, 30);

    // A count: exactly that many move, the rest stay (requeued) at the source.
    let r = put_shovel(
        &a,
        "two",
        json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
               "dest-queue": "dst", "src-delete-after": 2, "ack-mode": "on-publish"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    eventually("the counted shovel to finish", || async {
        api(&a, "GET", "/api/parameters/shovel/%2F/two", None)
            .await
            .status
            == 404
    })
    .await;
    eventually("the rest requeued", || async {
        ready(&cha, "src").await == 1
    })
    .await;
    assert_eq!(ready(&chb, "dst").await, 32);
}

#[tokio::test]
async fn an_exchange_source_with_forward_and_timestamp_headers() {
    let (a, b) = (start().await, start().await);
    let (_ca, cha) = a.channel().await;
    let (_cb, chb) = b.channel().await;
    declare(&chb, "out").await;
    within(chb.queue_bind(
        "out".into(),
        "amq.direct".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
    let r = put_shovel(
        &a,
        "fan",
        json!({"src-uri": [uri(&a)], "src-exchange": "amq.topic", "src-exchange-key": "a.#",
               "dest-uri": uri(&b), "dest-exchange": "amq.direct", "dest-exchange-key": "k",
               "dest-add-forward-headers": true, "dest-add-timestamp-header": true,
               "dest-publish-properties": {"app_id": "mover"}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    wait_running(&a, "fan").await;
    for key in ["a.one", "b.two", "a.three"] {
        within(cha.basic_publish(
            "amq.topic".into(),
            key.into(),
            Default::default(),
            key.as_bytes(),
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    eventually("two messages on b", || async {
        ready(&chb, "out").await == 2
    })
    .await;
    let got = drain(&chb, "out").await;
    assert_eq!(got[0].0, "a.one");
    assert_eq!(got[1].0, "a.three");
    let p = &got[0].1;
    assert_eq!(p.app_id().as_ref().map(|s| s.as_str()), Some("mover"));
    let h = p.headers().clone().expect("headers");
    let Some(AMQPValue::FieldArray(list)) = h.inner().get("x-shovelled") else {
        panic!("no x-shovelled header: {h:?}");
    };
    let Some(AMQPValue::FieldTable(t)) = list.as_slice().first() else {
        panic!("x-shovelled holds no table: {list:?}");
    };
    let text = |k: &str| match t.inner().get(k) {
        Some(AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(text("shovel-name"), "fan");
    assert_eq!(text("shovel-type"), "dynamic");
    assert_eq!(text("shovel-vhost"), "/");
    assert_eq!(text("src-exchange"), "amq.topic");
    assert_eq!(text("src-exchange-key"), "a.#");
    assert_eq!(text("dest-exchange"), "amq.direct");
    assert_eq!(text("dest-uri"), format!("amqp://{}", b.server.amqp_addr));
    assert!(
        matches!(h.inner().get("x-shovelled-timestamp"), Some(AMQPValue::LongLongInt(t)) if *t > 1_700_000_000)
    );
    let s = shovel_status(&a, "fan").await.expect("status");
    assert_eq!(s["src_exchange"], "amq.topic");
    assert_eq!(s["src_exchange_key"], "a.#");
    assert_eq!(s["dest_exchange"], "amq.direct");
    assert_eq!(s["dest_exchange_key"], "k");
}

#[tokio::test]
async fn validation_answers_with_rabbitmqs_texts() {
    let a = start().await;
    let r = put_shovel(
        &a,
        "s2",
        json!({"src-queue": "q1", "src-exchange": "x", "dest-uri": 5, "ack-mode": "bogus",
               "prefetch-count": "a", "zzz": 1}),
    )
    .await;
    assert_eq!(r.status, 400);
    // RabbitMQ 3.10.8's answer to the same body, byte for byte.
    assert_eq!(
        r.json(),
        json!({"error": "bad_request", "reason": "Validation failed\n\nCannot specify 'src-exchange' and 'src-queue'\nUnrecognised terms [{&lt;&lt;\"zzz\"&gt;&gt;,1}] in s2\ndest-uri should be list, actually was 5\nprefetch-count should be a number, actually was &lt;&lt;\"a\"&gt;&gt;\nKey \"src-uri\" not found in s2\nack-mode should be one of [&lt;&lt;\"no-ack\"&gt;&gt;,&lt;&lt;\"on-publish\"&gt;&gt;,&lt;&lt;\"on-confirm\"&gt;&gt;], actually was &lt;&lt;\"bogus\"&gt;&gt;\n"})
    );
    let r = put_shovel(
        &a,
        "s3",
        json!({"src-uri": "foo://x", "src-queue": "q1", "dest-uri": ["amqp://h"],
               "dest-queue": "q", "dest-exchange": "x", "src-delete-after": "sometimes"}),
    )
    .await;
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\nCannot specify 'dest-exchange' and 'dest-queue'\nsrc-delete-after should be a number greater than or equal to 0, \"never\" or \"queue-length\", actually was &lt;&lt;\"sometimes\"&gt;&gt;\n\"foo://x\" not a valid URI: {{unexpected_uri_scheme,\"foo\"},\"foo://x\"}\n"
    );
    let path = "/api/parameters/no-such-component/%2F/up";
    let r = api(&a, "PUT", path, Some(&json!({"value": {}}))).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\ncomponent no-such-component not found\n"
    );
    let r = api(
        &a,
        "PUT",
        "/api/parameters/shovel/nowhere/s",
        Some(&json!({"value": {}})),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(api(&a, "GET", "/api/shovels", None).await.json(), json!([]));
    let r = api(&a, "DELETE", "/api/shovels/vhost/%2F/none/restart", None).await;
    assert_eq!(r.status, 404);
}

/// A broker on a fixed port, so a shovel's URI finds it again after a restart.
async fn start_on(port: u16, dir: Option<tempfile::TempDir>) -> TestBroker {
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    match dir {
        None => start_with(|c| c.amqp_listen = addr).await,
        Some(dir) => {
            let config = warren::config::Config {
                amqp_listen: addr,
                http_listen: "127.0.0.1:0".parse().expect("addr"),
                metrics_listen: "127.0.0.1:0".parse().expect("addr"),
                data_dir: dir.path().to_owned(),
                ..Default::default()
            };
            let server = warren::Server::start(config).await.expect("restart");
            TestBroker { server, dir }
        }
    }
}

#[tokio::test]
async fn a_shovel_reconnects_to_a_destination_that_restarts_and_loses_nothing() {
    let a = start().await;
    let port = common::cluster::free_port();
    let b = start_on(port, None).await;
    let (_ca, cha) = a.channel().await;
    declare(&cha, "src").await;
    let r = put_shovel(
        &a,
        "hop",
        json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
               "dest-queue": "dst", "reconnect-delay": 0.2}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    wait_running(&a, "hop").await;
    publish(&cha, "src", "before", 0..20).await;
    {
        let (_cb, chb) = b.channel().await;
        eventually("the first messages on b", || async {
            ready(&chb, "dst").await == 20
        })
        .await;
    }
    let TestBroker { server, dir } = b;
    within(server.shutdown()).await;
    eventually("the shovel to notice", || async {
        shovel_status(&a, "hop")
            .await
            .is_some_and(|s| s["state"] != "running")
    })
    .await;
    publish(&cha, "src", "during", 0..20).await;
    let b = start_on(port, Some(dir)).await;
    wait_running(&a, "hop").await;
    let (_cb, chb) = b.channel().await;
    eventually("every message on b", || async {
        ready(&chb, "dst").await >= 40
    })
    .await;
    let got: Vec<String> = drain(&chb, "dst")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    for i in 0..20 {
        for prefix in ["before", "during"] {
            let body = format!("{prefix}-{i}");
            assert!(got.contains(&body), "{body} lost: {got:?}");
        }
    }
    assert_eq!(ready(&cha, "src").await, 0);
}

#[tokio::test]
async fn a_shovel_restarts_on_request_and_comes_back_with_its_broker() {
    let (a, b, c) = (start().await, start().await, start().await);
    let (_ca, cha) = a.channel().await;
    let (_cb, chb) = b.channel().await;
    declare(&cha, "src").await;
    let value = json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
                       "dest-queue": "dst"});
    assert_eq!(put_shovel(&c, "mover", value.clone()).await.status, 201);
    assert_eq!(put_shovel(&c, "mover", value.clone()).await.status, 204);
    wait_running(&c, "mover").await;
    let r = api(&c, "DELETE", "/api/shovels/vhost/%2F/mover/restart", None).await;
    assert_eq!(r.status, 204);
    wait_running(&c, "mover").await;
    publish(&cha, "src", "one", 0..10).await;
    eventually("moved before the restart", || async {
        ready(&chb, "dst").await == 10
    })
    .await;

    let exported = api(&c, "GET", "/api/definitions", None).await.json();
    let params = exported["parameters"].as_array().expect("parameters");
    assert!(
        params
            .iter()
            .any(|p| p["component"] == "shovel" && p["name"] == "mover" && p["value"] == value),
        "{params:?}"
    );

    let c = c.restart().await;
    wait_running(&c, "mover").await;
    publish(&cha, "src", "two", 0..10).await;
    eventually("moved after the restart", || async {
        ready(&chb, "dst").await == 20
    })
    .await;

    // The exported definitions bring the shovel to another broker.
    let d = start().await;
    let r = api(&d, "POST", "/api/definitions", Some(&exported)).await;
    assert!(r.status < 300, "{} {}", r.status, r.body);
    wait_running(&d, "mover").await;
}

#[tokio::test]
async fn a_paused_shovel_moves_nothing_until_it_is_resumed() {
    let (a, b) = (start().await, start().await);
    let (_ca, cha) = a.channel().await;
    let (_cb, chb) = b.channel().await;
    declare(&cha, "src").await;
    let value = json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
                       "dest-queue": "dst"});
    assert_eq!(put_shovel(&b, "p", value).await.status, 201);
    wait_running(&b, "p").await;
    publish(&cha, "src", "before", 0..5).await;
    eventually("moved while running", || async {
        ready(&chb, "dst").await == 5
    })
    .await;

    let r = api(&b, "PUT", "/api/shovels/%2F/p/pause", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let status = shovel_status(&b, "p").await.expect("still listed");
    assert_eq!(status["state"], "paused");
    assert_eq!(
        api(&b, "PUT", "/api/shovels/%2F/p/pause", None)
            .await
            .status,
        422,
        "already paused"
    );
    publish(&cha, "src", "paused", 0..5).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ready(&chb, "dst").await, 5, "moved while paused");
    assert_eq!(count(&a, "src").await, 5);

    let r = api(&b, "PUT", "/api/shovels/%2F/p/resume", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    wait_running(&b, "p").await;
    eventually("moved after the resume", || async {
        ready(&chb, "dst").await == 10
    })
    .await;
    assert_eq!(
        api(&b, "PUT", "/api/shovels/%2F/p/resume", None)
            .await
            .status,
        422,
        "not paused"
    );
    for verb in ["pause", "resume"] {
        let r = api(&b, "PUT", &format!("/api/shovels/%2F/nosuch/{verb}"), None).await;
        assert_eq!(r.status, 404, "{verb}");
    }
}

/// A pause in the middle of a backlog: what the destination confirmed is settled at the
/// source before the run ends, so no message is in both queues and the resumed shovel
/// moves each message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_mid_flow_moves_each_message_once() {
    const N: u32 = 20_000;
    let (a, b) = (start().await, start().await);
    let (_ca, cha) = a.channel().await;
    let (_cb, chb) = b.channel().await;
    declare(&cha, "src").await;
    publish(&cha, "src", "m", 0..N as usize).await;
    let value = json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": uri(&b),
                       "dest-queue": "dst"});
    assert_eq!(put_shovel(&b, "p", value).await.status, 201);
    eventually("the backlog moving", || async {
        count(&b, "dst").await >= 1_000
    })
    .await;
    let r = api(&b, "PUT", "/api/shovels/%2F/p/pause", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let (moved, left) = (count(&b, "dst").await, count(&a, "src").await);
    assert!(
        left > 0,
        "paused after the whole backlog had moved; raise N"
    );
    assert_eq!(moved + left, N, "moved {moved}, left {left}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count(&b, "dst").await, moved, "moved while paused");

    let r = api(&b, "PUT", "/api/shovels/%2F/p/resume", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    eventually("the rest moved", || async { count(&a, "src").await == 0 }).await;
    eventually("settled", || async { count(&b, "dst").await == N }).await;
    let mut seen = std::collections::HashSet::new();
    for (body, _) in drain(&chb, "dst").await {
        assert!(seen.insert(body.clone()), "{body} moved twice");
    }
    assert_eq!(seen.len(), N as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warren_ctl_sets_lists_restarts_and_deletes_shovels_as_rabbitmqctl() {
    let (a, b) = (start().await, start().await);
    let dir = a.dir.path().to_owned();
    let value = json!({"src-uri": uri(&a), "src-queue": "cq", "dest-uri": uri(&b),
                       "dest-queue": "cq2"})
    .to_string();
    let (code, out, err) =
        warren_ctl_async(&dir, &["set_parameter", "shovel", "ctl1", &value]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out,
        format!(
            "Setting runtime parameter \"ctl1\" for component \"shovel\" to \"{value}\" in vhost \"/\" ...\n"
        )
    );
    let (code, _, err) = warren_ctl_async(
        &dir,
        &["set_parameter", "shovel", "ctl2", r#"{"src-queue":"cq"}"#],
    )
    .await;
    assert_eq!(code, 70);
    assert!(
        err.contains("Validation failed\n\nKey \"dest-uri\" not found in ctl2\nKey \"src-uri\" not found in ctl2"),
        "{err}"
    );
    wait_running(&a, "ctl1").await;
    let (code, out, _) = warren_ctl_async(&dir, &["list_parameters", "--formatter", "json"]).await;
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(listed[0]["component"], "shovel");
    assert_eq!(listed[0]["name"], "ctl1");
    let (code, out, _) = warren_ctl_async(&dir, &["shovel_status", "--formatter", "json"]).await;
    assert_eq!(code, 0);
    let status: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(status[0]["name"], "ctl1");
    assert_eq!(status[0]["state"], "running");
    assert_eq!(
        status[0]["source"],
        format!("amqp://{}", a.server.amqp_addr)
    );
    let (code, out, _) = warren_ctl_async(&dir, &["restart_shovel", "ctl1"]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("Restarting dynamic Shovel ctl1 in virtual host / on node "));
    let (code, out, _) = warren_ctl_async(&dir, &["delete_shovel", "ctl1"]).await;
    assert_eq!(
        (code, out.as_str()),
        (0, "Deleting shovel ctl1 in vhost /\n")
    );
    assert_eq!(shovel_status(&a, "ctl1").await, None);
    let (code, _, err) = warren_ctl_async(&dir, &["clear_parameter", "shovel", "ctl1"]).await;
    assert_eq!(code, 70);
    assert!(err.contains("Parameter does not exist"), "{err}");
}

/// A killable broker process on fixed ports.
struct Node {
    dir: tempfile::TempDir,
    ports: (u16, u16),
    process: Process,
}

impl Node {
    async fn start() -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let ports = (common::cluster::free_port(), common::cluster::free_port());
        let process = spawn_binary_on(dir.path(), ports.0, ports.1).await;
        Node {
            dir,
            ports,
            process,
        }
    }

    fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.ports.0)
    }

    /// kill -9, then the same binary on the same ports and data dir.
    async fn kill_and_restart(&mut self) {
        self.process.child.kill().await.expect("kill -9");
        let _ = self.process.child.wait().await;
        self.process = spawn_binary_on(self.dir.path(), self.ports.0, self.ports.1).await;
    }

    async fn count(&self, q: &str) -> u32 {
        let Ok(c) = lapin::Connection::connect(&self.process.url, Default::default()).await else {
            return 0;
        };
        let Ok(ch) = c.create_channel().await else {
            return 0;
        };
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let n = ch
            .queue_declare(q.into(), passive, FieldTable::default())
            .await
            .map_or(0, |ok| ok.message_count());
        let _ = c.close(200, "".into()).await;
        n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_destination_or_of_the_shovels_broker_loses_nothing() {
    const N: usize = 3000;
    let a = start().await;
    let (_ca, cha) = a.channel().await;
    declare(&cha, "src").await;
    let mut dest = Node::start().await;
    let mut host = Node::start().await;
    let value = json!({"src-uri": uri(&a), "src-queue": "src", "dest-uri": dest.uri(),
                       "dest-queue": "dst", "reconnect-delay": 0.3, "src-prefetch-count": 50});
    let body = json!({ "value": value }).to_string();
    let path = "/api/parameters/shovel/%2F/safe";
    let r = request(host.process.http, "PUT", path, GUEST, Some(&body)).await;
    assert_eq!(r.status, 201, "{}", r.body);

    let publisher = {
        let (c, ch) = a.channel().await;
        tokio::spawn(async move {
            for batch in 0..N / 100 {
                publish(&ch, "src", "m", batch * 100..(batch + 1) * 100).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            drop(c);
        })
    };
    eventually("a first part moved", || async {
        dest.count("dst").await >= 300
    })
    .await;
    dest.kill_and_restart().await;
    eventually("more moved after the destination's kill", || async {
        dest.count("dst").await >= 1200
    })
    .await;
    host.kill_and_restart().await;
    within(publisher).await.expect("publisher");
    eventually("the source drained", || async {
        ready(&cha, "src").await == 0
    })
    .await;
    eventually("everything at the destination", || async {
        dest.count("dst").await as usize >= N
    })
    .await;
    let c = lapin::Connection::connect(&dest.process.url, Default::default())
        .await
        .expect("connect");
    let ch = c.create_channel().await.expect("channel");
    let got: std::collections::HashSet<String> = drain(&ch, "dst")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    let lost: Vec<usize> = (0..N)
        .filter(|i| !got.contains(&format!("m-{i}")))
        .collect();
    assert!(lost.is_empty(), "{} lost: {lost:?}", lost.len());
}

#[tokio::test]
async fn amqp_without_a_host_is_this_node_with_every_permission() {
    let a = start().await;
    let (_c, ch) = a.channel().await;
    within(ch.queue_declare(
        "here".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    // Another vhost: the user declaring the shovel needs a permission entry there, as in
    // RabbitMQ (an empty one will do: the node's own connections have every permission).
    let r = api(&a, "PUT", "/api/vhosts/other", None).await;
    assert_eq!(r.status, 201);
    let local = json!({"src-uri": "amqp://", "src-queue": "here",
                       "dest-uri": "amqp:///other", "dest-queue": "there"});
    let r = api(&a, "DELETE", "/api/permissions/other/guest", None).await;
    assert!(r.status == 204 || r.status == 404, "{}", r.status);
    let r = put_shovel(&a, "local", local.clone()).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\nuser \"guest\" may not connect to vhost \"other\"\n"
    );
    let none = json!({"configure": "", "write": "", "read": ""});
    let r = api(&a, "PUT", "/api/permissions/other/guest", Some(&none)).await;
    assert!(r.status < 300, "{}", r.body);
    let r = put_shovel(&a, "local", local).await;
    assert_eq!(r.status, 201, "{}", r.body);
    wait_running(&a, "local").await;
    let s = shovel_status(&a, "local").await.expect("status");
    assert_eq!(s["src_uri"], "amqp://");
    assert_eq!(s["dest_uri"], "amqp:///other");
    let mut headers = FieldTable::default();
    headers.insert("k".into(), AMQPValue::LongString("v".into()));
    within(
        ch.basic_publish(
            "".into(),
            "here".into(),
            Default::default(),
            b"local",
            BasicProperties::default()
                .with_user_id("guest".into())
                .with_headers(headers),
        ),
    )
    .await
    .expect("publish");
    eventually("the message in the other vhost", || async {
        let q = api(&a, "GET", "/api/queues/other/there", None).await;
        q.status == 200 && q.json()["messages"] == 1
    })
    .await;
    let conns = api(&a, "GET", "/api/connections", None).await.json();
    let users: Vec<&str> = conns
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["user"].as_str())
        .collect();
    assert!(users.contains(&"none"), "{conns}");

    // The internal user is not a login anyone can use.
    let refused = a.connect_as("none", "").await;
    assert!(refused.is_err());
    let refused = a.connect_as("none", "guest").await;
    assert!(refused.is_err());
}

/// What the webhook receiver of the test got: (path and query, headers, body).
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<(String, String)>, String)>>>;

/// An HTTP receiver on a free port: the first POST is answered 503, a body `reject-me` 422,
/// the others 204.
async fn receiver() -> (std::net::SocketAddr, Received) {
    use axum::http::{HeaderMap, StatusCode, Uri};
    let got: Received = Default::default();
    let seen = got.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: String| {
        let seen = seen.clone();
        async move {
            let headers: Vec<(String, String)> = headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                .collect();
            let mut all = seen.lock().expect("lock");
            let first = all.is_empty();
            let reject = body == "reject-me";
            all.push((uri.to_string(), headers, body));
            match (first, reject) {
                (true, _) => StatusCode::SERVICE_UNAVAILABLE,
                (false, true) => StatusCode::UNPROCESSABLE_ENTITY,
                (false, false) => StatusCode::NO_CONTENT,
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, got)
}

#[tokio::test]
async fn a_webhook_destination_gets_each_message_posted_and_acks_on_2xx() {
    let a = start().await;
    let (_ca, cha) = a.channel().await;
    declare(&cha, "hooked").await;
    within(cha.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    let mut headers = FieldTable::default();
    headers.insert("origin".into(), AMQPValue::LongString("a".into()));
    headers.insert("n".into(), AMQPValue::LongInt(7));
    for (i, body) in ["m1", "reject-me", "m2"].iter().enumerate() {
        let props = BasicProperties::default()
            .with_content_type("text/plain".into())
            .with_message_id(format!("id-{i}").into())
            .with_headers(headers.clone());
        within(cha.basic_publish(
            "".into(),
            "hooked".into(),
            Default::default(),
            body.as_bytes(),
            props,
        ))
        .await
        .expect("publish");
    }
    within(cha.wait_for_confirms()).await.expect("confirms");
    for (dest, reason) in [
        (
            json!(["http://h/", "amqp://"]),
            "dest-uri: an http(s) URI must be the only one",
        ),
        (
            json!("http://:1/"),
            "\"http://:1/\" not a valid http(s) URI",
        ),
    ] {
        let v = json!({"src-uri": uri(&a), "src-queue": "hooked", "dest-uri": dest});
        let r = put_shovel(&a, "bad", v).await;
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json()["reason"],
            format!("Validation failed\n\n{reason}\n")
        );
    }
    let (addr, got) = receiver().await;
    let value = json!({"src-uri": uri(&a), "src-queue": "hooked",
                       "dest-uri": format!("http://hook:secret@{addr}/in?k=v"),
                       "reconnect-delay": 1});
    assert_eq!(put_shovel(&a, "hook", value).await.status, 201);
    // 503 first: the run ends (the message goes back) and starts again a second later.
    eventually("all three posted, the first one twice", || async {
        got.lock().expect("lock").len() >= 4
    })
    .await;
    eventually("the source queue empty", || async {
        count(&a, "hooked").await == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = got.lock().expect("lock").clone();
    let bodies: Vec<&str> = got.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(bodies, ["m1", "m1", "reject-me", "m2"]);
    let (path, headers, _) = &got[0];
    assert_eq!(path, "/in?k=v");
    let header = |k: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("content-type"), Some("text/plain"));
    assert_eq!(header("x-message-id"), Some("id-0"));
    assert_eq!(header("x-shovel"), Some("hook"));
    assert_eq!(header("x-origin"), Some("a"));
    assert_eq!(header("x-n"), Some("7"));
    assert_eq!(header("authorization"), Some("Basic aG9vazpzZWNyZXQ="));
    // Rejected (422) at the source: gone, not requeued; nothing left unacked.
    let (_c, ch) = a.channel().await;
    assert_eq!(drain(&ch, "hooked").await.len(), 0);
    let status = shovel_status(&a, "hook").await.expect("listed");
    assert_eq!(status["state"], "running");
    assert_eq!(status["dest_uri"], format!("http://{addr}/in?k=v").as_str());
}

/// A pause while a POST is under way: the shovel waits for its answer and acks the message
/// at the source, so after the resume no message is posted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_webhook_shovel_settles_the_post_under_way() {
    use axum::http::StatusCode;
    let a = start().await;
    let (_ca, cha) = a.channel().await;
    declare(&cha, "slow").await;
    publish(&cha, "slow", "w", 0..3).await;
    let got: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let seen = got.clone();
    // Each POST is recorded when it arrives and answered a second later.
    let app = axum::Router::new().fallback(move |body: String| {
        let seen = seen.clone();
        async move {
            seen.lock().expect("lock").push(body);
            tokio::time::sleep(Duration::from_millis(1000)).await;
            StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let value = json!({"src-uri": uri(&a), "src-queue": "slow",
                       "dest-uri": format!("http://{addr}/")});
    assert_eq!(put_shovel(&a, "slow-hook", value).await.status, 201);
    eventually("the first POST under way", || async {
        !got.lock().expect("lock").is_empty()
    })
    .await;
    let r = api(&a, "PUT", "/api/shovels/%2F/slow-hook/pause", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    // The answered POST was acked at the source: what is left was never posted.
    let posted = got.lock().expect("lock").len() as u32;
    eventually("the unposted back in the queue", || async {
        count(&a, "slow").await == 3 - posted
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count(&a, "slow").await, 3 - posted, "posted {posted}");
    let r = api(&a, "PUT", "/api/shovels/%2F/slow-hook/resume", None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    eventually("the rest posted", || async {
        got.lock().expect("lock").len() >= 3
    })
    .await;
    // Time for a copy to arrive, were one posted again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut bodies = got.lock().expect("lock").clone();
    bodies.sort();
    assert_eq!(bodies, ["w-0", "w-1", "w-2"], "each message posted once");
}
