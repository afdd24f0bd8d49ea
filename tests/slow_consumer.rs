//! A fast publisher against a slow consumer: the backlog is paged out, resident memory stays
//! bounded, and other connections are still served. Alone in its test binary, so no other
//! test's allocations show in the process's resident memory.

mod common;

use common::*;
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_publisher_and_a_slow_consumer_stay_within_the_memory_bound() {
    let b = start().await;
    let url = b.url();
    let memory = warm_up_and_sample(&url);
    let base = memory.base;
    // Unlimited publishing for 12 s against a consumer taking 2,000 msg/s and acking each.
    let u = url.clone();
    let run = tokio::task::spawn_blocking(move || {
        perf_json(
            &u,
            &[
                "--queue-prefix",
                "slow",
                "-x",
                "1",
                "-y",
                "1",
                "-z",
                "12",
                "-R",
                "2000",
                "-q",
                "100",
                "--multi-ack",
                "1",
                "--delete-queues",
            ],
        )
    });
    // Meanwhile other connections are served: the publisher cannot starve them.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "other".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    for i in 0..5u8 {
        within(ch.basic_publish(
            "".into(),
            "other".into(),
            BasicPublishOptions::default(),
            &[i],
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
        let got = within(ch.basic_get("other".into(), BasicGetOptions { no_ack: true }))
            .await
            .expect("get")
            .expect("a message");
        assert_eq!(got.delivery.data, vec![i]);
    }
    let summary = run.await.expect("join");
    let grew = memory.stop();
    let (published, consumed) = (
        summary["published"].as_u64().unwrap_or(0),
        summary["consumed"].as_u64().unwrap_or(0),
    );
    assert!(
        published > 10 * consumed,
        "the publisher did outrun the consumer ({published} vs {consumed})"
    );
    assert!(consumed > 0, "the consumer was served");
    assert_eq!(summary["out_of_order"], 0);
    eprintln!(
        "{published} published, {consumed} consumed: peak +{} MiB over {} MiB",
        grew >> 20,
        base >> 20
    );
    assert!(
        grew <= 64 << 20,
        "resident memory grew by {} MiB",
        grew >> 20
    );
}
