//! Flow control by resource alarms, as RabbitMQ's reader does it: while an alarm is raised, a
//! connection that publishes is blocked once that message is in: it gets `connection.blocked` with
//! the reason (when it announced the `connection.blocked` capability), its socket is no longer
//! read and its heartbeat timeout is suspended, so it is not dropped for being quiet. A
//! connection that only consumes keeps running. When the alarms clear, a blocked connection
//! gets `connection.unblocked` and is read again.

use super::Connection;
use crate::alarms::AlarmState;
use amq_protocol::protocol::{connection, AMQPClass};

/// A connection's alarm flow state.
#[derive(Debug, Default)]
pub(crate) struct Flow {
    /// The node's alarms as last seen.
    pub alarm: AlarmState,
    /// Not reading the socket.
    pub blocked: bool,
    /// A publish arrived while an alarm was raised: block after the current frame.
    pending: bool,
    /// connection.blocked was sent (so unblocked is owed).
    notified: bool,
}

impl Connection {
    /// Blocks now if a publish asked for it; true while the connection must not be read.
    /// A message published while an alarm is raised blocks the connection after its frame.
    pub(crate) fn apply_block(&mut self) -> bool {
        if std::mem::take(&mut self.s.published) && self.flow.alarm.any() && !self.flow.blocked {
            self.flow.pending = true;
        }
        if self.flow.pending {
            self.flow.pending = false;
            self.flow.blocked = true;
            tracing::info!(
                connection = self.s.id,
                reason = self.flow.alarm.reason(),
                "publisher blocked"
            );
            if self.blocked_notify {
                self.flow.notified = true;
                self.s.send_method(
                    0,
                    AMQPClass::Connection(connection::AMQPMethod::Blocked(connection::Blocked {
                        reason: self.flow.alarm.reason().into(),
                    })),
                );
            }
        }
        self.flow.blocked
    }

    /// The alarms changed; true when the connection was unblocked (read it again).
    pub(crate) fn on_alarm(&mut self, state: AlarmState) -> bool {
        self.flow.alarm = state;
        if state.any() || !self.flow.blocked {
            return false;
        }
        self.flow.blocked = false;
        tracing::info!(connection = self.s.id, "publisher unblocked");
        if std::mem::take(&mut self.flow.notified) {
            self.s.send_method(
                0,
                AMQPClass::Connection(connection::AMQPMethod::Unblocked(connection::Unblocked {})),
            );
        }
        true
    }
}
