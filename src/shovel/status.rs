//! What a shovel reports: its state (starting, running between two URIs, terminated with a
//! reason) with when it was entered, and its counters. Shared by its task, which moves it,
//! and the registry, which shows it.

use std::sync::atomic::AtomicU64;
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
    /// Messages published to the destination since the shovel started.
    pub forwarded: AtomicU64,
    /// Messages published and not yet confirmed by the destination.
    pub pending: AtomicU64,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            state: Mutex::new((State::Starting, crate::clock::unix_ms())),
            forwarded: AtomicU64::new(0),
            pending: AtomicU64::new(0),
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
