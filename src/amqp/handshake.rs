//! The opening of a connection: protocol header, start/start-ok (SASL), tune/tune-ok and
//! connection.open, done in order on the raw socket before the connection's tasks start.

use crate::amqp::codec::{self, Frame};
use crate::amqp::error::AmqpError;
use crate::auth;
use crate::broker::Broker;
use crate::connections::{NewConnection, Protocol, Registration};
use crate::error::code;
use crate::vhost::VHost;
use amq_protocol::protocol::{connection, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// What the listener knows about a client's transport.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// Remote address.
    pub addr: std::net::SocketAddr,
    /// The broker's end of the connection.
    pub local: std::net::SocketAddr,
    /// What TLS negotiated, when the connection came over TLS.
    pub tls: Option<std::sync::Arc<crate::connections::TlsInfo>>,
    /// The user a verified TLS client certificate names (for EXTERNAL).
    pub cert_user: Option<String>,
}

/// What the handshake settled.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The connection's place in the broker's registry (its id).
    pub registration: Registration,
    pub user: String,
    /// The node's own connection (a shovel's `amqp://`): every permission, no user-id check.
    pub internal: bool,
    pub vhost: Arc<VHost>,
    pub frame_max: u32,
    pub channel_max: u16,
    pub heartbeat: u16,
    pub cancel_notify: bool,
    /// The client takes connection.blocked / unblocked.
    pub blocked_notify: bool,
}

/// Why the handshake ended without an open connection.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The socket closed, timed out or sent garbage; nothing more to say.
    Dropped,
    /// Send connection.close with this error, then close.
    Close(AmqpError),
}

const AMQP_0_9_1: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

fn server_properties(broker: &Broker) -> FieldTable {
    let mut caps = FieldTable::default();
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        caps.insert(cap.into(), AMQPValue::Boolean(true));
    }
    let mut p = FieldTable::default();
    let s = |v: &str| AMQPValue::LongString(LongString::from(v.as_bytes().to_vec()));
    p.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    p.insert("cluster_name".into(), s(&broker.cluster_name()));
    p.insert("copyright".into(), s("Copyright (c) the Warren authors"));
    p.insert(
        "information".into(),
        s("Licensed under the Apache License 2.0"),
    );
    p.insert(
        "platform".into(),
        s(&format!(
            "Rust / tokio ({} {})",
            std::env::consts::OS,
            std::env::consts::ARCH
        )),
    );
    p.insert("product".into(), s("Warren"));
    p.insert("version".into(), s(env!("CARGO_PKG_VERSION")));
    p
}

async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    frame_max: u32,
) -> Result<Frame, Refused> {
    loop {
        match codec::decode(buf, frame_max) {
            Ok(Some(Frame::Heartbeat(_))) => continue,
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(Refused::Close(e)),
        }
        match rd.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(Refused::Dropped),
            Ok(_) => {}
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(wr: &mut W, method: AMQPClass) -> Result<(), Refused> {
    let mut out = BytesMut::new();
    codec::encode_method(&mut out, 0, &method);
    wr.write_all(&out).await.map_err(|_| Refused::Dropped)
}

fn expect_connection(f: Frame) -> Result<connection::AMQPMethod, Refused> {
    match f {
        Frame::Method(0, m) => match *m {
            AMQPClass::Connection(c) => Ok(c),
            _ => Err(Refused::Close(AmqpError::command_invalid(
                "expected a connection method",
            ))),
        },
        _ => Err(Refused::Close(AmqpError::unexpected_frame(
            "expected a method frame on channel 0",
        ))),
    }
}

fn client_name(props: &FieldTable) -> Option<String> {
    match props.inner().get("connection_name")? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.to_string()),
        _ => None,
    }
}

fn capability(props: &FieldTable, name: &str) -> bool {
    match props.inner().get("capabilities") {
        Some(AMQPValue::FieldTable(t)) => {
            matches!(t.inner().get(name), Some(AMQPValue::Boolean(true)))
        }
        _ => false,
    }
}

/// Reads the protocol header and returns the (major, minor) version to announce in
/// connection.start; answers an unsupported one with `AMQP 0 0 9 1` and None, as RabbitMQ does.
/// Like RabbitMQ, the 0-9 header is taken as 0-9-1 and the two 0-8 headers are accepted
/// (RabbitMQ announces 8-0 for them); Warren then speaks 0-9-1 framing, which 0-8 clients
/// share for everything but a few deprecated fields.
pub(crate) async fn protocol_header<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    rd: &mut R,
    wr: &mut W,
) -> Option<(u8, u8)> {
    let mut header = [0u8; 8];
    rd.read_exact(&mut header).await.ok()?;
    match &header {
        AMQP_0_9_1 | b"AMQP\x01\x01\x00\x09" => return Some((0, 9)),
        b"AMQP\x01\x01\x08\x00" | b"AMQP\x01\x01\x09\x01" => return Some((8, 0)),
        _ => {}
    }
    let _ = wr.write_all(AMQP_0_9_1).await;
    let _ = wr.shutdown().await;
    None
}

