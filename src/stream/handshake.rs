//! The stream protocol's handshake, as RabbitMQ's stream plugin runs it: peer properties
//! (the server's product and version), SASL (the configured PLAIN and AMQPLAIN, users and
//! passwords as over AMQP; EXTERNAL over TLS with a verified client certificate, which names
//! the user; loopback-only users refused), then the server's tune, the client's
//! tune (the lower of each value, 0 meaning none), and open (a vhost the user may use; the
//! answer carries the advertised host and port).

use super::frame::{code, key, Frame};
use super::session::{reply, send, Next, Phase, Session, DEFAULT_FRAME_MAX, DEFAULT_HEARTBEAT};
use crate::broker::Broker;
use crate::connections::{NewConnection, Protocol, Registration};
use crate::vhost::VHost;
use amq_protocol::types::{AMQPValue, FieldTable};
use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use tokio::io::AsyncWrite;

impl Session {
    pub(super) async fn peer_properties<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        wr: &mut W,
    ) -> Next {
        let cluster = self.broker.cluster_name();
        let props = [
            ("product", "RabbitMQ"),
            ("version", crate::RABBITMQ_VERSION),
            ("platform", "Erlang/OTP 26"),
            (
                "copyright",
                "Copyright (c) 2007-2026 Broadcom Inc and/or its subsidiaries",
            ),
            (
                "information",
                "Licensed under the MPL 2.0. Website: https://rabbitmq.com",
            ),
            ("cluster_name", cluster.as_str()),
        ];
        let f =
            Frame::response(key::PEER_PROPERTIES, 1, corr, code::OK).properties(props.into_iter());
        send(wr, f.finish()).await;
        Next::Continue
    }

    /// The mechanisms offered: the configured ones this connection can use (EXTERNAL only to
    /// a TLS client that presented a verified certificate, as RabbitMQ offers it).
    fn mechanisms(&self) -> Vec<&str> {
        self.broker
            .config
            .auth_mechanisms
            .iter()
            .map(String::as_str)
            .filter(|m| match *m {
                "PLAIN" | "AMQPLAIN" => true,
                "EXTERNAL" => self.cert_user.is_some(),
                _ => false,
            })
            .collect()
    }

    /// Whether a SASL response's credentials hold, and the user it names: EXTERNAL's is the
    /// one the verified certificate names (the response is not read), else the name and
    /// password.
    async fn login(&self, mechanism: &str, response: &[u8]) -> (bool, String) {
        let known = |b: &Broker, name: &str| b.user(name).is_some();
        if mechanism == "EXTERNAL" {
            let name = self.cert_user.clone().unwrap_or_default();
            let mut ok = known(&self.broker, &name);
            if !ok && !name.is_empty() && self.broker.catch_up().await {
                ok = known(&self.broker, &name);
            }
            return (ok, name);
        }
        let login = crate::amqp::sasl::parse_response(mechanism, response);
        let ok = |b: &Broker, name: &str, pass: &str| {
            b.user(name).is_some_and(|u| u.password_matches(pass))
        };
        let mut accepted = login.as_ref().is_some_and(|(n, p)| ok(&self.broker, n, p));
        if !accepted && login.is_some() && self.broker.catch_up().await {
            accepted = login.as_ref().is_some_and(|(n, p)| ok(&self.broker, n, p));
        }
        let name = login.map(|(n, _)| n).unwrap_or_default();
        (accepted, name)
    }

    pub(super) async fn sasl_handshake<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        wr: &mut W,
    ) -> Next {
        let mechanisms = self.mechanisms();
        let mut f =
            Frame::response(key::SASL_HANDSHAKE, 1, corr, code::OK).u32(mechanisms.len() as u32);
        for m in mechanisms {
            f = f.string(m);
        }
        send(wr, f.finish()).await;
        Next::Continue
    }

    pub(super) async fn sasl_authenticate<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        mechanism: String,
        response: Bytes,
        wr: &mut W,
    ) -> Next {
        if !self.mechanisms().contains(&mechanism.as_str()) {
            let c = self.counted(code::SASL_MECHANISM_NOT_SUPPORTED);
            let f = Frame::response(key::SASL_AUTHENTICATE, 1, corr, c);
            send(wr, f.finish()).await;
            return Next::Close;
        }
        let (accepted, name) = self.login(&mechanism, &response).await;
        let c = if !accepted {
            code::AUTHENTICATION_FAILURE
        } else if !crate::auth::may_log_in_from(
            &self.broker.config.loopback_users,
            &name,
            self.peer.ip(),
        ) {
            code::AUTHENTICATION_FAILURE_LOOPBACK
        } else {
            code::OK
        };
        send(wr, reply(key::SASL_AUTHENTICATE, corr, self.counted(c))).await;
        if c != code::OK {
            tracing::warn!(user = %name, peer = %self.peer, "stream login refused (mechanism {mechanism})");
            return Next::Close;
        }
        self.user = Some(name);
        self.mechanism = Some(mechanism);
        self.phase = Phase::Authenticated;
        let tune = Frame::command(key::TUNE, 1)
            .u32(DEFAULT_FRAME_MAX)
            .u32(DEFAULT_HEARTBEAT);
        send(wr, tune.finish()).await;
        Next::Continue
    }

    pub(super) fn tune(&mut self, frame_max: u32, heartbeat: u32) {
        let pick = |client: u32, server: u32| match (client, server) {
            (0, s) => s,
            (c, 0) => c,
            (c, s) => c.min(s),
        };
        self.frame_max = pick(frame_max, DEFAULT_FRAME_MAX);
        self.heartbeat = pick(heartbeat, DEFAULT_HEARTBEAT);
    }

    /// Admits the connection to the broker's registry, within the node's, the vhost's and
    /// the user's connection limits (RabbitMQ refuses an open over any of them).
    fn register(&self, v: &VHost, user: &str) -> Result<Registration, &'static str> {
        let connections = &self.broker.connections;
        let limit = v.limits.max_connections.load(Relaxed);
        if limit >= 0 && connections.in_vhost(&v.name) as i64 >= limit {
            return Err("vhost connection limit reached");
        }
        if let Some(limit) = self.broker.user_limit(user, "max-connections") {
            if connections.of_user(user) as i64 >= limit {
                return Err("user connection limit reached");
            }
        }
        let mut properties = FieldTable::default();
        for (k, v) in &self.client_properties {
            let value = AMQPValue::LongString(v.as_bytes().to_vec().into());
            properties.insert(crate::shortstr::short(k), value);
        }
        let new = NewConnection {
            id: self.id,
            protocol: Protocol::Stream,
            user: user.to_owned(),
            vhost: v.name.clone(),
            peer: self.peer,
            local: self.local,
            tls: self.tls.clone(),
            client_name: self
                .client_properties
                .iter()
                .find(|(k, _)| k == "connection_name")
                .map(|(_, v)| v.clone()),
            client_properties: properties,
            mechanism: self.mechanism.clone().unwrap_or_default(),
            heartbeat: self.heartbeat.min(u32::from(u16::MAX)) as u16,
            frame_max: self.frame_max,
            channel_max: 0,
        };
        connections
            .admit(new, self.broker.config.max_connections)
            .ok_or("node connection limit reached")
    }

    pub(super) async fn open<W: AsyncWrite + Unpin>(
        &mut self,
        corr: u32,
        vhost: String,
        wr: &mut W,
    ) -> Next {
        let user = self.user.clone().unwrap_or_default();
        let v = self.broker.vhost(&vhost);
        let allowed = |b: &Broker| b.permissions.get(&vhost, &user).is_some();
        let allowed = v.is_some()
            && (allowed(&self.broker) || (self.broker.catch_up().await && allowed(&self.broker)));
        let registration = v
            .filter(|_| allowed)
            .ok_or("access refused")
            .and_then(|v| self.register(&v, &user).map(|r| (v, r)));
        let (v, registration) = match registration {
            Ok(admitted) => admitted,
            Err(why) => {
                tracing::warn!(%user, %vhost, peer = %self.peer, "stream open refused: {why}");
                let c = self.counted(code::VIRTUAL_HOST_ACCESS_FAILURE);
                send(wr, reply(key::OPEN, corr, c)).await;
                return Next::Close;
            }
        };
        self.registration = Some(registration);
        self.vhost = Some(v);
        self.phase = Phase::Open;
        let (host, port) = super::advertised(&self.broker, self.tls.is_some());
        let port = port.to_string();
        let props = [
            ("advertised_host", host.as_str()),
            ("advertised_port", port.as_str()),
        ];
        let f = Frame::response(key::OPEN, 1, corr, code::OK).properties(props.into_iter());
        send(wr, f.finish()).await;
        Next::Continue
    }
}
