//! What a stream remembers besides its messages, as osiris does: the last publishing id of
//! each deduplicating publisher, and consumers' stored offsets.
//!
//! - **Publisher sequences** travel in the trailer of the chunk that holds the publisher's
//!   records, so a sequence is on disk exactly when its messages are (a crash can never leave
//!   messages without their sequence, or the other way round). The first chunk of every
//!   segment carries every known publisher's sequence, so retention deleting old segments
//!   forgets none. A trailer is a run of entries: kind (0: publisher), a 16-bit length, the
//!   reference, the 64-bit sequence.
//! - **Stored offsets** (`StoreOffset`) are written to the stream's `offsets` file (magic
//!   `WOFS` version 1, then entries: a 16-bit length, the reference, the 64-bit offset),
//!   replaced atomically (written beside, synced, renamed) when they changed.

use super::{io_err, StreamLogError};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// Trailer entry kind of a publisher's sequence.
const WRITER: u8 = 0;

/// The offsets file's header.
const OFFSETS_MAGIC: [u8; 8] = *b"WOFS\0\0\0\x01";

/// Name of the offsets file in a stream's directory.
const OFFSETS_FILE: &str = "offsets";

fn put_entry(buf: &mut Vec<u8>, reference: &str, value: u64) {
    let r = &reference.as_bytes()[..reference.len().min(u16::MAX as usize)];
    buf.extend_from_slice(&(r.len() as u16).to_be_bytes());
    buf.extend_from_slice(r);
    buf.extend_from_slice(&value.to_be_bytes());
}

/// Reads entries (reference, value) from `b` until it ends or is malformed.
fn entries(mut b: &[u8], kinded: bool) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    loop {
        if kinded {
            match b.split_first() {
                Some((&WRITER, rest)) => b = rest,
                _ => return out,
            }
        }
        let Some(len) = b
            .get(..2)
            .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
        else {
            return out;
        };
        let (Some(r), Some(v)) = (b.get(2..2 + len), b.get(2 + len..2 + len + 8)) else {
            return out;
        };
        let mut value = [0u8; 8];
        value.copy_from_slice(v);
        if let Ok(r) = std::str::from_utf8(r) {
            out.push((r.to_owned(), u64::from_be_bytes(value)));
        }
        b = &b[2 + len + 8..];
    }
}

/// Appends the trailer of `writers` to `buf`; returns its length.
pub fn encode_writers(writers: &[(String, u64)], buf: &mut Vec<u8>) -> usize {
    let start = buf.len();
    for (r, seq) in writers {
        buf.push(WRITER);
        put_entry(buf, r, *seq);
    }
    buf.len() - start
}

/// The publishers' sequences in a chunk's trailer.
pub fn decode_writers(trailer: &[u8]) -> Vec<(String, u64)> {
    entries(trailer, true)
}

/// Reads the stored offsets of the stream in `dir` (none when it has no offsets file).
pub fn load_offsets(dir: &Path) -> Result<HashMap<String, u64>, StreamLogError> {
    let path = dir.join(OFFSETS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(io_err(&path)(e)),
    };
    match bytes.strip_prefix(&OFFSETS_MAGIC[..]) {
        Some(rest) => Ok(entries(rest, false).into_iter().collect()),
        None => Err(StreamLogError::Corrupt {
            path,
            why: "not an offsets file".into(),
        }),
    }
}

/// Replaces the stored offsets of the stream in `dir` with `offsets`.
pub fn save_offsets(dir: &Path, offsets: &[(String, u64)]) -> Result<(), StreamLogError> {
    let mut buf = OFFSETS_MAGIC.to_vec();
    for (r, o) in offsets {
        put_entry(&mut buf, r, *o);
    }
    let tmp = dir.join("offsets.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(&buf).map_err(io_err(&tmp))?;
    f.sync_data().map_err(io_err(&tmp))?;
    let path = dir.join(OFFSETS_FILE);
    std::fs::rename(&tmp, &path).map_err(io_err(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_and_offsets_round_trip() {
        let mut buf = b"data".to_vec();
        let w = vec![("p-1".to_owned(), 7), ("é".to_owned(), u64::MAX)];
        let n = encode_writers(&w, &mut buf);
        assert_eq!(n, buf.len() - 4);
        assert_eq!(decode_writers(&buf[4..]), w);
        // A torn trailer yields the entries before the tear.
        assert_eq!(decode_writers(&buf[4..buf.len() - 1]), w[..1].to_vec());
        let dir = tempfile::tempdir().expect("dir");
        assert!(load_offsets(dir.path()).expect("none").is_empty());
        save_offsets(dir.path(), &[("c".into(), 42)]).expect("saved");
        save_offsets(dir.path(), &[("c".into(), 43), ("d".into(), 1)]).expect("saved");
        let back = load_offsets(dir.path()).expect("loaded");
        assert_eq!(back.get("c"), Some(&43));
        assert_eq!(back.get("d"), Some(&1));
        std::fs::write(dir.path().join(OFFSETS_FILE), b"junk").expect("write");
        assert!(load_offsets(dir.path()).is_err());
    }
}
