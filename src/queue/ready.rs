//! The ready list of a queue: messages waiting for a consumer, in publish order within each
//! priority level (one level unless the queue has `x-max-priority`), highest level first.
//! Requeued messages go back to their original place; the body bytes are counted for
//! x-max-length-bytes.

use crate::message::Message;
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
    len: usize,
    bytes: u64,
    /// Messages (and their body bytes) whose bodies are in memory, not only in the store.
    in_memory: (usize, u64),
}

impl ReadyList {
    /// A list with levels 0..=max_priority (one level without priorities).
    pub fn new(max_priority: Option<u8>) -> Self {
        let n = usize::from(max_priority.unwrap_or(0)) + 1;
        ReadyList {
            levels: (0..n).map(|_| VecDeque::new()).collect(),
            len: 0,
            bytes: 0,
            in_memory: (0, 0),
        }
    }

    /// The level a message priority maps to (values above the maximum count as the maximum).
    pub fn level_of(&self, priority: Option<u8>) -> u8 {
        priority.unwrap_or(0).min((self.levels.len() - 1) as u8)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Body bytes of the ready messages.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Ready messages whose bodies are in memory, and their body bytes.
    pub fn in_memory(&self) -> (usize, u64) {
        self.in_memory
    }

    /// Inserts keeping sequence order within the level (a new message simply goes last).
    pub fn insert(&mut self, r: Ready) {
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
        let r = self.levels.iter_mut().rev().find_map(|l| l.pop_front())?;
        self.len -= 1;
        self.bytes = self.bytes.saturating_sub(r.size);
        if r.msg.is_some() {
            self.in_memory.0 = self.in_memory.0.saturating_sub(1);
            self.in_memory.1 = self.in_memory.1.saturating_sub(r.size);
        }
        Some(r)
    }

    pub fn clear(&mut self) {
        self.levels.iter_mut().for_each(VecDeque::clear);
        self.len = 0;
        self.bytes = 0;
        self.in_memory = (0, 0);
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
        let mut l = ReadyList::new(Some(5));
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
        let mut l = ReadyList::new(None);
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
        let mut l = ReadyList::new(None);
        l.insert(Ready { size: 5, ..r(1, 0) });
        assert_eq!((l.bytes(), l.in_memory()), (5, (0, 0)));
        let body = bytes::Bytes::from_static(b"\x00\x00hello");
        let props = amq_protocol::protocol::BasicProperties::default();
        l.fill(1, Message::new("".into(), "q".into(), body, 2, &props));
        assert_eq!((l.bytes(), l.in_memory()), (5, (1, 5)));
        l.pop_front();
        assert_eq!((l.bytes(), l.in_memory()), (0, (0, 0)));
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
