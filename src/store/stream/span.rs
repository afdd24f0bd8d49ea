//! A chunk's data where it lies in a segment file, handed from a stream's task to the
//! connection that delivers it: the connection reads it (TLS, small chunks) or has the kernel
//! send it from the page cache to the socket (`sendfile`), so the bytes never pass through
//! userspace. The span holds the segment file open, so retention deleting the segment meanwhile
//! leaves the bytes readable.

use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Bytes `len` at `pos` of a segment file.
#[derive(Debug, Clone)]
pub struct FileSpan {
    file: Arc<File>,
    pos: u64,
    len: usize,
}

impl FileSpan {
    pub(super) fn new(file: Arc<File>, pos: u64, len: usize) -> FileSpan {
        FileSpan { file, pos, len }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends its bytes to `out`.
    pub fn read_into(&self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let from = out.len();
        out.resize(from + self.len, 0);
        let read = self.file.read_exact_at(&mut out[from..], self.pos);
        if read.is_err() {
            out.truncate(from);
        }
        read
    }

    /// Sends its bytes after the first `done` to `socket` with one `sendfile`: how many went
    /// (a `WouldBlock` error when the socket takes none now). A file that ends before the
    /// span does is an `UnexpectedEof` error.
    pub fn send_to(&self, socket: BorrowedFd<'_>, done: usize) -> std::io::Result<usize> {
        let Some(rest) = self.len.checked_sub(done).filter(|r| *r > 0) else {
            return Ok(0);
        };
        let mut at = self.pos + done as u64;
        match rustix::fs::sendfile(socket, &*self.file, Some(&mut at), rest) {
            Ok(0) => Err(Error::from(ErrorKind::UnexpectedEof)),
            Ok(n) => Ok(n),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_span_is_read_and_sent_from_its_place_in_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"headDATA-BYTEStail").expect("write");
        let file = Arc::new(File::open(&path).expect("open"));
        let span = FileSpan::new(file.clone(), 4, 10);
        let mut out = b"x".to_vec();
        span.read_into(&mut out).expect("read");
        assert_eq!(out, b"xDATA-BYTES");

        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let sent = span.send_to(a.as_fd(), 0).expect("send");
        let rest = span.send_to(a.as_fd(), sent).expect("send rest");
        assert_eq!(sent + rest, 10);
        a.flush().expect("flush");
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).expect("read");
        assert_eq!(got, b"DATA-BYTES");

        // Retention may delete the segment meanwhile: the span still reads it.
        std::fs::remove_file(&path).expect("remove");
        let mut again = Vec::new();
        span.read_into(&mut again).expect("read a deleted file");
        assert_eq!(again, b"DATA-BYTES");

        // A file that ends before the span fails, it does not hang or send less.
        let short_path = dir.path().join("short");
        std::fs::write(&short_path, b"abc").expect("write");
        let short = FileSpan::new(Arc::new(File::open(&short_path).expect("open")), 0, 10);
        let (c, _d) = std::os::unix::net::UnixStream::pair().expect("pair");
        assert_eq!(short.send_to(c.as_fd(), 0).expect("the bytes there"), 3);
        let e = short.send_to(c.as_fd(), 3).expect_err("past the end");
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
        let mut buf = b"kept".to_vec();
        assert!(short.read_into(&mut buf).is_err());
        assert_eq!(buf, b"kept");
    }
}
