//! Page files: where a queue keeps the messages beyond its in-memory window (LavinMQ-style
//! segment files). Each paging queue appends its overflow, in publish order, to segment files
//! under `<data dir>/paging/`, and reads them back front to back as its window drains; a
//! segment is deleted once read. Nothing here is durable: persistent messages are in redb as
//! well, so the files are written without fsync and the whole directory is wiped at boot.
//!
//! A record is `u32` length, `u64` sequence, `u64` expiry + 1 (0: none), then the message in
//! the store's encoding (`schema::encode_message`). Only fresh messages are paged (never
//! delivered), so nothing else needs saving.

use crate::message::Message;
use bytes::Bytes;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A segment is closed for writing past this size.
const SEGMENT_BYTES: u64 = 64 << 20;
/// Buffered appends are written out past this size.
const WRITE_BUFFER: usize = 256 << 10;
/// Bytes read from a segment at a time.
const READ_CHUNK: usize = 256 << 10;
/// Length, sequence, expiry.
const HEADER: usize = 4 + 8 + 8;
/// Messages this large are written from their own buffer and read into their own allocation
/// (no copy through the write and read buffers).
const LARGE: usize = 16 << 10;

/// How much of each queue's backlog stays in memory.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Ready messages a queue keeps in memory before paging newer ones out.
    pub messages: usize,
    /// Body bytes a queue keeps in memory before paging newer ones out.
    pub bytes: u64,
}

impl Default for Window {
    /// The configuration's defaults (`queue_window_messages`, `queue_window_bytes`).
    fn default() -> Self {
        Window {
            messages: crate::config::QUEUE_WINDOW_MESSAGES,
            bytes: crate::config::QUEUE_WINDOW_BYTES,
        }
    }
}

/// Where queues page out to, and their in-memory window.
#[derive(Debug)]
pub struct Paging {
    dir: PathBuf,
    next_file: AtomicU64,
    /// The in-memory window of every queue.
    pub window: Window,
}

impl Paging {
    /// Page files go under `data_dir/paging`, which is emptied (left over from the last run).
    pub fn new(data_dir: &Path, window: Window) -> Arc<Paging> {
        let dir = data_dir.join("paging");
        let _ = std::fs::remove_dir_all(&dir);
        Arc::new(Paging {
            dir,
            next_file: AtomicU64::new(0),
            window: Window {
                messages: window.messages.max(1),
                bytes: window.bytes.max(1),
            },
        })
    }

    /// A new, empty page file for one queue (no file is created until something is paged).
    pub fn page_file(self: &Arc<Self>) -> PageFile {
        PageFile {
            paging: self.clone(),
            segments: VecDeque::new(),
            write_buf: Vec::new(),
            read_buf: Vec::new(),
            read_pos: 0,
            read_at: 0,
            count: 0,
            bytes: 0,
            first_seq: 0,
            last_seq: 0,
        }
    }

