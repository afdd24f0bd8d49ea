//! ExchangeCommandVersions over the stream protocol (#19): the server lists RabbitMQ's
//! client-to-server commands in RabbitMQ's order (rstream reads the list by position), and a
//! client that says it reads deliver version 2 gets the committed chunk id with every chunk,
//! while one that does not keeps version 1.

mod common;

use common::stream_client::env;
use common::stream_raw::{Offset, StreamRaw, DELIVER};
use common::{start_with, within, TestBroker};

const EXCHANGE_COMMAND_VERSIONS: u16 = 0x001b;

async fn broker() -> TestBroker {
    start_with(|c| c.stream_listen = Some("127.0.0.1:0".parse().expect("addr"))).await
}

/// Creates `stream` and publishes `n` messages to it, confirmed.
async fn publish(b: &TestBroker, stream: &str, n: usize) {
    let env = env(b).await;
    within(env.stream_creator().create(stream))
        .await
        .expect("created");
    common::stream_client::publish(&env, stream, n).await;
}

/// Sends ExchangeCommandVersions with `mine`; the server's (key, min, max) list.
async fn exchange(r: &mut StreamRaw, mine: &[(u16, u16, u16)]) -> Vec<(u16, u16, u16)> {
    let mut fields = (mine.len() as u32).to_be_bytes().to_vec();
    for (k, min, max) in mine {
        fields.extend(k.to_be_bytes());
        fields.extend(min.to_be_bytes());
        fields.extend(max.to_be_bytes());
    }
    let (code, f) = r.call_full(EXCHANGE_COMMAND_VERSIONS, &fields).await;
    assert_eq!(code, 1);
    let n = u32::from_be_bytes(f[10..14].try_into().expect("count")) as usize;
    let u16_at = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
    (0..n)
        .map(|i| (u16_at(14 + i * 6), u16_at(16 + i * 6), u16_at(18 + i * 6)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliver_version_2_carries_the_committed_chunk_id_when_asked_for() {
    let b = broker().await;
    publish(&b, "versions", 30).await;
    let addr = b.server.stream_addr.expect("stream listener");

    let mut v2 = StreamRaw::open(addr).await;
    let listed = exchange(&mut v2, &[(DELIVER, 1, 2)]).await;
    let keys: Vec<u16> = listed.iter().map(|(k, _, _)| *k).collect();
    assert_eq!(
        keys,
        [
            1, 2, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 0x16, 0x17, 0x18, 0x19, 0x1c, 0x1d, 0x1e,
            0x1f
        ],
        "RabbitMQ's commands, in its order"
    );
    assert_eq!(listed[1], (2, 1, 2), "publish 1-2");
    assert!(listed
        .iter()
        .all(|&(k, min, max)| min == 1 && (max == 1 || k == 2)));
    assert_eq!(v2.subscribe(1, "versions", Offset::First, 10, &[]).await, 1);
    let f = v2.expect(DELIVER).await;
    assert_eq!(u16::from_be_bytes([f[2], f[3]]), 2, "deliver version 2");
    assert_eq!(f[4], 1, "the subscription");
    let committed = u64::from_be_bytes(f[5..13].try_into().expect("8 bytes"));
    let chunk = &f[13..];
    let first = u64::from_be_bytes(chunk[24..32].try_into().expect("8 bytes"));
    assert_eq!(first, 0, "the first chunk");
    assert!(
        committed >= first && committed < 30,
        "committed chunk id {committed}"
    );

    // A client that does not ask keeps version 1 (the raw client reads it as such).
    let mut v1 = StreamRaw::open(addr).await;
    exchange(&mut v1, &[]).await;
    assert_eq!(v1.subscribe(1, "versions", Offset::First, 10, &[]).await, 1);
    let f = v1.expect(DELIVER).await;
    assert_eq!(u16::from_be_bytes([f[2], f[3]]), 1, "deliver version 1");
    let (sub, first, _) = common::stream_raw::chunk_of(&f);
    assert_eq!((sub, first), (1, 0));
}
