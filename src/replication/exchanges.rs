//! Exchanges and exchange-to-exchange bindings in the tree: `["vhosts", v, "exchanges", x]`
//! -> the exchange as JSON (`type`, `durable`, `auto_delete`, `internal`, and `arguments` as
//! the hex of an AMQP field table, which keeps every value's AMQP type for equivalence
//! checks), and `["vhosts", v, "bindings", "x", destination, source, key, args]` -> nothing,
//! `args` being the hex of the binding's arguments, so bindings that differ only in their
//! arguments are distinct paths. Bindings live under their destination, so removing one
//! removes what leads to it by prefix; the source sits at one index, so `DeleteWhere` and
//! `IfNoneBelow` find an exchange's own bindings. The predeclared exchanges (`""`, `amq.*`)
//! exist on every node and are not in the tree.
//!
//! Bindings to queues stay on the queue's node until queue definitions are replicated.
//! Auto-delete exchanges go through the group like any removal: the proposer adds an
//! `IfNoneBelow` guard, so every node removes the exchange exactly when the replicated
//! bindings say it has none left; an operation that is not replicated (a queue unbound or
//! deleted) hands its decision to [`auto_delete_decider`], which proposes the same guard.

use super::delay_record::{DelayGroup, DELAYS};
use super::{unavailable, Record, VHOSTS};
use crate::broker::Broker;
use crate::cluster::types::{Command, Path};
use crate::error::{CoreError, CoreResult};
use crate::exchange::{Binding, Destination, Exchange};
use crate::vhost::{ExchangeOptions, VHost};
use amq_protocol::types::FieldTable;
use std::sync::Arc;

/// Where a vhost's exchanges live below it.
pub(super) const EXCHANGES: &str = "exchanges";
/// Where a vhost's bindings live below it.
pub(super) const BINDINGS: &str = "bindings";
/// The destination kind of exchange-to-exchange bindings.
const TO_EXCHANGE: &str = "x";
/// The destination kind of bindings to queues.
const TO_QUEUE: &str = "q";
/// The index of a binding path's source.
pub(super) const SOURCE_AT: usize = 5;

/// A binding's destination as its path names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End<'a> {
    /// An exchange.
    Exchange(&'a str),
    /// A queue.
    Queue(&'a str),
}

impl<'a> End<'a> {
    fn of(d: &'a Destination) -> End<'a> {
        match d {
            Destination::Exchange(x) => End::Exchange(x),
            Destination::Queue(q) => End::Queue(&q.name),
        }
    }
}

fn exchange_path(vhost: &str, name: &str) -> Path {
    vec![VHOSTS.into(), vhost.into(), EXCHANGES.into(), name.into()]
}

fn bindings_root(vhost: &str) -> Path {
    vec![VHOSTS.into(), vhost.into(), BINDINGS.into()]
}

/// Where the bindings to `to` live.
pub(super) fn bindings_to(vhost: &str, to: End<'_>) -> Path {
    let mut p = bindings_root(vhost);
    match to {
        End::Exchange(x) => p.extend([TO_EXCHANGE.into(), x.into()]),
        End::Queue(q) => p.extend([TO_QUEUE.into(), q.into()]),
    }
    p
}

/// The path of the binding of `source` to `to` with `key` and `arguments`.
pub(super) fn binding_path(
    vhost: &str,
    source: &str,
    key: &str,
    arguments: &FieldTable,
    to: End<'_>,
) -> Path {
    let mut p = bindings_to(vhost, to);
    p.extend([source.into(), key.into(), hex(&table_bytes(arguments))]);
    p
}

/// A field table in AMQP wire form.
fn table_bytes(t: &FieldTable) -> Vec<u8> {
    cookie_factory::gen_simple(
        amq_protocol::types::generation::gen_field_table(t),
        Vec::new(),
    )
    .unwrap_or_default()
}

/// A field table from its AMQP wire form.
fn table_of(bytes: &[u8]) -> Option<FieldTable> {
    amq_protocol::types::parsing::parse_field_table(bytes)
        .ok()
        .map(|(_, t)| t)
}

/// A field table as the hex of its AMQP wire form.
pub(super) fn table_hex(t: &FieldTable) -> String {
    hex(&table_bytes(t))
}

/// A field table from [`table_hex`]'s form.
pub(super) fn hex_table(s: &str) -> Option<FieldTable> {
    table_of(&unhex(s)?)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok()))
        .collect()
}

