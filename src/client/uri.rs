//! AMQP URIs as RabbitMQ's Erlang client reads them (`amqp_uri`):
//! `amqp[s]://[user[:password]@]host[:port][/vhost][?key=value&...]`, with the user, password
//! and vhost percent-decoded, `guest`/`guest` when no user is given, `/` when no vhost path
//! is given (and the empty vhost for a bare `/`), port 5672 (5671 for `amqps`). A URI with
//! no host (`amqp://`) names the local node.

use std::fmt;

/// Why a URI was refused, in the words RabbitMQ's validation uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UriError(pub String);

/// A parsed AMQP URI.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpUri {
    /// True for `amqps://`.
    pub tls: bool,
    /// The host (brackets of an IPv6 literal removed); empty for the local node.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
    /// The virtual host.
    pub vhost: String,
    /// Heartbeat timeout to propose, in seconds (`heartbeat`; 0 turns heartbeats off).
    pub heartbeat: Option<u16>,
    /// How long connecting and the handshake may take, in ms (`connection_timeout`).
    pub connection_timeout_ms: Option<u64>,
    /// `verify=verify_none` in the query: the server's certificate is not checked.
    pub verify_none: bool,
    /// `server_name_indication` in the query: the name checked and sent (default: the host;
    /// `disable` sends none and checks the host).
    pub server_name: Option<String>,
    /// `cacertfile` in the query: the CA bundle to check the server against (default: the
    /// system's roots).
    pub cacertfile: Option<String>,
    /// `certfile` in the query: the client certificate (chain) to present.
    pub certfile: Option<String>,
    /// `keyfile` in the query: the client certificate's key.
    pub keyfile: Option<String>,
    /// `auth_mechanism=external` in the query: log in as the client certificate (SASL
    /// EXTERNAL) instead of with the user and password.
    pub external: bool,
    /// The URI as given, for connecting again.
    text: String,
}

impl fmt::Debug for AmqpUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

fn refuse(uri: &str, reason: impl fmt::Display) -> UriError {
    UriError(format!("\"{uri}\" not a valid URI: {reason}"))
}

/// Decodes `%XX` escapes; None on a malformed escape or bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl AmqpUri {
    /// Parses a URI.
    pub fn parse(uri: &str) -> Result<AmqpUri, UriError> {
        Self::parse_in(uri, "/")
    }

    /// Parses a URI whose vhost, when it names none, is `default_vhost` (RabbitMQ's
    /// `amqp_uri:parse/2`, which federation uses with the federated exchange's vhost).
    pub fn parse_in(uri: &str, default_vhost: &str) -> Result<AmqpUri, UriError> {
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| refuse(uri, "{no_scheme}"))?;
        let tls = match scheme {
            "amqp" => false,
            "amqps" => true,
            other => {
                return Err(refuse(
                    uri,
                    format!("{{{{unexpected_uri_scheme,\"{other}\"}},\"{uri}\"}}"),
                ))
            }
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let decode = |s: &str| percent_decode(s).ok_or_else(|| refuse(uri, "bad escape"));
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (decode(n)?, decode(p)?),
                None => (decode(u)?, String::new()),
            },
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let (host, port) = split_host_port(hostport).ok_or_else(|| refuse(uri, "bad port"))?;
        let vhost = match path {
            None => default_vhost.to_owned(),
            Some(p) if p.contains('/') => return Err(refuse(uri, "vhost contains a '/'")),
            Some(p) => decode(p)?,
        };
        let mut parsed = AmqpUri {
            tls,
            host: host.to_owned(),
            port: port.unwrap_or(if tls { 5671 } else { 5672 }),
            user,
            password,
            vhost,
            heartbeat: None,
            connection_timeout_ms: None,
            verify_none: false,
            server_name: None,
            cacertfile: None,
            certfile: None,
            keyfile: None,
            external: false,
            text: uri.to_owned(),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v)?;
            let number = || {
                v.parse::<u64>()
                    .map_err(|_| refuse(uri, format!("{k} should be a number")))
            };
            match k {
                "heartbeat" => parsed.heartbeat = Some(number()?.min(u16::MAX.into()) as u16),
                "connection_timeout" => parsed.connection_timeout_ms = Some(number()?),
                "verify" => parsed.verify_none = v == "verify_none",
                "server_name_indication" => parsed.server_name = Some(v),
                "cacertfile" => parsed.cacertfile = Some(v),
                "certfile" => parsed.certfile = Some(v),
                "keyfile" => parsed.keyfile = Some(v),
                "auth_mechanism" => parsed.external |= v.eq_ignore_ascii_case("external"),
                // RabbitMQ's other options (channel_max, frame_max, depth, password, ...) are
                // accepted and not used.
                _ => {}
            }
        }
        Ok(parsed)
    }

    /// `amqp://` naming vhost `vhost` of the local node.
    pub fn local(vhost: &str) -> AmqpUri {
        AmqpUri {
            tls: false,
            host: String::new(),
            port: 5672,
            user: String::new(),
            password: String::new(),
            vhost: vhost.to_owned(),
            heartbeat: None,
            connection_timeout_ms: None,
            verify_none: false,
            server_name: None,
            cacertfile: None,
            certfile: None,
            keyfile: None,
            external: false,
            text: "amqp://".to_owned(),
        }
    }

    /// This URI's vhost and options, reached at `addr` as `user` over plain TCP (how a URI
    /// naming the local node is connected, `amqps://` too, as RabbitMQ's direct connection
    /// ignores TLS); it still shows as given.
    pub fn at(&self, addr: std::net::SocketAddr, user: &str, password: &str) -> AmqpUri {
        AmqpUri {
            tls: false,
            external: false,
            host: addr.ip().to_string(),
            port: addr.port(),
            user: user.to_owned(),
            password: password.to_owned(),
            ..self.clone()
        }
    }

    /// True when the URI names the local node (no host).
    pub fn is_local(&self) -> bool {
        self.host.is_empty()
    }

    /// `host:port` to connect to (an IPv6 host in brackets).
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URI as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The URI without its user and password (RabbitMQ's `amqp_uri:remove_credentials`):
    /// what status reports show.
    pub fn redacted(&self) -> String {
        redact(&self.text)
    }
}

