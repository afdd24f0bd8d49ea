//! Connection lifecycle: protocol header, start properties, authentication, vhosts, tune,
//! heartbeats, channel limits, close handshakes and broker shutdown.

mod common;

use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{channel, connection, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable};
use common::raw::{method, Raw};
use common::*;
use lapin::{Connection, ConnectionProperties};
use std::time::Duration;

#[tokio::test]
async fn wrong_protocol_header_gets_amqp_0091_back_and_a_close() {
    let b = start().await;
    for header in [
        &b"HTTP/1.1"[..],
        b"AMQP\x00\x00\x09\x02",
        b"AMQP\x00\x00\x08\x00",
    ] {
        let mut r = Raw::connect(b.server.amqp_addr).await;
        r.send(header).await;
        assert_eq!(
            r.read_exact_bytes(8).await.as_deref(),
            Some(&b"AMQP\x00\x00\x09\x01"[..])
        );
        assert!(r.closed_by_peer().await);
    }
}

#[tokio::test]
async fn older_headers_are_accepted_as_rabbitmq_does() {
    let b = start().await;
    for (header, version) in [
        (b"AMQP\x01\x01\x00\x09", (0, 9)),
        (b"AMQP\x01\x01\x08\x00", (8, 0)),
        (b"AMQP\x01\x01\x09\x01", (8, 0)),
    ] {
        let mut r = Raw::connect(b.server.amqp_addr).await;
        r.send(header).await;
        match r.frame().await {
            Some(AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Start(s)))) => {
                assert_eq!((s.version_major, s.version_minor), version)
            }
            other => panic!("expected connection.start, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn start_announces_product_capabilities_and_mechanisms() {
    let b = start().await;
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(b"AMQP\x00\x00\x09\x01").await;
    let start = match r.frame().await {
        Some(AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Start(s)))) => s,
        other => panic!("expected connection.start, got {other:?}"),
    };
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    assert_eq!(start.mechanisms.to_string(), "PLAIN AMQPLAIN");
    assert_eq!(start.locales.to_string(), "en_US");
    let props = start.server_properties.inner();
    assert_eq!(
        props.get("product"),
        Some(&AMQPValue::LongString("Warren".into()))
    );
    assert_eq!(
        props.get("version"),
        Some(&AMQPValue::LongString(env!("CARGO_PKG_VERSION").into()))
    );
    for key in ["platform", "copyright", "information", "cluster_name"] {
        assert!(props.contains_key(key), "missing {key}");
    }
    let Some(AMQPValue::FieldTable(caps)) = props.get("capabilities") else {
        panic!("no capabilities table");
    };
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        assert_eq!(
            caps.inner().get(cap),
            Some(&AMQPValue::Boolean(true)),
            "{cap}"
        );
    }
}

#[tokio::test]
async fn wrong_password_is_refused_with_403() {
    let b = start().await;
    let url = format!("amqp://guest:nope@{}/%2f", b.server.amqp_addr);
    let r = within(Connection::connect(&url, ConnectionProperties::default())).await;
    assert_code(r.map(|_| ()), 403);
}

#[tokio::test]
async fn failed_login_delay_holds_the_refusal_back() {
    let b = start_with(|c| c.failed_login_delay = 400).await;
    let url = format!("amqp://guest:nope@{}/%2f", b.server.amqp_addr);
    let began = std::time::Instant::now();
    let r = within(Connection::connect(&url, ConnectionProperties::default())).await;
    assert_code(r.map(|_| ()), 403);
    assert!(
        began.elapsed() >= Duration::from_millis(400),
        "refused after {:?}",
        began.elapsed()
    );
    b.connect().await;
}

#[tokio::test]
async fn raw_login_failure_without_capability_just_closes() {
    let b = start().await;
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(b"AMQP\x00\x00\x09\x01").await;
    r.frame().await;
    r.send(&method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "PLAIN".into(),
            response: "\0guest\0wrong".into(),
            locale: "en_US".into(),
        })),
    ))
    .await;
    assert!(r.frame().await.is_none(), "expected a plain socket close");
}

