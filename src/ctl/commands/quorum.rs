//! `rabbitmq-queues`' membership commands under `warren ctl`: `add_member`, `delete_member`,
//! `grow`, `shrink` and `quorum_status`, each one call of the management API's quorum queue
//! endpoints, with RabbitMQ's banners and columns.

use super::{reason, Ctx, Failure, Outcome, FAILED};
use crate::ctl::client::segment;
use crate::ctl::output::rows;
use serde_json::{json, Value};

/// The columns `quorum_status` prints, in RabbitMQ's order.
const STATUS_COLUMNS: [&str; 10] = [
    "Node Name",
    "Raft State",
    "Membership",
    "Last Log Index",
    "Last Written",
    "Last Applied",
    "Commit Index",
    "Snapshot Index",
    "Term",
    "Machine Version",
];

fn replicas(vhost: &str, queue: &str, what: &str) -> String {
    format!(
        "/api/queues/quorum/{}/{}/replicas/{what}",
        segment(vhost),
        segment(queue)
    )
}

/// A 404 as the command reports it.
fn not_found(ctx: &Ctx, method: &str, path: &str, body: Option<&Value>, what: &str) -> Outcome {
    match ctx.client.request(method, path, body) {
        Ok(a) if a.ok() => Ok(()),
        Ok(a) if a.status == 404 => Err(Failure(FAILED, format!("Error:\n{what}"))),
        Ok(a) => Err(Failure(
            FAILED,
            format!("Error:\n{}", reason(&a.json(), &a.body)),
        )),
        Err(_) => Err(ctx.unreachable()),
    }
}

/// `add_member [--vhost V] QUEUE NODE`.
pub(super) fn add_member(ctx: &Ctx, vhost: &str, queue: &str, node: &str) -> Outcome {
    ctx.style.banner(&format!(
        "Adding a member for queue {queue} on node {node}..."
    ));
    let body = json!({ "node": node });
    not_found(
        ctx,
        "POST",
        &replicas(vhost, queue, "add"),
        Some(&body),
        &format!("{{:not_found, {{:resource, \"{vhost}\", :queue, \"{queue}\"}}}}"),
    )
}

/// `delete_member [--vhost V] QUEUE NODE`.
pub(super) fn delete_member(ctx: &Ctx, vhost: &str, queue: &str, node: &str) -> Outcome {
    ctx.style.banner(&format!(
        "Removing a replica of queue {queue} on node {node}..."
    ));
    let body = json!({ "node": node });
    not_found(
        ctx,
        "DELETE",
        &replicas(vhost, queue, "delete"),
        Some(&body),
        &format!("{{:not_found, {{:resource, \"{vhost}\", :queue, \"{queue}\"}}}}"),
    )
}

/// `grow NODE all|even [--vhost-pattern P] [--queue-pattern P]`.
pub(super) fn grow(
    ctx: &Ctx,
    node: &str,
    strategy: &str,
    vhost_pattern: &str,
    queue_pattern: &str,
) -> Outcome {
    ctx.style
        .banner(&format!("Growing {strategy} queues on {node}..."));
    let body = json!({
        "strategy": strategy,
        "vhost_pattern": vhost_pattern,
        "queue_pattern": queue_pattern,
    });
    not_found(
        ctx,
        "POST",
        &format!("/api/queues/quorum/replicas/on/{}/grow", segment(node)),
        Some(&body),
        &format!("{{:node_not_running, :\"{node}\"}}"),
    )
}

/// `shrink NODE`.
pub(super) fn shrink(ctx: &Ctx, node: &str) -> Outcome {
    ctx.style.banner(&format!("Shrinking queues on {node}..."));
    not_found(
        ctx,
        "DELETE",
        &format!("/api/queues/quorum/replicas/on/{}/shrink", segment(node)),
        None,
        &format!("{{:not_a_cluster_node, :\"{node}\"}}"),
    )
}

/// `quorum_status [--vhost V] QUEUE`: a row per member.
pub(super) fn quorum_status(ctx: &Ctx, vhost: &str, queue: &str) -> Outcome {
    let name = ctx.name()?;
    ctx.style
        .banner(&format!("Status of queue {queue} on node {name} ..."));
    let path = format!(
        "/api/queues/quorum/{}/{}/status",
        segment(vhost),
        segment(queue)
    );
    let answer = match ctx.client.request("GET", &path, None) {
        Ok(a) => a,
        Err(_) => return Err(ctx.unreachable()),
    };
    if answer.status == 404 {
        return Err(Failure(
            FAILED,
            format!("Error:\n{{:not_found, {{:resource, \"{vhost}\", :queue, \"{queue}\"}}}}"),
        ));
    }
    if !answer.ok() {
        return Err(Failure(
            FAILED,
            format!("Error:\n{}", reason(&answer.json(), &answer.body)),
        ));
    }
    let members = answer.json().as_array().cloned().unwrap_or_default();
    let columns: Vec<String> = STATUS_COLUMNS.iter().map(|c| c.to_string()).collect();
    print!("{}", rows(ctx.style, &columns, &members));
    Ok(())
}
