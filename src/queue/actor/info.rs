//! What the queue task reports of itself to the management API.

use super::{QueueActor, Ready, Unacked};

impl QueueActor {
    /// What the management API shows of the queue.
    pub(super) fn info(&self) -> crate::queue::QueueInfo {
        let unacked_bytes: u64 = self.unacked.values().map(|u| u.msg.body_len() as u64).sum();
        let (ram, ram_bytes) = self.ready.in_memory();
        let (paged, paged_bytes) = self.ready.paged();
        let (dlx, dlx_bytes) = self.dlx.count();
        let entries = (self.ready.len() - paged + self.unacked.len()) as u64;
        crate::queue::QueueInfo {
            messages_ready: self.ready.len() as u32,
            messages_unacknowledged: self.unacked.len() as u32,
            messages_dlx: dlx as u32,
            message_bytes_dlx: dlx_bytes,
            consumers: self.consumers.len() as u32,
            message_bytes_ready: self.ready.bytes(),
            message_bytes_unacknowledged: unacked_bytes,
            messages_ram: (ram + self.unacked.len()) as u32,
            message_bytes_ram: ram_bytes + unacked_bytes,
            messages_paged_out: paged as u32,
            message_bytes_paged_out: paged_bytes,
            memory: ram_bytes
                + unacked_bytes
                + dlx_bytes
                + entries * std::mem::size_of::<Unacked>().max(std::mem::size_of::<Ready>()) as u64,
            consumer_utilisation: if self.consumers.is_empty() {
                0.0
            } else {
                self.capacity.value()
            },
            last_activity: self.last_activity,
            head_message_timestamp: self
                .ready
                .front()
                .and_then(|r| r.msg.as_ref())
                .and_then(|m| *m.properties().timestamp()),
            message_stats: self.stats.snapshot(),
            stream: None,
        }
    }
}
