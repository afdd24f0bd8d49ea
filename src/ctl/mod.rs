//! `warren ctl`: the rabbitmqctl / rabbitmq-diagnostics commands people script against a
//! node, with their names, output shapes (tables, `--formatter json`, `-q`, `-s`) and exit
//! codes (69 when the node cannot be reached, 70 when the operation fails).
//!
//! It talks to the node through the management API on the node's local CLI socket
//! (`<data_dir>/warren-ctl.sock`, the owner's only): whoever can open it acts as an
//! administrator, as whoever can read RabbitMQ's Erlang cookie does with rabbitmqctl. Cluster
//! commands are carried out by that node for the whole cluster.

mod client;
mod commands;
mod output;

pub use client::{Answer, Client, Route};

use std::time::Duration;

/// rabbitmqctl's exit code when the node cannot be reached (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// rabbitmqctl's exit code when the operation failed (EX_SOFTWARE).
pub const FAILED: u8 = 70;
/// rabbitmqctl's exit code for a bad invocation (EX_USAGE).
pub const USAGE: u8 = 64;

/// `warren ctl`'s options and command.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// The node to act on: the local node by default; another node by name (reached over
    /// the inter-node port with this configuration's cluster secret).
    #[arg(short = 'n', long = "node", global = true)]
    pub node: Option<String>,
    /// No informational banner.
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
    /// No banner and no table header.
    #[arg(short = 's', long, global = true)]
    pub silent: bool,
    /// Output format: `json`, or a table by default.
    #[arg(long, global = true)]
    pub formatter: Option<String>,
    /// Seconds to wait for the node.
    #[arg(short = 't', long, global = true)]
    pub timeout: Option<u64>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands, under rabbitmqctl's names.
#[derive(Debug, clap::Subcommand)]
#[command(rename_all = "snake_case")]
pub enum Command {
    /// The node's status (runtime, data directory, listeners).
    Status,
    /// Whether the node answers.
    Ping,
    /// Waits until the node has started.
    AwaitStartup,
    /// Whether the node is running and booted.
    CheckRunning,
    /// Connects to every listener the node reports.
    CheckPortConnectivity,
    /// The cluster's members, which run, versions, alarms, partitions and listeners.
    ClusterStatus,
    /// Closes every client connection and takes no new ones until `start_app` (what
    /// `join_cluster` needs first).
    StopApp,
    /// Takes clients again after `stop_app`.
    StartApp,
    /// Resets this node (stopped with `stop_app`) and makes it a member of NODE's cluster (its own definitions are
    /// replaced by the cluster's).
    JoinCluster {
        /// A node of the cluster to join: `NAME@HOST[:PORT]` (inter-node port 25672 by default).
        #[arg(value_name = "NODE")]
        target: String,
        /// A disc node (the only kind Warren has; accepted for rabbitmqctl's scripts).
        #[arg(long)]
        disc: bool,
    },
    /// Removes a stopped node from the cluster.
    ForgetClusterNode {
        /// The node to remove.
        #[arg(value_name = "NODE")]
        target: String,
    },
    /// Queues of a vhost with the columns asked for (name and messages by default).
    ListQueues {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// Columns.
        items: Vec<String>,
    },
    /// Open connections with the columns asked for.
    ListConnections {
        /// Columns.
        items: Vec<String>,
    },
    /// Users and their tags.
    ListUsers,
    /// Creates a user.
    AddUser {
        /// Its name.
        user: String,
        /// Its password.
        password: String,
    },
    /// Adds a member on NODE to a quorum queue (`rabbitmq-queues add_member`).
    AddMember {
        /// The queue's vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The queue.
        queue: String,
        /// The node to add a member on.
        #[arg(value_name = "NODE")]
        member: String,
    },
    /// Removes a quorum queue's member on NODE (`rabbitmq-queues delete_member`).
    DeleteMember {
        /// The queue's vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The queue.
        queue: String,
        /// The node whose member goes.
        #[arg(value_name = "NODE")]
        member: String,
    },
    /// Adds a member on NODE to every matching quorum queue without one there
    /// (`rabbitmq-queues grow`): `all` of them, or those with an `even` number of members.
    Grow {
        /// The node to place members on.
        #[arg(value_name = "NODE")]
        member: String,
        /// `all` or `even`.
        #[arg(value_parser = ["all", "even"])]
        strategy: String,
        /// Vhosts whose queues grow (a regular expression).
        #[arg(long = "vhost-pattern", default_value = ".*")]
        vhost_pattern: String,
        /// Queues that grow (a regular expression).
        #[arg(long = "queue-pattern", default_value = ".*")]
        queue_pattern: String,
    },
    /// Removes NODE's member from every quorum queue that has one there, unless it is the
    /// last (`rabbitmq-queues shrink`).
    Shrink {
        /// The node whose members go.
        #[arg(value_name = "NODE")]
        member: String,
    },
    /// Each member of a quorum queue's group: Raft state, log, commit index and term
    /// (`rabbitmq-queues quorum_status`).
    QuorumStatus {
        /// The queue's vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The queue.
        queue: String,
    },
    /// Sets a runtime parameter (VALUE is JSON), e.g. a shovel.
    SetParameter {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The component (`shovel`).
        component: String,
        /// The parameter's name.
        name: String,
        /// Its value, as JSON.
        value: String,
    },
    /// Clears a runtime parameter.
    ClearParameter {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The component.
        component: String,
        /// The parameter's name.
        name: String,
    },
    /// Runtime parameters of a vhost.
    ListParameters {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
    },
    /// The node's shovels and their states.
    ShovelStatus,
    /// The node's federation links and their states.
    FederationStatus {
        /// Only links that failed or are not connected.
        #[arg(long = "only-down")]
        only_down: bool,
    },
    /// Restarts a federation link (by the id `federation_status` shows).
    RestartFederationLink {
        /// The link's id.
        id: String,
    },
    /// Restarts a dynamic shovel.
    RestartShovel {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The shovel.
        name: String,
    },
    /// Deletes a dynamic shovel.
    DeleteShovel {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The shovel.
        name: String,
    },
    /// Sets a user's permissions in a vhost.
    SetPermissions {
        /// The vhost.
        #[arg(short = 'p', long = "vhost", default_value = "/")]
        vhost: String,
        /// The user.
        user: String,
        /// Configure regex.
        configure: String,
        /// Write regex.
        write: String,
        /// Read regex.
        read: String,
    },
}

/// Runs `args` against the node of `config` (through its CLI socket in its data dir), or
/// against the node `-n` names when that is another one (over the inter-node transport, with
/// the configuration's cluster secret, as rabbitmqctl reaches a remote node with the Erlang
/// cookie); returns the exit code.
pub fn run(args: &CtlArgs, config: &crate::config::Config) -> u8 {
    let style = output::Style {
        quiet: args.quiet,
        silent: args.silent,
        json: args.formatter.as_deref() == Some("json"),
    };
    let (route, node) = match &args.node {
        Some(n) if *n != config.node_name => (
            Route::Member {
                config: std::sync::Arc::new(config.clone()),
                node: n.clone(),
            },
            n.clone(),
        ),
        _ => (
            Route::Socket(config.data_dir.join(crate::CTL_SOCKET)),
            config.node_name.clone(),
        ),
    };
    let ctx = commands::Ctx {
        client: Client {
            route,
            timeout: Duration::from_secs(args.timeout.unwrap_or(60)),
        },
        style,
        node,
        data_dir: config.data_dir.clone(),
        wait: Duration::from_secs(args.timeout.unwrap_or(300)),
    };
    commands::run(&ctx, &args.command)
}
