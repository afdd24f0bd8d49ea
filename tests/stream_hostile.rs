//! Hostile input over the stream protocol (#19): names, argument keys and binding keys longer
//! than an AMQP short string (the protocol's strings go to 65,535 bytes) are answered with a
//! response code, never a panic, and the connection goes on serving.

mod common;

use common::start_with;
use common::stream_raw::{string, StreamRaw};

const CREATE: u16 = 0x0d;
const METADATA: u16 = 0x0f;
const CREATE_SUPER_STREAM: u16 = 0x1d;

fn strings(items: &[&str]) -> Vec<u8> {
    let mut b = (items.len() as u32).to_be_bytes().to_vec();
    for s in items {
        b.extend(string(s));
    }
    b
}

fn map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = (pairs.len() as u32).to_be_bytes().to_vec();
    for (k, v) in pairs {
        b.extend(string(k));
        b.extend(string(v));
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_names_get_a_code_and_the_connection_goes_on() {
    let b = start_with(|c| c.stream_listen = Some("127.0.0.1:0".parse().expect("addr"))).await;
    let mut r = StreamRaw::open(b.server.stream_addr.expect("stream listener")).await;
    let long = "n".repeat(300);

    // A stream name past 255 bytes is a stream name, as in RabbitMQ (which checks only for
    // an empty name and the `amq.` prefix: 0x11 precondition failed).
    let mut create = string(&long);
    create.extend(map(&[]));
    assert_eq!(r.call(CREATE, &create).await, 1);
    for bad in ["", "amq.s"] {
        let mut create = string(bad);
        create.extend(map(&[]));
        assert_eq!(r.call(CREATE, &create).await, 0x11, "{bad:?}");
    }

    // An argument name of any length is ignored, as unknown arguments are.
    let mut create = string("fine");
    create.extend(map(&[(&long, "1"), ("max-length-bytes", "1000000")]));
    assert_eq!(r.call(CREATE, &create).await, 1);

    // A super stream with an oversized name, partition or binding key.
    for (name, partition, key) in [
        (long.as_str(), "p-0", "k"),
        ("ss", long.as_str(), "k"),
        ("ss2", "ss2-0", long.as_str()),
    ] {
        let mut f = string(name);
        f.extend(strings(&[partition]));
        f.extend(strings(&[key]));
        f.extend(map(&[]));
        let c = r.call(CREATE_SUPER_STREAM, &f).await;
        assert!(c != 0, "answered");
    }

    // Still served: metadata for the stream created above.
    let (_, f) = r.call_full(METADATA, &strings(&["fine"])).await;
    // The stream's entry ends the frame: code, leader, an empty replica list.
    let code = u16::from_be_bytes([f[f.len() - 8], f[f.len() - 7]]);
    assert_eq!(code, 1, "the stream is there: {f:?}");
    // The management API and the metrics list the long-named stream.
    let q = common::http::request(
        b.server.http_addr,
        "GET",
        "/api/queues",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(q.status, 200);
    assert!(q.body.contains(&long));
    let m = common::http::request(b.server.metrics_addr, "GET", "/metrics", None, None).await;
    assert_eq!(m.status, 200);
}
