//! A shovel's `http://` or `https://` destination (LavinMQ's addition): each message is
//! POSTed to the URI, one at a time over a kept-alive HTTP/1.1 connection, with its body as
//! is, `Content-Type` from its `content_type`, `X-Message-Id` from its `message_id`, each of
//! its headers as `X-<name>`, `X-Shovel` naming the shovel, and basic authentication from
//! the URI's user and password. What the answer means (with `ack-mode: on-confirm`):
//! 2xx acks the message at the source; 400 and 422 reject it (dead-lettered or dropped
//! there); anything else, or no answer, ends the run: the source requeues what was not
//! settled and the shovel tries again after its `reconnect-delay`. With `on-publish` any
//! answer acks; with `no-ack` nothing is settled. A paused, restarted or deleted shovel
//! waits for the answer to the POST under way and settles it before its run ends.

use crate::amqp::codec;
use crate::client::consume::{drain, due, fill, silent, Assembler, Incoming};
use crate::client::relay::{AckMode, Counters, Ended, WIND_DOWN};
use crate::client::uri::percent_decode;
use crate::client::Client;
use amq_protocol::protocol::basic::{parse_properties, AMQPProperties};
use amq_protocol::types::AMQPValue;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a connection or an answer may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A webhook destination, parsed from its URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    https: bool,
    host: String,
    port: u16,
    /// Path and query ("/" when the URI has none).
    path: String,
    /// `Basic ...` from the URI's user and password.
    authorization: Option<String>,
    /// The URI without credentials.
    pub shown: String,
}

impl Webhook {
    /// Whether a URI names a webhook (`http://` or `https://`).
    pub fn is_webhook(uri: &str) -> bool {
        uri.starts_with("http://") || uri.starts_with("https://")
    }

    /// Parses `http[s]://[user[:password]@]host[:port][/path][?query]`.
    pub fn parse(uri: &str) -> Result<Webhook, String> {
        let bad = || format!("\"{uri}\" not a valid http(s) URI");
        let (https, rest) = match uri.split_once("://") {
            Some(("http", r)) => (false, r),
            Some(("https", r)) => (true, r),
            _ => return Err(bad()),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            (h, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        let port = match port {
            Some(p) => p.parse::<u16>().map_err(|_| bad())?,
            None if https => 443,
            None => 80,
        };
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        let authorization = match userinfo {
            Some(u) => {
                let (user, pass) = u.split_once(':').unwrap_or((u, ""));
                let user = percent_decode(user).ok_or_else(bad)?;
                let pass = percent_decode(pass).ok_or_else(bad)?;
                let pair = format!("{user}:{pass}");
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                Some(format!("Basic {encoded}"))
            }
            None => None,
        };
        let scheme = if https { "https" } else { "http" };
        let shown_host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        Ok(Webhook {
            https,
            host: host.to_owned(),
            port,
            path: path.clone(),
            authorization,
            shown: format!("{scheme}://{shown_host}:{port}{path}"),
        })
    }

    /// The request for one message of shovel `shovel`.
    fn request(&self, shovel: &str, m: &Incoming) -> Result<hyper::Request<Full<Bytes>>, String> {
        let props = parse_properties(&m.props[..])
            .map(|(_, p)| p)
            .unwrap_or_else(|_| AMQPProperties::default());
        let mut r = hyper::Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.host.as_str())
            .header(hyper::header::USER_AGENT, "Warren")
            .header("X-Shovel", shovel);
        if let Some(auth) = &self.authorization {
            r = r.header(hyper::header::AUTHORIZATION, auth.as_str());
        }
        if let Some(ct) = props.content_type() {
            r = r.header(hyper::header::CONTENT_TYPE, ct.as_str());
        }
        if let Some(id) = props.message_id() {
            r = r.header("X-Message-Id", id.as_str());
        }
        if let Some(h) = props.headers() {
            for (k, v) in h.inner() {
                let name = format!("X-{k}");
                // Header names and values that HTTP cannot carry are left out.
                let ok = hyper::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
                    && hyper::header::HeaderValue::from_str(&header_text(v)).is_ok();
                if ok {
                    r = r.header(name, header_text(v));
                }
            }
        }
        r.body(Full::new(Bytes::copy_from_slice(&m.body)))
            .map_err(|e| format!("building the request: {e}"))
    }

    /// A new HTTP/1.1 connection (its driver on a task of its own).
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let fail = |e: std::io::Error| format!("{}: {e}", self.shown);
        let sock =
            tokio::time::timeout(TIMEOUT, TcpStream::connect((self.host.as_str(), self.port)))
                .await
                .map_err(|_| format!("{}: no connection within {TIMEOUT:?}", self.shown))?
                .map_err(fail)?;
        let _ = sock.set_nodelay(true);
        if self.https {
            let tls = crate::client::tls::connect_host(&self.host, sock)
                .await
                .map_err(fail)?;
            handshake(tls).await
        } else {
            handshake(sock).await
        }
    }
}

