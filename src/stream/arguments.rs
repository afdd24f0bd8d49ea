//! The arguments of a stream protocol `create`, as RabbitMQ's stream plugin reads them: string
//! pairs named like the queue arguments without their `x-` prefix, numbers written as text.

use amq_protocol::types::{AMQPValue, FieldTable, ShortString};

/// Arguments whose value is a number.
const NUMBERS: [&str; 4] = [
    "max-length-bytes",
    "stream-max-segment-size-bytes",
    "initial-cluster-size",
    "stream-filter-size-bytes",
];

/// Arguments whose value is text.
const TEXTS: [&str; 2] = ["max-age", "queue-leader-locator"];

/// The queue arguments of a stream created with `arguments` (`x-queue-type: stream` and
/// each known argument with its `x-` prefix); None when a number is not one. Unknown
/// arguments are left out, as RabbitMQ does.
pub fn table(arguments: &[(String, String)]) -> Option<FieldTable> {
    let mut t = FieldTable::default();
    t.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString("stream".into()),
    );
    for (k, v) in arguments {
        // Only known (short) names become short strings: a client's name may be any length.
        let name = || crate::shortstr::short(&format!("x-{k}"));
        if NUMBERS.contains(&k.as_str()) {
            t.insert(name(), AMQPValue::LongLongInt(v.trim().parse().ok()?));
        } else if TEXTS.contains(&k.as_str()) {
            t.insert(name(), AMQPValue::LongString(v.as_str().into()));
        }
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_of_any_length_is_left_out() {
        let long = "k".repeat(300);
        let t = table(&[(long, "1".into())]).expect("a table");
        assert_eq!(t.inner().len(), 1, "only x-queue-type");
    }

    #[test]
    fn numbers_and_texts_become_queue_arguments() {
        let args = [
            ("max-length-bytes".to_owned(), "20000".to_owned()),
            ("max-age".to_owned(), "1h".to_owned()),
            ("something-else".to_owned(), "x".to_owned()),
        ];
        let t = table(&args).expect("valid");
        let get = |k: &str| t.inner().get(k).cloned();
        assert_eq!(
            get("x-max-length-bytes"),
            Some(AMQPValue::LongLongInt(20000))
        );
        assert_eq!(get("x-max-age"), Some(AMQPValue::LongString("1h".into())));
        assert_eq!(
            get("x-queue-type"),
            Some(AMQPValue::LongString("stream".into()))
        );
        assert_eq!(get("x-something-else"), None);
        assert!(table(&[("max-length-bytes".to_owned(), "lots".to_owned())]).is_none());
    }
}
