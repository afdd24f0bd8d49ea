//! What the management API and the metrics see of stream protocol connections: each
//! connection's publishers and consumers with their counters ([`StreamActivity`], kept on its
//! registry entry), and the node's stream counters ([`StreamCounters`], RabbitMQ's
//! `rabbitmq_global_*{protocol="stream"}` families). The connection task is the only writer
//! of its records; it bumps them once per frame or chunk, never per message.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// A declared publisher's record.
#[derive(Debug)]
pub struct PublisherStats {
    /// Its id on the connection.
    pub id: u8,
    /// The stream it publishes to.
    pub stream: String,
    /// Its deduplication reference ("" without one, as RabbitMQ shows it).
    pub reference: String,
    /// Messages received from it.
    pub published: AtomicU64,
    /// Messages confirmed to it.
    pub confirmed: AtomicU64,
    /// Messages answered with a publish error.
    pub errored: AtomicU64,
}

/// A subscription's record.
#[derive(Debug)]
pub struct ConsumerStats {
    /// Its subscription id on the connection.
    pub id: u8,
    /// The stream it reads.
    pub stream: String,
    /// The properties it subscribed with.
    pub properties: Vec<(String, String)>,
    /// Chunks it may still be sent.
    pub credits: AtomicI64,
    /// Messages (chunk entries) delivered to it.
    pub consumed: AtomicU64,
    /// The last offset delivered to it.
    pub offset: AtomicU64,
    /// Whether it reads (false: a waiting single active consumer).
    pub active: AtomicBool,
    /// Whether it was subscribed at `next` or `last` (a consumer at the end with nothing
    /// delivered yet has no lag).
    pub at_end: bool,
}

impl ConsumerStats {
    /// Whether it subscribed as a single active consumer.
    pub fn single_active(&self) -> bool {
        self.properties
            .iter()
            .any(|(k, v)| k == "single-active-consumer" && v == "true")
    }

    /// RabbitMQ's `activity_status`: "up", or "single_active" / "waiting" in a group.
    pub fn activity_status(&self) -> &'static str {
        match (self.single_active(), self.active.load(Relaxed)) {
            (false, _) => "up",
            (true, true) => "single_active",
            (true, false) => "waiting",
        }
    }

    /// How far behind the stream's last offset (`None`: the stream is empty) it is, as
    /// RabbitMQ computes it.
    pub fn offset_lag(&self, last: Option<u64>) -> u64 {
        match last {
            None => 0,
            Some(_) if self.consumed.load(Relaxed) == 0 && self.at_end => 0,
            Some(last) => last.saturating_sub(self.offset.load(Relaxed)),
        }
    }
}

/// One stream connection's publishers and consumers, by id.
#[derive(Debug, Default)]
pub struct StreamActivity {
    publishers: Mutex<BTreeMap<u8, Arc<PublisherStats>>>,
    consumers: Mutex<BTreeMap<u8, Arc<ConsumerStats>>>,
}

impl StreamActivity {
    /// Lists a publisher (replacing one of the same id).
    pub fn add_publisher(&self, p: Arc<PublisherStats>) {
        if let Ok(mut m) = self.publishers.lock() {
            m.insert(p.id, p);
        }
    }

    /// Unlists publisher `id`.
    pub fn remove_publisher(&self, id: u8) {
        if let Ok(mut m) = self.publishers.lock() {
            m.remove(&id);
        }
    }

    /// Lists a subscription (replacing one of the same id).
    pub fn add_consumer(&self, c: Arc<ConsumerStats>) {
        if let Ok(mut m) = self.consumers.lock() {
            m.insert(c.id, c);
        }
    }

    /// Unlists subscription `id`.
    pub fn remove_consumer(&self, id: u8) {
        if let Ok(mut m) = self.consumers.lock() {
            m.remove(&id);
        }
    }

