//! Exchanges. Each type only stores and matches its bindings (`direct`, `fanout`, `topic`,
//! `headers`, `x-consistent-hash`, `x-federation-upstream`); this module owns what they share: the binding list, equivalence checks, and the
//! routing walk through exchange-to-exchange bindings (done by `VHost::route`).

pub mod consistent_hash;
mod direct;
mod fanout;
pub mod federation_upstream;
mod headers;
pub mod topic;

use crate::message::Message;
use crate::queue::QueueRef;
use amq_protocol::types::FieldTable;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Destinations matched by one exchange for one message (on the stack for the usual few).
pub type Dests<'a> = smallvec::SmallVec<[&'a Destination; 8]>;

pub use headers::{parse_x_match, values_equal};

/// The delayed-message exchange type (RabbitMQ's plugin, built in here).
pub const DELAYED_TYPE: &str = "x-delayed-message";

/// Resolves a declared type name and arguments to (routing kind, delayed); None when unknown.
/// An `x-delayed-message` exchange routes as its `x-delayed-type` argument says.
pub fn resolve_type(type_name: &str, arguments: &FieldTable) -> Option<(ExchangeKind, bool)> {
    if type_name == DELAYED_TYPE {
        let inner = arguments
            .inner()
            .get("x-delayed-type")
            .and_then(crate::args::text)?;
        return ExchangeKind::parse(&inner).map(|k| (k, true));
    }
    ExchangeKind::parse(type_name).map(|k| (k, false))
}

/// Exchange types Warren implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Exact routing-key match.
    Direct,
    /// Every binding.
    Fanout,
    /// Pattern match on dot-separated words.
    Topic,
    /// Match on message headers.
    Headers,
    /// One destination per message, by a hash of its key (`x-consistent-hash`).
    ConsistentHash,
    /// A fanout that stops messages at their hop limit or their downstream
    /// (`x-federation-upstream`, made by federation links).
    FederationUpstream,
}

impl ExchangeKind {
    /// Parses a type name as sent in exchange.declare.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "direct" => Self::Direct,
            "fanout" => Self::Fanout,
            "topic" => Self::Topic,
            "headers" => Self::Headers,
            consistent_hash::TYPE_NAME => Self::ConsistentHash,
            federation_upstream::TYPE_NAME => Self::FederationUpstream,
            _ => return None,
        })
    }

    /// The type's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Fanout => "fanout",
            Self::Topic => "topic",
            Self::Headers => "headers",
            Self::ConsistentHash => consistent_hash::TYPE_NAME,
            Self::FederationUpstream => federation_upstream::TYPE_NAME,
        }
    }
}

/// Where a binding leads.
#[derive(Clone, Debug)]
pub enum Destination {
    /// A queue (the live handle, so routing needs no lookup).
    Queue(QueueRef),
    /// Another exchange, by name (exchange.bind).
    Exchange(String),
}

impl PartialEq for Destination {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Destination::Queue(a), Destination::Queue(b)) => Arc::ptr_eq(a, b),
            (Destination::Exchange(a), Destination::Exchange(b)) => a == b,
            _ => false,
        }
    }
}

/// A binding from an exchange to a destination.
#[derive(Clone, Debug)]
pub struct Binding {
    /// Routing / binding key.
    pub key: String,
    /// Destination.
    pub destination: Destination,
    /// Binding arguments.
    pub arguments: FieldTable,
}

impl Binding {
    /// A binding to the exchange `destination` (exchange.bind's).
    pub fn to_exchange(destination: &str, key: &str, arguments: &FieldTable) -> Binding {
        Binding {
            key: key.to_owned(),
            destination: Destination::Exchange(destination.to_owned()),
            arguments: arguments.clone(),
        }
    }

    /// Whether two bindings are the same (key, destination and arguments).
    pub fn same(&self, other: &Binding) -> bool {
        self.key == other.key
            && self.destination == other.destination
            && self.arguments == other.arguments
    }
}

#[derive(Debug)]
enum Matcher {
    Direct(direct::DirectBindings),
    Fanout(fanout::FanoutBindings),
    Topic(topic::TopicBindings),
    Headers(headers::HeadersBindings),
    ConsistentHash(consistent_hash::ConsistentHashBindings),
    FederationUpstream(federation_upstream::FederationUpstreamBindings),
}

/// The bindings of one exchange: the full list and the type's index.
#[derive(Debug)]
pub struct Bindings {
    all: Vec<Binding>,
    matcher: Matcher,
}

