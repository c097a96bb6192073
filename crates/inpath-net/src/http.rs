//! The servers' HTTP port (`--http`: the live page, `/stats`, `/metrics`, `/health`): a
//! blocking accept loop on a thread of its own, one request per connection, over plain TCP or
//! TLS, and with an optional token every path but `/health` requires.
//!
//! The request head and the answers are `inpath_core::http`'s ([`parse_head`],
//! [`Response::to_bytes`]); this module adds the transport and the credential. A token comes
//! as `Authorization: Bearer TOKEN` (scripts, Prometheus' `authorization` setting) or as the
//! password of `Authorization: Basic` (a browser asks for it once, with any user name, when
//! the answer is `401` with `WWW-Authenticate: Basic`, and sends it with the live page's
//! requests after). Wrong tokens are counted and slowed per address ([`Limiter`]).

use crate::limit::Limiter;
use crate::stream::{accept, peek_first, FirstBytes, Stream};
use crate::tls::ServerTls;
use crate::tokens::Tokens;
use base64::Engine as _;
use inpath_core::http::{head_complete, parse_head, Handler, Request, Response, MAX_HEAD, TIMEOUT};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections answered at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;

/// What protects an HTTP port.
#[derive(Clone, Debug, Default)]
pub struct HttpGuard {
    /// Serve HTTPS with this certificate.
    pub tls: Option<Arc<ServerTls>>,
    /// Require one of these tokens on every path but `/health`.
    pub tokens: Option<Arc<Tokens>>,
    /// Counts and slows wrong tokens (shared with the server's own port, if it has one).
    pub limiter: Arc<Limiter>,
}

impl HttpGuard {
    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// Requests refused for want of a valid token, and TLS handshakes that failed.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Requests without a token (a browser's first request is one).
    pub unauthenticated: AtomicU64,
    /// Requests with a wrong token.
    pub bad_tokens: AtomicU64,
    /// TLS handshakes that failed (and plain requests to an HTTPS port).
    pub tls_errors: AtomicU64,
}

/// A blocking HTTP server on a thread of its own; stopped (and joined) by [`HttpServer::stop`]
/// or when dropped.
pub struct HttpServer {
    addr: SocketAddr,
    scheme: &'static str,
    counters: Arc<HttpCounters>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("addr", &self.addr)
            .field("scheme", &self.scheme)
            .finish()
    }
}

