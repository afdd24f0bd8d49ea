//! A virtual host: the exchange and queue registries and the operations on them (declare, bind,
//! delete, route). AMQP channel handlers and the HTTP API both call these; nothing here sees a
//! frame. Registries are DashMaps of cheap handles; no guard is held across `.await`.

use crate::args::QueueArgs;
use crate::error::{CoreError, CoreResult, Kind, Precondition, Refusal};
use crate::exchange::{Binding, Destination, Exchange, ExchangeKind};
use crate::queue::{QueueRef, QueueShared};
use crate::store::Store;
use amq_protocol::types::{AMQPValue, FieldTable};
use dashmap::DashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

mod exchanges;
#[cfg(test)]
mod journaled_tests;
mod limits;
pub mod policies;
pub mod publish;
mod queue_host;
pub mod replies;
mod routing;

pub use exchanges::{AutoDeleteDecider, AutoRemoval, Decider};
pub use limits::VhostLimits;

/// Queue arguments RabbitMQ compares when a queue is redeclared.
const EQUIVALENT_QUEUE_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
];

/// Options of queue.declare.
#[derive(Clone, Debug, Default)]
pub struct QueueOptions {
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a restart.
    pub durable: bool,
    /// Owned by the declaring connection.
    pub exclusive: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// x-arguments.
    pub arguments: FieldTable,
    /// The broker chose the name (`amq.gen-...`), so the reserved prefix is allowed.
    pub server_named: bool,
}

/// Options of exchange.declare.
#[derive(Clone, Debug, Default)]
pub struct ExchangeOptions {
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Not publishable directly.
    pub internal: bool,
    /// Arguments.
    pub arguments: FieldTable,
}

/// A virtual host.
#[derive(Debug)]
pub struct VHost {
    /// Its name.
    pub name: String,
    exchanges: DashMap<String, Arc<Exchange>>,
    queues: DashMap<String, QueueRef>,
    /// Where durable changes are written.
    pub store: Store,
    /// Most queues it may hold (0: no limit), from the node's `max_queues_per_vhost`.
    pub max_queues: AtomicUsize,
    /// RabbitMQ's vhost limits `max-queues` and `max-connections` (-1: none).
    pub limits: VhostLimits,
    /// Policies and operator policies (changed through `Broker::save_policy` / `remove_policy`).
    pub policies: crate::policy::PolicySet,
    /// queue.declare calls, queues created and queues deleted (Prometheus churn metrics).
    pub queue_churn: [std::sync::atomic::AtomicU64; 3],
    /// Who removes auto-delete exchanges left without bindings, when not the vhost itself.
    auto_delete: exchanges::Decider,
}

/// Describes an argument value as RabbitMQ's inequivalence errors do.
fn value_text(v: Option<&AMQPValue>) -> String {
    let Some(v) = v else {
        return "none".into();
    };
    let (text, kind) = match v {
        AMQPValue::LongString(s) => (
            String::from_utf8_lossy(s.as_bytes()).into_owned(),
            "longstr",
        ),
        AMQPValue::ShortString(s) => (s.to_string(), "shortstr"),
        AMQPValue::Boolean(b) => (b.to_string(), "bool"),
        AMQPValue::ShortShortInt(n) => (n.to_string(), "byte"),
        AMQPValue::ShortShortUInt(n) => (n.to_string(), "unsignedbyte"),
        AMQPValue::ShortInt(n) => (n.to_string(), "short"),
        AMQPValue::ShortUInt(n) => (n.to_string(), "unsignedshort"),
        AMQPValue::LongInt(n) => (n.to_string(), "signedint"),
        AMQPValue::LongUInt(n) => (n.to_string(), "unsignedint"),
        AMQPValue::LongLongInt(n) => (n.to_string(), "long"),
        AMQPValue::Float(n) => (n.to_string(), "float"),
        AMQPValue::Double(n) => (n.to_string(), "double"),
        AMQPValue::Timestamp(n) => (n.to_string(), "timestamp"),
        other => (format!("{other:?}"), "table"),
    };
    format!("the value '{text}' of type '{kind}'")
}

