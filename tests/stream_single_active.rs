//! Single active consumer over RabbitMQ's stream protocol (#19): subscriptions with
//! `single-active-consumer` and a `name` form a group in which one reads; `ConsumerUpdate`
//! tells a member it is active and its answer says where it reads from; the next member
//! takes over when the active one goes; on the partitions of a super stream the group spreads
//! the partitions over its members, stepping one down before activating the next. Driven
//! with a raw client (frames by hand), publishes through the official Rust client.

mod common;

use common::stream_client::{env, publish};
use common::stream_raw::{chunk_of, Offset, StreamRaw, DELIVER};
use common::{start_with, within, TestBroker};

async fn broker() -> TestBroker {
    start_with(|c| c.stream_listen = Some("127.0.0.1:0".parse().expect("addr"))).await
}

async fn raw(b: &TestBroker) -> StreamRaw {
    StreamRaw::open(b.server.stream_addr.expect("stream listener")).await
}

/// Reads deliveries for subscription `id` until offset `end` (exclusive) is covered; returns
/// the first offset of the first chunk.
async fn read_to(r: &mut StreamRaw, id: u8, end: u64) -> u64 {
    let mut first = None;
    loop {
        let f = r.expect(DELIVER).await;
        let (sub, start, n) = chunk_of(&f);
        assert_eq!(sub, id, "a chunk for subscription {id}");
        first.get_or_insert(start);
        if start + u64::from(n) >= end {
            return first.unwrap_or(start);
        }
    }
}

const SAC: (&str, &str) = ("single-active-consumer", "true");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_of_a_group_reads_and_the_next_takes_over_where_told() {
    let b = broker().await;
    let env = env(&b).await;
    within(env.stream_creator().create("orders"))
        .await
        .expect("created");
    publish(&env, "orders", 10).await;

    // Without a name there is no group: refused as RabbitMQ does.
    let mut c1 = raw(&b).await;
    assert_eq!(
        c1.subscribe(9, "orders", Offset::First, 10, &[SAC]).await,
        0x11,
        "precondition failed"
    );

    // The first member is told it is active, and reads from where its answer says.
    let group = ("name", "billing");
    assert_eq!(
        c1.subscribe(0, "orders", Offset::First, 10, &[SAC, group])
            .await,
        1
    );
    let (corr, sub, active) = c1.consumer_update().await;
    assert_eq!((sub, active), (0, true));
    c1.quiet(300).await;
    c1.answer_update(corr, Offset::At(4)).await;
    let first = read_to(&mut c1, 0, 10).await;
    assert!(first <= 4, "the chunk holding offset 4 first (got {first})");

    // The second member waits: no update, no deliveries, even as messages come.
    let mut c2 = raw(&b).await;
    assert_eq!(
        c2.subscribe(3, "orders", Offset::First, 10, &[SAC, group])
            .await,
        1
    );
    publish(&env, "orders", 5).await;
    read_to(&mut c1, 0, 15).await;
    c2.quiet(300).await;

    // A plain subscription of the same stream is not in the group and reads at once.
    let mut plain = raw(&b).await;
    assert_eq!(
        plain
            .subscribe(0, "orders", Offset::First, 10, &[("name", "billing")])
            .await,
        1
    );
    assert_eq!(read_to(&mut plain, 0, 15).await, 0);

    // The active member's connection goes: the next is activated and starts where told.
    drop(c1);
    let (corr, sub, active) = c2.consumer_update().await;
    assert_eq!((sub, active), (3, true));
    c2.answer_update(corr, Offset::At(12)).await;
    let first = read_to(&mut c2, 3, 15).await;
    assert!(
        (10..=12).contains(&first),
        "from the chunk holding 12 (got {first})"
    );
    publish(&env, "orders", 1).await;
    read_to(&mut c2, 3, 16).await;

    // A member that unsubscribes while inactive changes nothing for the active one.
    let mut c3 = raw(&b).await;
    assert_eq!(
        c3.subscribe(0, "orders", Offset::Next, 10, &[SAC, group])
            .await,
        1
    );
    assert_eq!(c3.call(0x000c, &[0]).await, 1, "unsubscribed");
    c2.quiet(300).await;
    c3.quiet(100).await;
    within(b.server.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_spread_over_a_group_stepping_down_before_handing_over() {
    let b = broker().await;
    let env = env(&b).await;
    within(
        env.stream_creator()
            .create_super_stream("invoices", 2, None),
    )
    .await
    .expect("created");
    publish(&env, "invoices-1", 3).await;
    let group = ("name", "ledger");
    let sup = ("super-stream", "invoices");

    // Alone in the group, the first consumer is active on both partitions.
    let mut c1 = raw(&b).await;
    for (id, p) in [(0, "invoices-0"), (1, "invoices-1")] {
        assert_eq!(
            c1.subscribe(id, p, Offset::First, 10, &[SAC, group, sup])
                .await,
            1
        );
        let (corr, sub, active) = c1.consumer_update().await;
        assert_eq!((sub, active), (id, true));
        // Type 0: read from where the subscription said (first).
        c1.answer_update(corr, Offset::None).await;
    }
    assert_eq!(read_to(&mut c1, 1, 3).await, 0);

    // A second consumer joins both: partition 0 stays with the first (0 mod 2), partition 1
    // moves (1 mod 2); the first steps down there and the second is activated only once
    // the first answered.
    let mut c2 = raw(&b).await;
    for (id, p) in [(5, "invoices-0"), (6, "invoices-1")] {
        assert_eq!(
            c2.subscribe(id, p, Offset::First, 10, &[SAC, group, sup])
                .await,
            1
        );
    }
    let (corr, sub, active) = c1.consumer_update().await;
    assert_eq!(
        (sub, active),
        (1, false),
        "the first steps down on partition 1"
    );
    c2.quiet(300).await;
    c1.answer_update(corr, Offset::None).await;
    let (corr, sub, active) = c2.consumer_update().await;
    assert_eq!((sub, active), (6, true));
    c2.answer_update(corr, Offset::At(0)).await;
    assert_eq!(read_to(&mut c2, 6, 3).await, 0);

    // New messages on partition 1 go to the second only; partition 0's to the first.
    publish(&env, "invoices-1", 2).await;
    read_to(&mut c2, 6, 5).await;
    publish(&env, "invoices-0", 1).await;
    read_to(&mut c1, 0, 1).await;
    c1.quiet(300).await;
    c2.quiet(100).await;

    // The second leaves: partition 1 comes back to the first, from where it says.
    drop(c2);
    let (corr, sub, active) = c1.consumer_update().await;
    assert_eq!((sub, active), (1, true));
    c1.answer_update(corr, Offset::At(4)).await;
    let first = read_to(&mut c1, 1, 5).await;
    assert!(first <= 4, "the chunk holding offset 4 (got {first})");
    within(b.server.shutdown()).await;
}
