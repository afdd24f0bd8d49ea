//! `GET /api/nodes`: every member of the cluster as RabbitMQ's management API lists it. Each
//! running member describes itself (its view `node`: memory, file descriptors, uptime,
//! listeners, its inter-node links with their traffic, and which members it cannot reach);
//! the node asked merges them, marks as not running a member that neither answers nor
//! pings, and fills each node's `partitions` with the members it cannot reach although
//! another node does (RabbitMQ's partitioned peers).

use super::cluster_views::{self, NODE};
use super::health::PING_TIMEOUT;
use super::{AppState, Authenticated};
use crate::broker::Broker;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// This node as `/api/nodes` shows it, with `unreachable`: the members its reachability
/// watch could not ping last time.
pub(crate) async fn local(b: &Broker) -> Value {
    let (fd_used, fd_total) = (
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count()),
        rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(0, |(soft, _)| soft),
    );
    let (links, unreachable) = match b.cluster.get() {
        Some(node) => {
            let links: Vec<Value> = node
                .links()
                .into_iter()
                .map(|(m, sent, received)| {
                    let (host, port) = m.addr.rsplit_once(':').unwrap_or((&m.addr, ""));
                    json!({
                        "name": m.name,
                        "peer_addr": host,
                        "peer_port": port.parse::<u16>().unwrap_or(0),
                        "stats": {"send_bytes": sent, "recv_bytes": received},
                    })
                })
                .collect();
            (links, node.unreachable())
        }
        None => (Vec::new(), Vec::new()),
    };
    json!({
        "name": super::node_name(b),
        "type": "disc",
        "running": true,
        "being_drained": false,
        "os_pid": std::process::id().to_string(),
        "uptime": u64::try_from(b.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "fd_used": fd_used,
        "fd_total": fd_total,
        "sockets_used": b.connections.len(),
        "disk_free_alarm": b.alarms.state().disk || b.store.failing(),
        "mem_alarm": b.alarms.state().memory,
        "mem_used": crate::alarms::resident_memory().unwrap_or(0),
        "mem_limit": b.alarms.memory_limit(),
        "disk_free": crate::alarms::disk_free(&b.config.data_dir).unwrap_or(0),
        "disk_free_limit": b.alarms.disk_limit(),
        "db_dir": b.config.data_dir.display().to_string(),
        "listeners": b.listeners().iter().map(|(p, a)| json!({
            "protocol": p, "ip_address": a.ip().to_string(), "port": a.port()
        })).collect::<Vec<_>>(),
        "cluster_links": links,
        "unreachable": unreachable,
    })
}

/// `GET /api/nodes`.
pub(crate) async fn nodes(State(b): State<AppState>, _: Authenticated) -> Json<Value> {
    let pings = async {
        match b.cluster.get() {
            Some(node) => node.member_status(PING_TIMEOUT).await,
            None => Vec::new(),
        }
    };
    let (mine, views, pinged) = tokio::join!(
        local(&b),
        cluster_views::everywhere(&b, NODE, Value::Null),
        pings
    );
    let members: Vec<String> = pinged.iter().map(|s| s.member.name.clone()).collect();
    let mut described: BTreeMap<String, Value> = BTreeMap::new();
    for view in views {
        if let Some(name) = view["name"].as_str() {
            described.insert(name.to_owned(), view.clone());
        }
    }
    let me = super::node_name(&b);
    described.insert(me.clone(), mine);
    // Up: described by itself, or answering a ping from here now.
    let up: BTreeSet<String> = pinged
        .iter()
        .filter(|s| s.running || described.contains_key(&s.member.name))
        .map(|s| s.member.name.clone())
        .chain(std::iter::once(me))
        .collect();
    let reaches = |from: &Value, to: &str| {
        !from["unreachable"]
            .as_array()
            .is_some_and(|u| u.iter().any(|n| n == to))
    };
    let mut out = Vec::new();
    for name in members
        .iter()
        .chain(described.keys())
        .collect::<BTreeSet<_>>()
    {
        let entry = match described.get(name) {
            Some(view) => {
                // Partitioned from a member another node still reaches.
                let partitions: Vec<&String> = up
                    .iter()
                    .filter(|other| *other != name && !reaches(view, other))
                    .filter(|other| {
                        described
                            .iter()
                            .any(|(n, v)| n != name && n != *other && reaches(v, other))
                    })
                    .collect();
                let mut view = view.clone();
                if let Some(o) = view.as_object_mut() {
                    o.remove("unreachable");
                    o.insert("partitions".into(), json!(partitions));
                }
                view
            }
            None => json!({
                "name": name,
                "type": "disc",
                "running": up.contains(name),
                "partitions": [],
            }),
        };
        out.push(entry);
    }
    Json(Value::Array(out))
}
