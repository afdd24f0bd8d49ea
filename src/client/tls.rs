//! TLS for `amqps://` URIs, from the options RabbitMQ's Erlang client reads in the query:
//! the server is checked against `cacertfile` (else the system's roots) and the name in
//! `server_name_indication` (else the host; `disable` sends no SNI), unless
//! `verify=verify_none`; `certfile` and `keyfile` present a client certificate (for
//! `auth_mechanism=external`). Unlike the Erlang client on OTP before 26, no `verify` means
//! the server is verified.

use super::uri::AmqpUri;
use crate::tls::{certificates, file_error, TlsError};
use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

/// The system's trusted roots, loaded once.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!("loading the system's TLS roots: {e}");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!("{added} system TLS roots loaded");
            Arc::new(roots)
        })
        .clone()
}

/// `verify=verify_none`: any certificate is accepted, but the handshake's signatures are
/// still checked against it.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The client configuration a URI's options ask for.
fn config(uri: &AmqpUri) -> Result<ClientConfig, TlsError> {
    let setup = |e: tokio_rustls::rustls::Error| TlsError::Setup(e.to_string());
    let provider = Arc::new(crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(setup)?;
    let builder = if uri.verify_none {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
    } else {
        let roots = match &uri.cacertfile {
            Some(path) => {
                let path = Path::new(path);
                let mut roots = RootCertStore::empty();
                for c in certificates(path)? {
                    roots.add(c).map_err(|e| file_error(path, e))?;
                }
                Arc::new(roots)
            }
            None => system_roots(),
        };
        builder.with_root_certificates(roots)
    };
    let mut config = match (&uri.certfile, &uri.keyfile) {
        (Some(cert), Some(key)) => {
            let chain = certificates(Path::new(cert))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key.as_ref(), e))?;
            builder.with_client_auth_cert(chain, key).map_err(setup)?
        }
        _ => builder.with_no_client_auth(),
    };
    config.enable_sni = uri.server_name.as_deref() != Some("disable");
    Ok(config)
}

/// The TLS handshake on a connected socket, as the URI's options ask.
pub async fn connect(uri: &AmqpUri, sock: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    let config = config(uri).map_err(io::Error::other)?;
    let name = match uri.server_name.as_deref() {
        Some(n) if n != "disable" => n,
        _ => &uri.host,
    };
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| io::Error::other(format!("invalid server name {name:?}: {e}")))?;
    TlsConnector::from(Arc::new(config))
        .connect(name, sock)
        .await
}

/// The TLS handshake with `host` on a connected socket, its certificate checked against the
/// system's roots (a shovel's `https://` webhook).
pub async fn connect_host(host: &str, sock: TcpStream) -> io::Result<TlsStream<TcpStream>> {
    let provider = Arc::new(crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(system_roots())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::other(format!("invalid server name {host:?}: {e}")))?;
    TlsConnector::from(Arc::new(config))
        .connect(name, sock)
        .await
}
