//! Exchanges and bindings of a vhost: exchange.declare / delete, exchange.bind / unbind, the
//! binding bookkeeping queue.bind shares, and what a restart or the cluster installs. When the
//! vhost is replicated, an auto-delete exchange left without bindings by an operation that is
//! not itself replicated is not removed here but handed to the vhost's auto-delete decider
//! ([`VHost::set_auto_delete_decider`]), so every node removes it when the decision is applied.

use super::{value_text, ExchangeOptions, VHost};
use crate::error::{CoreError, CoreResult, Kind, Precondition, Refusal};
use crate::exchange::{
    consistent_hash, federation_upstream, parse_x_match, resolve_type, Binding, Destination,
    Exchange, ExchangeKind, DELAYED_TYPE,
};
use crate::store::{BindingDestination, BindingRecord, ExchangeRecord};
use amq_protocol::types::FieldTable;
use std::sync::{Arc, OnceLock};

/// What an operation of this node removed, or left to be removed, that a replicated vhost
/// removes on every node.
#[derive(Clone, Copy, Debug)]
pub enum AutoRemoval<'a> {
    /// An auto-delete exchange left without bindings (by name).
    Exchange(&'a str),
    /// A queue that removed itself (auto-delete, `x-expires`), by name.
    Queue(&'a str),
    /// An exclusive queue of this node went (deleted, its connection closed, auto-delete):
    /// not replicated, but other nodes hold a handle on it.
    Exclusive(&'a crate::queue::QueueShared),
}

/// Decides the fate of what an operation of this node auto-removed ([`AutoRemoval`]), when
/// the vhost is replicated and it must go on every node.
pub type AutoDeleteDecider = Arc<dyn Fn(&VHost, AutoRemoval<'_>) + Send + Sync>;

/// An [`AutoDeleteDecider`] slot, set once (when the cluster starts).
#[derive(Default)]
pub struct Decider(OnceLock<AutoDeleteDecider>);

impl Decider {
    /// Sets the decider; false when one was set already.
    pub fn set(&self, decider: AutoDeleteDecider) -> bool {
        self.0.set(decider).is_ok()
    }

    /// The decider, once set.
    pub fn get(&self) -> Option<&AutoDeleteDecider> {
        self.0.get()
    }
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Decider(cluster)"
        } else {
            "Decider(local)"
        })
    }
}

/// Whether an exchange removal also removes the auto-delete exchanges it leaves without
/// bindings. Removals the cluster applies do not: the cluster decided those itself.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Cascade {
    Yes,
    No,
}

impl VHost {
    /// Hands auto-delete decisions to `decider` from now on (set once, when the node joins a
    /// cluster).
    pub fn set_auto_delete_decider(&self, decider: AutoDeleteDecider) {
        self.auto_delete.set(decider);
    }

    /// A queue left the registry here: other nodes are told when it was this node's
    /// exclusive queue.
    pub(super) fn queue_forgotten(&self, q: &crate::queue::QueueShared) {
        if q.exclusive_owner.is_some() && q.home.is_none() {
            if let Some(decide) = self.auto_delete.get() {
                decide(self, AutoRemoval::Exclusive(q));
            }
        }
    }

    /// A queue here removed itself: a replicated vhost has the cluster remove its record.
    pub(super) fn queue_removed_itself(&self, q: &crate::queue::QueueShared) {
        if q.exclusive_owner.is_none() && q.home.is_none() {
            if let Some(decide) = self.auto_delete.get() {
                decide(self, AutoRemoval::Queue(&q.name));
            }
        }
    }

    /// An auto-delete exchange lost its last binding.
    fn emptied(&self, name: &str, cascade: Cascade) {
        if cascade == Cascade::No {
            return;
        }
        match self.auto_delete.get() {
            Some(decide) => decide(self, AutoRemoval::Exchange(name)),
            None => self.remove_exchange(name, Cascade::Yes),
        }
    }

    fn persist_exchange(&self, x: &Exchange) {
        self.store.put_exchange(&ExchangeRecord {
            vhost: &self.name,
            name: &x.name,
            kind: x.type_name(),
            auto_delete: x.auto_delete,
            internal: x.internal,
            arguments: &x.arguments,
        });
    }

