//! One segment: a file of chunks after an 8-byte header ("OSIL", version 1), named by the
//! offset of its first chunk (20 digits, so names sort as offsets), beside its index file.
//! Opening a segment checks its tail: index records that point past the data or at a chunk
//! that fails its CRC are dropped, chunks written after the last index record are indexed,
//! and a torn or corrupt last chunk is cut off (a crash can leave one; it was never
//! confirmed, since confirms wait for the data to be synced).

use super::chunk::{ChunkHeader, HEADER_LEN};
use super::index::{self, IndexRecord, INDEX_MAGIC};
use super::{io_err, StreamLogError};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The segment file's header.
pub const SEGMENT_MAGIC: [u8; 8] = *b"OSIL\0\0\0\x01";

/// Bytes before a segment's first chunk.
pub const SEGMENT_HEADER_LEN: u64 = SEGMENT_MAGIC.len() as u64;

/// The segment file of the segment starting at `first`.
pub fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.segment"))
}

/// The index file of the segment starting at `first`.
pub fn index_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.index"))
}

/// What is known of a segment without reading it.
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    /// Its name: the first offset it holds (or will hold, while empty).
    pub first_offset: u64,
    /// The offset after its last chunk.
    pub next_offset: u64,
    /// Its first chunk's timestamp, when it has one.
    pub first_timestamp: Option<i64>,
    /// Its last chunk's index record.
    pub last: Option<IndexRecord>,
    /// Bytes in the segment file.
    pub size: u64,
    /// Chunks (index records).
    pub chunks: u64,
}

/// A segment open for writing (the newest one) or being checked.
pub struct OpenSegment {
    /// What is known of it.
    pub info: SegmentInfo,
    /// The segment file.
    pub data: File,
    /// The index file.
    pub index: File,
    /// The segment file's length: bytes from `info.size` to here are zeros written ahead.
    zeroed: u64,
}

/// Zeros written ahead of small chunks. Overwriting blocks the file already has on disk
/// changes no metadata, so the `fdatasync` a confirm waits for writes the data alone (about
/// half the time of one that must also journal a new size or extent, measured on ext4); the
/// zeros cost one larger sync per half runway, and a stream's disk use is at most this more.
/// Large chunks are appended as they are: they already amortize the metadata.
const RUNWAY: u64 = 1 << 20;

/// Chunks smaller than this are written into a runway of zeros.
const SMALL_CHUNK: usize = 256 << 10;

/// Zeros to write a runway with.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

fn open_rw(path: &Path) -> Result<File, StreamLogError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_err(path))
}

/// Makes sure a file starts with `magic` (writing it into an empty or torn-at-birth file);
/// a file with other bytes there is not ours.
fn check_magic(f: &File, path: &Path, magic: &[u8; 8]) -> Result<(), StreamLogError> {
    let len = f.metadata().map_err(io_err(path))?.len();
    if len < magic.len() as u64 {
        f.set_len(0).map_err(io_err(path))?;
        return f.write_all_at(magic, 0).map_err(io_err(path));
    }
    let mut got = [0u8; 8];
    f.read_exact_at(&mut got, 0).map_err(io_err(path))?;
    if &got != magic {
        return Err(StreamLogError::Corrupt {
            path: path.to_owned(),
            why: "not a stream file (bad header)".to_owned(),
        });
    }
    Ok(())
}

/// Chunks larger than this are checked against the file's size before they are read.
const LARGE_CHUNK: u64 = 16 << 20;

/// Whether the header at `pos` claims more than the file holds (a corrupt one can claim
/// gigabytes): the file's size is asked only for large claims, so normal reads cost no call.
fn claims_past_end(f: &File, pos: u64, h: &ChunkHeader) -> std::io::Result<bool> {
    Ok(h.total_len() > LARGE_CHUNK && pos.saturating_add(h.total_len()) > f.metadata()?.len())
}

