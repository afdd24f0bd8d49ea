//! Paged queue lists (`/api/queues?page=...`), which the queues handler cuts itself, rendering
//! only the page when the order is by name: the order, counts, filters, columns and errors
//! are RabbitMQ's, the same as the list middleware gives every other list.

mod common;

use common::http::request;
use common::*;
use serde_json::{json, Value};

const ADMIN: Option<(&str, &str)> = Some(("guest", "guest"));

async fn get(b: &TestBroker, path: &str) -> (u16, Value) {
    let r = request(b.server.http_addr, "GET", path, ADMIN, None).await;
    let status = r.status;
    (status, r.json())
}

/// (vhost, name) of each item of a page.
fn pairs(page: &Value) -> Vec<(String, String)> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|q| {
            (
                q["vhost"].as_str().expect("vhost").to_owned(),
                q["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect()
}

fn p(v: &str, n: &str) -> (String, String) {
    (v.to_owned(), n.to_owned())
}

#[tokio::test]
async fn pages_of_queues_are_ordered_filtered_and_counted_as_rabbitmq_does() {
    let b = start().await;
    let addr = b.server.http_addr;
    let r = request(addr, "PUT", "/api/vhosts/v2", ADMIN, None).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = request(
        addr,
        "PUT",
        "/api/permissions/v2/guest",
        ADMIN,
        Some(r#"{"configure":".*","write":".*","read":".*"}"#),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    for (vhost, name) in [
        ("%2F", "c"),
        ("%2F", "a"),
        ("%2F", "Bee"),
        ("v2", "a"),
        ("v2", "d"),
    ] {
        let r = request(
            addr,
            "PUT",
            &format!("/api/queues/{vhost}/{name}"),
            ADMIN,
            Some("{}"),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    for _ in 0..2 {
        let r = request(
            addr,
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            ADMIN,
            Some(
                r#"{"properties":{},"routing_key":"c","payload":"x","payload_encoding":"string"}"#,
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }

    // No sort: by vhost, then name (byte order, as RabbitMQ's sort of binaries).
    let (status, page) = get(&b, "/api/queues?page=1&page_size=10").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        pairs(&page),
        vec![
            p("/", "Bee"),
            p("/", "a"),
            p("/", "c"),
            p("v2", "a"),
            p("v2", "d")
        ]
    );
    assert_eq!(
        (
            &page["total_count"],
            &page["filtered_count"],
            &page["page_count"]
        ),
        (&json!(5), &json!(5), &json!(1))
    );
    // By name: equal names keep their vhost order.
    let (_, page) = get(&b, "/api/queues?page=1&page_size=3&sort=name").await;
    assert_eq!(pairs(&page), vec![p("/", "Bee"), p("/", "a"), p("v2", "a")]);
    assert_eq!(
        (&page["item_count"], &page["page_count"]),
        (&json!(3), &json!(2))
    );
    let (_, page) = get(&b, "/api/queues?page=2&page_size=3&sort=name").await;
    assert_eq!(pairs(&page), vec![p("/", "c"), p("v2", "d")]);
    // Reversed: the whole order turned round.
    let (_, page) = get(
        &b,
        "/api/queues?page=1&page_size=2&sort=name&sort_reverse=true",
    )
    .await;
    assert_eq!(pairs(&page), vec![p("v2", "d"), p("/", "c")]);
    let (_, page) = get(
        &b,
        "/api/queues?page=1&page_size=2&sort=vhost&sort_reverse=true",
    )
    .await;
    assert_eq!(pairs(&page), vec![p("v2", "d"), p("v2", "a")]);
    // The name filter: a substring in any case, or a regex; counts before and after it.
    let (_, page) = get(&b, "/api/queues?page=1&page_size=10&name=A&sort=name").await;
    assert_eq!(pairs(&page), vec![p("/", "a"), p("v2", "a")]);
    assert_eq!(
        (&page["total_count"], &page["filtered_count"]),
        (&json!(5), &json!(2))
    );
    let (_, page) = get(&b, "/api/queues?page=1&name=%5E%5Bcd%5D%24&use_regex=true").await;
    assert_eq!(pairs(&page), vec![p("/", "c"), p("v2", "d")]);
    // Columns keep only what is asked.
    let (_, page) = get(&b, "/api/queues/v2?page=1&columns=name,messages").await;
    assert_eq!(
        page["items"],
        json!([{"name": "a", "messages": 0}, {"name": "d", "messages": 0}])
    );
    assert_eq!(page["total_count"], 2);
    // Any other order renders every queue first: by messages, the two in c come first.
    let (_, page) = get(
        &b,
        "/api/queues?page=1&page_size=1&sort=messages&sort_reverse=true&columns=name,messages",
    )
    .await;
    assert_eq!(page["items"], json!([{"name": "c", "messages": 2}]));
    // Errors as the middleware gives them.
    for bad in [
        "/api/queues?page=0",
        "/api/queues?page=4&page_size=2",
        "/api/queues?page=1&page_size=501",
        "/api/queues?page=1&name=(&use_regex=true",
    ] {
        let (status, body) = get(&b, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"], "bad_request", "{bad}: {body}");
    }
    // An empty filter result is page 1 of 0, not an error.
    let (status, page) = get(&b, "/api/queues?page=1&name=nothing-like-it").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        (&page["filtered_count"], &page["item_count"]),
        (&json!(0), &json!(0))
    );
}
