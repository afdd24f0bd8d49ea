//! Users: RabbitMQ's password hashes, tags, and who may log in from where. The SASL responses
//! that carry the credentials are parsed by the AMQP front end (`amqp/sasl.rs`).

/// RabbitMQ's password hashing modules. Every one stores base64 of a 4-byte random salt
/// followed by HASH(salt ++ password), so hashes exported from RabbitMQ work unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hashing {
    /// `rabbit_password_hashing_sha256`, RabbitMQ's default and Warren's.
    #[default]
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
    /// `rabbit_password_hashing_md5` (legacy).
    Md5,
}

impl Hashing {
    /// The module name RabbitMQ uses in definitions (`hashing_algorithm`).
    pub fn name(self) -> &'static str {
        match self {
            Hashing::Sha256 => "rabbit_password_hashing_sha256",
            Hashing::Sha512 => "rabbit_password_hashing_sha512",
            Hashing::Md5 => "rabbit_password_hashing_md5",
        }
    }

    /// Parses a module name.
    pub fn from_name(name: &str) -> Option<Hashing> {
        [Hashing::Sha256, Hashing::Sha512, Hashing::Md5]
            .into_iter()
            .find(|h| h.name() == name)
    }

    fn digest_len(self) -> usize {
        match self {
            Hashing::Sha256 => 32,
            Hashing::Sha512 => 64,
            Hashing::Md5 => 16,
        }
    }

    /// Salt followed by HASH(salt ++ password).
    fn salted_digest(self, salt: &[u8], password: &str) -> Vec<u8> {
        use sha2::Digest;
        let mut out = salt.to_vec();
        match self {
            Hashing::Sha256 => out.extend(
                sha2::Sha256::new_with_prefix(salt)
                    .chain_update(password)
                    .finalize(),
            ),
            Hashing::Sha512 => out.extend(
                sha2::Sha512::new_with_prefix(salt)
                    .chain_update(password)
                    .finalize(),
            ),
            Hashing::Md5 => out.extend(
                md5::Md5::new_with_prefix(salt)
                    .chain_update(password)
                    .finalize(),
            ),
        }
        out
    }
}

/// A broker user. The password is kept only as a salted hash (see [`Hashing`]); a user with
/// no hash cannot log in with a password (only with EXTERNAL), as in RabbitMQ.
#[derive(Clone, Debug)]
pub struct User {
    /// Name.
    pub name: String,
    /// Salt (4 bytes) followed by the digest; empty for a passwordless user.
    password_hash: Vec<u8>,
    /// How the hash was made.
    pub hashing: Hashing,
    /// Tags (administrator, monitoring...).
    pub tags: Vec<String>,
}

/// Hashes a password with a fresh salt, as RabbitMQ does; returns the base64 form.
pub fn hash_password(password: &str) -> String {
    use base64::Engine;
    let salt: [u8; 4] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(Hashing::Sha256.salted_digest(&salt, password))
}

impl User {
    /// A user with a password (hashed here; the plain text is not kept).
    pub fn new(name: &str, password: &str, tags: &[&str]) -> Self {
        Self::with_hash(name, &hash_password(password), tags).unwrap_or_else(|| User {
            name: name.to_owned(),
            password_hash: Vec::new(),
            hashing: Hashing::Sha256,
            tags: Vec::new(),
        })
    }

    /// A user from a base64 `rabbit_password_hashing_sha256` hash; None when it is not one.
    pub fn with_hash(name: &str, hash_b64: &str, tags: &[&str]) -> Option<Self> {
        Self::with_hashing(name, hash_b64, Hashing::Sha256, tags)
    }

    /// A user from a base64 hash made with `hashing`; an empty hash makes a passwordless user.
    /// None when the hash is not base64 or has the wrong length.
    pub fn with_hashing(
        name: &str,
        hash_b64: &str,
        hashing: Hashing,
        tags: &[&str],
    ) -> Option<Self> {
        use base64::Engine;
        let password_hash = base64::engine::general_purpose::STANDARD
            .decode(hash_b64)
            .ok()?;
        if !password_hash.is_empty() && password_hash.len() != 4 + hashing.digest_len() {
            return None;
        }
        Some(User {
            name: name.to_owned(),
            password_hash,
            hashing,
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
        if self.password_hash.len() != 4 + self.hashing.digest_len() {
            return false;
        }
        let candidate = self.hashing.salted_digest(&self.password_hash[..4], given);
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sha512_and_md5_hashes_are_accepted() {
        // Salt 908D C60A, password "test12"; digests computed with Python's hashlib.
        for (hashing, hash) in [
            (Hashing::Sha512, "kI3GChuNuIYf8lRbCCxZjgjKwsY19ns6+uFO0zcXRBGA/XGJPYD8OWMy7EB8TaOmAzjP2azv84GbINYwX2cDWb4DHnc="),
            (Hashing::Md5, "kI3GChNpte2FApYFXScl+0dIluk="),
        ] {
            let u = User::with_hashing("u", hash, hashing, &[]).expect("hash");
            assert!(u.password_matches("test12"), "{}", hashing.name());
            assert!(!u.password_matches("test13"));
            assert_eq!(Hashing::from_name(hashing.name()), Some(hashing));
            // A hash of another algorithm's length is refused.
            assert!(User::with_hashing("u", hash, Hashing::Sha256, &[]).is_none());
        }
        let nobody = User::with_hashing("ext", "", Hashing::Sha256, &[]).expect("no password");
        assert!(!nobody.password_matches(""));
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
