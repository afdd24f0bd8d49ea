//! Stream storage: an append-only log of chunks in segment files, the storage design #19 asks
//! for and Kafka, osiris and LavinMQ share. Appends are sequential writes of whole chunks (a
//! chunk is a batch of messages; its bytes are osiris's chunk format, which RabbitMQ's stream
//! protocol delivers as they are); a confirm waits for [`StreamLog::sync`], one `fdatasync`
//! for every chunk written since the last (group commit). Each segment has a sparse index
//! (one record per chunk) searched on disk, so attaching at an offset or a time costs a few
//! positioned reads and memory does not grow with the log. Retention deletes whole segments,
//! oldest first, never the one being written. Readers open the files themselves and read
//! through the page cache; a reader at the end of a segment moves on to the segment named by
//! the offset it needs next, so it never needs the log's segment list.
//!
//! Only `store/` touches these files; the stream queue owns one [`StreamLog`].

pub mod bloom;
pub mod chunk;
pub mod index;
pub mod record;
mod segment;
mod span;
pub mod tracking;

use chunk::{ChunkBuilder, ChunkHeader};
use segment::{index_path, segment_path, OpenSegment, SegmentInfo, SEGMENT_HEADER_LEN};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use span::FileSpan;

/// Why the log could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StreamLogError {
    /// A read, write or sync failed.
    #[error("stream file {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        cause: String,
    },
    /// A file is not what the log wrote.
    #[error("stream file {path}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// How a log is kept.
#[derive(Debug, Clone, Copy)]
pub struct LogOptions {
    /// A segment is sealed and a new one started before a chunk would take it past this
    /// (`x-stream-max-segment-size-bytes`; at most 4 GiB, the index's positions are 32-bit).
    pub max_segment_bytes: u64,
    /// Written into every chunk (the leader's term once streams replicate).
    pub epoch: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            max_segment_bytes: 500_000_000,
            epoch: 0,
        }
    }
}

/// Where a reader starts (`x-stream-offset`, the stream protocol's offset specification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The oldest chunk kept.
    First,
    /// The newest chunk written.
    Last,
    /// What is written from now on.
    Next,
    /// The chunk holding this offset (the first kept when it is older, `Next` when it is not
    /// written yet); the reader skips the records before it.
    Offset(u64),
    /// The first chunk written at or after this time (ms since the Unix epoch).
    Timestamp(i64),
}

/// Where in the log a reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The segment (its first offset).
    pub segment: u64,
    /// Byte position of the next chunk in it.
    pub pos: u64,
    /// The offset of the next chunk.
    pub chunk_id: u64,
}

/// An append-only log of chunks in a directory.
pub struct StreamLog {
    dir: PathBuf,
    options: LogOptions,
    sealed: VecDeque<SegmentInfo>,
    active: OpenSegment,
    last_timestamp: i64,
    /// The last publishing id of each deduplicating publisher, as the chunks' trailers say.
    writers: HashMap<String, u64>,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StreamLogError + '_ {
    move |e| StreamLogError::Io {
        path: path.to_owned(),
        cause: e.to_string(),
    }
}

