//! Which of its home node's tasks a remote queue's delivery came from. A replicated queue's
//! task is started afresh after a failover and hands the same sequence numbers out again,
//! so an ack here for a delivery that a task now gone made must not settle what its
//! successor handed out since (to another consumer here, perhaps). A delivery's number
//! here is the home queue's sequence number with, in its top bits, the task that made it,
//! as this node saw them come (the newest is the one that lives).

/// Bits of a number here that carry the home queue's sequence number.
const SHIFT: u32 = 48;
const SEQ: u64 = (1 << SHIFT) - 1;
/// Task numbers wrap past this many.
const TASKS: u64 = 1 << (64 - SHIFT);

/// The home tasks deliveries came from, oldest first.
#[derive(Debug, Default)]
pub(super) struct HomeTasks {
    seen: Vec<u64>,
}

impl HomeTasks {
    /// The number here of the delivery `seq` that home task `instance` made.
    pub(super) fn local(&mut self, instance: u64, seq: u64) -> u64 {
        let task = match self.seen.iter().rposition(|i| *i == instance) {
            Some(t) => t,
            None => {
                self.seen.push(instance);
                self.seen.len() - 1
            }
        };
        ((task as u64 % TASKS) << SHIFT) | (seq & SEQ)
    }

    /// The newest home task seen (the one that lives), if any delivery came yet.
    pub(super) fn newest_task(&self) -> Option<u64> {
        self.seen.last().copied()
    }

    /// The home sequence numbers of the deliveries (numbered here) that the newest task made,
    /// and how many others there were (made by tasks that are gone).
    pub(super) fn newest(&self, local: Vec<u64>) -> (Vec<u64>, usize) {
        let newest = self.seen.len().saturating_sub(1) as u64 % TASKS;
        let total = local.len();
        let seqs: Vec<u64> = local
            .into_iter()
            .filter(|l| l >> SHIFT == newest)
            .map(|l| l & SEQ)
            .collect();
        let gone = total - seqs.len();
        (seqs, gone)
    }
}

#[cfg(test)]
mod tests {
    use super::HomeTasks;

    #[test]
    fn deliveries_of_a_task_that_was_replaced_are_told_apart() {
        let mut t = HomeTasks::default();
        let a = [t.local(7, 5), t.local(7, 6)];
        assert_eq!(t.newest(a.to_vec()), (vec![5, 6], 0));
        // The task was started afresh and hands out 5 again.
        let again = t.local(9, 5);
        assert_ne!(again, a[0]);
        assert_eq!(t.newest(vec![a[0], again, a[1]]), (vec![5], 2));
        // A late delivery of the old task is still the old task's.
        assert_eq!(t.local(7, 8) >> 48, a[0] >> 48);
    }
}
