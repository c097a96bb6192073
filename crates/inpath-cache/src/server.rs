//! The TCP server: a tokio runtime with `threads` workers, one task per connection, periodic
//! log flushes and checkpoints, clean shutdown (SIGTERM/SIGINT or [`Server::stop`]) with a final
//! checkpoint.

use crate::error::{CacheError, Result};
use crate::proto::{self, Step};
use crate::store::Store;
use crate::types::{Protocol, Settings, StoreConfig};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to listen on (port 0 picks a free one).
    pub listen: String,
    pub threads: usize,
    pub max_conns: usize,
    pub store: StoreConfig,
    /// How often the open log chunk is handed to the file (the "last flush" bound on loss).
    pub sync_interval: Duration,
    /// How often the index is checkpointed.
    pub checkpoint_interval: Duration,
    /// Stop on SIGTERM / SIGINT.
    pub handle_signals: bool,
    /// Serve `stats` as JSON, metrics and the live page over HTTP here (`crate::live`).
    pub http: Option<String>,
    /// HTTPS and a token for the HTTP port (`inpath_net`).
    pub http_guard: inpath_net::HttpGuard,
    /// Connections the kernel queues before they are accepted (memcached's `-b`).
    pub backlog: u32,
    /// Whether the `shutdown` command stops the server (memcached's `-A`).
    pub shutdown_command: bool,
    /// Close a connection that waited this long for a request (memcached's `-o idle_timeout`);
    /// `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Log level (memcached's `-v` count): 2 logs every connection and request line.
    pub verbosity: u8,
    /// Text, binary, or either by a connection's first byte (memcached's `-B`).
    pub protocol: Protocol,
    /// Serve memcached's UDP protocol on this port of the listen address (memcached's `-U`;
    /// 0: off, memcached's default).
    pub udp_port: u16,
    /// Requests one connection runs in one go before the others get a turn (memcached's `-R`;
    /// 0: its default, 20).
    pub reqs_per_event: u32,
    /// Refuse `stats cachedump` (memcached's `-X`).
    pub dump_disabled: bool,
    /// TLS, more listeners and authentication (memcached's `-Z`, `-l a,notls:b`, `-Y`, `-S`;
    /// `crate::access`). The default protects nothing, as memcached's.
    pub security: crate::access::Security,
}

