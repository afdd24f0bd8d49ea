//! The log's behaviour: appends and reads across segments, every offset specification, a torn
//! or corrupt tail cut at recovery, an index ahead of or behind its segment, and retention.

use super::chunk::{ChunkBuilder, Entries, Entry};
use super::*;
use std::fs::OpenOptions;
use std::io::Write;

fn chunk_of(records: &[&str]) -> ChunkBuilder {
    let mut b = ChunkBuilder::default();
    for r in records {
        assert!(b.push_simple(r.as_bytes()));
    }
    b
}

fn small() -> LogOptions {
    LogOptions {
        max_segment_bytes: 300,
        epoch: 1,
    }
}

/// Every record from a reader, up to `committed`.
fn read_all(r: &mut LogReader, committed: u64) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    while let Some((h, bytes)) = r.next_chunk(committed).expect("read") {
        let data = &bytes[h.data_start()..h.data_start() + h.data_len as usize];
        for (offset, e) in (h.first_offset..).zip(Entries::new(data)) {
            match e.expect("entry") {
                Entry::Simple(b) => out.push((offset, String::from_utf8_lossy(b).into_owned())),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    out
}

/// Writes `n` chunks of two records ("m{offset}") at times 1000, 2000, ...
fn fill(log: &mut StreamLog, n: usize) {
    for i in 0..n {
        let o = log.next_offset();
        let (a, b) = (format!("m{o}"), format!("m{}", o + 1));
        log.append(chunk_of(&[&a, &b]), 1000 * (i as i64 + 1))
            .expect("append")
            .expect("a chunk");
    }
    log.sync().expect("sync");
}

#[test]
fn appends_roll_over_segments_and_read_back_in_order() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), small()).expect("open");
    fill(&mut log, 20);
    assert_eq!(log.next_offset(), 40);
    assert!(log.segments() > 3, "{} segments", log.segments());
    let mut r = log.reader(OffsetSpec::First).expect("reader");
    let all = read_all(&mut r, log.next_offset());
    assert_eq!(all.len(), 40);
    for (o, body) in &all {
        assert_eq!(body, &format!("m{o}"));
    }
    // A reader stops at what is committed and goes on when more is.
    let mut r = log.reader(OffsetSpec::First).expect("reader");
    assert_eq!(read_all(&mut r, 10).len(), 10);
    assert_eq!(read_all(&mut r, 40).len(), 30);
    fill(&mut log, 3);
    assert_eq!(read_all(&mut r, log.next_offset()).len(), 6);

    // Reopened, the log is the same.
    let size = log.size_bytes();
    drop(log);
    let log = StreamLog::open(dir.path(), small()).expect("reopen");
    assert_eq!((log.next_offset(), log.size_bytes()), (46, size));
    let mut r = log.reader(OffsetSpec::First).expect("reader");
    assert_eq!(read_all(&mut r, 46).len(), 46);
}

#[test]
fn chunks_left_in_their_files_match_the_chunks_read_whole() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), small()).expect("open");
    fill(&mut log, 12);
    let mut filtered = ChunkBuilder::default().with_filter_size(16);
    assert!(filtered.push_filtered(&[b"tagged"], Some(b"eu")));
    log.append(filtered, 99_000)
        .expect("append")
        .expect("a chunk");
    log.sync().expect("sync");
    let committed = log.next_offset();
    let mut whole = log.reader(OffsetSpec::First).expect("reader");
    let mut spans = log.reader(OffsetSpec::First).expect("reader");
    let (mut chunks, mut filters) = (0, 0);
    while let Some((h, bytes)) = whole.next_chunk(committed).expect("read") {
        let at = spans
            .next_chunk_at(committed)
            .expect("read")
            .expect("the same chunk");
        assert_eq!(at.header, h);
        assert_eq!(at.bloom, &bytes[chunk::HEADER_LEN..h.data_start()]);
        filters += usize::from(!at.bloom.is_empty());
        let mut data = Vec::new();
        at.data.read_into(&mut data).expect("data");
        assert_eq!(
            data,
            &bytes[h.data_start()..h.data_start() + h.data_len as usize]
        );
        chunks += 1;
    }
    assert_eq!(
        (chunks, filters),
        (13, 1),
        "across {} segments",
        log.segments()
    );
    assert!(spans.next_chunk_at(committed).expect("read").is_none());
    assert_eq!(spans.next_chunk_id(), committed);
}

