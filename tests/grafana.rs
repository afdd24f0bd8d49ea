//! RabbitMQ's own Grafana dashboard renders fully against Warren (issue #16, item 9): every
//! series its queries use is exported by `/metrics` with RabbitMQ's type, every label its
//! selectors and `group_left` joins use is on that series, and the literal label values it
//! selects (the message size histogram's `le` buckets) exist. The dashboard JSON is committed
//! unchanged as a fixture (`tests/fixtures/grafana/`).

mod common;

use common::http::request;
use common::start;
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};

/// Every PromQL query in a dashboard (targets, templating).
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query" | "definition", serde_json::Value::String(s)) => {
                        out.push(s.clone())
                    }
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

/// Labels Prometheus or Kubernetes add at scrape time, not the exporter.
const SCRAPE_LABELS: [&str; 3] = ["instance", "job", "namespace"];

/// What a dashboard needs of the exporter: series names, labels per series, literal values.
#[derive(Default, Debug)]
struct Needs {
    series: BTreeSet<String>,
    labels: BTreeMap<String, BTreeSet<String>>,
    values: BTreeSet<(String, String, String)>,
}

fn needs(queries: &[String]) -> Needs {
    let name = Regex::new(r"\brabbitmq_[a-z0-9_]+").expect("re");
    let selector = Regex::new(r"(rabbitmq_[a-z0-9_]+)\s*\{([^}]*)\}").expect("re");
    let matcher = Regex::new(r#"(\w+)\s*(=~|!=|!~|=)\s*"([^"]*)""#).expect("re");
    let lists =
        Regex::new(r"\b(?:by|on|without|group_left|group_right)\s*\(([^)]*)\)").expect("re");
    let joined = Regex::new(r"group_left\s*\(([^)]*)\)\s*(rabbitmq_[a-z0-9_]+)").expect("re");
    let label_values =
        Regex::new(r"label_values\(\s*(rabbitmq_[a-z0-9_]+)[^,]*,\s*(\w+)\s*\)").expect("re");
    let mut n = Needs::default();
    let mut label_names = BTreeSet::new();
    for q in queries {
        for l in lists.captures_iter(q) {
            label_names.extend(l[1].split(',').map(|s| s.trim().to_owned()));
        }
        for s in selector.captures_iter(q) {
            for m in matcher.captures_iter(&s[2]) {
                label_names.insert(m[1].to_owned());
                n.labels
                    .entry(s[1].to_owned())
                    .or_default()
                    .insert(m[1].to_owned());
                if &m[2] == "=" && !m[3].contains('$') {
                    n.values
                        .insert((s[1].to_owned(), m[1].to_owned(), m[3].to_owned()));
                }
            }
        }
        for j in joined.captures_iter(q) {
            let set = n.labels.entry(j[2].to_owned()).or_default();
            set.extend(j[1].split(',').map(|s| s.trim().to_owned()));
        }
        for lv in label_values.captures_iter(q) {
            label_names.insert(lv[2].to_owned());
            n.labels
                .entry(lv[1].to_owned())
                .or_default()
                .insert(lv[2].to_owned());
        }
        for m in name.find_iter(q) {
            n.series.insert(m.as_str().to_owned());
        }
    }
    n.series.retain(|s| !label_names.contains(s));
    for set in n.labels.values_mut() {
        set.retain(|l| !SCRAPE_LABELS.contains(&l.as_str()) && !l.is_empty());
    }
    n
}

/// RabbitMQ's type of a series: counters end in `_total`, histogram parts in `_bucket`,
/// `_sum`, `_count`, the info series are untyped, the rest gauges.
fn expected_type(series: &str) -> (&str, &'static str) {
    for part in ["_bucket", "_sum", "_count"] {
        if let Some(base) = series.strip_suffix(part) {
            return (base, "histogram");
        }
    }
    match series {
        "rabbitmq_identity_info" | "rabbitmq_build_info" => (series, "untyped"),
        s if s.ends_with("_total") => (s, "counter"),
        s => (s, "gauge"),
    }
}

#[tokio::test]
async fn rabbitmqs_overview_dashboard_finds_every_series_and_label() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/grafana/RabbitMQ-Overview.json"
    ))
    .expect("fixture");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut qs = Vec::new();
    queries(&dashboard, &mut qs);
    let needs = needs(&qs);
    assert!(
        needs.series.len() > 30,
        "the extraction found the queries: {needs:?}"
    );

    let b = start().await;
    let (_c, ch) = b.channel().await;
    ch.queue_declare("g".into(), Default::default(), FieldTable::default())
        .await
        .expect("queue");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    for size in [10usize, 5_000, 200_000] {
        ch.basic_publish(
            "".into(),
            "g".into(),
            BasicPublishOptions::default(),
            &vec![b'x'; size],
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    }
    ch.basic_get("g".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get");
    let body = request(b.server.metrics_addr, "GET", "/metrics", None, None)
        .await
        .body;

    let mut types = BTreeMap::new();
    let mut samples: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(n), Some(t)) = (it.next(), it.next()) {
                types.insert(n.to_owned(), t.to_owned());
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = match line[name_end..].strip_prefix('{') {
                Some(r) => r.split('}').next().unwrap_or("").to_owned(),
                None => String::new(),
            };
            samples
                .entry(line[..name_end].to_owned())
                .or_default()
                .push(labels);
        }
    }
    let mut missing = Vec::new();
    for s in &needs.series {
        let (family, kind) = expected_type(s);
        match types.get(family) {
            Some(t) if t == kind => {}
            Some(t) => missing.push(format!("{s}: type {t}, RabbitMQ's is {kind}")),
            None => missing.push(format!("{s}: not exported")),
        }
        if !samples.contains_key(s.as_str()) {
            missing.push(format!("{s}: no sample"));
        }
    }
    for (series, labels) in &needs.labels {
        let Some(lines) = samples.get(series) else {
            continue;
        };
        for l in labels {
            if !lines.iter().any(|ls| ls.contains(&format!("{l}=\""))) {
                missing.push(format!("{series}: no label {l}"));
            }
        }
    }
    for (series, l, v) in &needs.values {
        let found = samples
            .get(series)
            .is_some_and(|lines| lines.iter().any(|ls| ls.contains(&format!("{l}=\"{v}\""))));
        if !found {
            missing.push(format!("{series}: no sample with {l}=\"{v}\""));
        }
    }
    assert!(missing.is_empty(), "the dashboard would miss: {missing:#?}");

    // Meaning, not just presence: the three published bodies are in the size histogram.
    let bucket = |le: &str| -> u64 {
        body.lines()
            .find(|l| {
                l.starts_with("rabbitmq_message_size_bytes_bucket")
                    && l.contains(&format!("le=\"{le}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX)
    };
    assert_eq!(
        (
            bucket("100.0"),
            bucket("10000.0"),
            bucket("1e+06"),
            bucket("+Inf")
        ),
        (1, 2, 3, 3)
    );
    assert!(body.contains("rabbitmq_message_size_bytes_sum{protocol=\"amqp091\"} 205010"));
    assert!(
        body.contains("rabbitmq_global_messages_received_confirm_total{protocol=\"amqp091\"} 3")
    );
    assert!(body.contains("rabbitmq_global_publishers{protocol=\"amqp091\"} 1"));
    assert!(body.contains("rabbitmq_endpoint=\"aggregated\""));
}
