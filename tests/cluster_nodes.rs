//! Three real `warren` processes formed into a cluster by their seed lists (`cluster_nodes`,
//! `cluster_secret`), each on its own loopback ports and data dir: every node's
//! `/api/nodes` lists all three running, each with its own stats and links; a node killed with SIGKILL shows as not running on
//! the others and running again after its restart; a node with another secret that tries to
//! join through the seeds is never taken in. Users are replicated: one created over HTTP on
//! one node logs in on the others (with permissions granted on one node, over AMQP on
//! another), and its deletion, permissions included, reaches a node that was down meanwhile.
//! Vhosts, policies and limits hold on every node; so do exchanges and exchange-to-exchange
//! bindings, which route on every node and go (auto-delete included) on every node.

mod common;

use common::cluster::*;
use common::http::request;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_list_forms_a_cluster_that_sees_a_killed_node_go_and_come_back() {
    let names = NAMES;
    let (specs, mut children, seeds) = three().await;
    let all_up: Vec<(&str, bool)> = names.iter().map(|n| (*n, true)).collect();

    // Asked on a, every running node describes itself: its own process, memory and data
    // dir, its links to the other two, no partitions.
    let r = request(
        specs[0].http,
        "GET",
        "/api/nodes",
        Some(("guest", "guest")),
        None,
    )
    .await;
    let listed = r.json();
    let listed = listed.as_array().expect("a list");
    assert_eq!(listed.len(), 3, "{}", r.body);
    let mut pids = std::collections::BTreeSet::new();
    for (n, s) in listed.iter().zip(&specs) {
        assert_eq!(n["name"], s.name.as_str());
        assert_eq!(n["running"], true);
        assert!(n["mem_used"].as_u64().unwrap_or(0) > 0, "{n}");
        assert_eq!(n["db_dir"], s.dir.path().join("data").display().to_string());
        assert_eq!(n["partitions"], serde_json::json!([]), "{n}");
        let mut links: Vec<&str> = n["cluster_links"]
            .as_array()
            .expect("links")
            .iter()
            .filter_map(|l| l["name"].as_str())
            .collect();
        links.sort_unstable();
        let others: Vec<&str> = names.iter().copied().filter(|m| *m != s.name).collect();
        assert_eq!(links, others, "{n}");
        pids.insert(n["os_pid"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(pids.len(), 3, "three processes: {pids:?}");

    // kill -9 of c: a and b see it down.
    children[2].kill().await.expect("kill");
    let c_down = [(names[0], true), (names[1], true), (names[2], false)];
    for s in &specs[..2] {
        eventually_nodes(s.http, &c_down, "c killed").await;
    }
    let r = request(
        specs[0].http,
        "GET",
        "/api/nodes",
        Some(("guest", "guest")),
        None,
    )
    .await;
    let c = r.json()[2].clone();
    assert_eq!(
        (c["running"].clone(), c.get("mem_used")),
        (false.into(), None),
        "{c}"
    );
    // c restarts on its data dir and ports, and is seen again.
    children[2] = spawn(&specs[2]);
    for s in &specs {
        eventually_nodes(s.http, &all_up, "c restarted").await;
    }

    // A node with another secret, not in the seed list, tries to join through the seeds.
    let stranger = spec("warren-x@127.0.0.1", free_port(), "not-the-cookie", &seeds);
    let _x = spawn(&stranger);
    tokio::time::sleep(Duration::from_secs(3)).await;
    eventually_nodes(specs[0].http, &all_up, "the stranger stays out").await;
    let seen_by_stranger = nodes(stranger.http).await.expect("stranger answers");
    assert_eq!(
        seen_by_stranger,
        vec![("warren-x@127.0.0.1".to_string(), true)],
        "the stranger was never taken in"
    );
    drop(stranger.dir);
    drop(specs);
}

async fn status_as(at: SocketAddr, user: &str, pass: &str) -> u16 {
    request(at, "GET", "/api/overview", Some((user, pass)), None)
        .await
        .status
}

async fn eventually_status(at: SocketAddr, user: &str, pass: &str, want: u16, what: &str) {
    let start = Instant::now();
    loop {
        let got = status_as(at, user, pass).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: {user} at {at} got {got}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn user_names(at: SocketAddr) -> Vec<String> {
    let r = request(at, "GET", "/api/users", Some(("guest", "guest")), None).await;
    let mut names: Vec<String> = r
        .json()
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_made_on_one_node_log_in_on_every_node_and_their_deletion_reaches_a_node_that_was_down(
) {
    let (specs, mut children, _) = three().await;
    let [a, b, c] = [specs[0].http, specs[1].http, specs[2].http];
    let body = r#"{"password": "pw", "tags": "administrator"}"#;
    let made = request(
        a,
        "PUT",
        "/api/users/alice",
        Some(("guest", "guest")),
        Some(body),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    // Answered on a means applied on a.
    assert_eq!(status_as(a, "alice", "pw").await, 200);
    for at in [b, c] {
        eventually_status(at, "alice", "pw", 200, "alice replicated").await;
    }
    for at in [a, b, c] {
        assert_eq!(
            user_names(at).await,
            vec!["alice", "guest"],
            "users at {at}"
        );
    }
    // Permissions too: granted on a, alice opens an AMQP connection to "/" on c.
    let grant = r#"{"configure": ".*", "write": ".*", "read": ".*"}"#;
    let path = "/api/permissions/%2F/alice";
    let granted = request(a, "PUT", path, Some(("guest", "guest")), Some(grant)).await;
    assert_eq!(granted.status, 201, "{}", granted.body);
    let url = format!("amqp://alice:pw@127.0.0.1:{}/%2f", specs[2].amqp);
    let start = Instant::now();
    loop {
        match lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await {
            Ok(conn) => {
                let _ = conn.close(200, "bye".into()).await;
                break;
            }
            Err(e) => assert!(start.elapsed() < Duration::from_secs(30), "alice on c: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // c goes down; alice is deleted through b meanwhile.
    children[2].kill().await.expect("kill");
    let gone = request(
        b,
        "DELETE",
        "/api/users/alice",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    assert_eq!(status_as(b, "alice", "pw").await, 401);
    eventually_status(a, "alice", "pw", 401, "deletion replicated").await;
    // c restarts with alice in its own tables, and catches up from the group's log.
    children[2] = spawn(&specs[2]);
    let all_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    eventually_nodes(c, &all_up, "c restarted").await;
    eventually_status(c, "alice", "pw", 401, "c caught up").await;
    assert_eq!(status_as(c, "guest", "guest").await, 200);
    assert_eq!(user_names(c).await, vec!["guest"]);
    // Her permissions went with her, everywhere.
    for at in [a, b, c] {
        let r = request(
            at,
            "GET",
            "/api/permissions",
            Some(("guest", "guest")),
            None,
        )
        .await;
        let users: Vec<String> = r
            .json()
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|p| p["user"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(users, vec!["guest"], "permissions at {at}");
    }
    drop(specs);
}

async fn get_json(at: SocketAddr, path: &str) -> (u16, Value) {
    let r = request(at, "GET", path, Some(("guest", "guest")), None).await;
    let body = if r.status == 200 {
        r.json()
    } else {
        Value::Null
    };
    (r.status, body)
}

async fn put(at: SocketAddr, path: &str, body: &str) -> u16 {
    let r = request(at, "PUT", path, Some(("guest", "guest")), Some(body)).await;
    assert!(
        r.status < 300,
        "PUT {path} at {at}: {} {}",
        r.status,
        r.body
    );
    r.status
}

/// Polls `path` at `at` until `check` accepts its status and body.
async fn eventually_json(
    at: SocketAddr,
    path: &str,
    what: &str,
    check: impl Fn(u16, &Value) -> bool,
) {
    let start = Instant::now();
    loop {
        let (status, body) = get_json(at, path).await;
        if check(status, &body) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: GET {path} at {at} stayed {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhosts_policies_limits_and_parameters_made_on_one_node_hold_on_every_node() {
    let (specs, mut children, _) = three().await;
    let [a, b, c] = [specs[0].http, specs[1].http, specs[2].http];
    let ports = [specs[0].amqp, specs[1].amqp, specs[2].amqp];

    // Made on a, used at once through b and c: a node that misses the vhost confirms the
    // miss with the cluster before answering, so there is no window for a stale "not found".
    assert_eq!(put(a, "/api/vhosts/v1", "{}").await, 201);
    assert_eq!(put(a, "/api/vhosts/v1", "{}").await, 204);
    let grant = r#"{"configure": ".*", "write": ".*", "read": ".*"}"#;
    assert_eq!(put(b, "/api/permissions/v1/guest", grant).await, 201);
    let on_c = amqp(ports[2], "v1")
        .await
        .expect("guest opens v1 on c at once");
    let on_a = amqp(ports[0], "v1").await.expect("guest opens v1 on a");

    // A policy set through b applies to a queue declared on c.
    let policy =
        r#"{"pattern": "^capped\\.", "definition": {"max-length": 1}, "apply-to": "queues"}"#;
    assert_eq!(put(b, "/api/policies/v1/cap", policy).await, 201);
    let ch = on_c.create_channel().await.expect("channel");
    let q = "capped.q";
    let start = Instant::now();
    loop {
        ch.queue_declare(q.into(), Default::default(), Default::default())
            .await
            .expect("declare");
        for body in [&b"1"[..], b"2", b"3"] {
            ch.basic_publish(
                "".into(),
                q.into(),
                Default::default(),
                body,
                Default::default(),
            )
            .await
            .expect("publish");
        }
        let depth = ch
            .queue_declare(
                q.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .expect("passive")
            .message_count();
        if depth == 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the policy never capped {q} on c: {depth}"
        );
        ch.queue_purge(q.into(), Default::default())
            .await
            .expect("purge");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A vhost limit set on a refuses connections on c; cleared on b, they are let in again.
    put(a, "/api/vhost-limits/v1/max-connections", r#"{"value": 0}"#).await;
    eventually_json(c, "/api/vhost-limits/v1", "limit replicated", |s, v| {
        s == 200 && v[0]["value"]["max-connections"] == 0
    })
    .await;
    assert!(
        amqp(ports[2], "v1").await.is_err(),
        "max-connections 0 holds on c"
    );
    let cleared = request(
        b,
        "DELETE",
        "/api/vhost-limits/v1/max-connections",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(cleared.status, 204, "{}", cleared.body);
    eventually_json(c, "/api/vhost-limits/v1", "limit cleared", |s, v| {
        s == 200 && v == &serde_json::json!([])
    })
    .await;
    amqp(ports[2], "v1")
        .await
        .expect("let in again")
        .close(200, "bye".into())
        .await
        .expect("close");

    // Global parameters and user limits: one cluster, one set of them.
    put(
        a,
        "/api/global-parameters/cluster_name",
        r#"{"value": "warren-test"}"#,
    )
    .await;
    put(a, "/api/user-limits/guest/max-channels", r#"{"value": 64}"#).await;
    for at in [b, c] {
        eventually_json(
            at,
            "/api/cluster-name",
            "cluster name replicated",
            |s, v| s == 200 && v["name"] == "warren-test",
        )
        .await;
        eventually_json(
            at,
            "/api/user-limits/guest",
            "user limit replicated",
            |s, v| s == 200 && v[0]["value"]["max-channels"] == 64,
        )
        .await;
    }
    // ... and what a client's connection.start says on every node.
    for port in ports {
        use amq_protocol::protocol::{connection, AMQPClass};
        use amq_protocol::types::AMQPValue;
        let mut raw = common::raw::Raw::connect(([127, 0, 0, 1], port).into()).await;
        raw.send(b"AMQP\x00\x00\x09\x01").await;
        let Some(amq_protocol::frame::AMQPFrame::Method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::Start(start)),
        )) = raw.frame().await
        else {
            panic!("no connection.start");
        };
        let name = start.server_properties.inner().get("cluster_name").cloned();
        assert!(
            matches!(&name, Some(AMQPValue::LongString(s)) if s.to_string() == "warren-test"),
            "{name:?}"
        );
    }
    let ids: Vec<Value> = {
        let mut ids = Vec::new();
        for at in [a, b, c] {
            ids.push(
                get_json(at, "/api/global-parameters/internal_cluster_id")
                    .await
                    .1["value"]
                    .clone(),
            );
        }
        ids
    };
    assert!(
        ids[0].is_string() && ids.iter().all(|i| *i == ids[0]),
        "one cluster id: {ids:?}"
    );

    // b goes down; v1 is deleted through c: c's clients on v1 are closed, a follows, and b
    // drops v1 with its policy and permissions when it comes back.
    children[1].kill().await.expect("kill b");
    let gone = request(
        c,
        "DELETE",
        "/api/vhosts/v1",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    assert_eq!(get_json(c, "/api/vhosts/v1").await.0, 404);
    let start = Instant::now();
    while on_c.status().connected() || on_a.status().connected() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "v1's connections stay open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually_json(a, "/api/vhosts/v1", "deletion replicated", |s, _| s == 404).await;
    children[1] = spawn(&specs[1]);
    let all_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    eventually_nodes(b, &all_up, "b restarted").await;
    eventually_json(b, "/api/vhosts/v1", "b caught up", |s, _| s == 404).await;
    for at in [a, b, c] {
        let (_, perms) = get_json(at, "/api/permissions").await;
        let vhosts: Vec<&str> = perms
            .as_array()
            .map(|l| l.iter().filter_map(|p| p["vhost"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(vhosts, vec!["/"], "permissions at {at}");
        assert_eq!(
            get_json(at, "/api/policies").await.1,
            serde_json::json!([]),
            "policies at {at}"
        );
        let (_, names) = get_json(at, "/api/vhosts").await;
        assert_eq!(
            names.as_array().map(Vec::len),
            Some(1),
            "vhosts at {at}: {names}"
        );
    }
    // A re-created v1 starts empty on every node.
    assert_eq!(put(b, "/api/vhosts/v1", "{}").await, 201);
    assert!(
        amqp(ports[0], "v1").await.is_err(),
        "no permission survives in the new v1"
    );
    drop(specs);
}

async fn exchange_exists(ch_of: &lapin::Connection, name: &str) -> bool {
    let ch = ch_of.create_channel().await.expect("channel");
    let passive = lapin::options::ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    match ch
        .exchange_declare(
            name.into(),
            lapin::ExchangeKind::Direct,
            passive,
            Default::default(),
        )
        .await
    {
        Ok(()) => true,
        Err(e) if reply_code(&e) == Some(404) => false,
        Err(e) => panic!("passive declare of {name}: {e}"),
    }
}

/// Waits until `name` is gone as seen through `conn`: a node serves hits from what it has
/// applied, so another node's delete shows there a moment after it was answered (misses,
/// in contrast, are confirmed with the cluster, so what was made elsewhere is seen at once).
async fn eventually_absent(conn: &lapin::Connection, name: &str, what: &str) {
    let start = Instant::now();
    while exchange_exists(conn, name).await {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_and_their_bindings_made_on_one_node_route_and_go_on_every_node() {
    use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
    use lapin::ExchangeKind;
    let (specs, mut children, _) = three().await;
    let [a, b, c] = [specs[0].http, specs[1].http, specs[2].http];
    let on_a = amqp(specs[0].amqp, "%2f").await.expect("a");
    let on_b = amqp(specs[1].amqp, "%2f").await.expect("b");
    let on_c = amqp(specs[2].amqp, "%2f").await.expect("c");
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };

    // Declared and joined on a: "incoming" (fanout) feeds "orders" (direct).
    let cha = on_a.create_channel().await.expect("channel");
    for (x, kind) in [
        ("orders", ExchangeKind::Direct),
        ("incoming", ExchangeKind::Fanout),
    ] {
        cha.exchange_declare(x.into(), kind, durable, Default::default())
            .await
            .expect("declare on a");
    }
    cha.exchange_bind(
        "orders".into(),
        "incoming".into(),
        "".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("bind on a");

    // b knows both at once; a redeclare with another type is inequivalent there too.
    assert!(exchange_exists(&on_b, "orders").await, "orders on b");
    let chb = on_b.create_channel().await.expect("channel");
    let refused = chb
        .exchange_declare(
            "orders".into(),
            ExchangeKind::Fanout,
            durable,
            Default::default(),
        )
        .await;
    assert_eq!(
        refused.as_ref().err().and_then(reply_code),
        Some(406),
        "{refused:?}"
    );

    // A queue on c bound to "orders" gets what is published on c to "incoming": c routes
    // through the exchange-to-exchange binding made on a.
    let chc = on_c.create_channel().await.expect("channel");
    chc.queue_declare(
        "on-c".into(),
        QueueDeclareOptions::default(),
        Default::default(),
    )
    .await
    .expect("queue on c");
    chc.queue_bind(
        "on-c".into(),
        "orders".into(),
        "k".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("queue bind on c");
    chc.basic_publish(
        "incoming".into(),
        "k".into(),
        Default::default(),
        b"routed",
        Default::default(),
    )
    .await
    .expect("publish on c");
    let start = Instant::now();
    let got = loop {
        let got = chc
            .basic_get("on-c".into(), Default::default())
            .await
            .expect("get");
        if let Some(m) = got {
            break m.delivery.data.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nothing reached on-c"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(got, b"routed");
    let (status, bindings) = get_json(b, "/api/exchanges/%2f/incoming/bindings/source").await;
    assert_eq!(status, 200);
    let to: Vec<(&str, &str)> = bindings
        .as_array()
        .map(|l| {
            l.iter()
                .map(|x| {
                    (
                        x["destination"].as_str().unwrap_or_default(),
                        x["destination_type"].as_str().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(to, vec![("orders", "exchange")], "bindings listed on b");

    // An auto-delete exchange made on b and bound to "orders" goes on every node when c
    // removes its last binding.
    let auto = ExchangeDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    let chb = on_b.create_channel().await.expect("channel");
    chb.exchange_declare("temp".into(), ExchangeKind::Topic, auto, Default::default())
        .await
        .expect("auto-delete on b");
    chb.exchange_bind(
        "orders".into(),
        "temp".into(),
        "#".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("bind temp");
    assert!(exchange_exists(&on_c, "temp").await, "temp on c");
    chc.exchange_unbind(
        "orders".into(),
        "temp".into(),
        "#".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("unbind on c");
    for (conn, at) in [(&on_a, "a"), (&on_b, "b"), (&on_c, "c")] {
        eventually_absent(conn, "temp", &format!("temp gone on {at}")).await;
    }

    // One whose last binding was to a queue on c goes on every node when c unbinds it.
    cha.exchange_declare("fan".into(), ExchangeKind::Fanout, auto, Default::default())
        .await
        .expect("auto-delete on a");
    assert!(exchange_exists(&on_c, "fan").await, "fan on c");
    chc.queue_bind(
        "on-c".into(),
        "fan".into(),
        "".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("queue bind to fan");
    chc.queue_unbind("on-c".into(), "fan".into(), "".into(), Default::default())
        .await
        .expect("queue unbind from fan");
    eventually_json(a, "/api/exchanges/%2f/fan", "fan gone on a", |s, _| {
        s == 404
    })
    .await;
    eventually_absent(&on_b, "fan", "fan gone on b").await;

    // "incoming" deleted through c is gone on a and b, its binding with it, and so is an
    // auto-delete exchange made on b whose only binding led to it; "orders" stays.
    let chb = on_b.create_channel().await.expect("channel");
    chb.exchange_declare(
        "feeder".into(),
        ExchangeKind::Direct,
        auto,
        Default::default(),
    )
    .await
    .expect("feeder on b");
    chb.exchange_bind(
        "incoming".into(),
        "feeder".into(),
        "".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("bind feeder");
    chc.exchange_delete("incoming".into(), Default::default())
        .await
        .expect("delete on c");
    for (conn, at) in [(&on_a, "a"), (&on_b, "b")] {
        eventually_absent(conn, "incoming", &format!("incoming gone on {at}")).await;
        eventually_absent(conn, "feeder", &format!("feeder gone on {at}")).await;
        assert!(exchange_exists(conn, "orders").await, "orders on {at}");
    }
    let to_orders = "/api/exchanges/%2f/orders/bindings/destination";
    eventually_json(a, to_orders, "no binding is left to orders", |s, left| {
        s == 200 && left == &serde_json::json!([])
    })
    .await;

    // An exchange declared while b is down is there when b comes back.
    children[1].kill().await.expect("kill b");
    drop(on_b);
    cha.exchange_declare(
        "late".into(),
        ExchangeKind::Headers,
        durable,
        Default::default(),
    )
    .await
    .expect("declare while b is down");
    children[1] = spawn(&specs[1]);
    let all_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    eventually_nodes(b, &all_up, "b restarted").await;
    eventually_json(b, "/api/exchanges/%2f/late", "b caught up", |s, x| {
        s == 200 && x["type"] == "headers" && x["durable"] == true
    })
    .await;
    for at in [a, b, c] {
        let (_, all) = get_json(at, "/api/exchanges/%2f").await;
        let mut names: Vec<&str> = all
            .as_array()
            .map(|l| l.iter().filter_map(|x| x["name"].as_str()).collect())
            .unwrap_or_default();
        names.retain(|n| !n.is_empty() && !n.starts_with("amq."));
        assert_eq!(names, vec!["late", "orders"], "exchanges at {at}");
    }
    drop(specs);
}

/// A CA and a node certificate it signed (for 127.0.0.1, usable as server and as client), as
/// PEM files in `dir`: the `tls_*` lines of a node's config.
fn node_pki(dir: &std::path::Path, ca_name: &str) -> String {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let ca_pem = ca.self_signed(&ca_key).expect("ca").pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = leaf.signed_by(&key, &issuer).expect("sign");
    let files = [
        ("ca.pem", ca_pem),
        ("node.pem", cert.pem()),
        ("node.key", key.serialize_pem()),
    ];
    for (f, pem) in &files {
        std::fs::write(dir.join(f), pem).expect("pem");
    }
    format!(
        "cluster_tls = true\ntls_ca = {:?}\ntls_cert = {:?}\ntls_key = {:?}\n",
        dir.join("ca.pem"),
        dir.join("node.pem"),
        dir.join("node.key")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_cluster_tls_nodes_form_and_replicate_and_a_peer_the_ca_did_not_sign_stays_out() {
    let pki = tempfile::tempdir().expect("dir");
    let tls = node_pki(pki.path(), "Warren cluster CA");
    let (specs, seeds) = three_specs(&tls);
    let _children: Vec<_> = specs.iter().map(spawn).collect();
    let all_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    for s in &specs {
        eventually_nodes(
            s.http,
            &all_up,
            &format!("{} sees the cluster over TLS", s.name),
        )
        .await;
    }
    // Raft traffic goes over TLS too: a vhost made on a is there on c.
    assert_eq!(put(specs[0].http, "/api/vhosts/over-tls", "{}").await, 201);
    eventually_json(
        specs[2].http,
        "/api/vhosts/over-tls",
        "replicated",
        |s, _| s == 200,
    )
    .await;

    // Same secret, but a certificate from another CA: never taken in.
    let rogue_pki = tempfile::tempdir().expect("dir");
    let rogue_tls = node_pki(rogue_pki.path(), "Somebody else's CA");
    let rogue = spec_with(
        "warren-r@127.0.0.1",
        free_port(),
        "cookie",
        &seeds,
        &rogue_tls,
    );
    let _r = spawn(&rogue);
    // And the secret without TLS: refused as well.
    let plain = spec("warren-p@127.0.0.1", free_port(), "cookie", &seeds);
    let _p = spawn(&plain);
    tokio::time::sleep(Duration::from_secs(3)).await;
    eventually_nodes(specs[0].http, &all_up, "the strangers stay out").await;
    for (stranger, name) in [
        (&rogue, "warren-r@127.0.0.1"),
        (&plain, "warren-p@127.0.0.1"),
    ] {
        let seen = nodes(stranger.http).await.expect("stranger answers");
        assert_eq!(
            seen,
            vec![(name.to_string(), true)],
            "{name} was never taken in"
        );
    }
    drop(specs);
}

/// The node's user names through `warren ctl list_users` (its CLI socket answers while the
/// app is stopped, its HTTP port does not).
async fn ctl_user_names(s: &Spec) -> Vec<String> {
    let (rc, out, err) = ctl(s, &["list_users", "-q", "--formatter", "json"]).await;
    assert_eq!(rc, 0, "{out}{err}");
    let list: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    let mut names: Vec<String> = list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u["user"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether an HTTP request to `at` gets any answer (false when the connection is dropped).
async fn http_answers(at: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(at).await else {
        return false;
    };
    let ask = "GET /api/overview HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if s.write_all(ask.as_bytes()).await.is_err() {
        return false;
    }
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    matches!(read, Ok(Ok(_))) && got.starts_with(b"HTTP/1.1")
}

/// A connection to `at` that has had one keep-alive request answered, left open.
async fn kept_alive(at: SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(at).await.expect("connect");
    let ask = "GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(ask.as_bytes()).await.expect("ask");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("answered in time")
            .expect("read");
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    s
}

async fn queue_names(at: SocketAddr) -> Vec<String> {
    let (_, list) = get_json(at, "/api/queues").await;
    let mut names: Vec<String> = list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|q| q["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_cluster_resets_a_node_into_another_cluster_and_it_can_leave_it_for_a_third() {
    use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    let (specs, _children, seeds) = three().await;
    let [a, b] = [specs[0].http, specs[1].http];
    // d: a cluster of one with definitions and a message of its own.
    let d_name = "warren-d@127.0.0.1";
    let d_spec = spec(d_name, free_port(), "cookie", &[]);
    let mut d_child = spawn(&d_spec);
    let d = d_spec.http;
    eventually_nodes(d, &[(d_name, true)], "d alone").await;
    let body = r#"{"password": "pw", "tags": "administrator"}"#;
    let made = request(
        d,
        "PUT",
        "/api/users/dave",
        Some(("guest", "guest")),
        Some(body),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let conn = amqp(d_spec.amqp, "%2f").await.expect("amqp to d");
    let ch = conn.create_channel().await.expect("channel");
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare("d-own".into(), durable, FieldTable::default())
        .await
        .expect("declare on d");
    ch.basic_publish(
        "".into(),
        "d-own".into(),
        BasicPublishOptions::default(),
        b"kept?",
        lapin::BasicProperties::default(),
    )
    .await
    .expect("publish on d");
    let _ = conn.close(200, "bye".into()).await;
    // A queue of the cluster, declared on b.
    let conn_b = amqp(specs[1].amqp, "%2f").await.expect("amqp to b");
    let ch_b = conn_b.create_channel().await.expect("channel");
    ch_b.queue_declare("on-b".into(), durable, FieldTable::default())
        .await
        .expect("declare on b");

    // A keep-alive HTTP connection to d, answered once.
    let mut kept = kept_alive(d).await;

    // As in RabbitMQ, the node must be stopped first.
    let (rc, _, err) = ctl(&d_spec, &["join_cluster", &seeds[0]]).await;
    assert_eq!(rc, 64, "{err}");
    assert!(err.contains("stop_app"), "{err}");
    let (rc, out, err) = ctl(&d_spec, &["stop_app"]).await;
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("Stopping rabbit application"), "{out}");
    assert!(
        amqp(d_spec.amqp, "%2f").await.is_err(),
        "no clients after stop_app"
    );
    assert!(
        !http_answers(d).await,
        "the HTTP port is closed with the app"
    );
    {
        use tokio::io::AsyncReadExt;
        // The rest of the first answer's body, then the end: well within the 10 s an idle
        // keep-alive connection is otherwise given.
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), kept.read_to_end(&mut rest)).await;
        assert!(
            read.is_ok(),
            "the open keep-alive connection went with the app"
        );
    }
    let (rc, _, err) = ctl(&d_spec, &["check_running"]).await;
    assert_eq!(rc, 69, "{err}");
    assert!(err.contains("is not running"), "{err}");
    // Joining itself, an address nobody answers at, or a malformed name is refused.
    let (rc, _, err) = ctl(&d_spec, &["join_cluster", &format!("{d_name}:1")]).await;
    assert_eq!(rc, 70, "{err}");
    assert!(err.contains("cannot cluster node with itself"), "{err}");
    let dead = format!("warren-x@127.0.0.1:{}", free_port());
    let (rc, _, err) = ctl(&d_spec, &["join_cluster", &dead]).await;
    assert_eq!(rc, 69, "{err}");
    assert!(
        err.contains("unable to perform an operation on node"),
        "{err}"
    );
    let (rc, _, _) = ctl(&d_spec, &["join_cluster", "no-at-sign"]).await;
    assert_eq!(rc, 70);
    assert_eq!(
        ctl_user_names(&d_spec).await,
        vec!["dave", "guest"],
        "nothing reset yet"
    );

    // d joins a's cluster: reset, then a member, with the cluster's definitions.
    let (rc, out, err) = ctl(&d_spec, &["join_cluster", &seeds[0]]).await;
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains(&format!("Clustering node {d_name} with {}", seeds[0])),
        "{out}"
    );
    assert!(out.contains("reset"), "{out}");
    let (rc, out, err) = ctl(&d_spec, &["start_app"]).await;
    assert_eq!(rc, 0, "{out}{err}");
    let (rc, _, err) = ctl(&d_spec, &["check_running"]).await;
    assert_eq!(rc, 0, "{err}");
    assert!(http_answers(d).await, "the HTTP port is back with the app");
    let mut four: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    four.push((d_name, true));
    for at in [a, b, d] {
        eventually_nodes(at, &four, "d joined").await;
    }
    assert_eq!(user_names(d).await, vec!["guest"], "d's own users went");
    assert_eq!(queue_names(d).await, vec!["on-b"], "d's own queue went");
    // The cluster's queue works through d, and what is made on d reaches the others.
    let conn_d = amqp(d_spec.amqp, "%2f")
        .await
        .expect("amqp to d after join");
    let ch_d = conn_d.create_channel().await.expect("channel");
    ch_d.basic_publish(
        "".into(),
        "on-b".into(),
        BasicPublishOptions::default(),
        b"via d",
        lapin::BasicProperties::default(),
    )
    .await
    .expect("publish on d");
    let start = Instant::now();
    loop {
        let got = ch_b
            .basic_get("on-b".into(), BasicGetOptions { no_ack: true })
            .await
            .expect("get on b");
        if let Some(m) = got {
            assert_eq!(m.delivery.data, b"via d");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let made = request(
        d,
        "PUT",
        "/api/users/dora",
        Some(("guest", "guest")),
        Some(body),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    eventually_status(a, "dora", "pw", 200, "a user made on d after the join").await;
    let _ = conn_d.close(200, "bye".into()).await;
    // Asked again: already a member, nothing changes.
    ctl(&d_spec, &["stop_app"]).await;
    let (rc, out, err) = ctl(&d_spec, &["join_cluster", &seeds[1]]).await;
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("already a member of this cluster"), "{out}");
    assert_eq!(ctl_user_names(&d_spec).await, vec!["dora", "guest"]);
    ctl(&d_spec, &["start_app"]).await;

    // Restarted, d is still a member (it has no seed list).
    d_child.kill().await.expect("kill d");
    d_child = spawn(&d_spec);
    for at in [a, d] {
        eventually_nodes(at, &four, "d restarted").await;
    }

    // d leaves for e, a cluster of one: a's cluster forgets it, d takes e's definitions.
    let e_name = "warren-e@127.0.0.1";
    let e_port = free_port();
    let e_spec = spec(e_name, e_port, "cookie", &[]);
    let _e_child = spawn(&e_spec);
    let e = e_spec.http;
    eventually_nodes(e, &[(e_name, true)], "e alone").await;
    let made = request(
        e,
        "PUT",
        "/api/users/erin",
        Some(("guest", "guest")),
        Some(body),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    for step in [
        vec!["stop_app"],
        vec!["join_cluster", &format!("{e_name}:{e_port}")],
        vec!["start_app"],
    ] {
        let (rc, out, err) = ctl(&d_spec, &step).await;
        assert_eq!(rc, 0, "{step:?}: {out}{err}");
    }
    let three_up: Vec<(&str, bool)> = NAMES.iter().map(|n| (*n, true)).collect();
    eventually_nodes(a, &three_up, "a's cluster forgot d").await;
    let de = [(d_name, true), (e_name, true)];
    for at in [d, e] {
        eventually_nodes(at, &de, "d joined e").await;
    }
    assert_eq!(user_names(d).await, vec!["erin", "guest"]);
    assert!(queue_names(d).await.is_empty());
    let _ = conn_b.close(200, "bye".into()).await;
    drop((specs, d_child, d_spec, e_spec));
}
