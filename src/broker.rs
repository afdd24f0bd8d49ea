//! The broker: a cheap-clone handle over virtual hosts, users, configuration and the store,
//! shared by every connection (and later the HTTP API). Opening it recovers everything durable.

use crate::auth::User;
use crate::config::Config;
use crate::exchange::Destination;
use crate::permissions::{Access, Permission, Permissions, TopicPermission};
use crate::policy::Policy;
use crate::queue::QueueShared;
use crate::store::RecoveredPermission;
use crate::store::{Recovered, Store, StoreError};
use crate::vhost::policies::component;
use crate::vhost::publish::{NoConfirms, PublishContext, RouteState};
use crate::vhost::{ExchangeOptions, VHost};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The runtime-parameter component of global parameters.
const GLOBAL: &str = "global";
/// The runtime-parameter component of users' limits.
const USER_LIMITS: &str = "user-limits";
/// The global parameter naming the cluster.
const CLUSTER_NAME: &str = "cluster_name";
/// The user a node's connections to itself log in as (with [`Broker::internal_secret`]); it
/// is no user of the user database and has every permission.
pub const INTERNAL_USER: &str = "none";

/// The global parameter identifying the cluster.
const CLUSTER_ID: &str = "internal_cluster_id";

/// Shared broker state.
#[derive(Debug)]
pub struct Broker {
    /// Configuration in force.
    pub config: Config,
    /// The store.
    pub store: Store,
    vhosts: DashMap<String, Arc<VHost>>,
    users: DashMap<String, User>,
    next_id: AtomicU64,
    reply_targets: DashMap<String, crate::vhost::replies::ReplyTarget>,
    delayer: std::sync::OnceLock<crate::delayed::Delayer>,
    /// Open AMQP connections.
    pub connections: Arc<crate::connections::Connections>,
    /// The bound listeners by RabbitMQ protocol name, set once they are bound.
    pub listeners: std::sync::OnceLock<Vec<(&'static str, std::net::SocketAddr)>>,
    /// Who may do what where (change through the `*_permission` methods, which persist).
    pub permissions: Permissions,
    /// Memory and disk alarms.
    pub alarms: crate::alarms::Alarms,
    /// This node's membership of the cluster: set at start when it has a cluster secret,
    /// replaced when `join_cluster` resets it.
    pub cluster: Arc<crate::cluster::Current>,
    /// Given to every vhost once the node is in a cluster ([`Broker::set_auto_delete_decider`]).
    auto_delete: crate::vhost::Decider,
    global_parameters: DashMap<String, serde_json::Value>,
    /// Runtime parameters of components (shovels), and the components' handlers.
    pub parameters: crate::parameters::Parameters,
    user_limits: DashMap<String, serde_json::Map<String, serde_json::Value>>,
    /// What this node answers when another node asks for one of its views (the management
    /// API's connections, channels, consumers), set by the front end that shows them.
    pub views: Views,
    /// What this node answers when `warren ctl -n` on another machine or node names it: a
    /// management API request run as the local CLI socket runs it, set by the HTTP front end.
    pub cli: Slot<CliHook>,
    /// When the node started (`uptime` in the management API and `warren ctl status`).
    pub started: std::time::Instant,
    /// This run of the node, random at each start: other nodes tell its consumers apart
    /// from those of an earlier run with the same ids.
    pub incarnation: u64,
    /// The password of this node's own connections to itself (a shovel's `amqp://`), random
    /// at each start and never stored: with it, the user [`INTERNAL_USER`] logs in over
    /// loopback with every permission, as RabbitMQ's direct connections do.
    pub internal_secret: String,
    /// False between `stop_app` and `start_app` (RabbitMQ's: no client connections); the
    /// HTTP listeners watch it to drop their open connections.
    app_running: tokio::sync::watch::Sender<bool>,
}

/// A hook a front end sets once for the core to call ([`ViewHook`], [`CliHook`]).
pub struct Slot<T>(std::sync::OnceLock<T>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(std::sync::OnceLock::new())
    }
}

impl<T> Slot<T> {
    /// Sets the hook (the first one set stays).
    pub fn set(&self, hook: T) {
        let _ = self.0.set(hook);
    }

    /// The hook, once set.
    pub fn get(&self) -> Option<&T> {
        self.0.get()
    }
}

