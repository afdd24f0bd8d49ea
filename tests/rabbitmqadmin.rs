//! RabbitMQ's own `rabbitmqadmin` (from Debian's rabbitmq-server package, fetched by
//! `tests/tools/install-rabbitmqadmin`) against Warren, unchanged: list, declare, delete,
//! publish, get, export and import definitions, users and permissions. Effects are checked over
//! AMQP and with the tool's own output.

mod common;

use common::*;
use lapin::options::*;
use lapin::types::FieldTable;
use std::path::PathBuf;
use std::process::Command;

/// The tool, installed by the project's script on first use.
fn rabbitmqadmin() -> PathBuf {
    tool("target/tools/rabbitmqadmin", "install-rabbitmqadmin")
}

/// Runs `rabbitmqadmin -f raw_json|tsv ... args` as guest; returns stdout, failing on an error.
fn admin(b: &TestBroker, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(rabbitmqadmin())
        .args(["-H", "127.0.0.1", "-P"])
        .arg(b.server.http_addr.port().to_string())
        .args(["-u", "guest", "-p", "guest"])
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

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmqadmin_works_unchanged() {
    let b = start().await;
    let run = |args: &[&str]| tokio::task::block_in_place(|| admin(&b, args));
    run(&[
        "declare",
        "queue",
        "name=jobs",
        "durable=true",
        r#"arguments={"x-max-length":100}"#,
    ]);
    run(&[
        "declare",
        "exchange",
        "name=work",
        "type=topic",
        "durable=true",
    ]);
    run(&[
        "declare",
        "binding",
        "source=work",
        "destination=jobs",
        "routing_key=job.#",
    ]);
    let out = run(&[
        "publish",
        "exchange=work",
        "routing_key=job.build",
        "payload=compile",
    ]);
    assert!(out.contains("Message published"), "{out}");
    // Seen over AMQP.
    let (_c, ch) = b.channel().await;
    let q = within(ch.queue_declare(
        "jobs".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("declared by rabbitmqadmin");
    assert_eq!(q.message_count(), 1);
    let queues = json(&run(&[
        "-f", "raw_json", "list", "queues", "name", "messages", "durable",
    ]));
    assert_eq!(queues[0]["name"], "jobs");
    assert_eq!(queues[0]["durable"], true);
    let got = json(&run(&[
        "-f",
        "raw_json",
        "get",
        "queue=jobs",
        "ackmode=ack_requeue_false",
    ]));
    assert_eq!(got[0]["payload"], "compile");
    assert_eq!(got[0]["routing_key"], "job.build");
    let bindings = json(&run(&[
        "-f",
        "raw_json",
        "list",
        "bindings",
        "source",
        "destination",
        "routing_key",
    ]));
    assert!(bindings
        .as_array()
        .expect("bindings")
        .iter()
        .any(|x| x["source"] == "work" && x["routing_key"] == "job.#"));
    // Users and permissions, then a login with them over AMQP.
    run(&[
        "declare",
        "user",
        "name=ops",
        "password=ops-pw",
        "tags=management",
    ]);
    run(&[
        "declare",
        "permission",
        "vhost=/",
        "user=ops",
        "configure=.*",
        "write=.*",
        "read=.*",
    ]);
    within(lapin::Connection::connect(
        &format!("amqp://ops:ops-pw@{}/%2f", b.server.amqp_addr),
        Default::default(),
    ))
    .await
    .expect("ops logs in");
    // A policy declared with rabbitmqadmin applies to the queue.
    run(&[
        "declare",
        "policy",
        "name=cap",
        "pattern=^jobs$",
        r#"definition={"max-length": 5}"#,
        "priority=1",
        "apply-to=queues",
    ]);
    let policies = json(&run(&["-f", "raw_json", "list", "policies"]));
    assert_eq!(policies[0]["name"], "cap");
    assert_eq!(policies[0]["definition"]["max-length"], 5);
    let shown = json(&run(&[
        "-f", "raw_json", "list", "queues", "name", "policy",
    ]));
    assert_eq!(shown[0]["policy"], "cap");
    run(&["delete", "policy", "name=cap"]);
    assert_eq!(
        json(&run(&["-f", "raw_json", "list", "policies"])),
        serde_json::json!([])
    );
    // Export, delete, import: the queue and binding come back.
    let file = b.dir.path().join("export.json");
    let file_arg = file.display().to_string();
    let file_arg = file_arg.as_str();
    run(&["export", file_arg]);
    let exported = json(&std::fs::read_to_string(&file).expect("export file"));
    assert!(exported["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .any(|q| q["name"] == "jobs"));
    run(&["delete", "queue", "name=jobs"]);
    run(&["delete", "exchange", "name=work"]);
    let queues = json(&run(&["-f", "raw_json", "list", "queues", "name"]));
    assert_eq!(queues, serde_json::json!([]));
    run(&["import", file_arg]);
    let queues = json(&run(&["-f", "raw_json", "list", "queues", "name"]));
    assert_eq!(queues[0]["name"], "jobs");
    run(&[
        "publish",
        "exchange=work",
        "routing_key=job.test",
        "payload=again",
    ]);
    let got = json(&run(&["-f", "raw_json", "get", "queue=jobs"]));
    assert_eq!(got[0]["payload"], "again");
    // Overview and vhosts.
    let overview = json(&run(&["-f", "raw_json", "show", "overview"]));
    assert_eq!(overview[0]["rabbitmq_version"], "3.13.7");
    run(&["declare", "vhost", "name=staging"]);
    let vhosts = json(&run(&["-f", "raw_json", "list", "vhosts", "name"]));
    assert_eq!(vhosts.as_array().expect("vhosts").len(), 2);
    run(&["delete", "vhost", "name=staging"]);
}
