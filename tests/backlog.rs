//! A backlog of millions of messages: paged out to disk, resident memory within 64 MiB of the
//! start, drained in publish order. Alone in its test binary, so no other test's allocations
//! show in the process's resident memory.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn millions_of_messages_stay_within_the_memory_bound_and_drain_in_order() {
    const N: u64 = 3_000_000;
    let b = start().await;
    let url = b.url();
    let memory = warm_up_and_sample(&url);
    let base = memory.base;
    let u = url.clone();
    let published = tokio::task::spawn_blocking(move || {
        perf_json(
            &u,
            &["--publish-only", "-x", "1", "--count", &N.to_string()],
        )
    })
    .await
    .expect("join");
    assert_eq!(published["published"], N);
    // The tool is done writing; the broker may still be reading its socket.
    let mut q = queue_json(&b, "perf-0").await;
    for _ in 0..600 {
        if q["messages_ready"] == N {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        q = queue_json(&b, "perf-0").await;
    }
    assert_eq!(q["messages_ready"], N);
    let paged = q["messages_paged_out"].as_u64().expect("paged count");
    // All but the in-memory window.
    let window = warren::config::Config::default().queue_window_messages as u64;
    assert_eq!(paged, N - window, "{paged} of {N} paged out");
    let u = url.clone();
    let drained = tokio::task::spawn_blocking(move || {
        perf_json(
            &u,
            &["-x", "0", "-y", "1", "--consume-count", &N.to_string()],
        )
    })
    .await
    .expect("join");
    let grew = memory.stop();
    assert_eq!(drained["consumed"], N, "every message came back");
    assert_eq!(drained["out_of_order"], 0, "in publish order");
    let q = queue_json(&b, "perf-0").await;
    assert_eq!(q["messages"], 0);
    assert_eq!(q["messages_paged_out"], 0);
    eprintln!(
        "{N} queued messages: resident memory {} MiB at the start, peak +{} MiB",
        base >> 20,
        grew >> 20
    );
    assert!(
        grew <= 64 << 20,
        "resident memory grew by {} MiB over {} MiB with {N} messages queued",
        grew >> 20,
        base >> 20
    );
    let left = std::fs::read_dir(b.dir.path().join("paging")).map_or(0, |d| d.count());
    assert_eq!(left, 0, "drained page files are deleted");
}
