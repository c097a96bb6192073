//! The relay and the sink: accepting, forwarding, feeding taps, faults and shutdown.
//!
//! # Data path of one connection direction
//! ```text
//!  socket ──read──▶ buffer ──write_all──▶ other socket        (forwarded unchanged)
//!                     │ (shared, read-only)
//!                     └──▶ tap task: job splitter ──▶ taps     (in parallel with the write)
//! ```
//! Each tapped direction owns at most `depth` buffers of `buffer` bytes. A buffer returns to
//! the reader when the taps are done with it. When all are out:
//! - [`TapPolicy::Exact`] (the default): the reader waits (counted as back-pressure) and stops
//!   reading, so TCP flow control slows the sender. Nothing is skipped.
//! - [`TapPolicy::Lossy`]: the reader reads into one plain buffer of its own and forwards the
//!   bytes untapped; the tap task is told the length of the gap (consecutive gaps coalesced,
//!   sent before the next tapped chunk or at the end), and the taps drop the records it cuts.
//!
//! Memory per connection is bounded by `depth × buffer` per tapped direction (plus the plain
//! buffer under the lossy policy) and one `buffer` per untapped one, allocated on the first
//! readable byte.

use crate::hub::{lock, Conn, Hub, HubConfig, LogTarget, Outcome};
use crate::runner::{JobEnd, TapRunner};
use crate::transform::TransformFactory;
use crate::{Direction, JobSplit, Result, TapPolicy, WireError};
use inpath_taps::TapFactory;
use serde_json::json;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

/// Relay (forward and tap) or sink (receive and tap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Bump in the wire: forwards both directions unchanged, taps what passes.
    Relay,
    /// Receiving end: reads and taps, forwards nothing.
    Sink,
}

impl Mode {
    /// `relay` or `sink`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Relay => "relay",
            Mode::Sink => "sink",
        }
    }
}

/// Everything a relay or sink needs.
#[derive(Clone)]
pub struct ServerConfig {
    /// Relay or sink.
    pub mode: Mode,
    /// Where to accept connections (`HOST:PORT`; port 0 picks one).
    pub listen: String,
    /// Where to forward each connection (relay only).
    pub to: Option<String>,
    /// The taps, in order.
    pub taps: Vec<Arc<dyn TapFactory>>,
    /// Which directions are tapped (the sink taps `c2s` only).
    pub directions: Vec<Direction>,
    /// Where jobs end.
    pub split: JobSplit,
    /// Where to serve the HTTP results API, if anywhere.
    pub http: Option<String>,
    /// HTTPS and a token for the HTTP API (`inpath_net`; plain and open by default).
    pub http_guard: inpath_net::HttpGuard,
    /// Where result lines go.
    pub log: LogTarget,
    /// Close a connection after this long without a byte moving either way.
    pub idle_timeout: Option<Duration>,
    /// Give up connecting to the destination after this long.
    pub connect_timeout: Duration,
    /// On shutdown, let open connections finish by themselves for this long before closing
    /// them.
    pub grace: Duration,
    /// Bytes per read.
    pub buffer: usize,
    /// Buffers a tapped direction may have in flight (read but not yet tapped).
    pub depth: usize,
    /// What a tapped direction does when all `depth` buffers are with its taps: wait
    /// (exact, the default) or forward untapped and count the gap (lossy).
    pub tap_policy: TapPolicy,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Closed connections kept for the HTTP API.
    pub keep_closed: usize,
    /// Byte transforms per direction (the seal/unseal extension point; none exist yet).
    pub transforms: Vec<(Direction, Arc<dyn TransformFactory>)>,
}

impl ServerConfig {
    /// A relay from `listen` to `to` with the defaults: c2s tapped, a job per connection, no
    /// HTTP, results on stdout, 300 s idle timeout, 5 s connect timeout, 2 s grace, 128 KiB
    /// buffers, depth 4, the exact tap policy, 10,000 connections, 1,000 closed ones kept.
    pub fn relay(listen: impl Into<String>, to: impl Into<String>) -> Self {
        ServerConfig {
            mode: Mode::Relay,
            to: Some(to.into()),
            ..ServerConfig::sink(listen)
        }
    }

