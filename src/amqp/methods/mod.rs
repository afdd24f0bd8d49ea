//! Channel method handlers, one file per AMQP class, named after the spec's methods. Each
//! takes the session (the connection's narrow context) and the channel; [`dispatch`] is the
//! one flat match from a method to its handler.

mod access;
mod basic;
mod channel;
pub(crate) use channel::sync_acks;
mod confirm;
mod exchange;
mod publish;
mod queue;
mod reply_to;
mod shortcuts;
mod tx;

pub(crate) use crate::vhost::replies::REPLY_QUEUE;

use crate::amqp::channel::Channel;
use crate::amqp::error::{AmqpError, AmqpResult};
use crate::amqp::session::Session;
use amq_protocol::protocol::{self as proto, AMQPClass as C};
use rand::Rng;
use shortcuts::expand_shortcuts;

/// Runs one method on an open channel. Exchange and queue methods that change durable state
/// are answered only once the store has committed the change (the reply is taken back if it
/// could not be).
pub(crate) async fn dispatch(s: &mut Session, ch: &mut Channel, mut m: C) -> AmqpResult<()> {
    expand_shortcuts(ch, &mut m)?;
    let durable = matches!(m, C::Exchange(_) | C::Queue(_));
    let mark = durable.then(|| (s.vhost.store.submitted(), s.out.len()));
    let unexpected = |class: &str| {
        Err(AmqpError::command_invalid(format!(
            "unexpected {class} method"
        )))
    };
    let r = match m {
        C::Channel(proto::channel::AMQPMethod::Open(_)) => {
            Err(AmqpError::channel_error("second 'channel.open' seen"))
        }
        C::Channel(proto::channel::AMQPMethod::Close(_)) => s.channel_close(ch).await,
        C::Channel(proto::channel::AMQPMethod::Flow(f)) => s.channel_flow(ch, f),
        C::Channel(
            proto::channel::AMQPMethod::CloseOk(_) | proto::channel::AMQPMethod::FlowOk(_),
        ) => Ok(()),
        C::Channel(_) => unexpected("channel"),
        C::Exchange(proto::exchange::AMQPMethod::Declare(d)) => s.exchange_declare(ch, d).await,
        C::Exchange(proto::exchange::AMQPMethod::Delete(d)) => s.exchange_delete(ch, d).await,
        C::Exchange(proto::exchange::AMQPMethod::Bind(b)) => s.exchange_bind(ch, b).await,
        C::Exchange(proto::exchange::AMQPMethod::Unbind(u)) => s.exchange_unbind(ch, u).await,
        C::Exchange(_) => unexpected("exchange"),
        C::Queue(proto::queue::AMQPMethod::Declare(d)) => s.queue_declare(ch, d).await,
        C::Queue(proto::queue::AMQPMethod::Bind(b)) => s.queue_bind(ch, b).await,
        C::Queue(proto::queue::AMQPMethod::Unbind(u)) => s.queue_unbind(ch, u).await,
        C::Queue(proto::queue::AMQPMethod::Purge(p)) => s.queue_purge(ch, p).await,
        C::Queue(proto::queue::AMQPMethod::Delete(d)) => s.queue_delete(ch, d).await,
        C::Queue(_) => unexpected("queue"),
        C::Basic(proto::basic::AMQPMethod::Publish(p)) => s.basic_publish(ch, p),
        C::Basic(proto::basic::AMQPMethod::Qos(q)) => s.basic_qos(ch, q),
        C::Basic(proto::basic::AMQPMethod::Consume(c)) => s.basic_consume(ch, c).await,
        C::Basic(proto::basic::AMQPMethod::Cancel(c)) => s.basic_cancel(ch, c).await,
        C::Basic(proto::basic::AMQPMethod::Get(g)) => s.basic_get(ch, g).await,
        C::Basic(proto::basic::AMQPMethod::Ack(a)) => s.basic_ack(ch, a).await,
        C::Basic(proto::basic::AMQPMethod::Nack(n)) => s.basic_nack(ch, n).await,
        C::Basic(proto::basic::AMQPMethod::Reject(r)) => s.basic_reject(ch, r).await,
        C::Basic(proto::basic::AMQPMethod::Recover(r)) => s.basic_recover(ch, r).await,
        C::Basic(proto::basic::AMQPMethod::RecoverAsync(r)) => s.basic_recover_async(ch, r).await,
        C::Basic(_) => unexpected("basic"),
        C::Confirm(proto::confirm::AMQPMethod::Select(sel)) => s.confirm_select(ch, sel),
        C::Confirm(_) => unexpected("confirm"),
        C::Tx(proto::tx::AMQPMethod::Select(_)) => s.tx_select(ch),
        C::Tx(proto::tx::AMQPMethod::Commit(_)) => s.tx_commit(ch).await,
        C::Tx(proto::tx::AMQPMethod::Rollback(_)) => s.tx_rollback(ch),
        C::Tx(_) => unexpected("tx"),
        // access.request is obsolete; RabbitMQ answers any of it with request-ok.
        C::Access(_) => {
            s.send_method(
                ch.id,
                C::Access(proto::access::AMQPMethod::RequestOk(
                    proto::access::RequestOk {},
                )),
            );
            Ok(())
        }
        C::Connection(_) => Err(AmqpError::command_invalid("unimplemented method")),
    };
    if let Some((mark, reply_at)) = mark {
        if !s.vhost.store.sync_since(mark).await && r.is_ok() {
            // Take back the reply: the change is not durable.
            s.out.truncate(reply_at);
            return Err(AmqpError::internal("the change could not be stored"));
        }
    }
    r
}

/// A server-generated name: `prefix` followed by 22 URL-safe base64 characters, as RabbitMQ's
/// `amq.gen-` and `amq.ctag-` names.
pub(crate) fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut rng = rand::rng();
    let mut s = String::with_capacity(prefix.len() + 22);
    s.push_str(prefix);
    for _ in 0..22 {
        s.push(char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]));
    }
    s
}
