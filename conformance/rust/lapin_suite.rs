//! Scenarios with Rust's lapin against any broker (`--broker amqp://...`): connection and
//! channel lifecycle, every exchange type, queue options, acks and requeue ordering, prefetch,
//! confirms, returns, transactions, error replies by code, large and empty messages. Prints one
//! JSON line per scenario for conformance/run (`cargo run --example conformance-lapin`).

use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

type Outcome = Result<(), String>;
type Scenario = (
    &'static str,
    &'static [&'static str],
    fn(String) -> Pin<Box<dyn Future<Output = Outcome>>>,
);

fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn check(cond: bool, what: &str) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(what.to_owned())
    }
}

fn name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("conf-lapin-{prefix}-{nanos:x}")
}

fn code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

async fn open(url: &str) -> Result<(Connection, Channel), String> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(fail)?;
    let ch = conn.create_channel().await.map_err(fail)?;
    Ok((conn, ch))
}

async fn temp_queue(ch: &Channel) -> Result<String, String> {
    let q = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(fail)?;
    Ok(q.name().to_string())
}

async fn get(ch: &Channel, q: &str) -> Result<Option<Vec<u8>>, String> {
    let m = ch
        .basic_get(q.into(), BasicGetOptions { no_ack: true })
        .await
        .map_err(fail)?;
    Ok(m.map(|m| m.delivery.data.clone()))
}

async fn publish(ch: &Channel, x: &str, key: &str, body: &[u8], props: BasicProperties) -> Outcome {
    ch.basic_publish(x.into(), key.into(), Default::default(), body, props)
        .await
        .map_err(fail)?;
    Ok(())
}