    /// A sink on `listen` with the same defaults as [`ServerConfig::relay`].
    pub fn sink(listen: impl Into<String>) -> Self {
        ServerConfig {
            mode: Mode::Sink,
            listen: listen.into(),
            to: None,
            taps: Vec::new(),
            directions: vec![Direction::C2s],
            split: JobSplit::Connection,
            http: None,
            http_guard: inpath_net::HttpGuard::default(),
            log: LogTarget::Stdout,
            idle_timeout: Some(Duration::from_secs(300)),
            connect_timeout: Duration::from_secs(5),
            grace: Duration::from_secs(2),
            buffer: 128 << 10,
            depth: 4,
            tap_policy: TapPolicy::Exact,
            max_connections: 10_000,
            keep_closed: 1000,
            transforms: Vec::new(),
        }
    }

    fn check(&self) -> Result<()> {
        let setting = |name, value: usize, valid: &str| WireError::Setting {
            name,
            value: value.to_string(),
            valid: valid.to_string(),
        };
        if !(512..=(64 << 20)).contains(&self.buffer) {
            return Err(setting("buffer", self.buffer, "512 bytes to 64 MiB"));
        }
        if !(1..=64).contains(&self.depth) {
            return Err(setting("depth", self.depth, "1 to 64"));
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(setting(
                "max-connections",
                self.max_connections,
                "1 to 1,000,000",
            ));
        }
        if let JobSplit::Bytes(n) = self.split {
            for tap in &self.taps {
                if let Some(width) = tap.record_width() {
                    if n % width as u64 != 0 {
                        return Err(WireError::Setting {
                            name: "job-bytes",
                            value: n.to_string(),
                            valid: format!(
                                "a multiple of {width} (the record width of tap {}), so no record straddles two jobs",
                                tap.describe()
                            ),
                        });
                    }
                }
            }
        }
        if self.tap_policy == TapPolicy::Lossy && self.split == JobSplit::Message {
            return Err(WireError::Setting {
                name: "tap-policy",
                value: "lossy".into(),
                valid: "exact with --job-per-message (a gap over a message header would lose \
                        the boundaries of every later message); use --job-bytes or a job per \
                        connection with lossy"
                    .into(),
            });
        }
        match (self.mode, &self.to) {
            (Mode::Relay, None) => {
                return Err(WireError::Address {
                    addr: String::new(),
                    detail: "a relay needs a destination (--to HOST:PORT)".into(),
                })
            }
            (Mode::Sink, Some(_)) => {
                return Err(WireError::Address {
                    addr: self.to.clone().unwrap_or_default(),
                    detail: "a sink forwards nothing; drop --to".into(),
                })
            }
            _ => {}
        }
        if self.mode == Mode::Sink
            && (self.directions.iter().any(|d| *d != Direction::C2s) || !self.transforms.is_empty())
        {
            return Err(WireError::Setting {
                name: "direction",
                value: "s2c".into(),
                valid: "a sink only receives (c2s) and forwards nothing to transform".into(),
            });
        }
        Ok(())
    }
}

/// Resolves `HOST:PORT` to one socket address.
pub async fn resolve(addr: &str) -> Result<SocketAddr> {
    let bad = |detail: String| WireError::Address {
        addr: addr.to_string(),
        detail,
    };
    if addr
        .rsplit_once(':')
        .is_none_or(|(_, port)| port.parse::<u16>().is_err())
    {
        return Err(bad(
            "expected HOST:PORT, for example 127.0.0.1:9000 or [::1]:9000".into(),
        ));
    }
    let mut addrs = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| bad(e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| bad("the name resolves to no address".into()))
}

/// Stop requests for a running server (cheap to clone).
#[derive(Clone)]
pub struct Shutdown(Arc<watch::Sender<u8>>);

const RUNNING: u8 = 0;
const DRAIN: u8 = 1;
const NOW: u8 = 2;

impl Shutdown {
    /// Stop accepting; let open connections finish within the grace period, then close them.
    pub fn drain(&self) {
        self.0.send_if_modified(|s| {
            let changed = *s < DRAIN;
            *s = (*s).max(DRAIN);
            changed
        });
    }

    /// Close every connection now (open jobs are still finished and written).
    pub fn now(&self) {
        self.0.send_replace(NOW);
    }
}

