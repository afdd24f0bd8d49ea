//! Adopting the applied tree while the metadata group goes on applying entries: what a node
//! does at start, after a reset and after a snapshot, with the rest of the cluster writing.

use super::queue_record::{encode_queue, queue_path, Quorum};
use super::{adopt_applied, SEEDED};
use crate::cluster::types::Command;
use crate::config::Config;
use amq_protocol::types::FieldTable;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ELSEWHERE: &str = "warren-elsewhere@127.0.0.1";
const QUEUES: usize = 40;
const ROUNDS: usize = 300;

/// A node adopting the tree (as it does at start) while entries keep being applied gets
/// through. Adopting a quorum queue led on another node rebinds it, which reads the tree
/// again; done under the read that adopting took, that second read waits behind the state
/// machine's write, which waits for the first read: the node hung at start, its state machine
/// with it (the chaos run of 2026-12-07 whose restarted node never answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adopting_the_tree_while_entries_apply_does_not_hang() {
    let dir = tempfile::tempdir().expect("dir");
    let any = "127.0.0.1:0".parse().expect("addr");
    let config = Config {
        amqp_listen: any,
        http_listen: any,
        metrics_listen: any,
        cluster_listen: any,
        data_dir: dir.path().to_owned(),
        node_name: "warren-t@127.0.0.1".into(),
        cluster_secret: Some("cookie".into()),
        ..Config::default()
    };
    let server = crate::Server::start(config).await.expect("starts");
    let b = server.broker.clone();
    let node = b.cluster.get().expect("a cluster node").clone();
    let seeded = tokio::time::timeout(Duration::from_secs(20), async {
        while node.read(|t| t.get(&[SEEDED.to_string()]).is_none()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    seeded.await.expect("the node seeds its tree");
    for i in 0..QUEUES {
        let quorum = Quorum {
            group: 1_000 + i as u64,
            members: vec![ELSEWHERE.into()],
        };
        let value = encode_queue(
            ELSEWHERE,
            true,
            false,
            &FieldTable::default(),
            Some(&quorum),
        );
        let path = queue_path("/", &format!("q{i}"));
        node.write(Command::Put { path, value })
            .await
            .expect("queue record written");
    }
    let vhost = b.vhost("/").expect("default vhost");
    assert!(vhost.queue("q0").is_ok(), "the record installs a handle");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (node, stop) = (node.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = vec!["churn".to_string()];
                let value = i.to_be_bytes().to_vec();
                node.write(Command::Put { path, value })
                    .await
                    .expect("churn written");
                i += 1;
            }
            i
        })
    };
    // Each round starts from registries without the queues, as a restarted node does.
    let (done, adopted) = tokio::sync::oneshot::channel();
    let rt = tokio::runtime::Handle::current();
    let broker = b.clone();
    std::thread::spawn(move || {
        let _entered = rt.enter();
        for _ in 0..ROUNDS {
            for i in 0..QUEUES {
                vhost.drop_queue(&format!("q{i}"));
            }
            adopt_applied(&broker);
        }
        let _ = done.send(());
    });
    if tokio::time::timeout(Duration::from_secs(60), adopted)
        .await
        .is_err()
    {
        // Both locks are held for good: the runtime cannot be shut down to report it.
        eprintln!("adopting the tree never finished: a nested read of the tree deadlocked");
        std::process::exit(101);
    }
    stop.store(true, Ordering::Relaxed);
    let writes = writer.await.expect("writer");
    assert!(writes > 0, "entries were applied while adopting");
    assert!(b.vhost("/").expect("vhost").queue("q7").is_ok());
    server.shutdown().await;
}