#[test]
fn every_offset_specification_finds_its_chunk() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), small()).expect("open");
    let first = |log: &StreamLog, spec| {
        let mut r = log.reader(spec).expect("reader");
        read_all(&mut r, log.next_offset()).first().map(|(o, _)| *o)
    };
    assert_eq!(first(&log, OffsetSpec::First), None);
    assert_eq!(log.resolve(OffsetSpec::Last).expect("last").chunk_id, 0);
    fill(&mut log, 20);
    assert_eq!(first(&log, OffsetSpec::First), Some(0));
    assert_eq!(first(&log, OffsetSpec::Last), Some(38));
    assert_eq!(first(&log, OffsetSpec::Next), None);
    assert_eq!(log.resolve(OffsetSpec::Next).expect("next").chunk_id, 40);
    // An offset gives the chunk holding it.
    assert_eq!(first(&log, OffsetSpec::Offset(17)), Some(16));
    assert_eq!(first(&log, OffsetSpec::Offset(16)), Some(16));
    assert_eq!(first(&log, OffsetSpec::Offset(0)), Some(0));
    assert_eq!(first(&log, OffsetSpec::Offset(39)), Some(38));
    assert_eq!(first(&log, OffsetSpec::Offset(40)), None);
    assert_eq!(first(&log, OffsetSpec::Offset(1 << 40)), None);
    // A time gives the first chunk written then or later (chunk i was written at 1000 * (i+1)).
    assert_eq!(first(&log, OffsetSpec::Timestamp(0)), Some(0));
    assert_eq!(first(&log, OffsetSpec::Timestamp(7000)), Some(12));
    assert_eq!(first(&log, OffsetSpec::Timestamp(7001)), Some(14));
    assert_eq!(first(&log, OffsetSpec::Timestamp(20_000)), Some(38));
    assert_eq!(first(&log, OffsetSpec::Timestamp(20_001)), None);
    // Timestamps never go backwards, whatever the clock says.
    log.append(chunk_of(&["late"]), 5).expect("append");
    assert_eq!(log.last_chunk(), Some((40, 20_000)));
}

#[test]
fn a_torn_or_corrupt_tail_is_cut_at_recovery() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), LogOptions::default()).expect("open");
    fill(&mut log, 5);
    let good = log.size_bytes();
    log.append(chunk_of(&["torn-a", "torn-b"]), 9000)
        .expect("append");
    drop(log);
    let seg = segment_path(dir.path(), 0);
    // A crash in the middle of the last chunk's write.
    let f = OpenOptions::new().write(true).open(&seg).expect("open");
    f.set_len(good + 30).expect("truncate");
    drop(f);
    let mut log = StreamLog::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!((log.next_offset(), log.size_bytes()), (10, good));
    // Writing goes on where the intact log ended; the index agrees.
    fill(&mut log, 1);
    assert_eq!(
        first_record(&log, OffsetSpec::Last),
        Some((10, "m10".to_owned()))
    );

    // A flipped bit in the last chunk's data: its CRC fails, it goes.
    let before_last = log.size_bytes();
    log.append(chunk_of(&["flipped"]), 20_000).expect("append");
    log.sync().expect("sync");
    let end = log.size_bytes() as usize - 2;
    drop(log);
    let mut bytes = std::fs::read(&seg).expect("read");
    assert!(
        bytes.len() > end + 2,
        "small chunks are written into a runway of zeros"
    );
    bytes[end] ^= 0x10;
    std::fs::write(&seg, &bytes).expect("write");
    let log = StreamLog::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!((log.next_offset(), log.size_bytes()), (12, before_last));

    // A header claiming gigabytes that are not there is cut, without reading them.
    drop(log);
    let mut bogus = chunk_of(&["x"]).finish(12, 30_000, 1).1;
    bogus[36..40].copy_from_slice(&u32::MAX.to_be_bytes());
    let mut f = OpenOptions::new().append(true).open(&seg).expect("open");
    f.write_all(&bogus).expect("bogus");
    drop(f);
    let log = StreamLog::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!((log.next_offset(), log.size_bytes()), (12, before_last));

    // Garbage after the last chunk (a write that never finished its header) goes too.
    drop(log);
    let mut f = OpenOptions::new().append(true).open(&seg).expect("open");
    f.write_all(&[0x50, 0, 0]).expect("garbage");
    drop(f);
    let log = StreamLog::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(log.size_bytes(), before_last);
    assert_eq!(
        read_all(&mut log.reader(OffsetSpec::First).expect("r"), 12).len(),
        12
    );
}

