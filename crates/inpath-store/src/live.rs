//! `inpath store serve --http`: the server's counters and latest scans over HTTP, and the live
//! page (`inpath_core::http`). Read-only: no request here touches a handle.
//!
//! Endpoints: `GET /` (the JSON index; the live page for a browser), `/live`, `/stats` (the
//! `stats` request's answer, with the latest kernel runs under `recent`), `/metrics`
//! (Prometheus), `/health`.

use crate::remote::Service;
use inpath_core::http::{self, metrics_from_pairs, Handler, Request, Response};
use serde_json::json;
use std::sync::Arc;

/// The API of a store server (`listen` is its protocol address, shown on the page).
pub fn http_api(service: Arc<Service>, listen: String) -> Arc<Handler> {
    Arc::new(move |request: &Request| {
        http::answer(
            request,
            || {
                json!({
                    "service": "inpath store",
                    "listen": listen,
                    "dir": service.stats()["dir"],
                    "endpoints": {
                        "/stats": "counters since the start and the latest kernel runs",
                        "/metrics": "Prometheus text format",
                    },
                })
            },
            |path| match path {
                "/stats" => Some(Response::pretty(200, &service.stats())),
                "/metrics" => {
                    let stats = service.stats();
                    let pairs: Vec<(String, String)> = stats
                        .as_object()
                        .map(|o| {
                            o.iter()
                                .filter(|(_, v)| v.is_number())
                                .map(|(k, v)| (k.clone(), v.to_string()))
                                .collect()
                        })
                        .unwrap_or_default();
                    Some(Response::metrics(metrics_from_pairs(
                        "inpath_store",
                        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                    )))
                }
                _ => None,
            },
        )
    })
}
