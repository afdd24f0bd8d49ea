//! rabbitmqctl's federation commands under `warren ctl`: `federation_status [--only-down]`
//! and `restart_federation_link LINK_ID`, on `/api/federation-links`, with rabbitmqctl's
//! banners, fields and errors.

use super::{Ctx, Failure, Outcome, FAILED};
use crate::ctl::client::segment;
use crate::ctl::output::rows;
use serde_json::{json, Value};

/// The fields `federation_status` shows for each link (rabbitmqctl's, sorted).
const COLUMNS: [&str; 13] = [
    "error",
    "exchange",
    "id",
    "last_changed",
    "local_connection",
    "queue",
    "status",
    "type",
    "upstream",
    "upstream_exchange",
    "upstream_queue",
    "uri",
    "vhost",
];

fn links(ctx: &Ctx) -> Result<Vec<Value>, Failure> {
    Ok(ctx
        .get("/api/federation-links")?
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// `federation_status [--only-down]`.
pub(super) fn federation_status(ctx: &Ctx, only_down: bool) -> Outcome {
    let node = ctx.name()?;
    ctx.style.banner(&if only_down {
        format!("Listing federation links which are down on node {node}...")
    } else {
        format!("Listing federation links on node {node}...")
    });
    let items: Vec<Value> = links(ctx)?
        .into_iter()
        .filter(|l| !only_down || !matches!(l["status"].as_str(), Some("running" | "starting")))
        .map(|l| {
            let text = |k: &str| l[k].as_str().unwrap_or("").to_owned();
            json!({
                "error": text("error"),
                "exchange": text("exchange"),
                "id": text("id"),
                "last_changed": text("timestamp"),
                "local_connection": text("local_connection"),
                "queue": text("queue"),
                "status": text("status"),
                "type": text("type"),
                "upstream": text("upstream"),
                "upstream_exchange": text("upstream_exchange"),
                "upstream_queue": text("upstream_queue"),
                "uri": text("uri"),
                "vhost": text("vhost"),
            })
        })
        .collect();
    let cols = COLUMNS.map(String::from);
    print!("{}", rows(ctx.style, &cols, &items));
    Ok(())
}

/// `restart_federation_link LINK_ID`.
pub(super) fn restart_federation_link(ctx: &Ctx, id: &str) -> Outcome {
    let node = ctx.name()?;
    ctx.style
        .banner(&format!("Restarting federation link {id} on node {node}"));
    let missing = || {
        Failure(
            FAILED,
            "Error:\nLink with the given ID was not found".into(),
        )
    };
    let link = links(ctx)?
        .into_iter()
        .find(|l| l["id"] == id)
        .ok_or_else(missing)?;
    let path = format!(
        "/api/federation-links/vhost/{}/{}/{}/restart",
        segment(link["vhost"].as_str().unwrap_or("")),
        segment(id),
        segment(link["node"].as_str().unwrap_or(&node)),
    );
    match ctx.client.request("DELETE", &path, None) {
        Ok(a) if a.ok() => Ok(()),
        Ok(_) => Err(missing()),
        Err(_) => Err(ctx.unreachable()),
    }
}
