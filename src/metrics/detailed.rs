//! `/metrics/detailed?family=...&vhost=...`: RabbitMQ's `rabbitmq_detailed_*` families, only
//! those asked for, optionally restricted to some vhosts. Families Warren does not keep are
//! left out, as the plugin leaves out unknown ones.

use super::{
    channel_series, churn, family, label, queue_gauges, queue_sample, Family, QUEUE_FAMILIES,
};
use crate::broker::Broker;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write;
use std::sync::Arc;

const PREFIX: &str = "rabbitmq_detailed_";

/// Queue series labelled `vhost` and `queue`.
fn queue_series(out: &mut String, queues: &[super::QueueGauges], families: &[Family]) {
    for (name, help, value) in families {
        let name = name.replacen("rabbitmq_", PREFIX, 1);
        family(out, &name, "gauge", help);
        for q in queues {
            queue_sample(out, &name, &q.vhost, &q.name, value(q));
        }
    }
}

pub(super) async fn detailed(
    State(b): State<Arc<Broker>>,
    Query(params): Query<Vec<(String, String)>>,
) -> impl IntoResponse {
    let wanted: Vec<&str> = params
        .iter()
        .filter(|(k, _)| k == "family")
        .map(|(_, v)| v.as_str())
        .collect();
    let vhosts: Vec<&str> = params
        .iter()
        .filter(|(k, _)| k == "vhost")
        .map(|(_, v)| v.as_str())
        .collect();
    let in_scope = |v: &str| vhosts.is_empty() || vhosts.contains(&v);
    let mut out = String::new();
    let mut queues = Vec::new();
    if wanted.iter().any(|f| {
        matches!(
            *f,
            "queue_coarse_metrics" | "queue_consumer_count" | "queue_metrics"
        )
    }) {
        queues = queue_gauges(&b).await;
        queues.retain(|q| in_scope(&q.vhost));
    }
    for f in &wanted {
        match *f {
            "queue_coarse_metrics" => queue_series(&mut out, &queues, &QUEUE_FAMILIES[..3]),
            "queue_metrics" => queue_series(&mut out, &queues, &QUEUE_FAMILIES[3..]),
            "queue_consumer_count" => {
                let consumers: Family = ("rabbitmq_queue_consumers", "Consumers on a queue", |q| {
                    q.consumers
                });
                queue_series(&mut out, &queues, &[consumers])
            }
            "channel_metrics" => channel_series(&b, &mut out, PREFIX, |c| in_scope(&c.vhost)),
            "connection_churn_metrics" => {
                for (name, help, value) in churn(&b) {
                    let name = format!("{PREFIX}{name}");
                    family(&mut out, &name, "counter", help);
                    let _ = writeln!(out, "{name} {value}");
                }
            }
            "vhost_status" => {
                let name = format!("{PREFIX}vhost_status");
                family(&mut out, &name, "gauge", "Whether a given vhost is running");
                let mut vs = b.vhosts();
                vs.sort_by(|a, b| a.name.cmp(&b.name));
                for v in vs.iter().filter(|v| in_scope(&v.name)) {
                    let _ = writeln!(out, "{name}{{vhost=\"{}\"}} 1", label(&v.name));
                }
            }
            "exchange_names" => {
                let name = format!("{PREFIX}exchange_name");
                family(&mut out, &name, "gauge", "Enumerates exchanges without any additional info. This value is cluster-wide. A cheaper alternative to `exchange_bindings`");
                let mut vs = b.vhosts();
                vs.sort_by(|a, b| a.name.cmp(&b.name));
                for v in vs.iter().filter(|v| in_scope(&v.name)) {
                    let mut xs = v.exchanges();
                    xs.sort_by(|a, b| a.name.cmp(&b.name));
                    for x in xs {
                        let _ = writeln!(
                            out,
                            "{name}{{vhost=\"{}\",exchange=\"{}\",type=\"{}\"}} 1",
                            label(&v.name),
                            label(&x.name),
                            x.type_name()
                        );
                    }
                }
            }
            _ => {}
        }
    }
    super::identity(&b, &mut out, "detailed");
    ([(header::CONTENT_TYPE, super::CONTENT_TYPE)], out)
}
