//! A chunk, the unit a stream writes, indexes, replicates and reads: osiris's chunk format, so
//! the bytes on disk are the bytes RabbitMQ's stream protocol delivers. A 48-byte header (magic
//! and version, type, entry and record counts, timestamp, epoch, first offset, CRC-32 of the
//! data, data and trailer lengths, Bloom filter size), the Bloom filter, the data entries, the
//! trailer. A simple entry is a 31-bit length and a body (one record); a sub-batch entry
//! carries several records, maybe compressed, that the broker never opens.

use super::bloom::{BloomBuilder, DEFAULT_FILTER_SIZE};

/// Bytes in a chunk header.
pub const HEADER_LEN: usize = 48;

/// Magic 5 in the high nibble, chunk format version 0 in the low one.
const MAGIC_VERSION: u8 = 0x50;

/// First byte of a record holding an AMQP 0-9-1 message ([`super::record`]).
pub const AMQP_091: u8 = 0xA9;

/// The type of a chunk holding messages (others hold offset-tracking state).
pub const CHUNK_USER: u8 = 0;

/// Why bytes are not a chunk.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// Fewer bytes than the header or the lengths it states.
    #[error("chunk truncated")]
    Truncated,
    /// The first byte is not osiris's magic and version.
    #[error("bad chunk magic {0:#04x}")]
    Magic(u8),
    /// The data does not match the header's CRC.
    #[error("chunk CRC mismatch")]
    Crc,
    /// The data entries do not add up to the header's counts.
    #[error("malformed chunk entries")]
    Entries,
}

/// A decoded chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// [`CHUNK_USER`] or a tracking type.
    pub chunk_type: u8,
    /// Data entries.
    pub num_entries: u16,
    /// Records (messages) in those entries.
    pub num_records: u32,
    /// Milliseconds since the Unix epoch when it was written.
    pub timestamp: i64,
    /// The writer's epoch (the leader's term once streams replicate).
    pub epoch: u64,
    /// The offset of its first record (the chunk id).
    pub first_offset: u64,
    /// CRC-32 of the data entries.
    pub crc: u32,
    /// Bytes of data entries.
    pub data_len: u32,
    /// Bytes of trailer.
    pub trailer_len: u32,
    /// Bytes of Bloom filter after the header.
    pub bloom_len: u8,
    /// No record in it is an AMQP 0-9-1 message (tag [`AMQP_091`]), so stream-protocol
    /// readers take its data as it is on disk. Kept in the first reserved byte (osiris writes
    /// 0 there, as readers are sent): a chunk without it is checked record by record.
    pub verbatim: bool,
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl ChunkHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = MAGIC_VERSION;
        h[1] = self.chunk_type;
        h[2..4].copy_from_slice(&self.num_entries.to_be_bytes());
        h[4..8].copy_from_slice(&self.num_records.to_be_bytes());
        h[8..16].copy_from_slice(&self.timestamp.to_be_bytes());
        h[16..24].copy_from_slice(&self.epoch.to_be_bytes());
        h[24..32].copy_from_slice(&self.first_offset.to_be_bytes());
        h[32..36].copy_from_slice(&self.crc.to_be_bytes());
        h[36..40].copy_from_slice(&self.data_len.to_be_bytes());
        h[40..44].copy_from_slice(&self.trailer_len.to_be_bytes());
        h[44] = self.bloom_len;
        h[45] = u8::from(self.verbatim);
        h
    }

    /// Reads a header from the first [`HEADER_LEN`] bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<ChunkHeader, ChunkError> {
        if b.len() < HEADER_LEN {
            return Err(ChunkError::Truncated);
        }
        if b[0] != MAGIC_VERSION {
            return Err(ChunkError::Magic(b[0]));
        }
        Ok(ChunkHeader {
            chunk_type: b[1],
            num_entries: u16::from_be_bytes([b[2], b[3]]),
            num_records: be_u32(b, 4),
            timestamp: be_u64(b, 8) as i64,
            epoch: be_u64(b, 16),
            first_offset: be_u64(b, 24),
            crc: be_u32(b, 32),
            data_len: be_u32(b, 36),
            trailer_len: be_u32(b, 40),
            bloom_len: b[44],
            verbatim: b[45] & 1 == 1,
        })
    }

    /// Bytes of the whole chunk, header included.
    pub fn total_len(&self) -> u64 {
        HEADER_LEN as u64
            + u64::from(self.bloom_len)
            + u64::from(self.data_len)
            + u64::from(self.trailer_len)
    }

    /// The offset after its last record.
    pub fn next_offset(&self) -> u64 {
        self.first_offset + u64::from(self.num_records)
    }

    /// Where the data entries start in the chunk's bytes.
    pub fn data_start(&self) -> usize {
        HEADER_LEN + usize::from(self.bloom_len)
    }

    /// Checks a whole chunk's bytes (header first) against this header: length, CRC, and that
    /// its entries add up to its counts.
    pub fn verify(&self, chunk: &[u8]) -> Result<(), ChunkError> {
        if (chunk.len() as u64) < self.total_len() {
            return Err(ChunkError::Truncated);
        }
        let data = &chunk[self.data_start()..self.data_start() + self.data_len as usize];
        if crc32fast::hash(data) != self.crc {
            return Err(ChunkError::Crc);
        }
        let (mut entries, mut records) = (0u32, 0u64);
        for e in Entries::new(data) {
            entries += 1;
            records += u64::from(e?.records());
        }
        if entries != u32::from(self.num_entries) || records != u64::from(self.num_records) {
            return Err(ChunkError::Entries);
        }
        Ok(())
    }
}

