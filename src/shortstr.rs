//! Total conversions into AMQP short strings. amq-protocol's `From<&str> for ShortString`
//! panics above 255 bytes, and names, reply texts and routing keys that input reaches can be
//! longer (a reply text quoting a 255-byte name; an HTTP publish's routing key; a dead-letter
//! exchange given as a long-string argument). Everything that becomes a short string goes
//! through here and is cut, as RabbitMQ cuts reply texts, at the last character boundary that
//! fits.

use amq_protocol::types::ShortString;

/// The longest short string, in bytes.
pub const MAX: usize = 255;

/// `s` cut to at most 255 bytes, at a character boundary.
pub fn truncated(s: &str) -> &str {
    if s.len() <= MAX {
        return s;
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` as a short string, cut to fit.
pub fn short(s: &str) -> ShortString {
    ShortString::try_new(truncated(s)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_and_boundary_fits() {
        for len in 0..600 {
            let ascii = "q".repeat(len);
            assert_eq!(short(&ascii).as_str().len(), len.min(MAX));
            // Two-byte characters: a cut never splits one.
            let wide = "é".repeat(len);
            let s = short(&wide);
            assert!(s.as_str().len() <= MAX);
            assert!(wide.starts_with(s.as_str()));
            assert!(s.as_str().len() >= (2 * len).min(MAX - 1));
        }
    }
}
