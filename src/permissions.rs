//! Access control as RabbitMQ's internal backend does it: per (vhost, user) three regular
//! expressions — configure, write, read — matched (unanchored) against resource names; an empty
//! pattern grants nothing. Topic permissions add write/read patterns per exchange, matched
//! against routing keys of publishes to topic exchanges, with `{username}` and `{vhost}`
//! expanded. Without topic permissions for a user in a vhost, every routing key is allowed.

use crate::error::{CoreError, CoreResult, Kind, Refusal};
use dashmap::DashMap;
use regex::Regex;
use std::sync::Arc;

/// The three kinds of access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Declare and delete.
    Configure,
    /// Publish to, bind to (as a destination).
    Write,
    /// Consume from, get, purge, bind from (as a source).
    Read,
}

impl Access {
    fn index(self) -> usize {
        match self {
            Access::Configure => 0,
            Access::Write => 1,
            Access::Read => 2,
        }
    }
}

/// A compiled pattern; the empty pattern matches nothing, as in RabbitMQ.
#[derive(Clone, Debug)]
struct Pattern {
    text: String,
    regex: Option<Regex>,
}

impl Pattern {
    fn new(text: &str) -> Result<Pattern, String> {
        let regex = if text.is_empty() {
            None
        } else {
            Some(
                Regex::new(text)
                    .map_err(|e| format!("invalid regular expression '{text}': {e}"))?,
            )
        };
        Ok(Pattern {
            text: text.to_owned(),
            regex,
        })
    }

    fn matches(&self, name: &str) -> bool {
        self.regex.as_ref().is_some_and(|r| r.is_match(name))
    }
}

/// A user's permissions in one vhost.
#[derive(Clone, Debug)]
pub struct Permission {
    patterns: [Pattern; 3],
}

impl Permission {
    /// Compiles configure, write and read patterns; Err names the invalid one.
    pub fn new(configure: &str, write: &str, read: &str) -> Result<Permission, String> {
        Ok(Permission {
            patterns: [
                Pattern::new(configure)?,
                Pattern::new(write)?,
                Pattern::new(read)?,
            ],
        })
    }

    /// Full access (`.*` for all three).
    pub fn full() -> Permission {
        Permission::new(".*", ".*", ".*").unwrap_or_else(|_| Permission {
            patterns: std::array::from_fn(|_| Pattern {
                text: String::new(),
                regex: None,
            }),
        })
    }

    /// Whether `access` to a resource named `name` is granted.
    pub fn allows(&self, access: Access, name: &str) -> bool {
        self.patterns[access.index()].matches(name)
    }

    /// The pattern text of one kind of access.
    pub fn pattern(&self, access: Access) -> &str {
        &self.patterns[access.index()].text
    }
}

/// A user's topic permission on one exchange of one vhost, compiled for that user and vhost.
#[derive(Clone, Debug)]
pub struct TopicPermission {
    /// The exchange it applies to.
    pub exchange: String,
    write: String,
    read: String,
    write_compiled: Pattern,
    read_compiled: Pattern,
}

impl TopicPermission {
    /// Compiles the patterns with `{username}` and `{vhost}` expanded for `user` in `vhost`.
    pub fn new(
        exchange: &str,
        write: &str,
        read: &str,
        user: &str,
        vhost: &str,
    ) -> Result<TopicPermission, String> {
        let write_compiled = Pattern::new(&expand(write, user, vhost))?;
        let read_compiled = Pattern::new(&expand(read, user, vhost))?;
        Ok(TopicPermission {
            exchange: exchange.to_owned(),
            write: write.to_owned(),
            read: read.to_owned(),
            write_compiled,
            read_compiled,
        })
    }

    /// The write pattern as configured.
    pub fn write(&self) -> &str {
        &self.write
    }

    /// The read pattern as configured.
    pub fn read(&self) -> &str {
        &self.read
    }

    /// Whether its user may publish to this exchange with `routing_key`.
    pub fn allows_write(&self, routing_key: &str) -> bool {
        self.write_compiled.matches(routing_key)
    }

    /// Whether its user may bind from this exchange with `routing_key`.
    pub fn allows_read(&self, routing_key: &str) -> bool {
        self.read_compiled.matches(routing_key)
    }
}

/// Expands `{username}` and `{vhost}` (regex-escaped) in a topic pattern.
fn expand(pattern: &str, user: &str, vhost: &str) -> String {
    pattern
        .replace("{username}", &regex::escape(user))
        .replace("{vhost}", &regex::escape(vhost))
}

/// Every permission of the node, keyed by (vhost, user).
#[derive(Debug, Default)]
pub struct Permissions {
    users: DashMap<(String, String), Arc<Permission>>,
    topics: DashMap<(String, String), Arc<Vec<TopicPermission>>>,
}

impl Permissions {
    /// A user's permissions in a vhost.
    pub fn get(&self, vhost: &str, user: &str) -> Option<Arc<Permission>> {
        self.users
            .get(&(vhost.to_owned(), user.to_owned()))
            .map(|p| p.clone())
    }

    /// Sets a user's permissions in a vhost.
    pub fn set(&self, vhost: &str, user: &str, p: Permission) {
        self.users
            .insert((vhost.to_owned(), user.to_owned()), Arc::new(p));
    }