/// A data entry.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// One record.
    Simple(&'a [u8]),
    /// Several records in one body, maybe compressed (`compression` is osiris's 3-bit code).
    SubBatch {
        /// Compression type (0: none).
        compression: u8,
        /// Records in the body.
        records: u16,
        /// The body's length uncompressed.
        uncompressed_len: u32,
        /// The body as written.
        body: &'a [u8],
    },
}

impl Entry<'_> {
    /// How many records (offsets) the entry holds.
    pub fn records(&self) -> u32 {
        match self {
            Entry::Simple(_) => 1,
            Entry::SubBatch { records, .. } => u32::from(*records),
        }
    }
}

/// The entries of a chunk's data section, in order.
pub struct Entries<'a> {
    data: &'a [u8],
}

impl<'a> Entries<'a> {
    /// Iterates over `data` (a chunk's data section).
    pub fn new(data: &'a [u8]) -> Self {
        Entries { data }
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, ChunkError>;

    fn next(&mut self) -> Option<Self::Item> {
        let d = self.data;
        let first = *d.first()?;
        let (entry, used) = if first & 0x80 == 0 {
            if d.len() < 4 {
                return Some(Err(ChunkError::Entries));
            }
            let len = (be_u32(d, 0) & 0x7fff_ffff) as usize;
            match d.get(4..4 + len) {
                Some(body) => (Entry::Simple(body), 4 + len),
                None => return Some(Err(ChunkError::Entries)),
            }
        } else {
            if d.len() < 11 {
                return Some(Err(ChunkError::Entries));
            }
            let records = u16::from_be_bytes([d[1], d[2]]);
            let uncompressed_len = be_u32(d, 3);
            let len = be_u32(d, 7) as usize;
            match d.get(11..11 + len) {
                Some(body) => (
                    Entry::SubBatch {
                        compression: (first >> 4) & 0x7,
                        records,
                        uncompressed_len,
                        body,
                    },
                    11 + len,
                ),
                None => return Some(Err(ChunkError::Entries)),
            }
        };
        self.data = &d[used..];
        Some(Ok(entry))
    }
}

/// Builds a user chunk from entries: the header's place is kept at the front of one buffer,
/// so a finished chunk is written with one call.
pub struct ChunkBuilder {
    buf: Vec<u8>,
    entries: u16,
    records: u32,
    /// The last publishing id of each deduplicating publisher with records in the chunk,
    /// written as the chunk's trailer ([`super::tracking`]).
    writers: Vec<(String, u64)>,
    /// The filter values of its entries ([`super::bloom`]).
    bloom: BloomBuilder,
    /// Whether a record is an AMQP 0-9-1 message ([`ChunkHeader::verbatim`]).
    has_091: bool,
}

impl Default for ChunkBuilder {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl ChunkBuilder {
    /// An empty chunk with room for `bytes` of entries.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(HEADER_LEN + bytes);
        buf.resize(HEADER_LEN, 0);
        ChunkBuilder {
            buf,
            entries: 0,
            records: 0,
            writers: Vec::new(),
            bloom: BloomBuilder::new(DEFAULT_FILTER_SIZE),
            has_091: false,
        }
    }

