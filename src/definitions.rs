//! Definitions in RabbitMQ's JSON format: export (`GET /api/definitions[/{vhost}]`) and import
//! (`POST`, and the `load_definitions` file at boot), so a RabbitMQ export can seed Warren and
//! back. Users keep their hashes and hashing module; queues, exchanges and bindings go through
//! the same vhost operations as AMQP. Exclusive queues, the built-in exchanges and the default
//! exchange's implicit bindings are not exported, as in RabbitMQ.

use crate::auth::{hash_password, Hashing, User};
use crate::broker::Broker;
use crate::exchange::Destination;
use crate::json::{json_table, table_json};
use crate::permissions::{Access, Permission, TopicPermission};
use crate::policy::Policy;
use crate::vhost::{ExchangeOptions, QueueOptions, VHost};
use serde_json::{json, Map, Value};

/// Exports everything (`vhost` None) or one virtual host's queues, exchanges and bindings.
pub fn export(b: &Broker, vhost: Option<&str>) -> Value {
    let mut vhosts = b.vhosts();
    vhosts.retain(|v| vhost.is_none_or(|n| n == v.name));
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    let (mut queues, mut exchanges, mut bindings) = (Vec::new(), Vec::new(), Vec::new());
    for v in &vhosts {
        entities(
            v,
            vhost.is_none(),
            &mut queues,
            &mut exchanges,
            &mut bindings,
        );
    }
    let mut out = Map::new();
    out.insert("rabbit_version".into(), json!(crate::RABBITMQ_VERSION));
    out.insert("rabbitmq_version".into(), json!(crate::RABBITMQ_VERSION));
    out.insert("product_name".into(), json!("Warren"));
    out.insert("product_version".into(), json!(env!("CARGO_PKG_VERSION")));
    let mut parameters = Vec::new();
    let mut policies = Vec::new();
    for v in &vhosts {
        let tag = |mut o: Value| {
            if let (Some(_), Some(m)) = (vhost, o.as_object_mut()) {
                m.remove("vhost");
            }
            o
        };
        let limits = v.limits.to_json();
        if !limits.is_empty() {
            parameters.push(tag(json!({"value": limits, "vhost": v.name,
                "component": "vhost-limits", "name": "limits"})));
        }
        for p in v.policies.list(true) {
            parameters.push(tag(json!({"value": {"pattern": p.pattern,
                "definition": p.definition, "priority": p.priority,
                "apply-to": p.apply_to.as_str()}, "vhost": v.name,
                "component": "operator_policy", "name": p.name})));
        }
        for p in v.policies.list(false) {
            policies.push(tag(p.to_json()));
        }
        for (component, vhost_name, name, value) in b.parameters.all() {
            if vhost_name == v.name {
                parameters.push(tag(json!({"value": value, "vhost": vhost_name,
                    "component": component, "name": name})));
            }
        }
    }
    if vhost.is_none() {
        let user_limits = b.user_limits();
        let mut users = b.users();
        users.sort_by(|a, b| a.name.cmp(&b.name));
        out.insert(
            "users".into(),
            users
                .iter()
                .map(|u| {
                    let limits = user_limits
                        .iter()
                        .find(|(n, _)| *n == u.name)
                        .map(|(_, l)| l.clone())
                        .unwrap_or_default();
                    json!({"name": u.name, "password_hash": u.password_hash(),
                    "hashing_algorithm": u.hashing.name(), "tags": u.tags, "limits": limits})
                })
                .collect(),
        );
        out.insert(
            "vhosts".into(),
            vhosts
                .iter()
                .map(|v| json!({"name": v.name, "description": "", "tags": [], "metadata": {"description": "", "tags": []}}))
                .collect(),
        );
        out.insert(
            "permissions".into(),
            b.permissions
                .list()
                .iter()
                .map(|(v, u, p)| {
                    json!({"user": u, "vhost": v, "configure": p.pattern(Access::Configure),
                    "write": p.pattern(Access::Write), "read": p.pattern(Access::Read)})
                })
                .collect(),
        );
        out.insert(
            "topic_permissions".into(),
            b.permissions
                .list_topics()
                .iter()
                .map(|(v, u, t)| {
                    json!({"user": u, "vhost": v, "exchange": t.exchange, "write": t.write(), "read": t.read()})
                })
                .collect(),
        );
    }
    out.insert("parameters".into(), Value::Array(parameters));
    if vhost.is_none() {
        out.insert(
            "global_parameters".into(),
            b.global_parameters()
                .into_iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect(),
        );
    }
    out.insert("policies".into(), Value::Array(policies));
    out.insert("queues".into(), Value::Array(queues));
    out.insert("exchanges".into(), Value::Array(exchanges));
    out.insert("bindings".into(), Value::Array(bindings));
    Value::Object(out)
}

