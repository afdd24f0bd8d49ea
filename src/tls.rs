//! TLS for the `amqps`, stream protocol and HTTPS listeners, with rustls. One server configuration is built at
//! start from the PEM files named in the config; with a CA file, client certificates are
//! verified against it (required when `tls_fail_if_no_peer_cert` is set, as RabbitMQ's
//! `fail_if_no_peer_cert`). The verified client certificate names the user for the EXTERNAL
//! mechanism: its subject DN in RabbitMQ's RFC 4514 form, or its CN.

use crate::config::{CertLoginFrom, Config};
use crate::connections::{PeerCert, TlsInfo};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// A TLS setup that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("cannot load {path}: {detail}")]
    File {
        /// File path.
        path: String,
        /// Cause.
        detail: String,
    },
    /// rustls refused the combination.
    #[error("invalid TLS setup: {0}")]
    Setup(String),
}

/// A file that could not be used, and why.
pub(crate) fn file_error(path: &Path, detail: impl ToString) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        detail: detail.to_string(),
    }
}

/// Every certificate in a PEM file; an error when it cannot be read or holds none.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no certificate in the file"));
    }
    Ok(certs)
}

/// The expiry (`notAfter`, Unix seconds) of every certificate in a PEM file; Err with
/// RabbitMQ's wording when the file cannot be read or holds no certificate.
pub fn certificate_expiries(path: &Path) -> Result<Vec<i64>, String> {
    let certs = certificates(path)
        .map_err(|_| "The certificate file provided does not contain any PEM entry.".to_owned())?;
    certs
        .iter()
        .map(|der| {
            x509_parser::parse_x509_certificate(der.as_ref())
                .map(|(_, c)| c.validity().not_after.timestamp())
                .map_err(|e| format!("cannot parse a certificate: {e}"))
        })
        .collect()
}

/// Builds the acceptor from `tls_cert`, `tls_key` and the optional `tls_ca`; None when no
/// certificate is configured.
pub fn acceptor(config: &Config) -> Result<Option<TlsAcceptor>, TlsError> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    // The provider is named explicitly so that a build with several rustls providers enabled
    // (tests pull in the client's) never has to pick one at run time.
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    let builder = match &config.tls_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certificates(ca)? {
                roots.add(c).map_err(|e| file_error(ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if config.tls_fail_if_no_peer_cert {
                verifier.build()
            } else {
                verifier.allow_unauthenticated().build()
            };
            builder.with_client_cert_verifier(verifier.map_err(|e| TlsError::Setup(e.to_string()))?)
        }
        None => builder.with_no_client_auth(),
    };
    let mut server = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    server.alpn_protocols = vec![b"amqp".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}

/// Both sides of inter-node TLS (`cluster_tls`): the acceptor for peers that connect, which
/// requires a certificate signed by `tls_ca`, and the connector for peers this node reaches,
/// which presents `tls_cert` and verifies the peer against `tls_ca`.
#[derive(Clone)]
pub struct PeerTls {
    /// For accepted inter-node connections.
    pub acceptor: TlsAcceptor,
    /// For inter-node connections this node opens.
    pub connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

/// Builds inter-node TLS from `tls_cert`, `tls_key` and `tls_ca`; None unless `cluster_tls`.
pub fn peer_tls(config: &Config) -> Result<Option<PeerTls>, TlsError> {
    if !config.cluster_tls {
        return Ok(None);
    }
    let (Some(cert), Some(key), Some(ca)) = (&config.tls_cert, &config.tls_key, &config.tls_ca)
    else {
        return Err(TlsError::Setup(
            "cluster_tls needs tls_cert, tls_key and tls_ca".into(),
        ));
    };
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    let mut roots = RootCertStore::empty();
    for c in certificates(ca)? {
        roots.add(c).map_err(|e| file_error(ca, e))?;
    }
    let roots = Arc::new(roots);
    let setup = |e: tokio_rustls::rustls::Error| TlsError::Setup(e.to_string());
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(setup)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(setup)?;
    let client = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(setup)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(setup)?;
    Ok(Some(PeerTls {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
    }))
}

/// The user name a verified client certificate stands for (RabbitMQ's `ssl_cert_login_from`).
pub fn cert_user_name(der: &[u8], from: CertLoginFrom) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    match from {
        CertLoginFrom::CommonName => subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(str::to_owned),
        CertLoginFrom::DistinguishedName => Some(distinguished_name(subject)),
    }
}

/// A client connection whose TLS handshake finished.
pub struct Accepted {
    /// The encrypted stream.
    pub stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    /// What it negotiated.
    pub info: Arc<TlsInfo>,
    /// The user its verified certificate names (for EXTERNAL), if it sent one.
    pub cert_user: Option<String>,
}

/// Runs the server side of the TLS handshake on `socket` until `deadline`; None (logged)
/// when it fails or times out.
pub async fn accept(
    acceptor: &TlsAcceptor,
    socket: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    deadline: tokio::time::Instant,
    from: CertLoginFrom,
) -> Option<Accepted> {
    let stream = match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => return None,
    };
    let session = stream.get_ref().1;
    let cert_user = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|cert| cert_user_name(cert, from));
    let info = Arc::new(session_info(session));
    Some(Accepted {
        stream,
        info,
        cert_user,
    })
}

