//! Policies of a virtual host: set and cleared (persisted as runtime parameters, components
//! `policy` and `operator_policy`), and applied to its existing queues and exchanges at once.

use super::VHost;
use crate::policy::Policy;

/// RabbitMQ's runtime-parameter component of a policy kind.
pub fn component(operator: bool) -> &'static str {
    if operator {
        "operator_policy"
    } else {
        "policy"
    }
}

impl VHost {
    /// Sets a policy (persisted) and applies it to existing queues and exchanges; true when
    /// it is new.
    pub async fn put_policy(&self, p: Policy, operator: bool) -> bool {
        let fresh = self.set_policy(p, operator);
        self.apply_policies().await;
        fresh
    }

    /// Clears a policy and applies what is left; false when there is no such policy.
    pub async fn delete_policy(&self, name: &str, operator: bool) -> bool {
        if !self.clear_policy(name, operator) {
            return false;
        }
        self.apply_policies().await;
        true
    }

    /// Sets a policy (persisted) without applying it yet; true when it is new.
    pub fn set_policy(&self, p: Policy, operator: bool) -> bool {
        self.store.put_parameter(
            component(operator),
            &self.name,
            &p.name,
            &p.to_json().to_string(),
        );
        self.policies.put(p, operator)
    }

    /// Clears a policy (persisted) without applying what is left; false when there is none.
    pub fn clear_policy(&self, name: &str, operator: bool) -> bool {
        if !self.policies.remove(name, operator) {
            return false;
        }
        self.store
            .delete_parameter(component(operator), &self.name, name);
        true
    }

    /// Takes a policy read from the store (before queues and exchanges are restored).
    pub fn restore_policy(&self, p: Policy, operator: bool) {
        self.policies.put(p, operator);
    }

    /// Re-evaluates which policies apply to every queue and exchange, telling the queues whose
    /// policies changed.
    pub async fn apply_policies(&self) {
        for q in self.queues() {
            let applied = self.policies.for_queue(&q.name, &q.args, &q.arguments);
            let current = q.applied();
            if !applied.same_policies(&current) {
                q.set_applied(applied).await;
            }
        }
        self.apply_exchange_policies();
    }

    /// Re-evaluates which policy applies to every exchange.
    pub fn apply_exchange_policies(&self) {
        for x in self.exchanges() {
            x.set_policy(self.policies.for_exchange(&x.name));
        }
    }
}
