//! What the fault harness's clients saw, and the checks the issue asks of it. Every body is
//! `{queue}/{publisher}/{seq}`: a publisher's sequence numbers count up. The publisher part
//! names one publishing channel (the workload's `{id}.{channel}`): order is promised per
//! channel, as RabbitMQ promises it; a publisher that reconnects after a failure starts a
//! new one, and what it left unconfirmed on the old one may land after its next messages.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

/// One message as a consumer received it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The queue it was consumed from.
    pub queue: String,
    pub body: String,
    pub redelivered: bool,
    /// When the client had it.
    pub at: Instant,
    /// The consumer stream (one per channel's consume) it came on.
    pub stream: u64,
}

/// Everything the clients recorded, shared by the workload's tasks.
#[derive(Default)]
pub struct History(Mutex<State>);

#[derive(Default)]
pub struct State {
    /// Bodies handed to basic.publish (with or without a confirm after).
    pub sent: HashSet<String>,
    /// Bodies the broker confirmed (ack, not returned).
    pub confirmed: HashSet<String>,
    pub nacked: usize,
    pub returned: usize,
    /// Publishes whose confirm never came (the connection failed or the wait timed out).
    pub unknown: usize,
    pub deliveries: Vec<Delivery>,
    /// For each acked body, when the first `close-ok` after its ack arrived: the ack was
    /// processed by then.
    pub processed: HashMap<String, Instant>,
    /// The node (index) each consumer stream's connection went to.
    pub streams: HashMap<u64, usize>,
    /// When each confirmed body's confirm came, and through which node (index).
    pub confirm_times: HashMap<String, (Instant, usize)>,
}

impl State {
    /// What happened to `body`, for a report: its deliveries (time since `start`, stream,
    /// node, flag) and when its ack was processed.
    pub fn trace(&self, body: &str, start: Instant) -> String {
        let at = |t: Instant| t.saturating_duration_since(start).as_millis();
        let mut out = format!("{body}:");
        if let Some((t, node)) = self.confirm_times.get(body) {
            out += &format!(" confirmed {}ms through node {node};", at(*t));
        }
        for d in self.deliveries.iter().filter(|d| d.body == body) {
            let node = self.streams.get(&d.stream).copied();
            out += &format!(
                " delivered {}ms on stream {} (node {node:?}, redelivered {});",
                at(d.at),
                d.stream,
                d.redelivered
            );
        }
        if let Some(t) = self.processed.get(body) {
            out += &format!(" ack processed {}ms", at(*t));
        }
        out
    }
}

impl History {
    pub fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Confirmed but never delivered.
    pub lost: Vec<String>,
    /// Delivered but never published (to that queue).
    pub phantom: Vec<String>,
    /// Delivered after its ack had been processed.
    pub after_ack: Vec<String>,
    /// (earlier, later): a publisher's message delivered for the first time, unflagged,
    /// after one it published later, on one consumer stream.
    pub out_of_order: Vec<(String, String)>,
    /// Deliveries flagged redelivered.
    pub redelivered: usize,
    /// Unflagged deliveries of a body delivered before (at-least-once duplicates).
    pub duplicates: usize,
}

impl Verdict {
    /// Whether every check holds.
    pub fn clean(&self) -> bool {
        self.lost.is_empty()
            && self.phantom.is_empty()
            && self.after_ack.is_empty()
            && self.out_of_order.is_empty()
    }
}

/// `{queue}/{publisher}` and the sequence number of a body.
fn parse(body: &str) -> Option<(&str, u64)> {
    let (publisher, seq) = body.rsplit_once('/')?;
    Some((publisher, seq.parse().ok()?))
}

/// Runs the four checks over `s`.
pub fn check(s: &State) -> Verdict {
    let mut v = Verdict::default();
    let delivered: HashSet<&str> = s.deliveries.iter().map(|d| d.body.as_str()).collect();
    let mut lost: Vec<String> = s
        .confirmed
        .iter()
        .filter(|b| !delivered.contains(b.as_str()))
        .cloned()
        .collect();
    lost.sort();
    v.lost = lost;
    let mut seen: HashSet<&str> = HashSet::new();
    // Per (stream, publisher): the last sequence number delivered first-time, unflagged.
    let mut last: HashMap<(u64, &str), (u64, &str)> = HashMap::new();
    let mut by_time: Vec<&Delivery> = s.deliveries.iter().collect();
    by_time.sort_by_key(|d| d.at);
    for d in by_time {
        let from_queue = d.body.split('/').next() == Some(d.queue.as_str());
        if !s.sent.contains(&d.body) || !from_queue {
            v.phantom.push(d.body.clone());
            continue;
        }
        if s.processed.get(&d.body).is_some_and(|t| *t < d.at) {
            v.after_ack.push(d.body.clone());
        }
        let first = seen.insert(d.body.as_str());
        if d.redelivered {
            v.redelivered += 1;
            continue;
        }
        if !first {
            v.duplicates += 1;
            continue;
        }
        let Some((publisher, seq)) = parse(&d.body) else {
            v.phantom.push(d.body.clone());
            continue;
        };
        if let Some((before, body)) = last.insert((d.stream, publisher), (seq, &d.body)) {
            if before > seq {
                v.out_of_order.push((d.body.clone(), body.to_owned()));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn delivery(body: &str, redelivered: bool, at: Instant, stream: u64) -> Delivery {
        Delivery {
            queue: "q".into(),
            body: body.into(),
            redelivered,
            at,
            stream,
        }
    }

    #[test]
    fn each_check_reports_what_breaks_it() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let mut s = State::default();
        for i in 0..5 {
            s.sent.insert(format!("q/p/{i}"));
            s.confirmed.insert(format!("q/p/{i}"));
        }
        s.deliveries = vec![
            delivery("q/p/0", false, ms(1), 1),
            delivery("q/p/2", false, ms(2), 1),
            delivery("q/p/1", false, ms(3), 1),
            delivery("q/p/0", true, ms(20), 2),
            delivery("q/p/2", false, ms(21), 2),
            delivery("q/x/9", false, ms(22), 2),
        ];
        s.processed.insert("q/p/0".into(), ms(10));
        s.processed.insert("q/p/1".into(), ms(30));
        let v = check(&s);
        assert_eq!(v.lost, vec!["q/p/3", "q/p/4"]);
        assert_eq!(v.phantom, vec!["q/x/9"]);
        assert_eq!(v.after_ack, vec!["q/p/0"]);
        assert_eq!(v.out_of_order, vec![("q/p/1".into(), "q/p/2".into())]);
        assert_eq!((v.redelivered, v.duplicates), (1, 1));
        assert!(!v.clean());
    }

    #[test]
    fn a_clean_history_passes() {
        let t = Instant::now();
        let mut s = State::default();
        s.sent.insert("q/p/0".into());
        s.confirmed.insert("q/p/0".into());
        s.deliveries = vec![delivery("q/p/0", false, t, 1)];
        s.processed
            .insert("q/p/0".into(), t + Duration::from_millis(5));
        assert!(check(&s).clean());
    }
}
