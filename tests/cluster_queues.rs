//! Queues across three real `warren` processes: a durable queue declared on one node is
//! bound, published to (with confirms) and counted through a second, consumed (prefetch and
//! acks exact) and read with basic.get through a third; with its home node killed it answers
//! RabbitMQ's "home node ... is down" 404 on the others, and comes back with its messages when
//! the node restarts; deleted through another node it is gone everywhere (a node killed or
//! restarted under its consumers is in `cluster_failures.rs`). A node that applies the
//! log late confirms a default-exchange miss against the cluster before a publish through it
//! is returned or dropped, and a bind-ok comes only once it routes by the binding.
//! Another node's connection and channel are shown, and the connection closed, through any
//! node's management API.
//! Another node's exclusive queue is locked (405) and listed with its node (the RPC and
//! pub/sub paths to exclusive queues are in `cluster_exclusive.rs`); dead-lettering crosses
//! nodes, and so do alternate exchanges and the delayed-message exchange;
//! `x-queue-leader-locator=balanced` spreads queues over the nodes; a redeclare on
//! another node counts as use for `x-expires`; a consumer timeout closes the consumer's
//! channel on its own node, and a consumer's connection dropped with deliveries still on
//! their way to it leaves none of them held.

mod common;

use common::cluster::*;
use common::cluster_amqp::*;
use common::http::request;
use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_declared_on_one_node_is_published_to_and_consumed_from_the_others() {
    let (specs, mut children, _) = three().await;
    let (a, b, c) = (
        within(amqp(specs[0].amqp, "%2F")).await.expect("a"),
        within(amqp(specs[1].amqp, "%2F")).await.expect("b"),
        within(amqp(specs[2].amqp, "%2F")).await.expect("c"),
    );

    // Under a policy set on b; declared on a; bound on b; 200 persistent messages published
    // on b, all confirmed.
    let policy = r#"{"pattern":"^orders$","definition":{"max-length":100000},"apply-to":"queues"}"#;
    let r = request(
        specs[1].http,
        "PUT",
        "/api/policies/%2F/roomy",
        Some(("guest", "guest")),
        Some(policy),
    )
    .await;
    assert!(r.status == 201 || r.status == 204, "{}", r.body);
    let on_a = channel(&a).await;
    within(on_a.queue_declare("orders".into(), durable(), FieldTable::default()))
        .await
        .expect("declare on a");
    let on_b = channel(&b).await;
    within(on_b.queue_bind(
        "orders".into(),
        "amq.direct".into(),
        "new".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind on b");
    publish_confirmed(&b, "amq.direct", "new", "m", 200).await;
    assert_eq!(passive(&c, "orders").await, Ok(200), "counted through c");
    assert_eq!(
        passive(&a, "orders").await,
        Ok(200),
        "stored where it lives"
    );
    let r = request(
        specs[2].http,
        "GET",
        "/api/queues/%2F/orders",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["node"], NAMES[0], "the queue's node, seen from c");
    // Seen from c as a shows it: its policy, and the publishes a counted.
    assert_eq!(r.json()["policy"], "roomy", "{}", r.body);
    assert_eq!(r.json()["messages"], 200, "{}", r.body);
    assert_eq!(r.json()["message_stats"]["publish"], 200, "{}", r.body);
    let listed = request(
        specs[2].http,
        "GET",
        "/api/queues/%2F",
        Some(("guest", "guest")),
        None,
    )
    .await
    .json();
    let orders = listed
        .as_array()
        .and_then(|l| l.iter().find(|q| q["name"] == "orders"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(orders["policy"], "roomy", "{listed}");
    assert_eq!(orders["message_stats"]["publish"], 200, "{listed}");

    // A redeclare on c with other arguments is refused as on the home node.
    let on_c = channel(&c).await;
    let mut other = FieldTable::default();
    other.insert("x-max-length".into(), lapin::types::AMQPValue::LongInt(3));
    let refused = within(on_c.queue_declare("orders".into(), durable(), other)).await;
    assert_eq!(refused.err().as_ref().and_then(reply_code), Some(406));

    // Consumed on c with a prefetch of 10: never more than 10 unacked, every message once,
    // in order.
    let on_c = channel(&c).await;
    within(on_c.basic_qos(10, BasicQosOptions::default()))
        .await
        .expect("qos");
    let mut consumer = within(on_c.basic_consume(
        "orders".into(),
        "reader".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume on c");
    let mut held = Vec::new();
    for i in 0..10 {
        let d = within(consumer.next())
            .await
            .expect("open")
            .expect("delivery");
        assert_eq!(d.data, format!("m-{i}").into_bytes());
        held.push(d);
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), consumer.next())
            .await
            .is_err(),
        "an 11th delivery beyond the prefetch of 10"
    );

    // The management API of any node shows the whole cluster's connections and consumers.
    let g = Some(("guest", "guest"));
    let r = request(specs[0].http, "GET", "/api/consumers", g, None).await;
    let consumers = r.json();
    let listed = consumers.as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 1, "one consumer in the cluster: {consumers}");
    assert_eq!(listed[0]["consumer_tag"], "reader");
    assert_eq!(listed[0]["queue"]["name"], "orders");
    assert_eq!(listed[0]["channel_details"]["node"], NAMES[2]);
    let r = request(specs[1].http, "GET", "/api/connections", g, None).await;
    let mut nodes: Vec<String> = r
        .json()
        .as_array()
        .map(|l| {
            l.iter()
                .map(|c| c["node"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    assert_eq!(
        nodes,
        NAMES.to_vec(),
        "one connection per node, listed on b"
    );
    let r = request(specs[1].http, "GET", "/api/overview", g, None).await;
    let totals = &r.json()["object_totals"];
    assert_eq!(totals["connections"], 3, "{totals}");
    assert_eq!(totals["consumers"], 1, "{totals}");
    assert_eq!(totals["queues"], 1, "{totals}");
    let r = request(specs[0].http, "GET", "/api/channels", g, None).await;
    let on_c_channels = r
        .json()
        .as_array()
        .map(|l| l.iter().filter(|c| c["node"] == NAMES[2]).count())
        .unwrap_or_default();
    assert!(on_c_channels >= 1, "c's channels listed on a: {}", r.body);

    // Another node's connection and its channel are shown, and it is closed, through a.
    let url = format!("amqp://guest:guest@127.0.0.1:{}/%2F", specs[2].amqp);
    let props = lapin::ConnectionProperties::default().with_connection_name("mover".into());
    let mover = within(Connection::connect(&url, props))
        .await
        .expect("mover on c");
    let _moving = channel(&mover).await;
    let listed = request(specs[0].http, "GET", "/api/connections", g, None)
        .await
        .json();
    let name = listed
        .as_array()
        .and_then(|l| l.iter().find(|c| c["user_provided_name"] == "mover"))
        .and_then(|c| c["name"].as_str())
        .expect("c's connection listed on a")
        .to_owned();
    let path = format!("/api/connections/{}", common::urlencode(&name));
    let shown = request(specs[0].http, "GET", &path, g, None).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.json()["name"], name.as_str());
    assert_eq!(shown.json()["node"], NAMES[2]);
    let its = request(specs[0].http, "GET", &format!("{path}/channels"), g, None).await;
    let its = its.json();
    let its = its.as_array().cloned().unwrap_or_default();
    assert_eq!(its.len(), 1, "its one channel, through a: {its:?}");
    assert_eq!(its[0]["connection_details"]["name"], name.as_str());
    let one = format!(
        "/api/channels/{}",
        common::urlencode(&format!("{name} (1)"))
    );
    let one = request(specs[0].http, "GET", &one, g, None).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.json()["node"], NAMES[2]);
    let closing = common::server_close_code(mover.events_listener());
    let r = request(specs[0].http, "DELETE", &path, g, None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(closing.await, Some(320), "closed with CONNECTION_FORCED");
    within(async {
        while request(specs[0].http, "GET", &path, g, None).await.status != 404 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let r = request(specs[1].http, "DELETE", &path, g, None).await;
    assert_eq!(r.status, 404, "closed already: {}", r.body);
    for d in held.drain(..) {
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    for i in 10..200 {
        let d = within(consumer.next())
            .await
            .expect("open")
            .expect("delivery");
        assert_eq!(d.data, format!("m-{i}").into_bytes());
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    within(on_c.close(200, "done".into())).await.expect("close");
    eventually_count(&a, "orders", 0, "acked on c, gone on a").await;

    // Through the default exchange from c, read with basic.get on b.
    publish_confirmed(&c, "", "orders", "g", 1).await;
    let got = within(on_b.basic_get("orders".into(), BasicGetOptions::default()))
        .await
        .expect("get on b")
        .expect("a message");
    assert_eq!(got.delivery.data, b"g-0".to_vec());
    within(got.delivery.ack(BasicAckOptions::default()))
        .await
        .expect("ack the get");

    // Its home node killed: the others answer RabbitMQ's 404 for it; back with its messages.
    publish_confirmed(&b, "amq.direct", "new", "kept", 5).await;
    children[0].start_kill().expect("kill a");
    let _ = children[0].wait().await;
    let down = passive(&b, "orders").await.expect_err("home down");
    assert_eq!(down.0, Some(404), "{}", down.1);
    assert!(
        down.1.contains(
            "home node 'warren-a@127.0.0.1' of durable queue 'orders' in vhost '/' is down or inaccessible"
        ),
        "{}",
        down.1
    );
    children[0] = spawn(&specs[0]);
    eventually_count(&b, "orders", 5, "back with its messages after a's restart").await;

    // Deleted through c: gone everywhere, its bindings with it.
    let on_c = channel(&c).await;
    let n = within(on_c.queue_delete("orders".into(), QueueDeleteOptions::default()))
        .await
        .expect("delete on c");
    assert_eq!(n, 5);
    for (conn, at) in [(&b, "b"), (&c, "c")] {
        let start = Instant::now();
        while passive(conn, "orders").await.is_ok() {
            assert!(start.elapsed() < Duration::from_secs(10), "still on {at}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a again");
    assert_eq!(passive(&a, "orders").await.map_err(|e| e.0), Err(Some(404)));
    drop(specs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queues_are_locked_elsewhere_dead_letters_cross_nodes_and_balanced_queues_spread()
{
    let (specs, _children, _) = three().await;
    let b = within(amqp(specs[1].amqp, "%2F")).await.expect("b");
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    let on_b = channel(&b).await;
    let reply = within(on_b.queue_declare(
        "".into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("exclusive on b");
    let name = reply.name().to_string();
    assert!(name.starts_with("amq.gen-"), "{name}");
    assert_eq!(
        passive(&b, &name).await,
        Ok(0),
        "its own connection sees it"
    );
    // Another node's client is refused it as another connection is on its own node, and the
    // management API lists it everywhere with its node.
    let locked = passive(&c, &name).await.expect_err("locked on c");
    assert_eq!(locked.0, Some(405), "{}", locked.1);
    assert!(
        locked.1.contains(&format!(
            "cannot obtain exclusive access to locked queue '{name}' in vhost '/'"
        )),
        "{}",
        locked.1
    );
    let r = request(
        specs[0].http,
        "GET",
        &format!("/api/queues/%2F/{name}"),
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["node"], NAMES[1], "{}", r.body);
    assert_eq!(r.json()["exclusive"], true, "{}", r.body);

    // Dead-lettering crosses nodes: a message rejected on c from a queue on b goes through
    // a fanout exchange declared on c to a queue declared on a.
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let on_a = channel(&a).await;
    within(on_a.queue_declare("dead".into(), durable(), FieldTable::default()))
        .await
        .expect("dead on a");
    let on_c = channel(&c).await;
    within(on_c.exchange_declare(
        "dlx".into(),
        lapin::ExchangeKind::Fanout,
        lapin::options::ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("dlx on c");
    within(on_c.queue_bind(
        "dead".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind dead");
    let mut dl = FieldTable::default();
    dl.insert(
        "x-dead-letter-exchange".into(),
        lapin::types::AMQPValue::LongString("dlx".into()),
    );
    within(on_b.queue_declare("doomed".into(), durable(), dl))
        .await
        .expect("doomed on b");
    publish_confirmed(&a, "", "doomed", "d", 1).await;
    let got = within(on_c.basic_get("doomed".into(), BasicGetOptions::default()))
        .await
        .expect("get on c")
        .expect("a message");
    within(
        got.delivery
            .reject(lapin::options::BasicRejectOptions { requeue: false }),
    )
    .await
    .expect("reject");
    eventually_count(&c, "dead", 1, "dead-lettered across nodes").await;

    // An alternate exchange crosses nodes: "main" declared on a with "alt" (declared on b)
    // as its alternate; a queue declared on c bound to "alt"; a message published on b that
    // "main" cannot route lands there.
    let durable_x = lapin::options::ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    within(on_b.exchange_declare(
        "alt".into(),
        lapin::ExchangeKind::Fanout,
        durable_x,
        FieldTable::default(),
    ))
    .await
    .expect("alt on b");
    let mut with_ae = FieldTable::default();
    with_ae.insert(
        "alternate-exchange".into(),
        lapin::types::AMQPValue::LongString("alt".into()),
    );
    within(on_a.exchange_declare(
        "main".into(),
        lapin::ExchangeKind::Direct,
        durable_x,
        with_ae,
    ))
    .await
    .expect("main on a");
    within(on_c.queue_declare("caught".into(), durable(), FieldTable::default()))
        .await
        .expect("caught on c");
    within(on_a.queue_bind(
        "caught".into(),
        "alt".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind caught on a");
    publish_confirmed(&b, "main", "nobody", "ae", 2).await;
    eventually_count(&a, "caught", 2, "caught by the alternate across nodes").await;

    // The delayed-message exchange crosses nodes: declared on c, a queue declared on a bound
    // to it on b; a message published on b with x-delay 1 s is held, then reaches the queue.
    let mut delayed_type = FieldTable::default();
    delayed_type.insert(
        "x-delayed-type".into(),
        lapin::types::AMQPValue::LongString("direct".into()),
    );
    within(on_c.exchange_declare(
        "later".into(),
        lapin::ExchangeKind::Custom("x-delayed-message".into()),
        durable_x,
        delayed_type,
    ))
    .await
    .expect("later on c");
    within(on_a.queue_declare("in-time".into(), durable(), FieldTable::default()))
        .await
        .expect("in-time on a");
    within(on_b.queue_bind(
        "in-time".into(),
        "later".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("bind in-time on b");
    let mut delay = FieldTable::default();
    delay.insert("x-delay".into(), lapin::types::AMQPValue::LongInt(1000));
    let published = Instant::now();
    within(
        on_b.basic_publish(
            "later".into(),
            "k".into(),
            BasicPublishOptions::default(),
            b"held",
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_headers(delay),
        ),
    )
    .await
    .expect("publish delayed on b");
    assert_eq!(passive(&c, "in-time").await, Ok(0), "held for its delay");
    eventually_count(&c, "in-time", 1, "delivered after its delay across nodes").await;
    assert!(
        published.elapsed() >= Duration::from_millis(900),
        "{:?}",
        published.elapsed()
    );
    // Gone again, so the balanced placement below counts what it counted before.
    for q in ["caught", "in-time"] {
        within(on_b.queue_delete(q.into(), QueueDeleteOptions::default()))
            .await
            .expect("delete through b");
    }
    eventually_count(&b, "doomed", 0, "gone from its queue").await;

    // x-queue-leader-locator=balanced spreads queues declared on b over the three nodes.
    let mut balanced = FieldTable::default();
    balanced.insert(
        "x-queue-leader-locator".into(),
        lapin::types::AMQPValue::LongString("balanced".into()),
    );
    let mut homes = Vec::new();
    for i in 0..3 {
        let q = format!("spread-{i}");
        within(on_b.queue_declare(q.as_str().into(), durable(), balanced.clone()))
            .await
            .expect("balanced declare");
        let r = request(
            specs[2].http,
            "GET",
            &format!("/api/queues/%2F/{q}"),
            Some(("guest", "guest")),
            None,
        )
        .await;
        homes.push(r.json()["node"].as_str().unwrap_or_default().to_string());
    }
    homes.sort();
    assert_eq!(homes, NAMES.to_vec(), "one queue per node");
    let mut bad = FieldTable::default();
    bad.insert(
        "x-queue-leader-locator".into(),
        lapin::types::AMQPValue::LongString("nearest".into()),
    );
    let refused = within(on_c.queue_declare("spread-bad".into(), durable(), bad)).await;
    let e = refused.expect_err("an unknown locator");
    assert_eq!(reply_code(&e), Some(406));
    assert!(
        e.to_string().contains(
            "invalid arg 'x-queue-leader-locator' for queue 'spread-bad' in vhost '/': invalid_queue_locator_arg"
        ),
        "{e}"
    );

    // x-expires counts a redeclare on another node as use: declared on a with 1.5 s, kept
    // alive for 3 s by redeclares on b, then left alone it expires.
    let mut expiring = FieldTable::default();
    expiring.insert("x-expires".into(), lapin::types::AMQPValue::LongInt(1500));
    let a = within(amqp(specs[0].amqp, "%2F")).await.expect("a");
    let on_a = channel(&a).await;
    within(on_a.queue_declare("short-lived".into(), durable(), expiring.clone()))
        .await
        .expect("declare on a");
    let on_b = channel(&b).await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        within(on_b.queue_declare("short-lived".into(), durable(), expiring.clone()))
            .await
            .expect("redeclare on b keeps it");
    }
    let seen = "/api/queues/%2F/short-lived";
    let r = request(specs[0].http, "GET", seen, Some(("guest", "guest")), None).await;
    assert_eq!(r.status, 200, "still there after 2x its expiry: {}", r.body);
    assert_eq!(
        r.json()["node"],
        NAMES[0],
        "the same queue, not one b declared anew"
    );
    let start = Instant::now();
    loop {
        let r = request(specs[0].http, "GET", seen, Some(("guest", "guest")), None).await;
        if r.status == 404 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A consumer on c of a's queue with a 300 ms consumer timeout that never acks: c closes
    // its channel with 406, as for a local queue, and the message is ready again at home.
    let mut timeout = FieldTable::default();
    timeout.insert(
        "x-consumer-timeout".into(),
        lapin::types::AMQPValue::LongInt(300),
    );
    within(on_a.queue_declare("slow".into(), durable(), timeout))
        .await
        .expect("declare slow on a");
    publish_confirmed(&a, "", "slow", "s", 1).await;
    let mut raw = common::raw::Raw::open(([127, 0, 0, 1], specs[2].amqp).into()).await;
    raw.send(&common::raw::consume("slow", "stuck")).await;
    let closed = tokio::time::timeout(STEP, raw.channel_close_code()).await;
    assert_eq!(closed.expect("closed in time"), Some((1, 406)));
    eventually_count(&a, "slow", 1, "the held message is back at home").await;

    // A consumer on c of a's queue whose connection drops (reset) while deliveries are still
    // on their way to it, forwarded to c but not written to the client: none stays held.
    within(on_a.queue_declare("inflight".into(), durable(), FieldTable::default()))
        .await
        .expect("declare inflight on a");
    let sent = publish_big(&on_a, "inflight", 2_000).await;
    eventually_count(&a, "inflight", sent, "all published").await;
    let mut raw = common::raw::Raw::open(([127, 0, 0, 1], specs[2].amqp).into()).await;
    raw.send(&common::raw::consume("inflight", "unread")).await;
    // The client reads nothing: the socket buffers fill, c's connection stops taking
    // deliveries (its channel's unacked count stands still) and the rest waits on c.
    eventually_count(&a, "inflight", 0, "all handed out to c").await;
    let start = Instant::now();
    let (mut last, mut still) = (0, 0);
    while still < 4 {
        assert!(start.elapsed() < Duration::from_secs(30), "c never stalled");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let guest = Some(("guest", "guest"));
        let r = request(specs[2].http, "GET", "/api/channels", guest, None).await;
        let held = r.json().as_array().map_or(0, |chs| {
            chs.iter()
                .filter_map(|c| c["messages_unacknowledged"].as_u64())
                .max()
                .unwrap_or(0)
        });
        still = if held > 0 && held == last {
            still + 1
        } else {
            0
        };
        last = held;
    }
    assert!(
        last < u64::from(sent),
        "some deliveries not yet written: {last}"
    );
    drop(raw);
    eventually_count(&a, "inflight", sent, "every delivery is back at home").await;
    drop(specs);
}

/// Publishes `n` 16 KiB messages to `queue` through `ch` (more than the socket buffers of a
/// consumer that reads nothing hold); returns `n`.
async fn publish_big(ch: &lapin::Channel, queue: &str, n: u32) -> u32 {
    let body = vec![b'x'; 16 * 1024];
    for _ in 0..n {
        within(ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_the_log_confirms_its_miss_before_a_publish_goes_nowhere() {
    // a and b form the group (so one of them leads); c joins applying every committed entry
    // 300 ms late, so a queue declared through a is not on c yet when a answers declare-ok.
    let (specs, _) = three_specs("");
    let mut children = vec![spawn(&specs[0]), spawn(&specs[1])];
    let start = Instant::now();
    let a = loop {
        if let Ok(Ok(a)) = tokio::time::timeout(STEP, amqp(specs[0].amqp, "%2F")).await {
            let ch = channel(&a).await;
            let warm = ch.queue_declare("warm".into(), durable(), FieldTable::default());
            if within(warm).await.is_ok() {
                break a;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "a and b never formed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    children.push(spawn_with(
        &specs[2],
        &[("WARREN_FAULT_APPLY_DELAY_MS", "300")],
    ));
    let all_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    eventually_nodes(specs[2].http, &all_up, "c sees the cluster").await;
    let c = within(amqp(specs[2].amqp, "%2F")).await.expect("c");
    eventually_count(&c, "warm", 0, "c caught up with the log").await;

    let on_a = channel(&a).await;
    let on_c = channel(&c).await;
    within(on_c.confirm_select(Default::default()))
        .await
        .expect("confirm.select");
    for i in 0..5 {
        // Mandatory through AMQP: confirmed, never returned.
        let q = format!("fresh-{i}");
        within(on_a.queue_declare(q.as_str().into(), durable(), FieldTable::default()))
            .await
            .expect("declare on a");
        let confirm = within(on_c.basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"at once",
            BasicProperties::default().with_delivery_mode(2),
        ))
        .await
        .expect("publish on c");
        let confirmation = within(confirm).await.expect("confirm");
        assert!(confirmation.is_ack(), "{q}: {confirmation:?}");
        let returned = confirmation.take_message().map(|m| m.reply_code);
        assert_eq!(
            returned, None,
            "{q}: the publish right after the declare came back"
        );
        assert_eq!(passive(&a, &q).await, Ok(1), "{q} holds it");

        // Through c's management API: routed.
        let q = format!("fresh-http-{i}");
        within(on_a.queue_declare(q.as_str().into(), durable(), FieldTable::default()))
            .await
            .expect("declare on a");
        let body = format!(
            r#"{{"routing_key":"{q}","payload":"at once","payload_encoding":"string","properties":{{}}}}"#
        );
        let r = request(
            specs[2].http,
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            Some(("guest", "guest")),
            Some(&body),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["routed"], true, "{q}: {}", r.body);
        assert_eq!(passive(&a, &q).await, Ok(1), "{q} holds it");

        // Bound on a to a direct exchange, published to through c at once, mandatory: the
        // bind-ok came only once c had the binding, so c routes by it.
        let q = format!("bound-{i}");
        within(on_a.queue_declare(q.as_str().into(), durable(), FieldTable::default()))
            .await
            .expect("declare on a");
        within(on_a.queue_bind(
            q.as_str().into(),
            "amq.direct".into(),
            q.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("bind on a");
        let confirm = within(on_c.basic_publish(
            "amq.direct".into(),
            q.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"at once",
            BasicProperties::default().with_delivery_mode(2),
        ))
        .await
        .expect("publish on c");
        let returned = within(confirm).await.expect("confirm").take_message();
        assert_eq!(
            returned.map(|m| m.reply_code),
            None,
            "{q}: the publish right after the bind came back"
        );
        assert_eq!(passive(&a, &q).await, Ok(1), "{q} holds it");
    }
    drop(specs);
}