/// Removes `user:password@` from a URI's text (RabbitMQ's `remove_credentials`).
pub fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => uri.to_owned(),
    }
}

/// Host and optional port of `host[:port]` or `[v6]:port`; None on a bad port.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    match port {
        None | Some("") => Some((host, None)),
        Some(p) => Some((host, Some(p.parse().ok()?))),
    }
}

/// `rabbit_parameter_validation`-style check of a URI value (a string or a list of them),
/// with RabbitMQ's texts.
pub fn check(name: &str, v: &serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    match v {
        Value::String(s) => match AmqpUri::parse(s) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e.0],
        },
        Value::Array(list) => list
            .iter()
            .map(|u| check(name, u))
            .find(|e| !e.is_empty())
            .unwrap_or_default(),
        other => vec![format!(
            "{name} should be list, actually was {}",
            crate::json::erlang_term(other)
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_as_rabbitmq() {
        let u = AmqpUri::parse("amqp://localhost").unwrap();
        assert_eq!(
            (u.user.as_str(), u.password.as_str(), u.vhost.as_str()),
            ("guest", "guest", "/")
        );
        assert_eq!(u.port, 5672);
        assert_eq!(AmqpUri::parse("amqps://h").unwrap().port, 5671);
        assert_eq!(AmqpUri::parse("amqp://h/").unwrap().vhost, "");
        assert!(AmqpUri::parse("amqp://").unwrap().is_local());
    }

    #[test]
    fn decodes_credentials_and_vhost() {
        let u = AmqpUri::parse("amqp://us%40er:p%3Ass@h:5673/%2Fv?heartbeat=5").unwrap();
        assert_eq!(u.user, "us@er");
        assert_eq!(u.password, "p:ss");
        assert_eq!(u.vhost, "/v");
        assert_eq!(u.address(), "h:5673");
        assert_eq!(u.heartbeat, Some(5));
        assert_eq!(u.redacted(), "amqp://h:5673/%2Fv?heartbeat=5");
        let v6 = AmqpUri::parse("amqp://[::1]:5680").unwrap();
        assert_eq!(v6.address(), "[::1]:5680");
    }

    #[test]
    fn tls_options_from_the_query() {
        let u = AmqpUri::parse(
            "amqps://h?cacertfile=%2Fetc%2Fca.pem&certfile=c.pem&keyfile=k.pem\
             &verify=verify_none&server_name_indication=broker&auth_mechanism=external",
        )
        .unwrap();
        assert_eq!(u.cacertfile.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(
            (u.certfile.as_deref(), u.keyfile.as_deref()),
            (Some("c.pem"), Some("k.pem"))
        );
        assert!(u.verify_none && u.external);
        assert_eq!(u.server_name.as_deref(), Some("broker"));
        let plain = AmqpUri::parse("amqps://h?auth_mechanism=plain").unwrap();
        assert!(!plain.verify_none && !plain.external);
    }

    #[test]
    fn refusals_name_the_uri() {
        assert_eq!(
            AmqpUri::parse("foo://x").unwrap_err().0,
            "\"foo://x\" not a valid URI: {{unexpected_uri_scheme,\"foo\"},\"foo://x\"}"
        );
        assert!(AmqpUri::parse("amqp://h:notaport").is_err());
        assert!(AmqpUri::parse("amqp://h/a%zz").is_err());
        assert!(AmqpUri::parse("nonsense").is_err());
    }
}
