//! A queue's record in the tree: `["vhosts", v, "queues", q]` -> JSON with `node` (its home
//! node; a quorum queue's leader), `durable`, `auto_delete`, `arguments` (the hex of an AMQP
//! field table) and, for a quorum queue, its Raft `group` and its `members`.

use super::VHOSTS;
use crate::cluster::types::Path;
use amq_protocol::types::FieldTable;

/// Where a vhost's queues live below it.
pub(super) const QUEUES: &str = "queues";

/// The path of a queue's record.
pub(super) fn queue_path(vhost: &str, name: &str) -> Path {
    vec![VHOSTS.into(), vhost.into(), QUEUES.into(), name.into()]
}

/// A quorum queue's Raft group and its members' node names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Quorum {
    /// The group's id.
    pub group: u64,
    /// The members, by node name.
    pub members: Vec<String>,
}

/// A queue's record in bytes.
pub(super) fn encode_queue(
    node: &str,
    durable: bool,
    auto_delete: bool,
    arguments: &FieldTable,
    quorum: Option<&Quorum>,
) -> Vec<u8> {
    let mut j = serde_json::json!({
        "node": node,
        "durable": durable,
        "auto_delete": auto_delete,
        "arguments": super::exchanges::table_hex(arguments),
    });
    if let (Some(q), Some(o)) = (quorum, j.as_object_mut()) {
        o.insert("group".into(), q.group.into());
        o.insert("members".into(), q.members.clone().into());
    }
    j.to_string().into_bytes()
}

/// A queue record: home node, durable, auto-delete, arguments, and a quorum queue's group.
#[derive(Clone, Debug)]
pub(super) struct QueueDef {
    pub node: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub arguments: FieldTable,
    pub quorum: Option<Quorum>,
}

impl QueueDef {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        encode_queue(
            &self.node,
            self.durable,
            self.auto_delete,
            &self.arguments,
            self.quorum.as_ref(),
        )
    }
}

/// A queue record from its bytes; None when they are not one.
pub(super) fn decode_queue(bytes: &[u8]) -> Option<QueueDef> {
    let j: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let flag = |k: &str| j.get(k).and_then(serde_json::Value::as_bool);
    let quorum = match (j.get("group"), j.get("members")) {
        (Some(g), Some(m)) => Some(Quorum {
            group: g.as_u64()?,
            members: m
                .as_array()?
                .iter()
                .map(|n| n.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()?,
        }),
        _ => None,
    };
    Some(QueueDef {
        node: j.get("node")?.as_str()?.to_owned(),
        durable: flag("durable")?,
        auto_delete: flag("auto_delete")?,
        arguments: super::exchanges::hex_table(j.get("arguments")?.as_str()?)?,
        quorum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_record_decodes_to_what_was_encoded() {
        let mut args = FieldTable::default();
        args.insert(
            "x-max-length".into(),
            amq_protocol::types::AMQPValue::LongInt(5),
        );
        let def =
            decode_queue(&encode_queue("warren@b", true, false, &args, None)).expect("decodes");
        assert_eq!(def.node, "warren@b");
        assert!(def.durable && !def.auto_delete);
        assert_eq!(def.arguments, args);
        assert_eq!(def.quorum, None);
        assert!(decode_queue(b"{\"node\":1}").is_none());
        let quorum = Quorum {
            group: u64::MAX - 3,
            members: vec!["warren@a".into(), "warren@c".into()],
        };
        let def = decode_queue(&encode_queue("warren@a", true, false, &args, Some(&quorum)))
            .expect("decodes");
        assert_eq!(def.quorum, Some(quorum));
    }
}
