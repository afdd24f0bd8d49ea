//! Fanout exchange: every binding matches.

use super::{Binding, Destination, Dests};

/// Bindings of a fanout exchange (keys are kept only for listing).
#[derive(Debug, Default)]
pub struct FanoutBindings {
    dests: Vec<Destination>,
}

impl FanoutBindings {
    /// Adds a destination once, whatever the key.
    pub fn bind(&mut self, b: &Binding) -> bool {
        if self.dests.contains(&b.destination) {
            return false;
        }
        self.dests.push(b.destination.clone());
        true
    }

    /// Removes the destination when no other binding of it remains.
    pub fn unbind(&mut self, b: &Binding, still_bound: bool) -> bool {
        if still_bound {
            return true;
        }
        let before = self.dests.len();
        self.dests.retain(|d| d != &b.destination);
        before != self.dests.len()
    }

    /// Every destination.
    pub fn route<'a>(&'a self, out: &mut Dests<'a>) {
        out.extend(self.dests.iter());
    }
}
