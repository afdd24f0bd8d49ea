//! The stream protocol over TLS (#19, RabbitMQ's port 5551): the official Rust client
//! publishes and consumes through the TLS listener (its producer and consumer connections
//! follow the metadata, which must name the TLS port), and a client certificate logs in with
//! SASL EXTERNAL, offered only to clients that presented one.

mod common;

use common::http::request;
use common::pki::{pki, Pem, Pki, ServerFiles};
use common::stream_raw::string;
use common::{start_with, within, TestBroker};
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::{Environment, TlsConfiguration};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use warren::config::CertLoginFrom;

struct TlsBroker {
    b: TestBroker,
    pki: Pki,
    ca_path: PathBuf,
    _files: ServerFiles,
}

async fn start_tls() -> TlsBroker {
    let pki = pki();
    let files = pki.server_files();
    let ca_path = files.ca.clone();
    let b = start_with(|c| {
        files.stream_listeners(c);
        c.auth_mechanisms = vec!["PLAIN".into(), "EXTERNAL".into()];
        c.ssl_cert_login_from = CertLoginFrom::CommonName;
    })
    .await;
    TlsBroker {
        b,
        pki,
        ca_path,
        _files: files,
    }
}

impl TlsBroker {
    fn tls_port(&self) -> u16 {
        self.b.server.stream_tls_addr.expect("TLS listener").port()
    }

