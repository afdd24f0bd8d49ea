//! What a shovel reports: its state (starting, running between two URIs, terminated with a
//! reason) with when it was entered, and its counters. Shared by its task, which moves it,
//! and the registry, which shows it.

use crate::client::relay::Counters;
use std::sync::Mutex;

/// Where a shovel stands.
#[derive(Debug, Clone)]
pub enum State {
    /// Connecting and setting up.
    Starting,
    /// Moving messages between these URIs (without credentials).
    Running {
        /// The source URI.
        src_uri: String,
        /// The destination URI.
        dest_uri: String,
    },
    /// The last run failed; the reason.
    Terminated {
        /// Why.
        reason: String,
    },
}

/// What a shovel reports, shared between its task and the registry.
#[derive(Debug)]
pub struct Status {
    state: Mutex<(State, u64)>,
    /// Messages forwarded since the shovel started, and those not yet confirmed.
    pub counters: Counters,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            state: Mutex::new((State::Starting, crate::clock::unix_ms())),
            counters: Counters::default(),
        }
    }
}

impl Status {
    /// Enters `state` (now).
    pub fn set(&self, state: State) {
        if let Ok(mut s) = self.state.lock() {
            *s = (state, crate::clock::unix_ms());
        }
    }

    /// The state and when it was entered (Unix ms).
    pub fn state(&self) -> (State, u64) {
        self.state
            .lock()
            .map(|s| s.clone())
            .unwrap_or((State::Starting, 0))
    }
}