/// Reads the chunk at `pos` whole: None when the bytes there are no complete chunk.
pub fn read_chunk_at(f: &File, pos: u64) -> std::io::Result<Option<(ChunkHeader, Vec<u8>)>> {
    let mut head = [0u8; HEADER_LEN];
    match f.read_exact_at(&mut head, pos) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let Ok(h) = ChunkHeader::decode(&head) else {
        return Ok(None);
    };
    if claims_past_end(f, pos, &h)? {
        return Ok(None);
    }
    let mut bytes = vec![0u8; h.total_len() as usize];
    match f.read_exact_at(&mut bytes, pos) {
        Ok(()) => Ok(Some((h, bytes))),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the header and Bloom filter of the chunk at `pos` (one read, two for a filter the
/// first did not reach): None when there is no chunk there. The data is not read, nor checked.
pub fn read_head_at(f: &File, pos: u64) -> std::io::Result<Option<(ChunkHeader, Vec<u8>)>> {
    let mut head = [0u8; HEADER_LEN + u8::MAX as usize];
    let n = loop {
        match f.read_at(&mut head, pos) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => break r?,
        }
    };
    let Some(Ok(h)) = head.get(..n).map(ChunkHeader::decode) else {
        return Ok(None);
    };
    if claims_past_end(f, pos, &h)? {
        return Ok(None);
    }
    let bloom_end = h.data_start();
    if n >= bloom_end {
        return Ok(Some((h, head[HEADER_LEN..bloom_end].to_vec())));
    }
    let mut bloom = vec![0u8; usize::from(h.bloom_len)];
    match f.read_exact_at(&mut bloom, pos + HEADER_LEN as u64) {
        Ok(()) => Ok(Some((h, bloom))),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// The trailer of the chunk at `pos`, when it has one (the header and the trailer are read,
/// not the data).
pub fn read_trailer(f: &File, pos: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = [0u8; HEADER_LEN];
    f.read_exact_at(&mut head, pos)?;
    let Ok(h) = ChunkHeader::decode(&head) else {
        return Ok(None);
    };
    if h.trailer_len == 0 || h.trailer_len > u32::from(u16::MAX) * 16 {
        return Ok(None);
    }
    let mut t = vec![0u8; h.trailer_len as usize];
    let at = pos + h.data_start() as u64 + u64::from(h.data_len);
    f.read_exact_at(&mut t, at)?;
    Ok(Some(t))
}

impl OpenSegment {
    /// A new, empty segment whose first chunk will be `first`.
    pub fn create(dir: &Path, first: u64) -> Result<OpenSegment, StreamLogError> {
        let (sp, ip) = (segment_path(dir, first), index_path(dir, first));
        let data = open_rw(&sp)?;
        data.set_len(0).map_err(io_err(&sp))?;
        data.write_all_at(&SEGMENT_MAGIC, 0).map_err(io_err(&sp))?;
        let index = open_rw(&ip)?;
        index.set_len(0).map_err(io_err(&ip))?;
        index.write_all_at(&INDEX_MAGIC, 0).map_err(io_err(&ip))?;
        Ok(OpenSegment {
            info: SegmentInfo {
                first_offset: first,
                next_offset: first,
                first_timestamp: None,
                last: None,
                size: SEGMENT_HEADER_LEN,
                chunks: 0,
            },
            data,
            index,
            zeroed: SEGMENT_HEADER_LEN,
        })
    }

    /// Opens the segment starting at `first` and repairs its tail (see the module note).
    pub fn recover(dir: &Path, first: u64) -> Result<OpenSegment, StreamLogError> {
        let (sp, ip) = (segment_path(dir, first), index_path(dir, first));
        let data = open_rw(&sp)?;
        check_magic(&data, &sp, &SEGMENT_MAGIC)?;
        let index = open_rw(&ip)?;
        check_magic(&index, &ip, &INDEX_MAGIC)?;
        let size = data.metadata().map_err(io_err(&sp))?.len();
        let index_len = index.metadata().map_err(io_err(&ip))?.len();

        // The last indexed chunk that is whole and intact.
        let mut n = index::count(index_len);
        let mut tail: Option<(IndexRecord, ChunkHeader)> = None;
        while n > 0 {
            let rec = index::read(&index, n - 1).map_err(io_err(&ip))?;
            let chunk = read_chunk_at(&data, u64::from(rec.pos)).map_err(io_err(&sp))?;
            if let Some((h, bytes)) = chunk {
                if h.first_offset == rec.chunk_id && h.verify(&bytes).is_ok() {
                    tail = Some((rec, h));
                    break;
                }
            }
            n -= 1;
        }
        let (mut pos, mut next) = match &tail {
            Some((rec, h)) => (u64::from(rec.pos) + h.total_len(), h.next_offset()),
            None => (SEGMENT_HEADER_LEN, first),
        };
        let mut last = tail.map(|(rec, _)| rec);

        // Chunks written after the last index record.
        let mut appended = Vec::new();
        while pos < size {
            let Some((h, bytes)) = read_chunk_at(&data, pos).map_err(io_err(&sp))? else {
                break;
            };
            if h.first_offset != next || h.verify(&bytes).is_err() || pos > u64::from(u32::MAX) {
                break;
            }
            let rec = IndexRecord::of(&h, pos as u32);
            appended.extend_from_slice(&rec.encode());
            last = Some(rec);
            pos += h.total_len();
            next = h.next_offset();
        }
        let chunks = n + appended.len() as u64 / index::RECORD_LEN;
        if pos < size {
            // A runway of zeros (see `RUNWAY`) is no damage.
            let mut head = [0u8; HEADER_LEN];
            let n = data.read_at(&mut head, pos).map_err(io_err(&sp))?;
            if head[..n].iter().any(|b| *b != 0) {
                tracing::warn!(
                    segment = %sp.display(),
                    kept = pos,
                    cut = size - pos,
                    "stream segment ends in a torn or corrupt chunk; cutting it off"
                );
            }
            data.set_len(pos).map_err(io_err(&sp))?;
            data.sync_all().map_err(io_err(&sp))?;
        }
        if index_len != index::len_for(n) || !appended.is_empty() {
            index.set_len(index::len_for(n)).map_err(io_err(&ip))?;
            index
                .write_all_at(&appended, index::len_for(n))
                .map_err(io_err(&ip))?;
        }
        let first_timestamp = if chunks > 0 {
            Some(index::read(&index, 0).map_err(io_err(&ip))?.timestamp)
        } else {
            None
        };
        Ok(OpenSegment {
            info: SegmentInfo {
                first_offset: first,
                next_offset: next,
                first_timestamp,
                last,
                size: pos,
                chunks,
            },
            data,
            index,
            zeroed: pos,
        })
    }

    /// Appends a finished chunk and its index record; a small one is written into a runway
    /// of zeros that stops at `max_size`, the size the segment is sealed at.
    pub fn append(
        &mut self,
        dir: &Path,
        h: &ChunkHeader,
        bytes: &[u8],
        max_size: u64,
    ) -> Result<(), StreamLogError> {
        let pos = self.info.size;
        let sp = segment_path(dir, self.info.first_offset);
        self.data.write_all_at(bytes, pos).map_err(io_err(&sp))?;
        let end = pos + bytes.len() as u64;
        self.zeroed = self.zeroed.max(end);
        let runway_end = (end + RUNWAY).min(max_size);
        if bytes.len() < SMALL_CHUNK && end + RUNWAY / 2 > self.zeroed {
            let mut at = self.zeroed;
            while at < runway_end {
                let n = ZEROS.len().min((runway_end - at) as usize);
                self.data
                    .write_all_at(&ZEROS[..n], at)
                    .map_err(io_err(&sp))?;
                at += n as u64;
            }
            self.zeroed = at;
        }
        let rec = IndexRecord::of(h, pos as u32);
        let ip = index_path(dir, self.info.first_offset);
        self.index
            .write_all_at(&rec.encode(), index::len_for(self.info.chunks))
            .map_err(io_err(&ip))?;
        self.info.size += bytes.len() as u64;
        self.info.chunks += 1;
        self.info.next_offset = h.next_offset();
        self.info.first_timestamp.get_or_insert(h.timestamp);
        self.info.last = Some(rec);
        Ok(())
    }

    /// Puts the segment's data on disk.
    pub fn sync(&self, dir: &Path) -> Result<(), StreamLogError> {
        let sp = segment_path(dir, self.info.first_offset);
        self.data.sync_data().map_err(io_err(&sp))
    }

    /// Cuts the runway of zeros off and puts data and index on disk (a segment being sealed).
    pub fn sync_all(&mut self, dir: &Path) -> Result<(), StreamLogError> {
        if self.zeroed > self.info.size {
            let sp = segment_path(dir, self.info.first_offset);
            self.data.set_len(self.info.size).map_err(io_err(&sp))?;
            self.zeroed = self.info.size;
        }
        self.sync(dir)?;
        let ip = index_path(dir, self.info.first_offset);
        self.index.sync_data().map_err(io_err(&ip))
    }
}