async fn reached(rx: &mut watch::Receiver<u8>, level: u8) {
    loop {
        if *rx.borrow_and_update() >= level {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A bound relay or sink, ready to [`Server::run`].
pub struct Server {
    config: ServerConfig,
    listener: TcpListener,
    http: Option<TcpListener>,
    to: Option<SocketAddr>,
    hub: Arc<Hub>,
    stop: Arc<watch::Sender<u8>>,
}

async fn bind(addr: &str, what: &'static str) -> Result<TcpListener> {
    let resolved = resolve(addr).await?;
    // std's listener (SO_REUSEADDR off would refuse TIME_WAIT ports; tokio's bind sets it on
    // Unix), with a deep backlog for bursts of connections.
    let socket = match resolved {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .and_then(|s| s.set_reuseaddr(true).map(|_| s))
    .and_then(|s| s.bind(resolved).map(|_| s))
    .and_then(|s| s.listen(4096))
    .map_err(|source| WireError::Bind {
        addr: addr.to_string(),
        what,
        source,
    })?;
    Ok(socket)
}

impl Server {
    /// Checks the configuration, opens the results log and binds the listeners.
    pub async fn bind(config: ServerConfig) -> Result<Server> {
        config.check()?;
        let to = match &config.to {
            Some(to) => Some(resolve(to).await?),
            None => None,
        };
        let listener = bind(&config.listen, "connections").await?;
        let http = match &config.http {
            Some(addr) => Some(bind(addr, "http").await?),
            None => None,
        };
        let mut labels: Vec<String> = Vec::new();
        for tap in &config.taps {
            let name = tap.name().to_string();
            let n = labels
                .iter()
                .filter(|l| l.split('#').next() == Some(name.as_str()))
                .count();
            labels.push(if n == 0 {
                name
            } else {
                format!("{name}#{}", n + 1)
            });
        }
        let mut directions = config.directions.clone();
        directions.sort_by_key(|d| d.index());
        directions.dedup();
        let hub = Hub::new(
            HubConfig {
                mode: config.mode,
                taps: config.taps.clone(),
                labels,
                directions,
                split: config.split,
                policy: config.tap_policy,
                keep_closed: config.keep_closed,
            },
            &config.log,
        )?;
        Ok(Server {
            config,
            listener,
            http,
            to,
            hub: Arc::new(hub),
            stop: Arc::new(watch::channel(RUNNING).0),
        })
    }

    /// The address connections are accepted on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The HTTP API's address, if it is served.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The results hub (for library users: the same data as the HTTP API).
    pub fn hub(&self) -> Arc<Hub> {
        self.hub.clone()
    }

    /// A handle to stop the server.
    pub fn shutdown(&self) -> Shutdown {
        Shutdown(self.stop.clone())
    }

    /// Serves until [`Shutdown::drain`] (or `now`), then finishes every open job, writes the
    /// results and returns.
    pub async fn run(self) {
        let Server {
            config,
            listener,
            http,
            to,
            hub,
            stop,
        } = self;
        let local = listener.local_addr().ok();
        let http_addr = http.as_ref().and_then(|l| l.local_addr().ok());
        hub.log(&json!({
            "event": "listening",
            "mode": config.mode.name(),
            "listen": local.map(|a| a.to_string()),
            "to": to.map(|a| a.to_string()),
            "http": http_addr.map(|a| a.to_string()),
            "taps": config.taps.iter().map(|t| t.describe()).collect::<Vec<_>>(),
            "directions": config.directions.iter().map(|d| d.name()).collect::<Vec<_>>(),
            "split": config.split.name(),
            "tap_policy": config.tap_policy.name(),
        }));
        // The API answers on a thread of its own (inpath_net's server: plain or HTTPS, with an
        // optional token), stopped when the relay stops.
        let http_server = match http.map(|l| l.into_std()) {
            Some(Ok(l)) => {
                let api = crate::http::handler(hub.clone());
                match l
                    .set_nonblocking(false)
                    .and_then(|()| inpath_net::HttpServer::start(l, api, config.http_guard.clone()))
                {
                    Ok(s) => Some(s),
                    Err(e) => {
                        hub.log(&json!({"event": "http_error", "detail": e.to_string()}));
                        None
                    }
                }
            }
            Some(Err(e)) => {
                hub.log(&json!({"event": "http_error", "detail": e.to_string()}));
                None
            }
            None => None,
        };
        let limit = config.max_connections;
        let slots = Arc::new(Semaphore::new(limit));
        let ctx = Arc::new(Ctx {
            hub: hub.clone(),
            to,
            config,
        });
        let mut stop_rx = stop.subscribe();
        loop {
            let permit = tokio::select! {
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ = reached(&mut stop_rx, DRAIN) => break,
            };
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = reached(&mut stop_rx, DRAIN) => break,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let ctx = ctx.clone();
                    let stop_rx = stop.subscribe();
                    tokio::spawn(async move {
                        let _permit = permit;
                        handle(stream, peer, &ctx, stop_rx).await;
                    });
                }
                Err(e) => {
                    hub.metrics.accept_errors.fetch_add(1, Ordering::Relaxed);
                    hub.log(&json!({"event": "accept_error", "detail": e.to_string()}));
                    // Out of descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(listener);
        let open = hub.open_count();
        hub.log(&json!({"event": "draining", "open": open, "grace_seconds": ctx.config.grace.as_secs_f64()}));
        let all = u32::try_from(limit).unwrap_or(u32::MAX);
        tokio::select! {
            _ = slots.acquire_many(all) => {},
            _ = tokio::time::sleep(ctx.config.grace) => {},
            _ = reached(&mut stop_rx, NOW) => {},
        }
        stop.send_replace(NOW);
        // Every connection task holds a slot until its results are written.
        let _all = slots.acquire_many(all).await;
        if let Some(server) = http_server {
            tokio::task::spawn_blocking(move || server.stop())
                .await
                .ok();
        }
        let m = &hub.metrics;
        hub.log(&json!({
            "event": "stopped",
            "connections": m.accepted.load(Ordering::Relaxed),
            "jobs": m.jobs.load(Ordering::Relaxed),
            "bytes_c2s": m.bytes_read[0].load(Ordering::Relaxed),
            "bytes_s2c": m.bytes_read[1].load(Ordering::Relaxed),
        }));
    }

    /// Runs until `signal` completes (then drains), or until a second completion of `force`
    /// (then closes at once). For the CLI: `signal` is the first SIGINT/SIGTERM, `force` the
    /// second.
    pub async fn run_until(
        self,
        signal: impl Future<Output = ()>,
        force: impl Future<Output = ()>,
    ) {
        let shutdown = self.shutdown();
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            _ = &mut run => return,
            _ = signal => shutdown.drain(),
        }
        tokio::select! {
            _ = &mut run => {},
            _ = force => { shutdown.now(); run.await },
        }
    }
}

struct Ctx {
    hub: Arc<Hub>,
    to: Option<SocketAddr>,
    config: ServerConfig,
}

/// Which endpoint a socket error came from, and how to call it.
fn fault(side: &str, e: &std::io::Error) -> Outcome {
    use std::io::ErrorKind::*;
    let reset = matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe);
    let kind = match (side, reset) {
        ("client", true) => "client_reset",
        ("client", false) => "client_error",
        (_, true) => "destination_reset",
        (_, false) => "destination_error",
    };
    Outcome::new(kind, e.to_string())
}

/// Makes the socket send RST instead of FIN when it is closed: the far end must not mistake a
/// cut stream for a complete one.
fn abort_on_close(stream: &impl std::os::fd::AsFd) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

async fn handle(client: TcpStream, peer: SocketAddr, ctx: &Ctx, mut stop: watch::Receiver<u8>) {
    let hub = &ctx.hub;
    let conn = hub.open_conn(peer, ctx.to);
    let _ = client.set_nodelay(true);
    let dest = match ctx.to {
        None => None,
        Some(to) => {
            let connect = tokio::time::timeout(ctx.config.connect_timeout, TcpStream::connect(to));
            let result = tokio::select! {
                r = connect => r,
                _ = reached(&mut stop, NOW) => {
                    hub.close_conn(&conn, &Outcome::new("shutdown", "stopped while connecting"));
                    return;
                }
            };
            match result {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    Some(stream)
                }
                other => {
                    let outcome = match other {
                        Err(_) => Outcome::new(
                            "destination_timeout",
                            format!(
                                "no connection to {to} within {:?}",
                                ctx.config.connect_timeout
                            ),
                        ),
                        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                            Outcome::new("destination_refused", format!("{to}: {e}"))
                        }
                        Ok(Err(e)) => Outcome::new("destination_error", format!("{to}: {e}")),
                        Ok(Ok(_)) => unreachable!("handled above"),
                    };
                    // The client sees a reset, as if the destination had refused it directly.
                    abort_on_close(&client);
                    drop(client);
                    hub.close_conn(&conn, &outcome);
                    return;
                }
            }
        }
    };
    *lock(&conn.state) = "open";
    let (mut cr, mut cw) = client.into_split();
    let (mut dr, mut dw) = match dest {
        Some(dest) => {
            let (r, w) = dest.into_split();
            (Some(r), Some(w))
        }
        None => (None, None),
    };

    // Tap runners and their tasks, one per tapped direction.
    let mut feeds: [Option<Feed>; 2] = [None, None];
    let mut tap_tasks = Vec::new();
    if !ctx.config.taps.is_empty() {
        for &direction in &hub.config.directions {
            let runner = Arc::new(Mutex::new(TapRunner::new(
                hub.config.split,
                hub.config.policy == TapPolicy::Lossy,
                conn.id,
                conn.peer,
                direction,
            )));
            lock(&conn.runners).push((direction, runner.clone()));
            let (tx, rx) = mpsc::unbounded_channel();
            let (ret_tx, ret_rx) = mpsc::unbounded_channel();
            feeds[direction.index()] = Some(Feed {
                tx,
                ret: ret_rx,
                allocated: 0,
                gap: 0,
            });
            tap_tasks.push(tokio::spawn(tap_task(
                rx,
                ret_tx,
                runner,
                hub.clone(),
                conn.clone(),
            )));
        }
    }
    let transforms: [Option<Box<dyn crate::transform::Transform>>; 2] = {
        let mut t: [Option<Box<dyn crate::transform::Transform>>; 2] = [None, None];
        for (direction, factory) in &ctx.config.transforms {
            t[direction.index()] = Some(factory.make());
        }
        t
    };
    let [t_c2s, t_s2c] = transforms;
    let activity = AtomicU64::new(0);
    let cut = AtomicBool::new(false);
    let mut ok = [false; 2];
    let [feed_c2s, feed_s2c] = feeds;
    let sink = dr.is_none();
    let outcome = {
        let c2s = pump(
            &mut cr,
            dw.as_mut(),
            feed_c2s,
            t_c2s,
            Pumping {
                ctx,
                conn: &conn,
                direction: Direction::C2s,
                activity: &activity,
                cut: &cut,
            },
        );
        let s2c = async {
            match dr.as_mut() {
                Some(dr) => {
                    pump(
                        dr,
                        Some(&mut cw),
                        feed_s2c,
                        t_s2c,
                        Pumping {
                            ctx,
                            conn: &conn,
                            direction: Direction::S2c,
                            activity: &activity,
                            cut: &cut,
                        },
                    )
                    .await
                }
                // The sink never writes back; the client's direction alone decides.
                None => std::future::pending().await,
            }
        };
        tokio::pin!(c2s, s2c);
        loop {
            tokio::select! {
                r = &mut c2s, if !ok[0] => match r {
                    Ok(()) => ok[0] = true,
                    Err(e) => break e.outcome(Direction::C2s),
                },
                r = &mut s2c, if !ok[1] => match r {
                    Ok(()) => ok[1] = true,
                    Err(e) => break e.outcome(Direction::S2c),
                },
                _ = idle(&activity, conn.opened, ctx.config.idle_timeout) => {
                    break Outcome::new("idle_timeout", format!(
                        "no byte moved for {:?}", ctx.config.idle_timeout.unwrap_or_default()));
                }
                _ = reached(&mut stop, NOW) => break Outcome::new("shutdown", "closed by shutdown"),
            }
            if ok[0] && (ok[1] || sink) {
                break Outcome::new("closed", "");
            }
        }
    };
    *lock(&conn.state) = "closing";
    if matches!(outcome.kind, "closed" | "idle_timeout") {
        drop((cr, cw, dr, dw));
    } else {
        // Cut streams end with RST on both sides; `forget` keeps the write halves from
        // sending a FIN first, which the far end would take for a clean end.
        abort_on_close(cr.as_ref());
        cw.forget();
        if let Some(dr) = &dr {
            abort_on_close(dr.as_ref());
        }
        if let Some(dw) = dw {
            dw.forget();
        }
        drop((cr, dr));
    }
    for task in tap_tasks {
        let _ = task.await;
    }
    let runners: Vec<_> = lock(&conn.runners).clone();
    for (direction, runner) in runners {
        let end = if ok[direction.index()] {
            JobEnd {
                reason: "close".into(),
                complete: true,
            }
        } else {
            JobEnd {
                reason: outcome.kind.into(),
                complete: false,
            }
        };
        let finished = lock(&runner).close(&hub.runner_context(), &end);
        hub.jobs_done(&conn, finished.into_iter().collect());
    }
    hub.close_conn(&conn, &outcome);
}

async fn idle(activity: &AtomicU64, opened: Instant, timeout: Option<Duration>) {
    let Some(timeout) = timeout else {
        return std::future::pending().await;
    };
    loop {
        let last = opened + Duration::from_millis(activity.load(Ordering::Relaxed));
        let deadline = last + timeout;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline.into()).await;
    }
}