    /// The same, with a Bloom filter of `size` bytes when entries have filter values.
    pub fn with_filter_size(mut self, size: u8) -> Self {
        self.bloom = BloomBuilder::new(size);
        self
    }

    /// Whether another entry of `len` bytes still fits (16-bit entry count, 31-bit lengths).
    pub fn fits(&self, len: usize) -> bool {
        self.entries < u16::MAX
            && len <= 0x7fff_ffff
            && self.buf.len() + len + 11 <= u32::MAX as usize
    }

    /// Appends a one-record entry; false (and nothing added) when it does not fit.
    pub fn push_simple(&mut self, body: &[u8]) -> bool {
        self.push_simple_parts(&[body])
    }

    /// Appends a one-record entry whose body is `parts` one after the other.
    pub fn push_simple_parts(&mut self, parts: &[&[u8]]) -> bool {
        self.push_filtered(parts, None)
    }

    /// Appends a one-record entry of `parts` with filter value `filter` (None: unfiltered).
    pub fn push_filtered(&mut self, parts: &[&[u8]], filter: Option<&[u8]>) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if !self.fits(len) {
            return false;
        }
        self.bloom.add(filter);
        self.has_091 |= parts.iter().find_map(|p| p.first()) == Some(&AMQP_091);
        self.buf.extend_from_slice(&(len as u32).to_be_bytes());
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.entries += 1;
        self.records += 1;
        true
    }

