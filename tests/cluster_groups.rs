//! Replicated queue groups across real nodes on loopback (#18): three Warren stores, each with
//! its node (metadata group, inter-node listener and queue groups) in this process, talking
//! over TCP. A group's writes from any member (or from a node that is not one, through the
//! members) are committed on a majority and applied in order; it survives the loss of its
//! leader's node with a new leader within the failover bound; a leader restarted at once does
//! not lead its old term again; a member that was down catches up from the log or a
//! snapshot; appends of many groups share commits; idle groups send no heartbeats.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren::cluster::group_types::GroupCommand;
use warren::cluster::types::Member;
use warren::cluster::{MetaNode, NodeConfig};
use warren::store::Store;

const SECRET: &[u8] = b"the-cookie";

struct Node {
    dir: tempfile::TempDir,
    listen: SocketAddr,
    node: Arc<MetaNode>,
    store: Store,
}

async fn start_in(dir: tempfile::TempDir, name: &str, listen: SocketAddr) -> Node {
    let (store, _) = Store::open(dir.path(), 8 << 20, Default::default()).expect("store");
    let mut config = NodeConfig::new(name, listen, SECRET.to_vec());
    config.write_timeout = Duration::from_secs(5);
    config.snapshot_logs = 20;
    let node = MetaNode::start(store.clone(), config, None)
        .await
        .map(Arc::new)
        .expect("node starts");
    Node {
        dir,
        listen,
        node,
        store,
    }
}

async fn start(name: &str) -> Node {
    let dir = tempfile::tempdir().expect("dir");
    let listen = SocketAddr::from(([127, 0, 0, 1], common::cluster::free_port()));
    start_in(dir, name, listen).await
}

/// Stops a node as a crash looks to its peers (listener, groups and Raft gone), keeping its
/// data directory and address for a restart.
async fn stop(n: Node) -> (tempfile::TempDir, SocketAddr, String) {
    let name = n.node.name().to_string();
    n.node.shutdown().await;
    n.store.close().await;
    (n.dir, n.listen, name)
}

/// Three nodes in one cluster (the metadata group formed, so each knows the others).
async fn three() -> Vec<Node> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let nodes = vec![
        start("warren@a").await,
        start("warren@b").await,
        start("warren@c").await,
    ];
    let others: Vec<_> = nodes[1..].iter().map(|n| n.node.member()).collect();
    nodes[0].node.initialize(&others).await.expect("initialize");
    let start = Instant::now();
    while !nodes.iter().all(|n| n.node.leader().is_some()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a metadata leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes
}

/// Bytes each node sent its peers during `window`.
async fn sent_during(nodes: &[Node], window: Duration) -> Vec<u64> {
    let sent = |n: &Node| -> u64 { n.node.links().iter().map(|(_, s, _)| s).sum() };
    let before: Vec<u64> = nodes.iter().map(sent).collect();
    tokio::time::sleep(window).await;
    nodes.iter().zip(before).map(|(n, b)| sent(n) - b).collect()
}

fn members(nodes: &[Node]) -> Vec<Member> {
    nodes.iter().map(|n| n.node.member()).collect()
}

/// Starts `group` on every node, led by `nodes[leader]`, and waits until all know it leads.
async fn form(nodes: &[Node], group: u64, leader: usize) {
    let all = members(nodes);
    let name = nodes[leader].node.name().to_owned();
    for n in nodes {
        n.node
            .groups()
            .start(group, &all, Some(&name))
            .await
            .expect("group starts");
    }
    let id = nodes[leader].node.id();
    for n in nodes {
        let seen = n
            .node
            .groups()
            .wait_leader(group, Duration::from_secs(5))
            .await;
        assert_eq!(
            seen.map(|l| l.0),
            Some(id),
            "{} knows the leader",
            n.node.name()
        );
    }
}

/// `group`'s term as `n` knows it.
fn term(n: &Node, group: u64) -> u64 {
    n.node
        .groups()
        .metrics(group)
        .expect("a member")
        .current_term
}

