//! The stream plugin's management endpoints and metrics (#19): stream connections in
//! `/api/stream/connections` (and `/api/connections`, protocol "stream"), their publishers
//! and consumers with RabbitMQ's counters, a management close, and the
//! `rabbitmq_global_*{protocol="stream"}` families on `/metrics`. Publishes through the
//! official Rust client, reads with the raw client (so credits and chunks are known).

mod common;

use common::http::request;
use common::stream_raw::{chunk_of, string, Offset, StreamRaw, DELIVER};
use common::{start_with, urlencode, within, TestBroker};
use rabbitmq_stream_client::types::Message;
use rabbitmq_stream_client::Environment;
use serde_json::Value;

async fn broker() -> TestBroker {
    start_with(|c| c.stream_listen = Some("127.0.0.1:0".parse().expect("addr"))).await
}

async fn get(b: &TestBroker, path: &str) -> (u16, Value) {
    let r = request(
        b.server.http_addr,
        "GET",
        path,
        Some(("guest", "guest")),
        None,
    )
    .await;
    let body = if r.status == 200 {
        r.json()
    } else {
        Value::Null
    };
    (r.status, body)
}

async fn list(b: &TestBroker, path: &str) -> Vec<Value> {
    let (status, body) = get(b, path).await;
    assert_eq!(status, 200, "{path}");
    body.as_array().cloned().unwrap_or_default()
}