#[test]
fn small_chunks_go_into_a_runway_of_zeros_that_sealing_and_reopening_cut() {
    let dir = tempfile::tempdir().expect("dir");
    let options = LogOptions {
        max_segment_bytes: 64 << 10,
        epoch: 1,
    };
    let file_len = |first| {
        std::fs::metadata(segment_path(dir.path(), first))
            .expect("segment")
            .len()
    };
    let mut log = StreamLog::open(dir.path(), options).expect("open");
    fill(&mut log, 3);
    assert_eq!(
        file_len(0),
        64 << 10,
        "zeros written ahead, up to the segment's size"
    );
    assert!(log.size_bytes() < 1000);
    // Enough to seal the first segment: it is cut to its chunks, the second has a runway.
    while log.segments() < 2 {
        fill(&mut log, 50);
    }
    let mut firsts: Vec<u64> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().to_string_lossy().into_owned();
            name.strip_suffix(".segment")?.parse().ok()
        })
        .collect();
    firsts.sort();
    let [sealed, active] = firsts[..] else {
        panic!("two segments: {firsts:?}");
    };
    let (next, size) = (log.next_offset(), log.size_bytes());
    assert_eq!(sealed, 0);
    let sealed_bytes = std::fs::read(segment_path(dir.path(), sealed)).expect("read");
    assert_ne!(
        sealed_bytes.last(),
        Some(&0),
        "a sealed segment ends with its last chunk"
    );
    assert!(file_len(sealed) + file_len(active) > size, "the runway");
    drop(log);
    // Reopening keeps every chunk and drops the zeros.
    let log = StreamLog::open(dir.path(), options).expect("reopen");
    assert_eq!((log.next_offset(), log.size_bytes()), (next, size));
    assert_eq!(file_len(sealed) + file_len(active), size);
    let all = read_all(&mut log.reader(OffsetSpec::First).expect("r"), next);
    assert_eq!(all.len() as u64, next);
    assert_eq!(all.last(), Some(&(next - 1, format!("m{}", next - 1))));
}

fn first_record(log: &StreamLog, spec: OffsetSpec) -> Option<(u64, String)> {
    let mut r = log.reader(spec).expect("reader");
    read_all(&mut r, log.next_offset()).into_iter().next()
}

