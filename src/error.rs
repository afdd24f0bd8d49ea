//! Core errors. [`CoreError`] is what the core's operations (vhosts, exchanges, queues,
//! permissions) return: typed, with the entities' names as fields; its `Display` is RabbitMQ's
//! wording of the detail. Front ends map it: `amqp/` to its `AmqpError` (reply code,
//! `NAME - detail` text, channel or connection scope), `http/` to RabbitMQ's JSON errors. The
//! reply codes live here because RabbitMQ's HTTP API quotes them too.

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

/// The kind of entity an error names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Exchange => "exchange",
            Kind::Queue => "queue",
        })
    }
}

/// An error of a core operation.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CoreError {
    /// The entity does not exist.
    #[error("no {kind} '{name}' in vhost '{vhost}'")]
    NotFound {
        /// What is missing.
        kind: Kind,
        /// Its name.
        name: String,
        /// Its vhost.
        vhost: String,
    },
    /// Not permitted (permissions, reserved names, internal exchanges).
    #[error("{0}")]
    AccessRefused(Box<Refusal>),
    /// An exclusive queue of another connection (or an exclusive flag that differs).
    #[error(
        "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'. It could be \
         originally declared on another connection or the exclusive property value does not \
         match that of the original declaration."
    )]
    Locked {
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
    },
    /// The operation's preconditions do not hold.
    #[error("{0}")]
    PreconditionFailed(Box<Precondition>),
    /// The broker failed (the store could not write).
    #[error("{0}")]
    Internal(String),
    /// The cluster could not carry out a metadata change in time (no majority reachable).
    #[error("{0}")]
    Unavailable(String),
    /// The node a queue lives on does not answer (RabbitMQ's text for a durable classic
    /// queue whose home node is down).
    #[error(
        "home node '{node}' of durable queue '{queue}' in vhost '{vhost}' is down or inaccessible"
    )]
    HomeDown {
        /// The home node's name.
        node: String,
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
    },
    /// What the queue's type does not do (basic.get, purge or no-ack consumers of a
    /// stream): 540, which closes the connection.
    #[error("{0}")]
    NotImplemented(String),
    /// An operation carried out on a queue's home node failed there, with this reply code
    /// and text.
    #[error("{text}")]
    Remote {
        /// The reply code.
        code: u16,
        /// The reply text, without the code's name.
        text: String,
    },
}

/// Why access is refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Refusal {
    /// The default exchange cannot be declared, deleted or bound.
    #[error("operation not permitted on the default exchange")]
    DefaultExchange,
    /// `amq.` names are the broker's.
    #[error("{kind} name '{name}' contains reserved prefix 'amq.*'")]
    ReservedName {
        /// Exchange or queue.
        kind: Kind,
        /// The name asked for.
        name: String,
    },
    /// The broker's own `amq.*` exchanges stay.
    #[error("deletion of system exchange '{name}' in vhost '{vhost}' not allowed")]
    SystemExchange {
        /// The exchange.
        name: String,
        /// Its vhost.
        vhost: String,
    },
    /// The user's configure / write / read permission does not cover the resource.
    #[error("access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'")]
    Permission {
        /// Exchange or queue.
        kind: Kind,
        /// The resource.
        name: String,
        /// Its vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// A topic permission does not cover the routing key.
    #[error(
        "{access} access to topic '{routing_key}' in exchange '{exchange}' in vhost '{vhost}' \
         refused for user '{user}'"
    )]
    Topic {
        /// `read` (bindings) or `write` (publishes).
        access: &'static str,
        /// The routing key.
        routing_key: String,
        /// The topic exchange.
        exchange: String,
        /// Its vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// Internal exchanges take no publishes.
    #[error("cannot publish to internal exchange '{name}' in vhost '{vhost}'")]
    InternalExchange {
        /// The exchange.
        name: String,
        /// Its vhost.
        vhost: String,
    },
    /// An exclusive consumer holds the queue, or an exclusive consume meets other consumers.
    #[error("queue '{queue}' in vhost '{vhost}' in exclusive use")]
    ExclusiveUse {
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
    },
}