    /// Appends a sub-batch entry as a client sent it; false when it does not fit.
    pub fn push_sub_batch(
        &mut self,
        compression: u8,
        records: u16,
        uncompressed_len: u32,
        body: &[u8],
    ) -> bool {
        if !self.fits(body.len()) {
            return false;
        }
        self.bloom.add(None);
        self.buf.push(0x80 | ((compression & 0x7) << 4));
        self.buf.extend_from_slice(&records.to_be_bytes());
        self.buf.extend_from_slice(&uncompressed_len.to_be_bytes());
        self.buf
            .extend_from_slice(&(body.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(body);
        self.entries += 1;
        self.records += u32::from(records);
        true
    }

    /// Notes that publisher `reference` (deduplicating by publishing id) has published up to
    /// `seq` with this chunk.
    pub fn track_writer(&mut self, reference: &str, seq: u64) {
        match self.writers.iter_mut().find(|(r, _)| r == reference) {
            Some((_, s)) => *s = seq,
            None => self.writers.push((reference.to_owned(), seq)),
        }
    }

    /// Notes publisher `reference` at `seq` unless the chunk already has a later word on it.
    pub fn track_writer_if_absent(&mut self, reference: &str, seq: u64) {
        if !self.writers.iter().any(|(r, _)| r == reference) {
            self.writers.push((reference.to_owned(), seq));
        }
    }

    /// The publishers' sequences the chunk's trailer will hold.
    pub fn writers(&self) -> &[(String, u64)] {
        &self.writers
    }

    /// Records so far.
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Bytes of entries so far.
    pub fn data_len(&self) -> usize {
        self.buf.len() - HEADER_LEN
    }

    /// The whole chunk, its header filled in.
    pub fn finish(
        mut self,
        first_offset: u64,
        timestamp: i64,
        epoch: u64,
    ) -> (ChunkHeader, Vec<u8>) {
        let data_len = self.data_len() as u32;
        let crc = crc32fast::hash(&self.buf[HEADER_LEN..]);
        let trailer_len = super::tracking::encode_writers(&self.writers, &mut self.buf) as u32;
        let bloom = std::mem::take(&mut self.bloom).finish();
        let bloom_len = bloom.len() as u8;
        if !bloom.is_empty() {
            self.buf.splice(HEADER_LEN..HEADER_LEN, bloom);
        }
        let header = ChunkHeader {
            chunk_type: CHUNK_USER,
            num_entries: self.entries,
            num_records: self.records,
            timestamp,
            epoch,
            first_offset,
            crc,
            data_len,
            trailer_len,
            bloom_len,
            verbatim: !self.has_091,
        };
        self.buf[..HEADER_LEN].copy_from_slice(&header.encode());
        (header, self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_round_trips_and_is_checked() {
        let mut b = ChunkBuilder::default();
        assert!(b.push_simple(b"one"));
        assert!(b.push_sub_batch(2, 3, 100, b"zipped"));
        assert!(b.push_simple(b""));
        let (h, bytes) = b.finish(40, 1_700_000_000_000, 7);
        assert_eq!((h.num_entries, h.num_records, h.next_offset()), (3, 5, 45));
        assert_eq!(bytes.len() as u64, h.total_len());
        let back = ChunkHeader::decode(&bytes).expect("header");
        assert_eq!(back, h);
        back.verify(&bytes).expect("valid");
        let data = &bytes[h.data_start()..];
        let entries: Vec<_> = Entries::new(data).map(|e| e.expect("entry")).collect();
        assert_eq!(entries[0], Entry::Simple(b"one"));
        assert_eq!(
            entries[1],
            Entry::SubBatch {
                compression: 2,
                records: 3,
                uncompressed_len: 100,
                body: b"zipped"
            }
        );
        assert_eq!(entries[2], Entry::Simple(b""));

        let mut torn = bytes.clone();
        torn.pop();
        assert_eq!(back.verify(&torn), Err(ChunkError::Truncated));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(back.verify(&flipped), Err(ChunkError::Crc));
        let mut bad = bytes;
        bad[0] = 0;
        assert_eq!(ChunkHeader::decode(&bad), Err(ChunkError::Magic(0)));
    }

    #[test]
    fn a_chunk_says_whether_stream_readers_can_take_it_as_it_is() {
        let mut plain = ChunkBuilder::default();
        assert!(plain.push_simple(&[0x00, 0x53, 0x75]));
        assert!(plain.push_sub_batch(0, 2, 4, &[AMQP_091, 1, 2, 3]));
        let (h, bytes) = plain.finish(0, 1, 1);
        assert!(
            h.verbatim,
            "AMQP 1.0 records and sub-batches are delivered as written"
        );
        assert_eq!(bytes[45], 1);
        assert!(ChunkHeader::decode(&bytes).expect("header").verbatim);

        let mut mixed = ChunkBuilder::default();
        assert!(mixed.push_simple(&[0x00, 0x53]));
        assert!(mixed.push_simple_parts(&[&[], &[AMQP_091, 0], b"rest"]));
        let (h, bytes) = mixed.finish(0, 1, 1);
        assert!(!h.verbatim, "an AMQP 0-9-1 record must be converted");
        assert_eq!(&bytes[45..48], &[0, 0, 0], "osiris's reserved bytes");
    }

    #[test]
    fn a_chunk_with_filter_values_carries_its_bloom_filter_before_the_data() {
        use super::super::bloom::BloomMatcher;
        let mut b = ChunkBuilder::default().with_filter_size(32);
        assert!(b.push_filtered(&[b"eu-", b"1"], Some(b"eu")));
        assert!(b.push_simple(b"plain"));
        b.track_writer("p", 3);
        let (h, bytes) = b.finish(10, 1, 1);
        assert_eq!(h.bloom_len, 32);
        assert_eq!(bytes.len() as u64, h.total_len());
        h.verify(&bytes).expect("valid");
        let filter = &bytes[HEADER_LEN..h.data_start()];
        let m = |v: &[u8], unfiltered| BloomMatcher {
            values: vec![v.to_vec()],
            match_unfiltered: unfiltered,
        };
        assert!(m(b"eu", false).matches(filter));
        assert!(m(b"zz", true).matches(filter), "it has unfiltered entries");
        let data = &bytes[h.data_start()..h.data_start() + h.data_len as usize];
        let entries: Vec<_> = Entries::new(data).map(|e| e.expect("entry")).collect();
        assert_eq!(
            entries,
            vec![Entry::Simple(b"eu-1"), Entry::Simple(b"plain")]
        );
        // Without filter values there is no filter.
        let mut plain = ChunkBuilder::default();
        assert!(plain.push_simple(b"x"));
        assert_eq!(plain.finish(0, 1, 1).0.bloom_len, 0);
    }
}
