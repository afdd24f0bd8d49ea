//! Lenient JSON fields, as RabbitMQ's API reads them: `rabbitmqadmin` and other tools send
//! booleans and numbers as strings ("true", "50000"), which RabbitMQ accepts.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A number from a JSON number or a numeric string.
pub(crate) fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `bool` from `true`/`false` or `"true"`/`"false"`.
pub(crate) fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Value::deserialize(d)?;
    as_bool(&v).ok_or_else(|| serde::de::Error::custom(format!("expected a boolean, got {v}")))
}

/// `Option<bool>` from a boolean, a boolean string or null.
pub(crate) fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let v = Value::deserialize(d)?;
    if v.is_null() {
        return Ok(None);
    }
    as_bool(&v)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("expected a boolean, got {v}")))
}

/// `u32` from a number or a numeric string.
pub(crate) fn u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = Value::deserialize(d)?;
    as_u64(&v)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| serde::de::Error::custom(format!("expected a number, got {v}")))
}

/// `Option<usize>` from a number, a numeric string or null.
pub(crate) fn opt_usize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let v = Value::deserialize(d)?;
    if v.is_null() {
        return Ok(None);
    }
    as_u64(&v)
        .and_then(|n| usize::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("expected a number, got {v}")))
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "super::bool")]
        a: bool,
        #[serde(default, deserialize_with = "super::opt_bool")]
        b: Option<bool>,
        #[serde(deserialize_with = "super::u32")]
        n: u32,
    }

    #[test]
    fn strings_and_natives_both_parse() {
        let x: Body = serde_json::from_str(r#"{"a":"true","b":false,"n":"12"}"#).expect("strings");
        assert!(x.a && x.b == Some(false) && x.n == 12);
        let y: Body = serde_json::from_str(r#"{"n":3}"#).expect("defaults");
        assert!(!y.a && y.b.is_none() && y.n == 3);
        assert!(serde_json::from_str::<Body>(r#"{"a":"yes","n":1}"#).is_err());
    }
}