impl Bindings {
    /// Every binding, in creation order.
    pub fn list(&self) -> &[Binding] {
        &self.all
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Adds a binding; false when an identical one exists.
    pub fn add(&mut self, b: Binding) -> bool {
        if self.all.iter().any(|x| x.same(&b)) {
            return false;
        }
        match &mut self.matcher {
            Matcher::Direct(m) => {
                m.bind(&b);
            }
            Matcher::Fanout(m) => {
                m.bind(&b);
            }
            Matcher::Topic(m) => {
                m.bind(&b);
            }
            Matcher::Headers(m) => {
                m.bind(&b);
            }
            Matcher::ConsistentHash(m) => m.bind(&b),
            Matcher::FederationUpstream(m) => m.bind(&b),
        }
        self.all.push(b);
        true
    }

    /// Removes a binding; false when none matched.
    pub fn remove(&mut self, b: &Binding) -> bool {
        let Some(pos) = self.all.iter().position(|x| x.same(b)) else {
            return false;
        };
        self.all.remove(pos);
        let same_key_dest = self
            .all
            .iter()
            .any(|x| x.key == b.key && x.destination == b.destination);
        match &mut self.matcher {
            Matcher::Direct(m) if !same_key_dest => {
                m.unbind(b);
            }
            Matcher::Topic(m) if !same_key_dest => {
                m.unbind(b);
            }
            Matcher::Fanout(m) => {
                let still = self.all.iter().any(|x| x.destination == b.destination);
                m.unbind(b, still);
            }
            Matcher::FederationUpstream(m) => {
                let still = self.all.iter().any(|x| x.destination == b.destination);
                m.unbind(b, still);
            }
            Matcher::Headers(m) => {
                m.unbind(b);
            }
            Matcher::ConsistentHash(m) => m.unbind(b),
            _ => {}
        }
        true
    }

    /// Removes every binding to `dest` and returns them.
    pub fn remove_destination(&mut self, dest: &Destination) -> Vec<Binding> {
        let gone: Vec<Binding> = self
            .all
            .iter()
            .filter(|b| &b.destination == dest)
            .cloned()
            .collect();
        for b in &gone {
            self.remove(b);
        }
        gone
    }

    /// Appends the destinations matching a message.
    pub fn route<'a>(
        &'a self,
        key: &str,
        msg: &Message,
        headers: &mut Option<FieldTable>,
        out: &mut Dests<'a>,
    ) {
        match &self.matcher {
            Matcher::Direct(m) => m.route(key, out),
            Matcher::Fanout(m) => m.route(out),
            Matcher::Topic(m) => m.route(key, out),
            Matcher::Headers(m) => {
                let h = headers.get_or_insert_with(|| msg.headers());
                m.route(h, out)
            }
            Matcher::ConsistentHash(m) => m.route(key, msg, headers, out),
            Matcher::FederationUpstream(m) => m.route(msg, headers, out),
        }
    }
}

/// An exchange and its bindings.
#[derive(Debug)]
pub struct Exchange {
    /// Name ("" is the default exchange).
    pub name: String,
    /// Type.
    pub kind: ExchangeKind,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last binding as a source goes.
    pub auto_delete: bool,
    /// Cannot be published to directly.
    pub internal: bool,
    /// Declare arguments.
    pub arguments: FieldTable,
    /// The `alternate-exchange` argument: where unroutable messages go.
    pub alternate: Option<String>,
    /// An `x-delayed-message` exchange (routing like `kind` once a message's `x-delay` is over).
    pub delayed: bool,
    /// The policy in force, if any.
    policy: RwLock<Option<Arc<crate::policy::Policy>>>,
    bindings: RwLock<Bindings>,
    /// Set when the exchange is deleted, so cached handles notice.
    deleted: AtomicBool,
}

impl Exchange {
    /// A new exchange with no bindings.
    pub fn new(
        name: String,
        kind: ExchangeKind,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> Self {
        let matcher = match kind {
            ExchangeKind::Direct => Matcher::Direct(Default::default()),
            ExchangeKind::Fanout => Matcher::Fanout(Default::default()),
            ExchangeKind::Topic => Matcher::Topic(Default::default()),
            ExchangeKind::Headers => Matcher::Headers(Default::default()),
            ExchangeKind::ConsistentHash => {
                Matcher::ConsistentHash(consistent_hash::ConsistentHashBindings::new(&arguments))
            }
            ExchangeKind::FederationUpstream => Matcher::FederationUpstream(
                federation_upstream::FederationUpstreamBindings::new(&arguments),
            ),
        };
        let alternate = arguments
            .inner()
            .get("alternate-exchange")
            .and_then(crate::args::text);
        Exchange {
            name,
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
            alternate,
            delayed: false,
            policy: RwLock::new(None),
            bindings: RwLock::new(Bindings {
                all: Vec::new(),
                matcher,
            }),
            deleted: AtomicBool::new(false),
        }
    }

    /// Makes it an `x-delayed-message` exchange.
    pub fn into_delayed(mut self) -> Self {
        self.delayed = true;
        self
    }

    /// The type name it was declared with.
    pub fn type_name(&self) -> &'static str {
        if self.delayed {
            DELAYED_TYPE
        } else {
            self.kind.as_str()
        }
    }

    /// The policy in force, if any.
    pub fn policy(&self) -> Option<Arc<crate::policy::Policy>> {
        match self.policy.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts a policy in force (or none).
    pub fn set_policy(&self, p: Option<Arc<crate::policy::Policy>>) {
        match self.policy.write() {
            Ok(mut slot) => *slot = p,
            Err(poisoned) => *poisoned.into_inner() = p,
        }
    }

    /// Where unroutable messages go: the `alternate-exchange` argument, else the policy's.
    pub fn alternate_exchange(&self) -> Option<String> {
        self.alternate.clone().or_else(|| {
            self.policy()?
                .definition
                .get("alternate-exchange")?
                .as_str()
                .map(str::to_owned)
        })
    }

    /// Marks the exchange deleted.
    pub fn mark_deleted(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    /// Whether it was deleted (a cached handle must be looked up again).
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Shared access to the bindings (never held across `.await`).
    pub fn bindings(&self) -> RwLockReadGuard<'_, Bindings> {
        self.bindings.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive access to the bindings (never held across `.await`).
    pub fn bindings_mut(&self) -> RwLockWriteGuard<'_, Bindings> {
        self.bindings.write().unwrap_or_else(|e| e.into_inner())
    }
}