impl StreamLog {
    /// Opens (or creates) the log in `dir`, repairing a torn tail.
    pub fn open(dir: &Path, options: LogOptions) -> Result<StreamLog, StreamLogError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let mut firsts = Vec::new();
        for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let name = e.map_err(io_err(dir))?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = name
                .strip_suffix(".segment")
                .and_then(|s| s.parse::<u64>().ok())
            {
                firsts.push(n);
            }
        }
        firsts.sort_unstable();
        let mut sealed = VecDeque::new();
        let mut active = None;
        for (i, first) in firsts.iter().enumerate() {
            let s = OpenSegment::recover(dir, *first)?;
            if i + 1 == firsts.len() {
                active = Some(s);
            } else {
                sealed.push_back(s.info);
            }
        }
        let active = match active {
            Some(a) => a,
            None => OpenSegment::create(dir, 0)?,
        };
        let last_timestamp = active
            .info
            .last
            .or_else(|| sealed.back().and_then(|s| s.last))
            .map_or(0, |r| r.timestamp);
        let mut options = options;
        options.max_segment_bytes = options.max_segment_bytes.clamp(1, u64::from(u32::MAX));
        let mut log = StreamLog {
            dir: dir.to_owned(),
            options,
            sealed,
            active,
            last_timestamp,
            writers: HashMap::new(),
        };
        log.writers = log.scan_writers()?;
        Ok(log)
    }

    /// Reads the publishers' sequences from the trailers of every chunk kept (two positioned
    /// reads per chunk that has a trailer).
    fn scan_writers(&self) -> Result<HashMap<String, u64>, StreamLogError> {
        let mut writers = HashMap::new();
        let segments = self.sealed.iter().chain(std::iter::once(&self.active.info));
        for s in segments.filter(|s| s.chunks > 0) {
            let sp = segment_path(&self.dir, s.first_offset);
            let data = File::open(&sp).map_err(io_err(&sp))?;
            let trailers = self.with_index(s, |idx| {
                let mut out = Vec::new();
                for i in 0..s.chunks {
                    let r = index::read(idx, i)?;
                    if let Some(t) = segment::read_trailer(&data, u64::from(r.pos))? {
                        out.push(t);
                    }
                }
                Ok(out)
            })?;
            for t in trailers {
                for (r, seq) in tracking::decode_writers(&t) {
                    writers.insert(r, seq);
                }
            }
        }
        Ok(writers)
    }

    /// The last publishing id of each deduplicating publisher whose messages are in the log.
    pub fn writers(&self) -> &HashMap<String, u64> {
        &self.writers
    }

    /// The offsets consumers stored (`StoreOffset`), as last saved.
    pub fn stored_offsets(&self) -> Result<HashMap<String, u64>, StreamLogError> {
        tracking::load_offsets(&self.dir)
    }

    /// Saves the offsets consumers stored, replacing what was saved.
    pub fn save_offsets(&self, offsets: &[(String, u64)]) -> Result<(), StreamLogError> {
        tracking::save_offsets(&self.dir, offsets)
    }

    /// The directory the log lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The offset the next record gets.
    pub fn next_offset(&self) -> u64 {
        self.active.info.next_offset
    }

    /// The oldest offset kept.
    pub fn first_offset(&self) -> u64 {
        self.sealed
            .front()
            .map_or(self.active.info.first_offset, |s| s.first_offset)
    }

    /// The newest chunk's first offset and timestamp, if any chunk is kept.
    pub fn last_chunk(&self) -> Option<(u64, i64)> {
        self.active
            .info
            .last
            .or_else(|| self.sealed.back().and_then(|s| s.last))
            .map(|r| (r.chunk_id, r.timestamp))
    }

    /// The oldest kept chunk's timestamp.
    pub fn first_timestamp(&self) -> Option<i64> {
        self.sealed
            .iter()
            .chain(std::iter::once(&self.active.info))
            .find_map(|s| s.first_timestamp)
    }

    /// Bytes on disk in segment files.
    pub fn size_bytes(&self) -> u64 {
        self.sealed.iter().map(|s| s.size).sum::<u64>() + self.active.info.size
    }

    /// Segments kept, the one being written included.
    pub fn segments(&self) -> usize {
        self.sealed.len() + 1
    }

    /// Writes a chunk of the builder's entries stamped `now_ms` (or the previous chunk's time
    /// if the clock went back), starting a new segment first when it would not fit. The data
    /// is in the page cache, not yet on disk: see [`StreamLog::sync`]. None when the builder
    /// is empty.
    pub fn append(
        &mut self,
        mut chunk: ChunkBuilder,
        now_ms: i64,
    ) -> Result<Option<ChunkHeader>, StreamLogError> {
        if chunk.is_empty() {
            return Ok(None);
        }
        let total = (chunk::HEADER_LEN + chunk.data_len()) as u64;
        if self.active.info.chunks > 0
            && self.active.info.size + total > self.options.max_segment_bytes
        {
            self.roll()?;
        }
        if self.active.info.chunks == 0 {
            // A segment's first chunk carries every publisher's sequence (see `tracking`).
            for (r, seq) in &self.writers {
                chunk.track_writer_if_absent(r, *seq);
            }
        }
        for (r, seq) in chunk.writers() {
            self.writers.insert(r.clone(), *seq);
        }
        let timestamp = now_ms.max(self.last_timestamp);
        let (h, bytes) = chunk.finish(self.next_offset(), timestamp, self.options.epoch);
        let max = self.options.max_segment_bytes;
        self.active.append(&self.dir, &h, &bytes, max)?;
        self.last_timestamp = timestamp;
        Ok(Some(h))
    }

    /// Seals the segment being written (on disk, data and index) and starts the next.
    fn roll(&mut self) -> Result<(), StreamLogError> {
        self.active.sync_all(&self.dir)?;
        let next = OpenSegment::create(&self.dir, self.next_offset())?;
        let old = std::mem::replace(&mut self.active, next);
        self.sealed.push_back(old.info);
        Ok(())
    }

    /// Puts everything appended so far on disk (what a confirm waits for).
    pub fn sync(&self) -> Result<(), StreamLogError> {
        self.active.sync(&self.dir)
    }

    /// Where a reader asking for `spec` starts.
    pub fn resolve(&self, spec: OffsetSpec) -> Result<Position, StreamLogError> {
        let next = Position {
            segment: self.active.info.first_offset,
            pos: self.active.info.size,
            chunk_id: self.next_offset(),
        };
        let segments = || self.sealed.iter().chain(std::iter::once(&self.active.info));
        let at = |s: &SegmentInfo, r: index::IndexRecord| Position {
            segment: s.first_offset,
            pos: u64::from(r.pos),
            chunk_id: r.chunk_id,
        };
        match spec {
            OffsetSpec::Next => Ok(next),
            OffsetSpec::First => Ok(segments()
                .find(|s| s.chunks > 0)
                .map_or(next, |s| Position {
                    segment: s.first_offset,
                    pos: SEGMENT_HEADER_LEN,
                    chunk_id: s.first_offset,
                })),
            OffsetSpec::Last => Ok(segments()
                .rev()
                .find_map(|s| s.last.map(|r| at(s, r)))
                .unwrap_or(next)),
            OffsetSpec::Offset(o) if o >= self.next_offset() => Ok(next),
            OffsetSpec::Offset(o) if o < self.first_offset() => self.resolve(OffsetSpec::First),
            OffsetSpec::Offset(o) => {
                let Some(s) = segments()
                    .rev()
                    .find(|s| s.first_offset <= o && s.chunks > 0)
                else {
                    return self.resolve(OffsetSpec::First);
                };
                let found = self.with_index(s, |f| index::chunk_at_or_before(f, s.chunks, o))?;
                Ok(found.map_or(next, |r| at(s, r)))
            }
            OffsetSpec::Timestamp(t) => {
                let Some(s) = segments().find(|s| s.last.is_some_and(|r| r.timestamp >= t)) else {
                    return Ok(next);
                };
                let found = self.with_index(s, |f| index::first_at_or_after(f, s.chunks, t))?;
                Ok(found.map_or(next, |r| at(s, r)))
            }
        }
    }

    fn with_index<T>(
        &self,
        s: &SegmentInfo,
        f: impl FnOnce(&File) -> std::io::Result<T>,
    ) -> Result<T, StreamLogError> {
        let path = index_path(&self.dir, s.first_offset);
        if s.first_offset == self.active.info.first_offset {
            return f(&self.active.index).map_err(io_err(&path));
        }
        let file = File::open(&path).map_err(io_err(&path))?;
        f(&file).map_err(io_err(&path))
    }

    /// A reader from `spec`.
    pub fn reader(&self, spec: OffsetSpec) -> Result<LogReader, StreamLogError> {
        let at = self.resolve(spec)?;
        LogReader::open(&self.dir, at)
    }

    /// Deletes whole segments, oldest first and never the one being written, while the log is
    /// larger than `max_bytes` or the segment's newest chunk is older than `max_age_ms`.
    /// Returns how many went.
    pub fn apply_retention(
        &mut self,
        max_bytes: Option<u64>,
        max_age_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<usize, StreamLogError> {
        let mut removed = 0;
        while let Some(s) = self.sealed.front() {
            let too_big = max_bytes.is_some_and(|m| self.size_bytes() > m);
            let too_old = max_age_ms.is_some_and(|age| {
                s.last
                    .is_none_or(|r| r.timestamp < now_ms.saturating_sub(age))
            });
            if !too_big && !too_old {
                break;
            }
            let (sp, ip) = (
                segment_path(&self.dir, s.first_offset),
                index_path(&self.dir, s.first_offset),
            );
            std::fs::remove_file(&sp).map_err(io_err(&sp))?;
            std::fs::remove_file(&ip).map_err(io_err(&ip))?;
            self.sealed.pop_front();
            removed += 1;
        }
        Ok(removed)
    }

    /// Deletes the log's files and directory.
    pub fn destroy(self) -> Result<(), StreamLogError> {
        let dir = self.dir.clone();
        drop(self);
        std::fs::remove_dir_all(&dir).map_err(io_err(&dir))
    }
}

