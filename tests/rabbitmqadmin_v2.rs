//! RabbitMQ's rabbitmqadmin v2 (the Rust rewrite, built by `tests/tools/install-rabbitmqadmin-v2`)
//! against Warren, unchanged, as `tests/rabbitmqadmin.rs` runs the classic one: declare,
//! bind, publish, get, list, users and permissions, health checks, definitions export and
//! import. Effects are checked with the tool's own output and over AMQP.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

/// The tool, installed by the project's script on first use.
fn rabbitmqadmin() -> PathBuf {
    tool(
        "target/tools/rabbitmqadmin-v2/bin/rabbitmqadmin",
        "install-rabbitmqadmin-v2",
    )
}

/// Runs `rabbitmqadmin ... args` as guest; returns stdout, failing on an error.
fn admin(b: &TestBroker, args: &[&str]) -> String {
    let out = Command::new(rabbitmqadmin())
        .args(["--host", "127.0.0.1", "--port"])
        .arg(b.server.http_addr.port().to_string())
        .args([
            "--username",
            "guest",
            "--password",
            "guest",
            "--non-interactive",
        ])
        .args(args)
        .output()
        .expect("run rabbitmqadmin");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rabbitmqadmin {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmqadmin_v2_works_unchanged() {
    let b = start().await;
    let run = |args: &[&str]| tokio::task::block_in_place(|| admin(&b, args));
    run(&[
        "declare",
        "queue",
        "--name",
        "jobs",
        "--durable",
        "true",
        "--arguments",
        r#"{"x-max-length":100}"#,
    ]);
    run(&[
        "declare",
        "exchange",
        "--name",
        "work",
        "--type",
        "topic",
        "--durable",
        "true",
    ]);
    run(&[
        "declare",
        "binding",
        "--source",
        "work",
        "--destination-type",
        "queue",
        "--destination",
        "jobs",
        "--routing-key",
        "job.#",
    ]);
    let out = run(&[
        "publish",
        "message",
        "--exchange",
        "work",
        "--routing-key",
        "job.build",
        "--payload",
        "compile",
    ]);
    assert!(out.contains("routed"), "{out}");
    let (_c, ch) = b.channel().await;
    assert_eq!(ready(&ch, "jobs").await, 1);
    let got = run(&["get", "messages", "--queue", "jobs", "--count", "1"]);
    assert!(
        got.contains("compile") && got.contains("job.build"),
        "{got}"
    );
    assert_eq!(ready(&ch, "jobs").await, 0);

    let queues = run(&["list", "queues"]);
    assert!(
        queues.contains("jobs") && queues.contains("x-max-length: 100"),
        "{queues}"
    );
    assert!(run(&["list", "exchanges"]).contains("work"));
    assert!(run(&["list", "bindings"]).contains("job.#"));
    assert!(run(&["show", "overview"]).contains("Warren"));

    run(&["declare", "vhost", "--name", "v2"]);
    run(&[
        "declare",
        "user",
        "--name",
        "bob",
        "--password",
        "s3cret",
        "--tags",
        "monitoring",
    ]);
    run(&[
        "declare",
        "permissions",
        "--vhost",
        "v2",
        "--username",
        "bob",
        "--configure",
        ".*",
        "--write",
        ".*",
        "--read",
        "^bob\\.",
    ]);
    assert!(run(&["list", "users"]).contains("bob"));
    let perms = run(&["list", "permissions"]);
    assert!(
        perms.contains("bob") && perms.contains("^bob\\."),
        "{perms}"
    );
    assert!(
        b.connect_as("bob", "s3cret").await.is_err(),
        "bob has no access to /"
    );

    let port = b.server.amqp_addr.port().to_string();
    for check in [
        &["health_check", "local_alarms"][..],
        &["health_check", "node_is_quorum_critical"],
        &["health_check", "port_listener", "--port", &port],
    ] {
        let out = run(check);
        assert!(out.contains("passed"), "{check:?}: {out}");
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("defs.json");
    let file = file.to_str().expect("path");
    run(&["definitions", "export", "--file", file]);
    let defs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("export")).expect("JSON");
    assert!(defs["queues"]
        .as_array()
        .is_some_and(|q| q.iter().any(|q| q["name"] == "jobs")));
    run(&["delete", "queue", "--name", "jobs"]);
    run(&["delete", "user", "--name", "bob"]);
    assert!(!run(&["list", "queues"]).contains("jobs"));
    run(&["definitions", "import", "--file", file]);
    assert!(
        run(&["list", "queues"]).contains("jobs"),
        "import brought the queue back"
    );
    assert!(run(&["list", "users"]).contains("bob"), "and the user");
}
