//! A segment's sparse index: one fixed-size record per chunk (not per message), in osiris's
//! layout — chunk id (first offset), timestamp, epoch, position in the segment file, chunk
//! type — after an 8-byte file header. Records are in offset order and timestamps never go
//! backwards (the writer stamps each chunk with the later of the clock and the previous stamp),
//! so both lookups are binary searches with positioned reads: the index stays on disk (in the
//! page cache), nothing per chunk is held in memory.

use super::chunk::ChunkHeader;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The index file's header: "OSII" and version 1.
pub const INDEX_MAGIC: [u8; 8] = *b"OSII\0\0\0\x01";

/// Bytes per index record.
pub const RECORD_LEN: u64 = 29;

/// One chunk's index record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRecord {
    /// The chunk's first offset.
    pub chunk_id: u64,
    /// The chunk's timestamp (ms since the Unix epoch).
    pub timestamp: i64,
    /// The chunk's epoch.
    pub epoch: u64,
    /// Where the chunk starts in the segment file.
    pub pos: u32,
    /// The chunk's type.
    pub chunk_type: u8,
}

impl IndexRecord {
    /// The record of chunk `h` written at `pos`.
    pub fn of(h: &ChunkHeader, pos: u32) -> IndexRecord {
        IndexRecord {
            chunk_id: h.first_offset,
            timestamp: h.timestamp,
            epoch: h.epoch,
            pos,
            chunk_type: h.chunk_type,
        }
    }

    /// The record's bytes.
    pub fn encode(&self) -> [u8; RECORD_LEN as usize] {
        let mut r = [0u8; RECORD_LEN as usize];
        r[0..8].copy_from_slice(&self.chunk_id.to_be_bytes());
        r[8..16].copy_from_slice(&self.timestamp.to_be_bytes());
        r[16..24].copy_from_slice(&self.epoch.to_be_bytes());
        r[24..28].copy_from_slice(&self.pos.to_be_bytes());
        r[28] = self.chunk_type;
        r
    }

    fn decode(r: &[u8; RECORD_LEN as usize]) -> IndexRecord {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&r[i..i + 8]);
            u64::from_be_bytes(a)
        };
        IndexRecord {
            chunk_id: u64_at(0),
            timestamp: u64_at(8) as i64,
            epoch: u64_at(16),
            pos: u32::from_be_bytes([r[24], r[25], r[26], r[27]]),
            chunk_type: r[28],
        }
    }
}

/// Records in an index file of `len` bytes (a torn last record does not count).
pub fn count(len: u64) -> u64 {
    len.saturating_sub(INDEX_MAGIC.len() as u64) / RECORD_LEN
}

/// The file length that holds `n` records.
pub fn len_for(n: u64) -> u64 {
    INDEX_MAGIC.len() as u64 + n * RECORD_LEN
}

/// Reads record `i`.
pub fn read(f: &File, i: u64) -> io::Result<IndexRecord> {
    let mut r = [0u8; RECORD_LEN as usize];
    f.read_exact_at(&mut r, len_for(i))?;
    Ok(IndexRecord::decode(&r))
}

/// The first of `n` records for which `past` holds, given that it holds for every record
/// after one it holds for; `n` when none.
fn partition(f: &File, n: u64, past: impl Fn(&IndexRecord) -> bool) -> io::Result<u64> {
    let (mut lo, mut hi) = (0u64, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if past(&read(f, mid)?) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

/// The last record whose chunk starts at or before `offset` (the chunk holding it, when the
/// segment does); None when every chunk starts after it.
pub fn chunk_at_or_before(f: &File, n: u64, offset: u64) -> io::Result<Option<IndexRecord>> {
    match partition(f, n, |r| r.chunk_id > offset)? {
        0 => Ok(None),
        i => read(f, i - 1).map(Some),
    }
}

/// The first record stamped at or after `timestamp`; None when all are earlier.
pub fn first_at_or_after(f: &File, n: u64, timestamp: i64) -> io::Result<Option<IndexRecord>> {
    let i = partition(f, n, |r| r.timestamp >= timestamp)?;
    if i == n {
        return Ok(None);
    }
    read(f, i).map(Some)
}