/// Reads chunks in order from a position, on its own file handles.
pub struct LogReader {
    dir: PathBuf,
    file: Arc<File>,
    at: Position,
}

/// A chunk as [`LogReader::next_chunk_at`] finds it: its header and Bloom filter read, its
/// data left where it lies.
pub struct ChunkAt {
    /// Its header.
    pub header: ChunkHeader,
    /// Its Bloom filter (empty when it has none).
    pub bloom: Vec<u8>,
    /// Its data entries.
    pub data: FileSpan,
}

impl LogReader {
    fn open(dir: &Path, at: Position) -> Result<LogReader, StreamLogError> {
        let path = segment_path(dir, at.segment);
        let file = File::open(&path).map_err(io_err(&path))?;
        Ok(LogReader {
            dir: dir.to_owned(),
            file: Arc::new(file),
            at,
        })
    }

    /// The offset of the next chunk this reader returns.
    pub fn next_chunk_id(&self) -> u64 {
        self.at.chunk_id
    }

    /// The next whole chunk (header and bytes, header first) that ends at or before
    /// `committed` (the offset after the last synced record: nothing later is handed out);
    /// None when there is none yet.
    pub fn next_chunk(
        &mut self,
        committed: u64,
    ) -> Result<Option<(ChunkHeader, Vec<u8>)>, StreamLogError> {
        self.advance(committed, segment::read_chunk_at)
    }

