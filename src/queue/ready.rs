//! The ready list of a queue: messages waiting for a consumer, in publish order within each
//! priority level (one level unless the queue has `x-max-priority`), highest level first.
//! Requeued messages go back to their original place; the body bytes are counted for
//! x-max-length-bytes.
//!
//! A list without priorities keeps at most its window (`store::paging::Window`) in memory:
//! fresh messages published beyond it go to the queue's page file, and once one is paged out
//! every newer one follows, so the paged tail always holds the newest messages. The tail is
//! read back, in order, whenever the memory part falls to half the window.

use crate::message::Message;
use crate::store::paging::{PageFile, Window};
use std::collections::VecDeque;
use std::sync::Arc;

/// A message waiting for delivery.
#[derive(Debug)]
pub(super) struct Ready {
    pub seq: u64,
    /// None while the body is only in the store.
    pub msg: Option<Arc<Message>>,
    pub redelivered: bool,
    /// When it expires (milliseconds on the queue's clock).
    pub expires: Option<u64>,
    /// Body size (for x-max-length-bytes).
    pub size: u64,
    /// Times it came back unacknowledged (x-delivery-count).
    pub returns: u32,
    /// Priority level (already capped at the queue's maximum).
    pub priority: u8,
}

/// Ready messages by priority level.
#[derive(Debug)]
pub(super) struct ReadyList {
    levels: Vec<VecDeque<Ready>>,
    /// Entries in `levels`, and their body bytes.
    len: usize,
    bytes: u64,
    /// Messages (and their body bytes) whose bodies are in memory, not only in the store.
    in_memory: (usize, u64),
    /// The newest messages, beyond the window (lists without priorities only).
    paged: Option<PageFile>,
    /// Consumers are attached: messages are paged out only beyond `WIDE` windows.
    wide: bool,
}

/// How many windows a queue with consumers keeps in memory before paging out: its messages
/// are about to be delivered, so a short burst is not worth a disk round trip (the paged
/// tail is still read back a window at a time).
const WIDE: usize = 8;

/// Messages and body bytes a list keeps in memory before paging new ones out.
fn memory_bound(window: Window, wide: bool) -> (usize, u64) {
    let k = if wide { WIDE } else { 1 };
    (
        window.messages.saturating_mul(k),
        window.bytes.saturating_mul(k as u64),
    )
}

impl ReadyList {
    /// A list with levels 0..=max_priority (one level without priorities); a list without
    /// priorities given a page file keeps only its window in memory.
    pub fn new(max_priority: Option<u8>, page_file: Option<PageFile>) -> Self {
        let n = usize::from(max_priority.unwrap_or(0)) + 1;
        ReadyList {
            levels: (0..n).map(|_| VecDeque::new()).collect(),
            len: 0,
            bytes: 0,
            in_memory: (0, 0),
            paged: page_file.filter(|_| n == 1),
            wide: false,
        }
    }

    /// The level a message priority maps to (values above the maximum count as the maximum).
    pub fn level_of(&self, priority: Option<u8>) -> u8 {
        priority.unwrap_or(0).min((self.levels.len() - 1) as u8)
    }

