//! A chunk's Bloom filter of filter values, as osiris keeps one: `size` bytes (the stream's
//! `x-stream-filter-size-bytes`, 16 by default) between the header and the data, present only
//! when some entry of the chunk has a filter value. Each value sets two bits (1..size*8-1,
//! from two CRC-32s of the value); bit 0 says the chunk also has entries without one. A chunk
//! without a filter has only unfiltered entries. A reader with filter values takes a chunk
//! whose filter may hold one of them (or, matching unfiltered, that has unfiltered entries):
//! whole chunks are skipped, what is in a chunk taken is the client's to sort out, as with
//! RabbitMQ. The hashes are Warren's own (osiris hashes with Erlang's `phash2`); the filter
//! never leaves the broker (stream clients get chunks without it).

/// The filter size when the stream sets none.
pub const DEFAULT_FILTER_SIZE: u8 = 16;

/// The two bits of a value in a filter of `bits` bits.
fn bits_of(value: &[u8], bits: u32) -> (u32, u32) {
    let span = bits - 1;
    let h1 = crc32fast::hash(value);
    let mut h = crc32fast::Hasher::new_with_initial(0x9e37_79b9);
    h.update(value);
    (h1 % span + 1, h.finalize() % span + 1)
}

fn is_set(filter: &[u8], bit: u32) -> bool {
    filter
        .get(bit as usize / 8)
        .is_some_and(|b| b & (0x80 >> (bit % 8)) != 0)
}

fn set(filter: &mut [u8], bit: u32) {
    if let Some(b) = filter.get_mut(bit as usize / 8) {
        *b |= 0x80 >> (bit % 8);
    }
}

/// The filter a chunk being built collects.
#[derive(Debug, Default)]
pub struct BloomBuilder {
    size: u8,
    /// The filter, once a value came.
    filter: Vec<u8>,
    unfiltered: bool,
}

impl BloomBuilder {
    /// A filter of `size` bytes (16 to 255; others are taken as the default).
    pub fn new(size: u8) -> Self {
        BloomBuilder {
            size: if size < 16 { DEFAULT_FILTER_SIZE } else { size },
            ..Self::default()
        }
    }

    /// An entry with filter value `value` (None or empty: an unfiltered entry).
    pub fn add(&mut self, value: Option<&[u8]>) {
        let Some(v) = value.filter(|v| !v.is_empty()) else {
            self.unfiltered = true;
            return;
        };
        if self.filter.is_empty() {
            self.filter = vec![0; usize::from(self.size.max(DEFAULT_FILTER_SIZE))];
        }
        let (b1, b2) = bits_of(v, self.filter.len() as u32 * 8);
        set(&mut self.filter, b1);
        set(&mut self.filter, b2);
    }

    /// The filter to store with the chunk: empty when no entry had a value.
    pub fn finish(mut self) -> Vec<u8> {
        if !self.filter.is_empty() && self.unfiltered {
            set(&mut self.filter, 0);
        }
        self.filter
    }
}

/// What a reader takes: chunks that may hold one of `values`, and with `match_unfiltered`
/// those with entries that have none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BloomMatcher {
    pub values: Vec<Vec<u8>>,
    pub match_unfiltered: bool,
}

impl BloomMatcher {
    /// Whether a chunk with filter `filter` (empty: none) is taken.
    pub fn matches(&self, filter: &[u8]) -> bool {
        if filter.is_empty() {
            return self.match_unfiltered;
        }
        if self.match_unfiltered && is_set(filter, 0) {
            return true;
        }
        let bits = filter.len() as u32 * 8;
        self.values.iter().any(|v| {
            let (b1, b2) = bits_of(v, bits);
            is_set(filter, b1) && is_set(filter, b2)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_taken_when_they_may_hold_a_value() {
        let m = |values: &[&str], unfiltered| BloomMatcher {
            values: values.iter().map(|v| v.as_bytes().to_vec()).collect(),
            match_unfiltered: unfiltered,
        };
        let mut eu = BloomBuilder::new(16);
        eu.add(Some(b"eu"));
        eu.add(Some(b"eu"));
        let eu = eu.finish();
        assert_eq!(eu.len(), 16);
        assert!(m(&["eu"], false).matches(&eu));
        assert!(m(&["us", "eu"], false).matches(&eu));
        assert!(!m(&[], true).matches(&eu), "no unfiltered entries in it");

        let mut mixed = BloomBuilder::new(32);
        mixed.add(Some(b"us"));
        mixed.add(None);
        let mixed = mixed.finish();
        assert_eq!(mixed.len(), 32);
        assert!(m(&["none"], true).matches(&mixed));
        assert!(m(&["us"], false).matches(&mixed));

        // Only unfiltered entries: no filter stored, taken only when matching unfiltered.
        let mut plain = BloomBuilder::new(16);
        plain.add(None);
        plain.add(Some(b""));
        let plain = plain.finish();
        assert!(plain.is_empty());
        assert!(m(&["eu"], true).matches(&plain));
        assert!(!m(&["eu"], false).matches(&plain));

        // With many values a few false positives are expected, never a false negative.
        let mut many = BloomBuilder::new(16);
        let values: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
        for v in &values {
            many.add(Some(v.as_bytes()));
        }
        let many = many.finish();
        assert!(values
            .iter()
            .all(|v| m(&[v.as_str()], false).matches(&many)));
        let misses = (100..1100)
            .filter(|i| !m(&[format!("other{i}").as_str()], false).matches(&many))
            .count();
        assert!(
            misses > 500,
            "a 128-bit filter of 20 values rules out most others ({misses})"
        );
    }
}