/// The value of the sample `series` (name and labels) on `/metrics`.
async fn metric(b: &TestBroker, series: &str) -> u64 {
    let r = request(b.server.metrics_addr, "GET", "/metrics", None, None).await;
    r.body
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// The management name of a raw client's connection.
fn name_of(r: &StreamRaw, b: &TestBroker) -> String {
    let local = r.s.local_addr().expect("local address");
    format!(
        "{local} -> {}",
        b.server.stream_addr.expect("stream listener")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishers_and_consumers_are_listed_with_their_counts() {
    let b = broker().await;
    let port = b.server.stream_addr.expect("stream listener").port();
    let env = within(Environment::builder().host("127.0.0.1").port(port).build())
        .await
        .expect("stream connection");
    within(env.stream_creator().create("audit"))
        .await
        .expect("created");
    let builder = env.producer().name("audit-writer");
    let mut producer = within(builder.client_provided_name("mgmt-producer").build("audit"))
        .await
        .expect("producer");
    let messages = (0..25)
        .map(|i| Message::builder().body(format!("m-{i}")).build())
        .collect();
    let confirms = within(producer.batch_send_with_confirm(messages))
        .await
        .expect("published");
    assert!(confirms.iter().all(|c| c.confirmed()) && confirms.len() == 25);

    // One reader takes everything; a second has no credit and lags by the whole stream.
    let mut r = StreamRaw::open(b.server.stream_addr.expect("stream listener")).await;
    assert_eq!(
        r.subscribe(3, "audit", Offset::First, 50, &[("app", "billing")])
            .await,
        1
    );
    assert_eq!(r.subscribe(4, "audit", Offset::First, 0, &[]).await, 1);
    let mut chunks = 0;
    loop {
        let (sub, first, n) = chunk_of(&r.expect(DELIVER).await);
        assert_eq!(sub, 3);
        chunks += 1;
        if first + u64::from(n) >= 25 {
            break;
        }
    }
    assert_eq!(
        r.subscribe(5, "missing", Offset::First, 1, &[]).await,
        2,
        "no such stream"
    );

    let publishers = list(&b, "/api/stream/publishers").await;
    assert_eq!(publishers.len(), 1, "{publishers:?}");
    let p = &publishers[0];
    assert_eq!(p["reference"], "audit-writer");
    assert_eq!(
        (p["published"].as_u64(), p["confirmed"].as_u64()),
        (Some(25), Some(25))
    );
    assert_eq!(p["errored"], 0);
    assert_eq!(p["queue"]["name"], "audit");
    assert_eq!(p["queue"]["vhost"], "/");
    assert_eq!(p["connection_details"]["user"], "guest");
    assert_eq!(
        list(&b, "/api/stream/publishers/%2F/audit").await,
        publishers
    );
    assert_eq!(list(&b, "/api/stream/publishers/%2F").await, publishers);
    assert_eq!(get(&b, "/api/stream/publishers/%2F/missing").await.0, 404);
    assert_eq!(get(&b, "/api/stream/publishers/nowhere").await.0, 404);

    let consumers = list(&b, "/api/stream/consumers/%2F").await;
    assert_eq!(consumers.len(), 2, "{consumers:?}");
    let by_id = |id: u64| {
        consumers
            .iter()
            .find(|c| c["subscription_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("subscription {id} listed"))
    };
    let reader = by_id(3);
    assert_eq!(reader["consumed"], 25);
    assert_eq!(reader["offset"], 24);
    assert_eq!(reader["offset_lag"], 0);
    assert_eq!(reader["credits"], 50 - chunks);
    assert_eq!(reader["properties"]["app"], "billing");
    assert_eq!(reader["activity_status"], "up");
    assert_eq!(reader["active"], true);
    let idle = by_id(4);
    assert_eq!(
        (idle["consumed"].as_u64(), idle["credits"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(idle["offset_lag"], 24, "behind by the whole stream");

    // Connections: both in the stream plugin's list and in /api/connections.
    let raw_name = name_of(&r, &b);
    let conns = list(&b, "/api/stream/connections").await;
    assert_eq!(conns.len(), 2, "{conns:?}");
    assert!(conns
        .iter()
        .all(|c| c["protocol"] == "stream" && c["vhost"] == "/"));
    assert!(conns.iter().any(
        |c| c["client_properties"]["connection_name"] == "mgmt-producer"
            && c["user_provided_name"] == "mgmt-producer"
    ));
    let all = list(&b, "/api/connections").await;
    assert_eq!(all.iter().filter(|c| c["protocol"] == "stream").count(), 2);
    let path = format!("/api/stream/connections/%2F/{}", urlencode(&raw_name));
    let (status, shown) = get(&b, &path).await;
    assert_eq!(
        (status, shown["name"].as_str()),
        (200, Some(raw_name.as_str()))
    );
    assert_eq!(list(&b, &format!("{path}/consumers")).await.len(), 2);
    assert!(list(&b, &format!("{path}/publishers")).await.is_empty());
    assert_eq!(get(&b, "/api/stream/connections/%2F/nope").await.0, 404);
    assert_eq!(get(&b, "/api/stream/connections/nowhere").await.0, 404);

    // /api/consumers lists the subscriptions as RabbitMQ does, and the queue counts them.
    let all = list(&b, "/api/consumers").await;
    let sub = all
        .iter()
        .find(|c| c["consumer_tag"] == "stream.subid-3")
        .unwrap_or_else(|| panic!("subscription 3 in /api/consumers: {all:?}"));
    assert_eq!(sub["queue"]["name"], "audit");
    assert_eq!(sub["channel_details"]["name"], "");
    assert_eq!(sub["channel_details"]["connection_name"], raw_name.as_str());
    assert_eq!(sub["arguments"]["app"], "billing");
    assert_eq!(
        (
            sub["ack_required"].as_bool(),
            sub["prefetch_count"].as_u64()
        ),
        (Some(false), Some(0))
    );
    assert_eq!(all.len(), 2, "{all:?}");
    let (_, queue) = get(&b, "/api/queues/%2F/audit").await;
    assert_eq!(queue["consumers"], 2);

    // Metrics: the stream protocol's samples of the global families.
    assert_eq!(
        metric(
            &b,
            "rabbitmq_global_messages_received_total{protocol=\"stream\"}"
        )
        .await,
        25
    );
    assert_eq!(
        metric(
            &b,
            "rabbitmq_global_messages_confirmed_total{protocol=\"stream\"}"
        )
        .await,
        25
    );
    assert_eq!(
        metric(
            &b,
            "rabbitmq_global_messages_delivered_total{protocol=\"stream\"}"
        )
        .await,
        25
    );
    assert_eq!(
        metric(&b, "rabbitmq_global_publishers{protocol=\"stream\"}").await,
        1
    );
    assert_eq!(
        metric(&b, "rabbitmq_global_consumers{protocol=\"stream\"}").await,
        2
    );
    assert_eq!(
        metric(
            &b,
            "rabbitmq_global_stream_error_stream_does_not_exist_total{protocol=\"stream\"}"
        )
        .await,
        1
    );
    assert_eq!(
        metric(
            &b,
            "rabbitmq_global_messages_received_total{protocol=\"amqp091\"}"
        )
        .await,
        0,
        "AMQP's sample apart"
    );

    // A management close ends the connection; its consumers go from the lists.
    let closed = request(
        b.server.http_addr,
        "DELETE",
        &path,
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(closed.status, 204);
    let mut buf = [0u8; 4096];
    let eof = within(async {
        loop {
            use tokio::io::AsyncReadExt;
            match r.s.read(&mut buf).await {
                Ok(0) | Err(_) => break true,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(eof, "the socket was closed");
    within(async {
        while !list(&b, "/api/stream/consumers").await.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        metric(&b, "rabbitmq_global_consumers{protocol=\"stream\"}").await,
        0
    );
    assert_eq!(list(&b, "/api/stream/connections").await.len(), 1);
    within(producer.close()).await.expect("closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_streams_publishers_hear_of_it_and_leave_the_lists() {
    const DECLARE_PUBLISHER: u16 = 0x01;
    const CREATE: u16 = 0x0d;
    const DELETE: u16 = 0x0e;
    const METADATA_UPDATE: u16 = 0x10;
    let b = broker().await;
    let addr = b.server.stream_addr.expect("stream listener");
    let mut admin = StreamRaw::open(addr).await;
    let mut create = string("doomed");
    create.extend(0u32.to_be_bytes());
    assert_eq!(admin.call(CREATE, &create).await, 1);

    // A connection with only a publisher on the stream (no subscription).
    let mut p = StreamRaw::open(addr).await;
    let mut declare = vec![7u8];
    declare.extend(string(""));
    declare.extend(string("doomed"));
    assert_eq!(p.call(DECLARE_PUBLISHER, &declare).await, 1);
    assert_eq!(list(&b, "/api/stream/publishers").await.len(), 1);

    assert_eq!(admin.call(DELETE, &string("doomed")).await, 1);
    let update = p.expect(METADATA_UPDATE).await;
    assert_eq!(
        u16::from_be_bytes([update[4], update[5]]),
        0x06,
        "stream not available"
    );
    assert_eq!(&update[8..], b"doomed");
    assert!(list(&b, "/api/stream/publishers").await.is_empty());
    assert_eq!(
        metric(&b, "rabbitmq_global_publishers{protocol=\"stream\"}").await,
        0
    );
    // Told once: nothing else follows.
    p.quiet(200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_connections_count_toward_the_vhost_connection_limit() {
    let b = broker().await;
    let addr = b.server.stream_addr.expect("stream listener");
    let auth = Some(("guest", "guest"));
    let path = "/api/vhost-limits/%2F/max-connections";
    let r = request(
        b.server.http_addr,
        "PUT",
        path,
        auth,
        Some(r#"{"value": 1}"#),
    )
    .await;
    assert!(r.status == 204 || r.status == 201, "{}", r.body);
    let _first = StreamRaw::open(addr).await;
    // Over the limit the open is refused as RabbitMQ refuses it.
    assert_eq!(StreamRaw::try_open(addr).await.err(), Some(0x0c));
    let r = request(b.server.http_addr, "DELETE", path, auth, None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert!(
        StreamRaw::try_open(addr).await.is_ok(),
        "open once the limit is gone"
    );
}