/// The nodes that lead `group`, by name, with their term.
fn leaders(nodes: &[Node], group: u64) -> Vec<(String, u64)> {
    nodes
        .iter()
        .filter(|n| n.node.groups().is_leader(group))
        .map(|n| (n.node.name().to_string(), term(n, group)))
        .collect()
}

fn add(v: String) -> GroupCommand {
    GroupCommand::Add(v.into_bytes())
}

async fn values(n: &Node, group: u64) -> Vec<(u64, String)> {
    n.node
        .groups()
        .values(group)
        .await
        .expect("values")
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v).expect("utf-8")))
        .collect()
}

async fn eventually_values(n: &Node, group: u64, want: &[(u64, String)]) {
    let start = Instant::now();
    loop {
        let got = values(n, group).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} holds {} values, not the {} wanted",
            n.node.name(),
            got.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_commits_writes_from_any_member_and_survives_its_leaders_node() {
    let mut nodes = three().await;
    form(&nodes, 7, 0).await;
    // Written through a follower (forwarded to the leader) and through the leader: keys in
    // the order the values were added.
    let mut want = Vec::new();
    for i in 0..40 {
        let v = format!("m{i}");
        let reply = nodes[1 + i % 2]
            .node
            .groups()
            .write(7, add(v.clone()))
            .await
            .expect("committed");
        assert_eq!(reply.added, vec![i as u64 + 1]);
        want.push((i as u64 + 1, v));
    }
    nodes[0]
        .node
        .groups()
        .write(7, GroupCommand::Remove(vec![2, 3]))
        .await
        .expect("committed");
    want.retain(|(k, _)| *k != 2 && *k != 3);
    // A node that is not a member writes through the members it is told of.
    let outsider = start("warren@d").await;
    let reply = outsider
        .node
        .groups()
        .write_via(7, add("from-d".into()), &members(&nodes))
        .await
        .expect("committed through a member");
    assert_eq!(reply.added, vec![41]);
    want.push((41, "from-d".into()));
    stop(outsider).await;
    // Answered means applied on the leader.
    assert_eq!(values(&nodes[0], 7).await, want);

    // The leader's node goes; a new leader serves writes within the failover bound and
    // holds everything that was committed.
    let lost = stop(nodes.remove(0)).await;
    let cut = Instant::now();
    let reply = nodes[0]
        .node
        .groups()
        .write(7, add("after".into()))
        .await
        .expect("a new leader commits");
    let failover = cut.elapsed();
    assert!(
        failover < Duration::from_secs(2),
        "failover took {failover:?}"
    );
    assert_eq!(reply.added, vec![42]);
    want.push((42, "after".into()));
    let leader = nodes
        .iter()
        .position(|n| n.node.groups().is_leader(7))
        .expect("b or c leads");
    assert_eq!(values(&nodes[leader], 7).await, want);

    // The old leader comes back as a follower and catches up from the new leader's log.
    let (dir, listen, name) = lost;
    nodes.push(start_in(dir, &name, listen).await);
    for i in 0..3 {
        let v = format!("back{i}");
        let reply = nodes[1 - leader]
            .node
            .groups()
            .write(7, add(v.clone()))
            .await
            .expect("committed");
        want.push((reply.added[0], v));
    }
    // A follower applies what the leader's next append says is committed.
    let marker = nodes[leader]
        .node
        .groups()
        .write(7, add("marker".into()))
        .await
        .expect("committed");
    nodes[leader]
        .node
        .groups()
        .write(7, GroupCommand::Remove(marker.added))
        .await
        .expect("committed");
    eventually_values(&nodes[2], 7, &want).await;
    assert!(
        !nodes[2].node.groups().is_leader(7),
        "it rejoined as a follower"
    );
    for n in nodes {
        stop(n).await;
    }
}

/// A group's leader whose node restarts before its followers elect another does not lead its
/// old term again (its followers may hold entries of that term that it lost, and it would
/// give its next entries their log ids). It asks who leads; its followers take it for down
/// and the members elect a leader in a later term, which holds every committed value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_at_once_does_not_lead_its_old_term_again() {
    let mut nodes = three().await;
    form(&nodes, 11, 0).await;
    let mut want = Vec::new();
    for i in 0..10 {
        let v = format!("m{i}");
        let reply = nodes[0]
            .node
            .groups()
            .write(11, add(v.clone()))
            .await
            .expect("committed");
        want.push((reply.added[0], v));
    }
    let term = term(&nodes[0], 11);
    let (dir, listen, name) = stop(nodes.remove(0)).await;
    // Back at once: its followers still take it for their leader.
    nodes.insert(0, start_in(dir, &name, listen).await);
    let cut = Instant::now();
    let reply = nodes[1]
        .node
        .groups()
        .write(11, add("after".into()))
        .await
        .expect("a leader commits after the restart");
    want.push((reply.added[0], "after".into()));
    assert!(
        cut.elapsed() < Duration::from_secs(5),
        "the group was led again after {:?}",
        cut.elapsed()
    );
    let leaders = leaders(&nodes, 11);
    assert_eq!(leaders.len(), 1, "one leader: {leaders:?}");
    assert!(
        leaders[0].1 > term,
        "led in term {term} before the restart; after it: {leaders:?}"
    );
    for n in &nodes {
        eventually_values(n, 11, &want).await;
    }
    for n in nodes {
        stop(n).await;
    }
}

