//! The AMQP front end's error: a reply code, RabbitMQ's `NAME - detail` text, the method that
//! failed, and whether it closes the channel (soft codes) or the connection (hard codes), as
//! RabbitMQ classifies them. Core errors become one through `From<CoreError>`.

use crate::error::{code, code_name, CoreError};
use thiserror::Error;

/// Whether an error closes a channel or the whole connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// channel.close; the connection and other channels go on.
    Channel,
    /// connection.close.
    Connection,
}

/// An AMQP protocol error with the reply that reports it.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{text}")]
pub struct AmqpError {
    /// Reply code.
    pub code: u16,
    /// Full reply text, `NAME - detail`.
    pub text: String,
    /// Class id of the method that failed (0 when none).
    pub class_id: u16,
    /// Method id of the method that failed (0 when none).
    pub method_id: u16,
    /// Which side closes.
    pub scope: Scope,
}

impl AmqpError {
    /// An error with RabbitMQ's text shape; soft codes close the channel, hard ones the connection.
    pub fn new(code: u16, detail: impl AsRef<str>) -> Self {
        let scope = match code {
            311..=313 | 403..=406 => Scope::Channel,
            _ => Scope::Connection,
        };
        AmqpError {
            code,
            text: format!("{} - {}", code_name(code), detail.as_ref()),
            class_id: 0,
            method_id: 0,
            scope,
        }
    }

    /// Forces connection scope (e.g. 403 during the handshake).
    pub fn on_connection(mut self) -> Self {
        self.scope = Scope::Connection;
        self
    }

    /// Records the method that failed, unless one is already recorded.
    pub fn with_method(mut self, class_id: u16, method_id: u16) -> Self {
        if self.class_id == 0 {
            self.class_id = class_id;
            self.method_id = method_id;
        }
        self
    }

    /// 404 on the channel.
    pub fn not_found(detail: impl AsRef<str>) -> Self {
        Self::new(code::NOT_FOUND, detail)
    }
    /// 403 on the channel.
    pub fn access_refused(detail: impl AsRef<str>) -> Self {
        Self::new(code::ACCESS_REFUSED, detail)
    }
    /// 405 on the channel.
    pub fn resource_locked(detail: impl AsRef<str>) -> Self {
        Self::new(code::RESOURCE_LOCKED, detail)
    }
    /// 406 on the channel.
    pub fn precondition_failed(detail: impl AsRef<str>) -> Self {
        Self::new(code::PRECONDITION_FAILED, detail)
    }
    /// 501 on the connection.
    pub fn frame_error(detail: impl AsRef<str>) -> Self {
        Self::new(code::FRAME_ERROR, detail)
    }
    /// 502 on the connection.
    pub fn syntax_error(detail: impl AsRef<str>) -> Self {
        Self::new(code::SYNTAX_ERROR, detail)
    }
    /// 503 on the connection.
    pub fn command_invalid(detail: impl AsRef<str>) -> Self {
        Self::new(code::COMMAND_INVALID, detail)
    }
    /// 504 on the connection.
    pub fn channel_error(detail: impl AsRef<str>) -> Self {
        Self::new(code::CHANNEL_ERROR, detail)
    }
    /// 505 on the connection.
    pub fn unexpected_frame(detail: impl AsRef<str>) -> Self {
        Self::new(code::UNEXPECTED_FRAME, detail)
    }
    /// 530 on the connection.
    pub fn not_allowed(detail: impl AsRef<str>) -> Self {
        Self::new(code::NOT_ALLOWED, detail)
    }
    /// 540 on the connection.
    pub fn not_implemented(detail: impl AsRef<str>) -> Self {
        Self::new(code::NOT_IMPLEMENTED, detail)
    }
    /// 541 on the connection.
    pub fn internal(detail: impl AsRef<str>) -> Self {
        Self::new(code::INTERNAL_ERROR, detail)
    }
}

/// Result of an AMQP operation.
pub type AmqpResult<T> = Result<T, AmqpError>;

/// The AMQP front end's rendering: the code and RabbitMQ's `NAME - detail` text (soft codes
/// close the channel).
impl From<CoreError> for AmqpError {
    fn from(e: CoreError) -> Self {
        AmqpError::new(e.reply_code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Kind, Precondition, Refusal};

    #[test]
    fn soft_and_hard_codes_pick_their_scope() {
        assert_eq!(AmqpError::not_found("x").scope, Scope::Channel);
        assert_eq!(AmqpError::precondition_failed("x").scope, Scope::Channel);
        assert_eq!(AmqpError::not_allowed("x").scope, Scope::Connection);
        assert_eq!(AmqpError::frame_error("x").scope, Scope::Connection);
        assert_eq!(
            AmqpError::not_found("no queue 'q' in vhost '/'").text,
            "NOT_FOUND - no queue 'q' in vhost '/'"
        );
    }

    #[test]
    fn core_errors_become_rabbitmq_replies() {
        let e = AmqpError::from(CoreError::not_found(Kind::Queue, "q1", "/"));
        assert_eq!(
            (e.code, e.text.as_str(), e.scope),
            (
                404,
                "NOT_FOUND - no queue 'q1' in vhost '/'",
                Scope::Channel
            )
        );
        let e = AmqpError::from(CoreError::Locked {
            queue: "q".into(),
            vhost: "/".into(),
        });
        assert_eq!(e.code, 405);
        assert!(e.text.starts_with(
            "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'. \
             It could be originally declared on another connection or the exclusive property \
             value does not match"
        ));
        let e = AmqpError::from(CoreError::from(Precondition::Inequivalent {
            kind: Kind::Exchange,
            name: "x".into(),
            vhost: "/".into(),
            arg: "durable".into(),
            received: "'true'".into(),
            current: "'false'".into(),
        }));
        assert_eq!(
            e.text,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'x' in vhost '/': \
             received 'true' but current is 'false'"
        );
        let e = AmqpError::from(CoreError::from(Refusal::Topic {
            access: "write",
            routing_key: "a.b".into(),
            exchange: "t".into(),
            vhost: "/".into(),
            user: "u".into(),
        }));
        assert_eq!(
            e.text,
            "ACCESS_REFUSED - write access to topic 'a.b' in exchange 't' in vhost '/' refused \
             for user 'u'"
        );
        let e = AmqpError::from(CoreError::Internal("disk".into()));
        assert_eq!((e.code, e.scope), (541, Scope::Connection));
    }
}
