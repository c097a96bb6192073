//! The results API over HTTP/1.1: a few read-only GET endpoints.
//!
//! Hand-written rather than hyper or axum: the API is four GETs with small JSON or text
//! answers, one request per connection (`Connection: close`), so a bounded request-head reader
//! (8 KiB, 5 s) and a fixed response writer on the tokio sockets the relay already uses cover
//! it in about a hundred lines, with no extra dependency tree to build and audit. Anything else
//! is answered `400`, `404` or `405`.
//!
//! Endpoints: `GET /` (index), `/connections`, `/connections/ID`, `/combined`, `/metrics`,
//! `/health`. `HEAD` is accepted for all of them.

use crate::hub::Hub;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_HEAD: usize = 8 << 10;
const TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts API connections until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, hub: Arc<Hub>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let hub = hub.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(TIMEOUT, respond(stream, &hub)).await;
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn respond(mut stream: TcpStream, hub: &Hub) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break;
        }
        if head.len() > MAX_HEAD {
            return write(
                &mut stream,
                431,
                "text/plain",
                "request head too large\n",
                true,
            )
            .await;
        }
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v)) if v.starts_with("HTTP/1.") => (m, t),
        _ => return write(&mut stream, 400, "text/plain", "bad request line\n", true).await,
    };
    let body_wanted = method != "HEAD";
    if method != "GET" && method != "HEAD" {
        return write(&mut stream, 405, "text/plain", "only GET and HEAD\n", true).await;
    }
    let path = target.split('?').next().unwrap_or(target);
    let pretty = |v: serde_json::Value| {
        let mut text = serde_json::to_string_pretty(&v).unwrap_or_default();
        text.push('\n');
        text
    };
    let (status, kind, body) = match path.trim_end_matches('/') {
        "" => (
            200,
            "application/json",
            pretty(json!({
                "service": "inpath wire",
                "mode": hub.config.mode.name(),
                "endpoints": {
                    "/connections": "open connections (live tap state) and recently closed ones",
                    "/connections/ID": "one connection",
                    "/combined": "every tap merged over all connections",
                    "/metrics": "Prometheus text format",
                    "/health": "liveness",
                },
            })),
        ),
        "/health" => (200, "text/plain", "ok\n".to_string()),
        "/connections" => (200, "application/json", pretty(hub.connections_json())),
        "/combined" => (200, "application/json", pretty(hub.combined_json())),
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            hub.metrics_text(),
        ),
        other => match other
            .strip_prefix("/connections/")
            .and_then(|id| id.parse::<u64>().ok())
            .map(|id| hub.connection_json(id))
        {
            Some(Some(conn)) => (200, "application/json", pretty(conn)),
            Some(None) => (
                404,
                "application/json",
                pretty(json!({"error": "no such connection (open or recently closed)"})),
            ),
            None => (
                404,
                "application/json",
                pretty(json!({"error": format!("no endpoint {path:?}; see GET /")})),
            ),
        },
    };
    write(&mut stream, status, kind, &body, body_wanted).await
}

async fn write(
    stream: &mut TcpStream,
    status: u16,
    kind: &str,
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if with_body {
        response.push_str(body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