impl<T> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Slot(set)"
        } else {
            "Slot(empty)"
        })
    }
}

/// The [`ViewHook`] slot.
pub type Views = Slot<ViewHook>;

/// Runs a management API request (method, path with query, JSON body) as the local CLI
/// socket would, answering with its status and body.
pub type CliHook = Arc<
    dyn Fn(
            String,
            String,
            Vec<u8>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = (u16, Vec<u8>)> + Send>>
        + Send
        + Sync,
>;

/// Answers another node's request for this node's view `kind` with its bytes.
pub type ViewHook = Arc<
    dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send>>
        + Send
        + Sync,
>;

impl Broker {
    /// Opens the store under the data dir and rebuilds the broker from it. A fresh store gets
    /// the configured default user and virtual host, as RabbitMQ does on first boot.
    pub fn open(config: Config) -> Result<Arc<Broker>, StoreError> {
        let window = crate::store::paging::Window {
            messages: config.queue_window_messages,
            bytes: config.queue_window_bytes,
        };
        let (store, recovered) = Store::open(&config.data_dir, config.store_cache_bytes, window)?;
        let b = Arc::new(Broker {
            vhosts: DashMap::new(),
            users: DashMap::new(),
            next_id: AtomicU64::new(1),
            reply_targets: DashMap::new(),
            delayer: std::sync::OnceLock::new(),
            connections: Arc::default(),
            permissions: Permissions::default(),
            listeners: std::sync::OnceLock::new(),
            cluster: Arc::default(),
            auto_delete: Default::default(),
            global_parameters: DashMap::new(),
            parameters: Default::default(),
            user_limits: DashMap::new(),
            views: Views::default(),
            cli: Slot::default(),
            started: std::time::Instant::now(),
            incarnation: rand::random(),
            internal_secret: (0..4)
                .map(|_| format!("{:016x}", rand::random::<u64>()))
                .collect(),
            app_running: tokio::sync::watch::Sender::new(true),
            alarms: crate::alarms::Alarms::new(&config),
            store,
            config,
        });
        b.restore(recovered);
        Ok(b)
    }

    fn restore(self: &Arc<Self>, mut r: Recovered) {
        let delayed = std::mem::take(&mut r.delayed)
            .into_iter()
            .map(|(due, id, vhost, exchange, msg)| crate::delayed::Delayed {
                due,
                id,
                vhost,
                exchange,
                msg: Arc::new(msg),
                held: crate::delayed::Held::Store,
            })
            .collect();
        let _ = self.delayer.set(crate::delayed::Delayer::start(
            Arc::downgrade(self),
            self.store.clone(),
            delayed,
        ));
        let mut vhosts = r.vhosts;
        let users = r.users;
        if r.fresh {
            let (user, pass, vhost) = (
                self.config.default_user.clone(),
                self.config.default_pass.clone(),
                self.config.default_vhost.clone(),
            );
            self.store.put_vhost(&vhost);
            let user = User::new(&user, &pass, &["administrator"]);
            self.store.put_user(&user_record(&user));
            self.set_permission(&vhost, &user.name, Permission::full());
            self.users.insert(user.name.clone(), user);
            vhosts.push(vhost);
        }
        let migrate = !r.fresh && r.permissions.is_empty();
        let vhost_limits = std::mem::take(&mut r.vhost_limits);
        for p in r.permissions {
            self.restore_permission(p);
        }
        for name in vhosts {
            self.vhosts.insert(
                name.clone(),
                VHost::new(&name, self.store.clone(), self.config.max_queues_per_vhost),
            );
        }
        for u in users {
            let tags: Vec<&str> = u.tags.iter().map(String::as_str).collect();
            let hashing = crate::auth::Hashing::from_name(&u.hashing).unwrap_or_default();
            match User::with_hashing(&u.name, &u.hash, hashing, &tags) {
                Some(user) => {
                    self.users.insert(u.name, user);
                }
                None => {
                    tracing::error!(user = %u.name, "stored password hash is invalid; user skipped")
                }
            }
        }
        for (vhost, json) in vhost_limits {
            let (Some(v), Ok(serde_json::Value::Object(m))) =
                (self.vhost(&vhost), serde_json::from_str(&json))
            else {
                continue;
            };
            for (name, value) in m {
                if let (Some(slot), Some(n)) = (v.limits.by_name(&name), value.as_i64()) {
                    slot.store(n, Ordering::Relaxed);
                }
            }
        }
        if migrate {
            // A store from before permissions existed: everyone had full access; keep it so.
            for v in &self.vhosts() {
                for u in self.users() {
                    self.set_permission(&v.name, &u.name, Permission::full());
                }
            }
        }
        for (component, vhost, name, json) in std::mem::take(&mut r.parameters) {
            self.restore_parameter(&component, &vhost, &name, &json);
        }
        if !self.global_parameters.contains_key(CLUSTER_ID) {
            use base64::Engine;
            let id =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
            self.put_global_parameter(CLUSTER_ID, format!("rabbitmq-cluster-id-{id}").into());
        }
        for v in self.vhosts() {
            v.apply_exchange_policies();
        }
        for x in r.exchanges {
            if let Some(v) = self.vhost(&x.vhost) {
                let options = ExchangeOptions {
                    durable: true,
                    auto_delete: x.auto_delete,
                    internal: x.internal,
                    arguments: x.arguments,
                    ..ExchangeOptions::default()
                };
                v.install_exchange(&x.name, &x.kind, &options, false);
            }
        }
        let mut max_id = 0;
        for q in r.queues {
            max_id = max_id.max(q.id);
            let Some(v) = self.vhost(&q.vhost) else {
                continue;
            };
            let shared = QueueShared::recover(&v, q);
            v.restore_queue(shared);
        }
        self.store.reserve_queue_ids(max_id + 1);
        for b in r.bindings {
            let Some(v) = self.vhost(&b.vhost) else {
                continue;
            };
            let dest = if b.to_queue {
                match v.queue(&b.destination) {
                    Ok(q) => Destination::Queue(q),
                    Err(_) => continue,
                }
            } else {
                Destination::Exchange(b.destination)
            };
            v.restore_binding(&b.source, dest, b.key, b.arguments);
        }
    }

    /// A virtual host by name.
    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.get(name).map(|v| v.clone())
    }

    /// Creates a virtual host (persisted); false when it already exists.
    pub fn add_vhost(&self, name: &str) -> bool {
        if self.vhosts.contains_key(name) {
            return false;
        }
        self.store.put_vhost(name);
        let v = VHost::new(name, self.store.clone(), self.config.max_queues_per_vhost);
        if let Some(d) = self.auto_delete.get() {
            v.set_auto_delete_decider(d.clone());
        }
        self.vhosts.insert(name.to_owned(), v);
        true
    }

    /// Hands the auto-delete decisions of every vhost, present and future, to `decider` (the
    /// cluster's, so an auto-delete exchange goes on every node at once).
    pub fn set_auto_delete_decider(&self, decider: crate::vhost::AutoDeleteDecider) {
        if self.auto_delete.set(decider.clone()) {
            for v in self.vhosts() {
                v.set_auto_delete_decider(decider.clone());
            }
        }
    }

    /// Sets (value ≥ 0) or clears (negative) a vhost limit, persisted; false when the vhost or
    /// the limit name is unknown.
    pub fn set_vhost_limit(&self, vhost: &str, name: &str, value: i64) -> bool {
        let Some(v) = self.vhost(vhost) else {
            return false;
        };
        let Some(slot) = v.limits.by_name(name) else {
            return false;
        };
        slot.store(value.max(-1), Ordering::Relaxed);
        let limits = v.limits.to_json();
        let json = if limits.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(limits).to_string()
        };
        self.store.put_vhost_limits(vhost, json);
        true
    }

    /// RabbitMQ's `stop_app`: every client connection is closed with 320 and new ones are
    /// refused until [`Broker::start_app`]; the node stays in its cluster and answers its
    /// peers and its CLI socket (what `join_cluster` wants before it resets the node).
    pub fn stop_app(&self) {
        self.app_running.send_replace(false);
        for c in self.connections.list() {
            c.force_close("broker forced connection closure with reason 'shutdown'");
        }
    }

    /// RabbitMQ's `start_app`: client connections are accepted again.
    pub fn start_app(&self) {
        self.app_running.send_replace(true);
    }

    /// Whether client connections are accepted (not between `stop_app` and `start_app`).
    pub fn app_running(&self) -> bool {
        *self.app_running.borrow()
    }

    /// Told of every `stop_app` and `start_app` (the value: running).
    pub fn app_state(&self) -> tokio::sync::watch::Receiver<bool> {
        self.app_running.subscribe()
    }

    /// Deletes a virtual host as RabbitMQ does: its connections are closed with 320, its
    /// queues (with their messages), exchanges, bindings and permissions are removed. False
    /// when there is no such vhost.
    pub async fn delete_vhost(&self, name: &str) -> bool {
        match self.detach_vhost(name) {
            Some(v) => {
                Self::drop_queues(&v).await;
                true
            }
            None => false,
        }
    }

    /// The part of a vhost's deletion that must happen at once (a replicated delete is
    /// applied without waiting): it leaves the registry, its connections are closed, its
    /// exchanges, policies, limits and permissions go, and the store forgets them, all before
    /// a vhost of the same name can be created again. Its queues are left to
    /// [`Broker::drop_queues`], which touches only this vhost object.
    pub fn detach_vhost(&self, name: &str) -> Option<Arc<VHost>> {
        let (_, v) = self.vhosts.remove(name)?;
        for c in self.connections.list() {
            if c.vhost == name {
                c.force_close(&format!("vhost '{name}' is deleted"));
            }
        }
        for x in v.exchanges() {
            if !x.name.is_empty() && !x.name.starts_with("amq.") {
                v.drop_exchange(&x.name);
            }
        }
        for operator in [false, true] {
            for p in v.policies.list(operator) {
                self.store
                    .delete_parameter(component(operator), name, &p.name);
            }
        }
        for (component, parameter) in self.parameters.of_vhost(name) {
            self.parameters.remove(&component, name, &parameter);
            self.store.delete_parameter(&component, name, &parameter);
        }
        for (vhost, user, _) in self.permissions.list() {
            if vhost == name {
                self.clear_permission(&vhost, &user);
            }
        }
        for u in self.users() {
            self.clear_topic_permissions(name, &u.name, None);
        }
        self.store.delete_vhost(name);
        Some(v)
    }

    /// Deletes the queues of a detached vhost, with their messages.
    pub async fn drop_queues(v: &VHost) {
        for q in v.queues() {
            let _ = q.delete(false, false).await;
            v.forget_queue(&q);
        }
    }

    /// The bound listeners (empty until the server has bound them).
    pub fn listeners(&self) -> &[(&'static str, std::net::SocketAddr)] {
        self.listeners.get().map_or(&[], Vec::as_slice)
    }

    /// Every virtual host.
    pub fn vhosts(&self) -> Vec<Arc<VHost>> {
        self.vhosts.iter().map(|v| v.value().clone()).collect()
    }

    /// A user by name.
    pub fn user(&self, name: &str) -> Option<User> {
        self.users.get(name).map(|u| u.clone())
    }

    /// The scheduler of x-delayed-message exchanges.
    pub fn delayer(&self) -> Option<&crate::delayed::Delayer> {
        self.delayer.get()
    }

    /// Direct reply-to consumers by token.
    pub fn reply_targets(&self) -> &DashMap<String, crate::vhost::replies::ReplyTarget> {
        &self.reply_targets
    }

    /// Creates or replaces a user (persisted); true when it is new.
    pub fn put_user(&self, user: User) -> bool {
        self.store.put_user(&user_record(&user));
        self.users.insert(user.name.clone(), user).is_none()
    }

    /// Deletes a user; false when there was none.
    pub fn delete_user(&self, name: &str) -> bool {
        let found = self.users.remove(name).is_some();
        if found {
            self.store.delete_user(name);
            if self.user_limits.remove(name).is_some() {
                self.store.delete_parameter(USER_LIMITS, "", name);
            }
            for (vhost, user, _) in self.permissions.list() {
                if user == name {
                    self.clear_permission(&vhost, &user);
                }
            }
            for vhost in self.vhosts() {
                self.clear_topic_permissions(&vhost.name, name, None);
            }
        }
        found
    }

    /// Sets a user's configure/write/read permissions in a vhost (persisted).
    pub fn set_permission(&self, vhost: &str, user: &str, p: Permission) {
        self.store.put_permission(
            vhost,
            user,
            p.pattern(Access::Configure),
            p.pattern(Access::Write),
            p.pattern(Access::Read),
        );
        self.permissions.set(vhost, user, p);
    }

    /// Removes a user's permissions in a vhost; false when there were none.
    pub fn clear_permission(&self, vhost: &str, user: &str) -> bool {
        let found = self.permissions.clear(vhost, user);
        if found {
            self.store.delete_permission(vhost, user);
        }
        found
    }

    /// Sets a user's topic permission on an exchange (persisted).
    pub fn set_topic_permission(&self, vhost: &str, user: &str, t: TopicPermission) {
        self.store
            .put_topic_permission(vhost, user, &t.exchange, t.write(), t.read());
        self.permissions.set_topic(vhost, user, t);
    }

    /// Removes a user's topic permissions in a vhost (on one exchange, or all); false when
    /// there were none.
    pub fn clear_topic_permissions(&self, vhost: &str, user: &str, exchange: Option<&str>) -> bool {
        let gone = self.permissions.clear_topics(vhost, user, exchange);
        for x in &gone {
            self.store.delete_topic_permission(vhost, user, x);
        }
        !gone.is_empty()
    }

    /// A runtime parameter read from the store: a policy, an operator policy or a global one.
    fn restore_parameter(&self, component: &str, vhost: &str, name: &str, json: &str) {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
            tracing::warn!(
                component,
                vhost,
                name,
                "stored parameter is not JSON; skipped"
            );
            return;
        };
        match component {
            GLOBAL => {
                self.global_parameters.insert(name.to_owned(), value);
            }
            USER_LIMITS => {
                if let serde_json::Value::Object(m) = value {
                    self.user_limits.insert(name.to_owned(), m);
                }
            }
            "policy" | "operator_policy" => {
                let operator = component == "operator_policy";
                match (
                    self.vhost(vhost),
                    Policy::from_json(vhost, name, &value, operator),
                ) {
                    (Some(v), Ok(p)) => v.restore_policy(p, operator),
                    (_, Err(e)) => tracing::warn!(vhost, name, error = %e, "stored policy skipped"),
                    (None, _) => {}
                }
            }
            _ => self.parameters.restore(component, vhost, name, value),
        }
    }

    /// Sets a component's runtime parameter once the component has validated it (as set by
    /// `user`; None: the node itself), and persists it; true when it is new.
    pub fn set_parameter(
        &self,
        component: &str,
        vhost: &str,
        name: &str,
        value: serde_json::Value,
        user: Option<&str>,
    ) -> Result<bool, crate::parameters::ParameterError> {
        self.parameters
            .validate(component, vhost, name, &value, user)?;
        self.store
            .put_parameter(component, vhost, name, &value.to_string());
        Ok(self.parameters.put(component, vhost, name, value))
    }

    /// Clears a component's runtime parameter; false when it was not set.
    pub fn clear_parameter(&self, component: &str, vhost: &str, name: &str) -> bool {
        let had = self.parameters.remove(component, vhost, name);
        if had {
            self.store.delete_parameter(component, vhost, name);
        }
        had
    }

    /// Global runtime parameters by name (`internal_cluster_id` among them, made at first
    /// boot as RabbitMQ does).
    pub fn global_parameters(&self) -> Vec<(String, serde_json::Value)> {
        let mut out: Vec<(String, serde_json::Value)> = self
            .global_parameters
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Sets a global parameter (persisted); true when it is new.
    pub fn put_global_parameter(&self, name: &str, value: serde_json::Value) -> bool {
        self.store
            .put_parameter(GLOBAL, "", name, &value.to_string());
        self.global_parameters
            .insert(name.to_owned(), value)
            .is_none()
    }

    /// Clears a global parameter; false when it is not set.
    pub fn delete_global_parameter(&self, name: &str) -> bool {
        if self.global_parameters.remove(name).is_none() {
            return false;
        }
        self.store.delete_parameter(GLOBAL, "", name);
        true
    }

    /// The cluster's permanent id (`internal_cluster_id`, made at first boot).
    pub fn cluster_id(&self) -> String {
        self.global_parameters
            .get(CLUSTER_ID)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The cluster name: the `cluster_name` global parameter, else the configured one.
    pub fn cluster_name(&self) -> String {
        self.global_parameters
            .get(CLUSTER_NAME)
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| self.config.cluster_name.clone())
    }

    /// Users' limits (`max-connections`, `max-channels`) as RabbitMQ shows them, by user.
    pub fn user_limits(&self) -> Vec<(String, serde_json::Map<String, serde_json::Value>)> {
        let mut out: Vec<_> = self
            .user_limits
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A user's limit in force (a negative value is none).
    pub fn user_limit(&self, user: &str, name: &str) -> Option<i64> {
        self.user_limits
            .get(user)?
            .get(name)?
            .as_i64()
            .filter(|n| *n >= 0)
    }

    /// Sets (`Some`) or clears (`None`) one of a user's limits, persisted; false when the
    /// user does not exist.
    pub fn set_user_limit(&self, user: &str, name: &str, value: Option<i64>) -> bool {
        if !self.users.contains_key(user) {
            return false;
        }
        let mut limits = self.user_limits.entry(user.to_owned()).or_default();
        match value {
            Some(v) => {
                limits.insert(name.to_owned(), v.into());
            }
            None => {
                limits.remove(name);
            }
        }
        if limits.is_empty() {
            drop(limits);
            self.user_limits.remove(user);
            self.store.delete_parameter(USER_LIMITS, "", user);
        } else {
            let value = serde_json::Value::Object(limits.clone()).to_string();
            self.store.put_parameter(USER_LIMITS, "", user, &value);
        }
        true
    }

    fn restore_permission(&self, p: RecoveredPermission) {
        let k: Vec<&str> = p.key.iter().map(String::as_str).collect();
        let v: Vec<&str> = p.patterns.iter().map(String::as_str).collect();
        let restored = match (k.as_slice(), v.as_slice()) {
            (["p", vhost, user], [c, w, r]) => {
                Permission::new(c, w, r).map(|perm| self.permissions.set(vhost, user, perm))
            }
            (["t", vhost, user, x], [w, r]) => TopicPermission::new(x, w, r, user, vhost)
                .map(|t| self.permissions.set_topic(vhost, user, t)),
            _ => Err("unknown record".into()),
        };
        if let Err(e) = restored {
            tracing::error!(key = ?p.key, error = %e, "stored permission skipped");
        }
    }

    /// Every user.
    pub fn users(&self) -> Vec<User> {
        self.users.iter().map(|u| u.value().clone()).collect()
    }

    /// A broker-unique id (connections, consumers, channels).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The stats tick: every channel, the node totals and every queue turn their counters
    /// into rates.
    pub fn sample_stats(&self) {
        let channels = self.connections.channels();
        for (_, ch) in &channels {
            ch.sample();
        }
        self.connections
            .channel_totals
            .sample(channels.iter().map(|(_, ch)| ch));
        for v in self.vhosts() {
            for q in v.queues() {
                q.sample_stats();
            }
        }
    }

    /// Lets every queue hand its pending writes to the store, then commits and closes it.
    pub async fn close(&self) {
        if let Some(node) = self.cluster.get() {
            node.shutdown().await;
        }
        for v in self.vhosts() {
            for q in v.queues() {
                q.flush().await;
                q.shutdown().await;
            }
        }
        self.store.sync().await;
        self.store.close().await;
    }
}

impl crate::delayed::Release for Broker {
    /// Routes a message whose delay is over through its exchange, by the core's publish as any
    /// other message (no delayer in the context); a gone vhost or exchange drops it.
    async fn release(&self, d: crate::delayed::Delayed) {
        let Some(vhost) = self.vhost(&d.vhost) else {
            return;
        };
        let Ok(x) = vhost.exchange(&d.exchange) else {
            return;
        };
        let ctx = PublishContext {
            replies: Some(self.reply_targets()),
            ..PublishContext::default()
        };
        vhost
            .publish(&x, d.msg, ctx, &mut NoConfirms, &mut RouteState::default())
            .await;
    }
}

/// How the store records a user: hash, tags, hashing module.
fn user_record(user: &User) -> crate::store::UserRecord<'_> {
    crate::store::UserRecord {
        name: &user.name,
        password_hash: user.password_hash(),
        tags: &user.tags,
        hashing: user.hashing.name(),
    }
}
