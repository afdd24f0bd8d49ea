//! The inter-node handshake: both sides prove they hold the cluster secret (the role of
//! RabbitMQ's Erlang cookie) without sending it. Each side sends a fresh nonce; each answers
//! with an HMAC-SHA256 of both nonces under the secret, labelled by its role so neither answer
//! can be replayed as the other. A peer without the secret is refused before any Raft message.
//!
//! ```text
//! client -> server: MAGIC, client nonce (32), client node id (u64 BE)
//! server -> client: server nonce (32), HMAC("server" | client nonce | server nonce)
//! client -> server: HMAC("client" | server nonce | client nonce | client node id)
//! ```

use super::types::NodeId;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What an inter-node connection starts with.
pub const MAGIC: &[u8; 16] = b"WARREN-CLUSTER/1";

const NONCE: usize = 32;
const MAC: usize = 32;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The peer does not speak the inter-node protocol.
    #[error("not a Warren cluster peer")]
    NotAPeer,
    /// The peer's proof did not match: it holds a different cluster secret.
    #[error("the peer's cluster secret does not match ours")]
    WrongSecret,
    /// The connection failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The keyed MAC. Its key is the secret's SHA-256 zero-padded to the hash's block size, which
/// is what HMAC does with any key itself; a block-sized key makes construction infallible.
fn mac(secret: &[u8], label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut key = [0u8; 64];
    key[..32].copy_from_slice(&Sha256::digest(secret));
    let mut m = <Hmac<Sha256> as KeyInit>::new(&key.into());
    m.update(label);
    for p in parts {
        m.update(p);
    }
    m
}

fn nonce() -> [u8; NONCE] {
    rand::random()
}

/// The connecting side: proves itself as node `me`; fails unless the server holds `secret`.
pub async fn client<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &[u8],
    me: NodeId,
) -> Result<(), HandshakeError> {
    let cn = nonce();
    let mut hello = Vec::with_capacity(MAGIC.len() + NONCE + 8);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&cn);
    hello.extend_from_slice(&me.to_be_bytes());
    s.write_all(&hello).await?;
    s.flush().await?;
    let mut answer = [0u8; NONCE + MAC];
    s.read_exact(&mut answer).await?;
    let (sn, server_mac) = answer.split_at(NONCE);
    mac(secret, b"server", &[&cn, sn])
        .verify_slice(server_mac)
        .map_err(|_| HandshakeError::WrongSecret)?;
    let proof = mac(secret, b"client", &[sn, &cn, &me.to_be_bytes()]).finalize();
    s.write_all(&proof.into_bytes()).await?;
    s.flush().await?;
    Ok(())
}

/// The accepting side: returns the peer's node id once it proved it holds `secret`.
pub async fn server<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &[u8],
) -> Result<NodeId, HandshakeError> {
    let mut hello = [0u8; 16 + NONCE + 8];
    s.read_exact(&mut hello[..16]).await?;
    if &hello[..16] != MAGIC {
        return Err(HandshakeError::NotAPeer);
    }
    s.read_exact(&mut hello[16..]).await?;
    let cn = &hello[16..16 + NONCE];
    let id_bytes = &hello[16 + NONCE..];
    let sn = nonce();
    let proof = mac(secret, b"server", &[cn, &sn]).finalize();
    let mut answer = Vec::with_capacity(NONCE + MAC);
    answer.extend_from_slice(&sn);
    answer.extend_from_slice(&proof.into_bytes());
    s.write_all(&answer).await?;
    s.flush().await?;
    let mut client_mac = [0u8; MAC];
    s.read_exact(&mut client_mac).await?;
    mac(secret, b"client", &[&sn, cn, id_bytes])
        .verify_slice(&client_mac)
        .map_err(|_| HandshakeError::WrongSecret)?;
    let mut id = [0u8; 8];
    id.copy_from_slice(id_bytes);
    Ok(NodeId::from_be_bytes(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(
        client_secret: &'static [u8],
        server_secret: &'static [u8],
    ) -> (Result<(), HandshakeError>, Result<NodeId, HandshakeError>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let c = tokio::spawn(async move { client(&mut a, client_secret, 7).await });
        let s = server(&mut b, server_secret).await;
        drop(b);
        (c.await.expect("joined"), s)
    }

    #[tokio::test]
    async fn peers_with_the_same_secret_agree_on_who_connected() {
        let (c, s) = pair(b"cookie", b"cookie").await;
        assert!(c.is_ok(), "{c:?}");
        assert_eq!(s.expect("accepted"), 7);
    }

    #[tokio::test]
    async fn a_different_secret_is_refused_on_both_sides() {
        let (c, s) = pair(b"cookie", b"other").await;
        assert!(matches!(c, Err(HandshakeError::WrongSecret)), "{c:?}");
        // The client stopped before proving itself: the server sees the connection end.
        assert!(s.is_err(), "{s:?}");
    }

    #[tokio::test]
    async fn a_stranger_is_not_a_peer() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(b"AMQP\x00\x00\x09\x01 and some more bytes here....................")
            .await
            .expect("write");
        assert!(matches!(
            server(&mut b, b"cookie").await,
            Err(HandshakeError::NotAPeer)
        ));
    }
}
