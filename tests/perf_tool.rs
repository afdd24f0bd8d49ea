//! The load tool's own accounting: a known number of messages gives exact counts.

mod common;

use common::*;

fn perf(url: &str, args: &[&str]) -> serde_like::Summary {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warren-perf"))
        .args(["--uri", url, "--json", "-z", "60"])
        .args(args)
        .output()
        .expect("run warren-perf");
    assert!(
        out.status.success(),
        "warren-perf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_like::parse(&String::from_utf8_lossy(&out.stdout))
}

/// Just enough JSON reading for the tool's one-line summary.
mod serde_like {
    #[derive(Debug)]
    pub struct Summary {
        pub published: u64,
        pub confirmed: u64,
        pub nacked: u64,
        pub consumed: u64,
    }

    pub fn field(s: &str, name: &str) -> u64 {
        let key = format!("\"{name}\":");
        let at = s.find(&key).unwrap_or_else(|| panic!("no {name} in {s}")) + key.len();
        s[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .expect("number")
    }

    pub fn parse(s: &str) -> Summary {
        Summary {
            published: field(s, "published"),
            confirmed: field(s, "confirmed"),
            nacked: field(s, "nacked"),
            consumed: field(s, "consumed"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_exact_for_a_known_number_of_messages() {
    let b = start().await;
    let url = b.url();
    let summary = tokio::task::spawn_blocking(move || {
        perf(
            &url,
            &[
                "-x",
                "2",
                "-y",
                "1",
                "--count",
                "1500",
                "--consume-count",
                "3000",
                "-c",
                "64",
                "--persistent",
                "--delete-queues",
            ],
        )
    })
    .await
    .expect("join");
    assert_eq!(summary.published, 3000);
    assert_eq!(summary.confirmed, 3000);
    assert_eq!(summary.nacked, 0);
    assert_eq!(summary.consumed, 3000);
    // --delete-queues removed the queue.
    let (_c, ch) = b.channel().await;
    let r = within(ch.queue_declare(
        "perf-0".into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    ))
    .await;
    assert_code(r, 404);
}

fn perf_raw(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warren-perf"))
        .args(["--uri", url])
        .args(args)
        .output()
        .expect("run warren-perf");
    assert!(
        out.status.success(),
        "warren-perf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declare_and_rpc_modes_do_what_they_count() {
    let b = start().await;
    let url = b.url();
    // 50 durable queues over 3 connections, all there afterwards.
    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        perf_raw(&u, &["--declare", "50", "-x", "3", "--queue-prefix", "d"])
    })
    .await
    .expect("join");
    assert_eq!(serde_like::field(&out, "declared"), 50, "{out}");
    let (_c, ch) = b.channel().await;
    for i in [0, 17, 49] {
        let ok = within(ch.queue_declare(
            format!("d-decl-{i}").as_str().into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        ))
        .await
        .expect("declared");
        assert_eq!(ok.message_count(), 0);
    }
    // RPC for a second: calls answered, and no reply queue or request left behind.
    let out = tokio::task::spawn_blocking(move || {
        perf_raw(
            &url,
            &["--rpc", "-x", "2", "-z", "1", "--queue-prefix", "r"],
        )
    })
    .await
    .expect("join");
    assert!(serde_like::field(&out, "calls") > 10, "{out}");
    let requests = within(ch.queue_declare(
        "r-rpc".into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        lapin::types::FieldTable::default(),
    ))
    .await
    .expect("request queue");
    assert_eq!(requests.message_count(), 0);
    let names: Vec<String> = b
        .server
        .broker
        .vhost("/")
        .map(|v| v.queues().iter().map(|q| q.name.clone()).collect())
        .unwrap_or_default();
    assert!(
        !names.iter().any(|n| n.starts_with("amq.gen-")),
        "reply queues left: {names:?}"
    );
}
