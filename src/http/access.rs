//! Permission checks of API actions on a vhost's queues, exchanges and bindings, as RabbitMQ's
//! management plugin makes them: the action is done as the API user, who needs the permission
//! an AMQP client would (configure to declare and delete, read to get, peek and purge, write on
//! a binding's destination and read on its source), whatever their tags. A refusal is 401
//! `not_authorised` quoting the AMQP refusal. Requests on the local CLI socket are not checked.

use super::{ApiError, AppState, Authenticated, LocalAdmin};
use crate::error::Kind;
use crate::permissions::{self, Access};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// The user an action is done as.
pub(crate) struct Actor {
    /// Its name.
    pub name: String,
    /// Came in on the local CLI socket: acts as an administrator with every permission.
    local: bool,
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, broker: &AppState) -> Result<Self, ApiError> {
        let local = parts.extensions.get::<LocalAdmin>().is_some();
        let Authenticated(user) = Authenticated::from_request_parts(parts, broker).await?;
        Ok(Actor {
            name: user.name,
            local,
        })
    }
}

impl Actor {
    /// Checks `access` to the `kind` resource `name` in `vhost` (the default exchange under
    /// RabbitMQ's name `amq.default`).
    pub(crate) fn authorize(
        &self,
        b: &AppState,
        vhost: &str,
        access: Access,
        kind: Kind,
        name: &str,
    ) -> Result<(), ApiError> {
        if self.local {
            return Ok(());
        }
        let name = if kind == Kind::Exchange && name.is_empty() {
            "amq.default"
        } else {
            name
        };
        match b.permissions.get(vhost, &self.name) {
            Some(p) if p.allows(access, name) => Ok(()),
            _ => {
                let e = permissions::refused(kind, name, vhost, &self.name);
                Err(ApiError::not_authorised(&format!("ACCESS_REFUSED - {e}")))
            }
        }
    }
}
