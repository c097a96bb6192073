//! `inpath cache serve --http`: memcached's `stats` as JSON, Prometheus metrics and the live
//! page over HTTP (`inpath_core::http`), beside the memcached protocol port. Read-only.
//!
//! Endpoints: `GET /` (the JSON index; the live page for a browser), `/live`, `/stats` (every
//! `stats` field, numbers as JSON numbers, plus `hit_ratio`), `/metrics`, `/health`.

use crate::store::Store;
use inpath_core::http::{self, metrics_from_pairs, Handler, Request, Response};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// `stats` as a JSON object: each value that reads as an integer or a finite float becomes a
/// JSON number; `hit_ratio` is `get_hits / (get_hits + get_misses)` (null before any get).
pub fn stats_json(store: &Store) -> Value {
    let mut out = Map::new();
    for (name, value) in store.stats() {
        let v = if let Ok(n) = value.parse::<u64>() {
            json!(n)
        } else if let Ok(n) = value.parse::<i64>() {
            json!(n)
        } else if let Some(x) = value.parse::<f64>().ok().filter(|x| x.is_finite()) {
            json!(x)
        } else {
            json!(value)
        };
        out.insert(name.to_string(), v);
    }
    let count = |k: &str| out.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (hits, misses) = (count("get_hits"), count("get_misses"));
    let ratio = if hits + misses > 0 {
        json!(hits as f64 / (hits + misses) as f64)
    } else {
        Value::Null
    };
    out.insert("hit_ratio".into(), ratio);
    Value::Object(out)
}

/// The API of a cache server (`listen` is its memcached address, shown on the page).
pub fn http_api(store: Arc<Store>, listen: String) -> Arc<Handler> {
    Arc::new(move |request: &Request| {
        http::answer(
            request,
            || {
                json!({
                    "service": "inpath cache",
                    "listen": listen,
                    "endpoints": {
                        "/stats": "memcached's stats fields as JSON, with hit_ratio",
                        "/metrics": "Prometheus text format",
                    },
                })
            },
            |path| match path {
                "/stats" => Some(Response::pretty(200, &stats_json(&store))),
                "/metrics" => {
                    let stats = store.stats();
                    Some(Response::metrics(metrics_from_pairs(
                        "inpath_cache",
                        stats.iter().map(|(k, v)| (*k, v.as_str())),
                    )))
                }
                _ => None,
            },
        )
    })
}
