//! Runtime parameters of components (RabbitMQ's `rabbit_runtime_parameters` with the
//! `rabbit_runtime_parameter` behaviour): JSON values named by (component, vhost, name) that
//! a component, such as `shovel`, validates and acts on. The core keeps and persists the
//! values; a component registers a handler once its front end is up, is told of every value
//! stored before then, and of every later set and clear. Policies, vhost limits and global
//! parameters are RabbitMQ runtime parameters too but have their own homes in the core.

pub mod validation;

use dashmap::DashMap;
use serde_json::Value;
use std::sync::Arc;

/// What a component does with its parameters.
pub trait Component: Send + Sync {
    /// RabbitMQ's validation messages for a value set by `user` (None: the node itself, a
    /// definitions import or the CLI), empty when it is valid.
    fn validate(&self, vhost: &str, name: &str, value: &Value, user: Option<&str>) -> Vec<String>;
    /// A value was set (or recovered at boot).
    fn notify(&self, vhost: &str, name: &str, value: &Value);
    /// A value was cleared (or its vhost deleted).
    fn notify_clear(&self, vhost: &str, name: &str);
    /// What runs for the component's values, one JSON object each (a shovel's status).
    fn status(&self) -> Vec<Value> {
        Vec::new()
    }
    /// Restarts what runs for a value; false when nothing runs for it.
    fn restart(&self, _vhost: &str, _name: &str) -> bool {
        false
    }
    /// Pauses (`paused`) or resumes what runs for a value: None when nothing runs for it,
    /// Some(false) when it is not in a state to (not running, or not paused).
    fn set_paused(&self, _vhost: &str, _name: &str, _paused: bool) -> Option<bool> {
        None
    }
    /// Resolves once what was last stopped for a value has ended (a paused shovel's run has
    /// closed its connections, the source having requeued what it did not settle); at
    /// once when nothing was stopped.
    fn stopped(&self, _vhost: &str, _name: &str) -> Stopped {
        Box::pin(std::future::ready(()))
    }
}

/// What [`Component::stopped`] returns.
pub type Stopped = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Why a parameter was not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParameterError {
    /// No component of that name is registered.
    #[error("component {0} not found")]
    UnknownComponent(String),
    /// The component refused the value (its messages, one per line).
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// (component, vhost, name).
type Key = (String, String, String);

/// The registry: values by key, handlers by component name.
#[derive(Default)]
pub struct Parameters {
    values: DashMap<Key, Value>,
    components: DashMap<String, Arc<dyn Component>>,
}

impl std::fmt::Debug for Parameters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parameters")
            .field("values", &self.values.len())
            .finish()
    }
}

fn key(component: &str, vhost: &str, name: &str) -> Key {
    (component.to_owned(), vhost.to_owned(), name.to_owned())
}

impl Parameters {
    /// Registers a component's handler and tells it of the values already held.
    pub fn register(&self, component: &str, handler: Arc<dyn Component>) {
        self.components
            .insert(component.to_owned(), handler.clone());
        for (vhost, name, value) in self.list(component, None) {
            handler.notify(&vhost, &name, &value);
        }
    }

    /// A component's handler.
    pub fn component(&self, component: &str) -> Option<Arc<dyn Component>> {
        self.components.get(component).map(|h| h.value().clone())
    }

    /// True when `component` has a handler.
    pub fn is_registered(&self, component: &str) -> bool {
        self.components.contains_key(component)
    }

    fn handler(&self, component: &str) -> Result<Arc<dyn Component>, ParameterError> {
        self.components
            .get(component)
            .map(|h| h.value().clone())
            .ok_or_else(|| ParameterError::UnknownComponent(component.to_owned()))
    }

