//! rabbitmqctl's runtime-parameter and shovel commands under `warren ctl`: `set_parameter`,
//! `clear_parameter`, `list_parameters`, `shovel_status`, `restart_shovel` and
//! `delete_shovel`, each a call of `/api/parameters` or `/api/shovels`, with rabbitmqctl's
//! banners, columns and errors.

use super::{reason, Ctx, Failure, Outcome, FAILED};
use crate::ctl::client::segment;
use crate::ctl::output::rows;
use serde_json::{json, Value};

fn parameter(vhost: &str, component: &str, name: &str) -> String {
    format!(
        "/api/parameters/{}/{}/{}",
        segment(component),
        segment(vhost),
        segment(name)
    )
}

/// A call whose 404 the command reports as `missing`.
fn call(ctx: &Ctx, method: &str, path: &str, body: Option<&Value>, missing: &str) -> Outcome {
    match ctx.client.request(method, path, body) {
        Ok(a) if a.ok() => Ok(()),
        Ok(a) if a.status == 404 => Err(Failure(FAILED, format!("Error:\n{missing}"))),
        Ok(a) => Err(Failure(
            FAILED,
            format!("Error:\n{}", reason(&a.json(), &a.body)),
        )),
        Err(_) => Err(ctx.unreachable()),
    }
}

/// `set_parameter [-p V] COMPONENT NAME VALUE` (VALUE is JSON).
pub(super) fn set(ctx: &Ctx, vhost: &str, component: &str, name: &str, value: &str) -> Outcome {
    ctx.style.banner(&format!(
        "Setting runtime parameter \"{name}\" for component \"{component}\" to \"{value}\" in \
         vhost \"{vhost}\" ..."
    ));
    let Ok(value) = serde_json::from_str::<Value>(value) else {
        return Err(Failure(
            FAILED,
            "Error:\nJSON decoding error. Reason: badarg".into(),
        ));
    };
    let path = parameter(vhost, component, name);
    call(
        ctx,
        "PUT",
        &path,
        Some(&json!({ "value": value })),
        &format!("vhost {vhost} does not exist"),
    )
}

/// `clear_parameter [-p V] COMPONENT NAME`.
pub(super) fn clear(ctx: &Ctx, vhost: &str, component: &str, name: &str) -> Outcome {
    ctx.style.banner(&format!(
        "Clearing runtime parameter \"{name}\" for component \"{component}\" on vhost \
         \"{vhost}\" ..."
    ));
    let path = parameter(vhost, component, name);
    call(ctx, "DELETE", &path, None, "Parameter does not exist")
}

/// `list_parameters [-p V]`: component, name and value (as JSON text).
pub(super) fn list(ctx: &Ctx, vhost: &str) -> Outcome {
    ctx.style.banner(&format!(
        "Listing runtime parameters for vhost \"{vhost}\" ..."
    ));
    let all = ctx.get("/api/parameters")?;
    let items: Vec<Value> = all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["vhost"] == vhost && p["component"] != "operator_policy")
        .map(|p| {
            json!({"component": p["component"], "name": p["name"],
                        "value": p["value"].to_string()})
        })
        .collect();
    let cols = ["component", "name", "value"].map(String::from);
    print!("{}", rows(ctx.style, &cols, &items));
    Ok(())
}

/// The columns `shovel_status` prints, in rabbitmqctl's order.
const STATUS_COLUMNS: [&str; 8] = [
    "destination",
    "last_changed",
    "name",
    "source",
    "state",
    "termination_reason",
    "type",
    "vhost",
];

/// `shovel_status`: every shovel of the node.
pub(super) fn shovel_status(ctx: &Ctx) -> Outcome {
    let node = ctx.name()?;
    ctx.style.banner(&format!("Shovel status on node {node}"));
    let all = ctx.get("/api/shovels")?;
    let items: Vec<Value> = all
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            json!({
                "destination": s["dest_uri"].as_str().unwrap_or(""),
                "last_changed": s["timestamp"],
                "name": s["name"],
                "source": s["src_uri"].as_str().unwrap_or(""),
                "state": s["state"],
                "termination_reason": s["reason"].as_str().unwrap_or(""),
                "type": s["type"],
                "vhost": s["vhost"],
            })
        })
        .collect();
    let cols = STATUS_COLUMNS.map(String::from);
    print!("{}", rows(ctx.style, &cols, &items));
    Ok(())
}

fn shovel(vhost: &str, name: &str) -> String {
    format!("/api/shovels/vhost/{}/{}", segment(vhost), segment(name))
}

/// `restart_shovel [-p V] NAME`.
pub(super) fn restart_shovel(ctx: &Ctx, vhost: &str, name: &str) -> Outcome {
    let node = ctx.name()?;
    ctx.style.banner(&format!(
        "Restarting dynamic Shovel {name} in virtual host {vhost} on node {node}"
    ));
    let path = format!("{}/restart", shovel(vhost, name));
    call(
        ctx,
        "DELETE",
        &path,
        None,
        &format!("Shovel with the given name was not found on the target node '{node}' and/or virtual host '{vhost}'"),
    )
}

/// `delete_shovel [-p V] NAME`.
pub(super) fn delete_shovel(ctx: &Ctx, vhost: &str, name: &str) -> Outcome {
    ctx.style
        .banner(&format!("Deleting shovel {name} in vhost {vhost}"));
    let path = parameter(vhost, crate::shovel::COMPONENT, name);
    call(
        ctx,
        "DELETE",
        &path,
        None,
        &format!("Shovel with the given name was not found in virtual host '{vhost}'"),
    )
}
