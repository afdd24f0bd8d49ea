//! Direct exchange: a binding matches when its key equals the routing key.

use super::{Binding, Destination, Dests};
use std::collections::HashMap;

/// Bindings of a direct exchange, indexed by key.
#[derive(Debug, Default)]
pub struct DirectBindings {
    by_key: HashMap<String, Vec<Destination>>,
}

impl DirectBindings {
    /// Adds a binding; false when it already existed.
    pub fn bind(&mut self, b: &Binding) -> bool {
        let v = self.by_key.entry(b.key.clone()).or_default();
        if v.contains(&b.destination) {
            return false;
        }
        v.push(b.destination.clone());
        true
    }

    /// Removes a binding; false when it did not exist.
    pub fn unbind(&mut self, b: &Binding) -> bool {
        let Some(v) = self.by_key.get_mut(&b.key) else {
            return false;
        };
        let before = v.len();
        v.retain(|d| d != &b.destination);
        let removed = v.len() != before;
        if v.is_empty() {
            self.by_key.remove(&b.key);
        }
        removed
    }

    /// Destinations bound with exactly `key`.
    pub fn route<'a>(&'a self, key: &str, out: &mut Dests<'a>) {
        if let Some(v) = self.by_key.get(key) {
            out.extend(v.iter());
        }
    }
}
