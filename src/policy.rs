//! Policies and operator policies, as RabbitMQ's `rabbit_policy`: a named regex over queue or
//! exchange names with a priority and a definition. For each queue (or exchange) the matching
//! policy with the highest priority applies, plus the highest operator policy; the two are
//! merged (the lower value wins for numeric limits), then combined with the queue's own
//! arguments (`QueueArgs::with_policy`). Changes are applied to existing entities at once.

use crate::args::QueueArgs;
use regex::Regex;
use serde_json::{json, Map, Value};
use std::sync::{Arc, RwLock};

/// What a policy applies to (`apply-to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues and exchanges.
    All,
    /// Exchanges only.
    Exchanges,
    /// Every queue type.
    Queues,
    /// Classic queues.
    ClassicQueues,
    /// Quorum queues.
    QuorumQueues,
    /// Streams (Warren has none).
    Streams,
}

impl ApplyTo {
    fn parse(s: &str) -> Option<ApplyTo> {
        Some(match s {
            "all" => ApplyTo::All,
            "exchanges" => ApplyTo::Exchanges,
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            _ => return None,
        })
    }

    /// RabbitMQ's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyTo::All => "all",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::Queues => "queues",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
        }
    }
}

/// Keys whose merge between a policy and an operator policy keeps the lower value.
const NUMERIC_LIMITS: &[&str] = &[
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
];

/// Keys an operator policy may set (RabbitMQ's `operator_policy` validators).
const OPERATOR_KEYS: &[&str] = &[
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
    "target-group-size",
];

/// Keys RabbitMQ (with its bundled plugins) accepts but Warren's core stores without acting
/// on them (mirroring, queue modes and stream settings, so exported definitions import; the
/// federation keys, which the federation front end reads).
const ACCEPTED_KEYS: &[&str] = &[
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-mode",
    "queue-version",
    "queue-master-locator",
    "queue-leader-locator",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "initial-cluster-size",
    "target-group-size",
    "dead-letter-strategy",
    "max-age",
    "stream-max-segment-size-bytes",
    "federation-upstream",
    "federation-upstream-set",
    "federation-upstream-pattern",
];

/// A policy or operator policy.
#[derive(Debug)]
pub struct Policy {
    /// Virtual host.
    pub vhost: String,
    /// Name.
    pub name: String,
    /// The regex as given.
    pub pattern: String,
    regex: Regex,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Higher wins.
    pub priority: i64,
    /// The settings.
    pub definition: Map<String, Value>,
}

fn integer_at_least(v: &Value, min: i64) -> bool {
    v.as_i64().map_or(v.as_u64().is_some(), |n| n >= min)
}

/// A JSON value as Erlang prints it in RabbitMQ's messages (`<<"text">>`, `5`).
fn erl(v: &Value) -> String {
    match v {
        Value::String(s) => format!("<<\"{s}\">>"),
        other => other.to_string(),
    }
}

/// Checks one definition key as RabbitMQ's policy validators do; Err is RabbitMQ's text.
fn validate_key(key: &str, v: &Value) -> Result<(), String> {
    let bad = |what: &str| Err(format!("{} is not a valid {what}", erl(v)));
    match key {
        "alternate-exchange" if !v.is_string() => bad("alternate exchange name"),
        "dead-letter-exchange" if !v.is_string() => bad("dead letter exchange name"),
        "dead-letter-routing-key" if !v.is_string() => bad("dead letter routing key"),
        "federation-upstream" if !v.is_string() => bad("federation upstream name"),
        "federation-upstream-set" if !v.is_string() => bad("federation upstream set name"),
        "federation-upstream-pattern" => match v.as_str() {
            None => bad("federation upstream pattern name"),
            Some(p) => Regex::new(p).map(|_| ()).map_err(|e| {
                format!("could not compile pattern {p} to a regular expression. Error: {e}")
            }),
        },
        "message-ttl" if !integer_at_least(v, 0) => bad("message TTL"),
        "expires" if !integer_at_least(v, 1) => bad("queue expiry"),
        "max-length" | "max-length-bytes" if !integer_at_least(v, 0) => bad("maximum length"),
        "delivery-limit" if !integer_at_least(v, 0) => bad("delivery limit"),
        "consumer-timeout" if !integer_at_least(v, 0) => bad("consumer timeout"),
        "overflow" => match v.as_str() {
            Some("drop-head" | "reject-publish" | "reject-publish-dlx") => Ok(()),
            _ => bad("overflow value"),
        },
        "dead-letter-strategy" => match v.as_str() {
            Some("at-most-once" | "at-least-once") => Ok(()),
            _ => bad("dead letter strategy"),
        },
        _ => Ok(()),
    }
}

