//! TLS: lapin over rustls against the `amqps` listener (server-only TLS, mutual TLS with the
//! EXTERNAL mechanism, a client certificate from an unknown CA refused), and the management
//! API over HTTPS. Certificates are generated per test with rcgen.

mod common;

use common::pki::{pki, Pem, Pki, ServerFiles};
use common::*;
use lapin::options::*;
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use warren::config::CertLoginFrom;

/// The distinguished name of the client certificate, as RabbitMQ prints it.
const CLIENT_DN: &str = "CN=app-user,O=Warren Tests";

struct TlsBroker {
    b: TestBroker,
    pki: Pki,
    files: tempfile::TempDir,
}

async fn start_tls(adjust: impl FnOnce(&mut warren::config::Config)) -> TlsBroker {
    let pki = pki();
    let ServerFiles {
        dir: files,
        cert,
        key,
        ca,
    } = pki.server_files();
    let b = start_with(|c| {
        c.amqps_listen = Some("127.0.0.1:0".parse().expect("addr"));
        c.https_listen = Some("127.0.0.1:0".parse().expect("addr"));
        c.metrics_https_listen = Some("127.0.0.1:0".parse().expect("addr"));
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
        c.tls_ca = Some(ca);
        c.auth_mechanisms = vec!["PLAIN".into(), "AMQPLAIN".into(), "EXTERNAL".into()];
        adjust(c);
    })
    .await;
    TlsBroker { b, pki, files }
}

impl TlsBroker {
    fn amqps_port(&self) -> u16 {
        self.b.server.amqps_addr.expect("amqps listener").port()
    }

    async fn connect(
        &self,
        query: &str,
        identity: Option<&Pem>,
    ) -> lapin::Result<lapin::Connection> {
        let tls = OwnedTLSConfig {
            identity: identity.map(|p| OwnedIdentity::PKCS8 {
                pem: p.cert.as_bytes().to_vec(),
                key: p.key.as_bytes().to_vec(),
            }),
            cert_chain: Some(self.pki.ca.clone()),
        };
        let uri = format!(
            "amqps://guest:guest@localhost:{}/%2f{query}",
            self.amqps_port()
        );
        let builder = lapin::ConnectionBuilder::new()?
            .with_uri_str(uri)
            .with_tls_config(tls);
        within(builder.connect()).await
    }
}

