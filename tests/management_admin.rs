//! The management API's administration side: connections (listed with the client's name,
//! closed over HTTP with 320 as a lapin client sees it), vhosts created and deleted at runtime,
//! health checks, the aliveness test and nodes.

mod common;

use common::http::request;
use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

#[tokio::test]
async fn connections_are_listed_and_closed_over_http() {
    let b = start().await;
    let props = ConnectionProperties::default().with_connection_name("billing-worker".into());
    let conn = within(Connection::connect(&b.url(), props))
        .await
        .expect("connect");
    let _ch = within(conn.create_channel()).await.expect("channel");
    let addr = b.server.http_addr;
    let list = within(async {
        loop {
            let list = request(addr, "GET", "/api/connections", ADMIN, None)
                .await
                .json();
            if list[0]["channels"] == 1 {
                return list;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let c = &list[0];
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["protocol"], "AMQP 0-9-1");
    assert_eq!(c["user_provided_name"], "billing-worker");
    assert_eq!(c["client_properties"]["connection_name"], "billing-worker");
    assert_eq!(c["port"], b.server.amqp_addr.port());
    let name = c["name"].as_str().expect("name").to_owned();
    assert!(
        name.ends_with(&format!("-> {}", b.server.amqp_addr)),
        "{name}"
    );
    let path = format!("/api/connections/{}", urlencode(&name));
    let one = request(addr, "GET", &path, ADMIN, None).await.json();
    assert_eq!(one["name"], name);
    let overview = request(addr, "GET", "/api/overview", ADMIN, None)
        .await
        .json();
    assert_eq!(overview["object_totals"]["connections"], 1);
    // Closed over HTTP: the lapin client sees 320 CONNECTION_FORCED.
    let closing = server_close_code(conn.events_listener());
    let r = request(addr, "DELETE", &path, ADMIN, None).await;
    assert_eq!(r.status, 204);
    assert_eq!(closing.await, Some(320));
    within(async {
        while request(addr, "GET", &path, ADMIN, None).await.status != 404 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn vhosts_are_created_and_deleted_at_runtime() {
    let b = start().await;
    let addr = b.server.http_addr;
    let r = request(addr, "PUT", "/api/vhosts/apps", ADMIN, None).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        request(addr, "PUT", "/api/vhosts/apps", ADMIN, None)
            .await
            .status,
        204
    );
    assert_eq!(
        request(addr, "GET", "/api/vhosts/apps", ADMIN, None)
            .await
            .json()["name"],
        "apps"
    );
    // No permissions yet: guest is refused there.
    let url = format!("amqp://guest:guest@{}/apps", b.server.amqp_addr);
    let e = within(Connection::connect(&url, ConnectionProperties::default()))
        .await
        .expect_err("no permissions on apps");
    assert_eq!(code(&e), Some(530));
    let r = request(
        addr,
        "PUT",
        "/api/permissions/apps/guest",
        ADMIN,
        Some(r#"{"configure":".*","write":".*","read":".*"}"#),
    )
    .await;
    assert_eq!(r.status, 201);
    let conn = within(Connection::connect(&url, ConnectionProperties::default()))
        .await
        .expect("connect to apps");
    let ch = within(conn.create_channel()).await.expect("channel");
    within(ch.queue_declare(
        "jobs".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("declare in apps");
    let queues = request(addr, "GET", "/api/queues/apps", ADMIN, None)
        .await
        .json();
    assert_eq!(queues[0]["name"], "jobs");
    within(ch.basic_publish(
        "".into(),
        "jobs".into(),
        BasicPublishOptions::default(),
        b"j",
        lapin::BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let apps = within(async {
        loop {
            let v = request(addr, "GET", "/api/vhosts/apps", ADMIN, None)
                .await
                .json();
            if v["messages"] == 1 {
                return v;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(apps["messages_ready"], 1);
    assert_eq!(apps["messages_unacknowledged"], 0);
    // Deleting the vhost closes its connections and removes its queues and permissions.
    let closing = server_close_code(conn.events_listener());
    assert_eq!(
        request(addr, "DELETE", "/api/vhosts/apps", ADMIN, None)
            .await
            .status,
        204
    );
    assert_eq!(closing.await, Some(320));
    assert_eq!(
        request(addr, "GET", "/api/vhosts/apps", ADMIN, None)
            .await
            .status,
        404
    );
    assert_eq!(
        request(addr, "DELETE", "/api/vhosts/apps", ADMIN, None)
            .await
            .status,
        404
    );
    let perms = request(addr, "GET", "/api/permissions", ADMIN, None)
        .await
        .json();
    assert!(perms
        .as_array()
        .expect("list")
        .iter()
        .all(|p| p["vhost"] != "apps"));
    // Gone after a restart too; recreated, it is empty.
    let b = b.restart().await;
    let addr = b.server.http_addr;
    assert_eq!(
        request(addr, "GET", "/api/vhosts/apps", ADMIN, None)
            .await
            .status,
        404
    );
    assert_eq!(
        request(addr, "PUT", "/api/vhosts/apps", ADMIN, None)
            .await
            .status,
        201
    );
    let queues = request(addr, "GET", "/api/queues/apps", ADMIN, None)
        .await
        .json();
    assert_eq!(queues, serde_json::json!([]));
}

#[tokio::test]
async fn health_checks_aliveness_and_nodes() {
    let b = start().await;
    let addr = b.server.http_addr;
    for path in [
        "/api/health/checks/alarms",
        "/api/health/checks/local-alarms",
        "/api/health/checks/virtual-hosts",
        "/api/health/checks/ready-to-serve-clients",
        "/api/health/checks/protocol-listener/amqp",
        "/api/health/checks/protocol-listener/http",
        "/api/aliveness-test/%2F",
    ] {
        let r = request(addr, "GET", path, ADMIN, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.json()["status"], "ok", "{path}");
    }
    let port = b.server.amqp_addr.port();
    let r = request(
        addr,
        "GET",
        &format!("/api/health/checks/port-listener/{port}"),
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(
        addr,
        "GET",
        "/api/health/checks/port-listener/1",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "No active listener");
    let r = request(
        addr,
        "GET",
        "/api/health/checks/protocol-listener/amqps",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 503, "no TLS listener here");
    assert_eq!(
        request(addr, "GET", "/api/health/checks/alarms", None, None)
            .await
            .status,
        401
    );
    let nodes = request(addr, "GET", "/api/nodes", ADMIN, None).await.json();
    assert_eq!(nodes[0]["running"], true);
    assert!(nodes[0]["fd_used"].as_u64().is_some_and(|n| n > 0));
    let overview = request(addr, "GET", "/api/overview", ADMIN, None)
        .await
        .json();
    let ports: Vec<u64> = overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .filter_map(|l| l["port"].as_u64())
        .collect();
    assert!(ports.contains(&u64::from(port)), "{ports:?}");
}

#[tokio::test]
async fn consumers_are_listed_and_lists_sort_filter_and_page() {
    let b = start().await;
    let addr = b.server.http_addr;
    let (_c, ch) = b.channel().await;
    for q in ["q-b", "q-a", "q-c"] {
        within(ch.queue_declare(
            q.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("declare");
    }
    within(ch.basic_qos(7, BasicQosOptions::default()))
        .await
        .expect("qos");
    let _consumer = within(ch.basic_consume(
        "q-b".into(),
        "watcher".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let consumers = request(addr, "GET", "/api/consumers/%2F", ADMIN, None)
        .await
        .json();
    let c = &consumers[0];
    assert_eq!(c["consumer_tag"], "watcher");
    assert_eq!(c["queue"]["name"], "q-b");
    assert_eq!(c["ack_required"], true);
    assert_eq!(c["prefetch_count"], 7);
    assert_eq!(c["channel_details"]["number"], 1);
    assert_eq!(c["channel_details"]["user"], "guest");
    // sort + columns keep the array shape.
    let names = request(
        addr,
        "GET",
        "/api/queues/%2F?sort=name&sort_reverse=true&columns=name",
        ADMIN,
        None,
    )
    .await
    .json();
    assert_eq!(
        names,
        serde_json::json!([{"name": "q-c"}, {"name": "q-b"}, {"name": "q-a"}])
    );
    // page returns RabbitMQ's paged object.
    let page = request(
        addr,
        "GET",
        "/api/queues?page=2&page_size=2&sort=name&name=q-&use_regex=false",
        ADMIN,
        None,
    )
    .await
    .json();
    assert_eq!(page["page"], 2);
    assert_eq!(page["page_count"], 2);
    assert_eq!(page["filtered_count"], 3);
    assert_eq!(page["item_count"], 1);
    assert_eq!(page["items"][0]["name"], "q-c");
    let r = request(addr, "GET", "/api/queues?page=5&page_size=2", ADMIN, None).await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn vhost_limits_are_enforced_and_persist() {
    let b = start().await;
    let addr = b.server.http_addr;
    for (name, value) in [("max-connections", 1), ("max-queues", 1)] {
        let r = request(
            addr,
            "PUT",
            &format!("/api/vhost-limits/%2F/{name}"),
            ADMIN,
            Some(&format!(r#"{{"value":{value}}}"#)),
        )
        .await;
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let limits = request(addr, "GET", "/api/vhost-limits", ADMIN, None)
        .await
        .json();
    assert_eq!(
        limits,
        serde_json::json!([{"vhost": "/", "value": {"max-connections": 1, "max-queues": 1}}])
    );
    let (_c, ch) = b.channel().await;
    let e = within(Connection::connect(
        &b.url(),
        ConnectionProperties::default(),
    ))
    .await
    .expect_err("second connection");
    assert_eq!(code(&e), Some(530));
    assert!(
        e.to_string().contains("connection limit (1) is reached"),
        "{e}"
    );
    within(ch.queue_declare(
        "only".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("first queue");
    let e = within(ch.queue_declare(
        "second".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect_err("second queue");
    assert_eq!(code(&e), Some(406));
    assert!(
        e.to_string()
            .contains("queue limit in vhost '/' (1) is reached"),
        "{e}"
    );
    drop(_c);
    // Limits survive a restart; deleting one lifts it.
    let b = b.restart().await;
    let addr = b.server.http_addr;
    let limits = request(addr, "GET", "/api/vhost-limits/%2F", ADMIN, None)
        .await
        .json();
    assert_eq!(limits[0]["value"]["max-queues"], 1);
    let r = request(
        addr,
        "DELETE",
        "/api/vhost-limits/%2F/max-connections",
        ADMIN,
        None,
    )
    .await;
    assert_eq!(r.status, 204);
    let _one = b.connect().await;
    let _two = b.connect().await;
    let r = request(
        addr,
        "PUT",
        "/api/vhost-limits/%2F/max-bananas",
        ADMIN,
        Some(r#"{"value":1}"#),
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn queues_and_the_overview_report_message_stats() {
    let b = start().await;
    let addr = b.server.http_addr;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "counted".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    for _ in 0..3 {
        within(ch.basic_publish(
            "".into(),
            "counted".into(),
            BasicPublishOptions::default(),
            b"m",
            lapin::BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    let got = within(ch.basic_get("counted".into(), BasicGetOptions { no_ack: true }))
        .await
        .expect("get")
        .expect("a message");
    drop(got);
    let mut consumer = within(ch.basic_consume(
        "counted".into(),
        "c".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    for _ in 0..2 {
        let d = within(consumer.next())
            .await
            .expect("open")
            .expect("delivery");
        within(d.ack(BasicAckOptions::default()))
            .await
            .expect("ack");
    }
    let q = within(async {
        loop {
            let q = request(addr, "GET", "/api/queues/%2F/counted", ADMIN, None)
                .await
                .json();
            if q["message_stats"]["ack"] == 2 {
                return q;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let s = &q["message_stats"];
    assert_eq!(s["publish"], 3);
    assert_eq!(s["get_no_ack"], 1);
    assert_eq!(s["deliver"], 2);
    assert_eq!(s["deliver_get"], 3);
    assert!(s["publish_details"]["rate"].is_number());
    let overview = request(addr, "GET", "/api/overview", ADMIN, None)
        .await
        .json();
    assert_eq!(overview["message_stats"]["publish"], 3);
    assert_eq!(overview["message_stats"]["ack"], 2);
}

#[tokio::test]
async fn channels_are_listed_with_their_counters() {
    let b = start().await;
    let addr = b.server.http_addr;
    let (conn, ch) = b.channel().await;
    within(ch.queue_declare(
        "c".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    within(ch.basic_qos(7, BasicQosOptions::default()))
        .await
        .expect("qos");
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    for key in ["c", "c", "nowhere"] {
        within(
            within(ch.basic_publish(
                "".into(),
                key.into(),
                BasicPublishOptions {
                    mandatory: key == "nowhere",
                    ..Default::default()
                },
                b"m",
                lapin::BasicProperties::default(),
            ))
            .await
            .expect("publish"),
        )
        .await
        .expect("confirm");
    }
    let mut consumer = within(ch.basic_consume(
        "c".into(),
        "tag".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let first = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    let _second = within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    within(first.ack(BasicAckOptions::default()))
        .await
        .expect("ack");
    let list = within(async {
        loop {
            let list = request(addr, "GET", "/api/channels", ADMIN, None)
                .await
                .json();
            if list[0]["message_stats"]["ack"] == 1 {
                return list;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    let c = &list[0];
    let conn_name = request(addr, "GET", "/api/connections", ADMIN, None)
        .await
        .json()[0]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    assert_eq!(c["name"], format!("{conn_name} (1)"));
    assert_eq!(c["number"], 1);
    assert_eq!(c["connection_details"]["name"], conn_name);
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["confirm"], true);
    assert_eq!(c["transactional"], false);
    assert_eq!(c["prefetch_count"], 7);
    assert_eq!(c["consumer_count"], 1);
    assert_eq!(c["messages_unacknowledged"], 1);
    let s = &c["message_stats"];
    assert_eq!(s["publish"], 3);
    assert_eq!(s["confirm"], 3);
    assert_eq!(s["return_unroutable"], 1);
    assert_eq!(s["deliver"], 2);
    assert_eq!(s["ack"], 1);
    assert!(s["publish_details"]["rate"].is_number());
    let path = format!("/api/channels/{}", urlencode(&format!("{conn_name} (1)")));
    assert_eq!(
        request(addr, "GET", &path, ADMIN, None).await.json()["number"],
        1
    );
    let path = format!("/api/connections/{}/channels", urlencode(&conn_name));
    assert_eq!(
        request(addr, "GET", &path, ADMIN, None).await.json()[0]["number"],
        1
    );
    let overview = request(addr, "GET", "/api/overview", ADMIN, None)
        .await
        .json();
    assert_eq!(overview["object_totals"]["channels"], 1);
    // Counts of closed channels stay in the node totals.
    within(conn.close(200, "bye".into())).await.expect("close");
    let overview = within(async {
        loop {
            let o = request(addr, "GET", "/api/overview", ADMIN, None)
                .await
                .json();
            if o["object_totals"]["channels"] == 0 {
                return o;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(overview["message_stats"]["publish"], 3);
    assert_eq!(overview["message_stats"]["return_unroutable"], 1);
}

#[tokio::test]
async fn rates_are_sampled_by_the_stats_timer() {
    let b = start_with(|c| c.collect_statistics_interval = 200).await;
    let addr = b.server.http_addr;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "r".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    let rate = |v: &serde_json::Value| v["message_stats"]["publish_details"]["rate"].as_f64();
    // While messages flow, every level reports a publish rate.
    let publishing = async {
        loop {
            within(ch.basic_publish(
                "".into(),
                "r".into(),
                BasicPublishOptions::default(),
                b"m",
                lapin::BasicProperties::default(),
            ))
            .await
            .expect("publish");
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    };
    let watching = async {
        loop {
            let o = request(addr, "GET", "/api/overview", ADMIN, None)
                .await
                .json();
            let q = request(addr, "GET", "/api/queues/%2F/r", ADMIN, None)
                .await
                .json();
            let c = request(addr, "GET", "/api/channels", ADMIN, None)
                .await
                .json();
            if [rate(&o), rate(&q), rate(&c[0])]
                .iter()
                .all(|r| r.is_some_and(|r| r > 0.0))
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    within(async {
        tokio::select! {
            _ = publishing => {}
            _ = watching => {}
        }
    })
    .await;
    // Once publishing stops, the next samples bring the rates back to zero without anyone
    // reading in between.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let o = request(addr, "GET", "/api/overview", ADMIN, None)
        .await
        .json();
    let q = request(addr, "GET", "/api/queues/%2F/r", ADMIN, None)
        .await
        .json();
    assert_eq!(rate(&o), Some(0.0), "{o}");
    assert_eq!(rate(&q), Some(0.0), "{q}");
}

#[tokio::test]
async fn queues_show_bytes_memory_utilisation_and_head_timestamp() {
    let b = start_with(|c| c.collect_statistics_interval = 100).await;
    let addr = b.server.http_addr;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "f".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    for (body, ts) in [
        (&b"12345"[..], 1_700_000_000u64),
        (b"1234567", 1_700_000_100),
    ] {
        within(
            within(ch.basic_publish(
                "".into(),
                "f".into(),
                BasicPublishOptions::default(),
                body,
                lapin::BasicProperties::default().with_timestamp(ts),
            ))
            .await
            .expect("publish"),
        )
        .await
        .expect("confirm");
    }
    let held = within(ch.basic_get("f".into(), BasicGetOptions { no_ack: false }))
        .await
        .expect("get")
        .expect("message");
    let q = request(addr, "GET", "/api/queues/%2F/f", ADMIN, None)
        .await
        .json();
    assert_eq!(q["message_bytes_ready"], 7);
    assert_eq!(q["message_bytes_unacknowledged"], 5);
    assert_eq!(q["message_bytes"], 12);
    assert_eq!(q["messages_ram"], 2);
    assert!(q["memory"].as_u64().is_some_and(|m| m >= 12), "{q}");
    assert_eq!(q["head_message_timestamp"], 1_700_000_100u64);
    assert_eq!(q["consumer_utilisation"], 0.0);
    assert_eq!(q["idle_since"], serde_json::Value::Null, "just used");
    within(held.ack(BasicAckOptions::default()))
        .await
        .expect("ack");
    // A consumer that keeps up: full capacity once sampled.
    let _consumer = within(ch.basic_consume(
        "f".into(),
        "c".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let q = request(addr, "GET", "/api/queues/%2F/f", ADMIN, None)
        .await
        .json();
    assert_eq!(q["consumer_utilisation"], 1.0, "{q}");
    assert_eq!(q["messages"], 0);
    assert_eq!(q["head_message_timestamp"], serde_json::Value::Null);
    // A consumer holding its one allowed delivery while messages wait: no capacity.
    let (_c2, slow) = b.channel().await;
    within(slow.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("qos");
    within(slow.queue_declare(
        "g".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    for _ in 0..3 {
        within(slow.basic_publish(
            "".into(),
            "g".into(),
            BasicPublishOptions::default(),
            b"x",
            lapin::BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    let _held = within(slow.basic_consume(
        "g".into(),
        "slow".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    let g = within(async {
        loop {
            let g = request(addr, "GET", "/api/queues/%2F/g", ADMIN, None)
                .await
                .json();
            if g["consumer_utilisation"].as_f64().is_some_and(|u| u < 0.5) {
                return g;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(g["messages_unacknowledged"], 1);
}