#[test]
fn the_index_is_repaired_from_its_segment() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), LogOptions::default()).expect("open");
    fill(&mut log, 6);
    drop(log);
    let idx = index_path(dir.path(), 0);
    // Index behind the data (its last records and half of one lost): rebuilt from the data.
    let f = OpenOptions::new().write(true).open(&idx).expect("open");
    f.set_len(index::len_for(2) + 10).expect("truncate");
    drop(f);
    let log = StreamLog::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(log.next_offset(), 12);
    assert_eq!(
        first_record(&log, OffsetSpec::Offset(9)),
        Some((8, "m8".to_owned()))
    );
    assert_eq!(
        first_record(&log, OffsetSpec::Timestamp(6000)),
        Some((10, "m10".to_owned()))
    );
    drop(log);
    // Index ahead of the data (the data of the last two chunks lost): those records go.
    let seg = segment_path(dir.path(), 0);
    let rec = index::read(&std::fs::File::open(&idx).expect("idx"), 4).expect("record");
    let f = OpenOptions::new().write(true).open(&seg).expect("open");
    f.set_len(u64::from(rec.pos)).expect("truncate");
    drop(f);
    let mut log = StreamLog::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(log.next_offset(), 8);
    assert_eq!(
        index::count(std::fs::metadata(&idx).expect("meta").len()),
        4
    );
    fill(&mut log, 1);
    assert_eq!(
        first_record(&log, OffsetSpec::Last),
        Some((8, "m8".to_owned()))
    );
}

#[test]
fn retention_deletes_whole_old_segments_and_never_the_active_one() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), small()).expect("open");
    fill(&mut log, 30);
    let segments = log.segments();
    let per_segment = log.size_bytes() / segments as u64;
    // By size: down to what fits under the limit, whole segments at a time.
    let limit = log.size_bytes() / 2;
    let removed = log
        .apply_retention(Some(limit), None, 0)
        .expect("retention");
    assert!(removed > 0 && log.size_bytes() <= limit, "{removed}");
    assert!(log.size_bytes() + per_segment * 2 > limit);
    let first = log.first_offset();
    assert!(first > 0);
    assert!(!segment_path(dir.path(), 0).exists());
    // A reader asked for a deleted offset starts at the first kept.
    assert_eq!(
        first_record(&log, OffsetSpec::Offset(0)).map(|r| r.0),
        Some(first)
    );
    assert_eq!(
        first_record(&log, OffsetSpec::First).map(|r| r.0),
        Some(first)
    );
    // By age: every segment whose newest chunk is older goes, but not the active one.
    let removed = log
        .apply_retention(None, Some(1000), 1_000_000)
        .expect("retention");
    assert!(removed > 0);
    assert_eq!(log.segments(), 1);
    assert_eq!(log.next_offset(), 60);
    let reopened = {
        drop(log);
        StreamLog::open(dir.path(), small()).expect("reopen")
    };
    assert_eq!(reopened.segments(), 1);
    assert_eq!(reopened.next_offset(), 60);
}

#[test]
fn publisher_sequences_survive_reopening_and_retention() {
    let dir = tempfile::tempdir().expect("dir");
    let mut log = StreamLog::open(dir.path(), small()).expect("open");
    let mut c = chunk_of(&["a", "b"]);
    c.track_writer("app-1", 1);
    log.append(c, 1000).expect("append");
    let mut c = chunk_of(&["c"]);
    c.track_writer("app-2", 7);
    c.track_writer("app-2", 8);
    log.append(c, 1000).expect("append");
    // Later chunks (and segments) carry no word of app-1 but the snapshot at each roll.
    fill(&mut log, 30);
    assert!(log.segments() > 3);
    assert_eq!(log.writers().get("app-1"), Some(&1));
    assert_eq!(log.writers().get("app-2"), Some(&8));
    log.apply_retention(None, Some(1000), 1_000_000)
        .expect("retention");
    assert_eq!(log.segments(), 1, "every older segment deleted");
    drop(log);
    let log = StreamLog::open(dir.path(), small()).expect("reopen");
    assert_eq!(log.writers().get("app-1"), Some(&1));
    assert_eq!(log.writers().get("app-2"), Some(&8));
    // The trailers do not disturb readers.
    let mut r = log.reader(OffsetSpec::First).expect("reader");
    assert!(!read_all(&mut r, log.next_offset()).is_empty());
}