/// Keys Warren acts on.
const KNOWN_KEYS: &[&str] = &[
    "alternate-exchange",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "delivery-limit",
    "consumer-timeout",
    "overflow",
];

/// RabbitMQ's reason for a refused policy: `Validation failed` and the detail.
fn invalid(detail: impl std::fmt::Display) -> String {
    format!("Validation failed\n\n{detail}\n")
}

impl Policy {
    /// Builds a policy from the API's (or a definitions file's) JSON; Err is RabbitMQ's
    /// reason for the refusal. `operator` restricts the keys to an operator policy's.
    pub fn from_json(
        vhost: &str,
        name: &str,
        body: &Value,
        operator: bool,
    ) -> Result<Policy, String> {
        let pattern = match body.get("pattern") {
            Some(Value::String(p)) => p.clone(),
            Some(other) => return Err(invalid(format!("{} is not a valid pattern", erl(other)))),
            None => return Err("[{key_missing,pattern}]".into()),
        };
        let definition = match body.get("definition") {
            Some(Value::Object(m)) => m.clone(),
            Some(Value::String(s)) => match serde_json::from_str(s) {
                Ok(Value::Object(m)) => m,
                _ => {
                    return Err(invalid(format!(
                        "{} is not a valid definition",
                        erl(&Value::from(s.as_str()))
                    )))
                }
            },
            Some(other) => {
                return Err(invalid(format!("{} is not a valid definition", erl(other))))
            }
            None => return Err("[{key_missing,definition}]".into()),
        };
        let priority = match body.get("priority") {
            None | Some(Value::Null) => 0,
            Some(v) => v.as_i64().ok_or_else(|| {
                invalid(format!(
                    "priority should be a number, actually was {}",
                    erl(v)
                ))
            })?,
        };
        let regex = Regex::new(&pattern).map_err(|e| {
            let why = e.to_string();
            let last = why.lines().last().unwrap_or_default().trim().to_owned();
            invalid(format!(
                "pattern should be regular expression but is invalid: {last}"
            ))
        })?;
        let apply_to = match body.get("apply-to") {
            None | Some(Value::Null) => ApplyTo::All,
            Some(v) => v.as_str().and_then(ApplyTo::parse).ok_or_else(|| {
                invalid(format!(
                    "apply-to '{}' unrecognised; should be 'queues', 'classic_queues', \
                     'quorum_queues', 'streams', 'exchanges', or 'all'",
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                ))
            })?,
        };
        if definition.is_empty() {
            return Err(invalid("no policy provided"));
        }
        let unknown: Vec<String> = definition
            .iter()
            .filter(|(k, _)| {
                if operator {
                    !OPERATOR_KEYS.contains(&k.as_str())
                } else {
                    !KNOWN_KEYS.contains(&k.as_str()) && !ACCEPTED_KEYS.contains(&k.as_str())
                }
            })
            .map(|(k, v)| format!("{{<<\"{k}\">>,{}}}", erl(v)))
            .collect();
        if !unknown.is_empty() {
            return Err(invalid(format!(
                "[{}] are not recognised policy settings",
                unknown.join(",")
            )));
        }
        let federation = [
            "federation-upstream",
            "federation-upstream-set",
            "federation-upstream-pattern",
        ];
        if federation
            .iter()
            .filter(|k| definition.contains_key(**k))
            .count()
            >= 2
        {
            return Err(invalid(
                "cannot specify federation-upstream, federation-upstream-set or \
                 federation-upstream-pattern together",
            ));
        }
        for (k, v) in &definition {
            validate_key(k, v).map_err(invalid)?;
        }
        Ok(Policy {
            vhost: vhost.to_owned(),
            name: name.to_owned(),
            pattern,
            regex,
            apply_to,
            priority,
            definition,
        })
    }

