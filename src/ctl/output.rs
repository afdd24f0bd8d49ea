//! Output in rabbitmqctl's shapes: an info banner (`Listing queues ...`, left out with
//! `--quiet`), then a tab-separated table with a header row (left out with `--silent`), or
//! with `--formatter json` a JSON array written one object per line as rabbitmqctl writes it.

use serde_json::Value;

/// How a command prints.
#[derive(Clone, Copy, Debug, Default)]
pub struct Style {
    /// `--quiet`: no banner.
    pub quiet: bool,
    /// `--silent`: no banner and no header row.
    pub silent: bool,
    /// `--formatter json`.
    pub json: bool,
}

impl Style {
    /// Prints the banner line unless quiet, silent or JSON.
    pub fn banner(&self, line: &str) {
        if !(self.quiet || self.silent || self.json) {
            println!("{line}");
        }
    }
}

/// A value as a table cell: strings bare, lists as `[a, b]`, nothing as empty.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(cell).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// Rows of `columns` taken from each item's fields, as a table or as JSON.
pub fn rows(style: Style, columns: &[String], items: &[Value]) -> String {
    if style.json {
        let objects: Vec<String> = items
            .iter()
            .map(|item| {
                let fields: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        format!(
                            "{}:{}",
                            Value::from(c.as_str()),
                            item.get(c).unwrap_or(&Value::Null)
                        )
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            })
            .collect();
        return if objects.is_empty() {
            "[\n]\n".to_owned()
        } else {
            format!("[\n{}\n]\n", objects.join("\n,"))
        };
    }
    let mut out = String::new();
    // rabbitmqctl prints no header over an empty list.
    if !style.silent && !items.is_empty() {
        out.push_str(&columns.join("\t"));
        out.push('\n');
    }
    for item in items {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| cell(item.get(c).unwrap_or(&Value::Null)))
            .collect();
        out.push_str(&cells.join("\t"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_and_json_look_like_rabbitmqctl() {
        let items = [
            json!({"name": "a", "messages": 0}),
            json!({"name": "b", "messages": 1, "x": 2}),
        ];
        let cols = ["name".to_string(), "messages".to_string()];
        assert_eq!(
            rows(Style::default(), &cols, &items),
            "name\tmessages\na\t0\nb\t1\n"
        );
        let silent = Style {
            silent: true,
            ..Style::default()
        };
        assert_eq!(rows(silent, &cols, &items), "a\t0\nb\t1\n");
        let json = Style {
            json: true,
            ..Style::default()
        };
        assert_eq!(
            rows(json, &cols, &items),
            "[\n{\"name\":\"a\",\"messages\":0}\n,{\"name\":\"b\",\"messages\":1}\n]\n"
        );
        assert_eq!(rows(json, &cols, &[]), "[\n]\n");
        assert_eq!(rows(Style::default(), &cols, &[]), "");
        assert_eq!(
            cell(&json!(["administrator", "monitoring"])),
            "[administrator, monitoring]"
        );
    }
}
