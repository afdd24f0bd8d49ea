//! Super streams, as RabbitMQ builds them: a durable direct exchange with the argument
//! `x-super-stream: true` and one stream per partition, bound with the partition's binding key
//! and `x-stream-partition-order` (its place among the partitions). Everything is made through
//! the core's declare and bind, so a super stream is usable from AMQP 0-9-1 too (publish to
//! the exchange with a partition's key). `partitions` lists the streams in partition order,
//! `route` the streams bound with a routing key.

use super::frame::{code, key, Frame};
use super::session::{reply, send, Session};
use crate::exchange::Destination;
use crate::permissions::Access;
use crate::vhost::{ExchangeOptions, VHost};
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::Bytes;
use std::sync::Arc;
use tokio::io::AsyncWrite;

/// The binding argument that orders partitions.
const PARTITION_ORDER: &str = "x-stream-partition-order";

/// A partition order as a binding carries it.
fn order_of(args: &FieldTable) -> Option<i64> {
    match args.inner().get(PARTITION_ORDER)? {
        AMQPValue::LongInt(n) => Some((*n).into()),
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::ShortInt(n) => Some((*n).into()),
        AMQPValue::LongUInt(n) => Some((*n).into()),
        _ => None,
    }
}

/// A response carrying a list of streams.
fn streams_reply(k: u16, corr: u32, c: u16, streams: &[String]) -> Bytes {
    let mut f = Frame::response(k, 1, corr, c).u32(streams.len() as u32);
    for s in streams {
        f = f.string(s);
    }
    f.finish()
}

impl Session {
    fn open_vhost(&self) -> Result<Arc<VHost>, u16> {
        self.vhost.clone().ok_or(code::INTERNAL_ERROR)
    }

    fn allowed(&self, v: &VHost, access: Access, name: &str) -> bool {
        let user = self.user.as_deref().unwrap_or_default();
        self.broker
            .permissions
            .get(&v.name, user)
            .is_some_and(|p| p.allows(access, name))
    }

    /// The partitions of super stream `name` bound with `routing_key` (all of them when
    /// None), in partition order.
    fn bound(&self, name: &str, routing_key: Option<&str>) -> Result<Vec<String>, u16> {
        let v = self.open_vhost()?;
        if !self.allowed(&v, Access::Read, name) {
            return Err(code::ACCESS_REFUSED);
        }
        let x = v.exchange(name).map_err(|_| code::STREAM_DOES_NOT_EXIST)?;
        let mut found: Vec<(i64, String)> = Vec::new();
        for (i, b) in x.bindings().list().iter().enumerate() {
            let Destination::Queue(q) = &b.destination else {
                continue;
            };
            if routing_key.is_some_and(|k| k != b.key) {
                continue;
            }
            if !found.iter().any(|(_, n)| *n == q.name) {
                found.push((order_of(&b.arguments).unwrap_or(i as i64), q.name.clone()));
            }
        }
        found.sort();
        Ok(found.into_iter().map(|(_, n)| n).collect())
    }

    /// The index of partition `stream` in super stream `name`, as RabbitMQ finds it for a
    /// single active consumer: its binding's partition order, else the number after the
    /// stream name's last '-'; None when it is no partition (the group is then a plain one).
    pub(super) fn partition_index(&self, name: &str, stream: &str) -> Option<u32> {
        let v = self.open_vhost().ok()?;
        let x = v.exchange(name).ok()?;
        let orders: Vec<Option<i64>> = x
            .bindings()
            .list()
            .iter()
            .filter(|b| matches!(&b.destination, Destination::Queue(q) if q.name == stream))
            .map(|b| order_of(&b.arguments))
            .collect();
        if orders.is_empty() {
            return None;
        }
        let order = match orders.iter().flatten().min() {
            Some(o) => *o,
            None => stream.rsplit_once('-')?.1.parse().ok()?,
        };
        u32::try_from(order).ok()
    }