    fn create_segment(&self) -> std::io::Result<Segment> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(format!(
            "{}.seg",
            self.next_file.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .append(true)
            .open(&path)?;
        Ok(Segment { path, file, len: 0 })
    }
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: File,
    /// Bytes written to the file.
    len: u64,
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A message read back from a page file.
#[derive(Debug)]
pub struct Paged {
    /// Its sequence number in the queue.
    pub seq: u64,
    /// When it expires, on the queue's clock.
    pub expires: Option<u64>,
    /// The message.
    pub msg: Message,
}

/// One queue's paged-out messages, oldest first. Dropping it deletes its files.
#[derive(Debug)]
pub struct PageFile {
    paging: Arc<Paging>,
    /// Oldest first; appends go to the last one.
    segments: VecDeque<Segment>,
    /// Records appended but not yet written to the last segment.
    write_buf: Vec<u8>,
    /// Unparsed bytes read from the first segment.
    read_buf: Vec<u8>,
    /// Bytes of `read_buf` already parsed.
    read_pos: usize,
    /// Offset in the first segment of the byte after `read_buf`.
    read_at: u64,
    count: usize,
    bytes: u64,
    /// Sequence of the oldest paged message (valid when `count > 0`).
    first_seq: u64,
    last_seq: u64,
}

impl PageFile {
    /// Paged messages.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing is paged.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Body bytes of the paged messages.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The sequence numbers of the paged messages lie in this range (every number in it that
    /// the queue handed out belongs to a paged message).
    pub fn seq_range(&self) -> Option<(u64, u64)> {
        (self.count > 0).then_some((self.first_seq, self.last_seq))
    }

    /// The settings this file was made under.
    pub fn paging(&self) -> &Paging {
        &self.paging
    }

    /// Appends a message (its sequence must be higher than every paged one).
    pub fn push(&mut self, seq: u64, expires: Option<u64>, msg: &Message) -> std::io::Result<()> {
        let large = msg.data().len() >= LARGE;
        if large {
            // Earlier records go first, so a failure below only concerns this one.
            self.write_out(&[])?;
        }
        let start = self.write_buf.len();
        self.write_buf.extend_from_slice(&[0; 4]);
        self.write_buf.extend_from_slice(&seq.to_be_bytes());
        self.write_buf
            .extend_from_slice(&expires.map_or(0, |e| e.saturating_add(1)).to_be_bytes());
        let (data, after) = if large {
            (&[][..], msg.data())
        } else {
            (msg.data(), &[][..])
        };
        crate::store::schema::encode_message_into(
            &mut self.write_buf,
            msg.exchange.as_str(),
            msg.routing_key.as_str(),
            msg.raw_properties().len(),
            data,
        );
        let len = (self.write_buf.len() - start - 4 + after.len()) as u32;
        self.write_buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
        if large || self.write_buf.len() >= WRITE_BUFFER {
            if let Err(e) = self.write_out(after) {
                self.write_buf.truncate(start);
                return Err(e);
            }
        }
        if self.count == 0 {
            self.first_seq = seq;
        }
        self.count += 1;
        self.bytes += msg.body_len() as u64;
        self.last_seq = seq;
        Ok(())
    }

    /// Writes the buffered records, then `after` (the data of the last one), to the last
    /// segment (a new one when it is full); on failure the segment is left as it was.
    fn write_out(&mut self, after: &[u8]) -> std::io::Result<()> {
        let total = (self.write_buf.len() + after.len()) as u64;
        if total == 0 {
            return Ok(());
        }
        let full = self
            .segments
            .back()
            .is_none_or(|s| s.len > 0 && s.len + total > SEGMENT_BYTES);
        if full {
            let s = self.paging.create_segment()?;
            self.segments.push_back(s);
        }
        let Some(seg) = self.segments.back_mut() else {
            return Ok(());
        };
        let written = seg
            .file
            .write_all(&self.write_buf)
            .and_then(|()| seg.file.write_all(after));
        if let Err(e) = written {
            // Nothing of a partial write may stay in front of the next one.
            let _ = seg.file.set_len(seg.len);
            return Err(e);
        }
        seg.len += total;
        self.write_buf.clear();
        if self.write_buf.capacity() > 2 * WRITE_BUFFER {
            self.write_buf.shrink_to(WRITE_BUFFER);
        }
        Ok(())
    }

    /// Reads back the oldest paged messages: at least one (unless none is paged), then while
    /// fewer than `max_messages` and `max_bytes` of bodies were read.
    pub fn pop(&mut self, max_messages: usize, max_bytes: u64) -> std::io::Result<Vec<Paged>> {
        let mut out = Vec::new();
        let mut bytes = 0u64;
        while self.count > 0 && (out.is_empty() || (out.len() < max_messages && bytes < max_bytes))
        {
            match self.next_record()? {
                Some(p) => {
                    bytes += p.msg.body_len() as u64;
                    self.count -= 1;
                    self.bytes = self.bytes.saturating_sub(p.msg.body_len() as u64);
                    self.first_seq = p.seq + 1;
                    out.push(p);
                }
                None => {
                    return Err(std::io::Error::other(format!(
                        "page file ended with {} messages unread",
                        self.count
                    )))
                }
            }
        }
        if self.count == 0 {
            self.clear();
        }
        Ok(out)
    }

    /// Parses the next record, reading more of the first segment as needed.
    fn next_record(&mut self) -> std::io::Result<Option<Paged>> {
        loop {
            let unread = &self.read_buf[self.read_pos..];
            if let Some(len) = unread
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            {
                if let Some(record) = unread.get(4..4 + len) {
                    let p = decode(record, Bytes::copy_from_slice);
                    self.read_pos += 4 + len;
                    return p.map(Some).ok_or_else(corrupt);
                }
                if len >= LARGE {
                    // Its own allocation, read straight from the segment.
                    let mut record = Vec::with_capacity(len);
                    record.extend_from_slice(&unread[4..]);
                    self.read_pos = self.read_buf.len();
                    self.read_front(&mut record, len)?;
                    let record = Bytes::from(record);
                    return decode(&record, |data| record.slice_ref(data))
                        .map(Some)
                        .ok_or_else(corrupt);
                }
            }
            if !self.read_more()? {
                return Ok(None);
            }
        }
    }

    /// Reads from the first segment at `read_at` until `buf` holds `until` bytes (no more than
    /// the segment has).
    fn read_front(&mut self, buf: &mut Vec<u8>, until: usize) -> std::io::Result<()> {
        let Some(seg) = self.segments.front() else {
            return Err(short());
        };
        let want = (until.saturating_sub(buf.len()) as u64).min(seg.len - self.read_at);
        let mut file = &seg.file;
        file.seek(SeekFrom::Start(self.read_at))?;
        let n = file.take(want).read_to_end(buf)?;
        self.read_at += n as u64;
        if (n as u64) < want || buf.len() < until {
            return Err(short());
        }
        Ok(())
    }

    /// Appends the next chunk of the first segment to `read_buf` (after dropping what was
    /// parsed); false at the end of the data.
    fn read_more(&mut self) -> std::io::Result<bool> {
        self.read_buf.drain(..self.read_pos);
        self.read_pos = 0;
        loop {
            let Some(seg) = self.segments.front() else {
                if self.write_buf.is_empty() {
                    return Ok(false);
                }
                self.write_out(&[])?;
                continue;
            };
            if self.read_at < seg.len {
                let want = (seg.len - self.read_at).min(READ_CHUNK as u64) as usize;
                let until = self.read_buf.len() + want;
                let mut buf = std::mem::take(&mut self.read_buf);
                let read = self.read_front(&mut buf, until);
                self.read_buf = buf;
                read?;
                return Ok(true);
            }
            if self.segments.len() == 1 {
                if self.write_buf.is_empty() {
                    return Ok(false);
                }
                self.write_out(&[])?;
                continue;
            }
            // Fully read and no longer written: gone.
            self.segments.pop_front();
            self.read_at = 0;
        }
    }

    /// Forgets every paged message and deletes the files.
    pub fn clear(&mut self) {
        self.segments.clear();
        self.write_buf = Vec::new();
        self.read_buf = Vec::new();
        self.read_pos = 0;
        self.read_at = 0;
        self.count = 0;
        self.bytes = 0;
    }
}

fn corrupt() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "corrupt page record")
}

