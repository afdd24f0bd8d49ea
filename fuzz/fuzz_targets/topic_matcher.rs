//! The topic matcher against a plain backtracking reference on short inputs (where backtracking
//! is cheap), and on any input for termination.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warren::exchange::topic::{matches, split_words};

fn reference(p: &[&str], w: &[&str]) -> bool {
    match p.split_first() {
        None => w.is_empty(),
        Some((&"#", rest)) => (0..=w.len()).any(|k| reference(rest, &w[k..])),
        Some((&x, rest)) => match w.split_first() {
            Some((&y, wrest)) => (x == "*" || x == y) && reference(rest, wrest),
            None => false,
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (pattern, key) = text.split_once('|').unwrap_or((&text, ""));
    let (p, k) = (split_words(pattern), split_words(key));
    let got = matches(&p, &k);
    if p.len() <= 12 && k.len() <= 12 {
        assert_eq!(got, reference(&p, &k), "pattern {pattern:?} key {key:?}");
    }
});