/// Whether an exchange exists on every node without being in the tree.
pub(super) fn predeclared(name: &str) -> bool {
    name.is_empty() || name.starts_with("amq.")
}

/// An exchange's record: with `delays`, the group holding its delayed messages.
fn encode_exchange(type_name: &str, o: &ExchangeOptions, delays: Option<&DelayGroup>) -> Vec<u8> {
    let mut j = serde_json::json!({
        "type": type_name,
        "durable": o.durable,
        "auto_delete": o.auto_delete,
        "internal": o.internal,
        "arguments": hex(&table_bytes(&o.arguments)),
    });
    if let (Some(d), Some(map)) = (delays, j.as_object_mut()) {
        map.insert(DELAYS.into(), d.fields());
    }
    j.to_string().into_bytes()
}

fn decode_exchange(bytes: &[u8]) -> Option<(String, ExchangeOptions)> {
    let j: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let flag = |k: &str| j.get(k).and_then(serde_json::Value::as_bool);
    Some((
        j.get("type")?.as_str()?.to_owned(),
        ExchangeOptions {
            passive: false,
            durable: flag("durable")?,
            auto_delete: flag("auto_delete")?,
            internal: flag("internal")?,
            arguments: table_of(&unhex(j.get("arguments")?.as_str()?)?)?,
        },
    ))
}

/// This node's exchanges (but the predeclared ones) and exchange-to-exchange bindings, as
/// tree records.
pub(super) fn records(b: &Broker) -> Vec<Record> {
    let mut out = Vec::new();
    for v in b.vhosts() {
        for x in v.exchanges() {
            if !predeclared(&x.name) {
                let o = ExchangeOptions {
                    passive: false,
                    durable: x.durable,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                    arguments: x.arguments.clone(),
                };
                out.push((
                    exchange_path(&v.name, &x.name),
                    encode_exchange(x.type_name(), &o, None),
                ));
            }
            for bd in x.bindings().list() {
                if replicated(&bd.destination) {
                    let to = End::of(&bd.destination);
                    let path = binding_path(&v.name, &x.name, &bd.key, &bd.arguments, to);
                    out.push((path, Vec::new()));
                }
            }
        }
    }
    out
}

/// Whether a binding to `d` is in the tree (bindings to exclusive queues stay on their
/// node, as the queues do).
fn replicated(d: &Destination) -> bool {
    match d {
        Destination::Exchange(_) => true,
        Destination::Queue(q) => q.exclusive_owner.is_none(),
    }
}

/// What a binding path names: its vhost, source, destination, key and arguments.
pub(super) fn binding_parts(path: &[String]) -> Option<(&str, &str, End<'_>, &str, FieldTable)> {
    let [_, vhost, _, kind, destination, source, key, args] = path else {
        return None;
    };
    let to = match kind.as_str() {
        TO_EXCHANGE => End::Exchange(destination),
        TO_QUEUE => End::Queue(destination),
        _ => return None,
    };
    Some((vhost, source, to, key, table_of(&unhex(args)?)?))
}