/// Runs start, tune and open.
pub(crate) async fn negotiate<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    broker: &Broker,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    (version_major, version_minor): (u8, u8),
    peer: &Peer,
) -> Result<Opened, Refused> {
    let cfg = &broker.config;
    let offered: Vec<&str> = cfg
        .auth_mechanisms
        .iter()
        .map(String::as_str)
        .filter(|m| *m != "EXTERNAL" || peer.cert_user.is_some())
        .collect();
    send(
        wr,
        AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_major,
            version_minor,
            server_properties: server_properties(broker),
            mechanisms: offered.join(" ").into(),
            locales: "en_US".into(),
        })),
    )
    .await?;
    let start_ok = match expect_connection(read_frame(rd, buf, cfg.frame_max).await?)? {
        connection::AMQPMethod::StartOk(s) => s,
        _ => {
            return Err(Refused::Close(AmqpError::command_invalid(
                "expected 'connection.start_ok'",
            )))
        }
    };
    let mechanism = start_ok.mechanism.as_str().to_owned();
    let failure_close = capability(&start_ok.client_properties, "authentication_failure_close");
    let cancel_notify = capability(&start_ok.client_properties, "consumer_cancel_notify");
    let blocked_notify = capability(&start_ok.client_properties, "connection.blocked");
    let refused = |detail: String| {
        if failure_close {
            Refused::Close(AmqpError::access_refused(detail).on_connection())
        } else {
            Refused::Dropped
        }
    };
    if !offered.contains(&mechanism.as_str()) {
        return Err(refused(format!(
            "unsupported authentication mechanism '{mechanism}'"
        )));
    }
    let response = start_ok.response.as_bytes();
    let mut login = check_login(broker, &mechanism, response, peer);
    // A user made (or a password changed) on another node a moment ago: confirm the refusal
    // against the cluster's committed state first.
    if login.is_err() && broker.catch_up().await {
        login = check_login(broker, &mechanism, response, peer);
    }
    let (user, internal) = match login {
        Ok(user) => user,
        Err(who) => {
            tracing::warn!(user = %who, peer = %peer.addr, "login refused (mechanism {mechanism})");
            failed_login_delay(cfg.failed_login_delay).await;
            return Err(refused(format!(
                "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
            )));
        }
    };
    if !auth::may_log_in_from(&cfg.loopback_users, &user, peer.addr.ip()) {
        tracing::warn!(user = %user, peer = %peer.addr, "login refused: user can only log in via localhost");
        failed_login_delay(cfg.failed_login_delay).await;
        return Err(refused("User can only log in via localhost".into()));
    }
    send(
        wr,
        AMQPClass::Connection(connection::AMQPMethod::Tune(connection::Tune {
            channel_max: cfg.channel_max,
            frame_max: cfg.frame_max,
            heartbeat: cfg.heartbeat,
        })),
    )
    .await?;
    let tune_ok = match expect_connection(read_frame(rd, buf, cfg.frame_max).await?)? {
        connection::AMQPMethod::TuneOk(t) => t,
        _ => {
            return Err(Refused::Close(AmqpError::command_invalid(
                "expected 'connection.tune_ok'",
            )))
        }
    };
    let frame_max = match tune_ok.frame_max {
        0 => cfg.frame_max,
        f if f < 4096 => {
            return Err(Refused::Close(AmqpError::not_allowed(format!(
                "frame_max={f} < 4096 min size"
            ))))
        }
        f if f > cfg.frame_max => {
            return Err(Refused::Close(AmqpError::not_allowed(format!(
                "frame_max={f} > {} max size",
                cfg.frame_max
            ))))
        }
        f => f,
    };
    let channel_max = match tune_ok.channel_max {
        0 => cfg.channel_max,
        c => c.min(cfg.channel_max),
    };
    let open = match expect_connection(read_frame(rd, buf, frame_max).await?)? {
        connection::AMQPMethod::Open(o) => o,
        _ => {
            return Err(Refused::Close(AmqpError::command_invalid(
                "expected 'connection.open'",
            )))
        }
    };
    let vhost_name = open.virtual_host.as_str();
    let Some(vhost) = broker.find_vhost(vhost_name).await else {
        return Err(Refused::Close(
            AmqpError::new(code::NOT_ALLOWED, format!("vhost {vhost_name} not found"))
                .with_method(10, 40),
        ));
    };
    if !internal
        && broker.permissions.get(vhost_name, &user).is_none()
        && !(broker.catch_up().await && broker.permissions.get(vhost_name, &user).is_some())
    {
        tracing::warn!(user = %user, vhost = vhost_name, peer = %peer.addr, "access to vhost refused");
        return Err(Refused::Close(
            AmqpError::not_allowed(format!(
                "access to vhost '{vhost_name}' refused for user '{user}'"
            ))
            .with_method(10, 40),
        ));
    }
    let limit = vhost
        .limits
        .max_connections
        .load(std::sync::atomic::Ordering::Relaxed);
    if limit >= 0 {
        let open = broker.connections.in_vhost(&vhost.name);
        if open as i64 >= limit {
            return Err(Refused::Close(
                AmqpError::not_allowed(format!(
                    "access to vhost '{vhost_name}' refused for user '{user}': connection limit ({limit}) is reached"
                ))
                .with_method(10, 40),
            ));
        }
    }
    if let Some(limit) = broker.user_limit(&user, "max-connections") {
        let open = broker.connections.of_user(&user);
        if open as i64 >= limit {
            return Err(Refused::Close(
                AmqpError::not_allowed(format!(
                    "Connection refused for user '{user}': user connection limit ({limit}) is reached"
                ))
                .with_method(10, 40),
            ));
        }
    }
    let info = NewConnection {
        id: broker.next_id(),
        protocol: Protocol::Amqp091,
        user: user.clone(),
        vhost: vhost.name.clone(),
        peer: peer.addr,
        local: peer.local,
        tls: peer.tls.clone(),
        client_name: client_name(&start_ok.client_properties),
        client_properties: start_ok.client_properties,
        mechanism: mechanism.clone(),
        heartbeat: tune_ok.heartbeat,
        frame_max,
        channel_max,
    };
    let Some(registration) = broker.connections.admit(info, cfg.max_connections) else {
        tracing::warn!(peer = %peer.addr, limit = cfg.max_connections, "node connection limit reached");
        return Err(Refused::Close(
            AmqpError::not_allowed(format!(
                "connection refused: node connection limit ({}) is reached",
                cfg.max_connections
            ))
            .with_method(10, 40),
        ));
    };
    send(
        wr,
        AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {})),
    )
    .await?;
    tracing::info!(
        "connection {} -> {}: user '{user}' authenticated and granted access to vhost '{vhost_name}'",
        peer.addr,
        peer.local
    );
    Ok(Opened {
        registration,
        user,
        internal,
        vhost,
        frame_max,
        channel_max,
        heartbeat: tune_ok.heartbeat,
        cancel_notify,
        blocked_notify,
    })
}

