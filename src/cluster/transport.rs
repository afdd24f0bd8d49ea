//! Inter-node connections: the listener on `cluster_listen` and the client side, one request
//! and one response at a time per connection, after the secret handshake (inside TLS, both
//! ways verified, when the node has `cluster_tls`).
//!
//! A [`Peer`] keeps a few idle connections to one node and opens more when calls overlap (a
//! replication stream, a vote, forwarded writes), so no call waits behind another and no lock
//! is held across a network wait.

use super::codec;
use super::handshake::{self, HandshakeError};
use super::messages::{Request, Response};
use super::types::NodeId;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, BufStream};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// How long connecting plus the handshake may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 4;

/// An inter-node byte stream: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Conn = BufStream<Box<dyn Io>>;

/// The name a peer's certificate must carry: the host of its address (an IP address or a DNS
/// name, as in `cluster_nodes`).
fn server_name(addr: &str) -> Result<ServerName<'static>, HandshakeError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| HandshakeError::from(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))
}

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No connection could be made (the node is down, or refused us).
    #[error("cannot reach {addr}: {cause}")]
    Unreachable {
        /// The peer's address.
        addr: String,
        /// Why.
        cause: String,
    },
    /// The connection failed or timed out during the call.
    #[error("call to {addr} failed: {cause}")]
    Failed {
        /// The peer's address.
        addr: String,
        /// Why.
        cause: String,
    },
}

/// The client side of one peer.
pub struct Peer {
    addr: String,
    secret: Arc<[u8]>,
    me: NodeId,
    tls: Option<TlsConnector>,
    /// The local address connections leave from (None: the system's choice).
    bind: Option<IpAddr>,
    idle: Mutex<Vec<Conn>>,
    /// Request bytes sent to the peer and answer bytes received from it (frames' payloads).
    sent: std::sync::atomic::AtomicU64,
    received: std::sync::atomic::AtomicU64,
}

/// A TCP connection to `addr`, from `bind` when given.
async fn connect_from(addr: &str, bind: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let Some(ip) = bind else {
        return TcpStream::connect(addr).await;
    };
    let mut last = None;
    for target in tokio::net::lookup_host(addr).await? {
        let socket = match target {
            SocketAddr::V4(_) => TcpSocket::new_v4()?,
            SocketAddr::V6(_) => TcpSocket::new_v6()?,
        };
        if socket.bind(SocketAddr::new(ip, 0)).is_err() {
            // Another address family than the bind address: let the system choose.
            return TcpStream::connect(target).await;
        }
        match socket.connect(target).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{addr} resolves to nothing"))))
}

impl Peer {
    /// A peer at `addr`, proving ourselves as `me` with `secret` (over `tls` when given),
    /// reached from the local address `bind` when given.
    pub fn new(
        addr: String,
        secret: Arc<[u8]>,
        me: NodeId,
        tls: Option<TlsConnector>,
        bind: Option<IpAddr>,
    ) -> Peer {
        Peer {
            addr,
            secret,
            me,
            tls,
            bind,
            idle: Mutex::new(Vec::new()),
            sent: Default::default(),
            received: Default::default(),
        }
    }

    /// Bytes sent to the peer and received from it so far, by this node's calls.
    pub fn traffic(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.sent.load(Relaxed), self.received.load(Relaxed))
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn connect(&self) -> Result<Conn, CallError> {
        let unreachable = |cause: String| CallError::Unreachable {
            addr: self.addr.clone(),
            cause,
        };
        let attempt = async {
            let stream = connect_from(&self.addr, self.bind).await?;
            stream.set_nodelay(true)?;
            let io: Box<dyn Io> = match &self.tls {
                Some(tls) => Box::new(tls.connect(server_name(&self.addr)?, stream).await?),
                None => Box::new(stream),
            };
            let mut conn = BufStream::new(io);
            handshake::client(&mut conn, &self.secret, self.me).await?;
            Ok::<_, HandshakeError>(conn)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(unreachable(e.to_string())),
            Err(_) => Err(unreachable("timed out connecting".into())),
        }
    }

    /// Sends `req` and waits up to `timeout` for the answer.
    pub async fn call(&self, req: &Request, timeout: Duration) -> Result<Response, CallError> {
        let failed = |cause: String| CallError::Failed {
            addr: self.addr.clone(),
            cause,
        };
        let bytes = codec::encode(req).map_err(|e| failed(e.to_string()))?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut reused = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let (conn, answer) = loop {
            let fresh = reused.is_none();
            let mut conn = match reused.take() {
                Some(c) => c,
                None => self.connect().await?,
            };
            let exchange = async {
                codec::write_frame(&mut conn, &bytes).await?;
                codec::read_frame(&mut conn).await
            };
            match tokio::time::timeout_at(deadline, exchange).await {
                Ok(Ok(answer)) => break (conn, answer),
                // An idle connection the peer dropped (it restarted): the request never
                // reached a live peer, so it is sent again on a new connection.
                Ok(Err(_)) if !fresh => continue,
                Ok(Err(e)) => return Err(failed(e.to_string())),
                Err(_) => return Err(failed(format!("no answer within {timeout:?}"))),
            }
        };
        let response = codec::decode(&answer).map_err(|e| failed(e.to_string()))?;
        {
            use std::sync::atomic::Ordering::Relaxed;
            self.sent.fetch_add(bytes.len() as u64, Relaxed);
            self.received.fetch_add(answer.len() as u64, Relaxed);
        }
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < IDLE_PER_PEER {
                idle.push(conn);
            }
        }
        Ok(response)
    }
}

/// What answers requests on accepted connections.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request from node `from`.
    fn handle(&self, from: NodeId, req: Request) -> impl Future<Output = Response> + Send;
}

/// Accepts peers on `listener` until `stop` changes, answering with `handler`; a peer
/// that fails the handshake is logged and dropped.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    secret: Arc<[u8]>,
    tls: Option<TlsAcceptor>,
    handler: Arc<H>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let guard = (secret.clone(), tls.clone());
                    conns.spawn(connection(stream, addr, guard, handler.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an inter-node connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    // Dropping the set aborts every connection task.
}

async fn connection<H: Handler>(
    stream: TcpStream,
    addr: SocketAddr,
    (secret, tls): (Arc<[u8]>, Option<TlsAcceptor>),
    handler: Arc<H>,
) {
    let _ = stream.set_nodelay(true);
    let accept = async {
        let io: Box<dyn Io> = match tls {
            Some(tls) => Box::new(tls.accept(stream).await?),
            None => Box::new(stream),
        };
        let mut conn = BufStream::new(io);
        let from = handshake::server(&mut conn, &secret).await?;
        Ok::<_, HandshakeError>((conn, from))
    };
    let (mut conn, from) = match tokio::time::timeout(CONNECT_TIMEOUT, accept).await {
        Ok(Ok(accepted)) => accepted,
        Ok(Err(e)) => {
            tracing::warn!(peer = %addr, error = %e, "inter-node connection refused");
            return;
        }
        Err(_) => {
            tracing::warn!(peer = %addr, "inter-node connection refused: handshake timed out");
            return;
        }
    };
    loop {
        let Ok(bytes) = codec::read_frame(&mut conn).await else {
            return;
        };
        let req: Request = match codec::decode(&bytes) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(peer = %addr, error = %e, "undecodable inter-node request; closing");
                return;
            }
        };
        let response = handler.handle(from, req).await;
        let Ok(out) = codec::encode(&response) else {
            return;
        };
        if codec::write_frame(&mut conn, &out).await.is_err() {
            return;
        }
    }
}