    /// A raw TLS connection to the stream listener, with `identity` as client certificate.
    async fn raw(&self, identity: Option<&Pem>) -> RawTls {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(self.pki.ca.as_bytes()) {
            roots.add(c.expect("ca pem")).expect("root");
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(p) => {
                let chain = rustls::pki_types::CertificateDer::pem_slice_iter(p.cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("client cert");
                let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(p.key.as_bytes())
                    .expect("client key");
                builder.with_client_auth_cert(chain, key).expect("identity")
            }
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let addr = self.b.server.stream_tls_addr.expect("TLS listener");
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let s = within(connector.connect(name, tcp))
            .await
            .expect("TLS handshake");
        RawTls { s: Box::new(s) }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Frames by hand over TLS.
struct RawTls {
    s: Box<dyn Io>,
}

impl RawTls {
    async fn send(&mut self, body: &[u8]) {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        self.s.write_all(&f).await.expect("write");
    }

    async fn frame(&mut self) -> Vec<u8> {
        within(async {
            let mut len = [0u8; 4];
            self.s.read_exact(&mut len).await.expect("frame length");
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            self.s.read_exact(&mut body).await.expect("frame body");
            body
        })
        .await
    }

    /// The mechanisms a SASL handshake offers.
    async fn mechanisms(&mut self) -> Vec<String> {
        self.send(&[0, 0x11, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]).await;
        assert_eq!(&self.frame().await[..2], &[0x80, 0x11], "peer properties");
        self.send(&[0, 0x12, 0, 1, 0, 0, 0, 2]).await;
        let f = self.frame().await;
        assert_eq!(&f[..2], &[0x80, 0x12]);
        let n = u32::from_be_bytes(f[10..14].try_into().expect("count"));
        let mut at = 14;
        (0..n)
            .map(|_| {
                let len = usize::from(u16::from_be_bytes([f[at], f[at + 1]]));
                let m = String::from_utf8_lossy(&f[at + 2..at + 2 + len]).into_owned();
                at += 2 + len;
                m
            })
            .collect()
    }

    /// SASL authenticate with `mechanism` and an empty response: the answer's code.
    async fn authenticate(&mut self, mechanism: &str) -> u16 {
        let mut auth = vec![0, 0x13, 0, 1, 0, 0, 0, 3];
        auth.extend(string(mechanism));
        auth.extend(0u32.to_be_bytes());
        self.send(&auth).await;
        let f = self.frame().await;
        assert_eq!(&f[..2], &[0x80, 0x13]);
        u16::from_be_bytes([f[8], f[9]])
    }

    /// Tune and open `/`: the open answer's code and advertised port.
    async fn open(&mut self) -> (u16, String) {
        assert_eq!(&self.frame().await[..2], &[0, 0x14], "the server's tune");
        self.send(&[0, 0x14, 0, 1, 0, 0x10, 0, 0, 0, 0, 0, 0]).await;
        let mut open = vec![0, 0x15, 0, 1, 0, 0, 0, 4];
        open.extend(string("/"));
        self.send(&open).await;
        let f = self.frame().await;
        assert_eq!(&f[..2], &[0x80, 0x15]);
        let text = String::from_utf8_lossy(&f[10..]).into_owned();
        (u16::from_be_bytes([f[8], f[9]]), text)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_publishes_and_consumes_over_tls() {
    let t = start_tls().await;
    let tls = TlsConfiguration::builder()
        .add_root_certificates(t.ca_path.clone())
        .build()
        .expect("tls configuration");
    let env = within(
        Environment::builder()
            .host("localhost")
            .port(t.tls_port())
            .tls(tls)
            .build(),
    )
    .await
    .expect("stream connection over TLS");
    within(env.stream_creator().create("secure"))
        .await
        .expect("created");
    let producer = within(env.producer().build("secure"))
        .await
        .expect("producer over TLS (the metadata names the TLS port)");
    let messages = (0..20)
        .map(|i| Message::builder().body(format!("s-{i}")).build())
        .collect();
    let confirms = within(producer.batch_send_with_confirm(messages))
        .await
        .expect("published");
    assert!(confirms.len() == 20 && confirms.iter().all(|c| c.confirmed()));
    let mut consumer = within(
        env.consumer()
            .offset(OffsetSpecification::First)
            .build("secure"),
    )
    .await
    .expect("consumer over TLS");
    let mut bodies = Vec::new();
    within(async {
        use futures_lite::StreamExt;
        while bodies.len() < 20 {
            let d = consumer.next().await.expect("open").expect("delivery");
            let body = d.message().data().map(|b| b.to_vec()).unwrap_or_default();
            bodies.push(String::from_utf8(body).expect("utf-8"));
        }
    })
    .await;
    assert_eq!(bodies.first().map(String::as_str), Some("s-0"));
    assert_eq!(bodies.last().map(String::as_str), Some("s-19"));

    // The management API shows the connections as TLS ones.
    let r = request(
        t.b.server.http_addr,
        "GET",
        "/api/stream/connections",
        Some(("guest", "guest")),
        None,
    )
    .await;
    let conns = r.json();
    let conns = conns.as_array().cloned().unwrap_or_default();
    assert!(!conns.is_empty());
    assert!(
        conns.iter().all(|c| c["ssl"] == true
            && c["port"] == t.tls_port()
            && c["ssl_protocol"] == "tlsv1.3"),
        "{conns:?}"
    );
    within(producer.close()).await.expect("closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_logs_in_with_external() {
    let t = start_tls().await;
    // Without a certificate EXTERNAL is not offered, and asking for it is refused.
    let mut anonymous = t.raw(None).await;
    assert_eq!(anonymous.mechanisms().await, ["PLAIN"]);
    assert_eq!(
        anonymous.authenticate("EXTERNAL").await,
        0x07,
        "mechanism not supported"
    );

    // With one, it is; the certificate's CN must name a user.
    let mut unknown = t.raw(Some(&t.pki.client)).await;
    assert_eq!(unknown.mechanisms().await, ["PLAIN", "EXTERNAL"]);
    assert_eq!(
        unknown.authenticate("EXTERNAL").await,
        0x08,
        "no user app-user yet"
    );

    let addr = t.b.server.http_addr;
    let auth = Some(("guest", "guest"));
    let r = request(
        addr,
        "PUT",
        "/api/users/app-user",
        auth,
        Some(r#"{"tags":""}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let grant = Some(r#"{"configure":".*","write":".*","read":".*"}"#);
    let r = request(addr, "PUT", "/api/permissions/%2F/app-user", auth, grant).await;
    assert_eq!(r.status, 201, "{}", r.body);

    let mut c = t.raw(Some(&t.pki.client)).await;
    c.mechanisms().await;
    assert_eq!(
        c.authenticate("EXTERNAL").await,
        0x01,
        "logged in as the CN"
    );
    let (code, advertised) = c.open().await;
    assert_eq!(code, 0x01, "opened");
    assert!(
        advertised.contains(&t.tls_port().to_string()),
        "{advertised}"
    );
    let r = request(addr, "GET", "/api/stream/connections/%2F", auth, None).await;
    let conns = r.json();
    let conn = &conns.as_array().expect("a list")[0];
    assert_eq!(conn["user"], "app-user");
    assert_eq!(conn["auth_mechanism"], "EXTERNAL");
    assert_eq!(conn["peer_cert_subject"], "CN=app-user,O=Warren Tests");
}