/// What the reader hands the tap task, in stream order.
enum Piece {
    /// The first `n` bytes of a pooled buffer (returned to the reader when tapped).
    Data(Arc<Vec<u8>>, usize),
    /// Bytes that were forwarded untapped (lossy tap policy).
    Gap(u64),
}

async fn tap_task(
    mut rx: mpsc::UnboundedReceiver<Piece>,
    ret: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    runner: Arc<Mutex<TapRunner>>,
    hub: Arc<Hub>,
    conn: Arc<Conn>,
) {
    while let Some(piece) = rx.recv().await {
        match piece {
            Piece::Data(buf, n) => {
                let finished = lock(&runner).feed(&buf[..n], &hub.runner_context());
                let _ = ret.send(buf);
                hub.jobs_done(&conn, finished);
                hub.metrics.backlog.fetch_sub(n as u64, Ordering::Relaxed);
            }
            Piece::Gap(n) => {
                let finished = lock(&runner).gap(n, &hub.runner_context());
                hub.jobs_done(&conn, finished);
            }
        }
    }
}

/// The buffers of one tapped direction: sent to the tap task, returned when tapped.
struct Feed {
    tx: mpsc::UnboundedSender<Piece>,
    ret: mpsc::UnboundedReceiver<Arc<Vec<u8>>>,
    allocated: usize,
    /// Lossy: bytes forwarded untapped since the last chunk sent (one gap, sent before the
    /// next chunk, or when the feed is dropped at the end of the stream).
    gap: u64,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.flush_gap();
    }
}