    /// Checks a value with its component (`user` sets it; None: the node itself).
    pub fn validate(
        &self,
        component: &str,
        vhost: &str,
        name: &str,
        value: &Value,
        user: Option<&str>,
    ) -> Result<(), ParameterError> {
        let errors = self.handler(component)?.validate(vhost, name, value, user);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ParameterError::Invalid(errors))
        }
    }

    /// Holds a value read from the store (its component is told when it registers, or now
    /// if it already has).
    pub fn restore(&self, component: &str, vhost: &str, name: &str, value: Value) {
        self.put(component, vhost, name, value);
    }

    /// Holds a validated value and tells its component; true when it is new.
    pub fn put(&self, component: &str, vhost: &str, name: &str, value: Value) -> bool {
        let new = self
            .values
            .insert(key(component, vhost, name), value.clone())
            .is_none();
        if let Ok(h) = self.handler(component) {
            h.notify(vhost, name, &value);
        }
        new
    }

    /// Forgets a value and tells its component; false when there was none.
    pub fn remove(&self, component: &str, vhost: &str, name: &str) -> bool {
        let had = self.values.remove(&key(component, vhost, name)).is_some();
        if had {
            if let Ok(h) = self.handler(component) {
                h.notify_clear(vhost, name);
            }
        }
        had
    }

    /// A value.
    pub fn get(&self, component: &str, vhost: &str, name: &str) -> Option<Value> {
        self.values
            .get(&key(component, vhost, name))
            .map(|v| v.value().clone())
    }

    /// (vhost, name, value) of a component's values, in one vhost or all, sorted.
    pub fn list(&self, component: &str, vhost: Option<&str>) -> Vec<(String, String, Value)> {
        let mut out: Vec<_> = self
            .values
            .iter()
            .filter(|e| e.key().0 == component && vhost.is_none_or(|v| e.key().1 == v))
            .map(|e| (e.key().1.clone(), e.key().2.clone(), e.value().clone()))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Every (component, vhost, name, value), sorted.
    pub fn all(&self) -> Vec<(String, String, String, Value)> {
        let mut out: Vec<_> = self
            .values
            .iter()
            .map(|e| {
                let (c, v, n) = e.key().clone();
                (c, v, n, e.value().clone())
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
        out
    }

    /// (component, name) of a vhost's values.
    pub fn of_vhost(&self, vhost: &str) -> Vec<(String, String)> {
        self.values
            .iter()
            .filter(|e| e.key().1 == vhost)
            .map(|e| (e.key().0.clone(), e.key().2.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl Component for Recorder {
        fn validate(&self, _: &str, name: &str, value: &Value, _: Option<&str>) -> Vec<String> {
            if value.is_object() {
                Vec::new()
            } else {
                vec![format!("{name} not a list")]
            }
        }
        fn notify(&self, vhost: &str, name: &str, _: &Value) {
            self.0.lock().unwrap().push(format!("set {vhost}/{name}"));
        }
        fn notify_clear(&self, vhost: &str, name: &str) {
            self.0.lock().unwrap().push(format!("clear {vhost}/{name}"));
        }
    }

    #[test]
    fn a_component_hears_of_values_held_before_it_registered() {
        let p = Parameters::default();
        p.restore("c", "/", "early", serde_json::json!({}));
        assert_eq!(
            p.validate("c", "/", "x", &Value::Null, None),
            Err(ParameterError::UnknownComponent("c".into()))
        );
        let r = Arc::new(Recorder::default());
        p.register("c", r.clone());
        assert!(p.put("c", "/", "late", serde_json::json!({})));
        assert!(!p.put("c", "/", "late", serde_json::json!({"a": 1})));
        assert!(p.remove("c", "/", "early"));
        assert!(!p.remove("c", "/", "early"));
        assert_eq!(
            *r.0.lock().unwrap(),
            ["set //early", "set //late", "set //late", "clear //early"]
        );
        assert_eq!(
            p.validate("c", "/", "x", &Value::Null, None),
            Err(ParameterError::Invalid(vec!["x not a list".into()]))
        );
        assert_eq!(p.list("c", Some("/")).len(), 1);
        assert_eq!(p.of_vhost("/"), [("c".to_owned(), "late".to_owned())]);
    }
}
