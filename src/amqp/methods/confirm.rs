//! confirm.select, and the publisher confirms it turns on.

use crate::amqp::channel::Channel;
use crate::amqp::connection::Connection;
use crate::error::{AmqpError, AmqpResult};
use amq_protocol::protocol::{confirm, AMQPClass};

impl Connection {
    pub(crate) fn on_confirm_method(
        &mut self,
        ch: &mut Channel,
        m: confirm::AMQPMethod,
    ) -> AmqpResult<()> {
        match m {
            confirm::AMQPMethod::Select(s) => {
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
            _ => Err(AmqpError::command_invalid("unexpected confirm method")),
        }
    }
}
