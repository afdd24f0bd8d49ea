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
        t.insert(k.as_str().into(), value);
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
        other => json!(format!("{other:?}")),
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
        _ => return None,
    })
}
