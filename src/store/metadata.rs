//! The store's typed metadata API (RabbitMQ's `rabbit_db_*` split): vhosts, users,
//! permissions, runtime parameters, exchanges, queues, bindings and delayed messages go in as
//! records and names, and how they become keys and values is this file's business alone, so a
//! second implementation of metadata persistence (the replicated one clustering adds) can sit
//! behind the same calls. `recovery.rs` reads back what these write.

use super::schema::{self, flags};
use super::writer::Op;
use super::Store;
use crate::confirm::ConfirmToken;
use crate::message::Message;
use amq_protocol::types::FieldTable;

/// A durable exchange.
pub struct ExchangeRecord<'a> {
    /// Its vhost.
    pub vhost: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its type name (`direct`, `x-delayed-message`, ...).
    pub kind: &'a str,
    /// auto-delete.
    pub auto_delete: bool,
    /// internal.
    pub internal: bool,
    /// Its arguments.
    pub arguments: &'a FieldTable,
}

/// A durable queue.
pub struct QueueRecord<'a> {
    /// Its vhost.
    pub vhost: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The store id its messages are kept under.
    pub id: u64,
    /// auto-delete.
    pub auto_delete: bool,
    /// Its arguments.
    pub arguments: &'a FieldTable,
}

/// Where a binding leads.
#[derive(Clone, Copy)]
pub enum BindingDestination<'a> {
    /// A queue, by name.
    Queue(&'a str),
    /// An exchange, by name.
    Exchange(&'a str),
}

/// A binding between durable entities.
pub struct BindingRecord<'a> {
    /// Its vhost.
    pub vhost: &'a str,
    /// The source exchange.
    pub source: &'a str,
    /// The destination.
    pub destination: BindingDestination<'a>,
    /// Its routing key.
    pub routing_key: &'a str,
    /// Its arguments.
    pub arguments: &'a FieldTable,
}

/// A user.
pub struct UserRecord<'a> {
    /// Its name.
    pub name: &'a str,
    /// The password hash (base64, RabbitMQ's form).
    pub password_hash: String,
    /// Its tags.
    pub tags: &'a [String],
    /// The hashing module's name.
    pub hashing: &'a str,
}

fn entity_key(vhost: &str, name: &str) -> Vec<u8> {
    schema::encode_parts(&[vhost.as_bytes(), name.as_bytes()])
}

fn binding_key(b: &BindingRecord<'_>) -> Vec<u8> {
    let (kind, dest): (&[u8], &str) = match b.destination {
        BindingDestination::Queue(q) => (b"q", q),
        BindingDestination::Exchange(x) => (b"e", x),
    };
    schema::encode_parts(&[
        b.vhost.as_bytes(),
        b.source.as_bytes(),
        kind,
        dest.as_bytes(),
        b.routing_key.as_bytes(),
        &schema::encode_table(b.arguments),
    ])
}

fn permission_key(vhost: &str, user: &str) -> Vec<u8> {
    schema::encode_parts(&[b"p", vhost.as_bytes(), user.as_bytes()])
}

fn topic_key(vhost: &str, user: &str, exchange: &str) -> Vec<u8> {
    schema::encode_parts(&[b"t", vhost.as_bytes(), user.as_bytes(), exchange.as_bytes()])
}

fn parameter_key(component: &str, vhost: &str, name: &str) -> Vec<u8> {
    schema::encode_parts(&[component.as_bytes(), vhost.as_bytes(), name.as_bytes()])
}

impl Op {
    /// Deleting a durable queue and its messages (queued by the queue's task with its other
    /// writes).
    pub(crate) fn delete_queue(vhost: &str, name: &str, id: u64) -> Op {
        Op::DeleteQueue {
            key: entity_key(vhost, name),
            id,
        }
    }
}

impl Store {
    /// Records a vhost.
    pub fn put_vhost(&self, name: &str) {
        self.submit(Op::PutVhost(name.to_owned()));
    }

    /// Forgets a vhost.
    pub fn delete_vhost(&self, name: &str) {
        self.submit(Op::DeleteVhost(name.to_owned()));
    }

    /// Records a vhost's limits as JSON (empty: none).
    pub fn put_vhost_limits(&self, vhost: &str, json: String) {
        self.submit(Op::PutVhostLimits {
            vhost: vhost.to_owned(),
            json,
        });
    }

    /// Records a user.
    pub fn put_user(&self, u: &UserRecord<'_>) {
        self.submit(Op::PutUser {
            name: u.name.to_owned(),
            value: schema::encode_parts(&[
                u.password_hash.as_bytes(),
                u.tags.join(",").as_bytes(),
                u.hashing.as_bytes(),
            ]),
        });
    }