impl Feed {
    /// Sends the first `n` bytes of `buf` to the taps, after the gap before them, if any.
    fn send(&mut self, buf: Arc<Vec<u8>>, n: usize) {
        self.flush_gap();
        let _ = self.tx.send(Piece::Data(buf, n));
    }

    fn flush_gap(&mut self) {
        if self.gap > 0 {
            let _ = self.tx.send(Piece::Gap(std::mem::take(&mut self.gap)));
        }
    }

    /// A free buffer, or `None` when all `depth` are with the taps (lossy: never waits).
    fn try_take(&mut self, p: &Pumping<'_>) -> Option<Arc<Vec<u8>>> {
        let buf = match self.ret.try_recv() {
            Ok(buf) => buf,
            Err(_) if self.allocated < p.ctx.config.depth => {
                self.allocated += 1;
                Arc::new(vec![0; p.ctx.config.buffer])
            }
            Err(_) => return None,
        };
        Some(Self::sized(buf, p.ctx.config.buffer))
    }

    /// A free buffer; waits (back-pressure) when all `depth` buffers are with the taps.
    async fn take(&mut self, p: &Pumping<'_>) -> Arc<Vec<u8>> {
        if let Some(buf) = self.try_take(p) {
            return buf;
        }
        let size = p.ctx.config.buffer;
        let start = Instant::now();
        let buf = self.ret.recv().await;
        let nanos = start.elapsed().as_nanos() as u64;
        let m = &p.ctx.hub.metrics;
        m.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        m.backpressure_nanos.fetch_add(nanos, Ordering::Relaxed);
        p.conn.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        p.conn
            .backpressure_nanos
            .fetch_add(nanos, Ordering::Relaxed);
        Self::sized(buf.unwrap_or_else(|| Arc::new(vec![0; size])), size)
    }

