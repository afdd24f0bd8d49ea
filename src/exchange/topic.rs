//! Topic exchange: dot-separated words, `*` matches one word, `#` zero or more, as RabbitMQ
//! splits keys (an empty key has no words; `a..b` has an empty middle word).

use super::{Binding, Destination, Dests};

/// Splits a routing or binding key into words the way RabbitMQ does.
pub fn split_words(key: &str) -> Vec<&str> {
    if key.is_empty() {
        Vec::new()
    } else {
        key.split('.').collect()
    }
}

/// Whether binding pattern words match routing key words. A pattern without `#` is compared
/// word by word; with `#`, one row of a (pattern × words) table is kept, so the cost is at most
/// O(pattern words × key words) whatever the pattern: backtracking over `#.#.#...` would be
/// exponential, and keys and patterns both come from clients.
pub fn matches<P: AsRef<str>>(pattern: &[P], words: &[&str]) -> bool {
    if !pattern.iter().any(|p| p.as_ref() == "#") {
        return pattern.len() == words.len()
            && pattern.iter().zip(words).all(|(p, w)| {
                let p = p.as_ref();
                p == "*" || p == *w
            });
    }
    // row[j]: the pattern words seen so far match the first j key words.
    let mut row: smallvec::SmallVec<[bool; 32]> = smallvec::smallvec![false; words.len() + 1];
    row[0] = true;
    for p in pattern {
        let p = p.as_ref();
        if p == "#" {
            for j in 1..row.len() {
                row[j] = row[j] || row[j - 1];
            }
        } else {
            for j in (1..row.len()).rev() {
                row[j] = row[j - 1] && (p == "*" || p == words[j - 1]);
            }
            row[0] = false;
        }
    }
    row[words.len()]
}

/// Bindings of a topic exchange.
#[derive(Debug, Default)]
pub struct TopicBindings {
    patterns: Vec<(String, Vec<String>, Destination)>,
}

impl TopicBindings {
    /// Adds a binding; false when it already existed.
    pub fn bind(&mut self, b: &Binding) -> bool {
        if self
            .patterns
            .iter()
            .any(|(k, _, d)| k == &b.key && d == &b.destination)
        {
            return false;
        }
        let words = split_words(&b.key).into_iter().map(String::from).collect();
        self.patterns
            .push((b.key.clone(), words, b.destination.clone()));
        true
    }

    /// Removes a binding; false when it did not exist.
    pub fn unbind(&mut self, b: &Binding) -> bool {
        let before = self.patterns.len();
        self.patterns
            .retain(|(k, _, d)| !(k == &b.key && d == &b.destination));
        before != self.patterns.len()
    }

    /// Destinations whose pattern matches `key`.
    pub fn route<'a>(&'a self, key: &str, out: &mut Dests<'a>) {
        let words = split_words(key);
        for (_, pattern, dest) in &self.patterns {
            if matches(pattern, &words) {
                out.push(dest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, k: &str) -> bool {
        matches(&split_words(p), &split_words(k))
    }

    #[test]
    fn star_and_hash() {
        assert!(m("a.*.c", "a.b.c"));
        assert!(!m("a.*.c", "a.c"));
        assert!(m("a.#.c", "a.c"));
        assert!(m("a.#.c", "a.b.b.c"));
        assert!(m("#", ""));
        assert!(m("#", "a.b"));
        assert!(!m("*", ""));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("#.a", "a"));
        assert!(m("a.#", "a"));
        assert!(!m("a.*", "a"));
        assert!(m("*.*", "a."));
        assert!(m("a..b", "a..b"));
        assert!(m("a.*.b", "a..b"));
        assert!(m("#.#", "x"));
        assert!(!m("a.b", "a.b.c"));
    }

    #[test]
    fn hash_heavy_patterns_stay_polynomial() {
        // Exponential for a backtracking matcher: 80 hashes against 128 words that never end in z.
        let pattern = format!("{}z", "#.".repeat(80));
        let key = vec!["a"; 128].join(".");
        assert!(!m(&pattern, &key));
        assert!(m(&pattern, &format!("{key}.z")));
        assert!(m("#.*.#", "a"));
        assert!(!m("#.*.#", ""));
        assert!(m("*.#.*", "a.b"));
        assert!(!m("*.#.*", "a"));
    }
}