fn connection_lifecycle(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        check(conn.status().connected(), "connected")?;
        let chans = futures_lite::future::block_on(async {
            let mut v = Vec::new();
            for _ in 0..5 {
                v.push(conn.create_channel().await);
            }
            v
        });
        for c in chans {
            c.map_err(fail)?
                .close(200, "bye".into())
                .await
                .map_err(fail)?;
        }
        ch.close(200, "bye".into()).await.map_err(fail)?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

fn exchange_types_route(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        let q = temp_queue(&ch).await?;
        let opts = ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        };
        let (d, t, h, f) = (
            name("direct"),
            name("topic"),
            name("headers"),
            name("fanout"),
        );
        for (x, kind) in [
            (&d, ExchangeKind::Direct),
            (&t, ExchangeKind::Topic),
            (&h, ExchangeKind::Headers),
            (&f, ExchangeKind::Fanout),
        ] {
            ch.exchange_declare(x.as_str().into(), kind, opts, FieldTable::default())
                .await
                .map_err(fail)?;
        }
        let mut match_all = FieldTable::default();
        match_all.insert("x-match".into(), AMQPValue::LongString("all".into()));
        match_all.insert("kind".into(), AMQPValue::LongString("invoice".into()));
        for (x, key, args) in [
            (&d, "red", FieldTable::default()),
            (&t, "*.eu.#", FieldTable::default()),
            (&h, "", match_all),
            (&f, "ignored", FieldTable::default()),
        ] {
            ch.queue_bind(
                q.as_str().into(),
                x.as_str().into(),
                key.into(),
                Default::default(),
                args,
            )
            .await
            .map_err(fail)?;
        }
        let mut headers = FieldTable::default();
        headers.insert("kind".into(), AMQPValue::LongString("invoice".into()));
        publish(&ch, &d, "red", b"d", BasicProperties::default()).await?;
        publish(&ch, &d, "blue", b"lost", BasicProperties::default()).await?;
        publish(&ch, &t, "order.eu", b"t", BasicProperties::default()).await?;
        publish(&ch, &t, "order.us", b"lost", BasicProperties::default()).await?;
        publish(
            &ch,
            &h,
            "",
            b"h",
            BasicProperties::default().with_headers(headers),
        )
        .await?;
        publish(&ch, &f, "any", b"f", BasicProperties::default()).await?;
        let mut got = Vec::new();
        while let Some(m) = get(&ch, &q).await? {
            got.push(String::from_utf8_lossy(&m).into_owned());
        }
        check(got == ["d", "t", "h", "f"], &format!("routed {got:?}"))?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

fn requeue_order_and_prefetch(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        let q = temp_queue(&ch).await?;
        for i in 1..=6u8 {
            publish(&ch, "", &q, &[b'0' + i], BasicProperties::default()).await?;
        }
        ch.basic_qos(2, Default::default()).await.map_err(fail)?;
        let mut c = ch
            .basic_consume(
                q.as_str().into(),
                "c".into(),
                Default::default(),
                FieldTable::default(),
            )
            .await
            .map_err(fail)?;
        let d1 = c.next().await.ok_or("delivery")?.map_err(fail)?;
        let d2 = c.next().await.ok_or("delivery")?.map_err(fail)?;
        let early = tokio::time::timeout(Duration::from_millis(300), c.next()).await;
        check(early.is_err(), "prefetch 2 holds the third back")?;
        check(d1.data == b"1" && d2.data == b"2", "in order")?;
        // Both back at once (multiple), so they keep their original places.
        d2.nack(BasicNackOptions {
            requeue: true,
            multiple: true,
        })
        .await
        .map_err(fail)?;
        let mut got = Vec::new();
        while got.len() < 6 {
            let d = c.next().await.ok_or("delivery")?.map_err(fail)?;
            got.push((d.data[0] - b'0', d.redelivered));
            if got.len() == 6 {
                d.reject(BasicRejectOptions { requeue: false })
                    .await
                    .map_err(fail)?;
            } else {
                d.ack(Default::default()).await.map_err(fail)?;
            }
        }
        let want: Vec<(u8, bool)> = (1..=6).map(|i| (i, i <= 2)).collect();
        check(got == want, &format!("order and flags {got:?}"))?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

fn confirms_returns_transactions(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        ch.confirm_select(Default::default()).await.map_err(fail)?;
        let q = temp_queue(&ch).await?;
        let c = ch
            .basic_publish(
                "".into(),
                q.as_str().into(),
                Default::default(),
                b"ok",
                BasicProperties::default(),
            )
            .await
            .map_err(fail)?;
        check(c.await.map_err(fail)?.is_ack(), "acked")?;
        let c = ch
            .basic_publish(
                "amq.direct".into(),
                name("nowhere").as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                b"lost",
                BasicProperties::default(),
            )
            .await
            .map_err(fail)?;
        let returned = c.await.map_err(fail)?.take_message().ok_or("returned")?;
        check(returned.reply_code == 312, "NO_ROUTE")?;
        let tx = conn.create_channel().await.map_err(fail)?;
        let tq = temp_queue(&tx).await?;
        tx.tx_select().await.map_err(fail)?;
        publish(&tx, "", &tq, b"no", BasicProperties::default()).await?;
        tx.tx_rollback().await.map_err(fail)?;
        publish(&tx, "", &tq, b"yes", BasicProperties::default()).await?;
        tx.tx_commit().await.map_err(fail)?;
        check(
            get(&tx, &tq).await? == Some(b"yes".to_vec()),
            "committed only",
        )?;
        check(get(&tx, &tq).await?.is_none(), "nothing else")?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

fn error_codes(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let r = ch
            .queue_declare(
                name("missing").as_str().into(),
                passive,
                FieldTable::default(),
            )
            .await;
        check(
            r.as_ref().err().and_then(code) == Some(404),
            "404 for a missing queue",
        )?;
        let ch = conn.create_channel().await.map_err(fail)?;
        let r = ch
            .queue_declare(
                "amq.reserved".into(),
                Default::default(),
                FieldTable::default(),
            )
            .await;
        check(r.as_ref().err().and_then(code) == Some(403), "403 for amq.")?;
        let ch = conn.create_channel().await.map_err(fail)?;
        // basic.ack has no reply: the broker's channel.close may reach lapin before or after the
        // next call, so the 406 is looked for on that call and on the connection's error events.
        let mut events = Box::pin(conn.events_listener());
        let r = ch.basic_ack(42, Default::default()).await;
        let after = ch
            .queue_declare("".into(), passive, FieldTable::default())
            .await;
        let closed_406 = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(event) = events.next().await {
                if let lapin::Event::Error(e) = event {
                    if code(&e) == Some(406) {
                        return true;
                    }
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        check(
            r.as_ref().err().and_then(code) == Some(406)
                || after.as_ref().err().and_then(code) == Some(406)
                || closed_406,
            "406 for an unknown delivery tag",
        )?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

fn large_and_empty_messages(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        let q = temp_queue(&ch).await?;
        let big: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
        ch.confirm_select(Default::default()).await.map_err(fail)?;
        for body in [&b""[..], &big] {
            ch.basic_publish(
                "".into(),
                q.as_str().into(),
                Default::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .map_err(fail)?
            .await
            .map_err(fail)?;
        }
        check(get(&ch, &q).await? == Some(Vec::new()), "empty")?;
        check(get(&ch, &q).await? == Some(big), "3 MiB")?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

/// One management API request with the broker URI's credentials: (status, body).
async fn api(http: &str, broker: &str, method: &str, path: &str) -> Result<(u16, String), String> {
    use base64::Engine;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = http.trim_start_matches("http://").trim_end_matches('/');
    let creds = broker
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split_once('@'))
        .map_or("guest:guest", |(c, _)| c);
    let token = base64::engine::general_purpose::STANDARD.encode(creds);
    let mut sock = tokio::net::TcpStream::connect(host).await.map_err(fail)?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {token}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.map_err(fail)?;
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).await.map_err(fail)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Chunked bodies (RabbitMQ's) carry size lines; the JSON starts at the first bracket.
    let start = body.find(['[', '{']).unwrap_or(0);
    let end = body.rfind([']', '}']).map_or(body.len(), |e| e + 1);
    Ok((status, body[start..end.max(start)].to_owned()))
}

fn reconnect_after_a_server_close(args: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (url, http) = args.split_once(' ').ok_or("broker and http")?;
        let tag = name("closeme");
        let props = ConnectionProperties::default().with_connection_name(tag.as_str().into());
        let conn = Connection::connect(url, props).await.map_err(fail)?;
        let mut events = Box::pin(conn.events_listener());
        let mut target = None;
        for _ in 0..50 {
            let (_, body) = api(http, url, "GET", "/api/connections").await?;
            let list: serde_json::Value = serde_json::from_str(&body).map_err(fail)?;
            target = list.as_array().into_iter().flatten().find_map(|c| {
                (c["client_properties"]["connection_name"] == tag.as_str())
                    .then(|| c["name"].as_str().map(str::to_owned))
                    .flatten()
            });
            if target.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let target = target.ok_or("listed")?;
        let path: String = target
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, _) = api(http, url, "DELETE", &format!("/api/connections/{path}")).await?;
        check(status == 204, &format!("closed over HTTP: {status}"))?;
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(e) = events.next().await {
                if let lapin::Event::Error(e) = e {
                    return code(&e);
                }
            }
            None
        })
        .await
        .map_err(fail)?;
        check(
            closed == Some(320),
            &format!("CONNECTION_FORCED, got {closed:?}"),
        )?;
        let (again, ch) = open(url).await?;
        temp_queue(&ch).await?;
        again.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

fn ttl_dead_lettering_priorities(url: String) -> Pin<Box<dyn Future<Output = Outcome>>> {
    Box::pin(async move {
        let (conn, ch) = open(&url).await?;
        let dlq = temp_queue(&ch).await?;
        let mut args = FieldTable::default();
        args.insert("x-message-ttl".into(), AMQPValue::LongInt(100));
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString("".into()),
        );
        args.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(dlq.as_str().into()),
        );
        let opts = QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        };
        let q = ch
            .queue_declare("".into(), opts, args)
            .await
            .map_err(fail)?;
        let q = q.name().to_string();
        publish(&ch, "", &q, b"expires", BasicProperties::default()).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let dead = ch
            .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .map_err(fail)?
            .ok_or("a dead letter")?;
        let headers = dead
            .delivery
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        check(headers.inner().contains_key("x-death"), "x-death header")?;
        let mut prio = FieldTable::default();
        prio.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(5));
        let p = ch
            .queue_declare("".into(), opts, prio)
            .await
            .map_err(fail)?;
        let p = p.name().to_string();
        for (body, level) in [(&b"low"[..], 1u8), (b"high", 5), (b"mid", 3)] {
            let props = BasicProperties::default().with_priority(level);
            publish(&ch, "", &p, body, props).await?;
        }
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(get(&ch, &p).await?.ok_or("a message")?);
        }
        check(
            got == [b"high".to_vec(), b"mid".to_vec(), b"low".to_vec()],
            "priority order",
        )?;
        conn.close(200, "bye".into()).await.map_err(fail)?;
        Ok(())
    })
}

const SCENARIOS: &[Scenario] = &[
    (
        "connection_lifecycle",
        &[
            "connection.start",
            "connection.tune",
            "connection.open",
            "connection.close",
            "channel.open",
            "channel.close",
        ],
        connection_lifecycle,
    ),
    (
        "exchange_types_route",
        &[
            "exchange.declare",
            "queue.bind",
            "basic.publish",
            "basic.get",
            "basic.get-ok",
            "basic.get-empty",
        ],
        exchange_types_route,
    ),
    (
        "requeue_order_and_prefetch",
        &[
            "basic.qos",
            "basic.consume",
            "basic.deliver",
            "basic.ack",
            "basic.nack",
            "basic.reject",
        ],
        requeue_order_and_prefetch,
    ),
    (
        "confirms_returns_transactions",
        &[
            "confirm.select",
            "basic.return",
            "tx.select",
            "tx.commit",
            "tx.rollback",
            "ext:publisher-confirms",
        ],
        confirms_returns_transactions,
    ),
    (
        "error_codes",
        &["channel.close", "queue.declare", "basic.ack"],
        error_codes,
    ),
    (
        "large_and_empty_messages",
        &["basic.publish", "basic.get-ok"],
        large_and_empty_messages,
    ),
    (
        "reconnect_after_a_server_close",
        &["connection.close", "ext:management-close"],
        reconnect_after_a_server_close,
    ),
    (
        "ttl_dead_lettering_priorities",
        &[
            "ext:x-message-ttl",
            "ext:dead-lettering",
            "ext:x-death",
            "ext:x-max-priority",
        ],
        ttl_dead_lettering_priorities,
    ),
];

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |key: &str, default: &str| {
        args.windows(2)
            .find(|w| w[0] == key)
            .map_or_else(|| default.to_owned(), |w| w[1].clone())
    };
    let broker = arg("--broker", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let http = arg("--http", "http://127.0.0.1:15672");
    for (scenario, covers, run) in SCENARIOS {
        let t0 = Instant::now();
        // The reconnect scenario needs the management API too.
        let input = if *scenario == "reconnect_after_a_server_close" {
            format!("{broker} {http}")
        } else {
            broker.clone()
        };
        let outcome = match tokio::time::timeout(Duration::from_secs(60), run(input)).await {
            Ok(r) => r,
            Err(_) => Err("timed out".into()),
        };
        let line = serde_json::json!({
            "suite": "lapin",
            "scenario": scenario,
            "status": if outcome.is_ok() { "passed" } else { "failed" },
            "covers": covers,
            "target": null,
            "differs": null,
            "error": outcome.err(),
            "seconds": t0.elapsed().as_secs_f64(),
        });
        println!("{line}");
    }
}
