//! Resource alarms, as RabbitMQ's memory and disk monitors: a task checks the broker's resident
//! memory against `memory_high_watermark` (a fraction of the machine's memory or of the cgroup
//! limit, or `memory_high_watermark_absolute` bytes) and the free space of the data dir's
//! filesystem against `disk_free_limit`, every `alarm_check_interval`. While either alarm is
//! raised, connections that publish are blocked (`amqp/connection/flow.rs`); consumers keep draining.
//! Connections learn of changes through a watch channel, so the hot path never looks.

use crate::config::Config;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::watch;

/// What is raised, for the watchers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlarmState {
    /// Resident memory is above the watermark.
    pub memory: bool,
    /// Free disk space is below the limit.
    pub disk: bool,
}

impl AlarmState {
    /// Whether publishers must be blocked.
    pub fn any(self) -> bool {
        self.memory || self.disk
    }

    /// The `connection.blocked` reason, as RabbitMQ words it.
    pub fn reason(self) -> &'static str {
        match (self.memory, self.disk) {
            (true, true) => "low on memory & low on disk",
            (true, false) => "low on memory",
            (false, true) => "low on disk",
            (false, false) => "",
        }
    }
}

/// The node's alarms and their limits.
#[derive(Debug)]
pub struct Alarms {
    memory: AtomicBool,
    disk: AtomicBool,
    memory_limit: AtomicU64,
    disk_limit: AtomicU64,
    data_dir: PathBuf,
    tx: watch::Sender<AlarmState>,
}

/// The memory this process may use: the cgroup's limit when lower than the machine's memory.
pub fn total_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let machine = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?
        * 1024;
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    Some(cgroup.map_or(machine, |c| c.min(machine)))
}

/// Resident set size of this process, bytes.
pub fn resident_memory() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Free bytes for unprivileged users on the filesystem holding `path`.
pub fn disk_free(path: &std::path::Path) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

impl Alarms {
    /// Alarms with the configured limits (nothing raised until the first check).
    pub fn new(config: &Config) -> Alarms {
        let memory_limit = config.memory_high_watermark_absolute.unwrap_or_else(|| {
            total_memory().map_or(u64::MAX, |t| {
                (t as f64 * config.memory_high_watermark.clamp(0.0, 1.0)) as u64
            })
        });
        Alarms {
            memory: AtomicBool::new(false),
            disk: AtomicBool::new(false),
            memory_limit: AtomicU64::new(memory_limit),
            disk_limit: AtomicU64::new(config.disk_free_limit),
            data_dir: config.data_dir.clone(),
            tx: watch::Sender::new(AlarmState::default()),
        }
    }

    /// Follows alarm changes.
    pub fn subscribe(&self) -> watch::Receiver<AlarmState> {
        self.tx.subscribe()
    }

    /// What is raised now.
    pub fn state(&self) -> AlarmState {
        AlarmState {
            memory: self.memory.load(Ordering::Relaxed),
            disk: self.disk.load(Ordering::Relaxed),
        }
    }

    /// The memory watermark in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// The free disk limit in bytes.
    pub fn disk_limit(&self) -> u64 {
        self.disk_limit.load(Ordering::Relaxed)
    }

    /// Changes the memory watermark at runtime (RabbitMQ's `set_vm_memory_high_watermark`);
    /// takes effect at the next check.
    pub fn set_memory_limit(&self, bytes: u64) {
        self.memory_limit.store(bytes, Ordering::Relaxed);
    }

    /// Changes the free disk limit at runtime (RabbitMQ's `set_disk_free_limit`).
    pub fn set_disk_limit(&self, bytes: u64) {
        self.disk_limit.store(bytes, Ordering::Relaxed);
    }

    /// Measures and raises or clears the alarms, telling watchers of a change.
    pub fn check(&self) {
        let memory = resident_memory().is_some_and(|used| used > self.memory_limit());
        let disk = disk_free(&self.data_dir).is_some_and(|free| free < self.disk_limit());
        for (flag, now, what) in [(&self.memory, memory, "memory"), (&self.disk, disk, "disk")] {
            if flag.swap(now, Ordering::Relaxed) != now {
                if now {
                    tracing::warn!(
                        resource = what,
                        "resource alarm raised: publishers are blocked"
                    );
                } else {
                    tracing::info!(resource = what, "resource alarm cleared");
                }
            }
        }
        let state = self.state();
        self.tx.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_raise_and_clear_alarms_and_tell_watchers() {
        let dir = std::env::temp_dir();
        let config = Config {
            memory_high_watermark_absolute: Some(1),
            disk_free_limit: 0,
            data_dir: dir,
            ..Config::default()
        };
        let a = Alarms::new(&config);
        let mut rx = a.subscribe();
        a.check();
        assert_eq!(
            a.state(),
            AlarmState {
                memory: true,
                disk: false
            }
        );
        assert!(rx.has_changed().unwrap_or(false));
        assert_eq!(rx.borrow_and_update().reason(), "low on memory");
        a.set_memory_limit(u64::MAX);
        a.set_disk_limit(u64::MAX);
        a.check();
        assert_eq!(
            a.state(),
            AlarmState {
                memory: false,
                disk: true
            }
        );
        assert_eq!(rx.borrow_and_update().reason(), "low on disk");
        assert!(total_memory().is_some_and(|t| t > 0));
        assert!(resident_memory().is_some_and(|r| r > 0));
    }
}