impl ServerConfig {
    pub fn new(listen: impl Into<String>, store: StoreConfig) -> ServerConfig {
        ServerConfig {
            listen: listen.into(),
            threads: 4,
            max_conns: 1024,
            store,
            sync_interval: Duration::from_millis(200),
            checkpoint_interval: Duration::from_secs(60),
            handle_signals: false,
            http: None,
            http_guard: inpath_net::HttpGuard::default(),
            backlog: 1024,
            shutdown_command: false,
            idle_timeout: None,
            protocol: Protocol::Auto,
            verbosity: 0,
            udp_port: 0,
            reqs_per_event: 0,
            dump_disabled: false,
            security: crate::access::Security::default(),
        }
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    listening_on: Vec<(SocketAddr, bool)>,
    store: Arc<Store>,
    stop_tx: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    http: Option<inpath_net::HttpServer>,
}

impl Server {
    /// Binds the address, recovers the store, and starts serving on a background runtime.
    pub fn start(cfg: ServerConfig) -> Result<Server> {
        if cfg.threads == 0 || cfg.max_conns == 0 {
            return Err(CacheError::Config(
                "threads and max connections must be at least 1".into(),
            ));
        }
        let listener = bind(&cfg.listen, cfg.backlog).map_err(|e| CacheError::Listen {
            addr: cfg.listen.clone(),
            source: e,
        })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener_fd = {
            use std::os::fd::AsRawFd;
            i64::from(listener.as_raw_fd())
        };
        // memcached's further `-l` addresses, each with its own TLS setting.
        let mut also = Vec::with_capacity(cfg.security.also_listen.len());
        let main_tls = cfg.security.tls.is_some() && cfg.security.main_tls;
        let mut listening_on = vec![(addr, main_tls)];
        for l in &cfg.security.also_listen {
            let sock = bind(&l.addr, cfg.backlog).map_err(|e| CacheError::Listen {
                addr: l.addr.clone(),
                source: e,
            })?;
            sock.set_nonblocking(true)?;
            let tls = cfg.security.tls.is_some() && l.tls;
            listening_on.push((sock.local_addr()?, tls));
            also.push((sock, tls));
        }
        let cfg_http_guard = cfg.http_guard.clone();
        let http_listener = match &cfg.http {
            Some(http) => {
                Some(
                    std::net::TcpListener::bind(http).map_err(|e| CacheError::Listen {
                        addr: http.clone(),
                        source: e,
                    })?,
                )
            }
            None => None,
        };
        // The server's settings travel with its store (`stats`, `stats settings`): two servers
        // in one process each report their own.
        // UDP on the same address as TCP (memcached's `-U`), bound before anything starts.
        let udp = match cfg.udp_port {
            0 => None,
            port => {
                let at = std::net::SocketAddr::new(addr.ip(), port);
                let sock = std::net::UdpSocket::bind(at).map_err(|e| CacheError::Listen {
                    addr: format!("udp {at}"),
                    source: e,
                })?;
                sock.set_nonblocking(true)?;
                Some(sock)
            }
        };
        let settings = Settings {
            threads: cfg.threads,
            max_conns: cfg.max_conns,
            shutdown_command: cfg.shutdown_command,
            idle_timeout_secs: cfg.idle_timeout.map_or(0, |d| d.as_secs()),
            verbosity: cfg.verbosity,
            tcp_port: addr.port(),
            udp_port: udp
                .as_ref()
                .and_then(|u| u.local_addr().ok())
                .map_or(0, |a| a.port()),
            backlog: cfg.backlog,
            protocol: cfg.protocol,
            reqs_per_event: cfg.reqs_per_event,
            dump_disabled: cfg.dump_disabled,
        };
        crate::flash::one_malloc_arena();
        let store = Store::open_with(cfg.store.clone(), settings)?;
        store.access.configure(&cfg.security);
        if cfg.store.verbose {
            let r = &store.recovery;
            eprintln!(
                "inpath cache: recovered {} items (checkpoint: {}; {} chunks, {} records replayed); \
                 flash I/O {}",
                r.items,
                r.checkpoint_note,
                r.chunks_replayed,
                r.records_replayed,
                if store.flash_direct() { "O_DIRECT" } else { "buffered (O_DIRECT refused by the filesystem)" }
            );
        }
        // A fresh checkpoint right away: the next recovery replays only what follows.
        store.checkpoint()?;
        // `stats conns` lists the listening socket while the server runs.
        let listening = store
            .conns
            .register(listener_fd, None, addr, crate::types::now_unix());
        // memcached's model: `threads` workers, each its own single-threaded event loop with
        // the connections handed to it; a main loop accepts, flushes the log and checkpoints.
        let idle = cfg.idle_timeout;
        let mut workers = Vec::with_capacity(cfg.threads);
        let mut senders = Vec::with_capacity(cfg.threads);
        let protocol = cfg.protocol;
        let security = std::sync::Arc::new(cfg.security.clone());
        for i in 0..cfg.threads {
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<(std::net::TcpStream, bool)>();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .max_blocking_threads(32)
                .build()?;
            let st = store.clone();
            let sec = security.clone();
            let handle = std::thread::Builder::new()
                .name(format!("inpath-cache-{i}"))
                .spawn(move || {
                    rt.block_on(async move {
                        while let Some((sock, tls)) = rx.recv().await {
                            let Ok(sock) = tokio::net::TcpStream::from_std(sock) else {
                                st.counters.curr_connections.fetch_sub(1, Relaxed);
                                continue;
                            };
                            let (st, sec) = (st.clone(), sec.clone());
                            tokio::spawn(async move {
                                accepted(sock, tls, &st, &sec, idle, protocol).await;
                                st.counters.curr_connections.fetch_sub(1, Relaxed);
                            });
                        }
                    });
                    rt.shutdown_timeout(Duration::from_secs(2));
                })?;
            workers.push(handle);
            senders.push(tx);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        // Ends the UDP thread when the accept loop ends, however it ends (a signal, the
        // shutdown command, `stop`): its sender is dropped there.
        let (udp_end_tx, udp_end_rx) = tokio::sync::oneshot::channel::<()>();
        if let Some(sock) = udp {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let st = store.clone();
            let handle = std::thread::Builder::new()
                .name("inpath-cache-udp".into())
                .spawn(move || {
                    rt.block_on(async move {
                        let sock = match tokio::net::UdpSocket::from_std(sock) {
                            Ok(s) => s,
                            Err(e) => {
                                eprintln!("inpath cache: udp: {e}");
                                return;
                            }
                        };
                        tokio::select! {
                            () = crate::udp::serve(&sock, &st, protocol) => {}
                            _ = udp_end_rx => {}
                        }
                    });
                    rt.shutdown_timeout(Duration::from_secs(2));
                })?;
            workers.push(handle);
        }
        let st = store.clone();
        let thread = std::thread::Builder::new()
            .name("inpath-cache-main".into())
            .spawn(move || {
                let listeners = {
                    let _guard = runtime.enter();
                    std::iter::once((listener, main_tls))
                        .chain(also)
                        .map(|(l, tls)| tokio::net::TcpListener::from_std(l).map(|l| (l, tls)))
                        .collect::<std::io::Result<Vec<_>>>()
                };
                match listeners {
                    Ok(l) => runtime.block_on(serve(l, st.clone(), cfg, stop_rx, senders)),
                    Err(e) => eprintln!("inpath cache: {e}"),
                }
                drop(udp_end_tx);
                runtime.shutdown_timeout(Duration::from_secs(2));
                for w in workers {
                    let _ = w.join();
                }
                drop(listening);
                if let Err(e) = st.close() {
                    eprintln!("inpath cache: final checkpoint failed: {e}");
                }
            })?;
        let http = match http_listener {
            Some(l) => Some(inpath_net::HttpServer::start(
                l,
                crate::live::http_api(store.clone(), addr.to_string()),
                cfg_http_guard,
            )?),
            None => None,
        };
        Ok(Server {
            addr,
            listening_on,
            store,
            stop_tx: Some(stop_tx),
            thread: Some(thread),
            http,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every address served (the main one first), each with whether it speaks TLS.
    pub fn listening_on(&self) -> &[(SocketAddr, bool)] {
        &self.listening_on
    }

    /// The HTTP API's address, when `http` was set.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }

    /// The HTTP API's scheme (`http` or `https`), when `http` was set.
    pub fn http_scheme(&self) -> Option<&'static str> {
        self.http.as_ref().map(|h| h.scheme())
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Clean shutdown: stop accepting, write the final checkpoint.
    pub fn stop(mut self) -> Result<()> {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(true);
        }
        self.join()
    }

    /// Runs until a signal stops the server (with `handle_signals`) or `stop` is called elsewhere.
    pub fn wait(mut self) -> Result<()> {
        self.join()
    }

    fn join(&mut self) -> Result<()> {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(http) = self.http.take() {
            http.stop();
        }
        self.store.close()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(true);
        }
        let _ = self.join();
    }
}

/// Sync ticks between two releases of the allocator's free pages (25: every 5 s at the default
/// 200 ms).
const TRIM_EVERY_TICKS: u64 = 25;

async fn serve(
    mut listeners: Vec<(tokio::net::TcpListener, bool)>,
    store: Arc<Store>,
    cfg: ServerConfig,
    mut stop: tokio::sync::watch::Receiver<bool>,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<(std::net::TcpStream, bool)>>,
) {
    // The first listener is accepted here; the others (memcached's further `-l` addresses)
    // each on a task of their own that hands its connections over.
    let (listener, main_tls) = listeners.remove(0);
    let (more_tx, mut more_rx) = tokio::sync::mpsc::channel(64);
    for (l, tls) in listeners {
        let tx = more_tx.clone();
        tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok(accepted) => {
                        if tx.send((accepted, tls)).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
    }
    drop(more_tx);
    let mut next = 0usize;
    let mut trim_at = 0u64;
    let mut sync_tick = tokio::time::interval(cfg.sync_interval);
    let mut ckpt_tick = tokio::time::interval(cfg.checkpoint_interval);
    ckpt_tick.tick().await;
    let signals = if cfg.handle_signals {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => Some((t, i)),
            _ => None,
        }
    } else {
        None
    };
    let mut signals = signals;
    let verbose = cfg.store.verbose;
    loop {
        let sig = async {
            match signals.as_mut() {
                Some((t, i)) => {
                    tokio::select! {
                        _ = t.recv() => "SIGTERM",
                        _ = i.recv() => "SIGINT",
                    }
                }
                None => std::future::pending().await,
            }
        };
        let accepted = async {
            tokio::select! {
                a = listener.accept() => a.map(|a| (a, main_tls)),
                Some((a, tls)) = more_rx.recv() => Ok((a, tls)),
            }
        };
        tokio::select! {
            accepted = accepted => {
                match accepted {
                    Ok(((sock, _), tls)) => {
                        let c = &store.counters;
                        if c.curr_connections.load(Relaxed) as usize >= cfg.max_conns {
                            c.rejected_connections.fetch_add(1, Relaxed);
                            tokio::spawn(async move {
                                let mut sock = sock;
                                let _ = sock.write_all(b"ERROR Too many open connections\r\n").await;
                            });
                            continue;
                        }
                        c.curr_connections.fetch_add(1, Relaxed);
                        c.total_connections.fetch_add(1, Relaxed);
                        let _ = sock.set_nodelay(true);
                        match sock.into_std() {
                            Ok(std_sock) => {
                                next = (next + 1) % workers.len();
                                if workers[next].send((std_sock, tls)).is_err() {
                                    c.curr_connections.fetch_sub(1, Relaxed);
                                }
                            }
                            Err(_) => {
                                c.curr_connections.fetch_sub(1, Relaxed);
                            }
                        }
                    }
                    Err(e) => {
                        // Out of descriptors and the like: back off briefly, keep serving.
                        if verbose {
                            eprintln!("inpath cache: accept: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            _ = sync_tick.tick() => {
                store.flush_log();
                trim_at += 1;
                if trim_at.is_multiple_of(TRIM_EVERY_TICKS) {
                    // Values evicted from DRAM leave free room scattered over the heap: give
                    // its whole pages back (tests/cache/memory.rs bounds the process's memory).
                    let t = std::time::Instant::now();
                    crate::flash::release_free_memory();
                    if verbose && t.elapsed() > Duration::from_millis(20) {
                        eprintln!("inpath cache: returning free memory took {:?}", t.elapsed());
                    }
                }
            }
            _ = ckpt_tick.tick() => {
                let st = store.clone();
                let t = std::time::Instant::now();
                let r = tokio::task::spawn_blocking(move || st.checkpoint()).await;
                if verbose {
                    eprintln!("inpath cache: checkpoint written in {:?}", t.elapsed());
                }
                if let Ok(Err(e)) = r {
                    eprintln!("inpath cache: checkpoint failed: {e}");
                }
            }
            name = sig => {
                eprintln!("inpath cache: {name}: shutting down (final checkpoint)");
                break;
            }
            () = store.shutdown_requested() => {
                eprintln!("inpath cache: shutdown command: shutting down (final checkpoint)");
                break;
            }
            _ = stop.changed() => break,
        }
    }
}

/// A connection handed to a worker: the TLS handshake first on a TLS listener (counted in
/// `ssl_handshake_errors` when it fails), then the requests.
async fn accepted(
    sock: tokio::net::TcpStream,
    tls: bool,
    store: &Arc<Store>,
    security: &crate::access::Security,
    idle_timeout: Option<Duration>,
    protocol: Protocol,
) {
    let fd = {
        use std::os::fd::AsRawFd;
        i64::from(sock.as_raw_fd())
    };
    let (peer, local) = (sock.peer_addr().ok(), sock.local_addr().ok());
    let on = Endpoint {
        fd,
        peer,
        local,
        tls,
    };
    match (tls, &security.tls) {
        (true, Some(config)) => {
            // A plain client gets no TLS alert it could not read: the connection closes, as
            // memcached closes it.
            let mut first = [0u8; 3];
            let peeked = tokio::time::timeout(TLS_HANDSHAKE, sock.peek(&mut first)).await;
            let plain = match peeked {
                Ok(Ok(n)) => n == 0 || !inpath_net::tls::looks_like_tls(&first[..n]),
                _ => true,
            };
            if plain {
                store.access.ssl_handshake_errors.fetch_add(1, Relaxed);
                if store.verbosity() >= 1 {
                    eprintln!("<{fd} not a TLS handshake on a TLS listener: closed");
                }
                return;
            }
            let acceptor = inpath_net::tokio_rustls::TlsAcceptor::from(config.config());
            let handshake = tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(sock)).await;
            match handshake {
                Ok(Ok(stream)) => {
                    connection(stream, on, store, security, idle_timeout, protocol).await
                }
                Ok(Err(e)) => {
                    store.access.ssl_handshake_errors.fetch_add(1, Relaxed);
                    if store.verbosity() >= 1 {
                        eprintln!(
                            "<{fd} TLS handshake failed: {}",
                            inpath_net::tls::describe_io(&e, true)
                        );
                    }
                }
                Err(_) => {
                    store.access.ssl_handshake_errors.fetch_add(1, Relaxed);
                    if store.verbosity() >= 1 {
                        eprintln!("<{fd} TLS handshake timed out");
                    }
                }
            }
        }
        _ => connection(sock, on, store, security, idle_timeout, protocol).await,
    }
}

/// How long a client has to finish its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// Where a connection came in.
struct Endpoint {
    fd: i64,
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
    tls: bool,
}

async fn connection<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut sock: S,
    on: Endpoint,
    store: &Arc<Store>,
    security: &crate::access::Security,
    idle_timeout: Option<Duration>,
    protocol: Protocol,
) {
    let fd = on.fd;
    // memcached's -vv: connections, and each request's line with its reply's first line.
    let chatty = || store.verbosity() >= 2;
    if chatty() {
        eprintln!("<{fd} new auto-negotiating client connection");
    }
    let registered = match (on.peer, on.local) {
        (Some(peer), Some(local)) => Some(store.conns.register(
            fd,
            Some(peer),
            local,
            crate::types::now_unix(),
        )),
        _ => None,
    };
    let mut gate = crate::gate::Gate::new(security, on.tls);
    let peer_ip = on.peer.map(|p| p.ip());
    let state = registered.as_ref().map(|r| r.state.clone());
    let _closed = Closed { fd, store };
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0usize;
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut swallow = 0usize;
    let counters = &store.counters;
    // Binary or text: fixed by `protocol`, or under Auto by the connection's first byte.
    let mut binary = match protocol {
        Protocol::Ascii => Some(false),
        Protocol::Binary => Some(true),
        Protocol::Auto => None,
    };
    let per_event = store.settings().reqs_per_event();
    loop {
        // Answer every whole request in the buffer, then write the replies in one go.
        let mut close = false;
        let mut served = 0u32;
        loop {
            if swallow > 0 {
                let n = swallow.min(buf.len() - start);
                start += n;
                swallow -= n;
                if swallow > 0 {
                    break;
                }
            }
            if start == buf.len() {
                break;
            }
            let decided = binary.is_some();
            let is_binary = *binary.get_or_insert(buf[start] == proto::binary::REQUEST_MAGIC);
            if !decided && chatty() {
                let name = if is_binary { "binary" } else { "ascii" };
                eprintln!("{fd}: Client using the {name} protocol");
            }
            let mark = out.len();
            let step = match gate.step(security, store, peer_ip, &buf[start..], is_binary, &mut out)
            {
                crate::gate::Gated::Done(step) => step,
                crate::gate::Gated::Wait(wait) => {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                crate::gate::Gated::Pass if is_binary => {
                    proto::binary::step(store, &buf[start..], &mut out).await
                }
                crate::gate::Gated::Pass => proto::step(store, &buf[start..], &mut out).await,
            };
            if chatty() && !is_binary && !matches!(step, Step::NeedMore) {
                log_exchange(fd, &buf[start..], &out[mark..]);
            }
            match step {
                Step::NeedMore => break,
                Step::Done(n) => {
                    start += n;
                    served += 1;
                    if served >= per_event && start < buf.len() {
                        // memcached's -R: after that many requests in one go, the replies go
                        // out and the other connections of this thread get a turn.
                        served = 0;
                        counters.conn_yields.fetch_add(1, Relaxed);
                        if !out.is_empty() {
                            if sock.write_all(&out).await.is_err() {
                                return;
                            }
                            counters.bytes_written.fetch_add(out.len() as u64, Relaxed);
                            out.clear();
                        }
                        tokio::task::yield_now().await;
                    }
                }
                Step::Swallow(n, s) => {
                    start += n;
                    swallow = s;
                }
                Step::Close => {
                    close = true;
                    break;
                }
                Step::Resume { consumed, prefix } => {
                    // The rest of a long multiget: its command goes in front of the remaining
                    // keys, in place (the prefix is never longer than what was consumed).
                    let Some(back) = consumed.checked_sub(prefix.len()) else {
                        close = true;
                        break;
                    };
                    let at = start + back;
                    buf[at..at + prefix.len()].copy_from_slice(&prefix);
                    start = at;
                }
            }
            if out.len() > proto::OUT_CHUNK {
                if sock.write_all(&out).await.is_err() {
                    return;
                }
                counters.bytes_written.fetch_add(out.len() as u64, Relaxed);
                out.clear();
            }
        }
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                return;
            }
            counters.bytes_written.fetch_add(out.len() as u64, Relaxed);
            out.clear();
        }
        if close {
            linger(sock).await;
            return;
        }
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(buf.capacity().max(16 * 1024));
        }
        if let Some(s) = &state {
            s.set(false, 0);
        }
        let idle = buf.len() == start;
        let read = sock.read_buf(&mut buf);
        let read = match idle_timeout {
            // An idle connection (nothing half-read) past the limit is closed, as memcached.
            Some(limit) if idle => match tokio::time::timeout(limit, read).await {
                Ok(r) => r,
                Err(_) => {
                    counters.idle_kicks.fetch_add(1, Relaxed);
                    return;
                }
            },
            _ => read.await,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                counters.bytes_read.fetch_add(n as u64, Relaxed);
                if let Some(s) = &state {
                    s.set(true, crate::types::now_unix());
                }
            }
        }
        // A connection idling with a huge buffer gives memory back.
        if buf.is_empty() && buf.capacity() > 4 << 20 {
            buf = Vec::with_capacity(16 * 1024);
        }
    }
}

/// Closes after an error that ends the connection (`CLIENT_ERROR line too long`) or a `quit`:
/// the replies written so far go out with a FIN, then what the client still sends is read and
/// dropped (at most 4 MiB, for at most 2 s) before the socket closes. Closing with unread input
/// makes the kernel answer with a reset, which throws away replies not yet sent, the error line
/// among them.
async fn linger<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut sock: S) {
    let _ = sock.shutdown().await;
    let mut sink = vec![0u8; 16 * 1024];
    let drain = async {
        let mut left = 4usize << 20;
        while left > 0 {
            match sock.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

/// Logs a connection's end at `-vv`, however the connection ends.
struct Closed<'a> {
    fd: i64,
    store: &'a Store,
}

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        if self.store.verbosity() >= 2 {
            eprintln!("<{} connection closed.", self.fd);
        }
    }
}

/// `-vv`: a text request's command line (`<fd line`) and its reply's first line (`>fd line`),
/// each cut at 250 bytes (a value's data is never logged).
fn log_exchange(fd: i64, request: &[u8], reply: &[u8]) {
    let first = |b: &[u8]| {
        let end = memchr::memchr(b'\n', b).unwrap_or(b.len()).min(250);
        let line = &b[..end];
        String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned()
    };
    eprintln!("<{fd} {}", first(request));
    if !reply.is_empty() {
        eprintln!(">{fd} {}", first(reply));
    }
}

/// Binds `addr` (the first of its addresses that binds) with a listen backlog of `backlog`
/// connections and `SO_REUSEADDR`, as memcached does.
fn bind(addr: &str, backlog: u32) -> std::io::Result<std::net::TcpListener> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for sa in addr.to_socket_addrs()? {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(sa),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        let backlog = i32::try_from(backlog).unwrap_or(i32::MAX);
        match socket
            .bind(&sa.into())
            .and_then(|()| socket.listen(backlog))
        {
            Ok(()) => return Ok(socket.into()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address names no host",
        )
    }))
}
