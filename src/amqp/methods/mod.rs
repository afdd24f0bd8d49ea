//! Channel method handlers, one file per AMQP class, named after the spec's methods.

mod access;
mod basic;
mod confirm;
mod exchange;
mod publish;
mod queue;
mod reply_to;
mod shortcuts;
mod tx;

pub(crate) use crate::vhost::replies::REPLY_QUEUE;
pub(crate) use shortcuts::expand_shortcuts;

use rand::Rng;

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