    /// Whether a binding from `source` to `dest` survives a restart (both ends durable).
    fn durable_binding(&self, source: &Exchange, dest: &Destination) -> bool {
        source.durable
            && match dest {
                Destination::Queue(q) => q.store_id.is_some(),
                Destination::Exchange(name) => self.exchanges.get(name).is_some_and(|x| x.durable),
            }
    }

    /// A binding of `source` as the store records it.
    fn binding_record<'a>(&'a self, source: &'a str, b: &'a Binding) -> BindingRecord<'a> {
        BindingRecord {
            vhost: &self.name,
            source,
            destination: match &b.destination {
                Destination::Queue(q) => BindingDestination::Queue(&q.name),
                Destination::Exchange(x) => BindingDestination::Exchange(x),
            },
            routing_key: &b.key,
            arguments: &b.arguments,
        }
    }

    pub(super) fn add_binding(&self, x: &Exchange, b: Binding) {
        let durable = self.durable_binding(x, &b.destination).then(|| b.clone());
        if x.bindings_mut().add(b) {
            if let Some(b) = durable {
                self.store.put_binding(&self.binding_record(&x.name, &b));
            }
        }
    }

    fn forget_bindings(&self, source: &Exchange, gone: &[Binding]) {
        for b in gone {
            if self.durable_binding(source, &b.destination) {
                self.store
                    .delete_binding(&self.binding_record(&source.name, b));
            }
        }
    }

    /// Installs an exchange as a restart or the cluster knows it (`persist`: also write it to
    /// the store, when durable). An equivalent exchange already there is kept with its
    /// bindings; false when the type is unknown.
    pub fn install_exchange(
        &self,
        name: &str,
        type_name: &str,
        o: &ExchangeOptions,
        persist: bool,
    ) -> bool {
        let Some((kind, delayed)) = resolve_type(type_name, &o.arguments) else {
            return false;
        };
        if let Ok(x) = self.exchange(name) {
            if x.kind == kind
                && x.delayed == delayed
                && x.durable == o.durable
                && x.auto_delete == o.auto_delete
                && x.internal == o.internal
                && x.arguments == o.arguments
            {
                return true;
            }
        }
        let x = Arc::new(self.build_exchange(name, kind, delayed, o));
        if persist && x.durable {
            self.persist_exchange(&x);
        }
        if let Some(old) = self.exchanges.insert(name.to_owned(), x) {
            old.mark_deleted();
        }
        true
    }

    fn build_exchange(
        &self,
        name: &str,
        kind: ExchangeKind,
        delayed: bool,
        o: &ExchangeOptions,
    ) -> Exchange {
        let mut x = Exchange::new(
            name.to_owned(),
            kind,
            o.durable,
            o.auto_delete,
            o.internal,
            o.arguments.clone(),
        );
        if delayed {
            x = x.into_delayed();
        }
        x.set_policy(self.policies.for_exchange(name));
        x
    }

    /// Re-creates a durable binding read from the store.
    pub fn restore_binding(
        &self,
        source: &str,
        destination: Destination,
        key: String,
        arguments: FieldTable,
    ) {
        if let Some(x) = self.exchanges.get(source).map(|x| x.clone()) {
            x.bindings_mut().add(Binding {
                key,
                destination,
                arguments,
            });
        }
    }

    /// Adds a binding the cluster applied (written to the store when both ends are durable);
    /// nothing when the source is not here.
    pub fn install_binding(&self, source: &str, b: Binding) {
        if let Ok(x) = self.exchange(source) {
            self.add_binding(&x, b);
        }
    }

    /// Removes a binding the cluster applied, leaving auto-delete decisions to the cluster.
    pub fn drop_binding(&self, source: &str, b: &Binding) {
        if let Ok(x) = self.exchange(source) {
            self.unbind(&x, b, Cascade::No);
        }
    }

    /// Removes an exchange the cluster applied, with its bindings and those to it, leaving
    /// auto-delete decisions to the cluster.
    pub fn drop_exchange(&self, name: &str) {
        self.remove_exchange(name, Cascade::No);
    }

    /// exchange.declare.
    pub fn exchange_declare(
        &self,
        name: &str,
        type_name: &str,
        o: &ExchangeOptions,
    ) -> CoreResult<()> {
        let Some((kind, delayed)) = self.exchange_declare_checks(name, type_name, o)? else {
            return Ok(());
        };
        if let dashmap::mapref::entry::Entry::Vacant(e) = self.exchanges.entry(name.to_owned()) {
            let x = Arc::new(self.build_exchange(name, kind, delayed, o));
            if x.durable {
                self.persist_exchange(&x);
            }
            e.insert(x);
        }
        Ok(())
    }

    /// What exchange.declare checks against the exchanges here: None when it is answered
    /// already (passive and found, or an equivalent exchange exists), the resolved type when
    /// the exchange is new and may be created; the refusal otherwise (404 for a passive miss).
    pub fn exchange_declare_checks(
        &self,
        name: &str,
        type_name: &str,
        o: &ExchangeOptions,
    ) -> CoreResult<Option<(ExchangeKind, bool)>> {
        if name.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if o.passive {
            self.exchange(name)?;
            return Ok(None);
        }
        let (kind, delayed) = resolve_type(type_name, &o.arguments).ok_or_else(|| {
            if type_name == DELAYED_TYPE {
                Precondition::DelayedType
            } else {
                Precondition::ExchangeType(type_name.to_owned())
            }
        })?;
        let Ok(existing) = self.exchange(name) else {
            if name.starts_with("amq.") {
                return Err(Refusal::ReservedName {
                    kind: Kind::Exchange,
                    name: name.to_owned(),
                }
                .into());
            }
            match kind {
                ExchangeKind::ConsistentHash => {
                    consistent_hash::parse_hash_on(&o.arguments)
                        .map_err(Precondition::ExchangeArgs)?;
                }
                ExchangeKind::FederationUpstream => {
                    federation_upstream::validate(&o.arguments)
                        .map_err(Precondition::ExchangeArgs)?;
                }
                _ => {}
            }
            return Ok(Some((kind, delayed)));
        };
        self.check_equivalent(&existing, kind, delayed, type_name, o)?;
        Ok(None)
    }

    fn check_equivalent(
        &self,
        existing: &Exchange,
        kind: ExchangeKind,
        delayed: bool,
        type_name: &str,
        o: &ExchangeOptions,
    ) -> CoreResult<()> {
        let name = existing.name.as_str();
        let neq = |arg: &str, got: String, cur: String| -> CoreError {
            Precondition::Inequivalent {
                kind: Kind::Exchange,
                name: name.to_owned(),
                vhost: self.name.clone(),
                arg: arg.to_owned(),
                received: format!("'{got}'"),
                current: format!("'{cur}'"),
            }
            .into()
        };
        if existing.kind != kind || existing.delayed != delayed {
            return Err(neq("type", type_name.into(), existing.type_name().into()));
        }
        if existing.durable != o.durable {
            return Err(neq(
                "durable",
                o.durable.to_string(),
                existing.durable.to_string(),
            ));
        }
        if existing.auto_delete != o.auto_delete {
            return Err(neq(
                "auto_delete",
                o.auto_delete.to_string(),
                existing.auto_delete.to_string(),
            ));
        }
        if existing.internal != o.internal {
            return Err(neq(
                "internal",
                o.internal.to_string(),
                existing.internal.to_string(),
            ));
        }
        // The type's own arguments first, then the alternate exchange (RabbitMQ's order).
        let typed: &[&str] = match kind {
            ExchangeKind::FederationUpstream => &[federation_upstream::MAX_HOPS_ARG],
            _ => &[],
        };
        for key in typed.iter().chain(["alternate-exchange"].iter()) {
            let (a, b) = (
                o.arguments.inner().get(*key),
                existing.arguments.inner().get(*key),
            );
            if a != b {
                return Err(Precondition::Inequivalent {
                    kind: Kind::Exchange,
                    name: name.to_owned(),
                    vhost: self.name.clone(),
                    arg: (*key).to_owned(),
                    received: value_text(a),
                    current: value_text(b),
                }
                .into());
            }
        }
        Ok(())
    }

    /// exchange.delete.
    pub fn exchange_delete(&self, name: &str, if_unused: bool) -> CoreResult<()> {
        if self.exchange_delete_checks(name, if_unused)?.is_some() {
            self.remove_exchange(name, Cascade::Yes);
        }
        Ok(())
    }

    /// What exchange.delete checks: the exchange when there is one to delete, None when it
    /// is missing (which succeeds, as in RabbitMQ); the refusal otherwise.
    pub fn exchange_delete_checks(
        &self,
        name: &str,
        if_unused: bool,
    ) -> CoreResult<Option<Arc<Exchange>>> {
        if name.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if name.starts_with("amq.") && self.exchanges.contains_key(name) {
            return Err(Refusal::SystemExchange {
                name: name.to_owned(),
                vhost: self.name.clone(),
            }
            .into());
        }
        let Ok(x) = self.exchange(name) else {
            return Ok(None);
        };
        if if_unused && !x.bindings().is_empty() {
            return Err(Precondition::InUse {
                kind: Kind::Exchange,
                name: name.to_owned(),
                vhost: self.name.clone(),
            }
            .into());
        }
        Ok(Some(x))
    }

    /// Removes an exchange, its bindings, and every binding that leads to it.
    fn remove_exchange(&self, name: &str, cascade: Cascade) {
        let Some((_, x)) = self.exchanges.remove(name) else {
            return;
        };
        x.mark_deleted();
        let own: Vec<Binding> = x.bindings().list().to_vec();
        self.forget_bindings(&x, &own);
        if x.durable {
            self.store.delete_exchange(&self.name, name);
        }
        self.remove_destination(&Destination::Exchange(name.to_owned()), cascade);
    }

    /// Removes the bindings to `dest` from every exchange, then (with `cascade`) deletes
    /// auto-delete exchanges left without bindings.
    pub(super) fn remove_destination(&self, dest: &Destination, cascade: Cascade) {
        let mut emptied = Vec::new();
        for x in self.exchanges() {
            let (gone, empty) = {
                let mut b = x.bindings_mut();
                let gone = b.remove_destination(dest);
                (gone, b.is_empty())
            };
            if gone.is_empty() {
                continue;
            }
            self.forget_bindings(&x, &gone);
            if empty && x.auto_delete {
                emptied.push(x.name.clone());
            }
        }
        for name in emptied {
            self.emptied(&name, cascade);
        }
    }

    pub(super) fn binding_endpoints(
        &self,
        source: &str,
        destination_exchange: Option<&str>,
    ) -> CoreResult<Arc<Exchange>> {
        if source.is_empty() || destination_exchange == Some("") {
            return Err(Self::default_exchange_refused());
        }
        let x = self.exchange(source)?;
        if let Some(d) = destination_exchange {
            self.exchange(d)?;
        }
        Ok(x)
    }

    /// Whether a binding with `key` and `args` suits the exchange's type: a headers exchange's
    /// `x-match`, a consistent-hash exchange's weight.
    pub(super) fn check_binding(x: &Exchange, key: &str, args: &FieldTable) -> CoreResult<()> {
        match x.kind {
            ExchangeKind::Headers => {
                parse_x_match(args).map_err(Precondition::BindingArgs)?;
            }
            ExchangeKind::ConsistentHash => {
                consistent_hash::parse_weight(key).map_err(Precondition::BindingArgs)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// exchange.bind (destination receives what source routes).
    pub fn exchange_bind(
        &self,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> CoreResult<()> {
        let x = self.exchange_bind_checks(destination, source, key, args)?;
        self.add_binding(&x, Binding::to_exchange(destination, key, args));
        Ok(())
    }

    /// What exchange.bind checks (both ends exist, the arguments suit the source's type):
    /// the source.
    pub fn exchange_bind_checks(
        &self,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> CoreResult<Arc<Exchange>> {
        let x = self.binding_endpoints(source, Some(destination))?;
        Self::check_binding(&x, key, args)?;
        Ok(x)
    }

    /// exchange.unbind; unbinding from or to a missing exchange succeeds, as in RabbitMQ.
    pub fn exchange_unbind(
        &self,
        destination: &str,
        source: &str,
        key: &str,
        args: &FieldTable,
    ) -> CoreResult<()> {
        if source.is_empty() || destination.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if let Ok(x) = self.exchange(source) {
            self.unbind(
                &x,
                &Binding::to_exchange(destination, key, args),
                Cascade::Yes,
            );
        }
        Ok(())
    }

    pub(super) fn unbind(&self, x: &Exchange, b: &Binding, cascade: Cascade) {
        let (removed, now_empty) = {
            let mut bs = x.bindings_mut();
            let removed = bs.remove(b);
            (removed, bs.is_empty())
        };
        if removed {
            self.forget_bindings(x, std::slice::from_ref(b));
        }
        if removed && now_empty && x.auto_delete {
            self.emptied(&x.name, cascade);
        }
    }
}
