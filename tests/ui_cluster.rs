//! The web UI of a three-process cluster in headless Chromium: the overview lists every node
//! and follows one that stops; a quorum queue's page shows its leader and members.

mod common;

use common::browser::Browser;
use common::cluster::{three, NAMES};
use common::http::request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_shows_the_clusters_nodes_and_a_quorum_queues_members() {
    let (specs, mut children, _) = three().await;
    let r = request(
        specs[0].http,
        "PUT",
        "/api/queues/%2F/ui-quorum",
        Some(("guest", "guest")),
        Some(r#"{"durable":true,"arguments":{"x-queue-type":"quorum"}}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let url = format!("http://{}", specs[0].http);
    let browser = Browser::start(1280, 800).await;
    browser.log_in(&url, "guest", "guest").await;
    for name in NAMES {
        browser.wait_text("#nodes", name).await;
    }
    let nodes = browser.find("#nodes").await.text().await.expect("text");
    assert!(!nodes.contains("false"), "a node shown stopped: {nodes}");

    browser.open(&format!("{url}/#/queues/%2F/ui-quorum")).await;
    let details = browser.wait_text("#queue-details", "Leader").await;
    assert!(details.contains("quorum"), "{details}");
    for name in NAMES {
        browser.wait_text("#queue-details", name).await;
    }

    // Node c stops: the overview shows it not running at a later refresh.
    children[2].kill().await.expect("kill c");
    browser.open(&format!("{url}/#/")).await;
    browser.wait_text("#nodes", "false").await;
    let row = browser
        .eval(
            "return [...document.querySelectorAll('#nodes tbody tr')]\
             .filter(tr => tr.textContent.includes('false')).map(tr => tr.textContent);",
        )
        .await;
    let rows = row.as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{row}");
    assert!(
        rows[0].as_str().is_some_and(|t| t.contains(NAMES[2])),
        "{row}"
    );
    let _ = browser.client.clone().close().await;
}
