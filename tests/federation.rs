//! Exchange and queue federation (#21) between real brokers on loopback, configured as
//! RabbitMQ's: an upstream (`/api/parameters/federation-upstream`) and a policy naming it on
//! the downstream exchange or queue. Warren to Warren, Warren reading from a real RabbitMQ
//! 3.10 (with its federation plugin) and RabbitMQ reading from Warren: messages published
//! upstream reach the downstream exchange for its binding keys only, with `x-received-from`;
//! bindings made and removed later follow; removing the policy removes the link (and, from
//! Warren, the upstream queue). Two exchanges federated from each other pass a message once
//! each way (`max-hops`). A federated queue takes the upstream queue's messages only while
//! it has a consumer and nothing ready, with RabbitMQ's headers, both ways with RabbitMQ.
//! RabbitMQ's validation texts.

mod common;

use common::http::{request, Response};
use common::rabbitmq::Rabbit;
use common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

const GUEST: Option<(&str, &str)> = Some(("guest", "guest"));

/// A broker as the tests reach it.
#[derive(Clone)]
struct Node {
    uri: String,
    http: SocketAddr,
    warren: bool,
}

impl Node {
    fn of(b: &TestBroker) -> Node {
        Node {
            uri: format!("amqp://guest:guest@{}", b.server.amqp_addr),
            http: b.server.http_addr,
            warren: true,
        }
    }

    fn rabbit(r: &Rabbit) -> Node {
        Node {
            uri: r.uri(),
            http: r.http,
            warren: false,
        }
    }

    async fn api(&self, method: &str, path: &str, body: Option<Value>) -> Response {
        let text = body.map(|b| b.to_string());
        request(self.http, method, path, GUEST, text.as_deref()).await
    }

    async fn channel(&self) -> (Connection, Channel) {
        let c = within(Connection::connect(
            &self.uri,
            ConnectionProperties::default(),
        ))
        .await
        .expect("connect");
        let ch = within(c.create_channel()).await.expect("channel");
        (c, ch)
    }

