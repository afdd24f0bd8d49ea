//! Field tables as JSON, the way RabbitMQ's management API and definitions files show
//! arguments and headers: numbers, strings and booleans map both ways.

use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use serde_json::{json, Value};

/// A field table as a JSON object.
pub fn table_json(t: &FieldTable) -> Value {
    Value::Object(
        t.inner()
            .iter()
            .map(|(k, v)| (k.to_string(), value_json(v)))
            .collect(),
    )
}

/// JSON arguments as a field table; Err names an argument AMQP cannot carry.
pub fn json_table<'a>(
    args: impl Iterator<Item = (&'a String, &'a Value)>,
) -> Result<FieldTable, String> {
    let mut t = FieldTable::default();
    for (k, val) in args {
        let value = json_value(val).ok_or_else(|| format!("invalid value for argument {k}"))?;
        t.insert(crate::shortstr::short(k), value);
    }
    Ok(t)
}

fn value_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => json!(b),
        AMQPValue::LongString(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        AMQPValue::ShortString(s) => json!(s.as_str()),
        AMQPValue::ShortShortInt(n) => json!(n),
        AMQPValue::ShortShortUInt(n) => json!(n),
        AMQPValue::ShortInt(n) => json!(n),
        AMQPValue::ShortUInt(n) => json!(n),
        AMQPValue::LongInt(n) => json!(n),
        AMQPValue::LongUInt(n) => json!(n),
        AMQPValue::LongLongInt(n) => json!(n),
        AMQPValue::Float(n) => json!(n),
        AMQPValue::Double(n) => json!(n),
        AMQPValue::DecimalValue(d) => json!(f64::from(d.value) / 10f64.powi(i32::from(d.scale))),
        AMQPValue::Timestamp(t) => json!(t),
        AMQPValue::FieldTable(t) => table_json(t),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(value_json).collect()),
        AMQPValue::ByteArray(b) => json!(String::from_utf8_lossy(b.as_slice())),
        AMQPValue::Void => Value::Null,
    }
}

fn json_value(v: &Value) -> Option<AMQPValue> {
    Some(match v {
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AMQPValue::LongLongInt(i),
            None => AMQPValue::Double(n.as_f64()?),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        Value::Array(a) => {
            AMQPValue::FieldArray(a.iter().map(json_value).collect::<Option<Vec<_>>>()?.into())
        }
        Value::Object(o) => AMQPValue::FieldTable(json_table(o.iter()).ok()?),
        Value::Null => AMQPValue::Void,
    })
}

/// Unix milliseconds as RabbitMQ's plugins show an Erlang `calendar:local_time()`
/// (`2026-12-01 08:11:06`, UTC here): the `timestamp` of shovel and federation status.
pub fn erlang_local_time(unix_ms: u64) -> String {
    let t = rfc3339_ms(unix_ms);
    format!("{} {}", &t[..10], &t[11..19])
}

/// Unix milliseconds as RabbitMQ's API writes times (`2026-12-01T08:11:06.535+00:00`).
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How Erlang prints a binary with `~tp` (RabbitMQ's error texts quote binding keys so):
/// `<<"abc">>`, `<<"é"/utf8>>`, or its bytes when it is not printable text.
pub fn erlang_binary(s: &str) -> String {
    if s.is_empty() {
        return "<<>>".to_owned();
    }
    if s.chars().any(char::is_control) {
        let bytes: Vec<String> = s.bytes().map(|b| b.to_string()).collect();
        return format!("<<{}>>", bytes.join(","));
    }
    let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
    if s.is_ascii() {
        format!("<<\"{escaped}\">>")
    } else {
        format!("<<\"{escaped}\"/utf8>>")
    }
}

/// How Erlang prints a decoded JSON value with `~tp` (RabbitMQ's validation texts): strings
/// as binaries, arrays as lists, objects as maps, `null` as the atom.
pub fn erlang_term(v: &Value) -> String {
    match v {
        Value::String(s) => erlang_binary(s),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(erlang_term).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => format!(
            "#{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{} => {}", erlang_binary(k), erlang_term(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod time_tests {
    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(super::rfc3339_ms(0), "1970-01-01T00:00:00.000+00:00");
        assert_eq!(
            super::rfc3339_ms(1_796_112_666_535),
            "2026-12-01T08:11:06.535+00:00"
        );
        assert_eq!(
            super::rfc3339_ms(951_782_400_000),
            "2000-02-29T00:00:00.000+00:00"
        );
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use amq_protocol::types::{FieldArray, ShortString};

    #[test]
    fn nested_tables_and_arrays_stay_structured() {
        let mut caps = FieldTable::default();
        caps.insert(
            ShortString::from("publisher_confirms"),
            AMQPValue::Boolean(true),
        );
        let mut t = FieldTable::default();
        t.insert(
            ShortString::from("capabilities"),
            AMQPValue::FieldTable(caps),
        );
        t.insert(
            ShortString::from("list"),
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::LongInt(1),
                AMQPValue::Void,
            ])),
        );
        t.insert(ShortString::from("at"), AMQPValue::Timestamp(1_700_000_000));
        let shown = json!({"capabilities": {"publisher_confirms": true}, "list": [1, null], "at": 1_700_000_000});
        assert_eq!(table_json(&t), shown);
        // And back, as definitions import them.
        let back = json_table(shown.as_object().expect("object").iter()).expect("table");
        assert_eq!(table_json(&back), shown);
    }
}