    /// The policy as RabbitMQ's API shows it.
    pub fn to_json(&self) -> Value {
        json!({
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to.as_str(),
            "definition": self.definition,
            "priority": self.priority,
        })
    }

    fn matches_queue(&self, name: &str, queue: &QueueArgs) -> bool {
        let kind = match self.apply_to {
            ApplyTo::All | ApplyTo::Queues => true,
            ApplyTo::ClassicQueues => !queue.quorum && !queue.stream,
            ApplyTo::QuorumQueues => queue.quorum,
            ApplyTo::Streams => queue.stream,
            ApplyTo::Exchanges => false,
        };
        kind && self.regex.is_match(name)
    }

    fn matches_exchange(&self, name: &str) -> bool {
        matches!(self.apply_to, ApplyTo::All | ApplyTo::Exchanges) && self.regex.is_match(name)
    }
}

/// The highest-priority policy of `list` that `pred` accepts (ties go to the first name).
fn best(list: &[Arc<Policy>], pred: impl Fn(&Policy) -> bool) -> Option<Arc<Policy>> {
    list.iter()
        .filter(|p| pred(p))
        .max_by(|a, b| a.priority.cmp(&b.priority).then(b.name.cmp(&a.name)))
        .cloned()
}

/// What applies to one queue: the policy, the operator policy, their merged definition and
/// the queue's effective arguments.
#[derive(Debug, Default)]
pub struct Applied {
    /// The policy in force.
    pub policy: Option<Arc<Policy>>,
    /// The operator policy in force.
    pub operator_policy: Option<Arc<Policy>>,
    /// The merged definition (`effective_policy_definition`).
    pub definition: Map<String, Value>,
    /// Declared arguments combined with the definition.
    pub args: Arc<QueueArgs>,
}

impl Applied {
    /// No policy: the declared arguments as they are.
    pub fn none(args: QueueArgs) -> Applied {
        Applied {
            args: Arc::new(args),
            ..Applied::default()
        }
    }

    /// Whether `other` comes from the same policies (nothing to tell the queue).
    pub fn same_policies(&self, other: &Applied) -> bool {
        fn same(a: &Option<Arc<Policy>>, b: &Option<Arc<Policy>>) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
        }
        same(&self.policy, &other.policy) && same(&self.operator_policy, &other.operator_policy)
    }
}

/// Merges an operator policy into a policy's definition as RabbitMQ does: the lower value of
/// a numeric limit set by both, the operator's value of a key only it sets.
fn merge(policy: Option<&Policy>, operator: Option<&Policy>) -> Map<String, Value> {
    let mut out = policy.map(|p| p.definition.clone()).unwrap_or_default();
    for (k, v) in operator.map(|p| &p.definition).into_iter().flatten() {
        let merged = match (out.get(k), NUMERIC_LIMITS.contains(&k.as_str())) {
            (Some(mine), true) => match (mine.as_u64(), v.as_u64()) {
                (Some(a), Some(b)) => Value::from(a.min(b)),
                _ => v.clone(),
            },
            _ => v.clone(),
        };
        out.insert(k.clone(), merged);
    }
    out
}

/// The policies of one virtual host.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: RwLock<Vec<Arc<Policy>>>,
    operator: RwLock<Vec<Arc<Policy>>>,
}

impl PolicySet {
    fn list_of(&self, operator: bool) -> &RwLock<Vec<Arc<Policy>>> {
        if operator {
            &self.operator
        } else {
            &self.policies
        }
    }

