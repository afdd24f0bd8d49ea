//! What a federation link reports (RabbitMQ's `rabbit_federation_status`): starting,
//! running with its local connection's name, or in error with the reason; when it entered
//! that state; and its counters. Shared by the link's task, which moves it, and the
//! registry, which shows it in `/api/federation-links`.

use crate::client::relay::Counters;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Where a link stands.
#[derive(Debug, Clone)]
pub enum State {
    /// Connecting and setting up.
    Starting,
    /// Moving messages.
    Running {
        /// The name of its connection to this node.
        local_connection: String,
    },
    /// The last run failed; why.
    Error {
        /// The reason.
        reason: String,
    },
}

/// A link's status.
#[derive(Debug)]
pub struct Status {
    state: Mutex<(State, u64, String)>,
    /// Messages moved and not yet confirmed.
    pub counters: Counters,
}

impl Status {
    /// A starting link of upstream URI `uri` (without credentials).
    pub fn new(uri: String) -> Status {
        Status {
            state: Mutex::new((State::Starting, crate::clock::unix_ms(), uri)),
            counters: Counters::default(),
        }
    }

    /// Enters `state` (now), connected to `uri` (without credentials).
    pub fn set(&self, state: State, uri: &str) {
        if let Ok(mut s) = self.state.lock() {
            *s = (state, crate::clock::unix_ms(), uri.to_owned());
        }
    }

    /// The link as `/api/federation-links` shows it; `identity` holds its fixed fields.
    pub fn to_json(&self, identity: &Map<String, Value>) -> Value {
        let (state, since, uri) = match self.state.lock() {
            Ok(s) => s.clone(),
            Err(_) => (State::Starting, 0, String::new()),
        };
        let mut o = identity.clone();
        match state {
            State::Starting => {
                o.insert("status".into(), json!("starting"));
            }
            State::Running { local_connection } => {
                o.insert("status".into(), json!("running"));
                o.insert("local_connection".into(), json!(local_connection));
            }
            State::Error { reason } => {
                o.insert("status".into(), json!("error"));
                o.insert("error".into(), json!(reason));
            }
        }
        o.insert("uri".into(), json!(uri));
        o.insert(
            "timestamp".into(),
            json!(crate::json::erlang_local_time(since)),
        );
        let c = &self.counters;
        o.insert(
            "forwarded".into(),
            json!(c.forwarded.load(Ordering::Relaxed)),
        );
        o.insert("pending".into(), json!(c.pending.load(Ordering::Relaxed)));
        Value::Object(o)
    }
}
