//! The results API over HTTP/1.1: a few read-only GET endpoints and the live page, with the
//! request head and answer of `inpath_core::http` driven from the relay's tokio sockets.
//!
//! Endpoints: `GET /` (the JSON index; the live page for a browser), `/live`, `/connections`,
//! `/connections/ID`, `/combined`, `/metrics`, `/health`. `HEAD` is accepted for all of them.

use crate::hub::Hub;
use inpath_core::http::{head_complete, parse_head, Request, Response, MAX_HEAD, TIMEOUT};
use serde_json::json;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
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
        if head_complete(&head) {
            break;
        }
        if head.len() > MAX_HEAD {
            let answer = Response::text(431, "request head too large\n");
            stream.write_all(&answer.to_bytes(true)).await?;
            return stream.shutdown().await;
        }
    }
    let (answer, with_body) = match parse_head(&head) {
        Ok(request) => (route(&request, hub), request.wants_body()),
        Err(answer) => (answer, true),
    };
    stream.write_all(&answer.to_bytes(with_body)).await?;
    stream.shutdown().await
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