impl VHost {
    /// A virtual host with RabbitMQ's predeclared exchanges.
    pub fn new(name: &str, store: Store, max_queues: usize) -> Arc<VHost> {
        let v = VHost {
            name: name.to_owned(),
            exchanges: DashMap::new(),
            queues: DashMap::new(),
            store,
            max_queues: AtomicUsize::new(max_queues),
            limits: VhostLimits::default(),
            policies: Default::default(),
            queue_churn: Default::default(),
            auto_delete: Default::default(),
        };
        for (x, kind, internal) in [
            ("", ExchangeKind::Direct, false),
            ("amq.direct", ExchangeKind::Direct, false),
            ("amq.fanout", ExchangeKind::Fanout, false),
            ("amq.topic", ExchangeKind::Topic, false),
            ("amq.headers", ExchangeKind::Headers, false),
            ("amq.match", ExchangeKind::Headers, false),
            ("amq.rabbitmq.trace", ExchangeKind::Topic, true),
        ] {
            v.exchanges.insert(
                x.to_owned(),
                Arc::new(Exchange::new(
                    x.to_owned(),
                    kind,
                    true,
                    false,
                    internal,
                    FieldTable::default(),
                )),
            );
        }
        Arc::new(v)
    }

    fn no_exchange(&self, name: &str) -> CoreError {
        CoreError::not_found(Kind::Exchange, name, &self.name)
    }

    fn no_queue(&self, name: &str) -> CoreError {
        CoreError::not_found(Kind::Queue, name, &self.name)
    }

    fn default_exchange_refused() -> CoreError {
        Refusal::DefaultExchange.into()
    }

    /// Registers a queue read from the store.
    pub fn restore_queue(&self, q: QueueRef) {
        self.queues.insert(q.name.clone(), q);
    }

    /// Looks an exchange up (404 when missing).
    pub fn exchange(&self, name: &str) -> CoreResult<Arc<Exchange>> {
        self.exchanges
            .get(name)
            .map(|e| e.clone())
            .ok_or_else(|| self.no_exchange(name))
    }

    /// Looks a queue up (404 when missing).
    pub fn queue(&self, name: &str) -> CoreResult<QueueRef> {
        self.queues
            .get(name)
            .map(|q| q.clone())
            .ok_or_else(|| self.no_queue(name))
    }

    /// Every queue.
    pub fn queues(&self) -> Vec<QueueRef> {
        self.queues.iter().map(|q| q.value().clone()).collect()
    }

