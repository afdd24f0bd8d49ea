//! Users and SASL. Mechanisms PLAIN (`\0user\0pass`) and AMQPLAIN (a field table with LOGIN and
//! PASSWORD, without its length prefix), as RabbitMQ accepts them.

use amq_protocol::types::{AMQPValue, FieldTable};

/// A broker user. The password is kept only as RabbitMQ's `rabbit_password_hashing_sha256`
/// hash: base64 of a 4-byte random salt followed by SHA-256(salt ++ password), so hashes move
/// between RabbitMQ definitions and Warren unchanged.
#[derive(Clone, Debug)]
pub struct User {
    /// Name.
    pub name: String,
    /// Salt (4 bytes) followed by the SHA-256 digest.
    password_hash: Vec<u8>,
    /// Tags (administrator, monitoring...).
    pub tags: Vec<String>,
}

fn salted_digest(salt: &[u8], password: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(salt);
    h.update(password.as_bytes());
    let mut out = salt.to_vec();
    out.extend_from_slice(&h.finalize());
    out
}

/// Hashes a password with a fresh salt, as RabbitMQ does; returns the base64 form.
pub fn hash_password(password: &str) -> String {
    use base64::Engine;
    let salt: [u8; 4] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(salted_digest(&salt, password))
}

impl User {
    /// A user with a password (hashed here; the plain text is not kept).
    pub fn new(name: &str, password: &str, tags: &[&str]) -> Self {
        Self::with_hash(name, &hash_password(password), tags).unwrap_or_else(|| User {
            name: name.to_owned(),
            password_hash: Vec::new(),
            tags: Vec::new(),
        })
    }

    /// A user from a base64 `rabbit_password_hashing_sha256` hash; None when it is not one.
    pub fn with_hash(name: &str, hash_b64: &str, tags: &[&str]) -> Option<Self> {
        use base64::Engine;
        let password_hash = base64::engine::general_purpose::STANDARD
            .decode(hash_b64)
            .ok()?;
        if password_hash.len() != 4 + 32 {
            return None;
        }
        Some(User {
            name: name.to_owned(),
            password_hash,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        })
    }

    /// The base64 hash, as stored and exported.
    pub fn password_hash(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.password_hash)
    }

    /// Checks a password, comparing digests in constant time.
    pub fn password_matches(&self, given: &str) -> bool {
        if self.password_hash.len() != 36 {
            return false;
        }
        let candidate = salted_digest(&self.password_hash[..4], given);
        let diff = candidate
            .iter()
            .zip(&self.password_hash)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        diff == 0
    }
}

/// RabbitMQ's `loopback_users`: the listed users may only connect from a loopback address.
pub fn may_log_in_from(loopback_users: &[String], user: &str, ip: std::net::IpAddr) -> bool {
    ip.is_loopback() || ip.to_canonical().is_loopback() || !loopback_users.iter().any(|u| u == user)
}

/// Mechanisms offered in connection.start.
pub const MECHANISMS: &str = "PLAIN AMQPLAIN";

/// Extracts (user, password) from a SASL response; None when it is malformed or the mechanism
/// is not offered.
pub fn parse_response(mechanism: &str, response: &[u8]) -> Option<(String, String)> {
    match mechanism {
        "PLAIN" => {
            let mut parts = response.split(|b| *b == 0);
            let _authzid = parts.next()?;
            let user = parts.next()?;
            let pass = parts.next()?;
            if parts.next().is_some() {
                return None;
            }
            Some((
                String::from_utf8(user.to_vec()).ok()?,
                String::from_utf8(pass.to_vec()).ok()?,
            ))
        }
        "AMQPLAIN" => {
            let mut framed = Vec::with_capacity(response.len() + 4);
            framed.extend_from_slice(&(response.len() as u32).to_be_bytes());
            framed.extend_from_slice(response);
            crate::amqp::nesting::check_table(&framed).ok()?;
            let (_, table) =
                amq_protocol::types::parsing::parse_field_table(framed.as_slice()).ok()?;
            Some((text(&table, "LOGIN")?, text(&table, "PASSWORD")?))
        }
        _ => None,
    }
}

fn text(t: &FieldTable, key: &str) -> Option<String> {
    match t.inner().get(key)? {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain() {
        assert_eq!(
            parse_response("PLAIN", b"\0guest\0guest"),
            Some(("guest".into(), "guest".into()))
        );
        assert_eq!(parse_response("PLAIN", b"guest"), None);
        assert_eq!(parse_response("EXTERNAL", b""), None);
        let mut t = FieldTable::default();
        t.insert("LOGIN".into(), AMQPValue::LongString("u".into()));
        t.insert("PASSWORD".into(), AMQPValue::LongString("p".into()));
        let buf = cookie_factory::gen_simple(
            amq_protocol::types::generation::gen_field_table(&t),
            Vec::new(),
        )
        .expect("gen");
        assert_eq!(
            parse_response("AMQPLAIN", &buf[4..]),
            Some(("u".into(), "p".into()))
        );
    }

    #[test]
    fn rabbitmq_hashes_are_accepted() {
        // RabbitMQ's documented example: password "test12" with salt 908D C60A.
        let u = User::with_hash("u", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR", &[])
            .expect("hash");
        assert!(u.password_matches("test12"));
        assert!(!u.password_matches("test13"));
        assert!(User::with_hash("u", "not base64!", &[]).is_none());
        let v = User::with_hash("v", &u.password_hash(), &[]).expect("round trip");
        assert!(v.password_matches("test12"));
    }

    #[test]
    fn loopback_users_only_from_loopback() {
        let list = vec!["guest".to_owned()];
        let remote: std::net::IpAddr = "192.0.2.7".parse().expect("ip");
        let local: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
        let mapped: std::net::IpAddr = "::ffff:127.0.0.1".parse().expect("ip");
        assert!(!may_log_in_from(&list, "guest", remote));
        assert!(may_log_in_from(&list, "guest", local));
        assert!(may_log_in_from(&list, "guest", mapped));
        assert!(may_log_in_from(&list, "alice", remote));
        assert!(may_log_in_from(&[], "guest", remote));
    }

    #[test]
    fn password_compare() {
        let u = User::new("a", "secret", &[]);
        assert!(u.password_matches("secret"));
        assert!(!u.password_matches("secreT"));
        assert!(!u.password_matches("secret2"));
        assert!(!u.password_matches(""));
    }
}