/// A precondition that does not hold.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum Precondition {
    /// A redeclare differs from the entity (values as RabbitMQ prints them, quoted or not).
    #[error(
        "inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': received {received} \
         but current is {current}"
    )]
    Inequivalent {
        /// Exchange or queue.
        kind: Kind,
        /// The entity.
        name: String,
        /// Its vhost.
        vhost: String,
        /// The property or argument that differs.
        arg: String,
        /// The value asked for.
        received: String,
        /// The value in force.
        current: String,
    },
    /// A known queue argument with a value it cannot take.
    #[error("invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {why}")]
    InvalidArg {
        /// The argument.
        arg: String,
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
        /// What is wrong with the value.
        why: String,
    },
    /// A declare or consume argument the queue's type does not take (RabbitMQ's text names
    /// the type by its module).
    #[error(
        "invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}' of queue type {queue_type}"
    )]
    ArgForType {
        /// The argument.
        arg: String,
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
        /// `rabbit_stream_queue` or `rabbit_classic_queue`.
        queue_type: &'static str,
    },
    /// A stream argument out of its range, with RabbitMQ's text.
    #[error("{0}")]
    StreamArg(&'static str),
    /// A consumer of a stream without a prefetch (streams hand out credit, not messages).
    #[error("consumer prefetch count is not set for stream queue '{queue}' in vhost '{vhost}'")]
    NoPrefetch {
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
    },
    /// A property a quorum or stream queue cannot have.
    #[error("invalid property '{property}' for queue '{queue}' in vhost '{vhost}'")]
    QueueProperty {
        /// `non-durable`, `exclusive-owner`, `auto-delete`.
        property: &'static str,
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
    },
    /// delete with if-unused of an entity with bindings or consumers.
    #[error("{kind} '{name}' in vhost '{vhost}' in use")]
    InUse {
        /// Exchange or queue.
        kind: Kind,
        /// The entity.
        name: String,
        /// Its vhost.
        vhost: String,
    },
    /// delete with if-empty of a queue with messages.
    #[error("queue '{queue}' in vhost '{vhost}' is not empty")]
    NotEmpty {
        /// The queue.
        queue: String,
        /// Its vhost.
        vhost: String,
    },
    /// An exchange type the broker does not have.
    #[error("invalid exchange type '{0}'")]
    ExchangeType(String),
    /// `x-delayed-message` without a usable `x-delayed-type`.
    #[error("Invalid argument, 'x-delayed-type' must be an existing exchange type")]
    DelayedType,
    /// The node's or vhost's queue limit.
    #[error("cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({max}) is reached")]
    QueueLimit {
        /// The queue asked for.
        queue: String,
        /// The vhost.
        vhost: String,
        /// The limit.
        max: usize,
    },
    /// A binding an exchange's type cannot use (a headers exchange's `x-match`, a
    /// consistent-hash exchange's weight).
    #[error("{0}")]
    BindingArgs(String),
    /// Declare arguments a new exchange's type cannot use (RabbitMQ checks them only when it
    /// creates the exchange).
    #[error("{0}")]
    ExchangeArgs(String),
}

impl CoreError {
    /// A missing exchange or queue.
    pub fn not_found(kind: Kind, name: &str, vhost: &str) -> Self {
        CoreError::NotFound {
            kind,
            name: name.to_owned(),
            vhost: vhost.to_owned(),
        }
    }

    /// The AMQP reply code RabbitMQ reports this error with (its HTTP API quotes it too).
    pub fn reply_code(&self) -> u16 {
        match self {
            CoreError::NotFound { .. } | CoreError::HomeDown { .. } => code::NOT_FOUND,
            CoreError::Remote { code, .. } => *code,
            CoreError::AccessRefused(_) => code::ACCESS_REFUSED,
            CoreError::Locked { .. } => code::RESOURCE_LOCKED,
            CoreError::PreconditionFailed(_) => code::PRECONDITION_FAILED,
            CoreError::NotImplemented(_) => code::NOT_IMPLEMENTED,
            CoreError::Internal(_) | CoreError::Unavailable(_) => code::INTERNAL_ERROR,
        }
    }
}

impl From<Refusal> for CoreError {
    fn from(r: Refusal) -> Self {
        CoreError::AccessRefused(Box::new(r))
    }
}

impl From<Precondition> for CoreError {
    fn from(p: Precondition) -> Self {
        CoreError::PreconditionFailed(Box::new(p))
    }
}

/// Result of a core operation.
pub type CoreResult<T> = Result<T, CoreError>;
