//! The stream protocol's handshake, as RabbitMQ's stream plugin runs it: peer properties
//! (the server's product and version), SASL (the configured PLAIN and AMQPLAIN, users and
//! passwords as over AMQP, loopback-only users refused), then the server's tune, the client's
//! tune (the lower of each value, 0 meaning none), and open (a vhost the user may use; the
//! answer carries the advertised host and port).

use super::frame::{code, key, Frame};
use super::session::{reply, send, Next, Phase, Session, DEFAULT_FRAME_MAX, DEFAULT_HEARTBEAT};
use crate::broker::Broker;
use bytes::Bytes;
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

    /// The mechanisms offered: the configured ones this listener can check.
    fn mechanisms(&self) -> Vec<&str> {
        self.broker
            .config
            .auth_mechanisms
            .iter()
            .map(String::as_str)
            .filter(|m| matches!(*m, "PLAIN" | "AMQPLAIN"))
            .collect()
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
            let f = Frame::response(
                key::SASL_AUTHENTICATE,
                1,
                corr,
                code::SASL_MECHANISM_NOT_SUPPORTED,
            );
            send(wr, f.finish()).await;
            return Next::Close;
        }
        let login = crate::amqp::sasl::parse_response(&mechanism, &response);
        let ok = |b: &Broker, name: &str, pass: &str| {
            b.user(name).is_some_and(|u| u.password_matches(pass))
        };
        let mut accepted = login.as_ref().is_some_and(|(n, p)| ok(&self.broker, n, p));
        if !accepted && login.is_some() && self.broker.catch_up().await {
            accepted = login.as_ref().is_some_and(|(n, p)| ok(&self.broker, n, p));
        }
        let name = login.map(|(n, _)| n).unwrap_or_default();
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
        send(wr, reply(key::SASL_AUTHENTICATE, corr, c)).await;
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
        let Some(v) = v.filter(|_| allowed) else {
            tracing::warn!(%user, %vhost, peer = %self.peer, "stream access to vhost refused");
            send(
                wr,
                reply(key::OPEN, corr, code::VIRTUAL_HOST_ACCESS_FAILURE),
            )
            .await;
            return Next::Close;
        };
        self.vhost = Some(v);
        self.phase = Phase::Open;
        let (host, port) = super::advertised(&self.broker);
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
