//! RabbitMQ's `rabbit_parameter_validation`: the checks components run on a parameter's JSON
//! value, with RabbitMQ's texts (`prefetch-count should be a number, actually was
//! <<"x">>`), and `proplist`, which runs a list of them over an object's keys.

use crate::json::{erlang_binary, erlang_term};
use serde_json::Value;

/// A check of one key's value: its messages, empty when it is valid.
pub type Check = fn(&str, &Value) -> Vec<String>;

/// One message.
pub fn one(s: String) -> Vec<String> {
    vec![s]
}

/// A JSON number.
pub fn number(name: &str, v: &Value) -> Vec<String> {
    if v.is_number() {
        Vec::new()
    } else {
        one(format!(
            "{name} should be a number, actually was {}",
            erlang_term(v)
        ))
    }
}

/// A string.
pub fn binary(name: &str, v: &Value) -> Vec<String> {
    if v.is_string() {
        Vec::new()
    } else {
        one(format!(
            "{name} should be binary, actually was {}",
            erlang_term(v)
        ))
    }
}

/// true or false.
pub fn boolean(name: &str, v: &Value) -> Vec<String> {
    if v.is_boolean() {
        Vec::new()
    } else {
        one(format!(
            "{name} should be boolean, actually was {}",
            erlang_term(v)
        ))
    }
}

/// One of `options`.
pub fn enum_of(name: &str, v: &Value, options: &[&str]) -> Vec<String> {
    match v.as_str() {
        Some(s) if options.contains(&s) => Vec::new(),
        Some(_) => {
            let list: Vec<String> = options.iter().map(|o| erlang_binary(o)).collect();
            one(format!(
                "{name} should be one of [{}], actually was {}",
                list.join(","),
                erlang_term(v)
            ))
        }
        None => binary(name, v),
    }
}

/// `rabbit_parameter_validation:proplist/3`: each key's check in order (a missing mandatory
/// key is an error), the messages of later checks first, and unknown keys before all.
pub fn proplist(name: &str, checks: &[(&str, Check, bool)], v: &Value) -> Vec<String> {
    let Value::Object(m) = v else {
        return one(format!("{name} not a list {}", erlang_term(v)));
    };
    let mut results: Vec<Vec<String>> = Vec::new();
    for (key, check, mandatory) in checks {
        match m.get(*key) {
            Some(value) => results.push(check(key, value)),
            None if *mandatory => results.push(one(format!("Key \"{key}\" not found in {name}"))),
            None => {}
        }
    }
    let unknown: Vec<String> = m
        .iter()
        .filter(|(k, _)| !checks.iter().any(|(c, _, _)| c == k))
        .map(|(k, v)| format!("{{{},{}}}", erlang_binary(k), erlang_term(v)))
        .collect();
    let mut out = Vec::new();
    if !unknown.is_empty() {
        out.push(format!(
            "Unrecognised terms [{}] in {name}",
            unknown.join(",")
        ));
    }
    out.extend(results.into_iter().rev().flatten());
    out
}