    /// The same chunk as [`LogReader::next_chunk`], its data not read: for a reader that
    /// passes the data on (to a socket) rather than looks into it.
    pub fn next_chunk_at(&mut self, committed: u64) -> Result<Option<ChunkAt>, StreamLogError> {
        let found = self.advance(committed, segment::read_head_at)?;
        Ok(found.map(|(header, bloom)| {
            // The chunk was read from the reader's current file and it stepped past it.
            let pos = self.at.pos - header.total_len() + header.data_start() as u64;
            let data = FileSpan::new(self.file.clone(), pos, header.data_len as usize);
            ChunkAt {
                header,
                bloom,
                data,
            }
        }))
    }

    /// Reads the next chunk with `read` (header first), checks it is the offset expected,
    /// and steps past it, into the next segment at the end of one.
    fn advance<T>(
        &mut self,
        committed: u64,
        read: impl Fn(&File, u64) -> std::io::Result<Option<(ChunkHeader, T)>>,
    ) -> Result<Option<(ChunkHeader, T)>, StreamLogError> {
        loop {
            if self.at.chunk_id >= committed {
                return Ok(None);
            }
            let path = segment_path(&self.dir, self.at.segment);
            match read(&self.file, self.at.pos).map_err(io_err(&path))? {
                Some((h, found)) if h.next_offset() <= committed => {
                    if h.first_offset != self.at.chunk_id {
                        return Err(StreamLogError::Corrupt {
                            path,
                            why: format!(
                                "chunk at {} is offset {}, expected {}",
                                self.at.pos, h.first_offset, self.at.chunk_id
                            ),
                        });
                    }
                    self.at.pos += h.total_len();
                    self.at.chunk_id = h.next_offset();
                    return Ok(Some((h, found)));
                }
                Some(_) => return Ok(None),
                None => {
                    // The end of this segment: the next one is named by the offset we need.
                    let next = segment_path(&self.dir, self.at.chunk_id);
                    if self.at.segment == self.at.chunk_id || !next.exists() {
                        return Ok(None);
                    }
                    self.file = Arc::new(File::open(&next).map_err(io_err(&next))?);
                    self.at.segment = self.at.chunk_id;
                    self.at.pos = SEGMENT_HEADER_LEN;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