    /// `buf`, unshared and `size` bytes long (a transform may have swapped in a buffer of
    /// another size).
    fn sized(mut buf: Arc<Vec<u8>>, size: usize) -> Arc<Vec<u8>> {
        match Arc::get_mut(&mut buf) {
            Some(b) => b.resize(size, 0),
            None => buf = Arc::new(vec![0; size]),
        }
        buf
    }
}

struct Pumping<'a> {
    ctx: &'a Ctx,
    conn: &'a Conn,
    direction: Direction,
    activity: &'a AtomicU64,
    /// Set by the first pump that fails. Linux reports a reset once: if the other direction's
    /// write consumed it, a read on the same socket then sees a plain end of stream, which
    /// must not be passed on as a clean half-close.
    cut: &'a AtomicBool,
}

impl Pumping<'_> {
    fn touch(&self) {
        let ms = self.conn.opened.elapsed().as_millis() as u64;
        self.activity.fetch_max(ms, Ordering::Relaxed);
    }

    fn read(&self, n: usize) {
        let d = self.direction.index();
        self.ctx.hub.metrics.bytes_read[d].fetch_add(n as u64, Ordering::Relaxed);
        self.conn.bytes[d].fetch_add(n as u64, Ordering::Relaxed);
        self.touch();
    }

    /// `n` bytes read were forwarded untapped (lossy tap policy).
    fn skipped(&self, n: usize) {
        let d = self.direction.index();
        self.ctx.hub.metrics.skipped_bytes[d].fetch_add(n as u64, Ordering::Relaxed);
        self.conn.skipped[d].fetch_add(n as u64, Ordering::Relaxed);
    }

    fn forwarded(&self, n: usize) {
        let d = self.direction.index();
        self.ctx.hub.metrics.bytes_forwarded[d].fetch_add(n as u64, Ordering::Relaxed);
        self.conn.forwarded[d].fetch_add(n as u64, Ordering::Relaxed);
        self.touch();
    }
}

