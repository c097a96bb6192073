//! The results API over HTTP/1.1: a few read-only GET endpoints and the live page, served by
//! `inpath_net::HttpServer` (plain or HTTPS, an optional token) with `inpath_core::http`'s
//! request head and answers.
//!
//! Endpoints: `GET /` (the JSON index; the live page for a browser), `/live`, `/connections`,
//! `/connections/ID`, `/combined`, `/metrics`, `/health`. `HEAD` is accepted for all of them.

use crate::hub::Hub;
use inpath_core::http::{Handler, Request, Response};
use serde_json::json;
use std::sync::Arc;

/// The API's answers, for `inpath_net::HttpServer` (which reads the request head, checks the
/// token and speaks TLS when configured).
pub(crate) fn handler(hub: Arc<Hub>) -> Arc<Handler> {
    Arc::new(move |request: &Request| route(request, &hub))
}

fn route(request: &Request, hub: &Hub) -> Response {
    inpath_core::http::answer(
        request,
        || {
            json!({
                "service": "inpath wire",
                "mode": hub.config.mode.name(),
                "endpoints": {
                    "/connections": "open connections (live tap state) and recently closed ones",
                    "/connections/ID": "one connection",
                    "/combined": "every tap merged over all connections",
                    "/metrics": "Prometheus text format",
                },
            })
        },
        |path| match path {
            "/connections" => Some(Response::pretty(200, &hub.connections_json())),
            "/combined" => Some(Response::pretty(200, &hub.combined_json())),
            "/metrics" => Some(Response::metrics(hub.metrics_text())),
            other => {
                let id = other.strip_prefix("/connections/")?.parse::<u64>().ok()?;
                Some(match hub.connection_json(id) {
                    Some(conn) => Response::pretty(200, &conn),
                    None => Response::pretty(
                        404,
                        &json!({"error": "no such connection (open or recently closed)"}),
                    ),
                })
            }
        },
    )
}
