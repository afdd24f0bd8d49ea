//! Prometheus metrics: RabbitMQ's metric names on `/metrics` (aggregated) and
//! `/metrics/per-object`, reflecting what AMQP clients did.

mod common;

use common::http::request;
use common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

/// The value of an unlabelled or labelled sample line `name{...} value`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[tokio::test]
async fn metrics_follow_amqp_activity() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "m-q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    for _ in 0..3 {
        within(ch.basic_publish(
            "".into(),
            "m-q".into(),
            Default::default(),
            b"12345",
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    within(ch.basic_qos(1, BasicQosOptions::default()))
        .await
        .expect("qos");
    let mut consumer = within(ch.basic_consume(
        "m-q".into(),
        "c".into(),
        Default::default(),
        FieldTable::default(),
    ))
    .await
    .expect("consume");
    within(consumer.next())
        .await
        .expect("open")
        .expect("delivery");
    let addr = b.server.metrics_addr;
    let r = within(async {
        loop {
            let r = request(addr, "GET", "/metrics", None, None).await;
            if sample(&r.body, "rabbitmq_queue_messages_unacked") == Some(1.0) {
                return r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers.contains("text/plain; version=0.0.4"),
        "{}",
        r.headers
    );
    let m = &r.body;
    assert_eq!(sample(m, "rabbitmq_connections"), Some(1.0), "{m}");
    assert_eq!(sample(m, "rabbitmq_queues"), Some(1.0), "{m}");
    assert_eq!(sample(m, "rabbitmq_consumers"), Some(1.0), "{m}");
    assert_eq!(sample(m, "rabbitmq_queue_messages_ready"), Some(2.0), "{m}");
    assert_eq!(sample(m, "rabbitmq_queue_messages"), Some(3.0), "{m}");
    assert_eq!(
        sample(m, "rabbitmq_queue_messages_ready_bytes"),
        Some(10.0),
        "{m}"
    );
    assert!(sample(m, "rabbitmq_process_resident_memory_bytes").is_some_and(|v| v > 0.0));
    assert!(
        m.contains("# TYPE rabbitmq_queue_messages_ready gauge"),
        "{m}"
    );
    assert!(
        m.contains("rabbitmq_build_info{rabbitmq_version=\"3.13."),
        "{m}"
    );
    let per = request(addr, "GET", "/metrics/per-object", None, None)
        .await
        .body;
    assert_eq!(
        sample(
            &per,
            "rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"m-q\"}"
        ),
        Some(2.0),
        "{per}"
    );
    assert_eq!(
        sample(&per, "rabbitmq_queue_consumers{vhost=\"/\",queue=\"m-q\"}"),
        Some(1.0),
        "{per}"
    );
}

#[tokio::test]
async fn counters_and_detailed_families_follow_channels() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    within(ch.queue_declare(
        "d-q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    within(ch.confirm_select(Default::default()))
        .await
        .expect("confirms");
    for key in ["d-q", "d-q", "nowhere"] {
        within(
            within(ch.basic_publish(
                "".into(),
                key.into(),
                Default::default(),
                b"x",
                BasicProperties::default(),
            ))
            .await
            .expect("publish"),
        )
        .await
        .expect("confirm");
    }
    let got = within(ch.basic_get("d-q".into(), BasicGetOptions { no_ack: false }))
        .await
        .expect("get")
        .expect("message");
    within(got.ack(BasicAckOptions::default()))
        .await
        .expect("ack");
    let addr = b.server.metrics_addr;
    let m = within(async {
        loop {
            let m = request(addr, "GET", "/metrics", None, None).await.body;
            if sample(&m, "rabbitmq_channel_messages_acked_total") == Some(1.0) {
                return m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        sample(&m, "rabbitmq_channel_messages_published_total"),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "rabbitmq_channel_messages_confirmed_total"),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "rabbitmq_channel_messages_unroutable_dropped_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "rabbitmq_channel_get_ack_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "rabbitmq_global_messages_routed_total{protocol=\"amqp091\"}"
        ),
        Some(2.0),
        "{m}"
    );
    assert_eq!(sample(&m, "rabbitmq_channels"), Some(1.0), "{m}");
    assert_eq!(
        sample(&m, "rabbitmq_queues_created_total"),
        Some(1.0),
        "{m}"
    );
    assert!(
        m.contains("# TYPE rabbitmq_channel_messages_published_total counter"),
        "{m}"
    );
    let per = request(addr, "GET", "/metrics/per-object", None, None)
        .await
        .body;
    assert!(
        per.lines().any(
            |l| l.starts_with("rabbitmq_channel_messages_published_total{channel=\"")
                && l.contains(" (1)\",vhost=\"/\"} 3")
        ),
        "{per}"
    );
    let d = request(
        addr,
        "GET",
        "/metrics/detailed?family=queue_coarse_metrics&family=connection_churn_metrics&vhost=%2F",
        None,
        None,
    )
    .await
    .body;
    assert_eq!(
        sample(
            &d,
            "rabbitmq_detailed_queue_messages_ready{vhost=\"/\",queue=\"d-q\"}"
        ),
        Some(1.0),
        "{d}"
    );
    assert_eq!(
        sample(&d, "rabbitmq_detailed_connections_opened_total"),
        Some(1.0),
        "{d}"
    );
    assert!(!d.contains("rabbitmq_detailed_channel_consumers"), "{d}");
    let none = request(
        addr,
        "GET",
        "/metrics/detailed?family=queue_coarse_metrics&vhost=other",
        None,
        None,
    )
    .await
    .body;
    assert!(!none.contains("queue=\"d-q\""), "{none}");
    // Closing the channel keeps its counts in the node totals.
    within(conn.close(200, "bye".into())).await.expect("close");
    let m = within(async {
        loop {
            let m = request(addr, "GET", "/metrics", None, None).await.body;
            if sample(&m, "rabbitmq_channels_closed_total") == Some(1.0) {
                return m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        sample(&m, "rabbitmq_channel_messages_published_total"),
        Some(3.0),
        "{m}"
    );
}
