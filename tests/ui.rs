//! The web UI in a real headless Chromium (WebDriver) against a real broker: log in, create a
//! vhost, a user, an exchange and a queue, bind, publish, peek (the message is still there and
//! still first), get, purge and delete, each checked through the API; a failed call shows its
//! error; a `monitoring` user sees none of the buttons that would fail; names and payloads
//! with markup render as text and run nothing; the page cannot be framed.
//! `WARREN_UI_SCREENSHOTS=dir` also saves screenshots of the main pages there.

mod common;

use common::browser::Browser;
use common::http::request;
use common::*;
use serde_json::Value;

/// Calls the API as guest; returns (status, JSON body or Null).
async fn api(b: &TestBroker, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let r = request(
        b.server.http_addr,
        method,
        path,
        Some(("guest", "guest")),
        body,
    )
    .await;
    let json = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    (r.status, json)
}

fn base(b: &TestBroker) -> String {
    format!("http://{}", b.server.http_addr)
}

/// Ready messages of `queue` in vhost / per the API.
async fn messages(b: &TestBroker, queue: &str) -> u64 {
    let (_, q) = api(b, "GET", &format!("/api/queues/%2F/{queue}"), None).await;
    q["messages_ready"].as_u64().unwrap_or(u64::MAX)
}

/// Waits until the API reports `n` ready messages in `queue` (stats are sampled).
async fn wait_messages(b: &TestBroker, queue: &str, n: u64) {
    let start = std::time::Instant::now();
    while messages(b, queue).await != n {
        assert!(
            start.elapsed() < common::browser::UI_WAIT,
            "{queue} never had {n} messages (has {})",
            messages(b, queue).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Saves a screenshot with `css` scrolled to the top of the window, when asked to.
async fn shot(browser: &Browser, name: &str, css: &str) {
    if let Ok(dir) = std::env::var("WARREN_UI_SCREENSHOTS") {
        let script = format!("document.querySelector('{css}').scrollIntoView()");
        browser.eval(&script).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        browser
            .screenshot(&std::path::Path::new(&dir).join(format!("{name}.png")))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_manages_the_broker_through_the_ui() {
    let b = start().await;
    let url = base(&b);
    let browser = Browser::start(1280, 800).await;

    // A wrong password is refused with a clear message; the right one logs in.
    browser.open(&format!("{url}/#/")).await;
    browser.type_into("#login-user", "guest").await;
    browser.type_into("#login-password", "wrong").await;
    browser.click("#login-submit").await;
    browser.wait_text(".login-error", "Login failed").await;
    browser.log_in(&url, "guest", "guest").await;
    browser.wait_text("#totals", "Queues").await;
    browser.find("#chart-queued canvas").await;
    browser.find("#chart-rates canvas").await;

    // A virtual host and a user.
    browser.open(&format!("{url}/#/vhosts")).await;
    browser.type_into("#vhost-name", "ui-vhost").await;
    browser.click("#add-vhost-submit").await;
    browser.wait_text("#vhosts", "ui-vhost").await;
    assert_eq!(api(&b, "GET", "/api/vhosts/ui-vhost", None).await.0, 200);
    browser.open(&format!("{url}/#/users")).await;
    browser.type_into("#user-name", "ui-user").await;
    browser.type_into("#user-password", "secret").await;
    browser.type_into("#user-tags", "management").await;
    browser.click("#add-user-submit").await;
    browser.wait_text("#users", "ui-user").await;
    let (status, user) = api(&b, "GET", "/api/users/ui-user", None).await;
    assert_eq!(status, 200);
    assert_eq!(user["tags"], serde_json::json!(["management"]));

    // An exchange and a queue in /, bound.
    browser.open(&format!("{url}/#/exchanges")).await;
    browser.type_into("#exchange-name", "ui-x").await;
    browser.choose("#exchange-type", "topic").await;
    browser.click("#add-exchange-submit").await;
    browser.wait_text("#exchange-details", "topic").await;
    let (status, x) = api(&b, "GET", "/api/exchanges/%2F/ui-x", None).await;
    assert_eq!((status, x["type"].as_str()), (200, Some("topic")));
    browser.open(&format!("{url}/#/queues")).await;
    browser.type_into("#queue-name", "ui-q").await;
    browser.click("#add-queue-submit").await;
    browser.wait_text("#queue-title", "ui-q").await;
    assert_eq!(api(&b, "GET", "/api/queues/%2F/ui-q", None).await.0, 200);
    browser.open(&format!("{url}/#/exchanges/%2F/ui-x")).await;
    browser.type_into("#bind-destination", "ui-q").await;
    browser.type_into("#bind-key", "orders.*").await;
    browser.click("#bind-submit").await;
    browser.wait_text("#exchange-bindings", "orders.*").await;
    let (_, bindings) = api(&b, "GET", "/api/queues/%2F/ui-q/bindings", None).await;
    assert!(
        bindings.as_array().is_some_and(|a| a
            .iter()
            .any(|x| x["source"] == "ui-x" && x["routing_key"] == "orders.*")),
        "{bindings}"
    );

    // Two messages published through the exchange's form, routed by the binding.
    for payload in ["first message", "second message"] {
        browser.type_into("#publish-key", "orders.new").await;
        browser.type_into("#publish-payload", payload).await;
        browser.click("#publish-submit").await;
        browser.wait_text("#notice-text", "published").await;
        browser.click("#error button").await;
    }
    wait_messages(&b, "ui-q", 2).await;
    shot(&browser, "exchange", "body").await;

    // Peek shows both, in order, and leaves them where they were.
    browser.open(&format!("{url}/#/queues/%2F/ui-q")).await;
    browser.wait_text("#queue-total", "2").await;
    browser.find("#queue-chart-queued canvas").await;
    shot(&browser, "queue", "body").await;
    browser.type_into("#get-count", "5").await;
    browser.click("#peek-submit").await;
    let shown = browser.wait_text("#messages-out", "second message").await;
    let (a, c) = (shown.find("first message"), shown.find("second message"));
    assert!(a.is_some() && a < c, "peek order: {shown}");
    assert_eq!(messages(&b, "ui-q").await, 2);
    let (_, head) = api(&b, "GET", "/api/queues/%2F/ui-q/peek?count=1", None).await;
    assert_eq!(head[0]["payload"], "first message");
    assert_eq!(head[0]["redelivered"], false, "a peek is not a delivery");
    shot(&browser, "peek", "#messages-out").await;

    // Get takes the first one (automatic ack).
    browser.type_into("#get-count", "1").await;
    browser.choose("#get-ackmode", "ack_requeue_false").await;
    browser.click("#get-submit").await;
    // A get's answer says how many are left, which a peek's does not.
    let got = browser.wait_text("#messages-out", "Left in queue").await;
    assert!(
        got.contains("first message") && !got.contains("second message"),
        "{got}"
    );
    wait_messages(&b, "ui-q", 1).await;

    // Move the rest to another queue (a shovel that deletes itself).
    api(&b, "PUT", "/api/queues/%2F/ui-moved", Some("{}")).await;
    browser.type_into("#move-destination", "ui-moved").await;
    browser.click("#move-submit").await;
    browser.wait_text("#notice-text", "Moving").await;
    wait_messages(&b, "ui-moved", 1).await;
    wait_messages(&b, "ui-q", 0).await;
    let (_, moved) = api(&b, "GET", "/api/queues/%2F/ui-moved/peek", None).await;
    assert_eq!(moved[0]["payload"], "second message");

    // Purge, then delete.
    let publish =
        r#"{"routing_key":"ui-q","payload":"third","payload_encoding":"string","properties":{}}"#;
    api(
        &b,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        Some(publish),
    )
    .await;
    wait_messages(&b, "ui-q", 1).await;
    browser.click_and_confirm("#purge").await;
    browser.wait_text("#notice-text", "purged").await;
    wait_messages(&b, "ui-q", 0).await;
    browser.click_and_confirm("#delete").await;
    browser.find("#queues").await;
    let start = std::time::Instant::now();
    while api(&b, "GET", "/api/queues/%2F/ui-q", None).await.0 != 404 {
        assert!(
            start.elapsed() < common::browser::UI_WAIT,
            "queue not deleted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    // A refused call shows the API's error.
    browser.type_into("#queue-name", "amq.reserved").await;
    browser.click("#add-queue-submit").await;
    browser.wait_text("#error-text", "amq.").await;
    assert_eq!(
        api(&b, "GET", "/api/queues/%2F/amq.reserved", None).await.0,
        404
    );
    browser.click("#error button").await;

    // The page follows the broker without a reload: a message published over AMQP shows up
    // on the queue page and the overview's totals at the next refresh.
    let (_conn, ch) = b.channel().await;
    ch.queue_declare("live".into(), Default::default(), Default::default())
        .await
        .expect("declare");
    browser.open(&format!("{url}/#/queues/%2F/live")).await;
    browser.wait_text("#queue-total", "0").await;
    ch.basic_publish(
        "".into(),
        "live".into(),
        Default::default(),
        b"x",
        Default::default(),
    )
    .await
    .expect("publish");
    browser.wait_text("#queue-total", "1").await;
    // A stream's page shows where its log stands, and offers no get or purge.
    let (status, _) = api(
        &b,
        "PUT",
        "/api/queues/%2F/ui-stream",
        Some(r#"{"durable":true,"arguments":{"x-queue-type":"stream"}}"#),
    )
    .await;
    assert_eq!(status, 201);
    browser.open(&format!("{url}/#/queues/%2F/ui-stream")).await;
    browser.wait_text("#stream-last", "empty").await;
    for _ in 0..3 {
        ch.basic_publish(
            "".into(),
            "ui-stream".into(),
            Default::default(),
            b"s",
            Default::default(),
        )
        .await
        .expect("publish");
    }
    browser.wait_text("#stream-last", "2").await;
    browser.wait_text("#stream-first", "0").await;
    assert!(browser
        .client
        .find(fantoccini::Locator::Css("#purge"))
        .await
        .is_err());
    browser.open(&format!("{url}/#/queues")).await;
    browser.wait_text("#queues", "live").await;
    shot(&browser, "queues", "body").await;
    browser.open(&format!("{url}/#/")).await;
    browser.wait_text("#totals", "Connections").await;
    if std::env::var_os("WARREN_UI_SCREENSHOTS").is_some() {
        // A few refreshes, so the screenshot's charts have lines.
        tokio::time::sleep(std::time::Duration::from_secs(16)).await;
    }
    shot(&browser, "overview", "body").await;
    // An administrator renames the cluster; the overview shows the new name.
    browser.type_into("#cluster-name-input", "ui-cluster").await;
    browser.click("#cluster-rename button").await;
    browser.wait_text("#notice-text", "ui-cluster").await;
    assert_eq!(
        api(&b, "GET", "/api/cluster-name", None).await.1["name"],
        "ui-cluster"
    );
    browser
        .wait_text("#cluster-name", "Cluster ui-cluster")
        .await;
    browser.open(&format!("{url}/#/connections")).await;
    browser.wait_text("#connections", "guest").await;
    shot(&browser, "connections", "body").await;

    // A channel's page lists its consumers.
    let _consumer = ch
        .basic_consume(
            "live".into(),
            "ui-consumer".into(),
            lapin::options::BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .expect("consume");
    browser.open(&format!("{url}/#/channels")).await;
    browser.click("#channels tbody a").await;
    browser.wait_text("#channel-consumers", "ui-consumer").await;
    browser.wait_text("#channel-details", "Prefetch").await;

    // Closing a connection from its page, with a reason the client receives.
    let conn2 = b.connect().await;
    let events = conn2.events_listener();
    browser.open(&format!("{url}/#/connections")).await;
    browser.wait_text("#list-summary", "2 of 2").await;
    let names = api(&b, "GET", "/api/connections", None).await.1;
    let newest = names
        .as_array()
        .and_then(|a| a.iter().max_by_key(|c| c["connected_at"].as_u64()))
        .and_then(|c| c["name"].as_str())
        .expect("a connection")
        .to_owned();
    browser
        .open(&format!("{url}/#/connections/{}", urlencode(&newest)))
        .await;
    browser.wait_text("#connection-details", "guest").await;
    // Every client property lapin sent, its capabilities table included.
    browser
        .wait_text("#connection-client", "publisher_confirms")
        .await;
    browser.wait_text("#connection-client", "lapin").await;
    browser
        .type_into("#close-reason", "closed from the UI test")
        .await;
    browser.click("#close-connection button").await;
    browser.find("#connections").await;
    assert_eq!(server_close_code(events).await, Some(320));

    // On a narrow screen, in the dark theme, nothing is wider than the window (tables scroll
    // inside their own box).
    browser
        .client
        .set_window_size(420, 860)
        .await
        .expect("resize");
    browser.click("#theme").await;
    for page in [
        "#/",
        "#/queues",
        "#/queues/%2F/live",
        "#/exchanges/%2F/ui-x",
    ] {
        browser.open(&format!("{url}/{page}")).await;
        browser.find("main h1").await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let fits = browser
            .eval("return document.documentElement.scrollWidth <= window.innerWidth")
            .await;
        assert_eq!(fits, true, "{page} is wider than a 420 px window");
    }
    assert_eq!(
        browser
            .eval("return document.documentElement.dataset.theme")
            .await,
        "dark"
    );
    shot(&browser, "exchange-narrow-dark", "body").await;

    // Bookmarkable URLs: the back button returns to the previous page.
    browser.open(&format!("{url}/#/exchanges")).await;
    browser.find("#exchanges").await;
    browser.open(&format!("{url}/#/connections")).await;
    browser.find("#connections").await;
    browser.client.back().await.expect("back");
    browser.find("#exchanges").await;
    let _ = browser.client.clone().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitoring_user_sees_no_buttons_that_would_fail() {
    let b = start().await;
    let url = base(&b);
    let (status, _) = api(
        &b,
        "PUT",
        "/api/users/watcher",
        Some(r#"{"password":"watch","tags":"monitoring"}"#),
    )
    .await;
    assert_eq!(status, 201);
    api(&b, "PUT", "/api/queues/%2F/watched", Some("{}")).await;
    // The API refuses what the buttons would do (no permissions in any vhost).
    let r = request(
        b.server.http_addr,
        "DELETE",
        "/api/queues/%2F/watched/contents",
        Some(("watcher", "watch")),
        None,
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("ACCESS_REFUSED"), "{}", r.body);

    let browser = Browser::start(1280, 800).await;
    browser.log_in(&url, "watcher", "watch").await;
    browser.wait_text("#session", "monitoring").await;
    browser.wait_text("#totals", "Connections").await;
    assert!(
        !browser.has("#cluster-rename").await,
        "rename offered to monitoring"
    );
    browser.open(&format!("{url}/#/queues")).await;
    browser.wait_text("#queues", "watched").await;
    assert!(!browser.has("#add-queue").await, "add-queue form shown");
    browser.open(&format!("{url}/#/queues/%2F/watched")).await;
    browser.wait_text("#queue-title", "watched").await;
    browser.find("#queue-details").await;
    for css in ["#purge", "#delete", "#get", "#publish", "#bind"] {
        assert!(!browser.has(css).await, "{css} shown to a monitoring user");
    }
    browser.open(&format!("{url}/#/exchanges")).await;
    browser.wait_text("#exchanges", "amq.direct").await;
    assert!(!browser.has("#add-exchange").await);
    let nav = browser.find("#nav").await.text().await.expect("nav");
    assert!(!nav.contains("Users") && !nav.contains("Policies"), "{nav}");
    // Logging out forgets the credentials.
    browser.click("#logout").await;
    browser.find("#login").await;
    browser.open(&format!("{url}/#/queues")).await;
    browser.find("#login").await;
    let _ = browser.client.clone().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_payloads_with_markup_render_as_text() {
    let b = start().await;
    let url = base(&b);
    let name = r#"<script>window.pwned=1</script><img src=x onerror="window.pwned=2">"#;
    let path = format!("/api/queues/%2F/{}", urlencode(name));
    assert_eq!(api(&b, "PUT", &path, Some("{}")).await.0, 201);
    let body = serde_json::json!({
        "routing_key": name,
        "payload": "<script>window.pwned=3</script><img src=x onerror=window.pwned=4>",
        "payload_encoding": "string",
        "properties": {"headers": {"h": "<img src=x onerror=window.pwned=5>"}},
    });
    let (status, routed) = api(
        &b,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        Some(&body.to_string()),
    )
    .await;
    assert_eq!((status, &routed["routed"]), (200, &Value::Bool(true)));

    let browser = Browser::start(1280, 800).await;
    browser.log_in(&url, "guest", "guest").await;
    browser.open(&format!("{url}/#/queues")).await;
    browser
        .wait_text("#queues", "<script>window.pwned=1</script>")
        .await;
    browser
        .open(&format!("{url}/#/queues/%2F/{}", urlencode(name)))
        .await;
    browser.wait_text("#queue-title", "<img src=x").await;
    browser.click("#peek-submit").await;
    browser
        .wait_text("#messages-out", "<script>window.pwned=3</script>")
        .await;
    browser
        .wait_text("#messages-out", "onerror=window.pwned=5")
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        browser.eval("return window.pwned === undefined").await,
        true
    );
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('main img, main script').length")
            .await,
        0
    );
    let _ = browser.client.clone().close().await;
}

#[tokio::test]
async fn the_ui_is_embedded_and_cannot_be_framed() {
    let b = start().await;
    let page = request(b.server.http_addr, "GET", "/", None, None).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/ui/js/app.js"), "{}", page.body);
    let headers = page.headers.to_lowercase();
    assert!(headers.contains("frame-ancestors 'none'"), "{headers}");
    assert!(headers.contains("x-frame-options: deny"), "{headers}");
    assert!(headers.contains("script-src 'self'"), "{headers}");
    assert!(!headers.contains("unsafe-inline"), "{headers}");
    let module = request(b.server.http_addr, "GET", "/ui/js/app.js", None, None).await;
    assert_eq!(module.status, 200);
    assert!(module.headers.to_lowercase().contains("text/javascript"));
    let chart = request(
        b.server.http_addr,
        "GET",
        "/ui/vendor/uPlot.iife.min.js",
        None,
        None,
    )
    .await;
    assert_eq!(chart.status, 200);
    assert!(chart.body.len() > 10_000);
    assert_eq!(
        request(b.server.http_addr, "GET", "/ui/../Cargo.toml", None, None)
            .await
            .status,
        404
    );
    // CORS is closed: a cross-origin request gets no Access-Control-Allow-Origin.
    let api = request(
        b.server.http_addr,
        "GET",
        "/api/overview",
        Some(("guest", "guest")),
        None,
    )
    .await;
    assert!(!api
        .headers
        .to_lowercase()
        .contains("access-control-allow-origin"));
}

/// Sends a request with an Origin header (and preflight headers for OPTIONS); returns the
/// status and the lower-cased response head.
async fn from_origin(b: &TestBroker, method: &str, origin: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(b.server.http_addr)
        .await
        .expect("connect");
    let req = format!(
        "{method} /api/overview HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Origin: {origin}\r\nAccess-Control-Request-Method: GET\r\n\
         Access-Control-Request-Headers: authorization\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nContent-Length: 0\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    within(sock.read_to_end(&mut raw)).await.expect("read");
    let text = String::from_utf8_lossy(&raw).to_lowercase();
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head)
}

#[tokio::test]
async fn cors_is_closed_unless_an_origin_is_allowed() {
    let closed = start().await;
    let (status, head) = from_origin(&closed, "GET", "https://evil.example").await;
    assert_eq!(status, 200);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    let (status, head) = from_origin(&closed, "OPTIONS", "https://evil.example").await;
    assert_ne!(status, 200, "{head}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");

    let open = start_with(|c| {
        c.management_cors_allow_origins = vec!["https://ops.example".into()];
        c.management_cors_max_age = 600;
    })
    .await;
    let (status, head) = from_origin(&open, "OPTIONS", "https://ops.example").await;
    assert_eq!(status, 200, "{head}");
    for wanted in [
        "access-control-allow-origin: https://ops.example",
        "access-control-allow-credentials: true",
        "access-control-max-age: 600",
        "access-control-allow-headers: authorization",
        "access-control-allow-methods: get",
        "content-security-policy:",
    ] {
        assert!(head.contains(wanted), "{wanted} missing: {head}");
    }
    let (status, head) = from_origin(&open, "GET", "https://ops.example").await;
    assert_eq!(status, 200);
    assert!(
        head.contains("access-control-allow-origin: https://ops.example"),
        "{head}"
    );
    for other in ["https://evil.example", "null"] {
        let (_, head) = from_origin(&open, "GET", other).await;
        assert!(!head.contains("access-control-allow-origin"), "{head}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_sets_limits_topic_permissions_and_policies() {
    let b = start().await;
    let url = base(&b);
    let browser = Browser::start(1280, 800).await;
    browser.log_in(&url, "guest", "guest").await;

    // Limits of a vhost and of a user.
    browser.open(&format!("{url}/#/limits")).await;
    browser.choose("#vhost-limit-name", "max-queues").await;
    browser.type_into("#vhost-limit-value", "7").await;
    browser.click("#set-vhost-limit-submit").await;
    browser.wait_text("#vhost-limits", "max-queues").await;
    let (_, limits) = api(&b, "GET", "/api/vhost-limits/%2F", None).await;
    assert_eq!(limits[0]["value"]["max-queues"], 7, "{limits}");
    browser.choose("#user-limit-name", "max-channels").await;
    browser.type_into("#user-limit-value", "3").await;
    browser.click("#set-user-limit-submit").await;
    browser.wait_text("#user-limits", "max-channels").await;
    let (_, limits) = api(&b, "GET", "/api/user-limits/guest", None).await;
    assert_eq!(limits[0]["value"]["max-channels"], 3, "{limits}");
    browser.click("#vhost-limits button").await;
    browser
        .wait_text("#vhost-limits", "No virtual host limits")
        .await;
    let (_, limits) = api(&b, "GET", "/api/vhost-limits/%2F", None).await;
    assert_eq!(limits, serde_json::json!([]));

    // A topic permission on the user's page.
    browser.open(&format!("{url}/#/users/guest")).await;
    browser
        .type_into("#topic-permission-write", "^orders\\.")
        .await;
    browser.click("#set-topic-permission-submit").await;
    browser
        .wait_text("#user-topic-permissions", "^orders\\.")
        .await;
    let (_, topics) = api(&b, "GET", "/api/topic-permissions/%2F/guest", None).await;
    assert_eq!(topics[0]["exchange"], "amq.topic", "{topics}");
    assert_eq!(topics[0]["write"], "^orders\\.", "{topics}");

    // A policy and an operator policy.
    browser.open(&format!("{url}/#/policies")).await;
    browser.type_into("#policy-name", "short").await;
    browser.type_into("#policy-pattern", "^tmp\\.").await;
    browser.click("#add-policy .helper").await;
    browser.type_into("#add-policy .arg-value", "1000").await;
    browser.click("#add-policy-submit").await;
    browser.wait_text("#policies", "short").await;
    let (status, policy) = api(&b, "GET", "/api/policies/%2F/short", None).await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(policy["definition"]["max-length"], 1000, "{policy}");
    browser.type_into("#operator-policy-name", "cap").await;
    browser.choose("#operator-policy-apply-to", "queues").await;
    browser.click("#add-operator-policy .helper").await;
    browser
        .type_into("#add-operator-policy .arg-value", "5000")
        .await;
    browser.click("#add-operator-policy-submit").await;
    browser.wait_text("#operator-policies", "cap").await;
    let (status, policy) = api(&b, "GET", "/api/operator-policies/%2F/cap", None).await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(policy["definition"]["max-length"], 5000, "{policy}");
    let _ = browser.client.clone().close().await;
}
