//! RabbitMQ's list parameters, applied to every list the API returns (a middleware rewrites
//! JSON arrays of GET responses): `sort` (a dotted field path) and `sort_reverse`, `columns`
//! (comma-separated dotted paths to keep), and pagination (`page`, `page_size` up to 500, `name`
//! filter, `use_regex`) which returns RabbitMQ's paged object instead of the array.

use axum::body::Body;
use axum::extract::{Query, Request};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::cmp::Ordering;

/// The list parameters.
#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    sort: Option<String>,
    sort_reverse: Option<bool>,
    columns: Option<String>,
    page: Option<usize>,
    page_size: Option<usize>,
    name: Option<String>,
    use_regex: Option<bool>,
}

impl ListQuery {
    fn any(&self) -> bool {
        self.sort.is_some() || self.columns.is_some() || self.page.is_some()
    }
}

/// Largest page RabbitMQ serves.
const MAX_PAGE_SIZE: usize = 500;

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn compare(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal),
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

fn insert_path(map: &mut Map<String, Value>, parts: &[&str], value: Value) {
    match parts {
        [] => {}
        [last] => {
            map.insert((*last).to_owned(), value);
        }
        [first, rest @ ..] => {
            let entry = map
                .entry((*first).to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

fn keep_columns(v: &Value, columns: &[&str]) -> Value {
    let mut out = Map::new();
    for c in columns {
        if let Some(found) = at(v, c) {
            let parts: Vec<&str> = c.split('.').collect();
            insert_path(&mut out, &parts, found.clone());
        }
    }
    Value::Object(out)
}

fn bad(reason: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": "bad_request", "reason": reason})),
    )
        .into_response()
}

/// Applies the list parameters to a JSON array.
fn shape(mut items: Vec<Value>, q: &ListQuery) -> Result<Value, String> {
    if let Some(field) = &q.sort {
        items.sort_by(|a, b| compare(at(a, field), at(b, field)));
        if q.sort_reverse == Some(true) {
            items.reverse();
        }
    }
    let total = items.len();
    if let Some(page) = q.page {
        let size = q.page_size.unwrap_or(100);
        if size == 0 || size > MAX_PAGE_SIZE {
            return Err(format!("page_size must be between 1 and {MAX_PAGE_SIZE}"));
        }
        if let Some(name) = q.name.as_deref().filter(|n| !n.is_empty()) {
            let matcher: Box<dyn Fn(&str) -> bool> = if q.use_regex == Some(true) {
                let re = regex::Regex::new(name).map_err(|e| e.to_string())?;
                Box::new(move |s| re.is_match(s))
            } else {
                let needle = name.to_lowercase();
                Box::new(move |s| s.to_lowercase().contains(&needle))
            };
            items.retain(|i| i.get("name").and_then(Value::as_str).is_some_and(&matcher));
        }
        let filtered = items.len();
        let page_count = filtered.div_ceil(size);
        if page == 0 || (page > page_count && page_count > 0) {
            return Err("page_out_of_range".into());
        }
        let mut page_items: Vec<Value> = items
            .into_iter()
            .skip((page - 1) * size)
            .take(size)
            .collect();
        if let Some(cols) = &q.columns {
            let cols: Vec<&str> = cols.split(',').map(str::trim).collect();
            page_items = page_items.iter().map(|i| keep_columns(i, &cols)).collect();
        }
        return Ok(json!({
            "filtered_count": filtered,
            "item_count": page_items.len(),
            "items": page_items,
            "page": page,
            "page_count": page_count,
            "page_size": size,
            "total_count": total,
        }));
    }
    if let Some(cols) = &q.columns {
        let cols: Vec<&str> = cols.split(',').map(str::trim).collect();
        items = items.iter().map(|i| keep_columns(i, &cols)).collect();
    }
    Ok(Value::Array(items))
}

/// The middleware: rewrites successful JSON-array GET responses when list parameters are set.
pub(crate) async fn list_parameters(req: Request, next: Next) -> Response {
    let query = match (
        req.method() == Method::GET,
        Query::<ListQuery>::try_from_uri(req.uri()),
    ) {
        (true, Ok(Query(q))) if q.any() => q,
        _ => return next.run(req).await,
    };
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 << 20).await else {
        return bad("response too large to page");
    };
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    match shape(items, &query) {
        Ok(v) => {
            let mut resp = axum::Json(v).into_response();
            resp.headers_mut().extend(
                parts
                    .headers
                    .into_iter()
                    .filter_map(|(k, v)| k.map(|k| (k, v)))
                    .filter(|(k, _)| k != header::CONTENT_LENGTH),
            );
            resp
        }
        Err(reason) => bad(&reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<Value> {
        (1..=7)
            .map(|i| json!({"name": format!("q{i}"), "messages": 10 - i, "stats": {"rate": i, "x": 0}}))
            .collect()
    }

    #[test]
    fn sort_columns_and_pages() {
        let q = ListQuery {
            sort: Some("messages".into()),
            columns: Some("name,stats.rate".into()),
            ..Default::default()
        };
        let v = shape(items(), &q).expect("shaped");
        assert_eq!(v[0], json!({"name": "q7", "stats": {"rate": 7}}));
        let q = ListQuery {
            page: Some(2),
            page_size: Some(3),
            sort: Some("stats.rate".into()),
            sort_reverse: Some(true),
            ..Default::default()
        };
        let v = shape(items(), &q).expect("paged");
        assert_eq!(v["page_count"], 3);
        assert_eq!(v["item_count"], 3);
        assert_eq!(v["total_count"], 7);
        assert_eq!(v["items"][0]["name"], "q4");
        let q = ListQuery {
            page: Some(1),
            name: Some("^q[12]$".into()),
            use_regex: Some(true),
            ..Default::default()
        };
        assert_eq!(shape(items(), &q).expect("filtered")["filtered_count"], 2);
        let q = ListQuery {
            page: Some(9),
            ..Default::default()
        };
        assert!(shape(items(), &q).is_err());
    }
}
