//! Each `warren ctl` command: the management API calls it makes on the local CLI socket and
//! what it prints, in rabbitmqctl's words.

mod federation;
mod parameters;
mod quorum;

use super::client::{segment, Client};
use super::output::{cell, rows, Style};
use super::{Command, FAILED, UNAVAILABLE, USAGE};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What every command needs.
pub(super) struct Ctx {
    pub client: Client,
    pub style: Style,
    /// The node's configured name (its own answer is preferred once it is reachable).
    pub node: String,
    pub data_dir: PathBuf,
    /// How long `await_startup` waits.
    pub wait: Duration,
}

/// Why a command failed, and the exit code it fails with.
struct Failure(u8, String);

type Outcome = Result<(), Failure>;

impl Ctx {
    fn unreachable(&self) -> Failure {
        Failure(
            UNAVAILABLE,
            format!(
                "Error: unable to perform an operation on node '{}'. Please see diagnostics \
                 information and suggestions below.\n\nNothing answers through {}: is it \
                 running (with this data dir, or this cluster secret)?",
                self.node, self.client.route
            ),
        )
    }

    fn get(&self, path: &str) -> Result<Value, Failure> {
        match self.client.request("GET", path, None) {
            Ok(a) if a.ok() => Ok(a.json()),
            Ok(a) => Err(Failure(
                FAILED,
                format!("Error:\n{}", reason(&a.json(), &a.body)),
            )),
            Err(_) => Err(self.unreachable()),
        }
    }

    fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(), Failure> {
        match self.client.request(method, path, body) {
            Ok(a) if a.ok() => Ok(()),
            Ok(a) => Err(Failure(
                FAILED,
                format!("Error:\n{}", reason(&a.json(), &a.body)),
            )),
            Err(_) => Err(self.unreachable()),
        }
    }

    /// The node's own name, from its overview.
    fn name(&self) -> Result<String, Failure> {
        let o = self.get("/api/overview")?;
        Ok(o["node"].as_str().unwrap_or(&self.node).to_owned())
    }
}

fn reason(json: &Value, body: &str) -> String {
    json["reason"]
        .as_str()
        .map_or_else(|| body.to_owned(), str::to_owned)
}

/// Runs one command; its exit code.
pub(super) fn run(ctx: &Ctx, command: &Command) -> u8 {
    let outcome = match command {
        Command::Status => status(ctx),
        Command::Ping => ping(ctx),
        Command::AwaitStartup => await_startup(ctx),
        Command::CheckRunning => check_running(ctx),
        Command::CheckPortConnectivity => check_ports(ctx),
        Command::ClusterStatus => cluster_status(ctx),
        Command::JoinCluster { target, .. } => join(ctx, target),
        Command::StopApp => app(ctx, false),
        Command::StartApp => app(ctx, true),
        Command::ForgetClusterNode { target } => forget(ctx, target),
        Command::ListQueues { vhost, items } => list_queues(ctx, vhost, items),
        Command::ListConnections { items } => list_connections(ctx, items),
        Command::ListUsers => list_users(ctx),
        Command::AddMember {
            vhost,
            queue,
            member,
        } => quorum::add_member(ctx, vhost, queue, member),
        Command::DeleteMember {
            vhost,
            queue,
            member,
        } => quorum::delete_member(ctx, vhost, queue, member),
        Command::Grow {
            member,
            strategy,
            vhost_pattern,
            queue_pattern,
        } => quorum::grow(ctx, member, strategy, vhost_pattern, queue_pattern),
        Command::Shrink { member } => quorum::shrink(ctx, member),
        Command::QuorumStatus { vhost, queue } => quorum::quorum_status(ctx, vhost, queue),
        Command::SetParameter {
            vhost,
            component,
            name,
            value,
        } => parameters::set(ctx, vhost, component, name, value),
        Command::ClearParameter {
            vhost,
            component,
            name,
        } => parameters::clear(ctx, vhost, component, name),
        Command::ListParameters { vhost } => parameters::list(ctx, vhost),
        Command::ShovelStatus => parameters::shovel_status(ctx),
        Command::FederationStatus { only_down } => federation::federation_status(ctx, *only_down),
        Command::RestartFederationLink { id } => federation::restart_federation_link(ctx, id),
        Command::RestartShovel { vhost, name } => parameters::restart_shovel(ctx, vhost, name),
        Command::DeleteShovel { vhost, name } => parameters::delete_shovel(ctx, vhost, name),
        Command::AddUser { user, password } => add_user(ctx, user, password),
        Command::SetPermissions {
            vhost,
            user,
            configure,
            write,
            read,
        } => set_permissions(ctx, vhost, user, [configure, write, read]),
    };
    match outcome {
        Ok(()) => 0,
        Err(Failure(code, text)) => {
            eprintln!("{text}");
            code
        }
    }
}

