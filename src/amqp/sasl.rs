//! SASL responses of AMQP's connection.start-ok, as RabbitMQ accepts them: PLAIN
//! (`\0user\0pass`) and AMQPLAIN (a field table with LOGIN and PASSWORD, without its length
//! prefix; its nesting is checked before it is parsed).

use amq_protocol::types::{AMQPValue, FieldTable};

/// Extracts (user, password) from a SASL response; None when it is malformed or the mechanism
/// is not offered.
pub fn parse_response(mechanism: &str, response: &[u8]) -> Option<(String, String)> {
    match mechanism {
        "PLAIN" => {
            let mut parts = response.split(|b| *b == 0);
            let _authzid = parts.next()?;
            let user = parts.next()?;
            let pass = parts.next()?;
            if parts.next().is_some() {
                return None;
            }
            Some((
                String::from_utf8(user.to_vec()).ok()?,
                String::from_utf8(pass.to_vec()).ok()?,
            ))
        }
        "AMQPLAIN" => {
            let mut framed = Vec::with_capacity(response.len() + 4);
            framed.extend_from_slice(&(response.len() as u32).to_be_bytes());
            framed.extend_from_slice(response);
            super::nesting::check_table(&framed).ok()?;
            let (_, table) =
                amq_protocol::types::parsing::parse_field_table(framed.as_slice()).ok()?;
            Some((text(&table, "LOGIN")?, text(&table, "PASSWORD")?))
        }
        _ => None,
    }
}

fn text(t: &FieldTable, key: &str) -> Option<String> {
    match t.inner().get(key)? {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_amqplain() {
        assert_eq!(
            parse_response("PLAIN", b"\0guest\0guest"),
            Some(("guest".into(), "guest".into()))
        );
        assert_eq!(parse_response("PLAIN", b"guest"), None);
        assert_eq!(parse_response("EXTERNAL", b""), None);
        let mut t = FieldTable::default();
        t.insert("LOGIN".into(), AMQPValue::LongString("u".into()));
        t.insert("PASSWORD".into(), AMQPValue::LongString("p".into()));
        let buf = cookie_factory::gen_simple(
            amq_protocol::types::generation::gen_field_table(&t),
            Vec::new(),
        )
        .expect("gen");
        assert_eq!(
            parse_response("AMQPLAIN", &buf[4..]),
            Some(("u".into(), "p".into()))
        );
    }
}
