//! The spec's queue-name shortcut: an empty queue name in `basic.consume`, `basic.get`,
//! `queue.bind`, `queue.unbind`, `queue.purge` and `queue.delete` means the queue most recently
//! declared on the channel, and a bind or unbind with both queue and routing key empty uses that
//! queue's name as the key (RabbitMQ's `expand_shortcuts`).

use crate::amqp::channel::Channel;
use crate::amqp::error::{AmqpError, AmqpResult};
use amq_protocol::protocol::{basic, queue, AMQPClass};
use amq_protocol::types::ShortString;

/// Rewrites the empty names of `m` to the channel's last declared queue.
pub(crate) fn expand_shortcuts(ch: &Channel, m: &mut AMQPClass) -> AmqpResult<()> {
    let last = || {
        ch.last_queue
            .clone()
            .ok_or_else(|| AmqpError::not_found("no previously declared queue"))
    };
    let expand = |name: &mut ShortString| -> AmqpResult<bool> {
        if !name.as_str().is_empty() {
            return Ok(false);
        }
        *name = last()?;
        Ok(true)
    };
    let expand_with_key = |name: &mut ShortString, key: &mut ShortString| -> AmqpResult<()> {
        if expand(name)? && key.as_str().is_empty() {
            *key = name.clone();
        }
        Ok(())
    };
    match m {
        AMQPClass::Basic(basic::AMQPMethod::Consume(c)) => expand(&mut c.queue).map(drop),
        AMQPClass::Basic(basic::AMQPMethod::Get(g)) => expand(&mut g.queue).map(drop),
        AMQPClass::Queue(queue::AMQPMethod::Purge(p)) => expand(&mut p.queue).map(drop),
        AMQPClass::Queue(queue::AMQPMethod::Delete(d)) => expand(&mut d.queue).map(drop),
        AMQPClass::Queue(queue::AMQPMethod::Bind(b)) => {
            expand_with_key(&mut b.queue, &mut b.routing_key)
        }
        AMQPClass::Queue(queue::AMQPMethod::Unbind(u)) => {
            expand_with_key(&mut u.queue, &mut u.routing_key)
        }
        _ => Ok(()),
    }
}