    /// Removes them; false when there were none.
    pub fn clear(&self, vhost: &str, user: &str) -> bool {
        self.users
            .remove(&(vhost.to_owned(), user.to_owned()))
            .is_some()
    }

    /// Every (vhost, user, permission), sorted.
    pub fn list(&self) -> Vec<(String, String, Arc<Permission>)> {
        let mut all: Vec<_> = self
            .users
            .iter()
            .map(|e| (e.key().0.clone(), e.key().1.clone(), e.value().clone()))
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        all
    }

    /// A user's topic permissions in a vhost (None: no restriction).
    pub fn topics(&self, vhost: &str, user: &str) -> Option<Arc<Vec<TopicPermission>>> {
        self.topics
            .get(&(vhost.to_owned(), user.to_owned()))
            .map(|t| t.clone())
    }

    /// Sets (replaces) a user's topic permission on one exchange.
    pub fn set_topic(&self, vhost: &str, user: &str, t: TopicPermission) {
        let key = (vhost.to_owned(), user.to_owned());
        let mut list: Vec<TopicPermission> = self
            .topics
            .get(&key)
            .map(|l| {
                l.iter()
                    .filter(|x| x.exchange != t.exchange)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        list.push(t);
        list.sort_by(|a, b| a.exchange.cmp(&b.exchange));
        self.topics.insert(key, Arc::new(list));
    }

    /// Removes a user's topic permissions in a vhost (on one exchange, or all); the exchanges
    /// whose entry was removed.
    pub fn clear_topics(&self, vhost: &str, user: &str, exchange: Option<&str>) -> Vec<String> {
        let key = (vhost.to_owned(), user.to_owned());
        let Some((_, list)) = self.topics.remove(&key) else {
            return Vec::new();
        };
        let (gone, kept): (Vec<_>, Vec<_>) = list
            .iter()
            .cloned()
            .partition(|t| exchange.is_none_or(|x| x == t.exchange));
        if !kept.is_empty() {
            self.topics.insert(key, Arc::new(kept));
        }
        gone.into_iter().map(|t| t.exchange).collect()
    }

    /// Every (vhost, user, topic permission), sorted.
    pub fn list_topics(&self) -> Vec<(String, String, TopicPermission)> {
        let mut all: Vec<_> = self
            .topics
            .iter()
            .flat_map(|e| {
                let (v, u) = e.key().clone();
                e.value()
                    .iter()
                    .map(move |t| (v.clone(), u.clone(), t.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1, &a.2.exchange).cmp(&(&b.0, &b.1, &b.2.exchange)));
        all
    }
}

/// RabbitMQ's refusal: 403 "access to exchange 'x' in vhost '/' refused for user 'u'".
pub fn refused(kind: Kind, name: &str, vhost: &str, user: &str) -> CoreError {
    Refusal::Permission {
        kind,
        name: name.to_owned(),
        vhost: vhost.to_owned(),
        user: user.to_owned(),
    }
    .into()
}

/// Checks topic permissions (`topics`, None: unrestricted) of a publish (`read` false) or of a
/// binding from `x` (`read` true) with `routing_key`; only topic exchanges are restricted.
pub fn check_topic(
    topics: Option<&[TopicPermission]>,
    x: &crate::exchange::Exchange,
    vhost: &str,
    user: &str,
    routing_key: &str,
    read: bool,
) -> CoreResult<()> {
    let Some(topics) = topics else {
        return Ok(());
    };
    if x.kind != crate::exchange::ExchangeKind::Topic {
        return Ok(());
    }
    let Some(t) = topics.iter().find(|t| t.exchange == x.name) else {
        return Ok(());
    };
    let (allowed, what) = if read {
        (t.allows_read(routing_key), "read")
    } else {
        (t.allows_write(routing_key), "write")
    };
    if allowed {
        return Ok(());
    }
    Err(Refusal::Topic {
        access: what,
        routing_key: routing_key.to_owned(),
        exchange: x.name.clone(),
        vhost: vhost.to_owned(),
        user: user.to_owned(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_unanchored_and_empty_grants_nothing() {
        let p = Permission::new("^app\\.", "", "log").expect("valid");
        assert!(p.allows(Access::Configure, "app.q"));
        assert!(!p.allows(Access::Configure, "other.app.q"));
        assert!(!p.allows(Access::Write, "anything"));
        assert!(p.allows(Access::Read, "audit-log-1"));
        assert!(Permission::new("(", ".*", ".*").is_err());
        assert!(Permission::full().allows(Access::Write, ""));
    }

    #[test]
    fn topic_patterns_expand_the_user_and_vhost() {
        let t =
            TopicPermission::new("amq.topic", "^{username}\\.", ".*", "alice", "/").expect("valid");
        assert!(t.allows_write("alice.orders"));
        assert!(!t.allows_write("bob.orders"));
        // A user name is matched literally, not as a pattern.
        let t =
            TopicPermission::new("amq.topic", "^{username}\\.", ".*", "a.c", "/").expect("valid");
        assert!(!t.allows_write("abc.orders"));
        assert!(t.allows_write("a.c.orders"));
    }
}