enum PumpError {
    Read(std::io::Error),
    Write(std::io::Error),
    Transform(crate::transform::TransformError),
    /// The other direction failed first (see [`Pumping::cut`]).
    Cut,
}

impl PumpError {
    fn outcome(&self, direction: Direction) -> Outcome {
        let (reader, writer) = match direction {
            Direction::C2s => ("client", "destination"),
            Direction::S2c => ("destination", "client"),
        };
        match self {
            PumpError::Read(e) => fault(reader, e),
            PumpError::Write(e) => fault(writer, e),
            PumpError::Transform(e) => Outcome::new("transform_error", e.to_string()),
            PumpError::Cut => Outcome::new("cut", "the other direction failed"),
        }
    }
}

/// Moves one direction until end of stream: read, hand to the taps, write onward. At the end
/// of the stream the write side is shut down (half-close passes through).
async fn pump(
    reader: &mut OwnedReadHalf,
    writer: Option<&mut OwnedWriteHalf>,
    feed: Option<Feed>,
    transform: Option<Box<dyn crate::transform::Transform>>,
    p: Pumping<'_>,
) -> Result<(), PumpError> {
    let cut = p.cut;
    let result = pump_inner(reader, writer, feed, transform, p).await;
    if result.is_err() {
        cut.store(true, Ordering::Relaxed);
    }
    result
}