impl HttpServer {
    /// Starts answering on `listener` with `handler`, at most [`MAX_CONNECTIONS`] at once,
    /// protected by `guard`.
    pub fn start(
        listener: TcpListener,
        handler: Arc<Handler>,
        guard: HttpGuard,
    ) -> std::io::Result<HttpServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let scheme = guard.scheme();
        let counters = Arc::new(HttpCounters::default());
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("inpath-http".into())
            .spawn(move || accept_loop(listener, handler, Arc::new(guard), c, flag))?;
        Ok(HttpServer {
            addr,
            scheme,
            counters,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it answers on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// Its refusal counters.
    pub fn counters(&self) -> &Arc<HttpCounters> {
        &self.counters
    }

    /// Stops accepting and waits for the accept thread to end.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            // Wakes the blocking accept; the loop then sees the flag.
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
            let _ = thread.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    listener: TcpListener,
    handler: Arc<Handler>,
    guard: Arc<HttpGuard>,
    counters: Arc<HttpCounters>,
    stop: Arc<AtomicBool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::SeqCst);
            // Plain text only: a TLS client then sees a handshake failure, which is the truth.
            if guard.tls.is_none() {
                let busy = Response::text(503, "too many connections; try again\n");
                let _ = answer_plain(stream, &busy);
            }
            continue;
        }
        let (handler, guard, counters, open) = (
            handler.clone(),
            guard.clone(),
            counters.clone(),
            open.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("inpath-http-conn".into())
            .spawn(move || {
                let _ = serve(stream, &*handler, &guard, &counters);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The closure (and its count) is gone with the failed spawn.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn answer_plain(mut stream: TcpStream, response: &Response) -> std::io::Result<()> {
    stream.set_write_timeout(Some(TIMEOUT))?;
    stream.write_all(&response.to_bytes(true))?;
    stream.shutdown(std::net::Shutdown::Both)
}

fn serve(
    tcp: TcpStream,
    handler: &Handler,
    guard: &HttpGuard,
    counters: &HttpCounters,
) -> std::io::Result<()> {
    tcp.set_read_timeout(Some(TIMEOUT))?;
    tcp.set_write_timeout(Some(TIMEOUT))?;
    let peer = tcp.peer_addr()?.ip();
    let mut stream = match &guard.tls {
        None => Stream::Plain(tcp),
        Some(tls) => match peek_first(&tcp, TIMEOUT) {
            FirstBytes::Nothing => return Ok(()),
            FirstBytes::Plain => {
                counters.tls_errors.fetch_add(1, Ordering::Relaxed);
                let text = "this port speaks HTTPS: use https:// in the address\n";
                return answer_plain(tcp, &Response::text(400, text));
            }
            FirstBytes::Tls => match accept(tcp, tls.config(), TIMEOUT) {
                Ok(s) => s,
                Err(_) => {
                    counters.tls_errors.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            },
        },
    };
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head_complete(&head) {
            break;
        }
        if head.len() > MAX_HEAD {
            let big = Response::text(431, "request head too large\n");
            stream.write_all(&big.to_bytes(true))?;
            stream.close();
            return Ok(());
        }
    }
    let bytes = match parse_head(&head) {
        Err(response) => response.to_bytes(true),
        Ok(request) => match refusal(&request, &head, guard, counters, peer) {
            Some(bytes) => bytes,
            None => handler(&request).to_bytes(request.wants_body()),
        },
    };
    stream.write_all(&bytes)?;
    stream.flush()?;
    stream.close();
    Ok(())
}

/// The `401` for a request that needs a token and has no valid one; `None` when it may pass.
fn refusal(
    request: &Request,
    head: &[u8],
    guard: &HttpGuard,
    counters: &HttpCounters,
    peer: IpAddr,
) -> Option<Vec<u8>> {
    let tokens = guard.tokens.as_ref()?;
    if request.path == "/health" {
        return None;
    }
    let detail = match authorization(head) {
        None => {
            counters.unauthenticated.fetch_add(1, Ordering::Relaxed);
            "a token is required: send `Authorization: Bearer TOKEN` (a browser asks for it as \
             the password, with any user name)"
        }
        Some(token) => {
            if let Some(wait) = guard.limiter.admit(peer) {
                std::thread::sleep(wait);
            }
            if tokens.check(&token).is_some() {
                return None;
            }
            guard.limiter.failed(peer);
            counters.bad_tokens.fetch_add(1, Ordering::Relaxed);
            "the token is not valid"
        }
    };
    let body = serde_json::json!({ "error": detail });
    let bytes = Response::pretty(401, &body).to_bytes(request.wants_body());
    Some(with_header(
        bytes,
        "WWW-Authenticate: Basic realm=\"inpath\", charset=\"UTF-8\"",
    ))
}

/// Inserts a header line after the status line of an answer's bytes.
fn with_header(mut bytes: Vec<u8>, header: &str) -> Vec<u8> {
    let at = bytes
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(bytes.len(), |p| p + 2);
    let line = format!("{header}\r\n");
    bytes.splice(at..at, line.into_bytes());
    bytes
}

/// The token of a request head's `Authorization` header: `Bearer TOKEN`, or the password
/// (else the user name) of `Basic BASE64(USER:PASSWORD)`.
pub fn authorization(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    for line in text.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("authorization") {
            continue;
        }
        let value = value.trim();
        let (scheme, rest) = value.split_once(' ')?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            return Some(rest.to_string());
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()?;
            let pair = String::from_utf8(decoded).ok()?;
            let (user, password) = pair.split_once(':').unwrap_or((&pair, ""));
            return Some(if password.is_empty() { user } else { password }.to_string());
        }
        return None;
    }
    None
}