    /// The publishers, by id.
    pub fn publishers(&self) -> Vec<Arc<PublisherStats>> {
        self.publishers
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The subscriptions, by id.
    pub fn consumers(&self) -> Vec<Arc<ConsumerStats>> {
        self.consumers
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// The largest stream protocol response code counted as an error, plus one.
const ERROR_CODES: usize = 0x13;

/// RabbitMQ's `rabbitmq_global_stream_error_*_total` families: (response code, name, help).
pub const ERROR_FAMILIES: [(u16, &str, &str); 17] = [
    (
        0x02,
        "stream_does_not_exist",
        "Total number of commands rejected with stream does not exist error",
    ),
    (
        0x03,
        "subscription_id_already_exists",
        "Total number of commands failed with subscription id already exists",
    ),
    (
        0x04,
        "subscription_id_does_not_exist",
        "Total number of commands failed with subscription id does not exist",
    ),
    (
        0x05,
        "stream_already_exists",
        "Total number of commands failed with stream already exists",
    ),
    (
        0x06,
        "stream_not_available",
        "Total number of commands failed with stream not available",
    ),
    (
        0x07,
        "sasl_mechanism_not_supported",
        "Total number of commands failed with sasl mechanism not supported",
    ),
    (
        0x08,
        "authentication_failure",
        "Total number of commands failed with authentication failure",
    ),
    (
        0x09,
        "sasl_error",
        "Total number of commands failed with sasl error",
    ),
    (
        0x0a,
        "sasl_challenge",
        "Total number of commands failed with sasl challenge",
    ),
    (
        0x0b,
        "sasl_authentication_failure_loopback",
        "Total number of commands failed with sasl authentication failure loopback",
    ),
    (
        0x0c,
        "vhost_access_failure",
        "Total number of commands failed with vhost access failure",
    ),
    (
        0x0d,
        "unknown_frame",
        "Total number of commands failed with unknown frame",
    ),
    (
        0x0e,
        "frame_too_large",
        "Total number of commands failed with frame too large",
    ),
    (
        0x0f,
        "internal_error",
        "Total number of commands failed with internal error",
    ),
    (
        0x10,
        "access_refused",
        "Total number of commands failed with access refused",
    ),
    (
        0x11,
        "precondition_failed",
        "Total number of commands failed with precondition failed",
    ),
    (
        0x12,
        "publisher_does_not_exist",
        "Total number of commands failed with publisher does not exist",
    ),
];

/// The node's stream protocol counters since start.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Messages received from publishers (every one expects a confirm).
    pub received: AtomicU64,
    /// Messages confirmed to publishers.
    pub confirmed: AtomicU64,
    /// Messages (chunk entries) delivered to consumers.
    pub delivered: AtomicU64,
    /// Bytes of chunk data the kernel sent from segment files to consumers' sockets
    /// (`sendfile`), never copied through the broker.
    pub sent_from_file: AtomicU64,
    errors: [AtomicU64; ERROR_CODES],
}

impl StreamCounters {
    /// Counts an answer with response code `code` (OK and codes that are no error are not
    /// counted); returns the code.
    pub fn answered(&self, code: u16) -> u16 {
        if (0x02..ERROR_CODES as u16).contains(&code) {
            self.errors[usize::from(code)].fetch_add(1, Relaxed);
        }
        code
    }

    /// Answers counted with `code`.
    pub fn errors(&self, code: u16) -> u64 {
        self.errors
            .get(usize::from(code))
            .map_or(0, |c| c.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(properties: Vec<(String, String)>, at_end: bool) -> ConsumerStats {
        ConsumerStats {
            id: 0,
            stream: "s".into(),
            properties,
            credits: AtomicI64::new(0),
            consumed: AtomicU64::new(0),
            offset: AtomicU64::new(0),
            active: AtomicBool::new(true),
            at_end,
        }
    }

    #[test]
    fn lag_and_status_follow_rabbitmq() {
        let c = consumer(vec![], false);
        assert_eq!(c.offset_lag(None), 0, "an empty stream has no lag");
        assert_eq!(c.offset_lag(Some(9)), 9);
        c.consumed.store(5, Relaxed);
        c.offset.store(4, Relaxed);
        assert_eq!(c.offset_lag(Some(9)), 5);
        assert_eq!(consumer(vec![], true).offset_lag(Some(9)), 0);
        assert_eq!(c.activity_status(), "up");
        let sac = consumer(
            vec![("single-active-consumer".into(), "true".into())],
            false,
        );
        assert_eq!(sac.activity_status(), "single_active");
        sac.active.store(false, Relaxed);
        assert_eq!(sac.activity_status(), "waiting");
    }

    #[test]
    fn only_error_codes_are_counted() {
        let c = StreamCounters::default();
        assert_eq!(c.answered(0x01), 0x01);
        c.answered(0x02);
        c.answered(0x12);
        c.answered(0x13);
        c.answered(0xffff);
        assert_eq!(c.errors(0x02), 1);
        assert_eq!(c.errors(0x12), 1);
        assert_eq!(c.errors(0x01) + c.errors(0x13), 0);
    }
}