    /// Policies (or operator policies), sorted by name.
    pub fn list(&self, operator: bool) -> Vec<Arc<Policy>> {
        let mut v = self
            .list_of(operator)
            .read()
            .map(|l| l.clone())
            .unwrap_or_default();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Adds or replaces a policy; true when it is new.
    pub fn put(&self, p: Policy, operator: bool) -> bool {
        let Ok(mut l) = self.list_of(operator).write() else {
            return false;
        };
        let fresh = !l.iter().any(|x| x.name == p.name);
        l.retain(|x| x.name != p.name);
        l.push(Arc::new(p));
        fresh
    }

    /// Removes a policy; false when there is none by that name.
    pub fn remove(&self, name: &str, operator: bool) -> bool {
        let Ok(mut l) = self.list_of(operator).write() else {
            return false;
        };
        let before = l.len();
        l.retain(|x| x.name != name);
        l.len() != before
    }

    /// Whether there are no policies at all (the common case, checked first).
    pub fn is_empty(&self) -> bool {
        let empty = |l: &RwLock<Vec<Arc<Policy>>>| l.read().map(|l| l.is_empty()).unwrap_or(true);
        empty(&self.policies) && empty(&self.operator)
    }

    /// What applies to a queue with these declared arguments.
    pub fn for_queue(
        &self,
        name: &str,
        declared: &QueueArgs,
        arguments: &amq_protocol::types::FieldTable,
    ) -> Applied {
        let pick = |l: &RwLock<Vec<Arc<Policy>>>| {
            l.read()
                .ok()
                .and_then(|l| best(&l, |p| p.matches_queue(name, declared)))
        };
        let (policy, operator_policy) = (pick(&self.policies), pick(&self.operator));
        let definition = merge(policy.as_deref(), operator_policy.as_deref());
        let args = Arc::new(declared.with_policy(arguments, &definition));
        Applied {
            policy,
            operator_policy,
            definition,
            args,
        }
    }

    /// The policy that applies to an exchange (operator policies never do).
    pub fn for_exchange(&self, name: &str) -> Option<Arc<Policy>> {
        self.policies
            .read()
            .ok()
            .and_then(|l| best(&l, |p| p.matches_exchange(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, pattern: &str, priority: i64, def: Value, operator: bool) -> Policy {
        Policy::from_json(
            "/",
            name,
            &json!({"pattern": pattern, "priority": priority, "definition": def}),
            operator,
        )
        .expect("valid")
    }

    #[test]
    fn validation_follows_rabbitmq() {
        let check = |def: Value, operator: bool| {
            Policy::from_json(
                "/",
                "p",
                &json!({"pattern": ".*", "definition": def}),
                operator,
            )
        };
        assert!(check(json!({"max-length": 10, "ha-mode": "all"}), false).is_ok());
        assert!(check(json!({"max-length": -1}), false).is_err());
        assert!(check(json!({"expires": 0}), false).is_err());
        assert!(check(json!({"overflow": "explode"}), false).is_err());
        assert!(check(json!({"no-such-key": 1}), false).is_err());
        assert!(check(json!({}), false).is_err());
        assert!(check(json!({"dead-letter-exchange": "x"}), true).is_err());
        assert!(check(json!({"max-length": 5}), true).is_ok());
        let bad_regex = Policy::from_json(
            "/",
            "p",
            &json!({"pattern": "(", "definition": {"max-length": 1}}),
            false,
        );
        assert!(bad_regex.is_err());
    }

    #[test]
    fn highest_priority_wins_and_operator_limits_merge_low() {
        let set = PolicySet::default();
        set.put(
            policy("low", ".*", 0, json!({"max-length": 100}), false),
            false,
        );
        set.put(
            policy(
                "high",
                "^q",
                5,
                json!({"max-length": 50, "message-ttl": 1000}),
                false,
            ),
            false,
        );
        set.put(
            policy(
                "op",
                ".*",
                0,
                json!({"max-length": 20, "expires": 9000}),
                true,
            ),
            true,
        );
        let declared = QueueArgs::default();
        let a = set.for_queue("q1", &declared, &Default::default());
        assert_eq!(a.policy.as_ref().map(|p| p.name.as_str()), Some("high"));
        assert_eq!(a.definition.get("max-length"), Some(&json!(20)));
        assert_eq!(a.definition.get("message-ttl"), Some(&json!(1000)));
        assert_eq!(a.args.max_length, Some(20));
        assert_eq!(a.args.expires, Some(9000));
        let b = set.for_queue("other", &declared, &Default::default());
        assert_eq!(b.policy.as_ref().map(|p| p.name.as_str()), Some("low"));
        assert!(set.for_exchange("x").is_some());
    }
}
