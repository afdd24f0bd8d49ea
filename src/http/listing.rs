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

/// The list parameters (a list handler may apply them itself, before it renders).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    pub(crate) sort: Option<String>,
    pub(crate) sort_reverse: Option<bool>,
    columns: Option<String>,
    page: Option<usize>,
    page_size: Option<usize>,
    name: Option<String>,
    use_regex: Option<bool>,
}

/// A name filter.
pub(crate) type Matcher = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// Which page of what size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page {
    number: usize,
    size: usize,
}

impl ListQuery {
    fn any(&self) -> bool {
        self.sort.is_some() || self.columns.is_some() || self.page.is_some()
    }

    /// The page asked for, if any; Err when its size is out of bounds.
    pub(crate) fn page(&self) -> Result<Option<Page>, String> {
        let Some(number) = self.page else {
            return Ok(None);
        };
        let size = self.page_size.unwrap_or(100);
        if size == 0 || size > MAX_PAGE_SIZE {
            return Err(format!("page_size must be between 1 and {MAX_PAGE_SIZE}"));
        }
        Ok(Some(Page { number, size }))
    }

    /// The `name` filter of a paged request (a substring, any case, or a regex), if any;
    /// Err for a regex that does not parse.
    pub(crate) fn name_matcher(&self) -> Result<Option<Matcher>, String> {
        let Some(name) = self
            .name
            .as_deref()
            .filter(|n| !n.is_empty() && self.page.is_some())
        else {
            return Ok(None);
        };
        Ok(Some(if self.use_regex == Some(true) {
            let re = regex::Regex::new(name).map_err(|e| e.to_string())?;
            Box::new(move |s: &str| re.is_match(s))
        } else {
            let needle = name.to_lowercase();
            Box::new(move |s: &str| s.to_lowercase().contains(&needle))
        }))
    }
}

/// The list parameters of a request, when it has any.
pub(crate) fn query_of(uri: &axum::http::Uri) -> Option<ListQuery> {
    Query::<ListQuery>::try_from_uri(uri)
        .ok()
        .map(|Query(q)| q)
        .filter(ListQuery::any)
}

/// The range of `filtered` items page `p` shows; Err when it is past the last page.
pub(crate) fn window(filtered: usize, p: Page) -> Result<std::ops::Range<usize>, String> {
    let page_count = filtered.div_ceil(p.size);
    if p.number == 0 || (p.number > page_count && page_count > 0) {
        return Err("page_out_of_range".into());
    }
    let start = ((p.number - 1) * p.size).min(filtered);
    Ok(start..(start + p.size).min(filtered))
}

/// RabbitMQ's paged object for the items of page `p` (columns applied here), `filtered` of
/// `total` items passing the name filter.
pub(crate) fn paged(
    items: Vec<Value>,
    q: &ListQuery,
    p: Page,
    filtered: usize,
    total: usize,
) -> Value {
    let items = with_columns(items, q);
    json!({
        "filtered_count": filtered,
        "item_count": items.len(),
        "items": items,
        "page": p.number,
        "page_count": filtered.div_ceil(p.size),
        "page_size": p.size,
        "total_count": total,
    })
}

fn with_columns(items: Vec<Value>, q: &ListQuery) -> Vec<Value> {
    match &q.columns {
        Some(cols) => {
            let cols: Vec<&str> = cols.split(',').map(str::trim).collect();
            items.iter().map(|i| keep_columns(i, &cols)).collect()
        }
        None => items,
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

/// Sorts `items` by the field `q.sort` names (stable), reversed on `sort_reverse`.
pub(crate) fn sort_values(items: &mut [Value], q: &ListQuery) {
    if let Some(field) = &q.sort {
        items.sort_by(|a, b| compare(at(a, field), at(b, field)));
        if q.sort_reverse == Some(true) {
            items.reverse();
        }
    }
}

/// Applies the list parameters to a JSON array.
pub(crate) fn shape(mut items: Vec<Value>, q: &ListQuery) -> Result<Value, String> {
    sort_values(&mut items, q);
    let total = items.len();
    if let Some(p) = q.page()? {
        if let Some(matcher) = q.name_matcher()? {
            items.retain(|i| i.get("name").and_then(Value::as_str).is_some_and(&matcher));
        }
        let filtered = items.len();
        let range = window(filtered, p)?;
        let page_items: Vec<Value> = items
            .into_iter()
            .skip(range.start)
            .take(range.len())
            .collect();
        return Ok(paged(page_items, q, p, filtered, total));
    }
    Ok(Value::Array(with_columns(items, q)))
}

/// The middleware: rewrites successful JSON-array GET responses when list parameters are set.
pub(crate) async fn list_parameters(req: Request, next: Next) -> Response {
    let query = match (req.method() == Method::GET, query_of(req.uri())) {
        (true, Some(q)) => q,
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
