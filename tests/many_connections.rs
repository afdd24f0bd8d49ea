//! Many quiet connections: each costs the broker a few pages, not its busy-connection buffers.
//! Alone in its test binary, so no other test's allocations show in the process's resident
//! memory.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_connections_keep_small_buffers() {
    let b = start().await;
    let url = b.url();
    let memory = warm_up_and_sample(&url);
    // 400 publishers and 400 consumers on their own connections, 400 queues, 10 msg/s each.
    let u = url.clone();
    let summary = tokio::task::spawn_blocking(move || {
        perf_json(
            &u,
            &[
                "--queue-prefix",
                "quiet",
                "-x",
                "400",
                "-y",
                "400",
                "--queues",
                "400",
                "-r",
                "10",
                "-q",
                "10",
                "--multi-ack",
                "1",
                "-z",
                "8",
                "--delete-queues",
            ],
        )
    })
    .await
    .expect("perf");
    let rise = memory.stop();
    let consumed = summary["consumed"].as_u64().unwrap_or(0);
    assert!(consumed >= 400 * 10 * 5, "the load ran: {summary}");
    // Connections, their channels and consumers, and the queues: about 30 KiB each when
    // this was written, 37-38 KiB by 2026-12-07 (measured the same at the session's base and
    // head), 46 KiB when every connection kept 64 KiB read and output buffers.
    let per_connection = rise / 800;
    assert!(
        per_connection < 42 << 10,
        "peak +{} KiB: {per_connection} B per connection",
        rise >> 10
    );
}
