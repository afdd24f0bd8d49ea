//! What a new user meets first (issue #16): API paths with a trailing slash, the queue's node,
//! the remaining health checks, the node name in the metrics, and listeners that name
//! themselves when they cannot bind.

mod common;

use common::http::request;
use common::{start, start_with};
use rcgen::{CertificateParams, KeyPair};

#[tokio::test]
async fn api_paths_answer_with_a_trailing_slash_for_every_method() {
    let b = start().await;
    let a = b.server.http_addr;
    let g = Some(("guest", "guest"));
    let _conn = b.connect().await;
    for path in [
        "/api/connections/",
        "/api/queues/",
        "/api/queues/%2F/",
        "/api/overview/",
        "/api/vhosts/",
        "/api/exchanges/%2F/",
    ] {
        let slash = request(a, "GET", path, g, None).await;
        let plain = request(a, "GET", path.trim_end_matches('/'), g, None).await;
        assert_eq!(slash.status, 200, "{path}: {}", slash.body);
        assert_eq!(plain.status, 200, "{path}");
    }
    let conns = request(a, "GET", "/api/connections/", g, None).await.json();
    assert_eq!(conns.as_array().map(Vec::len), Some(1));
    let put = request(a, "PUT", "/api/queues/%2F/q1/", g, Some("{}")).await;
    assert_eq!(put.status, 201, "{}", put.body);
    let show = request(a, "GET", "/api/queues/%2F/q1/?columns=name", g, None).await;
    assert_eq!(show.json()["name"], "q1");
    let del = request(a, "DELETE", "/api/queues/%2F/q1/", g, None).await;
    assert_eq!(del.status, 204);
    assert_eq!(
        request(a, "GET", "/api/queues/%2F/q1", g, None)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn queues_carry_their_node_and_the_metrics_name_it() {
    let b = start_with(|c| c.node_name = "warren@node-a".into()).await;
    let a = b.server.http_addr;
    let g = Some(("guest", "guest"));
    let put = request(
        a,
        "PUT",
        "/api/queues/%2F/transient",
        g,
        Some(r#"{"durable":false}"#),
    )
    .await;
    assert_eq!(put.status, 201);
    let q = request(a, "GET", "/api/queues/%2F/transient", g, None)
        .await
        .json();
    assert_eq!(q["node"], "warren@node-a");
    assert_eq!(q["durable"], false);
    let list = request(a, "GET", "/api/queues", g, None).await.json();
    assert_eq!(list[0]["node"], "warren@node-a");
    let m = request(b.server.metrics_addr, "GET", "/metrics", None, None).await;
    let line = m
        .body
        .lines()
        .find(|l| l.starts_with("rabbitmq_identity_info{"))
        .expect("identity info");
    assert!(line.contains(r#"rabbitmq_node="warren@node-a""#), "{line}");
    assert!(
        line.contains(r#"rabbitmq_cluster="warren@localhost""#),
        "{line}"
    );
}

#[tokio::test]
async fn the_remaining_health_checks_exist() {
    let b = start().await;
    let a = b.server.http_addr;
    let g = Some(("guest", "guest"));
    for check in ["node-is-quorum-critical", "node-is-mirror-sync-critical"] {
        let r = request(a, "GET", &format!("/api/health/checks/{check}"), g, None).await;
        assert_eq!(r.status, 200, "{check}");
        assert_eq!(r.json()["status"], "ok");
    }
    // No TLS listener: nothing can expire.
    let r = request(
        a,
        "GET",
        "/api/health/checks/certificate-expiration/1/weeks",
        g,
        None,
    )
    .await;
    assert_eq!((r.status, r.json()["status"].clone()), (200, "ok".into()));
    let r = request(
        a,
        "GET",
        "/api/health/checks/certificate-expiration/1/fortnights",
        g,
        None,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["reason"],
        "Time unit not recognised. Supported units: days, weeks, months, years."
    );
    let r = request(
        a,
        "GET",
        "/api/health/checks/certificate-expiration/x/days",
        g,
        None,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (400, "Invalid expiration value.".into())
    );
}

#[tokio::test]
async fn certificate_expiration_reports_an_expiring_listener_certificate() {
    let files = tempfile::tempdir().expect("tempdir");
    let key = KeyPair::generate().expect("key");
    let write = |name: &str, params: CertificateParams| {
        let cert = params.self_signed(&key).expect("cert");
        let path = files.path().join(name);
        std::fs::write(&path, cert.pem()).expect("write");
        path
    };
    let mut old = CertificateParams::new(vec!["localhost".into()]).expect("params");
    old.not_before = rcgen::date_time_ymd(1999, 1, 1);
    old.not_after = rcgen::date_time_ymd(2000, 1, 1);
    let expired = write("expired.pem", old);
    // rcgen's default validity ends in 4096.
    let fresh = write(
        "fresh.pem",
        CertificateParams::new(vec!["localhost".into()]).expect("params"),
    );
    let key_path = files.path().join("key.pem");
    std::fs::write(&key_path, key.serialize_pem()).expect("key");
    for (cert, expiring) in [(expired, true), (fresh, false)] {
        let key_path = key_path.clone();
        let b = start_with(move |c| {
            c.amqps_listen = Some("127.0.0.1:0".parse().expect("addr"));
            c.tls_cert = Some(cert);
            c.tls_key = Some(key_path);
        })
        .await;
        let r = request(
            b.server.http_addr,
            "GET",
            "/api/health/checks/certificate-expiration/10/years",
            Some(("guest", "guest")),
            None,
        )
        .await;
        let body = r.json();
        if expiring {
            assert_eq!(r.status, 503, "{body}");
            assert_eq!(body["reason"], "Certificates expiring");
            let l = &body["expired"][0];
            assert_eq!(l["protocol"], "amqp/ssl");
            assert_eq!(l["port"], b.server.amqps_addr.expect("amqps").port());
            assert_eq!(l["certfile_expires_on"][0], "2000-01-01 0:00:00");
        } else {
            assert_eq!(r.status, 200, "{body}");
        }
    }
}

#[tokio::test]
async fn a_listener_that_cannot_bind_names_itself_and_its_address() {
    let b = start().await;
    let taken = b.server.http_addr;
    let dir = tempfile::tempdir().expect("tempdir");
    let err = warren::Server::start(warren::config::Config {
        amqp_listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: taken,
        metrics_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().to_owned(),
        ..Default::default()
    })
    .await
    .expect_err("the port is taken");
    assert_eq!(
        err.to_string(),
        format!("cannot listen for HTTP (management API) on {taken}: address in use")
    );
}