/// Copies the files under `from` into `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The hazard the test above guards against, played out: a leader replicates before its own
/// flush, so a kill can leave its followers holding committed entries that it lost. Its
/// data directory is copied while idle and put back after three more writes (the state such
/// a kill leaves). Restarted at once, it neither leads its old term again (it would give
/// its next entry the log id of one the followers hold: values that differ from node to
/// node) nor waits for an election it cannot win (its log is shorter): its followers,
/// asked who leads, take it for down, and one of them leads with every committed value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_leader_that_lost_entries_its_followers_hold_gives_no_log_id_twice() {
    let mut nodes = three().await;
    form(&nodes, 12, 0).await;
    let mut want = Vec::new();
    let write = async |n: &Node, v: String, want: &mut Vec<(u64, String)>| {
        let reply = n
            .node
            .groups()
            .write(12, add(v.clone()))
            .await
            .expect("committed");
        want.push((reply.added[0], v));
    };
    for i in 0..7 {
        write(&nodes[0], format!("m{i}"), &mut want).await;
    }
    for n in &nodes {
        eventually_values(n, 12, &want).await;
    }
    // Idle: every write is on disk.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = tempfile::tempdir().expect("dir");
    copy_dir(nodes[0].dir.path(), before.path());
    for i in 7..10 {
        write(&nodes[0], format!("m{i}"), &mut want).await;
    }
    let term = term(&nodes[0], 12);
    let (dir, listen, name) = stop(nodes.remove(0)).await;
    drop(dir);
    nodes.insert(0, start_in(before, &name, listen).await);
    let cut = Instant::now();
    write(&nodes[1], "after".into(), &mut want).await;
    assert!(
        cut.elapsed() < Duration::from_secs(5),
        "the group was led again after {:?}",
        cut.elapsed()
    );
    let leaders = leaders(&nodes, 12);
    assert!(
        leaders.len() == 1 && leaders[0].1 > term && leaders[0].0 != name,
        "led by {name} in term {term} before the restart; after it: {leaders:?}"
    );
    for n in &nodes {
        eventually_values(n, 12, &want).await;
    }
    for n in nodes {
        stop(n).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_was_down_catches_up_by_snapshot_and_can_lead() {
    let mut nodes = three().await;
    form(&nodes, 9, 1).await;
    let (dir, listen, name) = stop(nodes.remove(2)).await;
    // Far more entries than a snapshot's worth (20): the leader purges its log past where c
    // stopped, so c can only catch up by installing a snapshot.
    let mut want = Vec::new();
    for i in 0..60 {
        let v = format!("m{i}");
        let reply = nodes[i % 2]
            .node
            .groups()
            .write(9, add(v.clone()))
            .await
            .expect("committed by a and b");
        want.push((reply.added[0], v));
    }
    nodes[1]
        .node
        .groups()
        .write(9, GroupCommand::Remove((1..=30).collect()))
        .await
        .expect("committed");
    want.retain(|(k, _)| *k > 30);
    let leader_purged = {
        let start = Instant::now();
        loop {
            let purged = nodes[1]
                .store
                .read_log(9, 0..=10)
                .expect("read log")
                .is_empty();
            if purged || start.elapsed() > Duration::from_secs(10) {
                break purged;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(leader_purged, "the leader purged the head of its log");
    nodes.push(start_in(dir, &name, listen).await);
    let marker = nodes[0]
        .node
        .groups()
        .write(9, add("marker".into()))
        .await
        .expect("committed");
    nodes[0]
        .node
        .groups()
        .write(9, GroupCommand::Remove(marker.added))
        .await
        .expect("committed");
    eventually_values(&nodes[2], 9, &want).await;
    // With a and b gone but one, c and the survivor still make a majority: c holds all.
    let (a, b) = (nodes.remove(0), nodes.remove(0));
    stop(b).await;
    let reply = nodes[0]
        .node
        .groups()
        .write(9, add("c and a".into()))
        .await
        .expect("committed by c and a");
    want.push((reply.added[0], "c and a".into()));
    let c = nodes.remove(0);
    let group_leader = if c.node.groups().is_leader(9) { &c } else { &a };
    assert_eq!(values(group_leader, 9).await, want);
    stop(a).await;
    stop(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_groups_share_commits_and_idle_groups_exchange_no_heartbeats() {
    let nodes = three().await;
    let all = members(&nodes);
    // What the nodes send with no queue group: the metadata group's heartbeats.
    let baseline = sent_during(&nodes, Duration::from_secs(2)).await;
    const GROUPS: u64 = 60;
    for g in 1..=GROUPS {
        let leader = nodes[(g % 3) as usize].node.name().to_owned();
        for n in &nodes {
            n.node
                .groups()
                .start(100 + g, &all, Some(&leader))
                .await
                .expect("group starts");
        }
    }
    for g in 1..=GROUPS {
        for n in &nodes {
            assert!(
                n.node
                    .groups()
                    .wait_leader(100 + g, Duration::from_secs(10))
                    .await
                    .is_some(),
                "group {g} has a leader on {}: {:?}",
                n.node.name(),
                nodes
                    .iter()
                    .map(|n| n.node.groups().metrics(100 + g))
                    .collect::<Vec<_>>()
            );
        }
    }
    // One write to every group at once, through node a (a third of them lead there).
    let (commits_before, _) = nodes[0].store.commit_stats();
    let mut writes = tokio::task::JoinSet::new();
    for g in 1..=GROUPS {
        let node = nodes[0].node.clone();
        writes.spawn(async move { (g, node.groups().write(100 + g, add(format!("g{g}"))).await) });
    }
    while let Some(w) = writes.join_next().await {
        let (g, r) = w.expect("task");
        if let Err(e) = r {
            panic!(
                "group {g}: {e}: {:#?}",
                nodes
                    .iter()
                    .map(|n| n.node.groups().metrics(100 + g))
                    .collect::<Vec<_>>()
            );
        }
    }
    let (commits_after, _) = nodes[0].store.commit_stats();
    let commits = commits_after - commits_before;
    // Each write is an append on a (as leader or follower) and an apply: 120 log writes at
    // least, which one store commit each would take.
    assert!(
        commits < GROUPS,
        "{commits} store commits for {GROUPS} groups' writes"
    );
    // Idle: the groups are quiet; what a node sends on top of the baseline is its pings
    // of leaders' nodes (one per node, not per group).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = sent_during(&nodes, Duration::from_secs(2)).await;
    for ((n, idle), base) in nodes.iter().zip(idle).zip(baseline) {
        // Heartbeats of 20 led groups to two followers each, even every 300 ms, would add
        // over 250 appends (tens of KB).
        assert!(
            idle < base + 4_000,
            "{} sent {idle} bytes while idle, {base} without groups",
            n.node.name()
        );
    }
    for n in nodes {
        stop(n).await;
    }
}
