//! A small AMQP 0-9-1 client on Warren's own codec (amq-protocol underneath), for what the
//! broker itself connects with (shovels) and for the load tool. It does the handshake and
//! synchronous calls; streaming (publishing with confirms, consuming) is left to the caller,
//! which reads and writes the connection's halves itself so it can batch, or to `relay`,
//! which moves messages from one connection to another (shovels, federation links).

pub mod connection;
pub mod consume;
pub mod local;
pub mod relay;
pub mod tls;
pub mod uri;

pub use connection::{Client, Closed};
pub use uri::{AmqpUri, UriError};
