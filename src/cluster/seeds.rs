//! Seed-list entries (`cluster_nodes`): `NAME@HOST[:PORT]`, the node's name (RabbitMQ's
//! `rabbit@host` form) and where its inter-node listener is, port 25672 by default.

use super::types::Member;

/// The inter-node port when an entry names none (RabbitMQ's distribution port).
pub const DEFAULT_PORT: u16 = 25672;

/// The member an entry names, or why it is malformed.
pub fn parse(entry: &str) -> Result<Member, String> {
    let bad = |why: &str| format!("cluster_nodes entry {entry:?}: {why} (NAME@HOST[:PORT])");
    let (name, port) = match entry.rsplit_once(':') {
        Some((name, port)) => (
            name,
            port.parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| bad("bad port"))?,
        ),
        None => (entry, DEFAULT_PORT),
    };
    let (prefix, host) = name.split_once('@').ok_or_else(|| bad("no @"))?;
    if prefix.is_empty() || host.is_empty() || host.contains('@') {
        return Err(bad("empty name or host"));
    }
    Ok(Member {
        name: name.to_string(),
        addr: format!("{host}:{port}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_a_node_and_its_address() {
        let m = parse("warren-a@127.0.0.1:25001").expect("valid");
        assert_eq!(m.name, "warren-a@127.0.0.1");
        assert_eq!(m.addr, "127.0.0.1:25001");
        let m = parse("warren@host1").expect("valid");
        assert_eq!(
            (m.name.as_str(), m.addr.as_str()),
            ("warren@host1", "host1:25672")
        );
        for bad in [
            "host1",
            "@host",
            "warren@",
            "warren@h:0",
            "warren@h:x",
            "a@b@c",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