async fn handshake<S>(io: S) -> Result<SendRequest<Full<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "webhook connection ended");
        }
    });
    Ok(sender)
}

/// A header value as text (strings as they are, numbers in decimal).
fn header_text(v: &AMQPValue) -> String {
    if let Some(s) = crate::args::text(v) {
        return s;
    }
    match v {
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        AMQPValue::Timestamp(n) => n.to_string(),
        AMQPValue::Float(n) => n.to_string(),
        AMQPValue::Double(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// What the answer to a POST means.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ack,
    Reject,
    /// The run ends with this reason.
    Fail(String),
}

fn outcome(ack_mode: AckMode, status: u16, shown: &str) -> Outcome {
    match (ack_mode, status) {
        (AckMode::OnConfirm, 200..=299) | (AckMode::OnPublish | AckMode::NoAck, _) => Outcome::Ack,
        (AckMode::OnConfirm, 400 | 422) => Outcome::Reject,
        (AckMode::OnConfirm, s) => Outcome::Fail(format!("{shown} answered {s}")),
    }
}

type Posting =
    Pin<Box<dyn Future<Output = (Result<u16, String>, Option<SendRequest<Full<Bytes>>>)> + Send>>;

/// POSTs one request and reads the whole answer; gives the connection back when it can
/// take another.
fn post(mut sender: SendRequest<Full<Bytes>>, req: hyper::Request<Full<Bytes>>) -> Posting {
    Box::pin(async move {
        let sent = async {
            sender.ready().await.map_err(|e| e.to_string())?;
            let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            resp.into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            Ok::<u16, String>(status)
        };
        match tokio::time::timeout(TIMEOUT, sent).await {
            Ok(Ok(status)) => (Ok(status), Some(sender)),
            Ok(Err(e)) => (Err(e), None),
            Err(_) => (Err(format!("no answer within {TIMEOUT:?}")), None),
        }
    })
}

/// Moves messages from channel 1 of `src` to the webhook until the run is stopped, has
/// settled `remaining` messages (None: no limit), or fails (Err with the reason).
pub async fn run(
    src: &mut Client,
    hook: &Webhook,
    shovel: &str,
    ack_mode: AckMode,
    mut remaining: Option<u64>,
    counters: &Counters,
    stop: &mut watch::Receiver<bool>,
) -> Result<Ended, String> {
    let mut assembler = Assembler::default();
    let mut waiting: VecDeque<Incoming> = VecDeque::new();
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    let mut posting: Option<(u64, Posting)> = None;
    let mut out = BytesMut::new();
    let (mut read, mut wrote) = (Instant::now(), Instant::now());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        if remaining == Some(0) {
            return Ok(Ended::Completed);
        }
        if posting.is_none() {
            if let Some(m) = waiting.pop_front() {
                let req = hook.request(shovel, &m)?;
                let s = match sender.take() {
                    Some(s) => s,
                    None => tokio::select! {
                        s = hook.connect() => s?,
                        _ = stop.changed() => return Ok(Ended::Stopped),
                    },
                };
                counters.forwarded.fetch_add(1, Ordering::Relaxed);
                counters.pending.store(1, Ordering::Relaxed);
                posting = Some((m.tag, post(s, req)));
            }
        }
        if due(src.heartbeat, wrote) {
            codec::encode_heartbeat(&mut out);
        }
        if !out.is_empty() {
            src.wr
                .write_all(&out)
                .await
                .map_err(|e| format!("source: {e}"))?;
            out.clear();
            wrote = Instant::now();
        }
        if silent(src.heartbeat, read) {
            return Err("source: missed heartbeats".into());
        }
        let in_flight = async {
            match &mut posting {
                Some((_, p)) => p.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = fill(src) => {
                r.map_err(|e| format!("source: {e}"))?;
                read = Instant::now();
                drain(src, "source", |f| {
                    if let Some(m) = assembler.feed(f)? {
                        waiting.push_back(m);
                    }
                    Ok(())
                })
                .await?;
            }
            (answer, back) = in_flight => {
                let tag = posting.take().map_or(0, |(t, _)| t);
                counters.pending.store(0, Ordering::Relaxed);
                sender = back;
                let status = answer.map_err(|e| format!("{}: {e}", hook.shown))?;
                settle(&mut out, ack_mode, tag, status, &hook.shown)?;
                if let Some(left) = &mut remaining {
                    *left = left.saturating_sub(1);
                }
            }
            _ = tick.tick() => {}
            _ = stop.changed() => {
                wind_down(src, posting.take(), ack_mode, &hook.shown).await;
                counters.pending.store(0, Ordering::Relaxed);
                return Ok(Ended::Stopped);
            }
        }
    }
}

/// Writes to `out` how the source settles delivery `tag` after the webhook answered
/// `status`; Err when the answer ends the run.
fn settle(
    out: &mut BytesMut,
    ack_mode: AckMode,
    tag: u64,
    status: u16,
    shown: &str,
) -> Result<(), String> {
    match outcome(ack_mode, status, shown) {
        Outcome::Fail(reason) => return Err(reason),
        Outcome::Ack if ack_mode != AckMode::NoAck => {
            codec::encode_confirm(out, 1, true, tag, false);
        }
        Outcome::Ack => {}
        Outcome::Reject => codec::encode_nack(out, 1, tag, false, false),
    }
    Ok(())
}

/// A stopped run's last step, as AMQP runs wind down: the POST under way gets its answer
/// (within [`WIND_DOWN`]) and is settled at the source, so a message the webhook took is
/// not requeued and posted again by the next run. What was received but not posted yet
/// goes back to the source queue when the run's connection closes.
async fn wind_down(
    src: &mut Client,
    posting: Option<(u64, Posting)>,
    ack_mode: AckMode,
    shown: &str,
) {
    let Some((tag, post)) = posting else {
        return;
    };
    let deadline = Instant::now() + WIND_DOWN;
    let Ok((Ok(status), _)) = tokio::time::timeout_at(deadline, post).await else {
        return;
    };
    let mut out = BytesMut::new();
    if settle(&mut out, ack_mode, tag, status, shown).is_ok() && !out.is_empty() {
        let _ = tokio::time::timeout_at(deadline, src.wr.write_all_buf(&mut out)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_with_credentials_ports_and_paths() {
        let w = Webhook::parse("https://bob:s%3Acret@hooks.example:8443/in?x=1").expect("ok");
        assert_eq!(
            (w.https, w.host.as_str(), w.port, w.path.as_str()),
            (true, "hooks.example", 8443, "/in?x=1")
        );
        assert_eq!(w.shown, "https://hooks.example:8443/in?x=1");
        let auth = w.authorization.expect("basic auth");
        let pair = base64::engine::general_purpose::STANDARD
            .decode(auth.trim_start_matches("Basic "))
            .expect("base64");
        assert_eq!(pair, b"bob:s:cret");
        let w = Webhook::parse("http://[::1]").expect("ok");
        assert_eq!((w.host.as_str(), w.port, w.path.as_str()), ("::1", 80, "/"));
        assert!(Webhook::parse("http://:80/").is_err());
        assert!(Webhook::parse("ftp://h/").is_err());
        assert!(Webhook::parse("http://h:99999/").is_err());
    }

    #[test]
    fn answers_settle_as_the_ack_mode_says() {
        assert_eq!(outcome(AckMode::OnConfirm, 204, "u"), Outcome::Ack);
        assert_eq!(outcome(AckMode::OnConfirm, 422, "u"), Outcome::Reject);
        assert_eq!(
            outcome(AckMode::OnConfirm, 503, "u"),
            Outcome::Fail("u answered 503".into())
        );
        assert_eq!(outcome(AckMode::OnPublish, 503, "u"), Outcome::Ack);
    }
}
