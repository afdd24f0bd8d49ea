//! `warren ctl` (the real binary) against a running node through its local CLI socket: the
//! rabbitmqctl / rabbitmq-diagnostics commands and their output shapes (banner, table,
//! `-q`, `-s`, `--formatter json`) and exit codes, with effects checked over AMQP.

mod common;

use common::*;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_commands_answer_as_rabbitmqctl_does() {
    let b = start().await;
    let dir = b.dir.path().to_owned();
    let (c, ch) = b.channel().await;
    within(ch.queue_declare(
        "q1".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    for body in [b"a", b"b"] {
        within(ch.basic_publish(
            "".into(),
            "q1".into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        ))
        .await
        .expect("publish");
    }
    within(ch.queue_declare("q0".into(), Default::default(), FieldTable::default()))
        .await
        .expect("declare q0");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    let (rc, out, _) = warren_ctl_async(&dir, &["await_startup"]).await;
    assert_eq!((rc, out.as_str()), (0, ""));
    let (rc, out, _) = warren_ctl_async(&dir, &["ping"]).await;
    assert_eq!(rc, 0);
    assert!(out.ends_with("Ping succeeded\n"), "{out}");
    let (rc, out, _) = warren_ctl_async(&dir, &["check_running"]).await;
    assert_eq!(rc, 0);
    assert!(out.contains("is fully booted and running"), "{out}");
    let (rc, out, _) = warren_ctl_async(&dir, &["check_port_connectivity"]).await;
    assert_eq!(rc, 0, "{out}");
    let amqp_port = b.server.amqp_addr.port().to_string();
    assert!(
        out.contains("Successfully connected to ports") && out.contains(&amqp_port),
        "{out}"
    );

    // list_queues: banner, header, rows by name; -q, -s and JSON as rabbitmqctl prints them.
    let (rc, out, _) = warren_ctl_async(&dir, &["list_queues"]).await;
    assert_eq!(rc, 0);
    assert_eq!(
        out,
        "Timeout: 60.0 seconds ...\nListing queues for vhost / ...\nname\tmessages\nq0\t0\nq1\t2\n"
    );
    let (_, out, _) = warren_ctl_async(&dir, &["list_queues", "-q", "name", "durable"]).await;
    assert_eq!(out, "name\tdurable\nq0\tfalse\nq1\ttrue\n");
    let (_, out, _) = warren_ctl_async(&dir, &["list_queues", "-s"]).await;
    assert_eq!(out, "q0\t0\nq1\t2\n");
    let (_, out, _) = warren_ctl_async(&dir, &["list_queues", "--formatter", "json"]).await;
    assert_eq!(
        out,
        "[\n{\"name\":\"q0\",\"messages\":0}\n,{\"name\":\"q1\",\"messages\":2}\n]\n"
    );
    let (rc, _, err) = warren_ctl_async(&dir, &["list_queues", "-p", "nowhere"]).await;
    assert_eq!(rc, 70, "{err}");

    // add_user, set_permissions, list_users; the user then logs in over AMQP.
    let (rc, out, _) = warren_ctl_async(&dir, &["add_user", "bob", "s3cret"]).await;
    assert_eq!(rc, 0);
    assert!(out.starts_with("Adding user \"bob\" ...\nDone."), "{out}");
    let (rc, _, err) = warren_ctl_async(&dir, &["add_user", "bob", "x"]).await;
    assert_eq!(rc, 70);
    assert!(err.contains("User \"bob\" already exists"), "{err}");
    let url = format!("amqp://bob:s3cret@{}/%2F", b.server.amqp_addr);
    let props = lapin::ConnectionProperties::default();
    assert!(
        lapin::Connection::connect(&url, props.clone())
            .await
            .is_err(),
        "no permissions yet"
    );
    let (rc, out, _) = warren_ctl_async(
        &dir,
        &["set_permissions", "-p", "/", "bob", ".*", ".*", ".*"],
    )
    .await;
    assert_eq!(rc, 0);
    assert_eq!(
        out,
        "Setting permissions for user \"bob\" in vhost \"/\" ...\n"
    );
    let bob = within(lapin::Connection::connect(&url, props))
        .await
        .expect("bob connects once permitted");
    let (_, out, _) = warren_ctl_async(&dir, &["list_users"]).await;
    assert_eq!(
        out,
        "Listing users ...\nuser\ttags\nbob\t[]\nguest\t[administrator]\n"
    );
    let (_, out, _) = warren_ctl_async(&dir, &["list_users", "--formatter", "json"]).await;
    assert_eq!(
        json(&out),
        json(r#"[{"user":"bob","tags":[]},{"user":"guest","tags":["administrator"]}]"#)
    );

    // list_connections: the default columns; bob's and guest's connections.
    let (_, out, _) = warren_ctl_async(&dir, &["list_connections", "-q"]).await;
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.remove(0), "user\tpeer_host\tpeer_port\tstate");
    lines.sort_unstable();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("bob\t127.0.0.1\t") && lines[0].ends_with("\trunning"));
    assert!(lines[1].starts_with("guest\t127.0.0.1\t"));

    // status and cluster_status of a single node.
    let (rc, out, _) = warren_ctl_async(&dir, &["status", "--formatter", "json"]).await;
    assert_eq!(rc, 0);
    let s = json(&out);
    assert_eq!(s["pid"], u64::from(std::process::id()), "the node's OS pid");
    assert_eq!(s["data_directory"], dir.display().to_string());
    assert!(s["listeners"]
        .as_array()
        .is_some_and(|l| l.iter().any(|x| x["protocol"] == "amqp")));
    let (_, out, _) = warren_ctl_async(&dir, &["status"]).await;
    assert!(out.starts_with("Status of node "), "{out}");
    let (rc, out, _) = warren_ctl_async(&dir, &["cluster_status", "--formatter", "json"]).await;
    assert_eq!(rc, 0);
    let cs = json(&out);
    assert_eq!(cs["disk_nodes"].as_array().map(Vec::len), Some(1));
    assert_eq!(cs["running_nodes"], cs["disk_nodes"]);
    let (rc, _, err) = warren_ctl_async(&dir, &["forget_cluster_node", "warren@elsewhere"]).await;
    assert_eq!(rc, 69);
    assert!(err.contains("not_a_cluster_node"), "{err}");

    drop((bob, c));
    // A node that is not running: rabbitmqctl's 69.
    let empty = tempfile::tempdir().expect("dir");
    let (rc, _, err) = warren_ctl_async(empty.path(), &["ping"]).await;
    assert_eq!(rc, 69);
    assert!(
        err.contains("unable to perform an operation on node"),
        "{err}"
    );
    let (rc, _, _) = warren_ctl_async(empty.path(), &["await_startup", "-t", "1"]).await;
    assert_eq!(rc, 69);
}