/// What a finished server handshake negotiated, in RabbitMQ's terms (for the management API).
pub fn session_info(conn: &tokio_rustls::rustls::ServerConnection) -> TlsInfo {
    use tokio_rustls::rustls::ProtocolVersion;
    let protocol = match conn.protocol_version() {
        Some(ProtocolVersion::TLSv1_3) => "tlsv1.3",
        Some(ProtocolVersion::TLSv1_2) => "tlsv1.2",
        _ => "unknown",
    };
    let suite = conn
        .negotiated_cipher_suite()
        .and_then(|s| s.suite().as_str())
        .unwrap_or("");
    let (key_exchange, cipher) = suite_terms(suite);
    TlsInfo {
        protocol,
        cipher,
        key_exchange,
        hash: "aead",
        peer_cert: conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|der| peer_cert(der)),
    }
}

/// The key exchange and bulk cipher of an IANA suite name ("TLS13_AES_256_GCM_SHA384",
/// "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") as Erlang's ssl names them.
fn suite_terms(suite: &str) -> (&'static str, &'static str) {
    let key_exchange = if suite.starts_with("TLS13_") {
        "any"
    } else if suite.contains("_ECDHE_RSA_") {
        "ecdhe_rsa"
    } else if suite.contains("_ECDHE_ECDSA_") {
        "ecdhe_ecdsa"
    } else {
        "unknown"
    };
    let cipher = if suite.contains("AES_256_GCM") {
        "aes_256_gcm"
    } else if suite.contains("AES_128_GCM") {
        "aes_128_gcm"
    } else if suite.contains("CHACHA20_POLY1305") {
        "chacha20_poly1305"
    } else {
        "unknown"
    };
    (key_exchange, cipher)
}

/// Subject, issuer and validity of a DER certificate, as RabbitMQ prints them.
fn peer_cert(der: &[u8]) -> Option<PeerCert> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let validity = cert.validity();
    Some(PeerCert {
        subject: distinguished_name(cert.subject()),
        issuer: distinguished_name(cert.issuer()),
        validity: format!(
            "{} - {}",
            utc(&validity.not_before),
            utc(&validity.not_after)
        ),
    })
}

/// "2026-12-06T03:14:15Z".
fn utc(t: &x509_parser::time::ASN1Time) -> String {
    let t = t.to_datetime();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// RFC 4514 form, most specific RDN first ("CN=client,O=Example"), as RabbitMQ prints it.
fn distinguished_name(name: &x509_parser::x509::X509Name<'_>) -> String {
    let registry = x509_parser::objects::oid_registry();
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let key = match x509_parser::objects::oid2abbrev(attr.attr_type(), registry) {
                        Ok("Email") => "EMAILADDRESS".to_owned(),
                        Ok(k) => k.to_owned(),
                        Err(_) => attr.attr_type().to_id_string(),
                    };
                    let value = match attr.as_str() {
                        Ok(s) => escape(s),
                        Err(_) => {
                            let hex: String =
                                attr.as_slice().iter().map(|b| format!("{b:02x}")).collect();
                            format!("#{hex}")
                        }
                    };
                    format!("{key}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(dn: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (k, v) in dn {
            params.distinguished_name.push(k.clone(), *v);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn user_names_from_the_subject() {
        let der = cert(&[
            (rcgen::DnType::CountryName, "GB"),
            (rcgen::DnType::OrganizationName, "Acme, Inc"),
            (rcgen::DnType::CommonName, "app-1"),
        ]);
        assert_eq!(
            cert_user_name(&der, CertLoginFrom::DistinguishedName).as_deref(),
            Some("CN=app-1,O=Acme\\, Inc,C=GB")
        );
        assert_eq!(
            cert_user_name(&der, CertLoginFrom::CommonName).as_deref(),
            Some("app-1")
        );
        let no_cn = cert(&[(rcgen::DnType::OrganizationName, "Acme")]);
        assert_eq!(cert_user_name(&no_cn, CertLoginFrom::CommonName), None);
        assert_eq!(
            cert_user_name(b"not a certificate", CertLoginFrom::CommonName),
            None
        );
    }

    #[test]
    fn suites_in_erlang_terms() {
        assert_eq!(
            suite_terms("TLS13_AES_256_GCM_SHA384"),
            ("any", "aes_256_gcm")
        );
        assert_eq!(
            suite_terms("TLS13_CHACHA20_POLY1305_SHA256"),
            ("any", "chacha20_poly1305")
        );
        assert_eq!(
            suite_terms("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            ("ecdhe_rsa", "aes_128_gcm")
        );
        assert_eq!(
            suite_terms("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
            ("ecdhe_ecdsa", "aes_256_gcm")
        );
    }

    #[test]
    fn a_peer_certificate_as_rabbitmq_prints_it() {
        let der = cert(&[
            (rcgen::DnType::CommonName, "client"),
            (rcgen::DnType::OrganizationName, "Example"),
        ]);
        let p = peer_cert(&der).expect("parsed");
        assert_eq!(p.subject, "O=Example,CN=client");
        let (from, to) = p.validity.split_once(" - ").expect("range");
        assert!(
            from.len() == 20 && from.ends_with('Z') && from < to,
            "{}",
            p.validity
        );
    }

    #[test]
    fn escaping_follows_rfc_4514() {
        assert_eq!(escape("#a b "), "\\#a b\\ ");
        assert_eq!(escape("x+y;z"), "x\\+y\\;z");
    }
}