    pub(super) async fn partitions<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        name: &str,
        wr: &mut W,
    ) {
        let f = match self.bound(name, None) {
            Ok(streams) => streams_reply(key::PARTITIONS, corr, code::OK, &streams),
            Err(c) => streams_reply(key::PARTITIONS, corr, c, &[]),
        };
        send(wr, f).await;
    }

    pub(super) async fn route<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        routing_key: &str,
        name: &str,
        wr: &mut W,
    ) {
        let f = match self.bound(name, Some(routing_key)) {
            Ok(streams) => streams_reply(key::ROUTE, corr, code::OK, &streams),
            Err(c) => streams_reply(key::ROUTE, corr, c, &[]),
        };
        send(wr, f).await;
    }

    pub(super) async fn create_super_stream<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        name: &str,
        partitions: &[String],
        binding_keys: &[String],
        arguments: &[(String, String)],
        wr: &mut W,
    ) {
        let c = match super::session::correct_name(name) {
            None => code::PRECONDITION_FAILED,
            Some(name) => self
                .make_super_stream(&name, partitions, binding_keys, arguments)
                .await
                .err()
                .unwrap_or(code::OK),
        };
        send(wr, reply(key::CREATE_SUPER_STREAM, corr, self.counted(c))).await;
    }

    async fn make_super_stream(
        &mut self,
        name: &str,
        partitions: &[String],
        binding_keys: &[String],
        arguments: &[(String, String)],
    ) -> Result<(), u16> {
        let v = self.open_vhost()?;
        if partitions.is_empty() || partitions.len() != binding_keys.len() {
            return Err(code::PRECONDITION_FAILED);
        }
        let names = std::iter::once(name).chain(partitions.iter().map(String::as_str));
        if !names
            .clone()
            .all(|n| self.allowed(&v, Access::Configure, n))
        {
            return Err(code::ACCESS_REFUSED);
        }
        if v.exchange(name).is_ok() || partitions.iter().any(|p| v.queue(p).is_ok()) {
            return Err(code::STREAM_ALREADY_EXISTS);
        }
        super::arguments::table(arguments).ok_or(code::PRECONDITION_FAILED)?;
        let mut x_args = FieldTable::default();
        x_args.insert("x-super-stream".into(), AMQPValue::Boolean(true));
        let o = ExchangeOptions {
            durable: true,
            arguments: x_args,
            ..Default::default()
        };
        self.broker
            .declare_exchange(&v, name, "direct", &o)
            .await
            .map_err(|e| super::session::code_of(&e))?;
        for (i, (p, k)) in partitions.iter().zip(binding_keys).enumerate() {
            let c = self.create(p, arguments).await;
            if c != code::OK {
                return Err(c);
            }
            let mut b = FieldTable::default();
            b.insert(PARTITION_ORDER.into(), AMQPValue::LongInt(i as i32));
            self.broker
                .bind_queue(&v, p, name, k, &b, self.id)
                .await
                .map_err(|e| super::session::code_of(&e))?;
        }
        Ok(())
    }

    pub(super) async fn delete_super_stream<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        name: &str,
        wr: &mut W,
    ) {
        let c = self.drop_super_stream(name).await.err().unwrap_or(code::OK);
        send(wr, reply(key::DELETE_SUPER_STREAM, corr, self.counted(c))).await;
    }

    async fn drop_super_stream(&mut self, name: &str) -> Result<(), u16> {
        let v = self.open_vhost()?;
        if !self.allowed(&v, Access::Configure, name) {
            return Err(code::ACCESS_REFUSED);
        }
        let partitions = self.bound(name, None)?;
        for p in &partitions {
            if !self.allowed(&v, Access::Configure, p) {
                return Err(code::ACCESS_REFUSED);
            }
        }
        for p in &partitions {
            match self.broker.delete_queue(&v, p, false, false, self.id).await {
                Ok(_) | Err(crate::error::CoreError::NotFound { .. }) => {}
                Err(e) => return Err(super::session::code_of(&e)),
            }
        }
        self.broker
            .delete_exchange(&v, name, false)
            .await
            .map_err(|e| super::session::code_of(&e))
    }
}
