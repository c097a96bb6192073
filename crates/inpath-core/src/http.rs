//! The servers' read-only HTTP API and their live page, shared by `wire`, `cache serve --http`
//! and `store serve --http`.
//!
//! Hand-written rather than hyper or axum: each API is a few GETs with small JSON or text
//! answers, one request per connection (`Connection: close`), so a bounded request-head reader
//! (8 KiB, 5 s) and a fixed response writer cover it with no dependency tree to build and audit.
//! [`parse_head`] and [`Response::to_bytes`] are the protocol; the server that drives them,
//! plain or over TLS and with an optional token, is `inpath_net::HttpServer`.
//!
//! [`LIVE_PAGE`] is one self-contained HTML page (no external script, style or font: it works
//! offline) that a browser gets from `GET /` (or `/live`): it asks `GET /` for the JSON index,
//! learns which service it is talking to, and redraws from that service's JSON endpoints every
//! second. Scripts get JSON from `/` as before: the page is served only to a request whose
//! `Accept` header prefers `text/html`.

use serde_json::{json, Value};
use std::time::Duration;

/// The largest request head read (request line and headers).
pub const MAX_HEAD: usize = 8 << 10;
/// How long a client has to send its request head, and to take the answer.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The live page (see the module documentation).
pub const LIVE_PAGE: &str = include_str!("live.html");

/// A parsed request: only what the APIs route on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path without its query string, with trailing slashes removed (`/` is `""`).
    pub path: String,
    /// Whether the client prefers HTML (a browser's `Accept: text/html,...`).
    pub wants_html: bool,
}

impl Request {
    /// Whether the answer carries a body (`HEAD` gets only the head).
    pub fn wants_body(&self) -> bool {
        self.method != "HEAD"
    }

    /// Whether this request asks for the live page: `/live`, or `/` from a browser.
    pub fn is_live_page(&self) -> bool {
        self.path == "/live" || (self.path.is_empty() && self.wants_html)
    }
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code (200, 400, 404, 405, 431).
    pub status: u16,
    /// The `Content-Type`.
    pub kind: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A JSON answer, pretty-printed text with a final newline.
    pub fn json(status: u16, text: String) -> Response {
        let mut body = text.into_bytes();
        if body.last() != Some(&b'\n') {
            body.push(b'\n');
        }
        Response {
            status,
            kind: "application/json",
            body,
        }
    }

    /// A JSON value, pretty-printed.
    pub fn pretty(status: u16, value: &Value) -> Response {
        Response::json(
            status,
            serde_json::to_string_pretty(value).unwrap_or_default(),
        )
    }

    /// A plain-text answer.
    pub fn text(status: u16, text: impl Into<String>) -> Response {
        Response {
            status,
            kind: "text/plain; charset=utf-8",
            body: text.into().into_bytes(),
        }
    }

    /// Prometheus' text exposition format (version 0.0.4).
    pub fn metrics(text: String) -> Response {
        Response {
            status: 200,
            kind: "text/plain; version=0.0.4; charset=utf-8",
            body: text.into_bytes(),
        }
    }

    /// The live page.
    pub fn live_page() -> Response {
        Response {
            status: 200,
            kind: "text/html; charset=utf-8",
            body: LIVE_PAGE.as_bytes().to_vec(),
        }
    }

