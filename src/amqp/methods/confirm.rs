//! confirm.select, and the publisher confirms it turns on.

use crate::amqp::channel::Channel;
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use amq_protocol::protocol::{confirm, AMQPClass};

impl Session {
    /// confirm.select.
    pub(super) fn confirm_select(
        &mut self,
        ch: &mut Channel,
        s: confirm::Select,
    ) -> AmqpResult<()> {
        if ch.tx.is_some() {
            return Err(AmqpError::precondition_failed(
                "cannot switch from tx to confirm mode",
            ));
        }
        ch.confirm = true;
        if !s.nowait {
            self.send_method(
                ch.id,
                AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {})),
            );
        }
        Ok(())
    }
}