async fn pump_inner(
    reader: &mut OwnedReadHalf,
    mut writer: Option<&mut OwnedWriteHalf>,
    mut feed: Option<Feed>,
    mut transform: Option<Box<dyn crate::transform::Transform>>,
    p: Pumping<'_>,
) -> Result<(), PumpError> {
    // Allocate nothing until the first byte (or the end) arrives: idle connections are cheap.
    reader.readable().await.map_err(PumpError::Read)?;
    let mut plain: Vec<u8> = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let hub = &p.ctx.hub;
    let lossy = p.ctx.config.tap_policy == TapPolicy::Lossy;
    loop {
        let pooled = match feed.as_mut() {
            // Lossy: choose once bytes are there, so a buffer freed while the reader waited
            // for them is used.
            Some(f) if lossy => {
                reader.readable().await.map_err(PumpError::Read)?;
                f.try_take(&p)
            }
            Some(f) => Some(f.take(&p).await),
            None => None,
        };
        match (feed.as_mut(), pooled) {
            (Some(f), Some(mut buf)) => {
                let n = match Arc::get_mut(&mut buf) {
                    Some(b) => reader.read(&mut b[..]).await.map_err(PumpError::Read)?,
                    None => unreachable!("Feed::take returns an unshared buffer"),
                };
                if n == 0 {
                    break;
                }
                p.read(n);
                match transform.as_mut() {
                    None => {
                        hub.metrics.backlog.fetch_add(n as u64, Ordering::Relaxed);
                        f.send(buf.clone(), n);
                        if let Some(w) = writer.as_mut() {
                            w.write_all(&buf[..n]).await.map_err(PumpError::Write)?;
                            p.forwarded(n);
                        }
                    }
                    Some(t) => {
                        out.clear();
                        t.push(&buf[..n], &mut out).map_err(PumpError::Transform)?;
                        // Taps see the clear side: the input of a sealing transform, the
                        // output of an unsealing one. The pooled buffer carries what they see.
                        let tapped = if t.taps_see_output() {
                            let Some(b) = Arc::get_mut(&mut buf) else {
                                unreachable!("not shared before it is sent")
                            };
                            std::mem::swap(b, &mut out);
                            b.len()
                        } else {
                            n
                        };
                        hub.metrics
                            .backlog
                            .fetch_add(tapped as u64, Ordering::Relaxed);
                        f.send(buf.clone(), tapped);
                        let onward: &[u8] = if t.taps_see_output() {
                            &buf[..tapped]
                        } else {
                            &out
                        };
                        if let Some(w) = writer.as_mut() {
                            w.write_all(onward).await.map_err(PumpError::Write)?;
                            p.forwarded(onward.len());
                        }
                    }
                }
            }
            // An untapped direction; or lossy, with every pooled buffer still with the taps:
            // the bytes pass untapped and the taps are told how many they missed.
            (untapped, _) => {
                if plain.is_empty() {
                    plain = vec![0; p.ctx.config.buffer];
                }
                let n = reader.read(&mut plain).await.map_err(PumpError::Read)?;
                if n == 0 {
                    break;
                }
                p.read(n);
                let (bytes, tap_side): (&[u8], usize) = match transform.as_mut() {
                    None => (&plain[..n], n),
                    Some(t) => {
                        out.clear();
                        t.push(&plain[..n], &mut out)
                            .map_err(PumpError::Transform)?;
                        // The taps would have seen the clear side (as above).
                        (&out, if t.taps_see_output() { out.len() } else { n })
                    }
                };
                if let Some(f) = untapped {
                    f.gap += tap_side as u64;
                    p.skipped(tap_side);
                }
                if let Some(w) = writer.as_mut() {
                    w.write_all(bytes).await.map_err(PumpError::Write)?;
                    p.forwarded(bytes.len());
                }
            }
        }
    }
    if let Some(t) = transform.as_mut() {
        out.clear();
        t.finish(&mut out).map_err(PumpError::Transform)?;
        if !out.is_empty() {
            if let Some(w) = writer.as_mut() {
                w.write_all(&out).await.map_err(PumpError::Write)?;
                p.forwarded(out.len());
            }
            if let (Some(f), true) = (feed.as_mut(), t.taps_see_output()) {
                let n = out.len();
                hub.metrics.backlog.fetch_add(n as u64, Ordering::Relaxed);
                // One buffer more in the pool; it is resized when reused.
                f.allocated += 1;
                f.send(Arc::new(std::mem::take(&mut out)), n);
            }
        }
    }
    if p.cut.load(Ordering::Relaxed) {
        return Err(PumpError::Cut);
    }
    if let Some(w) = writer {
        w.shutdown().await.map_err(PumpError::Write)?;
    }
    Ok(())
}