fn short() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "page file shorter than written",
    )
}

/// Parses a record (after its length); `keep` turns the message's properties and body into
/// the `Bytes` it keeps (a copy, or a slice of the record's own allocation).
fn decode(rec: &[u8], keep: impl FnOnce(&[u8]) -> Bytes) -> Option<Paged> {
    let seq = u64::from_be_bytes(rec.get(..8)?.try_into().ok()?);
    let expires = u64::from_be_bytes(rec.get(8..16)?.try_into().ok()?);
    let (x, rk, props_len, data) = crate::store::schema::decode_message(rec.get(HEADER - 4..)?)?;
    Some(Paged {
        seq,
        expires: expires.checked_sub(1),
        msg: Message::from_stored_bytes(x, rk, props_len, keep(data))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::BasicProperties;

    fn message(i: u64, size: usize) -> Message {
        let mut data = vec![0x00, 0x00];
        data.extend_from_slice(&i.to_be_bytes());
        data.resize(2 + size.max(8), 7);
        Message::new(
            "x".into(),
            format!("rk{i}").as_str().into(),
            Bytes::from(data),
            2,
            &BasicProperties::default(),
        )
    }

    #[test]
    fn messages_come_back_in_order_across_segments_and_files_go() {
        let dir = tempfile::tempdir().expect("dir");
        let paging = Paging::new(dir.path(), Window::default());
        let mut f = paging.page_file();
        // ~69 MiB: more than one segment, and several write and read chunks.
        let n = 1200u64;
        for i in 0..n {
            f.push(i + 5, (i % 3 == 0).then_some(i * 10), &message(i, 60_000))
                .expect("push");
        }
        assert_eq!((f.len(), f.bytes()), (n as usize, n * 60_000));
        assert_eq!(f.seq_range(), Some((5, n + 4)));
        assert!(f.segments.len() >= 2, "{} segments", f.segments.len());
        let mut next = 0;
        while !f.is_empty() {
            let got = f.pop(7, 1_000_000).expect("pop");
            assert!(!got.is_empty() && got.len() <= 7);
            for p in got {
                assert_eq!(p.seq, next + 5);
                assert_eq!(p.expires, (next % 3 == 0).then_some(next * 10));
                assert_eq!(p.msg.routing_key.as_str(), format!("rk{next}"));
                assert_eq!(&p.msg.body()[..8], &next.to_be_bytes());
                assert_eq!(p.msg.body_len(), 60_000);
                next += 1;
            }
            if next == 50 {
                // Appends while reading keep the order.
                assert_eq!(f.seq_range(), Some((55, n + 4)));
            }
        }
        assert_eq!(next, n);
        assert_eq!(f.bytes(), 0);
        let left = std::fs::read_dir(dir.path().join("paging"))
            .expect("dir")
            .count();
        assert_eq!(left, 0, "read segments are deleted");
    }

    #[test]
    fn a_byte_budget_limits_a_read_but_one_message_always_comes() {
        let dir = tempfile::tempdir().expect("dir");
        let paging = Paging::new(dir.path(), Window::default());
        let mut f = paging.page_file();
        for i in 0..10 {
            f.push(i, None, &message(i, 100)).expect("push");
        }
        assert_eq!(f.pop(100, 1).expect("pop").len(), 1);
        assert_eq!(f.pop(100, 250).expect("pop").len(), 3);
        f.push(10, None, &message(10, 100)).expect("push");
        let rest: Vec<u64> = f
            .pop(100, u64::MAX)
            .expect("pop")
            .iter()
            .map(|p| p.seq)
            .collect();
        assert_eq!(rest, vec![4, 5, 6, 7, 8, 9, 10]);
        assert!(f.pop(100, u64::MAX).expect("pop").is_empty());
    }

    #[test]
    fn leftovers_of_a_previous_run_are_wiped_and_dropping_deletes() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(dir.path().join("paging")).expect("mkdir");
        std::fs::write(dir.path().join("paging/old.seg"), b"x").expect("write");
        let paging = Paging::new(dir.path(), Window::default());
        assert!(!dir.path().join("paging/old.seg").exists());
        let mut f = paging.page_file();
        for i in 0..3000 {
            f.push(i, None, &message(i, 100)).expect("push");
        }
        let files = || std::fs::read_dir(dir.path().join("paging")).map_or(0, |d| d.count());
        assert_eq!(files(), 1);
        drop(f);
        assert_eq!(files(), 0);
    }
}