    /// The bytes on the wire: status line, headers, and the body unless `with_body` is false.
    pub fn to_bytes(&self, with_body: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            401 => "Unauthorized",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            self.status,
            self.kind,
            self.body.len()
        )
        .into_bytes();
        if with_body {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// Answers a request to a server's API the way every server does: the live page (`/live`, or
/// `/` from a browser), `/` as the JSON `index()` (its `"endpoints"` object gains `/live` and
/// `/health`), `/health`, then the server's own `route(path)`, and a JSON 404 naming the path
/// for anything else.
pub fn answer(
    request: &Request,
    index: impl FnOnce() -> Value,
    route: impl FnOnce(&str) -> Option<Response>,
) -> Response {
    if request.is_live_page() {
        return Response::live_page();
    }
    match request.path.as_str() {
        "" => {
            let mut index = index();
            if let Some(endpoints) = index.get_mut("endpoints").and_then(Value::as_object_mut) {
                endpoints.insert(
                    "/live".into(),
                    json!("the live page (also GET / from a browser)"),
                );
                endpoints.insert("/health".into(), json!("liveness"));
            }
            Response::pretty(200, &index)
        }
        "/health" => Response::text(200, "ok\n"),
        path => route(path).unwrap_or_else(|| {
            Response::pretty(
                404,
                &json!({"error": format!("no endpoint {path:?}; see GET /")}),
            )
        }),
    }
}

/// Whether `head` holds a whole request head (ended by an empty line).
pub fn head_complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// Reads a request head: the request line and the `Accept` header. Anything but `GET` or
/// `HEAD` over HTTP/1.x is answered here (`400` or `405`).
pub fn parse_head(head: &[u8]) -> Result<Request, Response> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.lines();
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v)) if v.starts_with("HTTP/1.") => (m, t),
        _ => return Err(Response::text(400, "bad request line\n")),
    };
    if method != "GET" && method != "HEAD" {
        return Err(Response::text(405, "only GET and HEAD\n"));
    }
    let path = target.split('?').next().unwrap_or(target);
    let mut wants_html = false;
    for header in lines {
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("accept") {
                // A browser lists text/html first; a script asking for JSON does not list it.
                wants_html = value.split(',').next().is_some_and(|first| {
                    first.trim().to_ascii_lowercase().starts_with("text/html")
                });
            }
        }
    }
    Ok(Request {
        method: method.to_string(),
        path: path.trim_end_matches('/').to_string(),
        wants_html,
    })
}

/// What a server answers each request with (`inpath_net::HttpServer` drives it).
pub type Handler = dyn Fn(&Request) -> Response + Send + Sync;

/// Prometheus gauges from a flat list of `(name, value)` pairs: each value that parses as a
/// number becomes `PREFIX_NAME VALUE` with a `# TYPE` line; the others are left out.
pub fn metrics_from_pairs<'a>(
    prefix: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut out = String::new();
    for (name, value) in pairs {
        if value.parse::<f64>().is_ok_and(f64::is_finite) {
            let name: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            out.push_str(&format!(
                "# TYPE {prefix}_{name} gauge\n{prefix}_{name} {value}\n"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_and_bad_ones_are_answered() {
        let r =
            parse_head(b"GET /stats/?x=1 HTTP/1.1\r\nAccept: application/json\r\n\r\n").unwrap();
        assert_eq!((r.path.as_str(), r.wants_html), ("/stats", false));
        let r = parse_head(b"GET / HTTP/1.1\r\naccept: text/html,application/xhtml+xml\r\n\r\n")
            .unwrap();
        assert!(r.is_live_page());
        let r = parse_head(b"HEAD /live HTTP/1.0\r\n\r\n").unwrap();
        assert!(r.is_live_page() && !r.wants_body());
        assert_eq!(
            parse_head(b"POST / HTTP/1.1\r\n\r\n").unwrap_err().status,
            405
        );
        assert_eq!(parse_head(b"nonsense\r\n\r\n").unwrap_err().status, 400);
        assert_eq!(parse_head(b"").unwrap_err().status, 400);
    }

    #[test]
    fn the_live_page_is_self_contained() {
        assert!(LIVE_PAGE.starts_with("<!doctype html>"));
        for external in ["src=\"http", "href=\"http", "@import", "url(http", "//cdn"] {
            assert!(!LIVE_PAGE.contains(external), "the page loads {external}");
        }
    }

    #[test]
    fn metrics_keep_numbers_only() {
        let text = metrics_from_pairs(
            "x",
            [("get_hits", "5"), ("version", "1.2.3"), ("a-b", "0.5")],
        );
        assert_eq!(
            text,
            "# TYPE x_get_hits gauge\nx_get_hits 5\n# TYPE x_a_b gauge\nx_a_b 0.5\n"
        );
    }
}
