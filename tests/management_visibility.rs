//! Which vhosts a user sees through the API, as RabbitMQ's management plugin decides:
//! administrators and monitoring users all of them, a `management` user the vhosts it holds
//! permissions in (lists leave the others out, a GET into one is 401).

mod common;

use common::http::request;
use common::*;
use serde_json::Value;

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

async fn put(b: &TestBroker, path: &str, body: &str) {
    let r = request(b.server.http_addr, "PUT", path, ADMIN, Some(body)).await;
    assert!(
        r.status == 201 || r.status == 204,
        "{path}: {} {}",
        r.status,
        r.body
    );
}

async fn get_as(b: &TestBroker, who: (&str, &str), path: &str) -> (u16, Value) {
    let r = request(b.server.http_addr, "GET", path, Some(who), None).await;
    let status = r.status;
    (status, r.json())
}

/// The `field` of every item of a list.
fn field(list: &Value, field: &str) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|i| i[field].as_str().map(str::to_owned))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[tokio::test]
async fn a_management_user_sees_only_the_vhosts_it_has_permissions_in() {
    let b = start().await;
    put(&b, "/api/vhosts/v2", "").await;
    put(
        &b,
        "/api/users/mgr",
        r#"{"password":"p","tags":"management"}"#,
    )
    .await;
    put(
        &b,
        "/api/users/mon",
        r#"{"password":"p","tags":"monitoring"}"#,
    )
    .await;
    for user in ["mgr", "guest"] {
        put(
            &b,
            &format!("/api/permissions/v2/{user}"),
            r#"{"configure":".*","write":".*","read":".*"}"#,
        )
        .await;
    }
    put(&b, "/api/queues/%2F/q1", "{}").await;
    put(&b, "/api/queues/v2/q2", "{}").await;
    let mgr = ("mgr", "p");

    let (status, queues) = get_as(&b, mgr, "/api/queues").await;
    assert_eq!(status, 200, "{queues}");
    assert_eq!(field(&queues, "name"), ["q2"]);
    let (_, page) = get_as(&b, mgr, "/api/queues?page=1&page_size=10").await;
    assert_eq!(page["total_count"], 1, "{page}");
    assert_eq!(field(&page["items"], "name"), ["q2"]);
    for list in ["/api/exchanges", "/api/bindings", "/api/consumers"] {
        let (status, items) = get_as(&b, mgr, list).await;
        assert_eq!(status, 200, "{list}: {items}");
        let vhosts = field(&items, "vhost");
        assert!(vhosts.iter().all(|v| v == "v2"), "{list}: {vhosts:?}");
    }
    let (_, exchanges) = get_as(&b, mgr, "/api/exchanges?page=1").await;
    assert!(
        field(&exchanges["items"], "vhost")
            .iter()
            .all(|v| v == "v2"),
        "{exchanges}"
    );
    let (_, vhosts) = get_as(&b, mgr, "/api/vhosts").await;
    assert_eq!(field(&vhosts, "name"), ["v2"]);
    for path in [
        "/api/queues/%2F",
        "/api/queues/%2F/q1",
        "/api/exchanges/%2F/amq.direct",
    ] {
        let (status, body) = get_as(&b, mgr, path).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert_eq!(
            body["reason"], "User not authorised to access virtual host",
            "{path}"
        );
    }
    let (status, q) = get_as(&b, mgr, "/api/queues/v2/q2").await;
    assert_eq!((status, &q["name"]), (200, &Value::from("q2")), "{q}");
    // A vhost that does not exist is still 404.
    let (status, _) = get_as(&b, mgr, "/api/queues/nosuch").await;
    assert_eq!(status, 404);

    // Monitoring and administrator users see every vhost.
    for who in [("mon", "p"), ("guest", "guest")] {
        let (_, queues) = get_as(&b, who, "/api/queues").await;
        assert_eq!(field(&queues, "name"), ["q1", "q2"], "{}", who.0);
        let (status, _) = get_as(&b, who, "/api/queues/%2F/q1").await;
        assert_eq!(status, 200, "{}", who.0);
    }
}