fn entities(
    v: &VHost,
    with_vhost: bool,
    queues: &mut Vec<Value>,
    exchanges: &mut Vec<Value>,
    bindings: &mut Vec<Value>,
) {
    let tag = |mut o: Value| {
        if let (true, Some(m)) = (with_vhost, o.as_object_mut()) {
            m.insert("vhost".into(), json!(v.name));
        }
        o
    };
    let mut qs = v.queues();
    qs.retain(|q| q.exclusive_owner.is_none());
    qs.sort_by(|a, b| a.name.cmp(&b.name));
    for q in &qs {
        queues.push(tag(json!({"name": q.name, "durable": q.durable,
            "auto_delete": q.auto_delete, "arguments": table_json(&q.arguments)})));
    }
    let mut xs = v.exchanges();
    xs.sort_by(|a, b| a.name.cmp(&b.name));
    for x in &xs {
        if !x.name.is_empty() && !x.name.starts_with("amq.") {
            exchanges.push(tag(json!({"name": x.name, "type": x.type_name(),
                "durable": x.durable, "auto_delete": x.auto_delete, "internal": x.internal,
                "arguments": table_json(&x.arguments)})));
        }
        if x.name.is_empty() {
            continue;
        }
        for bd in x.bindings().list() {
            let (destination, kind) = match &bd.destination {
                Destination::Queue(q) => (q.name.clone(), "queue"),
                Destination::Exchange(d) => (d.clone(), "exchange"),
            };
            bindings.push(tag(json!({"source": x.name, "destination": destination,
                "destination_type": kind, "routing_key": bd.key,
                "arguments": table_json(&bd.arguments)})));
        }
    }
}

fn text<'a>(o: &'a Value, key: &str) -> Result<&'a str, String> {
    o.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing or invalid key {key} in {o}"))
}

fn flag(o: &Value, key: &str, default: bool) -> bool {
    o.get(key).and_then(Value::as_bool).unwrap_or(default)
}

fn arguments(o: &Value) -> Result<amq_protocol::types::FieldTable, String> {
    match o.get("arguments") {
        Some(Value::Object(m)) => json_table(m.iter()),
        _ => Ok(Default::default()),
    }
}

fn list<'a>(doc: &'a Value, key: &str) -> &'a [Value] {
    doc.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Imports a definitions document. With `vhost`, every queue, exchange, binding and policy
