//! Structural checks of the seams (issues #16 and #17): routing and enqueueing happen only in
//! the core's one publish path (`src/vhost/`), store keys and values are encoded only in
//! `src/store/`, and only `src/cluster/` sees openraft and the inter-node transport.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Lines of non-test code (comments aside) in files outside `allowed` that contain any of
/// `needles`.
fn offenders(allowed: &[&str], needles: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut found = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(root)
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        if allowed.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        // Unit tests at the end of a file may build what they test.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if needles.iter().any(|n| line.contains(n)) {
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn routing_and_enqueueing_happen_only_in_the_core_publish_path() {
    let found = offenders(
        &["src/vhost/", "src/queue/", "src/exchange/"],
        &[
            ".route(&",
            "vhost.route(",
            "q.publish(",
            "sender_selected()",
            "deliver_reply(",
        ],
    );
    assert!(found.is_empty(), "routing outside the core: {found:#?}");
}

#[test]
fn store_keys_and_values_are_encoded_only_in_the_store() {
    let found = offenders(
        &["src/store/"],
        &[
            "store::schema",
            "schema::encode",
            "Op::Put",
            "Op::DeletePermission",
            "Op::DeleteParameter",
            "Op::DeleteExchange",
            "Op::DeleteBinding",
            "Op::DeleteQueue {",
        ],
    );
    assert!(
        found.is_empty(),
        "store encoding outside src/store/: {found:#?}"
    );
}

#[test]
fn the_core_names_no_front_end_and_no_amqp_error() {
    // Front ends call the core, never the reverse; AMQP's errors (reply scope, `NAME - text`)
    // stay in amqp/, the core returns CoreError.
    let front_ends = [
        "src/amqp/",
        "src/http/",
        "src/metrics/",
        // Shovels and federation are front ends on the broker's own AMQP client, which shares
        // the codec.
        "src/shovel/",
        "src/federation/",
        "src/client/",
        // The stream protocol front end shares AMQP's SASL parsing (PLAIN, AMQPLAIN).
        "src/stream/",
        "src/bin/",
        "src/lib.rs",
        "src/main.rs",
    ];
    let found = offenders(
        &front_ends,
        &[
            "crate::amqp",
            "crate::http",
            "crate::metrics",
            "AmqpError",
            "AmqpResult",
        ],
    );
    assert!(found.is_empty(), "the core names a front end: {found:#?}");
    let found = offenders(&["src/amqp/"], &["AmqpError", "AmqpResult"]);
    assert!(found.is_empty(), "AMQP errors outside amqp/: {found:#?}");
}

#[test]
fn only_the_cluster_sees_the_consensus_engine_and_the_inter_node_transport() {
    // DESIGN: only `cluster/` sees openraft or the inter-node transport (its handshake MAC and
    // its wire encoding included); the store keeps Raft logs as opaque bytes.
    let found = offenders(
        &["src/cluster/"],
        &[
            "openraft",
            "postcard",
            "hmac::",
            "cluster::transport",
            "cluster::handshake",
        ],
    );
    assert!(
        found.is_empty(),
        "consensus or transport outside src/cluster/: {found:#?}"
    );
}