    /// Forgets a user.
    pub fn delete_user(&self, name: &str) {
        self.submit(Op::DeleteUser(name.to_owned()));
    }

    /// Records a user's configure / write / read patterns in a vhost.
    pub fn put_permission(
        &self,
        vhost: &str,
        user: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) {
        self.submit(Op::PutPermission {
            key: permission_key(vhost, user),
            value: schema::encode_parts(&[configure.as_bytes(), write.as_bytes(), read.as_bytes()]),
        });
    }

    /// Forgets a user's permissions in a vhost.
    pub fn delete_permission(&self, vhost: &str, user: &str) {
        self.submit(Op::DeletePermission {
            key: permission_key(vhost, user),
        });
    }

    /// Records a user's topic permission on an exchange.
    pub fn put_topic_permission(
        &self,
        vhost: &str,
        user: &str,
        exchange: &str,
        write: &str,
        read: &str,
    ) {
        self.submit(Op::PutPermission {
            key: topic_key(vhost, user, exchange),
            value: schema::encode_parts(&[write.as_bytes(), read.as_bytes()]),
        });
    }

    /// Forgets a user's topic permission on an exchange.
    pub fn delete_topic_permission(&self, vhost: &str, user: &str, exchange: &str) {
        self.submit(Op::DeletePermission {
            key: topic_key(vhost, user, exchange),
        });
    }

    /// Records a runtime or global parameter (`component` names its kind; JSON value).
    pub fn put_parameter(&self, component: &str, vhost: &str, name: &str, json: &str) {
        self.submit(Op::PutParameter {
            key: parameter_key(component, vhost, name),
            value: json.as_bytes().to_vec(),
        });
    }

    /// Forgets a runtime or global parameter.
    pub fn delete_parameter(&self, component: &str, vhost: &str, name: &str) {
        self.submit(Op::DeleteParameter {
            key: parameter_key(component, vhost, name),
        });
    }

    /// Records a durable exchange.
    pub fn put_exchange(&self, x: &ExchangeRecord<'_>) {
        let mut f = flags::DURABLE;
        if x.auto_delete {
            f |= flags::AUTO_DELETE;
        }
        if x.internal {
            f |= flags::INTERNAL;
        }
        self.submit(Op::PutExchange {
            key: entity_key(x.vhost, x.name),
            value: schema::encode_parts(&[
                x.kind.as_bytes(),
                &[f],
                &schema::encode_table(x.arguments),
            ]),
        });
    }

    /// Forgets a durable exchange.
    pub fn delete_exchange(&self, vhost: &str, name: &str) {
        self.submit(Op::DeleteExchange {
            key: entity_key(vhost, name),
        });
    }

    /// Records a durable queue.
    pub fn put_queue(&self, q: &QueueRecord<'_>) {
        let f = if q.auto_delete {
            flags::DURABLE | flags::AUTO_DELETE
        } else {
            flags::DURABLE
        };
        self.submit(Op::PutQueue {
            key: entity_key(q.vhost, q.name),
            value: schema::encode_parts(&[
                &q.id.to_be_bytes(),
                &[f],
                &schema::encode_table(q.arguments),
            ]),
        });
    }

    /// Records a binding between durable entities.
    pub fn put_binding(&self, b: &BindingRecord<'_>) {
        self.submit(Op::PutBinding {
            key: binding_key(b),
        });
    }

    /// Forgets a binding.
    pub fn delete_binding(&self, b: &BindingRecord<'_>) {
        self.submit(Op::DeleteBinding {
            key: binding_key(b),
        });
    }

    /// Records a message held by a durable delayed exchange until `due` (Unix ms); `token`
    /// reports the commit.
    pub fn put_delayed(
        &self,
        (due, id): (u64, u64),
        vhost: &str,
        exchange: &str,
        msg: &Message,
        token: Option<ConfirmToken>,
    ) {
        let stored = schema::encode_message(
            msg.exchange.as_str(),
            msg.routing_key.as_str(),
            msg.raw_properties().len(),
            msg.data(),
        );
        self.submit(Op::PutDelayed {
            key: (due, id),
            value: schema::encode_parts(&[vhost.as_bytes(), exchange.as_bytes(), &stored]),
            token,
        });
    }

    /// Forgets a released delayed message.
    pub fn delete_delayed(&self, key: (u64, u64)) {
        self.submit(Op::DeleteDelayed { key });
    }
}