async fn round_trip(conn: &lapin::Connection, queue: &str) {
    let ch = within(conn.create_channel()).await.expect("channel");
    within(ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("declare");
    within(ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        b"over tls",
        BasicProperties::default(),
    ))
    .await
    .expect("publish");
    let got = within(async {
        loop {
            if let Some(m) = ch
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await
                .expect("get")
            {
                return m;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(got.delivery.data, b"over tls");
}

#[tokio::test]
async fn server_only_tls_with_a_password() {
    let t = start_tls(|_| {}).await;
    let conn = t.connect("", None).await.expect("amqps connection");
    round_trip(&conn, "tls-q").await;
    // The plain listener keeps working beside it.
    let (_c, ch) = t.b.channel().await;
    within(ch.queue_declare(
        "plain-q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    ))
    .await
    .expect("plain still served");
}

#[tokio::test]
async fn mutual_tls_logs_in_with_external_as_the_subject_dn() {
    let t = start_tls(|_| {}).await;
    // Without a user of that name, EXTERNAL is refused with 403.
    let err = t
        .connect("?auth_mechanism=external", Some(&t.pki.client))
        .await
        .expect_err("no such user yet");
    assert_eq!(code(&err), Some(403), "{err}");
    // A passwordless user named after the certificate's DN, created over the API.
    let addr = t.b.server.http_addr;
    let path = format!("/api/users/{}", CLIENT_DN.replace(' ', "%20"));
    let r = common::http::request(
        addr,
        "PUT",
        &path,
        Some(("guest", "guest")),
        Some(r#"{"tags":""}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = common::http::request(
        addr,
        "PUT",
        &format!("/api/permissions/%2F/{}", CLIENT_DN.replace(' ', "%20")),
        Some(("guest", "guest")),
        Some(r#"{"configure":".*","write":".*","read":".*"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let conn = t
        .connect("?auth_mechanism=external", Some(&t.pki.client))
        .await
        .expect("EXTERNAL login");
    round_trip(&conn, "ext-q").await;
    // That user has no password, so PLAIN cannot log in as it.
    assert!(t.b.connect_as(CLIENT_DN, "").await.is_err());
}

#[tokio::test]
async fn external_with_the_common_name() {
    let t = start_tls(|c| {
        c.ssl_cert_login_from = CertLoginFrom::CommonName;
        c.default_user = "app-user".into();
        c.loopback_users = vec![];
    })
    .await;
    let conn = t
        .connect("?auth_mechanism=external", Some(&t.pki.client))
        .await
        .expect("EXTERNAL login as the CN");
    round_trip(&conn, "cn-q").await;
}

#[tokio::test]
async fn external_is_offered_only_to_clients_with_a_certificate() {
    let t = start_tls(|_| {}).await;
    // Over TLS without a client certificate, and over plain TCP, EXTERNAL is not offered.
    let err = t
        .connect("?auth_mechanism=external", None)
        .await
        .expect_err("EXTERNAL without a certificate");
    assert!(code(&err).is_none_or(|c| c == 403), "{err}");
    let mut r = common::raw::Raw::connect(t.b.server.amqp_addr).await;
    r.send(b"AMQP\x00\x00\x09\x01").await;
    match r.frame().await {
        Some(amq_protocol::frame::AMQPFrame::Method(
            0,
            amq_protocol::protocol::AMQPClass::Connection(
                amq_protocol::protocol::connection::AMQPMethod::Start(s),
            ),
        )) => assert_eq!(s.mechanisms.to_string(), "PLAIN AMQPLAIN"),
        other => panic!("expected connection.start, got {other:?}"),
    }
}

#[tokio::test]
async fn a_client_certificate_from_an_unknown_ca_is_refused() {
    let t = start_tls(|_| {}).await;
    assert!(t.connect("", Some(&t.pki.rogue_client)).await.is_err());
    // Other clients are unaffected.
    let conn = t
        .connect("", Some(&t.pki.client))
        .await
        .expect("good client");
    round_trip(&conn, "after-rogue").await;
}

#[tokio::test]
async fn clients_without_a_certificate_can_be_refused() {
    let t = start_tls(|c| c.tls_fail_if_no_peer_cert = true).await;
    assert!(t.connect("", None).await.is_err());
    let conn = t
        .connect("", Some(&t.pki.client))
        .await
        .expect("with a certificate");
    round_trip(&conn, "required").await;
}

#[tokio::test]
async fn the_api_shows_what_tls_negotiated_and_the_client_properties() {
    let t = start_tls(|_| {}).await;
    let _with_cert = t
        .connect("", Some(&t.pki.client))
        .await
        .expect("mutual TLS");
    let _server_only = t.connect("", None).await.expect("server-only TLS");
    let (_plain, _ch) = t.b.channel().await;
    let r = common::http::request(
        t.b.server.http_addr,
        "GET",
        "/api/connections",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json();
    let list = list.as_array().expect("array");
    assert_eq!(list.len(), 3, "{list:?}");
    let tls: Vec<&serde_json::Value> = list.iter().filter(|c| c["ssl"] == true).collect();
    assert_eq!(tls.len(), 2, "{list:?}");
    for c in &tls {
        // rustls and lapin settle on TLS 1.3, which Erlang's ssl reports with key exchange
        // "any" and MAC "aead".
        assert_eq!(c["ssl_protocol"], "tlsv1.3", "{c}");
        assert_eq!(c["ssl_key_exchange"], "any", "{c}");
        assert_eq!(c["ssl_hash"], "aead", "{c}");
        let cipher = c["ssl_cipher"].as_str().expect("cipher");
        assert!(
            ["aes_256_gcm", "aes_128_gcm", "chacha20_poly1305"].contains(&cipher),
            "{c}"
        );
    }
    let with_cert = tls
        .iter()
        .find(|c| !c["peer_cert_subject"].is_null())
        .expect("the mutual-TLS connection");
    assert_eq!(with_cert["peer_cert_subject"], CLIENT_DN);
    assert_eq!(with_cert["peer_cert_issuer"], "CN=Warren test CA");
    let validity = with_cert["peer_cert_validity"].as_str().expect("validity");
    let (from, to) = validity.split_once(" - ").expect("two dates");
    for date in [from, to] {
        assert_eq!(date.len(), 20, "{validity}");
        assert!(
            date.ends_with('Z') && date.as_bytes()[10] == b'T',
            "{validity}"
        );
    }
    assert!(from < to, "{validity}");
    let server_only = tls
        .iter()
        .find(|c| c["peer_cert_subject"].is_null())
        .expect("the server-only connection");
    assert!(server_only["peer_cert_issuer"].is_null());
    assert!(server_only["peer_cert_validity"].is_null());
    let plain = list.iter().find(|c| c["ssl"] == false).expect("plain");
    for key in [
        "ssl_protocol",
        "ssl_cipher",
        "ssl_key_exchange",
        "ssl_hash",
        "peer_cert_subject",
        "peer_cert_issuer",
        "peer_cert_validity",
    ] {
        assert!(plain[key].is_null(), "{key}: {plain}");
    }
    // Every client property, nested tables as objects, as RabbitMQ shows them.
    let props = &plain["client_properties"];
    assert!(props["product"].is_string(), "{props}");
    assert_eq!(props["capabilities"]["publisher_confirms"], true, "{props}");
    assert_eq!(
        props["capabilities"]["consumer_cancel_notify"], true,
        "{props}"
    );
}

/// GET over HTTPS, trusting the test CA; returns the whole response.
async fn https_get(t: &TlsBroker, addr: std::net::SocketAddr, path: &str) -> String {
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(t.pki.ca.as_bytes()) {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = within(connector.connect(name, tcp))
        .await
        .expect("TLS handshake");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n"
    );
    tls.write_all(request.as_bytes()).await.expect("request");
    let mut response = String::new();
    within(tls.read_to_string(&mut response))
        .await
        .expect("response");
    response
}

#[tokio::test]
async fn the_management_api_and_metrics_over_https() {
    let t = start_tls(|_| {}).await;
    let response = https_get(&t, t.b.server.https_addr.expect("https"), "/api/overview").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"amqp/ssl\""), "{response}");
    assert!(response.contains("\"https\""), "{response}");
    let metrics = https_get(
        &t,
        t.b.server.metrics_https_addr.expect("metrics https"),
        "/metrics",
    )
    .await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("\nrabbitmq_connections "), "{metrics}");
}

/// Ready messages in queue `q` of `b` (0 while it does not exist).
async fn ready(b: &TestBroker, q: &str) -> u32 {
    let (_c, ch) = b.channel().await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    within(ch.queue_declare(q.into(), passive, FieldTable::default()))
        .await
        .map_or(0, |ok| ok.message_count())
}

/// The status of shovel `name` in vhost `/` of `b`, once it is no longer starting.
async fn shovel_settled(b: &TestBroker, name: &str) -> serde_json::Value {
    let path = format!("/api/shovels/vhost/%2F/{name}");
    for _ in 0..400 {
        let r = common::http::request(b.server.http_addr, "GET", &path, GUEST, None).await;
        if r.status == 200 && r.json()[0]["state"] != "starting" {
            return r.json()[0].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("shovel {name} never left the starting state");
}

const GUEST: Option<(&str, &str)> = Some(("guest", "guest"));

/// A shovel whose source is the TLS broker's `amqps` listener (#21), with the options in the
/// URI's query as RabbitMQ reads them: checked against `cacertfile` under the name in
/// `server_name_indication`; refused when only the system's roots are there to trust it;
/// taken unverified with `verify=verify_none`; logging in with a client certificate
/// (`certfile`, `keyfile`, `auth_mechanism=external`).
#[tokio::test]
async fn a_shovel_reads_from_an_amqps_source() {
    let t = start_tls(|_| {}).await;
    let dest = start().await;
    let dir = t.files.path();
    let client_cert = dir.join("client.pem");
    let client_key = dir.join("client.key");
    std::fs::write(&client_cert, &t.pki.client.cert).expect("write");
    std::fs::write(&client_key, &t.pki.client.key).expect("write");
    let dn = CLIENT_DN.replace(' ', "%20");
    for (path, body) in [
        (format!("/api/users/{dn}"), r#"{"tags":""}"#),
        (
            format!("/api/permissions/%2F/{dn}"),
            r#"{"configure":".*","write":".*","read":".*"}"#,
        ),
    ] {
        let r = common::http::request(t.b.server.http_addr, "PUT", &path, GUEST, Some(body)).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let (_c, ch) = t.b.channel().await;
    let port = t.amqps_port();
    let ca = dir.join("ca.pem").display().to_string();
    let cases = [
        (
            "sni",
            format!("amqps://guest:guest@127.0.0.1:{port}?cacertfile={ca}&server_name_indication=localhost"),
        ),
        ("unverified", format!("amqps://guest:guest@localhost:{port}?verify=verify_none")),
        (
            "external",
            format!(
                "amqps://localhost:{port}?cacertfile={ca}&certfile={}&keyfile={}&auth_mechanism=external",
                client_cert.display(),
                client_key.display()
            ),
        ),
        ("untrusted", format!("amqps://guest:guest@localhost:{port}")),
    ];
    for (name, src_uri) in &cases {
        let q = format!("tls-{name}");
        within(ch.queue_declare(
            q.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ))
        .await
        .expect("declare");
        for i in 0..5 {
            within(ch.basic_publish(
                "".into(),
                q.as_str().into(),
                BasicPublishOptions::default(),
                format!("{name}{i}").as_bytes(),
                BasicProperties::default(),
            ))
            .await
            .expect("publish");
        }
        let value = serde_json::json!({"value": {
            "src-uri": src_uri, "src-queue": q,
            "dest-uri": format!("amqp://guest:guest@{}", dest.server.amqp_addr), "dest-queue": q,
        }});
        let path = format!("/api/parameters/shovel/%2F/{name}");
        let r = common::http::request(
            dest.server.http_addr,
            "PUT",
            &path,
            GUEST,
            Some(&value.to_string()),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    for (name, _) in &cases[..3] {
        let status = shovel_settled(&dest, name).await;
        assert_eq!(status["state"], "running", "{name}: {status}");
        let q = format!("tls-{name}");
        for _ in 0..400 {
            if ready(&dest, &q).await == 5 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(
            ready(&dest, &q).await,
            5,
            "{name}: moved to the destination"
        );
        assert_eq!(ready(&t.b, &q).await, 0, "{name}: taken from the source");
    }
    let status = shovel_settled(&dest, "untrusted").await;
    assert_eq!(status["state"], "terminated", "{status}");
    let reason = status["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("certificate"), "{reason}");
    assert_eq!(ready(&t.b, "tls-untrusted").await, 5, "nothing taken");
}
