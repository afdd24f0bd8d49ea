//! The broker: a cheap-clone handle over virtual hosts, users and configuration, shared by every
//! connection (and later the HTTP API).

use crate::auth::User;
use crate::config::Config;
use crate::vhost::VHost;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Shared broker state.
#[derive(Debug)]
pub struct Broker {
    /// Configuration in force.
    pub config: Config,
    vhosts: DashMap<String, Arc<VHost>>,
    users: DashMap<String, User>,
    next_id: AtomicU64,
}

impl Broker {
    /// A broker with the default user and virtual host.
    pub fn new(config: Config) -> Arc<Broker> {
        let b = Broker {
            vhosts: DashMap::new(),
            users: DashMap::new(),
            next_id: AtomicU64::new(1),
            config,
        };
        b.vhosts.insert(
            b.config.default_vhost.clone(),
            VHost::new(&b.config.default_vhost),
        );
        b.users.insert(
            b.config.default_user.clone(),
            User::new(
                &b.config.default_user,
                &b.config.default_pass,
                &["administrator"],
            ),
        );
        Arc::new(b)
    }

    /// A virtual host by name.
    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.get(name).map(|v| v.clone())
    }

    /// A user by name.
    pub fn user(&self, name: &str) -> Option<User> {
        self.users.get(name).map(|u| u.clone())
    }

    /// A broker-unique id (connections, consumers).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}