/// The binding a binding path names, in the vhost it names when that vhost and the
/// destination are here: the vhost, the source and the binding. Some(None) when the path is
/// well formed but names what is not here.
fn binding_of(b: &Broker, path: &[String]) -> Option<Option<(Arc<VHost>, String, Binding)>> {
    let (vhost, source, to, key, arguments) = binding_parts(path)?;
    let Some(v) = b.vhost(vhost) else {
        return Some(None);
    };
    let destination = match to {
        End::Exchange(x) => Destination::Exchange(x.to_owned()),
        End::Queue(q) => match v.queue(q) {
            Ok(q) => Destination::Queue(q),
            Err(_) => return Some(None),
        },
    };
    let binding = Binding {
        key: key.to_owned(),
        destination,
        arguments,
    };
    Some(Some((v, source.to_owned(), binding)))
}

/// Applies a put of an exchange or a binding; false when it does not decode.
pub(super) fn apply_put(b: &Broker, path: &[String], value: &[u8]) -> bool {
    match path {
        [_, vhost, kind, name] if kind == EXCHANGES => {
            let Some((type_name, o)) = decode_exchange(value) else {
                return false;
            };
            match b.vhost(vhost) {
                Some(v) => v.install_exchange(name, &type_name, &o, true),
                None => true,
            }
        }
        [_, _, kind, ..] if kind == BINDINGS => match binding_of(b, path) {
            Some(found) => {
                if let Some((v, source, binding)) = found {
                    v.install_binding(&source, binding);
                }
                true
            }
            None => false,
        },
        _ => true,
    }
}

/// Applies a delete of an exchange or a binding.
pub(super) fn apply_delete(b: &Broker, path: &[String]) {
    match path {
        [_, vhost, kind, name] if kind == EXCHANGES => {
            if let Some(v) = b.vhost(vhost) {
                v.drop_exchange(name);
            }
        }
        [_, _, kind, ..] if kind == BINDINGS => {
            if let Some(Some((v, source, binding))) = binding_of(b, path) {
                v.drop_binding(&source, &binding);
            }
        }
        _ => {}
    }
}

/// Removes an exchange, its bindings and those to it.
fn removal(vhost: &str, name: &str) -> Vec<Command> {
    vec![
        Command::Delete {
            path: exchange_path(vhost, name),
        },
        Command::DeleteWhere {
            prefix: bindings_root(vhost),
            at: SOURCE_AT,
            name: name.into(),
        },
        Command::DeleteWhere {
            prefix: bindings_to(vhost, End::Exchange(name)),
            at: SOURCE_AT - 1,
            name: name.into(),
        },
    ]
}

/// Removes an auto-delete exchange when, by then, no binding has it as its source.
pub(super) fn auto_removal(vhost: &str, name: &str) -> Command {
    Command::IfNoneBelow {
        prefix: bindings_root(vhost),
        at: SOURCE_AT,
        name: name.into(),
        then: removal(vhost, name),
    }
}

/// What removing every binding to `to` does to the auto-delete exchanges bound to it: each
/// of `v`'s (those committed here) that has a binding to it loses those, and goes when that
/// left it none; which of them is decided where the entry applies.
pub(super) fn emptied_sources(v: &VHost, to: End<'_>) -> Vec<Command> {
    let to_it = bindings_to(&v.name, to);
    v.exchanges()
        .iter()
        .filter(|a| a.auto_delete && to != End::Exchange(&a.name) && !bound_to_queues(a))
        .map(|a| Command::IfAnyBelow {
            prefix: to_it.clone(),
            at: SOURCE_AT,
            name: a.name.clone(),
            then: vec![
                Command::DeleteWhere {
                    prefix: to_it.clone(),
                    at: SOURCE_AT,
                    name: a.name.clone(),
                },
                auto_removal(&v.name, &a.name),
            ],
        })
        .collect()
}

/// Whether an exchange has bindings that only this node knows (to exclusive queues).
fn bound_to_queues(x: &Exchange) -> bool {
    x.bindings()
        .list()
        .iter()
        .any(|b| !replicated(&b.destination))
}

