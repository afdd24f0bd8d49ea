//! A test PKI generated with rcgen: a CA, a server certificate for localhost, and client
//! certificates (CN `app-user`) from that CA and from one the broker does not trust.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// A PEM certificate and its key.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A test PKI: a CA, a server certificate for localhost, a client certificate from the CA and
/// one from a CA the broker does not trust.
pub struct Pki {
    pub ca: String,
    pub server: Pem,
    pub client: Pem,
    pub rogue_client: Pem,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("ca");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    sans: &[&str],
    dn: &[(DnType, &str)],
    usage: ExtendedKeyUsagePurpose,
) -> Pem {
    let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
    let mut params = CertificateParams::new(sans).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    for (k, v) in dn {
        params.distinguished_name.push(k.clone(), *v);
    }
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("sign");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

pub fn pki() -> Pki {
    let (ca_pem, issuer) = ca("Warren test CA");
    let (_, rogue) = ca("Somebody else's CA");
    let client_dn = [
        (DnType::OrganizationName, "Warren Tests"),
        (DnType::CommonName, "app-user"),
    ];
    Pki {
        ca: ca_pem,
        server: leaf(
            &issuer,
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "localhost")],
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        client: leaf(
            &issuer,
            &[],
            &client_dn,
            ExtendedKeyUsagePurpose::ClientAuth,
        ),
        rogue_client: leaf(&rogue, &[], &client_dn, ExtendedKeyUsagePurpose::ClientAuth),
    }
}

/// The server's certificate, its key and the CA, written to a temp dir that lives as long as
/// this.
pub struct ServerFiles {
    pub dir: tempfile::TempDir,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl ServerFiles {
    /// Names these files in a broker's configuration, with plain and TLS stream listeners on
    /// free ports.
    pub fn stream_listeners(&self, c: &mut warren::config::Config) {
        c.stream_listen = Some("127.0.0.1:0".parse().expect("addr"));
        c.stream_tls_listen = Some("127.0.0.1:0".parse().expect("addr"));
        c.tls_cert = Some(self.cert.clone());
        c.tls_key = Some(self.key.clone());
        c.tls_ca = Some(self.ca.clone());
    }
}

impl Pki {
    /// Writes the files a TLS listener's configuration names.
    pub fn server_files(&self) -> ServerFiles {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| -> PathBuf {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write pem");
            p
        };
        let cert = write("server.pem", &self.server.cert);
        let key = write("server.key", &self.server.key);
        let ca = write("ca.pem", &self.ca);
        ServerFiles { dir, cert, key, ca }
    }
}