#[tokio::test]
async fn amqplain_login_works() {
    let b = start().await;
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(b"AMQP\x00\x00\x09\x01").await;
    r.frame().await;
    let mut t = FieldTable::default();
    t.insert("LOGIN".into(), AMQPValue::LongString("guest".into()));
    t.insert("PASSWORD".into(), AMQPValue::LongString("guest".into()));
    let table = cookie_factory::gen_simple(
        amq_protocol::types::generation::gen_field_table(&t),
        Vec::new(),
    )
    .expect("gen");
    r.send(&method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: FieldTable::default(),
            mechanism: "AMQPLAIN".into(),
            response: table[4..].to_vec().into(),
            locale: "en_US".into(),
        })),
    ))
    .await;
    match r.frame().await {
        Some(AMQPFrame::Method(0, AMQPClass::Connection(connection::AMQPMethod::Tune(t)))) => {
            assert_eq!(t.channel_max, 2047);
            assert_eq!(t.frame_max, 131_072);
            assert_eq!(t.heartbeat, 60);
        }
        other => panic!("expected tune, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_vhost_is_530() {
    let b = start().await;
    let url = format!("amqp://guest:guest@{}/nope", b.server.amqp_addr);
    let r = within(Connection::connect(&url, ConnectionProperties::default())).await;
    assert_code(r.map(|_| ()), 530);
}

#[tokio::test]
async fn tune_values_are_negotiated() {
    let b = start().await;
    let url = format!(
        "amqp://guest:guest@{}/%2f?heartbeat=5&channel_max=10&frame_max=8192",
        b.server.amqp_addr
    );
    let c = within(Connection::connect(&url, ConnectionProperties::default()))
        .await
        .expect("connect");
    assert_eq!(c.configuration().heartbeat(), 5);
    assert_eq!(c.configuration().channel_max(), 10);
    assert_eq!(c.configuration().frame_max(), 8192);
}

#[tokio::test]
async fn a_channel_beyond_channel_max_open_channels_is_530() {
    let b = start_with(|c| c.channel_max = 3).await;
    // Raw::open opened channel 1.
    let mut r = Raw::open(b.server.amqp_addr).await;
    for ch in [2, 3, 4] {
        r.send(&method(
            ch,
            AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
        ))
        .await;
    }
    assert_eq!(r.connection_close_code().await, Some(530));
}

#[tokio::test]
async fn heartbeats_are_sent_and_a_silent_peer_is_dropped() {
    let b = start_with(|c| c.heartbeat = 1).await;
    let mut r = Raw::handshake(b.server.amqp_addr, 1).await;
    // The broker sends heartbeat frames while idle...
    let hb = r.read_exact_bytes(8).await.expect("heartbeat");
    assert_eq!(hb, [8, 0, 0, 0, 0, 0, 0, 0xCE]);
    // ...and drops a peer that sends nothing for more than two intervals.
    let started = std::time::Instant::now();
    assert!(r.closed_by_peer().await);
    assert!(started.elapsed() < Duration::from_secs(6));
}

#[tokio::test]
async fn client_close_gets_close_ok() {
    let b = start().await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    r.send(&method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    ))
    .await;
    assert!(matches!(
        r.frame().await,
        Some(AMQPFrame::Method(
            0,
            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))
        ))
    ));
    assert!(r.closed_by_peer().await);
}

#[tokio::test]
async fn update_secret_is_answered() {
    let b = start().await;
    let c = b.connect().await;
    within(c.update_secret("guest".into(), "refresh".into()))
        .await
        .expect("update-secret-ok");
    within(c.create_channel()).await.expect("still usable");
}

#[tokio::test]
async fn channel_flow_false_is_540_and_true_is_ok() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let active = within(ch.channel_flow(lapin::options::ChannelFlowOptions { active: true }))
        .await
        .expect("flow-ok");
    assert!(active);
    let r = within(ch.channel_flow(lapin::options::ChannelFlowOptions { active: false })).await;
    assert_code(r, 540);
}