    /// The binding keys from exchange `x` to other exchanges.
    async fn exchange_binding_keys(&self, x: &str) -> Vec<String> {
        let r = self
            .api(
                "GET",
                &format!("/api/exchanges/%2F/{x}/bindings/source"),
                None,
            )
            .await;
        if r.status != 200 {
            return Vec::new();
        }
        let mut keys: Vec<String> = r
            .json()
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|b| b["destination_type"] == "exchange")
            .filter_map(|b| b["routing_key"].as_str().map(str::to_owned))
            .collect();
        keys.sort();
        keys
    }

    async fn links(&self) -> Vec<Value> {
        let r = self.api("GET", "/api/federation-links", None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.json().as_array().cloned().unwrap_or_default()
    }

    async fn queue_names(&self) -> Vec<String> {
        let r = self.api("GET", "/api/queues/%2F", None).await;
        r.json()
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|q| q["name"].as_str().map(str::to_owned))
            .collect()
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn publish(ch: &Channel, x: &str, key: &str, body: &str) {
    within(ch.basic_publish(
        x.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default(),
    ))
    .await
    .expect("publish")
    .await
    .expect("confirm");
}

/// The bodies in queue `q`, taken with basic.get until it is empty.
async fn take(ch: &Channel, q: &str) -> Vec<(String, FieldTable)> {
    let mut out = Vec::new();
    while let Some(m) = within(ch.basic_get(q.into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
    {
        let headers = m.properties.headers().clone().unwrap_or_default();
        out.push((
            String::from_utf8_lossy(&m.delivery.data).into_owned(),
            headers,
        ));
    }
    out
}

/// What queue `q` receives until it has `n` messages (or 30 s passed).
async fn take_at_least(ch: &Channel, q: &str, n: usize) -> Vec<(String, FieldTable)> {
    let mut got = Vec::new();
    for _ in 0..600 {
        got.extend(take(ch, q).await);
        if got.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    got
}

async fn bind(ch: &Channel, q: &str, x: &str, key: &str) {
    within(ch.queue_bind(
        q.into(),
        x.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind");
}

/// Declares exchange `x` (topic) and queue `q` bound to it with `key` on `n`.
async fn topology(ch: &Channel, x: &str, q: &str, key: &str) {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(ch.exchange_declare(
        x.into(),
        ExchangeKind::Topic,
        durable,
        FieldTable::default(),
    ))
    .await
    .expect("exchange");
    within(ch.queue_declare(
        q.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("queue");
    bind(ch, q, x, key).await;
}

/// Federates exchange `x` of `down` from `up` (an upstream and a policy on `down`).
async fn federate(up: &Node, down: &Node, x: &str, upstream: &str) {
    let r = down
        .api(
            "PUT",
            &format!("/api/parameters/federation-upstream/%2F/{upstream}"),
            Some(json!({"value": {"uri": up.uri}})),
        )
        .await;
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    let r = down
        .api(
            "PUT",
            &format!("/api/policies/%2F/{x}"),
            Some(json!({"pattern": format!("^{x}$"), "apply-to": "exchanges",
                        "definition": {"federation-upstream": upstream}})),
        )
        .await;
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    for _ in 0..600 {
        let links = down.links().await;
        if links
            .iter()
            .any(|l| l["exchange"] == x && l["status"] == "running")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("link for {x} not running: {:?}", down.links().await);
}

/// The whole life of one link from `up` to `down`.
async fn a_link_follows_bindings_and_moves_matching_messages(up: Node, down: Node, x: &str) {
    let (_dc, dch) = down.channel().await;
    within(dch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirms");
    let q = format!("{x}-got");
    topology(&dch, x, &q, "a.*").await;
    federate(&up, &down, x, &format!("{x}-up")).await;
    let link = down
        .links()
        .await
        .into_iter()
        .find(|l| l["exchange"] == x)
        .expect("link listed");
    assert_eq!(link["type"], "exchange");
    assert_eq!(link["upstream"], format!("{x}-up").as_str());
    assert_eq!(link["upstream_exchange"], x);
    assert_eq!(link["vhost"], "/");
    assert!(
        !link["uri"].as_str().unwrap_or("").contains("guest:guest"),
        "{link}"
    );

    eventually("the binding key upstream", || async {
        up.exchange_binding_keys(x).await == ["a.*"]
    })
    .await;
    // Both brokers have the federation upstream exchange type, so that is what the link's
    // internal exchange upstream is (not the fanout fallback).
    let exchanges = up.api("GET", "/api/exchanges/%2F", None).await.json();
    let prefix = format!("federation: {x} -> ");
    let internal: Vec<&Value> = exchanges
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    assert_eq!(internal.len(), 1, "{exchanges}");
    assert_eq!(internal[0]["type"], "x-federation-upstream");
    assert_eq!(internal[0]["internal"], true);
    let (_uc, uch) = up.channel().await;
    within(uch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirms");
    publish(&uch, x, "a.1", "matching").await;
    publish(&uch, x, "b.1", "not bound").await;
    let mut got = take_at_least(&dch, &q, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    got.extend(take(&dch, &q).await);
    assert_eq!(got.len(), 1, "only the bound key crosses");
    assert_eq!(got[0].0, "matching");
    let Some(AMQPValue::FieldArray(hops)) = got[0].1.inner().get("x-received-from") else {
        panic!("x-received-from missing: {:?}", got[0].1);
    };
    let Some(AMQPValue::FieldTable(hop)) = hops.as_slice().first() else {
        panic!("a table per hop");
    };
    let text = |k: &str| match hop.inner().get(k) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(text("exchange"), x);
    assert_eq!(text("vhost"), "/");
    assert!(!text("uri").contains("guest:guest"));

    // A binding made later follows; so does its removal.
    bind(&dch, &q, x, "b.*").await;
    eventually("the new key upstream", || async {
        up.exchange_binding_keys(x).await == ["a.*", "b.*"]
    })
    .await;
    publish(&uch, x, "b.2", "bound later").await;
    let later = take_at_least(&dch, &q, 1).await;
    assert_eq!(later.first().map(|m| m.0.as_str()), Some("bound later"));
    within(dch.queue_unbind(
        q.as_str().into(),
        x.into(),
        "a.*".into(),
        FieldTable::default(),
    ))
    .await
    .expect("unbind");
    eventually("the removed key gone upstream", || async {
        up.exchange_binding_keys(x).await == ["b.*"]
    })
    .await;

    // Without the policy the link goes (and a Warren downstream removes its upstream queue).
    let r = down
        .api("DELETE", &format!("/api/policies/%2F/{x}"), None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    eventually("the link removed", || async {
        !down.links().await.iter().any(|l| l["exchange"] == x)
    })
    .await;
    if down.warren {
        let prefix = format!("federation: {x} -> ");
        eventually("the upstream queue deleted", || async {
            !up.queue_names()
                .await
                .iter()
                .any(|n| n.starts_with(&prefix))
        })
        .await;
    }
}

#[tokio::test]
async fn warren_federates_an_exchange_from_warren() {
    let up = start_with(|c| c.cluster_name = "upstream-cluster".into()).await;
    let down = start_with(|c| c.cluster_name = "downstream-cluster".into()).await;
    a_link_follows_bindings_and_moves_matching_messages(Node::of(&up), Node::of(&down), "fed-ww")
        .await;
}

#[tokio::test]
async fn warren_federates_an_exchange_from_rabbitmq() {
    let rabbit = Rabbit::start().await;
    let warren = start_with(|c| c.cluster_name = "warren-cluster".into()).await;
    // RabbitMQ has the plugin, so the link's internal exchange there is x-federation-upstream.
    a_link_follows_bindings_and_moves_matching_messages(
        Node::rabbit(&rabbit),
        Node::of(&warren),
        "fed-rw",
    )
    .await;
}

#[tokio::test]
async fn rabbitmq_federates_an_exchange_from_warren() {
    let warren = start_with(|c| c.cluster_name = "warren-cluster".into()).await;
    let rabbit = Rabbit::start().await;
    // RabbitMQ's plugin declares its internal exchange on Warren as x-federation-upstream;
    // it would fall back to a fanout only on a 503, and Warren's answer to an unknown type is
    // RabbitMQ 4.x's 406.
    a_link_follows_bindings_and_moves_matching_messages(
        Node::of(&warren),
        Node::rabbit(&rabbit),
        "fed-wr",
    )
    .await;
}

#[tokio::test]
async fn exchanges_federated_from_each_other_pass_a_message_once_each_way() {
    let a = start_with(|c| c.cluster_name = "ring-a".into()).await;
    let b = start_with(|c| c.cluster_name = "ring-b".into()).await;
    let (na, nb) = (Node::of(&a), Node::of(&b));
    let (_ca, cha) = na.channel().await;
    let (_cb, chb) = nb.channel().await;
    for ch in [&cha, &chb] {
        within(ch.confirm_select(ConfirmSelectOptions::default()))
            .await
            .expect("confirms");
        topology(ch, "ring", "ring-q", "#").await;
    }
    federate(&nb, &na, "ring", "from-b").await;
    federate(&na, &nb, "ring", "from-a").await;
    for n in [&na, &nb] {
        eventually("the other side's binding", || async {
            n.exchange_binding_keys("ring").await == ["#"]
        })
        .await;
    }
    publish(&cha, "ring", "k", "from a").await;
    publish(&chb, "ring", "k", "from b").await;
    let bodies = |v: Vec<(String, FieldTable)>| v.into_iter().map(|m| m.0).collect::<Vec<_>>();
    let mut at_a = bodies(take_at_least(&cha, "ring-q", 2).await);
    let mut at_b = bodies(take_at_least(&chb, "ring-q", 2).await);
    // Nothing comes back around.
    tokio::time::sleep(Duration::from_secs(2)).await;
    at_a.extend(bodies(take(&cha, "ring-q").await));
    at_b.extend(bodies(take(&chb, "ring-q").await));
    at_a.sort();
    at_b.sort();
    assert_eq!(at_a, ["from a", "from b"]);
    assert_eq!(at_b, ["from a", "from b"]);
}

/// Messages in queue `q` of `n` (a passive declare on a connection of its own).
async fn queue_depth(n: &Node, q: &str) -> u32 {
    let (_c, ch) = n.channel().await;
    ready(&ch, q).await
}

/// A queue link from `up` to `down` for queue `q`: messages move only while `down`'s queue
/// has a consumer and nothing ready, with RabbitMQ's headers.
async fn a_queue_link_moves_messages_while_consumers_wait(up: Node, down: Node, q: &str) {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let (_uc, uch) = up.channel().await;
    within(uch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .expect("confirms");
    within(uch.queue_declare(q.into(), durable, FieldTable::default()))
        .await
        .expect("upstream queue");
    for i in 0..10 {
        publish(&uch, "", q, &format!("m{i}")).await;
    }
    let (_dc, dch) = down.channel().await;
    within(dch.queue_declare(q.into(), durable, FieldTable::default()))
        .await
        .expect("downstream queue");
    let upstream = format!("{q}-up");
    let r = down
        .api(
            "PUT",
            &format!("/api/parameters/federation-upstream/%2F/{upstream}"),
            Some(json!({"value": {"uri": up.uri, "prefetch-count": 5}})),
        )
        .await;
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    let r = down
        .api(
            "PUT",
            &format!("/api/policies/%2F/{q}"),
            Some(json!({"pattern": format!("^{q}$"), "apply-to": "queues",
                        "definition": {"federation-upstream": upstream}})),
        )
        .await;
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    eventually("the queue link running", || async {
        down.links()
            .await
            .iter()
            .any(|l| l["queue"] == q && l["type"] == "queue" && l["status"] == "running")
    })
    .await;
    let link = down
        .links()
        .await
        .into_iter()
        .find(|l| l["queue"] == q)
        .expect("listed");
    assert_eq!(link["upstream_queue"], q);
    assert_eq!(link["upstream"], upstream.as_str());

    // No consumer downstream: nothing moves.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(queue_depth(&up, q).await, 10, "moved without a consumer");
    assert_eq!(queue_depth(&down, q).await, 0);

    // A consumer downstream: everything comes over, stamped.
    within(dch.basic_qos(10, BasicQosOptions::default()))
        .await
        .expect("qos");
    let mut consumer = within(dch.basic_consume(
        q.into(),
        "local".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let mut bodies = Vec::new();
    while bodies.len() < 10 {
        let d = tokio::time::timeout(
            Duration::from_secs(30),
            futures_lite::StreamExt::next(&mut consumer),
        )
        .await
        .expect("a message within 30 s")
        .expect("stream open")
        .expect("delivery");
        let h = d.properties.headers().clone().unwrap_or_default();
        let text = |t: &FieldTable, k: &str| match t.inner().get(k) {
            Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(text(&h, "x-original-routing-key"), q);
        assert_eq!(text(&h, "x-original-exchange"), "");
        let Some(AMQPValue::FieldArray(hops)) = h.inner().get("x-received-from") else {
            panic!("x-received-from missing: {h:?}");
        };
        let Some(AMQPValue::FieldTable(hop)) = hops.as_slice().first() else {
            panic!("a table per hop");
        };
        assert_eq!(text(hop, "queue"), q);
        assert!(!text(hop, "uri").contains("guest:guest"));
        bodies.push(String::from_utf8_lossy(&d.data).into_owned());
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    bodies.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    want.sort();
    assert_eq!(bodies, want);
    eventually("the upstream queue drained", || async {
        queue_depth(&up, q).await == 0
    })
    .await;

    // Consumer gone: the link pauses again.
    within(dch.basic_cancel("local".into(), BasicCancelOptions::default()))
        .await
        .expect("cancel");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for i in 10..15 {
        publish(&uch, "", q, &format!("m{i}")).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        queue_depth(&up, q).await,
        5,
        "moved after the consumer went"
    );
    assert_eq!(queue_depth(&down, q).await, 0);
}

#[tokio::test]
async fn warren_federates_a_queue_from_warren() {
    let up = start_with(|c| c.cluster_name = "upstream-cluster".into()).await;
    let down = start_with(|c| c.cluster_name = "downstream-cluster".into()).await;
    a_queue_link_moves_messages_while_consumers_wait(Node::of(&up), Node::of(&down), "fq-ww").await;
}

#[tokio::test]
async fn warren_federates_a_queue_from_rabbitmq_and_rabbitmq_from_warren() {
    let rabbit = Rabbit::start().await;
    let warren = start_with(|c| c.cluster_name = "warren-cluster".into()).await;
    a_queue_link_moves_messages_while_consumers_wait(
        Node::rabbit(&rabbit),
        Node::of(&warren),
        "fq-rw",
    )
    .await;
    a_queue_link_moves_messages_while_consumers_wait(
        Node::of(&warren),
        Node::rabbit(&rabbit),
        "fq-wr",
    )
    .await;
}

#[tokio::test]
async fn upstreams_sets_and_policies_are_validated_with_rabbitmqs_texts() {
    let b = start().await;
    let n = Node::of(&b);
    let put = |path: &'static str, body: Value| {
        let n = n.clone();
        async move { n.api("PUT", path, Some(body)).await }
    };
    let r = put(
        "/api/parameters/federation-upstream/%2F/up",
        json!({"value": {}}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\nKey \"uri\" not found in up\n"
    );
    let r = put(
        "/api/parameters/federation-upstream/%2F/up",
        json!({"value": {"uri": "amqp://h", "max-hops": "a", "ack-mode": "bogus"}}),
    )
    .await;
    // Escaped as RabbitMQ's API escapes its Erlang terms.
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\nack-mode should be one of [&lt;&lt;\"no-ack\"&gt;&gt;,\
         &lt;&lt;\"on-publish\"&gt;&gt;,&lt;&lt;\"on-confirm\"&gt;&gt;], actually was \
         &lt;&lt;\"bogus\"&gt;&gt;\nmax-hops should be a number, actually was \
         &lt;&lt;\"a\"&gt;&gt;\n"
    );
    let r = put(
        "/api/parameters/federation-upstream/%2F/up",
        json!({"value": {"uri": "foo://x"}}),
    )
    .await;
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\n\"foo://x\" not a valid URI: {{unexpected_uri_scheme,\"foo\"},\"foo://x\"}\n"
    );
    let r = put(
        "/api/parameters/federation-upstream-set/%2F/s",
        json!({"value": [{"upstream": "a"}, {"max-hops": 1}]}),
    )
    .await;
    assert_eq!(
        r.json()["reason"],
        "Validation failed\n\nKey \"upstream\" not found in s\n"
    );
    let r = put(
        "/api/parameters/federation-upstream-set/%2F/s",
        json!({"value": [{"upstream": "a", "max-hops": 2}]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let together = "cannot specify federation-upstream, federation-upstream-set or \
                    federation-upstream-pattern together";
    for (definition, text) in [
        (
            json!({"federation-upstream": 5}),
            "5 is not a valid federation upstream name",
        ),
        (
            json!({"federation-upstream": "a", "federation-upstream-set": "all"}),
            together,
        ),
        (
            json!({"federation-upstream-pattern": 5}),
            "5 is not a valid federation upstream pattern name",
        ),
        (
            json!({"federation-upstream-pattern": "a", "federation-upstream-set": "all"}),
            together,
        ),
    ] {
        let r = put(
            "/api/policies/%2F/p",
            json!({"pattern": ".*", "definition": definition}),
        )
        .await;
        assert_eq!(r.json()["reason"], format!("Validation failed\n\n{text}\n"));
    }
    let r = put(
        "/api/policies/%2F/p",
        json!({"pattern": ".*", "definition": {"federation-upstream-pattern": "("}}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["reason"].as_str().is_some_and(|t| t.starts_with(
            "Validation failed\n\ncould not compile pattern ( to a regular expression. Error: "
        )),
        "{}",
        r.body
    );
    // A policy naming an upstream that does not exist yet is fine; so is its link list.
    let r = put(
        "/api/policies/%2F/p",
        json!({"pattern": "^x$", "apply-to": "exchanges", "definition": {"federation-upstream": "later"}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(n.links().await.is_empty());
}

#[tokio::test]
async fn a_pattern_policy_links_the_upstreams_whose_names_match() {
    let b = start().await;
    let n = Node::of(&b);
    let (_c, ch) = n.channel().await;
    topology(&ch, "px", "px-q", "#").await;
    // Nothing listens on port 1: the links are listed, in error.
    for name in ["east-1", "east-2", "west-1"] {
        let r = n
            .api(
                "PUT",
                &format!("/api/parameters/federation-upstream/%2F/{name}"),
                Some(json!({"value": {"uri": "amqp://127.0.0.1:1", "reconnect-delay": 60}})),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let r = n
        .api(
            "PUT",
            "/api/policies/%2F/px",
            Some(json!({"pattern": "^px$", "apply-to": "exchanges",
                        "definition": {"federation-upstream-pattern": "^east-"}})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let upstreams = || async {
        let mut u: Vec<String> = n
            .links()
            .await
            .iter()
            .filter(|l| l["exchange"] == "px")
            .filter_map(|l| l["upstream"].as_str().map(str::to_owned))
            .collect();
        u.sort();
        u
    };
    eventually("links to east-1 and east-2", || async {
        upstreams().await == ["east-1", "east-2"]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(upstreams().await, ["east-1", "east-2"], "west-1 stays out");

    // Both are down (nothing listens upstream): the down lists and federation_status say so.
    eventually("both links in error", || async {
        let r = n.api("GET", "/api/federation-links/state/down", None).await;
        let v = r.json();
        v.as_array()
            .is_some_and(|a| a.len() == 2 && a.iter().all(|l| l["status"] == "error"))
    })
    .await;
    let r = n
        .api("GET", "/api/federation-links/%2F/state/down", None)
        .await;
    assert_eq!(r.json().as_array().map(Vec::len), Some(2), "{}", r.body);
    let dir = b.dir.path().to_owned();
    let (code, out, err) = warren_ctl_async(
        &dir,
        &["federation_status", "--only-down", "--formatter", "json"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let listed = listed.as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 2, "{out}");
    assert!(listed
        .iter()
        .all(|l| l["status"] == "error" && l["exchange"] == "px"));
    assert!(listed
        .iter()
        .all(|l| l["error"].as_str().is_some_and(|e| !e.is_empty())));

    // A restart (HTTP, then ctl) runs the link again: a new attempt, a new timestamp.
    let link = n
        .links()
        .await
        .into_iter()
        .find(|l| l["upstream"] == "east-1")
        .expect("east-1");
    let (id, node) = (
        link["id"].as_str().unwrap_or(""),
        link["node"].as_str().unwrap_or(""),
    );
    let path = format!("/api/federation-links/vhost/%2F/{id}/{node}/restart");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = n.api("DELETE", &path, None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let before = link["timestamp"].clone();
    eventually("east-1 tried again", || async {
        n.links()
            .await
            .iter()
            .any(|l| l["upstream"] == "east-1" && l["timestamp"] != before)
    })
    .await;
    let r = n
        .api(
            "DELETE",
            &format!("/api/federation-links/vhost/%2F/nosuch/{node}/restart"),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    let (code, out, _) = warren_ctl_async(&dir, &["restart_federation_link", id]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with(&format!("Restarting federation link {id} on node ")),
        "{out}"
    );
    let (code, _, err) = warren_ctl_async(&dir, &["restart_federation_link", "nosuch"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("Link with the given ID was not found"),
        "{err}"
    );
}
