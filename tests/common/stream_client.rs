//! The official Rust stream client (`rabbitmq-stream-client`) on a test broker's stream
//! listener: an environment, and confirmed publishing.

use super::{within, TestBroker};
use rabbitmq_stream_client::types::Message;
use rabbitmq_stream_client::Environment;

/// An environment on the broker's stream listener, as guest.
pub async fn env(b: &TestBroker) -> Environment {
    let port = b.server.stream_addr.expect("stream listener").port();
    within(Environment::builder().host("127.0.0.1").port(port).build())
        .await
        .expect("stream connection")
}

/// Publishes `n` messages ("m-0", "m-1", ...) to `stream` in one batch and waits for their
/// confirms.
pub async fn publish(env: &Environment, stream: &str, n: usize) {
    let producer = within(env.producer().build(stream))
        .await
        .expect("producer");
    let messages = (0..n)
        .map(|i| Message::builder().body(format!("m-{i}")).build())
        .collect();
    let confirms = within(producer.batch_send_with_confirm(messages))
        .await
        .expect("published");
    assert!(confirms.len() == n && confirms.iter().all(|c| c.confirmed()));
    within(producer.close()).await.expect("closed");
}