#[tokio::test]
async fn channel_close_and_reopen_same_number() {
    let b = start().await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    r.send(&method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Close(channel::Close {
            reply_code: 200,
            reply_text: "".into(),
            class_id: 0,
            method_id: 0,
        })),
    ))
    .await;
    assert!(matches!(
        r.frame().await,
        Some(AMQPFrame::Method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))
        ))
    ));
    r.send(&method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    ))
    .await;
    assert!(matches!(
        r.frame().await,
        Some(AMQPFrame::Method(
            1,
            AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))
        ))
    ));
    // A second open of an open channel is a 504 channel error on the connection.
    r.send(&method(
        1,
        AMQPClass::Channel(channel::AMQPMethod::Open(channel::Open {})),
    ))
    .await;
    assert_eq!(r.connection_close_code().await, Some(504));
}

#[tokio::test]
async fn shutdown_closes_clients_with_320() {
    let b = start().await;
    let mut r = Raw::open(b.server.amqp_addr).await;
    let TestBroker { server, dir: _dir } = b;
    let stop = tokio::spawn(server.shutdown());
    assert_eq!(r.connection_close_code().await, Some(320));
    r.send(&method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
    ))
    .await;
    within(stop).await.expect("shutdown finishes");
}

#[tokio::test]
async fn the_binary_starts_and_stops_on_sigterm_closing_clients_with_320() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
        l.local_addr().expect("addr").port()
    };
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--http-listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .arg("--amqp-listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--config")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/warren.toml"))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn warren");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let mut raw = None;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            raw = Some(Raw::open(addr).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut r = raw.expect("broker came up");
    let pid = child.id().expect("pid");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    assert_eq!(r.connection_close_code().await, Some(320));
    let status = within(child.wait()).await.expect("exit status");
    assert!(status.success(), "exit status {status}");
}

#[tokio::test]
async fn frames_pipelined_behind_connection_open_are_served() {
    // Found by the connection fuzz target: a client that writes its whole opening, and a
    // channel.open, in one go must not wait for more bytes before channel.open-ok.
    use common::raw::{raw_method, short_str};
    let b = start().await;
    let mut bytes = b"AMQP\x00\x00\x09\x01".to_vec();
    let mut start_ok = vec![0, 0, 0, 0];
    start_ok.extend(short_str(b"PLAIN"));
    start_ok.extend_from_slice(&12u32.to_be_bytes());
    start_ok.extend_from_slice(b"\0guest\0guest");
    start_ok.extend(short_str(b"en_US"));
    bytes.extend(raw_method(0, 10, 11, &start_ok));
    let mut tune_ok = 2047u16.to_be_bytes().to_vec();
    tune_ok.extend_from_slice(&131_072u32.to_be_bytes());
    tune_ok.extend_from_slice(&0u16.to_be_bytes());
    bytes.extend(raw_method(0, 10, 31, &tune_ok));
    let mut open = short_str(b"/");
    open.extend(short_str(b""));
    open.push(0);
    bytes.extend(raw_method(0, 10, 40, &open));
    bytes.extend(raw_method(1, 20, 10, &short_str(b"")));
    let mut r = Raw::connect(b.server.amqp_addr).await;
    r.send(&bytes).await;
    loop {
        match r.frame().await {
            Some(AMQPFrame::Method(1, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_)))) => break,
            Some(_) => continue,
            None => panic!("closed before channel.open-ok"),
        }
    }
}

#[tokio::test]
async fn the_binary_honours_rabbitmq_default_user_pass_and_vhost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("probe port");
        l.local_addr().expect("addr").port()
    };
    let _child = tokio::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--http-listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .arg("--amqp-listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.path())
        .env("RABBITMQ_DEFAULT_USER", "admin")
        .env("RABBITMQ_DEFAULT_PASS", "s3cret")
        .env("RABBITMQ_DEFAULT_VHOST", "apps")
        .kill_on_drop(true)
        .spawn()
        .expect("spawn warren");
    let url = format!("amqp://admin:s3cret@127.0.0.1:{port}/apps");
    let mut conn = None;
    for _ in 0..100 {
        if let Ok(c) = Connection::connect(&url, ConnectionProperties::default()).await {
            conn = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let conn = conn.expect("admin logs in to apps");
    within(conn.create_channel()).await.expect("channel");
    let guest = format!("amqp://guest:guest@127.0.0.1:{port}/apps");
    assert!(Connection::connect(&guest, ConnectionProperties::default())
        .await
        .is_err());
}