/// RabbitMQ's description of a listener's protocol.
fn purpose(protocol: &str) -> &'static str {
    match protocol {
        "amqp" => "AMQP 0-9-1 and AMQP 1.0",
        "amqp/ssl" => "AMQP 0-9-1 and AMQP 1.0 over TLS",
        "http" => "HTTP API",
        "https" => "HTTP API over TLS (HTTPS)",
        "http/prometheus" => "Prometheus exporter API over HTTP",
        "https/prometheus" => "Prometheus exporter API over TLS (HTTPS)",
        "clustering" => "inter-node and CLI tool communication",
        _ => "",
    }
}

/// The node's listeners as rabbitmqctl lists them.
fn listeners(overview: &Value, node: &str) -> Vec<Value> {
    overview["listeners"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|x| {
                    let protocol = x["protocol"].as_str().unwrap_or_default();
                    json!({
                        "interface": x["ip_address"],
                        "node": node,
                        "port": x["port"],
                        "protocol": protocol,
                        "purpose": purpose(protocol),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn listener_line(l: &Value) -> String {
    format!(
        "interface: {}, port: {}, protocol: {}, purpose: {}",
        cell(&l["interface"]),
        cell(&l["port"]),
        cell(&l["protocol"]),
        cell(&l["purpose"])
    )
}

fn status(ctx: &Ctx) -> Outcome {
    let overview = ctx.get("/api/overview")?;
    let node = overview["node"].as_str().unwrap_or(&ctx.node).to_owned();
    let nodes = ctx.get("/api/nodes")?;
    let me = nodes
        .as_array()
        .and_then(|l| l.iter().find(|n| n["name"] == node.as_str()))
        .cloned()
        .unwrap_or(Value::Null);
    let pid: u64 = me["os_pid"]
        .as_str()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let uptime = me["uptime"].as_u64().unwrap_or(0) / 1000;
    let listeners = listeners(&overview, &node);
    let data = me["db_dir"]
        .as_str()
        .map_or_else(|| ctx.data_dir.display().to_string(), str::to_owned);
    if ctx.style.json {
        let alarms = alarms_of(&me);
        println!(
            "{}",
            json!({
                "pid": pid,
                "os": std::env::consts::OS,
                "uptime": uptime,
                "is_under_maintenance": false,
                "rabbitmq_version": overview["rabbitmq_version"],
                "product_name": overview["product_name"],
                "product_version": overview["product_version"],
                "data_directory": data,
                "listeners": listeners,
                "alarms": alarms,
                "file_descriptors": {"total_used": me["fd_used"], "total_limit": me["fd_total"]},
                "memory": {"total": {"rss": me["mem_used"]}},
                "disk_free": me["disk_free"],
                "disk_free_limit": me["disk_free_limit"],
            })
        );
        return Ok(());
    }
    ctx.style.banner(&format!("Status of node {node} ..."));
    let mut out = format!(
        "Runtime\n\nOS PID: {pid}\nOS: {}\nUptime (seconds): {uptime}\nIs under maintenance?: \
         false\nRabbitMQ version: {}\nNode name: {node}\nProduct name: {}\nProduct version: {}\n\n\
         Data directory\n\nNode data directory: {data}\n\nAlarms\n\n",
        capitalised(std::env::consts::OS),
        cell(&overview["rabbitmq_version"]),
        cell(&overview["product_name"]),
        cell(&overview["product_version"]),
    );
    let alarms = alarms_of(&me);
    if alarms.is_empty() {
        out.push_str("(none)\n");
    }
    for a in &alarms {
        out.push_str(&format!("{}\n", cell(a)));
    }
    out.push_str("\nListeners\n\n");
    for l in &listeners {
        out.push_str(&format!("{}\n", listener_line(l)));
    }
    print!("{out}");
    Ok(())
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The resource alarms a node's `/api/nodes` entry shows.
fn alarms_of(n: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if n["mem_alarm"] == true {
        out.push(json!("memory"));
    }
    if n["disk_free_alarm"] == true {
        out.push(json!("disk"));
    }
    out
}

fn ping(ctx: &Ctx) -> Outcome {
    let timeout_ms = ctx.client.timeout.as_millis();
    if !ctx.style.json {
        ctx.style.banner(&format!(
            "Will ping {}. This only checks if the OS process is running and answers on its CLI \
             socket. Timeout: {timeout_ms} ms.",
            ctx.node
        ));
    }
    ctx.name()?;
    if ctx.style.json {
        println!("{}", json!({"result": "ok"}));
    } else {
        println!("Ping succeeded");
    }
    Ok(())
}

fn await_startup(ctx: &Ctx) -> Outcome {
    let started = Instant::now();
    loop {
        if ctx.name().is_ok() {
            return Ok(());
        }
        if started.elapsed() >= ctx.wait {
            return Err(Failure(
                UNAVAILABLE,
                format!(
                    "Error: node {} did not start within {} seconds",
                    ctx.node,
                    ctx.wait.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn check_running(ctx: &Ctx) -> Outcome {
    ctx.style.banner(&format!(
        "Checking if RabbitMQ is running on node {} ...",
        ctx.node
    ));
    let node = ctx.name()?;
    if ctx.get("/api/app")?["running"] != true {
        return Err(Failure(
            UNAVAILABLE,
            format!(
                "Error:\nRabbitMQ on node {node} is not running or has not fully booted yet \
                 (check with is_booting)"
            ),
        ));
    }
    println!("RabbitMQ on node {node} is fully booted and running");
    Ok(())
}

fn check_ports(ctx: &Ctx) -> Outcome {
    let overview = ctx.get("/api/overview")?;
    let node = overview["node"].as_str().unwrap_or(&ctx.node).to_owned();
    ctx.style.banner(&format!(
        "Testing TCP connections to all active listeners on node {node} ..."
    ));
    let mut ports = Vec::new();
    let mut failed = Vec::new();
    for l in listeners(&overview, &node) {
        let port = l["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0);
        let ip: std::net::IpAddr = l["interface"]
            .as_str()
            .and_then(|i| i.parse().ok())
            .filter(|ip: &std::net::IpAddr| !ip.is_unspecified())
            .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
        let addr = std::net::SocketAddr::new(ip, port);
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(_) => ports.push(port.to_string()),
            Err(e) => failed.push(format!("{addr}: {e}")),
        }
    }
    if !failed.is_empty() {
        return Err(Failure(
            FAILED,
            format!(
                "Error: connection to ports failed on node {node}: {}",
                failed.join(", ")
            ),
        ));
    }
    println!(
        "Successfully connected to ports {} on node {node}.",
        ports.join(", ")
    );
    Ok(())
}

fn cluster_status(ctx: &Ctx) -> Outcome {
    let overview = ctx.get("/api/overview")?;
    let node = overview["node"].as_str().unwrap_or(&ctx.node).to_owned();
    let members = ctx.get("/api/nodes")?;
    let members = members.as_array().cloned().unwrap_or_default();
    let names = |running_only: bool| -> Vec<String> {
        members
            .iter()
            .filter(|m| !running_only || m["running"] == true)
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect()
    };
    let (disk, running) = (names(false), names(true));
    let version = cell(&overview["rabbitmq_version"]);
    let product = format!(
        "{} {}",
        cell(&overview["product_name"]),
        cell(&overview["product_version"])
    );
    let listeners = listeners(&overview, &node);
    if ctx.style.json {
        let versions: serde_json::Map<String, Value> = running
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    json!({"rabbitmq_version": version, "product": product}),
                )
            })
            .collect();
        println!(
            "{}",
            json!({
                "cluster_name": overview["cluster_name"],
                "disk_nodes": disk,
                "ram_nodes": [],
                "running_nodes": running,
                "versions": versions,
                "maintenance_status": running.iter().map(|n| (n.clone(), json!("not under maintenance"))).collect::<serde_json::Map<_, _>>(),
                "alarms": [],
                "partitions": {},
                "listeners": {node.clone(): listeners},
            })
        );
        return Ok(());
    }
    ctx.style
        .banner(&format!("Cluster status of node {node} ..."));
    let mut out = format!(
        "Basics\n\nCluster name: {}\n\nDisk Nodes\n\n{}\n\nRunning Nodes\n\n{}\n\nVersions\n\n",
        cell(&overview["cluster_name"]),
        disk.join("\n"),
        running.join("\n")
    );
    for n in &running {
        out.push_str(&format!("{n}: RabbitMQ {version} on {product}\n"));
    }
    out.push_str("\nMaintenance status\n\n");
    for n in &running {
        out.push_str(&format!("Node: {n}, status: not under maintenance\n"));
    }
    out.push_str("\nAlarms\n\n(none)\n\nNetwork Partitions\n\n(none)\n\nListeners\n\n");
    for l in &listeners {
        out.push_str(&format!("Node: {node}, {}\n", listener_line(l)));
    }
    print!("{out}");
    Ok(())
}

fn join(ctx: &Ctx, target: &str) -> Outcome {
    let node = ctx.name()?;
    ctx.style
        .banner(&format!("Clustering node {node} with {target}"));
    match ctx.client.request(
        "POST",
        "/api/cluster/join",
        Some(&json!({ "node": target })),
    ) {
        Ok(a) if a.status == 201 => {
            ctx.style.banner(
                "This node was reset: its users, vhosts, exchanges, bindings and queues were \
                 replaced by the cluster's.",
            );
            Ok(())
        }
        Ok(a) if a.ok() => {
            ctx.style
                .banner("The node is already a member of this cluster");
            Ok(())
        }
        Ok(a) => {
            let why = reason(&a.json(), &a.body);
            Err(match a.status {
                409 => Failure(USAGE, format!("Error: {why}")),
                503 => Failure(
                    UNAVAILABLE,
                    format!("Error: unable to perform an operation on node '{target}'. {why}"),
                ),
                _ => Failure(FAILED, format!("Error:\nError: {why}")),
            })
        }
        Err(_) => Err(ctx.unreachable()),
    }
}

/// `stop_app` / `start_app`: the node stops or starts taking clients.
fn app(ctx: &Ctx, start: bool) -> Outcome {
    let node = ctx.name()?;
    ctx.style.banner(&if start {
        format!("Starting node {node} ...")
    } else {
        format!("Stopping rabbit application on node {node} ...")
    });
    let path = if start {
        "/api/app/start"
    } else {
        "/api/app/stop"
    };
    ctx.send("POST", path, None)
}

fn forget(ctx: &Ctx, target: &str) -> Outcome {
    ctx.style
        .banner(&format!("Removing node {target} from the cluster"));
    match ctx
        .client
        .request("DELETE", &format!("/api/nodes/{}", segment(target)), None)
    {
        Ok(a) if a.ok() => Ok(()),
        Ok(a) if a.status == 404 => Err(Failure(
            UNAVAILABLE,
            "Error:\n{:not_a_cluster_node, 'The node selected is not in the cluster.'}".into(),
        )),
        Ok(a) => Err(Failure(
            FAILED,
            format!("Error:\n{}", reason(&a.json(), &a.body)),
        )),
        Err(_) => Err(ctx.unreachable()),
    }
}

fn columns(items: &[String], default: &[&str]) -> Vec<String> {
    if items.is_empty() {
        default.iter().map(|s| s.to_string()).collect()
    } else {
        items.to_vec()
    }
}

fn list_queues(ctx: &Ctx, vhost: &str, items: &[String]) -> Outcome {
    let timeout = ctx.client.timeout.as_secs_f64();
    ctx.style
        .banner(&format!("Timeout: {timeout:.1} seconds ..."));
    ctx.style
        .banner(&format!("Listing queues for vhost {vhost} ..."));
    let list = ctx.get(&format!("/api/queues/{}", segment(vhost)))?;
    let mut queues = list.as_array().cloned().unwrap_or_default();
    queues.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    print!(
        "{}",
        rows(ctx.style, &columns(items, &["name", "messages"]), &queues)
    );
    Ok(())
}

fn list_connections(ctx: &Ctx, items: &[String]) -> Outcome {
    ctx.style.banner("Listing connections ...");
    let list = ctx.get("/api/connections")?;
    let conns = list.as_array().cloned().unwrap_or_default();
    let cols = columns(items, &["user", "peer_host", "peer_port", "state"]);
    print!("{}", rows(ctx.style, &cols, &conns));
    Ok(())
}

fn list_users(ctx: &Ctx) -> Outcome {
    ctx.style.banner("Listing users ...");
    let list = ctx.get("/api/users")?;
    let users: Vec<Value> = list
        .as_array()
        .map(|l| {
            l.iter()
                .map(|u| json!({"user": u["name"], "tags": u["tags"]}))
                .collect()
        })
        .unwrap_or_default();
    let cols = ["user".to_string(), "tags".to_string()];
    print!("{}", rows(ctx.style, &cols, &users));
    Ok(())
}

fn add_user(ctx: &Ctx, user: &str, password: &str) -> Outcome {
    ctx.style.banner(&format!("Adding user \"{user}\" ..."));
    let path = format!("/api/users/{}", segment(user));
    match ctx.client.request("GET", &path, None) {
        Ok(a) if a.ok() => {
            return Err(Failure(
                FAILED,
                format!("Error:\nUser \"{user}\" already exists"),
            ))
        }
        Ok(_) => {}
        Err(_) => return Err(ctx.unreachable()),
    }
    ctx.send(
        "PUT",
        &path,
        Some(&json!({"password": password, "tags": ""})),
    )?;
    if !ctx.style.json && !ctx.style.silent {
        println!(
            "Done. Don't forget to grant the user permissions to some virtual hosts! See \
             'rabbitmqctl help set_permissions' to learn more."
        );
    }
    Ok(())
}

fn set_permissions(ctx: &Ctx, vhost: &str, user: &str, [c, w, r]: [&String; 3]) -> Outcome {
    ctx.style.banner(&format!(
        "Setting permissions for user \"{user}\" in vhost \"{vhost}\" ..."
    ));
    let path = format!("/api/permissions/{}/{}", segment(vhost), segment(user));
    ctx.send(
        "PUT",
        &path,
        Some(&json!({"configure": c, "write": w, "read": r})),
    )
}
