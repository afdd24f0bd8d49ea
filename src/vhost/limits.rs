//! RabbitMQ's per-vhost limits (`max-connections`, `max-queues`), set over the management API
//! and checked at connection.open and queue.declare.

use std::sync::atomic::{AtomicI64, Ordering};

/// RabbitMQ's per-vhost limits; -1 is no limit, 0 allows none.
#[derive(Debug)]
pub struct VhostLimits {
    /// `max-connections`.
    pub max_connections: AtomicI64,
    /// `max-queues`.
    pub max_queues: AtomicI64,
}

impl Default for VhostLimits {
    fn default() -> Self {
        VhostLimits {
            max_connections: AtomicI64::new(-1),
            max_queues: AtomicI64::new(-1),
        }
    }
}

impl VhostLimits {
    /// The limit called `name` in RabbitMQ.
    pub fn by_name(&self, name: &str) -> Option<&AtomicI64> {
        match name {
            "max-connections" => Some(&self.max_connections),
            "max-queues" => Some(&self.max_queues),
            _ => None,
        }
    }

    /// The limits that are set, as RabbitMQ shows them.
    pub fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        for name in ["max-connections", "max-queues"] {
            if let Some(v) = self.by_name(name).map(|a| a.load(Ordering::Relaxed)) {
                if v >= 0 {
                    m.insert(name.into(), v.into());
                }
            }
        }
        m
    }
}
