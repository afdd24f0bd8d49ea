//! A delayed exchange's group in its record (#18): the exchange's JSON record in the tree
//! (`exchanges`) carries, under `delays`, the Raft group holding its waiting messages, the
//! group's members and the node that declared it (which leads the group first).

/// The group holding a delayed exchange's messages, as its record names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DelayGroup {
    /// The group's id.
    pub group: u64,
    /// Its members, by node name.
    pub members: Vec<String>,
    /// The node that declared the exchange, which leads the group first.
    pub node: String,
}

/// The record's key for it.
pub(super) const DELAYS: &str = "delays";

impl DelayGroup {
    /// The record's fields for it.
    pub fn fields(&self) -> serde_json::Value {
        serde_json::json!({
            "group": self.group,
            "members": self.members,
            "node": self.node,
        })
    }

    /// The group the exchange record `bytes` names, if any.
    pub fn of(bytes: &[u8]) -> Option<DelayGroup> {
        let j: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let d = j.get(DELAYS)?;
        Some(DelayGroup {
            group: d.get("group")?.as_u64()?,
            members: d
                .get("members")?
                .as_array()?
                .iter()
                .filter_map(|m| m.as_str().map(str::to_owned))
                .collect(),
            node: d.get("node")?.as_str()?.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_the_group_it_was_given() {
        let d = DelayGroup {
            group: 42,
            members: vec!["a".into(), "b".into(), "c".into()],
            node: "a".into(),
        };
        let record = serde_json::json!({"type": "x-delayed-message", DELAYS: d.fields()});
        assert_eq!(DelayGroup::of(record.to_string().as_bytes()), Some(d));
        let plain = serde_json::json!({"type": "x-delayed-message"});
        assert_eq!(DelayGroup::of(plain.to_string().as_bytes()), None);
    }
}
