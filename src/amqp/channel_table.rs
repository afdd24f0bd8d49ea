//! A connection's channels by number. `channel_max` bounds how many are open, not their
//! numbers (as in RabbitMQ), so a client may open channel 65535: low numbers, which clients use
//! almost always, live in a vector indexed by number, the rest in a map, and no number costs
//! memory for the numbers below it.

use crate::amqp::channel::Channel;
use std::collections::HashMap;

/// Channel numbers below this are kept in the dense part.
const DENSE: usize = 256;

/// The open (and closing) channels of one connection.
#[derive(Default)]
pub(crate) struct ChannelTable {
    dense: Vec<Option<Box<Channel>>>,
    sparse: HashMap<u16, Box<Channel>>,
    count: usize,
}

impl ChannelTable {
    /// How many channels are in the table.
    pub fn len(&self) -> usize {
        self.count
    }

    /// The channel with this number, if it is in the table.
    pub fn get_mut(&mut self, id: u16) -> Option<&mut Channel> {
        let i = usize::from(id);
        if i < DENSE {
            self.dense.get_mut(i).and_then(|s| s.as_deref_mut())
        } else {
            self.sparse.get_mut(&id).map(|c| &mut **c)
        }
    }

    /// Takes a channel out (to handle a frame with both it and the connection borrowed).
    pub fn take(&mut self, id: u16) -> Option<Box<Channel>> {
        let i = usize::from(id);
        let ch = if i < DENSE {
            self.dense.get_mut(i).and_then(Option::take)
        } else {
            self.sparse.remove(&id)
        };
        if ch.is_some() {
            self.count -= 1;
        }
        ch
    }

    /// Puts a channel in under its number (replacing nothing: the slot was taken or empty).
    pub fn put(&mut self, ch: Box<Channel>) {
        let id = ch.id;
        let i = usize::from(id);
        let old = if i < DENSE {
            if self.dense.len() <= i {
                self.dense.resize_with(i + 1, || None);
            }
            self.dense[i].replace(ch)
        } else {
            self.sparse.insert(id, ch)
        };
        if old.is_none() {
            self.count += 1;
        }
    }

    /// Takes every channel out.
    pub fn drain(&mut self) -> Vec<Channel> {
        self.count = 0;
        let mut all: Vec<Channel> = self.dense.drain(..).flatten().map(|c| *c).collect();
        all.extend(self.sparse.drain().map(|(_, c)| *c));
        all
    }
}
