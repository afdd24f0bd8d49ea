//! Delayed delivery for `x-delayed-message` exchanges: a message published with an `x-delay`
//! header (milliseconds) is held, in the store when its exchange is durable, and routed
//! through its exchange once the delay is over. One task keeps the timers in a heap ordered by
//! due time; pending delays survive a restart. What "route it now" means is the broker's
//! business ([`Release`]), so the scheduler sits below the vhosts that schedule into it.

use crate::clock::unix_ms;
use crate::confirm::ConfirmToken;
use crate::message::Message;
use crate::store::Store;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// A message waiting for its delay.
#[derive(Debug)]
pub struct Delayed {
    /// Due time, Unix milliseconds.
    pub due: u64,
    /// Unique id (ties between equal due times).
    pub id: u64,
    /// Virtual host of the exchange.
    pub vhost: String,
    /// The delayed-message exchange.
    pub exchange: String,
    /// The message.
    pub msg: Arc<Message>,
    /// Whether it is in the store (to delete it once routed).
    pub stored: bool,
}

/// Routes a message whose delay is over (implemented by the broker: through its vhost's
/// exchange, dropped when either is gone).
pub trait Release: Send + Sync + 'static {
    /// Routes `d.msg` through `d.exchange` of `d.vhost` now.
    fn release(&self, d: Delayed) -> impl Future<Output = ()> + Send;
}

/// Handle on the delay scheduler.
#[derive(Debug)]
pub struct Delayer {
    tx: mpsc::UnboundedSender<Delayed>,
    next_id: AtomicU64,
    store: Store,
}

/// The `x-delay` header of a message, when positive.
pub fn delay_of(msg: &Message) -> Option<u64> {
    if !msg.has_headers() {
        return None;
    }
    let h = msg.headers();
    let v = h.inner().get("x-delay")?;
    use amq_protocol::types::AMQPValue as V;
    let n: i128 = match v {
        V::ShortShortInt(n) => (*n).into(),
        V::ShortShortUInt(n) => (*n).into(),
        V::ShortInt(n) => (*n).into(),
        V::ShortUInt(n) => (*n).into(),
        V::LongInt(n) => (*n).into(),
        V::LongUInt(n) => (*n).into(),
        V::LongLongInt(n) => (*n).into(),
        V::LongString(s) => String::from_utf8_lossy(s.as_bytes()).trim().parse().ok()?,
        V::ShortString(s) => s.as_str().trim().parse().ok()?,
        _ => return None,
    };
    (n > 0).then(|| n.min(i128::from(u64::MAX)) as u64)
}

impl Delayer {
    /// Starts the scheduler with the delayed messages read back from the store.
    pub fn start<R: Release>(target: Weak<R>, store: Store, recovered: Vec<Delayed>) -> Delayer {
        let next_id = recovered.iter().map(|d| d.id + 1).max().unwrap_or(1);
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(target, store.clone(), rx, recovered));
        Delayer {
            tx,
            next_id: AtomicU64::new(next_id),
            store,
        }
    }

    /// Holds a message for `delay_ms`; if `durable`, it is stored first and the token completes
    /// after the commit.
    pub fn schedule(
        &self,
        vhost: &str,
        exchange: &str,
        msg: Arc<Message>,
        delay_ms: u64,
        durable: bool,
        token: Option<ConfirmToken>,
    ) {
        let due = unix_ms().saturating_add(delay_ms);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if durable {
            self.store
                .put_delayed((due, id), vhost, exchange, &msg, token);
        } else if let Some(t) = token {
            t.complete(true);
        }
        let _ = self.tx.send(Delayed {
            due,
            id,
            vhost: vhost.to_owned(),
            exchange: exchange.to_owned(),
            msg,
            stored: durable,
        });
    }
}

async fn run<R: Release>(
    target: Weak<R>,
    store: Store,
    mut rx: mpsc::UnboundedReceiver<Delayed>,
    recovered: Vec<Delayed>,
) {
    let mut heap = BinaryHeap::new();
    let mut pending = HashMap::new();
    for d in recovered {
        heap.push(Reverse((d.due, d.id)));
        pending.insert(d.id, d);
    }
    loop {
        let wait = heap
            .peek()
            .map(|Reverse((due, _))| Duration::from_millis(due.saturating_sub(unix_ms())));
        tokio::select! {
            got = rx.recv() => match got {
                Some(d) => {
                    heap.push(Reverse((d.due, d.id)));
                    pending.insert(d.id, d);
                }
                None => return,
            },
            _ = async {
                match wait {
                    Some(w) => tokio::time::sleep(w).await,
                    None => std::future::pending().await,
                }
            } => {
                let now = unix_ms();
                while let Some(Reverse((due, id))) = heap.peek().copied() {
                    if due > now {
                        break;
                    }
                    heap.pop();
                    if let Some(d) = pending.remove(&id) {
                        if d.stored {
                            store.delete_delayed((d.due, d.id));
                        }
                        let Some(t) = target.upgrade() else { return };
                        t.release(d).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::protocol::BasicProperties;
    use amq_protocol::types::{AMQPValue, FieldTable};

    fn with_delay(v: Option<AMQPValue>) -> Message {
        let mut props = BasicProperties::default();
        if let Some(v) = v {
            let mut h = FieldTable::default();
            h.insert("x-delay".into(), v);
            props = props.with_headers(h);
        }
        let raw = cookie_factory::gen_simple(
            amq_protocol::protocol::basic::gen_properties(&props),
            Vec::new(),
        )
        .expect("gen");
        Message::new(
            "dx".into(),
            "k".into(),
            bytes::Bytes::from(raw.clone()),
            raw.len(),
            &props,
        )
    }

    #[test]
    fn x_delay_values() {
        assert_eq!(
            delay_of(&with_delay(Some(AMQPValue::LongInt(1500)))),
            Some(1500)
        );
        assert_eq!(
            delay_of(&with_delay(Some(AMQPValue::LongString("250".into())))),
            Some(250)
        );
        assert_eq!(delay_of(&with_delay(Some(AMQPValue::LongInt(-5)))), None);
        assert_eq!(delay_of(&with_delay(None)), None);
    }
}