/// Equal bytes, compared in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The user a SASL response logs in as (and whether it is the node's own connection, which
/// must come from this machine), or Err with the name it tried (for the log).
fn check_login(
    broker: &Broker,
    mechanism: &str,
    response: &[u8],
    peer: &Peer,
) -> Result<(String, bool), String> {
    match mechanism {
        // The password is not checked: the verified certificate is the credential.
        "EXTERNAL" => match &peer.cert_user {
            Some(name) if broker.user(name).is_some() => Ok((name.clone(), false)),
            other => Err(other.clone().unwrap_or_default()),
        },
        _ => match super::sasl::parse_response(mechanism, response) {
            Some((name, pass))
                if name == crate::broker::INTERNAL_USER
                    && (peer.addr.ip().is_loopback() || peer.addr.ip() == peer.local.ip())
                    && same_secret(pass.as_bytes(), broker.internal_secret.as_bytes()) =>
            {
                Ok((name, true))
            }
            Some((name, pass))
                if broker
                    .user(&name)
                    .is_some_and(|u| u.password_matches(&pass)) =>
            {
                Ok((name, false))
            }
            other => Err(other.map(|(n, _)| n).unwrap_or_default()),
        },
    }
}

/// RabbitMQ answers a failed login at once; an operator may ask for a pause against guessing.
async fn failed_login_delay(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Sends connection.close for a refused handshake and closes the socket.
pub(crate) async fn refuse<W: AsyncWrite + Unpin>(wr: &mut W, e: AmqpError) {
    let _ = send(
        wr,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: e.code,
            reply_text: crate::shortstr::short(&e.text),
            class_id: e.class_id,
            method_id: e.method_id,
        })),
    )
    .await;
    let _ = wr.shutdown().await;
}
