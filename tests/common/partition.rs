//! Network partitions on loopback for multi-node tests: iptables rules (tagged with one
//! comment) that drop TCP packets from and to a node's inter-node address. Needs root;
//! `tests/tools/install-iptables` installs iptables.

use super::cluster::{free_port, spec_on, Spec};
use std::process::Command;

/// The comment every rule these tests add carries.
const TAG: &str = "warren-partition-test";

/// Installs iptables if missing and removes rules an interrupted earlier run left behind.
pub fn prepare() {
    let status = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/tools/install-iptables"
    ))
    .status()
    .expect("run install-iptables");
    assert!(status.success(), "install-iptables failed");
    let listed = Command::new("iptables")
        .args(["-S", "INPUT"])
        .output()
        .expect("iptables -S");
    for rule in String::from_utf8_lossy(&listed.stdout).lines() {
        if let Some(spec) = rule.strip_prefix("-A ").filter(|r| r.contains(TAG)) {
            let mut del = vec!["-D".to_string()];
            del.extend(spec.split_whitespace().map(str::to_string));
            iptables(&del);
        }
    }
}

/// The specs of nodes `(name, loopback address)` formed by one seed list, each node's
/// inter-node listener on its own address (what a [`Cut`] drops), not started.
pub fn specs_apart(nodes: &[(&str, &str)]) -> Vec<Spec> {
    let ports: Vec<u16> = nodes.iter().map(|_| free_port()).collect();
    let seeds: Vec<String> = nodes
        .iter()
        .zip(&ports)
        .map(|((n, _), p)| format!("{n}:{p}"))
        .collect();
    nodes
        .iter()
        .zip(ports)
        .map(|((n, ip), p)| spec_on(ip, n, p, "cookie", &seeds, ""))
        .collect()
}

/// The iptables rules that cut one loopback address off; removed when dropped.
pub struct Cut {
    rules: Vec<Vec<String>>,
}

fn iptables(args: &[String]) {
    let out = Command::new("iptables")
        .args(args)
        .output()
        .expect("iptables");
    assert!(
        out.status.success(),
        "iptables {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cut {
    /// Every TCP packet from and to `ip` dropped.
    pub fn off(ip: &str) -> Cut {
        Cut::with(&[&["-s", ip], &["-d", ip]])
    }

    /// Only the packets between `x` and `y` dropped (a partial partition).
    pub fn between(x: &str, y: &str) -> Cut {
        Cut::with(&[&["-s", x, "-d", y], &["-s", y, "-d", x]])
    }

    fn with(matches: &[&[&str]]) -> Cut {
        let rules: Vec<Vec<String>> = matches
            .iter()
            .map(|m| {
                ["INPUT"]
                    .iter()
                    .chain(m.iter())
                    .chain(["-p", "tcp", "-m", "comment", "--comment", TAG, "-j", "DROP"].iter())
                    .map(|s| s.to_string())
                    .collect()
            })
            .collect();
        for r in &rules {
            let mut add = vec!["-I".to_string()];
            add.extend(r.iter().cloned());
            iptables(&add);
        }
        Cut { rules }
    }

    pub fn heal(&mut self) {
        for r in self.rules.drain(..) {
            let mut del = vec!["-D".to_string()];
            del.extend(r);
            iptables(&del);
        }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        self.heal();
    }
}
