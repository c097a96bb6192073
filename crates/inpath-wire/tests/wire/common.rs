//! Shared helpers for the wire tests: servers on loopback, random streams, log reading, a port
//! that refuses, and the process's open-file limit (raised once: every test shares it).

use inpath_wire::{LogTarget, Server, ServerConfig, Shutdown};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Every test step is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(30);

pub struct Running {
    pub addr: SocketAddr,
    pub http: Option<SocketAddr>,
    pub hub: Arc<inpath_wire::Hub>,
    pub stop: Shutdown,
    pub task: JoinHandle<()>,
    pub log: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Running {
    /// Drains (with the configured grace) and waits for the server to write everything.
    pub async fn stop(self) -> (Vec<Value>, tempfile::TempDir) {
        self.stop.drain();
        tokio::time::timeout(LIMIT, self.task)
            .await
            .expect("server stops in time")
            .expect("server task ends cleanly");
        (read_log(&self.log), self.dir)
    }
}

/// Starts a server with `config` (its log goes to a file in a fresh temporary directory).
pub async fn start(mut config: ServerConfig) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    config.log = LogTarget::File(log.clone());
    let server = Server::bind(config).await.expect("server binds");
    let addr = server.local_addr();
    let http = server.http_addr();
    let hub = server.hub();
    let stop = server.shutdown();
    let task = tokio::spawn(server.run());
    Running {
        addr,
        http,
        hub,
        stop,
        task,
        log,
        dir,
    }
}

pub fn read_log(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every log line is JSON"))
        .collect()
}

pub fn events<'a>(log: &'a [Value], event: &str) -> Vec<&'a Value> {
    log.iter().filter(|v| v["event"] == event).collect()
}

/// A loopback port that refuses connections, and the socket that holds it: bound, so no other
/// test in this process (or another) can be given the port while the socket lives, but never
/// listening, so a connect is answered with a reset.
pub fn dead_port() -> (SocketAddr, socket2::Socket) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    (addr, socket)
}

/// How many descriptors the tests running beside one another in this process may hold on top of
/// what one test asks [`nofile_limit`] for (servers, logs, the runtime's own).
pub const NOFILE_SHARED: u64 = 1024;

/// The process's soft open-file limit after raising it (once, for the whole test binary: the
/// limit belongs to the process that every test shares) towards 8192 descriptors; 0 where it
/// cannot be read.
pub fn nofile_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| rlimit::increase_nofile_limit(8192).unwrap_or(0))
}

pub fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Writes `data` in random segments of 1 to `max_segment` bytes (flushing each with NODELAY
/// set, so they travel as separate TCP segments as far as the stack allows).
pub async fn write_segments<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    data: &[u8],
    seed: u64,
    max_segment: usize,
) -> std::io::Result<()> {
    let mut r = rng(seed);
    let mut at = 0;
    while at < data.len() {
        let n = r.gen_range(1..=max_segment).min(data.len() - at);
        w.write_all(&data[at..at + n]).await?;
        at += n;
    }
    Ok(())
}

pub async fn read_all<R: AsyncReadExt + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    r.read_to_end(&mut out).await?;
    Ok(out)
}

/// An echo server: writes back everything it reads, passes the half-close on.
pub async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.into_split();
                if tokio::io::copy(&mut r, &mut w).await.is_ok() {
                    let _ = w.shutdown().await;
                }
            });
        }
    });
    addr
}

/// Sends RST instead of FIN when dropped.
pub fn reset_on_drop(stream: &TcpStream) {
    socket2::SockRef::from(stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
}

/// Polls `f` until it holds (bounded by [`LIMIT`]).
pub async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A minimal HTTP/1.1 GET; returns (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_request(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).await
}

pub async fn http_request(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let text = String::from_utf8(read_all(&mut s).await.unwrap()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert_eq!(length, body.len(), "Content-Length matches the body");
    (status, body.to_string())
}

/// Checks the Prometheus text format: every sample line is `name{labels} value` with a known
/// TYPE; returns (name with labels, value) pairs.
pub fn parse_prometheus(text: &str) -> Vec<(String, f64)> {
    let mut typed = std::collections::HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let name = parts.next().unwrap();
            let kind = parts.next().unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            typed.insert(name.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels[1..labels.len() - 1].split(',') {
                    let (k, v) = pair.split_once('=').expect("label k=v");
                    assert!(
                        !k.is_empty() && v.starts_with('"') && v.ends_with('"'),
                        "{line}"
                    );
                }
            }
        }
        assert!(typed.contains(name), "{name} has no TYPE line");
        samples.push((
            series.to_string(),
            value.parse::<f64>().expect("numeric value"),
        ));
    }
    samples
}