/// `then`, applied only while every exchange of `names` that is in the tree exists.
pub(super) fn with_exchanges(vhost: &str, names: &[&str], then: Command) -> Command {
    names
        .iter()
        .rev()
        .filter(|n| !predeclared(n))
        .fold(then, |then, n| Command::IfPresent {
            path: exchange_path(vhost, n),
            then: vec![then],
        })
}

impl Broker {
    /// An exchange by name, with a miss confirmed against the cluster
    /// ([`Broker::catch_up`]): one declared on another node a moment ago is found.
    pub async fn find_exchange(&self, v: &VHost, name: &str) -> CoreResult<Arc<Exchange>> {
        match v.exchange(name) {
            Err(CoreError::NotFound { .. }) if self.catch_up().await => v.exchange(name),
            found => found,
        }
    }

    /// exchange.declare, through the cluster when the node is in one: an exchange already
    /// here is answered here; a new one is created by the group (the first of racing
    /// declares wins, the others are checked for equivalence against it).
    pub async fn declare_exchange(
        &self,
        v: &VHost,
        name: &str,
        type_name: &str,
        o: &ExchangeOptions,
    ) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            return v.exchange_declare(name, type_name, o);
        };
        let checks = match v.exchange_declare_checks(name, type_name, o) {
            Err(CoreError::NotFound { .. }) if self.catch_up().await => {
                v.exchange_declare_checks(name, type_name, o)
            }
            other => other,
        };
        if checks?.is_none() {
            return Ok(());
        }
        // A durable delayed exchange's messages are held by a group of their own.
        let delays = if type_name == crate::exchange::DELAYED_TYPE && o.durable {
            let (group, members) = super::placement::place(&node, node.name(), None).await;
            Some(DelayGroup {
                group,
                members,
                node: node.name().to_owned(),
            })
        } else {
            None
        };
        let cmd = Command::IfPresent {
            path: super::vhost_path(&v.name),
            then: vec![Command::Create {
                path: exchange_path(&v.name, name),
                value: encode_exchange(type_name, o, delays.as_ref()),
            }],
        };
        let reply = node.write(cmd).await.map_err(unavailable)?;
        match reply.before.as_slice() {
            [Some(_), None] => Ok(()),
            [Some(_), Some(_)] => v.exchange_declare_checks(name, type_name, o).map(|_| ()),
            _ => Err(CoreError::Unavailable(format!(
                "vhost '{}' was deleted",
                v.name
            ))),
        }
    }

    /// exchange.delete, through the cluster when the node is in one, with the auto-delete
    /// exchanges it leaves without bindings.
    pub async fn delete_exchange(&self, v: &VHost, name: &str, if_unused: bool) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            return v.exchange_delete(name, if_unused);
        };
        if v.exchange_delete_checks(name, if_unused)?.is_none() {
            return Ok(());
        }
        // Every auto-delete exchange committed so far is a candidate; which of them were bound
        // to this one, and are left with nothing, is decided where the entry applies.
        self.catch_up().await;
        let mut batch = emptied_sources(v, End::Exchange(name));
        batch.extend(removal(&v.name, name));
        node.write(Command::Batch(batch))
            .await
            .map_err(unavailable)?;
        self.settled_everywhere().await;
        Ok(())
    }

    /// exchange.bind, through the cluster when the node is in one.
    pub async fn bind_exchange(
        &self,
        v: &VHost,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            return v.exchange_bind(destination, source, key, args);
        };
        if let Err(CoreError::NotFound { .. }) =
            v.exchange_bind_checks(destination, source, key, args)
        {
            self.catch_up().await;
        }
        v.exchange_bind_checks(destination, source, key, args)?;
        let put = Command::Put {
            path: binding_path(&v.name, source, key, args, End::Exchange(destination)),
            value: Vec::new(),
        };
        let ends = [source, destination];
        let guards = ends.iter().filter(|n| !predeclared(n)).count();
        let reply = node
            .write(with_exchanges(&v.name, &ends, put))
            .await
            .map_err(unavailable)?;
        // A guard stopped it: an end was deleted meanwhile (the checks name which).
        if reply.before.len() <= guards {
            v.exchange_bind_checks(destination, source, key, args)?;
        }
        self.settled_everywhere().await;
        Ok(())
    }

    /// exchange.unbind, through the cluster when the node is in one, with the source when it
    /// is auto-delete and this was its last binding. Unbinding what is not bound changes
    /// nothing.
    pub async fn unbind_exchange(
        &self,
        v: &VHost,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> CoreResult<()> {
        let Some(node) = self.cluster.get() else {
            return v.exchange_unbind(destination, source, key, args);
        };
        if source.is_empty() || destination.is_empty() {
            return v.exchange_unbind(destination, source, key, args);
        }
        let path = binding_path(&v.name, source, key, args, End::Exchange(destination));
        self.unbind_path(&node, v, source, path).await
    }

    /// Removes the replicated binding at `path` of `source`, with the source when it is
    /// auto-delete and this was its last binding.
    pub(super) async fn unbind_path(
        &self,
        node: &Arc<crate::cluster::MetaNode>,
        v: &VHost,
        source: &str,
        path: Path,
    ) -> CoreResult<()> {
        let mut then = vec![Command::Delete { path: path.clone() }];
        // Whether this was the source's last binding is decided where the entry applies
        // (this node may not have applied every binding yet); an exchange's auto-delete flag
        // never changes.
        let source_x = self.find_exchange(v, source).await;
        if source_x.is_ok_and(|x| x.auto_delete && !bound_to_queues(&x)) {
            then.push(auto_removal(&v.name, source));
        }
        node.write(Command::IfPresent { path, then })
            .await
            .map_err(unavailable)?;
        self.settled_everywhere().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amq_protocol::types::{AMQPValue, LongString};

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    #[test]
    fn an_exchange_value_decodes_to_what_was_encoded() {
        let o = ExchangeOptions {
            passive: false,
            durable: true,
            auto_delete: false,
            internal: true,
            arguments: table(&[(
                "alternate-exchange",
                AMQPValue::LongString(LongString::from("ae")),
            )]),
        };
        let (kind, back) = decode_exchange(&encode_exchange("topic", &o, None)).expect("decodes");
        assert_eq!(kind, "topic");
        assert_eq!(
            (back.durable, back.auto_delete, back.internal),
            (true, false, true)
        );
        assert_eq!(back.arguments, o.arguments);
        assert!(decode_exchange(b"junk").is_none());
    }

    #[test]
    fn a_binding_path_names_its_binding_and_arguments_tell_bindings_apart() {
        let b = |n: i32| Binding {
            key: "k.#".into(),
            destination: Destination::Exchange("dest".into()),
            arguments: table(&[("x-n", AMQPValue::LongInt(n))]),
        };
        let path_of =
            |b: &Binding| binding_path("/", "src", &b.key, &b.arguments, End::of(&b.destination));
        let path = path_of(&b(1));
        assert_ne!(path, path_of(&b(2)));
        assert_eq!(path.get(SOURCE_AT).map(String::as_str), Some("src"));
        let (vhost, source, to, key, args) = binding_parts(&path).expect("a binding path");
        assert_eq!(
            (vhost, source, to, key),
            ("/", "src", End::Exchange("dest"), "k.#")
        );
        assert_eq!(args, b(1).arguments);
        let to_queue = binding_path("/", "src", "k", &args, End::Queue("q"));
        assert_eq!(binding_parts(&to_queue).map(|p| p.2), Some(End::Queue("q")));
        assert_ne!(to_queue.get(3), path.get(3), "queues and exchanges apart");
        let mut bad = path.clone();
        if let Some(args) = bad.last_mut() {
            args.push('z');
        }
        assert!(binding_parts(&bad).is_none(), "odd hex is refused");
        assert_eq!(unhex(&hex(&[0, 15, 255])), Some(vec![0, 15, 255]));
        assert!(unhex("0g").is_none());
    }
}