    /// Ready messages, paged out ones included.
    pub fn len(&self) -> usize {
        self.len + self.paged().0
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Body bytes of the ready messages, paged out ones included.
    pub fn bytes(&self) -> u64 {
        self.bytes + self.paged().1
    }

    /// Whether consumers are attached (they widen the window new messages are kept in).
    pub fn set_consumed(&mut self, consumed: bool) {
        self.wide = consumed;
    }

    /// Paged out messages and their body bytes.
    pub fn paged(&self) -> (usize, u64) {
        self.paged.as_ref().map_or((0, 0), |p| (p.len(), p.bytes()))
    }

    /// Ready messages whose bodies are in memory, and their body bytes.
    pub fn in_memory(&self) -> (usize, u64) {
        self.in_memory
    }

    /// Inserts keeping sequence order within the level (a new message simply goes last, or
    /// to the page file beyond the window).
    pub fn insert(&mut self, r: Ready) {
        if let Some(r) = self.page_out(r) {
            self.keep(r);
        }
    }

    /// Adds an entry to the memory part, in sequence order within its level.
    fn keep(&mut self, r: Ready) {
        self.len += 1;
        self.bytes += r.size;
        if r.msg.is_some() {
            self.in_memory.0 += 1;
            self.in_memory.1 += r.size;
        }
        let level = &mut self.levels[usize::from(r.priority)];
        if level.back().is_none_or(|b| b.seq < r.seq) {
            level.push_back(r);
        } else {
            let pos = level.partition_point(|x| x.seq < r.seq);
            level.insert(pos, r);
        }
    }

    /// The next message to deliver.
    pub fn front(&self) -> Option<&Ready> {
        self.levels.iter().rev().find_map(|l| l.front())
    }

    /// Takes the next message to deliver.
    pub fn pop_front(&mut self) -> Option<Ready> {
        if self.len == 0 {
            self.refill();
        }
        let r = self.levels.iter_mut().rev().find_map(|l| l.pop_front())?;
        self.len -= 1;
        self.bytes = self.bytes.saturating_sub(r.size);
        if r.msg.is_some() {
            self.in_memory.0 = self.in_memory.0.saturating_sub(1);
            self.in_memory.1 = self.in_memory.1.saturating_sub(r.size);
        }
        self.refill();
        Some(r)
    }

    /// Empties the list; returns the sequence range of the messages that were paged out.
    pub fn clear(&mut self) -> Option<(u64, u64)> {
        self.levels.iter_mut().for_each(VecDeque::clear);
        self.len = 0;
        self.bytes = 0;
        self.in_memory = (0, 0);
        let paged = self.paged.as_mut()?;
        let range = paged.seq_range();
        paged.clear();
        range
    }

    /// Sends a fresh message to the page file when the window is full or older messages are
    /// already there; gives it back when it stays in memory.
    fn page_out(&mut self, r: Ready) -> Option<Ready> {
        let Some(paged) = self.paged.as_mut() else {
            return Some(r);
        };
        let (messages, bytes) = memory_bound(paged.paging().window, self.wide);
        let newest = self.levels[0].back().is_none_or(|b| b.seq < r.seq)
            && paged.seq_range().is_none_or(|(_, last)| last < r.seq);
        let full = !paged.is_empty() || self.len >= messages || self.bytes >= bytes;
        let fresh = !r.redelivered && r.returns == 0;
        let Some(msg) = r.msg.as_ref().filter(|_| newest && full && fresh) else {
            return Some(r);
        };
        match paged.push(r.seq, r.expires, msg) {
            Ok(()) => None,
            Err(e) => {
                // Kept in memory (out of order with the paged ones) rather than lost.
                tracing::error!(error = %e, "paging a message out failed");
                Some(r)
            }
        }
    }

    /// Reads paged messages back, a window at most at a time: once the memory part is down to
    /// half a window, or as soon as the whole paged tail fits beside it (with consumers, in the
    /// wide bound), so a queue whose consumers keep up empties its page file and keeps new
    /// messages in memory again, while a long backlog drains through one window.
    fn refill(&mut self) {
        let Some(paged) = self.paged.as_mut().filter(|p| !p.is_empty()) else {
            return;
        };
        let window = paged.paging().window;
        let (messages, bytes) = memory_bound(window, self.wide);
        let low = self.len <= window.messages / 2
            || (self.len < window.messages && self.bytes <= window.bytes / 2);
        let fits = self.len + paged.len() <= messages && self.bytes + paged.bytes() <= bytes;
        if !low && !fits {
            return;
        }
        let got = paged.pop(
            messages.saturating_sub(self.len).min(window.messages),
            bytes.saturating_sub(self.bytes).min(window.bytes),
        );
        match got {
            Ok(got) => {
                for p in got {
                    self.keep(Ready {
                        seq: p.seq,
                        size: p.msg.body_len() as u64,
                        msg: Some(Arc::new(p.msg)),
                        redelivered: false,
                        expires: p.expires,
                        returns: 0,
                        priority: 0,
                    });
                }
            }
            Err(e) => tracing::error!(error = %e, "reading paged messages back failed"),
        }
    }

    /// The first `n` entries in delivery order (highest level first), read back from the
    /// page file first when only it holds messages; nothing is taken.
    pub fn head(&mut self, n: usize) -> impl Iterator<Item = &Ready> {
        if self.len == 0 {
            self.refill();
        }
        self.levels.iter().rev().flat_map(|l| l.iter()).take(n)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Ready> {
        self.levels.iter().flat_map(|l| l.iter())
    }

    /// Gives the body to the waiting entry with this sequence number, if one lacks it.
    pub fn fill(&mut self, seq: u64, msg: Message) {
        for level in &mut self.levels {
            let pos = level.partition_point(|x| x.seq < seq);
            if let Some(r) = level
                .get_mut(pos)
                .filter(|r| r.seq == seq && r.msg.is_none())
            {
                let size = msg.body_len() as u64;
                self.bytes = self.bytes.saturating_sub(r.size) + size;
                r.size = size;
                r.msg = Some(Arc::new(msg));
                self.in_memory.0 += 1;
                self.in_memory.1 += size;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(seq: u64, priority: u8) -> Ready {
        Ready {
            seq,
            msg: None,
            redelivered: false,
            expires: None,
            size: 1,
            returns: 0,
            priority,
        }
    }

    #[test]
    fn highest_priority_first_then_sequence_order() {
        let mut l = ReadyList::new(Some(5), None);
        assert_eq!(l.level_of(Some(200)), 5);
        assert_eq!(l.level_of(None), 0);
        for (seq, p) in [(0, 0), (1, 5), (2, 3), (3, 5), (4, 0)] {
            l.insert(r(seq, p));
        }
        l.insert(r(0, 0).tap_seq(5));
        let order: Vec<u64> = std::iter::from_fn(|| l.pop_front().map(|x| x.seq)).collect();
        assert_eq!(order, vec![1, 3, 2, 0, 4, 5]);
        assert_eq!(l.bytes(), 0);
    }

    #[test]
    fn requeue_goes_back_to_its_place() {
        let mut l = ReadyList::new(None, None);
        for seq in [1, 2, 4] {
            l.insert(r(seq, 0));
        }
        l.insert(r(3, 0));
        l.insert(r(0, 0));
        let order: Vec<u64> = l.iter().map(|x| x.seq).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
        assert_eq!((l.len(), l.bytes()), (5, 5));
    }

    #[test]
    fn loading_a_body_keeps_the_byte_count() {
        let mut l = ReadyList::new(None, None);
        l.insert(Ready { size: 5, ..r(1, 0) });
        assert_eq!((l.bytes(), l.in_memory()), (5, (0, 0)));
        let body = bytes::Bytes::from_static(b"\x00\x00hello");
        let props = amq_protocol::protocol::BasicProperties::default();
        l.fill(1, Message::new("".into(), "q".into(), body, 2, &props));
        assert_eq!((l.bytes(), l.in_memory()), (5, (1, 5)));
        l.pop_front();
        assert_eq!((l.bytes(), l.in_memory()), (0, (0, 0)));
    }

    fn with_body(seq: u64) -> Ready {
        let body = bytes::Bytes::from(vec![0, 0, seq as u8]);
        let props = amq_protocol::protocol::BasicProperties::default();
        let msg = Message::new("".into(), "q".into(), body, 2, &props);
        Ready {
            msg: Some(Arc::new(msg)),
            ..r(seq, 0)
        }
    }

    /// Page files under `dir` with a window of `messages` and `bytes`.
    fn paging(
        dir: &std::path::Path,
        messages: usize,
        bytes: u64,
    ) -> Arc<crate::store::paging::Paging> {
        let window = Window { messages, bytes };
        crate::store::paging::Paging::new(dir, window)
    }

    #[test]
    fn beyond_the_window_messages_are_paged_and_come_back_in_order() {
        let dir = tempfile::tempdir().expect("dir");
        let paging = paging(dir.path(), 4, 1 << 20);
        let mut l = ReadyList::new(None, Some(paging.page_file()));
        for seq in 0..10 {
            l.insert(with_body(seq));
        }
        assert_eq!((l.len(), l.bytes()), (10, 10));
        assert_eq!((l.paged(), l.in_memory()), ((6, 6), (4, 4)));
        // Two delivered, one comes back: it goes before everything, in memory.
        let a = l.pop_front().expect("0");
        let b = l.pop_front().expect("1");
        assert_eq!((a.seq, b.seq), (0, 1));
        assert_eq!(l.paged().0 + l.in_memory().0, 8);
        assert!(l.in_memory().0 <= 4, "refilled up to the window only");
        l.insert(Ready {
            redelivered: true,
            ..with_body(1)
        });
        l.insert(with_body(10));
        let order: Vec<u64> = std::iter::from_fn(|| l.pop_front().map(|x| x.seq)).collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!((l.len(), l.bytes(), l.paged()), (0, 0, (0, 0)));
    }

    #[test]
    fn with_consumers_a_paged_tail_that_fits_comes_back_and_new_messages_stay_in_memory() {
        let dir = tempfile::tempdir().expect("dir");
        let paging = paging(dir.path(), 2, 1 << 20);
        let mut l = ReadyList::new(None, Some(paging.page_file()));
        l.set_consumed(true);
        // 8 windows of 2 stay in memory, the burst beyond them is paged.
        for seq in 0..20 {
            l.insert(with_body(seq));
        }
        assert_eq!((l.in_memory().0, l.paged().0), (16, 4));
        // Once memory and tail fit in the wide bound (16), the tail comes back, a window at a
        // time.
        for seq in 0..3 {
            assert_eq!(l.pop_front().map(|r| r.seq), Some(seq));
        }
        assert_eq!((l.in_memory().0, l.paged().0), (13, 4));
        assert_eq!(l.pop_front().map(|r| r.seq), Some(3));
        assert_eq!((l.in_memory().0, l.paged().0), (14, 2));
        assert_eq!(l.pop_front().map(|r| r.seq), Some(4));
        assert_eq!((l.in_memory().0, l.paged().0), (15, 0));
        // The page file is empty: a new message stays in memory, behind the others.
        l.insert(with_body(20));
        assert_eq!((l.in_memory().0, l.paged().0), (16, 0));
        let order: Vec<u64> = std::iter::from_fn(|| l.pop_front().map(|x| x.seq)).collect();
        assert_eq!(order, (5..=20).collect::<Vec<_>>());
    }

    #[test]
    fn a_long_backlog_drains_through_one_window() {
        let dir = tempfile::tempdir().expect("dir");
        let paging = paging(dir.path(), 2, 1 << 20);
        let mut l = ReadyList::new(None, Some(paging.page_file()));
        for seq in 0..100 {
            l.insert(with_body(seq));
        }
        l.set_consumed(true);
        // While the backlog is longer than the wide bound (16), memory holds a window or so.
        let mut most = 0;
        for seq in 0..100 {
            assert_eq!(l.pop_front().map(|r| r.seq), Some(seq));
            if l.len() > 16 {
                most = most.max(l.in_memory().0);
            }
        }
        assert!(most <= 3, "{most} messages in memory while draining");
        assert!(l.is_empty());
    }

    #[test]
    fn clearing_reports_the_paged_range() {
        let dir = tempfile::tempdir().expect("dir");
        let paging = paging(dir.path(), 2, 1 << 20);
        let mut l = ReadyList::new(None, Some(paging.page_file()));
        for seq in 3..9 {
            l.insert(with_body(seq));
        }
        assert_eq!(l.pop_front().map(|r| r.seq), Some(3));
        assert_eq!(l.clear(), Some((6, 8)));
        assert!(l.is_empty());
        let mut p = ReadyList::new(Some(3), Some(paging.page_file()));
        for seq in 0..5 {
            p.insert(with_body(seq));
        }
        assert_eq!(p.paged(), (0, 0), "priority queues stay in memory");
    }

    trait TapSeq {
        fn tap_seq(self, seq: u64) -> Self;
    }

    impl TapSeq for Ready {
        fn tap_seq(mut self, seq: u64) -> Self {
            self.seq = seq;
            self
        }
    }
}
