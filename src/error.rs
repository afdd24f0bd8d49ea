//! Typed AMQP errors. Every error carries its reply code; the code decides whether it closes the
//! channel (soft errors) or the whole connection (hard errors), exactly as RabbitMQ classifies them.

use thiserror::Error;

/// AMQP reply codes used by Warren.
pub mod code {
    /// Normal close.
    pub const REPLY_SUCCESS: u16 = 200;
    /// basic.return: no queue to route to.
    pub const NO_ROUTE: u16 = 312;
    /// The broker closes the connection (shutdown or operator request).
    pub const CONNECTION_FORCED: u16 = 320;
    /// Authentication or authorisation failure, or a reserved name.
    pub const ACCESS_REFUSED: u16 = 403;
    /// Unknown entity.
    pub const NOT_FOUND: u16 = 404;
    /// Exclusive queue of another connection.
    pub const RESOURCE_LOCKED: u16 = 405;
    /// Inequivalent redeclare, unknown delivery tag and similar.
    pub const PRECONDITION_FAILED: u16 = 406;
    /// Malformed frame.
    pub const FRAME_ERROR: u16 = 501;
    /// Malformed method arguments.
    pub const SYNTAX_ERROR: u16 = 502;
    /// Method not valid here.
    pub const COMMAND_INVALID: u16 = 503;
    /// Channel misuse (method on an unopened channel...).
    pub const CHANNEL_ERROR: u16 = 504;
    /// Frame of an unexpected type.
    pub const UNEXPECTED_FRAME: u16 = 505;
    /// Not permitted by the broker's limits or rules.
    pub const NOT_ALLOWED: u16 = 530;
    /// Feature not implemented (as in RabbitMQ).
    pub const NOT_IMPLEMENTED: u16 = 540;
    /// Broker-internal failure.
    pub const INTERNAL_ERROR: u16 = 541;
}

/// The symbolic name RabbitMQ prefixes reply texts with (`NOT_FOUND - ...`).
pub fn code_name(code: u16) -> &'static str {
    match code {
        200 => "OK",
        311 => "CONTENT_TOO_LARGE",
        312 => "NO_ROUTE",
        313 => "NO_CONSUMERS",
        320 => "CONNECTION_FORCED",
        402 => "INVALID_PATH",
        403 => "ACCESS_REFUSED",
        404 => "NOT_FOUND",
        405 => "RESOURCE_LOCKED",
        406 => "PRECONDITION_FAILED",
        501 => "FRAME_ERROR",
        502 => "SYNTAX_ERROR",
        503 => "COMMAND_INVALID",
        504 => "CHANNEL_ERROR",
        505 => "UNEXPECTED_FRAME",
        506 => "RESOURCE_ERROR",
        530 => "NOT_ALLOWED",
        540 => "NOT_IMPLEMENTED",
        _ => "INTERNAL_ERROR",
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
