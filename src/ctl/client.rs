//! HTTP/1.1 over the node's local CLI socket: one request per connection, answered with its
//! status and body (chunked bodies reassembled); or, for `-n` naming another node, the same
//! request carried to that node over the inter-node transport
//! ([`crate::replication::cli::call_member`]). Blocking, as a command-line tool is.

use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// The node's answer to one request.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The body as text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (null when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// Whether the status is a success.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Where a client's requests go.
#[derive(Clone, Debug)]
pub enum Route {
    /// The local node's CLI socket, at this path.
    Socket(PathBuf),
    /// The node named `node`, reached with this configuration's cluster secret.
    Member {
        /// The configuration (secret, seed list, inter-node TLS).
        config: std::sync::Arc<crate::config::Config>,
        /// The node's name.
        node: String,
    },
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Socket(path) => write!(f, "its CLI socket at {}", path.display()),
            Route::Member { node, .. } => write!(f, "node '{node}' over the inter-node port"),
        }
    }
}

/// A client of one node's management API, as its CLI sees it.
#[derive(Clone, Debug)]
pub struct Client {
    /// Where requests go.
    pub route: Route,
    /// How long a request may take.
    pub timeout: Duration,
}

impl Client {
    /// Sends `method path` with `body` (JSON) and reads the whole answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> std::io::Result<Answer> {
        let socket = match &self.route {
            Route::Socket(socket) => socket,
            Route::Member { config, node } => {
                let body = body.map(Value::to_string).unwrap_or_default().into_bytes();
                let call = crate::replication::cli::call_member(
                    config,
                    node,
                    method,
                    path,
                    body,
                    self.timeout,
                );
                let (status, body) = block_on(call)?.map_err(std::io::Error::other)?;
                return Ok(Answer {
                    status,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
            }
        };
        let mut s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(self.timeout))?;
        s.set_write_timeout(Some(self.timeout))?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())?;
        s.write_all(body.as_bytes())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        parse(&raw).ok_or_else(|| std::io::Error::other("malformed answer from the node"))
    }

    /// GET `path` and its body as JSON; an error unless the status is a success.
    pub fn get(&self, path: &str) -> Result<Value, String> {
        let a = self.request("GET", path, None).map_err(|e| e.to_string())?;
        if a.ok() {
            Ok(a.json())
        } else {
            Err(format!("{} {}", a.status, a.body))
        }
    }
}

/// Runs `f` to completion from this blocking code: on the runtime it is called from when
/// there is one (ctl runs inside `main`'s), else on a runtime of its own.
fn block_on<F: std::future::Future>(f: F) -> std::io::Result<F::Output> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => Ok(tokio::task::block_in_place(|| handle.block_on(f))),
        Err(_) => Ok(tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(f)),
    }
}

/// Percent-encodes one path segment (a vhost or user name).
pub fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(raw.get(..split)?).ok()?;
    let rest = raw.get(split + 4..)?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        unchunk(rest)?
    } else {
        rest.to_vec()
    };
    Some(Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn unchunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_line = std::str::from_utf8(rest.get(..end)?).ok()?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        rest = rest.get(end + 2..)?;
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_plain_and_chunked() {
        let a = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").expect("plain");
        assert_eq!((a.status, a.body.as_str()), (200, "{}"));
        let c = parse(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .expect("chunked");
        assert_eq!((c.status, c.body.as_str()), (404, "abcde"));
        assert!(parse(b"garbage").is_none());
        assert_eq!(segment("/"), "%2F");
        assert_eq!(segment("a b"), "a%20b");
    }
}
