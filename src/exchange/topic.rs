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

/// Whether binding pattern words match routing key words.
pub fn matches<P: AsRef<str>>(pattern: &[P], words: &[&str]) -> bool {
    match pattern.split_first() {
        None => words.is_empty(),
        Some((p, rest)) if p.as_ref() == "#" => {
            if rest.is_empty() {
                return true;
            }
            (0..=words.len()).any(|skip| matches(rest, &words[skip..]))
        }
        Some((p, rest)) => match words.split_first() {
            Some((&w, wrest)) => {
                let p = p.as_ref();
                (p == "*" || p == w) && matches(rest, wrest)
            }
            None => false,
        },
    }
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
}
