//! Headers exchange: matches the message's `headers` table against the binding arguments,
//! `x-match` = `all` (default), `any`, `all-with-x`, `any-with-x`. Values compare as RabbitMQ's
//! Erlang `==` does: numbers by value across widths, short and long strings by bytes; a binding
//! value of type void matches any value of the key.

use super::{Binding, Destination, Dests};
use amq_protocol::types::{AMQPValue, FieldTable};

/// One parsed headers binding.
#[derive(Debug)]
struct Spec {
    any: bool,
    pairs: Vec<(String, AMQPValue)>,
    arguments: FieldTable,
    destination: Destination,
}

/// Bindings of a headers exchange.
#[derive(Debug, Default)]
pub struct HeadersBindings {
    specs: Vec<Spec>,
}

/// The `x-match` argument's value, validated as RabbitMQ does.
pub fn parse_x_match(args: &FieldTable) -> Result<(bool, bool), String> {
    match args.inner().get("x-match") {
        None => Ok((false, false)),
        Some(v) => match as_bytes(v) {
            Some(b"all") => Ok((false, false)),
            Some(b"any") => Ok((true, false)),
            Some(b"all-with-x") => Ok((false, true)),
            Some(b"any-with-x") => Ok((true, true)),
            _ => {
                let shown = match as_bytes(v) {
                    Some(b) => format!("<<\"{}\">>", String::from_utf8_lossy(b)),
                    None => format!("{v:?}"),
                };
                Err(format!(
                    "Invalid x-match field value {shown}; expected all, any, all-with-x, or any-with-x"
                ))
            }
        },
    }
}

fn as_bytes(v: &AMQPValue) -> Option<&[u8]> {
    match v {
        AMQPValue::ShortString(s) => Some(s.as_str().as_bytes()),
        AMQPValue::LongString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn as_number(v: &AMQPValue) -> Option<f64> {
    Some(match v {
        AMQPValue::ShortShortInt(n) => f64::from(*n),
        AMQPValue::ShortShortUInt(n) => f64::from(*n),
        AMQPValue::ShortInt(n) => f64::from(*n),
        AMQPValue::ShortUInt(n) => f64::from(*n),
        AMQPValue::LongInt(n) => f64::from(*n),
        AMQPValue::LongUInt(n) => f64::from(*n),
        AMQPValue::LongLongInt(n) => *n as f64,
        AMQPValue::Float(n) => f64::from(*n),
        AMQPValue::Double(n) => *n,
        AMQPValue::Timestamp(n) => *n as f64,
        _ => return None,
    })
}

/// Value equality as RabbitMQ's headers exchange applies it.
pub fn values_equal(a: &AMQPValue, b: &AMQPValue) -> bool {
    if let (AMQPValue::LongLongInt(x), AMQPValue::LongLongInt(y)) = (a, b) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (as_number(a), as_number(b)) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (as_bytes(a), as_bytes(b)) {
        return x == y;
    }
    a == b
}

impl HeadersBindings {
    /// Adds a binding (identity is destination plus arguments).
    pub fn bind(&mut self, b: &Binding) -> bool {
        if self
            .specs
            .iter()
            .any(|s| s.destination == b.destination && s.arguments == b.arguments)
        {
            return false;
        }
        let (any, with_x) = parse_x_match(&b.arguments).unwrap_or((false, false));
        let pairs = b
            .arguments
            .inner()
            .iter()
            .filter(|(k, _)| k.as_str() != "x-match" && (with_x || !k.as_str().starts_with("x-")))
            .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
            .collect();
        self.specs.push(Spec {
            any,
            pairs,
            arguments: b.arguments.clone(),
            destination: b.destination.clone(),
        });
        true
    }

    /// Removes a binding.
    pub fn unbind(&mut self, b: &Binding) -> bool {
        let before = self.specs.len();
        self.specs
            .retain(|s| !(s.destination == b.destination && s.arguments == b.arguments));
        before != self.specs.len()
    }

    /// Destinations whose arguments match `headers`.
    pub fn route<'a>(&'a self, headers: &FieldTable, out: &mut Dests<'a>) {
        for s in &self.specs {
            if spec_matches(s.any, &s.pairs, headers) {
                out.push(&s.destination);
            }
        }
    }
}

fn spec_matches(any: bool, pairs: &[(String, AMQPValue)], headers: &FieldTable) -> bool {
    let h = headers.inner();
    let one = |(k, v): &(String, AMQPValue)| match h.get(k.as_str()) {
        None => false,
        Some(found) => matches!(v, AMQPValue::Void) || values_equal(v, found),
    };
    if any {
        pairs.iter().any(one)
    } else {
        pairs.iter().all(one)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, AMQPValue)]) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in pairs {
            t.insert((*k).into(), v.clone());
        }
        t
    }

    #[test]
    fn all_any_and_typed_values() {
        let pairs = vec![
            ("a".to_string(), AMQPValue::LongInt(1)),
            ("b".to_string(), AMQPValue::LongString("x".into())),
        ];
        let both = table(&[
            ("a", AMQPValue::ShortShortInt(1)),
            ("b", AMQPValue::ShortString("x".into())),
        ]);
        let one = table(&[("a", AMQPValue::LongLongInt(1))]);
        let wrong = table(&[("a", AMQPValue::LongString("1".into()))]);
        assert!(spec_matches(false, &pairs, &both));
        assert!(!spec_matches(false, &pairs, &one));
        assert!(spec_matches(true, &pairs, &one));
        assert!(!spec_matches(true, &pairs, &wrong));
        assert!(spec_matches(false, &[], &FieldTable::default()));
        assert!(!spec_matches(true, &[], &both));
        let void = vec![("a".to_string(), AMQPValue::Void)];
        assert!(spec_matches(false, &void, &wrong));
    }

    #[test]
    fn x_match_values() {
        assert_eq!(
            parse_x_match(&table(&[("x-match", AMQPValue::LongString("any".into()))])),
            Ok((true, false))
        );
        assert_eq!(parse_x_match(&table(&[])), Ok((false, false)));
        assert!(
            parse_x_match(&table(&[("x-match", AMQPValue::LongString("some".into()))])).is_err()
        );
    }
}