/// goes to that virtual host and users, vhosts and permissions are ignored (RabbitMQ's
/// per-vhost import). A malformed document is an error; an entity Warren cannot create (a
/// stream queue, a plugin's parameter, a binding to something missing) is skipped and named
/// in the returned list, and everything else is imported.
pub async fn import(b: &Broker, doc: &Value, vhost: Option<&str>) -> Result<Vec<String>, String> {
    if !doc.is_object() {
        return Err("definitions must be a JSON object".into());
    }
    let mut skipped = Vec::new();
    if vhost.is_none() {
        for v in list(doc, "vhosts") {
            b.save_vhost(text(v, "name")?)
                .await
                .map_err(|e| e.to_string())?;
        }
        for u in list(doc, "users") {
            let made = user(u)?;
            let name = made.name.clone();
            b.save_user(made).await.map_err(|e| e.to_string())?;
            if let Some(Value::Object(limits)) = u.get("limits") {
                for (k, v) in limits {
                    match v.as_i64() {
                        Some(n) => {
                            b.save_user_limit(&name, k, Some(n))
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        None => skipped.push(format!("user limit {k} of {name}: not a number")),
                    }
                }
            }
        }
        for p in list(doc, "permissions") {
            let (v, u) = (text(p, "vhost")?, text(p, "user")?);
            let perm = Permission::new(text(p, "configure")?, text(p, "write")?, text(p, "read")?)?;
            b.save_permission(v, u, perm)
                .await
                .map_err(|e| e.to_string())?;
        }
        for p in list(doc, "topic_permissions") {
            let (v, u) = (text(p, "vhost")?, text(p, "user")?);
            let t = TopicPermission::new(
                text(p, "exchange")?,
                text(p, "write")?,
                text(p, "read")?,
                u,
                v,
            )?;
            b.save_topic_permission(v, u, t)
                .await
                .map_err(|e| e.to_string())?;
        }
        for g in list(doc, "global_parameters") {
            let name = text(g, "name")?;
            // The cluster's identity stays this node's own.
            if name != "internal_cluster_id" {
                let value = g.get("value").cloned().unwrap_or(Value::Null);
                b.save_global_parameter(name, value)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let target = |o: &Value| -> Result<std::sync::Arc<VHost>, String> {
        let name = match vhost {
            Some(v) => v,
            None => text(o, "vhost")?,
        };
        b.vhost(name)
            .ok_or_else(|| format!("vhost '{name}' does not exist"))
    };
    for p in list(doc, "parameters") {
        let (component, name) = (text(p, "component")?, text(p, "name")?);
        let v = target(p)?;
        let value = p.get("value").cloned().unwrap_or(Value::Null);
        match component {
            "vhost-limits" => {
                for (k, n) in value.as_object().into_iter().flatten() {
                    let set = match n.as_i64() {
                        Some(n) => b
                            .save_vhost_limit(&v.name, k, n)
                            .await
                            .map_err(|e| e.to_string())?,
                        None => false,
                    };
                    if !set {
                        skipped.push(format!("vhost limit {k} of vhost '{}'", v.name));
                    }
                }
            }
            "operator_policy" => match Policy::from_json(&v.name, name, &value, true) {
                Ok(policy) => {
                    b.save_policy(&v, policy, true)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Err(e) => skipped.push(format!("operator policy '{name}': {}", e.trim())),
            },
            other if b.parameters.is_registered(other) && b.cluster.get().is_none() => {
                if let Err(e) = b.set_parameter(other, &v.name, name, value, None) {
                    skipped.push(format!("parameter '{name}' of component {other}: {e}"));
                }
            }
            other => skipped.push(format!(
                "parameter '{name}' of component {other} (no such component)"
            )),
        }
    }
    for p in list(doc, "policies") {
        let name = text(p, "name")?;
        let v = target(p)?;
        match Policy::from_json(&v.name, name, p, false) {
            Ok(policy) => {
                b.save_policy(&v, policy, false)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Err(e) => skipped.push(format!("policy '{name}': {}", e.trim())),
        }
    }
    for x in list(doc, "exchanges") {
        let options = ExchangeOptions {
            passive: false,
            durable: flag(x, "durable", true),
            auto_delete: flag(x, "auto_delete", false),
            internal: flag(x, "internal", false),
            arguments: arguments(x)?,
        };
        let name = text(x, "name")?;
        let v = target(x)?;
        let declared = b
            .declare_exchange(&v, name, text(x, "type")?, &options)
            .await;
        if let Err(e) = declared {
            skipped.push(format!("exchange '{name}': {e}"));
        }
    }
    for q in list(doc, "queues") {
        let options = QueueOptions {
            durable: flag(q, "durable", true),
            auto_delete: flag(q, "auto_delete", false),
            arguments: arguments(q)?,
            ..QueueOptions::default()
        };
        let name = text(q, "name")?;
        if let Err(e) = b.declare_queue(&target(q)?, name, &options, 0).await {
            skipped.push(format!("queue '{name}': {e}"));
        }
    }
    for bd in list(doc, "bindings") {
        let v = target(bd)?;
        let (source, destination) = (text(bd, "source")?, text(bd, "destination")?);
        let key = bd.get("routing_key").and_then(Value::as_str).unwrap_or("");
        let args = arguments(bd)?;
        let r = match text(bd, "destination_type")? {
            "exchange" => b.bind_exchange(&v, destination, source, key, &args).await,
            _ => b.bind_queue(&v, destination, source, key, &args, 0).await,
        };
        if let Err(e) = r {
            skipped.push(format!("binding of '{destination}' to '{source}': {e}"));
        }
    }
    for s in &skipped {
        tracing::warn!(skipped = %s, "definitions: not imported");
    }
    Ok(skipped)
}

/// A user from a definitions entry: `password_hash` (+ `hashing_algorithm`) or `password`.
fn user(u: &Value) -> Result<User, String> {
    let name = text(u, "name")?;
    let tags: Vec<String> = match u.get("tags") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(Value::String(s)) => s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
    let hashing = match u.get("hashing_algorithm").and_then(Value::as_str) {
        Some(h) => Hashing::from_name(h).ok_or_else(|| format!("unknown hashing algorithm {h}"))?,
        None => Hashing::Sha256,
    };
    let made = match (
        u.get("password").and_then(Value::as_str),
        u.get("password_hash"),
    ) {
        (Some(p), _) => User::with_hash(name, &hash_password(p), &tags),
        (None, Some(Value::String(h))) => User::with_hashing(name, h, hashing, &tags),
        _ => User::with_hashing(name, "", hashing, &tags),
    };
    made.ok_or_else(|| format!("invalid password_hash for user {name}"))
}
