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

    fn field(s: &str, name: &str) -> u64 {
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
