//! A real RabbitMQ (Debian's 3.10, installed by `tests/tools/install-rabbitmq` when missing) on
//! free loopback ports with its own data dir, with the management, shovel and federation plugins, for the
//! tests that move messages between it and Warren. Stopped (its Erlang VM killed) when dropped.

use super::cluster::free_port;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A running RabbitMQ node.
pub struct Rabbit {
    /// AMQP port.
    pub amqp: u16,
    /// Management API address.
    pub http: std::net::SocketAddr,
    dir: tempfile::TempDir,
    /// The start script (it exits once the VM is gone).
    script: std::process::Child,
}

impl Rabbit {
    /// Installs (if needed) and starts a node; waits until AMQP and HTTP answer.
    pub async fn start() -> Rabbit {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/install-rabbitmq");
        let ok = Command::new(script).status().expect("run install-rabbitmq");
        assert!(ok.success(), "could not install rabbitmq-server");
        let dir = tempfile::tempdir().expect("tempdir");
        let base: PathBuf = dir.path().to_owned();
        let (amqp, http, dist) = (free_port(), free_port(), free_port());
        for d in ["mnesia", "log"] {
            std::fs::create_dir_all(base.join(d)).expect("mkdir");
        }
        std::fs::write(
            base.join("enabled_plugins"),
            "[rabbitmq_management,rabbitmq_shovel,rabbitmq_shovel_management,\
             rabbitmq_federation,rabbitmq_federation_management].\n",
        )
        .expect("plugins");
        std::fs::write(
            base.join("rabbitmq.conf"),
            format!(
                "loopback_users = none\nlisteners.tcp.default = 127.0.0.1:{amqp}\n\
                 management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {http}\n\
                 collect_statistics_interval = 500\n"
            ),
        )
        .expect("config");
        // Debian's start script drops root for the rabbitmq user, which must reach these.
        use std::os::unix::fs::PermissionsExt;
        for d in [base.clone(), base.join("mnesia"), base.join("log")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        }
        let node = format!("warrentest{amqp}@localhost");
        let env = |k: &str, v: String| (k.to_owned(), v);
        let vars = [
            env("RABBITMQ_NODENAME", node.clone()),
            env("RABBITMQ_NODE_PORT", amqp.to_string()),
            env(
                "RABBITMQ_MNESIA_BASE",
                base.join("mnesia").display().to_string(),
            ),
            env("RABBITMQ_LOG_BASE", base.join("log").display().to_string()),
            env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins").display().to_string(),
            ),
            env(
                "RABBITMQ_CONFIG_FILE",
                base.join("rabbitmq").display().to_string(),
            ),
            env("RABBITMQ_DIST_PORT", dist.to_string()),
            env(
                "RABBITMQ_FEATURE_FLAGS_FILE",
                base.join("mnesia").join("ff").display().to_string(),
            ),
            env("HOME", base.display().to_string()),
            env("RABBITMQ_PID_FILE", base.join("pid").display().to_string()),
        ];
        let log = std::fs::File::create(base.join("out.log")).expect("log");
        let script = Command::new("rabbitmq-server")
            .envs(vars)
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start rabbitmq-server");
        let rabbit = Rabbit {
            script,
            amqp,
            http: ([127, 0, 0, 1], http).into(),
            dir,
        };
        for _ in 0..1200 {
            let up = |port: u16| tokio::net::TcpStream::connect(("127.0.0.1", port));
            if up(amqp).await.is_ok() && up(http).await.is_ok() {
                return rabbit;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "RabbitMQ did not start; see {}",
            base.join("out.log").display()
        );
    }

    /// Its AMQP URI with guest's credentials.
    pub fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.amqp)
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        // The start script hands over to beam.smp under the rabbitmq user, which writes its
        // pid here.
        let pid = std::fs::read_to_string(self.dir.path().join("pid")).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<u32>() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = self.script.kill();
        let _ = self.script.wait();
    }
}
