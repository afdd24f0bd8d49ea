//! Nesting guard for field tables and arrays. amq-protocol parses nested tables recursively,
//! so a frame of tables nested thousands deep would overflow the stack of the task parsing it.
//! Before a method's arguments or a content header's properties reach that parser, this module
//! walks the tables they carry (with the same grammar, iteratively bounded by [`MAX_DEPTH`]) and
//! refuses anything nested deeper. Malformed input is left for the real parser to reject, so the
//! walker never has to agree with it on error messages, only on the grammar.

/// Deepest nesting of tables and arrays accepted (x-death headers use 4).
pub const MAX_DEPTH: usize = 64;

/// Too deeply nested.
#[derive(Debug, PartialEq, Eq)]
pub struct TooDeep;

type Walk = Result<Option<usize>, TooDeep>;

/// Checks the field tables in a method frame's payload (class id, method id, arguments).
pub fn check_method(payload: &[u8]) -> Result<(), TooDeep> {
    if payload.len() < 4 {
        return Ok(());
    }
    let ids = (
        u16::from_be_bytes([payload[0], payload[1]]),
        u16::from_be_bytes([payload[2], payload[3]]),
    );
    // Fields before the table: 's' short string, 'n' 16-bit number, 'b' one octet of bits.
    let before: &[u8] = match ids {
        (10, 11) => b"",                 // connection.start-ok: client-properties first
        (40, 10) => b"nssb",             // exchange.declare
        (40, 30) | (40, 40) => b"nsssb", // exchange.bind / unbind
        (50, 10) => b"nsb",              // queue.declare
        (50, 20) => b"nsssb",            // queue.bind
        (50, 50) => b"nsss",             // queue.unbind
        (60, 20) => b"nssb",             // basic.consume
        _ => return Ok(()),
    };
    let mut pos = 4;
    for field in before {
        let next = match field {
            b's' => payload.get(pos).map(|&n| pos + 1 + n as usize),
            b'n' => Some(pos + 2),
            _ => Some(pos + 1),
        };
        match next {
            Some(p) if p <= payload.len() => pos = p,
            _ => return Ok(()),
        }
    }
    table(payload, pos, 1).map(|_| ())
}

/// Checks one encoded table (length first), such as an AMQPLAIN response.
pub fn check_table(buf: &[u8]) -> Result<(), TooDeep> {
    table(buf, 0, 1).map(|_| ())
}

/// Checks the headers table in content header properties (flags first).
pub fn check_properties(props: &[u8]) -> Result<(), TooDeep> {
    let Some(flags) = props.get(..2) else {
        return Ok(());
    };
    let flags = u16::from_be_bytes([flags[0], flags[1]]);
    if flags & 0x2000 == 0 || flags & 1 != 0 {
        return Ok(());
    }
    let mut pos = 2;
    for bit in [0x8000u16, 0x4000] {
        if flags & bit != 0 {
            match props.get(pos) {
                Some(&n) => pos += 1 + n as usize,
                None => return Ok(()),
            }
        }
    }
    table(props, pos, 1).map(|_| ())
}

fn long_len(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let b = buf.get(pos..pos + 4)?;
    let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let end = (pos + 4).checked_add(n)?;
    (end <= buf.len()).then_some((pos + 4, end))
}

/// Walks a table at `pos`; returns the position after it, or None when malformed.
fn table(buf: &[u8], pos: usize, depth: usize) -> Walk {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    let Some((mut at, end)) = long_len(buf, pos) else {
        return Ok(None);
    };
    let body = &buf[..end];
    while at < end {
        let Some(&key_len) = body.get(at) else {
            return Ok(None);
        };
        at += 1 + key_len as usize;
        match value(body, at, depth)? {
            Some(next) => at = next,
            None => return Ok(None),
        }
    }
    Ok(Some(end))
}

fn array(buf: &[u8], pos: usize, depth: usize) -> Walk {
    if depth > MAX_DEPTH {
        return Err(TooDeep);
    }
    let Some((mut at, end)) = long_len(buf, pos) else {
        return Ok(None);
    };
    let body = &buf[..end];
    while at < end {
        match value(body, at, depth)? {
            Some(next) => at = next,
            None => return Ok(None),
        }
    }
    Ok(Some(end))
}

/// Walks one typed value (type octet, then the value) at `pos`.
fn value(buf: &[u8], pos: usize, depth: usize) -> Walk {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let at = pos + 1;
    let fixed = match kind {
        b'V' => 0,
        b't' | b'b' | b'B' => 1,
        b's' | b'U' | b'u' => 2,
        b'I' | b'i' | b'f' => 4,
        b'D' => 5,
        b'l' | b'L' | b'd' | b'T' => 8,
        b'S' | b'x' => return Ok(long_len(buf, at).map(|(_, end)| end)),
        b'F' => return table(buf, at, depth + 1),
        b'A' => return array(buf, at, depth + 1),
        _ => return Ok(None),
    };
    Ok((at + fixed <= buf.len()).then_some(at + fixed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table holding one entry whose value nests `depth` levels of `kind`.
    fn nested(depth: usize, kind: u8) -> Vec<u8> {
        let mut value = vec![b'V'];
        for _ in 0..depth {
            let mut inner = Vec::new();
            if kind == b'F' {
                inner.extend_from_slice(b"\x01a");
            }
            inner.extend_from_slice(&value);
            value = vec![kind];
            value.extend_from_slice(&(inner.len() as u32).to_be_bytes());
            value.extend_from_slice(&inner);
        }
        let mut entry = b"\x01a".to_vec();
        entry.extend_from_slice(&value);
        let mut t = (entry.len() as u32).to_be_bytes().to_vec();
        t.extend_from_slice(&entry);
        t
    }

    fn queue_declare(table: &[u8]) -> Vec<u8> {
        let mut p = vec![0, 50, 0, 10, 0, 0, 1, b'q', 0];
        p.extend_from_slice(table);
        p
    }

    #[test]
    fn shallow_tables_pass_and_deep_ones_are_refused() {
        for kind in [b'F', b'A'] {
            let ok = queue_declare(&nested(MAX_DEPTH - 1, kind));
            assert_eq!(check_method(&ok), Ok(()));
            let deep = queue_declare(&nested(MAX_DEPTH, kind));
            assert_eq!(check_method(&deep), Err(TooDeep));
            let very = queue_declare(&nested(20_000, kind));
            assert_eq!(check_method(&very), Err(TooDeep));
        }
    }

    #[test]
    fn headers_after_content_type_are_walked() {
        let mut props = vec![0xE0, 0x00, 3, b'a', b'/', b'b', 0];
        props.extend_from_slice(&nested(MAX_DEPTH + 5, b'F'));
        assert_eq!(check_properties(&props), Err(TooDeep));
        props[0] = 0xC0; // no headers flag
        assert_eq!(check_properties(&props), Ok(()));
    }

    #[test]
    fn bare_tables_are_checked() {
        assert_eq!(check_table(&nested(3, b'F')), Ok(()));
        assert_eq!(check_table(&nested(MAX_DEPTH * 2, b'A')), Err(TooDeep));
    }

    #[test]
    fn malformed_input_is_left_to_the_parser() {
        assert_eq!(check_method(&queue_declare(&[0, 0, 0, 9, 1])), Ok(()));
        assert_eq!(check_method(&[0, 50, 0, 10, 0]), Ok(()));
        assert_eq!(check_properties(&[0x20]), Ok(()));
    }
}