    /// Every exchange.
    pub fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.iter().map(|e| e.value().clone()).collect()
    }

    /// Refuses access to another connection's exclusive queue (405).
    pub fn check_exclusive(&self, q: &QueueShared, connection: u64) -> CoreResult<()> {
        match q.exclusive_owner {
            Some(owner) if owner != connection => Err(Self::locked(q)),
            _ => Ok(()),
        }
    }

    fn locked(q: &QueueShared) -> CoreError {
        CoreError::Locked {
            queue: q.name.clone(),
            vhost: q.vhost.clone(),
        }
    }

    /// queue.declare; the name is already generated when the client sent an empty one.
    pub fn queue_declare(
        self: &Arc<Self>,
        name: &str,
        o: &QueueOptions,
        connection: u64,
    ) -> CoreResult<QueueRef> {
        self.queue_churn[0].fetch_add(1, Ordering::Relaxed);
        if let Some(q) = self.queues.get(name).map(|q| q.clone()) {
            self.check_exclusive(&q, connection)?;
            q.touch();
            if o.passive {
                return Ok(q);
            }
            if o.exclusive != q.exclusive_owner.is_some() {
                return Err(Self::locked(&q));
            }
            let neq = |arg: &str, received: String, current: String| -> CoreError {
                Precondition::Inequivalent {
                    kind: Kind::Queue,
                    name: q.name.clone(),
                    vhost: q.vhost.clone(),
                    arg: arg.to_owned(),
                    received,
                    current,
                }
                .into()
            };
            if q.durable != o.durable {
                return Err(neq(
                    "durable",
                    format!("'{}'", o.durable),
                    format!("'{}'", q.durable),
                ));
            }
            if q.auto_delete != o.auto_delete {
                return Err(neq(
                    "auto_delete",
                    format!("'{}'", o.auto_delete),
                    format!("'{}'", q.auto_delete),
                ));
            }
            for key in EQUIVALENT_QUEUE_ARGS {
                let (a, b) = (o.arguments.inner().get(*key), q.arguments.inner().get(*key));
                if a != b && !(*key == "x-queue-type" && is_classic(a) && is_classic(b)) {
                    return Err(neq(key, value_text(a), value_text(b)));
                }
            }
            return Ok(q);
        }
        if o.passive {
            return Err(self.no_queue(name));
        }
        let args = self.queue_declare_checks(name, o)?;
        let entry = self.queues.entry(name.to_owned()).or_insert_with(|| {
            self.queue_churn[1].fetch_add(1, Ordering::Relaxed);
            QueueShared::spawn(
                name.to_owned(),
                self,
                o.durable,
                o.exclusive.then_some(connection),
                o.auto_delete,
                o.arguments.clone(),
                args,
            )
        });
        Ok(entry.clone())
    }

    /// What queue.declare checks before it creates a queue (the name, the queue limits, the
    /// arguments): the parsed arguments.
    pub fn queue_declare_checks(&self, name: &str, o: &QueueOptions) -> CoreResult<QueueArgs> {
        if name.starts_with("amq.") && !o.server_named {
            return Err(Refusal::ReservedName {
                kind: Kind::Queue,
                name: name.to_owned(),
            }
            .into());
        }
        let node_max = self.max_queues.load(Ordering::Relaxed);
        let vhost_max = self.limits.max_queues.load(Ordering::Relaxed);
        let max = match (node_max, usize::try_from(vhost_max)) {
            (0, Ok(v)) => Some(v),
            (n, Ok(v)) => Some(n.min(v)),
            (0, Err(_)) => None,
            (n, Err(_)) => Some(n),
        };
        if let Some(max) = max.filter(|m| self.queues.len() >= *m) {
            return Err(Precondition::QueueLimit {
                queue: name.to_owned(),
                vhost: self.name.clone(),
                max,
            }
            .into());
        }
        let args = QueueArgs::parse(&o.arguments, name, &self.name)?;
        if args.quorum || args.stream {
            // What a quorum or stream queue lets a client observe: RabbitMQ's declare rules.
            let refuse = |property: &'static str| -> CoreError {
                Precondition::QueueProperty {
                    property,
                    queue: name.to_owned(),
                    vhost: self.name.clone(),
                }
                .into()
            };
            if !o.durable {
                return Err(refuse("non-durable"));
            }
            if o.exclusive {
                return Err(refuse("exclusive-owner"));
            }
            if o.auto_delete {
                return Err(refuse("auto-delete"));
            }
        }
        Ok(args)
    }

    /// Installs a queue as the cluster knows it: here (`home` None), created unless it
    /// exists; or the handle of one on another node. A queue already here with the same home
    /// (and owner) is kept.
    pub fn install_queue(
        self: &Arc<Self>,
        name: &str,
        durable: bool,
        auto_delete: bool,
        arguments: &FieldTable,
        home: Option<crate::queue::remote::Home<'_>>,
    ) {
        let mut replaced = None;
        if let Some(q) = self.queues.get(name).map(|q| q.clone()) {
            let same = match &home {
                None => q.home.is_none(),
                Some(h) => q.home.as_deref() == Some(h.node) && q.exclusive_owner == h.owner,
            };
            if same {
                return;
            }
            replaced = Some(q);
        }
        self.queue_churn[1].fetch_add(1, Ordering::Relaxed);
        let q = match home {
            None => {
                let args = QueueArgs::parse(arguments, name, &self.name).unwrap_or_default();
                QueueShared::spawn(
                    name.to_owned(),
                    self,
                    durable,
                    None,
                    auto_delete,
                    arguments.clone(),
                    args,
                )
            }
            Some(home) => QueueShared::spawn_remote(
                name.to_owned(),
                self.name.clone(),
                durable,
                auto_delete,
                arguments.clone(),
                home,
            ),
        };
        self.register_replacing(name, q, replaced);
    }

    /// Installs a replicated queue led by this node: its task records messages in `journal`
    /// and starts from what the journal held. A queue already led here is kept; another
    /// handle of that name (on the queue's former leader) is replaced, without its bindings
    /// (the caller binds the new one).
    pub fn install_journaled(
        self: &Arc<Self>,
        name: &str,
        durable: bool,
        auto_delete: bool,
        arguments: &FieldTable,
        journal: Arc<dyn crate::queue::journal::Journal>,
        from: crate::queue::journal::Journaled,
    ) {
        let mut replaced = None;
        if let Some(q) = self.queues.get(name).map(|q| q.clone()) {
            if q.journal.as_ref().is_some_and(|j| !j.broken()) {
                return;
            }
            replaced = Some(q);
        }
        self.queue_churn[1].fetch_add(1, Ordering::Relaxed);
        let args = QueueArgs::parse(arguments, name, &self.name).unwrap_or_default();
        let q = QueueShared::spawn_journaled(
            name.to_owned(),
            self,
            durable,
            auto_delete,
            arguments.clone(),
            args,
            journal,
            from,
        );
        self.register_replacing(name, q, replaced);
    }

    /// Registers `q` as the queue `name`, in place of `replaced` (dropped, without its
    /// bindings). A replicated queue's new handle takes over the old one's consumers here,
    /// and its publishes wait for what was published through the old proxy
    /// (`queue::handover`): its leader moved, and its clients should not notice.
    fn register_replacing(&self, name: &str, q: QueueRef, replaced: Option<QueueRef>) {
        if let Some(prev) = replaced {
            if prev.args.quorum {
                if prev.home.is_some() {
                    q.follow(&prev);
                }
                prev.hand_off(&q);
            }
            self.drop_queue(name);
        }
        self.queues.insert(name.to_owned(), q);
    }

    /// Removes a queue the cluster deleted: its bindings here, and its messages when it lives
    /// here (never cascading: the cluster decided what else goes).
    pub fn drop_queue(&self, name: &str) {
        let Some((_, q)) = self.queues.remove(name) else {
            return;
        };
        q.mark_deleted();
        if let Some(journal) = &q.journal {
            // A replicated queue's data is its group's, which the cluster keeps or deletes.
            journal.detach();
        }
        self.queue_churn[2].fetch_add(1, Ordering::Relaxed);
        self.remove_destination(&Destination::Queue(q.clone()), exchanges::Cascade::No);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                match q.home {
                    Some(_) => q.shutdown().await,
                    None => {
                        let _ = q.delete(false, false).await;
                    }
                }
            });
        }
    }

    /// queue.bind.
    pub fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
        connection: u64,
    ) -> CoreResult<()> {
        let q = self.queue_bind_checks(queue, exchange, key, args, connection)?;
        let x = self.exchange(exchange)?;
        self.add_binding(
            &x,
            Binding {
                key: key.to_owned(),
                destination: Destination::Queue(q),
                arguments: args.clone(),
            },
        );
        Ok(())
    }

    /// What queue.bind checks (the queue exists and is not another connection's exclusive
    /// queue, the exchange exists, the arguments suit its type): the queue.
    pub fn queue_bind_checks(
        &self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
        connection: u64,
    ) -> CoreResult<QueueRef> {
        let q = self.queue(queue)?;
        self.check_exclusive(&q, connection)?;
        let x = self.binding_endpoints(exchange, None)?;
        Self::check_binding(&x, key, args)?;
        Ok(q)
    }

    /// queue.unbind; a missing queue or exchange unbinds nothing and succeeds, as in RabbitMQ.
    pub fn queue_unbind(
        &self,
        queue: &str,
        exchange: &str,
        key: &str,
        args: &FieldTable,
        connection: u64,
    ) -> CoreResult<()> {
        if exchange.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        let (Ok(q), Ok(x)) = (self.queue(queue), self.exchange(exchange)) else {
            return Ok(());
        };
        self.check_exclusive(&q, connection)?;
        self.unbind(
            &x,
            &Binding {
                key: key.to_owned(),
                destination: Destination::Queue(q),
                arguments: args.clone(),
            },
            exchanges::Cascade::Yes,
        );
        Ok(())
    }

    /// queue.delete; a missing queue deletes nothing and reports 0, as RabbitMQ 3.13 does.
    pub async fn queue_delete(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: u64,
    ) -> CoreResult<u32> {
        let Ok(q) = self.queue(name) else {
            return Ok(0);
        };
        self.check_exclusive(&q, connection)?;
        let n = match q.delete(if_unused, if_empty).await {
            Ok(n) => n,
            Err(CoreError::NotFound { .. }) => 0,
            Err(e) => return Err(e),
        };
        self.forget_queue(&q);
        Ok(n)
    }

    /// Drops a queue from the registry and every binding to it (its task stops on its own).
    pub fn forget_queue(&self, q: &QueueRef) {
        q.mark_deleted();
        if self
            .queues
            .remove_if(&q.name, |_, v| Arc::ptr_eq(v, q))
            .is_some()
        {
            self.queue_churn[2].fetch_add(1, Ordering::Relaxed);
            self.queue_forgotten(q);
        }
        self.remove_destination(&Destination::Queue(q.clone()), exchanges::Cascade::Yes);
    }
}

fn is_classic(v: Option<&AMQPValue>) -> bool {
    match v {
        None => true,
        Some(AMQPValue::LongString(s)) => s.as_bytes() == b"classic",
        Some(AMQPValue::ShortString(s)) => s.as_str() == "classic",
        _ => false,
    }
}
