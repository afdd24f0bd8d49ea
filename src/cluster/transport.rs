//! Inter-node connections: the listener on `cluster_listen` and the client side, one request
//! and one response at a time per connection, after the secret handshake (inside TLS, both
//! ways verified, when the node has `cluster_tls`).
//!
//! A [`Peer`] keeps idle connections to one node and opens more when calls overlap (a
//! replication stream per busy group, a vote, forwarded writes), so no call waits behind
//! another and no lock is held across a network wait. A connection goes back to the pool
//! after its call: as many stay as calls overlapped lately (up to [`MOST_IDLE`]), those
//! beyond [`IDLE_PER_PEER`] until a call finds them unused for [`IDLE_LINGER`]. Busy groups
//! then reuse connections instead of opening one per append: a connect and handshake per
//! call, on a loaded node, outlasted the groups' RPC timeout and pings, and the groups
//! flapped.

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

/// Idle connections kept per peer however long they go unused.
const IDLE_PER_PEER: usize = 4;
/// Idle connections kept per peer at most.
const MOST_IDLE: usize = 512;
/// How long an idle connection beyond [`IDLE_PER_PEER`] is kept unused (it goes at the next
/// call after that).
const IDLE_LINGER: Duration = Duration::from_secs(30);

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
    /// Idle connections, the most recently used last, with when each was put back.
    idle: Mutex<Vec<(Conn, tokio::time::Instant)>>,
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
        let mut reused = self
            .idle
            .lock()
            .ok()
            .and_then(|mut idle| idle.pop())
            .map(|(conn, _)| conn);
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
        // Closed once the lock is released.
        let _stale: Vec<_> = match self.idle.lock() {
            Ok(mut idle) => {
                let now = tokio::time::Instant::now();
                // The least recently used come first: those beyond the few always kept go
                // once they have lingered unused.
                let stale = idle
                    .iter()
                    .take(idle.len().saturating_sub(IDLE_PER_PEER))
                    .take_while(|(_, at)| now.duration_since(*at) >= IDLE_LINGER)
                    .count();
                let stale = idle.drain(..stale).collect();
                if idle.len() < MOST_IDLE {
                    idle.push((conn, now));
                }
                stale
            }
            Err(_) => Vec::new(),
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers pings after a while.
    struct Slow;

    impl Handler for Slow {
        async fn handle(&self, _from: NodeId, _req: Request) -> Response {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Response::Pong("b".into())
        }
    }

    async fn overlapping(peer: &Arc<Peer>, n: usize) {
        let mut calls = JoinSet::new();
        for _ in 0..n {
            let peer = peer.clone();
            calls.spawn(async move { peer.call(&Request::Ping, Duration::from_secs(5)).await });
        }
        while let Some(r) = calls.join_next().await {
            assert!(matches!(r.expect("joined"), Ok(Response::Pong(_))));
        }
    }

    fn idle(peer: &Peer) -> usize {
        peer.idle.lock().expect("lock").len()
    }

    #[tokio::test]
    async fn overlapping_calls_leave_their_connections_for_the_next_ones() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let secret: Arc<[u8]> = Arc::from(&b"cookie"[..]);
        let (stop, stopped) = watch::channel(false);
        let handler = Arc::new(Slow);
        tokio::spawn(serve(listener, secret.clone(), None, handler, stopped));
        let peer = Arc::new(Peer::new(addr, secret, 7, None, None));

        overlapping(&peer, 16).await;
        assert_eq!(
            idle(&peer),
            16,
            "every connection of 16 overlapping calls is kept"
        );
        overlapping(&peer, 16).await;
        assert_eq!(idle(&peer), 16, "16 more overlapping calls open none");

        // Unused for longer than the linger: the next call drops those beyond the few
        // always kept (the one it took goes back).
        if let Ok(mut idle) = peer.idle.lock() {
            for (_, at) in idle.iter_mut() {
                *at -= IDLE_LINGER;
            }
        }
        overlapping(&peer, 1).await;
        assert_eq!(idle(&peer), IDLE_PER_PEER + 1);
        let _ = stop.send(true);
    }
}
