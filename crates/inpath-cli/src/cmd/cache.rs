//! `inpath cache`: the BlueCache engine as a memcached-compatible server (`serve`) and its load
//! generator (`bench`). docs/cache.md.

mod security;

use crate::common::{parse_size, SplitMix};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use inpath_cache::{Protocol, Server, ServerConfig, StoreConfig};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `inpath cache`.
#[derive(Args)]
pub struct CacheArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Serve the memcached text, meta and binary protocol with a DRAM index and a flash tier
    /// (or from DRAM alone, as memcached, without --flash).
    #[command(after_help = "Examples:
  inpath cache serve --listen 127.0.0.1:11211 --memory 256MiB --flash /var/cache/inpath.flash --flash-size 8GiB
  inpath cache serve -p 11211 -l 127.0.0.1 -m 1024 -t 4 -c 4096 -I 1m --flash /ssd/cache.flash

  inpath cache serve --config /etc/memcached.conf --flash /var/cache/inpath.flash
  inpath cache serve -l 10.0.0.5,notls:127.0.0.1:11212 -Z \
      -o ssl_chain_cert=tls/server.pem,ssl_key=tls/server.key,ssl_ca_cert=tls/ca.pem,ssl_verify_mode=2
  inpath cache serve -l 10.0.0.5 -Z -o ssl_chain_cert=tls/server.pem,ssl_key=tls/server.key -Y users.txt

memcached's own command line works too: every option of memcached 1.6's -h is taken with
memcached's meaning (-p -l -m -t -c -I -U 0 -d -P -u -r -k -F -B -b -v -vv, -o options that
apply, -A, -M without --flash, -C, -Z with the ssl_* options and notls:, -Y, -S) or refused by
name saying why (-s, extstore...). An address beyond loopback needs TLS and authentication, or
--insecure-no-auth; without -l the port is on loopback. See docs/SECURITY.md.
Without --flash the cache runs from DRAM alone, as memcached does. --config reads a
memcached config file such as Debian's /etc/memcached.conf. SIGTERM or SIGINT shuts down cleanly
with a final checkpoint; a restart, clean or after a crash, serves again what was flushed (every
--sync-ms). See docs/cache.md, section Migrating from memcached.")]
    Serve(Box<ServeArgs>),
    /// Load generator: Zipf keys, get/set mix, optional look-aside backend delay.
    #[command(after_help = "Examples:
  inpath cache bench --server 127.0.0.1:11211 --keys 100000 --ops 200000 --value-size 1024
  inpath cache bench --server 127.0.0.1:11211 --keys 600000 --get-ratio 0.95 --backend-delay-us 200 --json")]
    Bench(BenchArgs),
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Worker threads (memcached -t) [default: 4]").short('t')))]
pub struct ServeArgs {
    /// Address to listen on (HOST:PORT). Beyond loopback it needs TLS and authentication
    /// (-Z with ssl_verify_mode=2, -Y or -S), or --insecure-no-auth.
    #[arg(long)]
    listen: Option<String>,
    /// TCP port (memcached -p), on the -l addresses or, without -l, on loopback (127.0.0.1;
    /// memcached listens on every interface).
    #[arg(short = 'p', long = "port")]
    port: Option<u16>,
    /// Addresses to listen on (memcached -l): HOST, HOST:PORT, [V6]:PORT or *, separated by
    /// commas; under -Z a notls: prefix serves that one in plain text.
    #[arg(short = 'l', long = "listen-addr")]
    listen_addr: Option<String>,
    /// DRAM budget: index, log buffers and hot values (e.g. 256MiB).
    #[arg(long, default_value = "256MiB")]
    memory: String,
    /// DRAM budget in megabytes (memcached -m); overrides --memory.
    #[arg(short = 'm', value_name = "MEGABYTES")]
    memory_mb: Option<u64>,
    /// The flash file (created when missing). Without it the cache runs from DRAM alone, as
    /// memcached: same index and eviction, nothing kept across restarts.
    #[arg(long)]
    flash: Option<PathBuf>,
    /// Size of the flash file.
    #[arg(long, default_value = "8GiB")]
    flash_size: String,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    web: crate::security::HttpArgs,
    /// Most simultaneous connections (memcached -c).
    #[arg(short = 'c', long = "max-conns", default_value_t = 1024, value_parser = crate::common::parse_max_connections)]
    max_conns: usize,
    /// Largest value (memcached -I), e.g. 1m, 512k; at most 2 MiB - 1.
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    item_size: String,
    /// Expected average item size: the index gets flash-size / this many entries [default:
    /// 1KiB, or larger where that index would take more than half of the memory].
    #[arg(long)]
    avg_item_size: Option<String>,
    /// How often the open log chunk is written to the flash file (loss bound on a crash).
    #[arg(long, default_value_t = 200)]
    sync_ms: u64,
    /// How often the index is checkpointed.
    #[arg(long, default_value_t = 60)]
    checkpoint_secs: u64,
    /// Log more on standard error (memcached -v; -vv and -vvv are taken as -v).
    #[arg(short = 'v', long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Read options from this memcached config file first (Debian's /etc/memcached.conf: options
    /// a line, `#` comments, `logfile PATH`); the command line's options win.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Append the log (standard error) to this file (`logfile` in a memcached config file).
    #[arg(long, value_name = "FILE")]
    logfile: Option<PathBuf>,
    /// UDP port (memcached -U): memcached's UDP protocol on the listen address; 0 (the
    /// default) is off.
    #[arg(short = 'U', long = "udp-port", value_name = "PORT")]
    udp_port: Option<u16>,
    /// Run in the background (memcached -d): standard input and output closed, the log to
    /// --logfile or nowhere. A service manager that expects the foreground needs no -d.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Write the process id to this file (memcached -P); removed on a clean stop.
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pidfile: Option<PathBuf>,
    /// Run as this user when started as root (memcached -u): the user must be able to write the
    /// flash file and its checkpoint. Ignored when not root, as memcached does.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// Raise the core file limit to the hard limit (memcached -r).
    #[arg(short = 'r', long = "enable-coredumps")]
    enable_coredumps: bool,
    /// Lock all memory of the process in RAM (memcached -k); a warning if the system refuses.
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Refuse flush_all (memcached -F): `CLIENT_ERROR flush_all not allowed`.
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// Protocol (memcached -B): ascii (text and meta), binary, or auto (the default: each
    /// connection by its first byte).
    #[arg(short = 'B', long = "protocol", value_name = "NAME")]
    protocol: Option<String>,
    /// Connections the kernel queues before they are accepted (memcached -b).
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    backlog: u32,
    /// memcached's extended options (-o a,b=1): those that apply are taken, the rest refused
    /// by name (docs/cache.md lists each).
    #[arg(short = 'o', long = "extended", value_name = "OPTIONS", action = clap::ArgAction::Append)]
    extended: Vec<String>,
    /// Print the version and exit (memcached -V).
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// Print the license and exit (memcached -i).
    #[arg(short = 'i', long = "license")]
    license: bool,
    /// memcached -f, -n, -L, -W: taken and without effect (no slab allocator, no large pages,
    /// no watch to disable); -R (requests per event) and -X (no cachedump) as memcached.
    #[arg(short = 'f', long = "slab-growth-factor", hide = true)]
    slab_growth_factor: Option<f64>,
    #[arg(short = 'n', long = "slab-min-size", hide = true)]
    slab_min_size: Option<u64>,
    #[arg(short = 'L', long = "enable-largepages", hide = true)]
    largepages: bool,
    #[arg(short = 'R', long = "max-reqs-per-event", hide = true)]
    max_reqs_per_event: Option<u64>,
    #[arg(short = 'X', long = "disable-dumping", hide = true)]
    disable_dumping: bool,
    #[arg(short = 'W', long = "disable-watch", hide = true)]
    disable_watch: bool,
    /// Let the `shutdown` command stop the server (memcached -A).
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// Return `SERVER_ERROR out of memory` instead of evicting when memory is full (memcached
    /// -M; DRAM-only mode: the flash log always reclaims its oldest chunk).
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// No CAS values: gets reports 0 and cas is not checked (memcached -C).
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// memcached options inpath refuses, by name (-s, -a, -D, -e).
    #[arg(short = 's', long = "unix-socket", hide = true)]
    unix_socket: Option<String>,
    #[arg(short = 'a', long = "unix-mask", hide = true)]
    unix_mask: Option<String>,
    #[arg(short = 'D', hide = true)]
    prefix_delimiter: Option<String>,
    #[arg(short = 'e', long = "memory-file", hide = true)]
    memory_file: Option<String>,
    #[command(flatten)]
    security: security::SecurityArgs,
    /// Seal every flash record (key and value) with the seal engine: compress, then
    /// AES-256-GCM with the first key of this key file (`inpath seal keygen`). A stolen flash
    /// file then reveals only record sizes and expiry times.
    #[arg(long, value_name = "KEYFILE")]
    seal_key: Option<PathBuf>,
    /// Compression of sealed records: none, lz4, zstd, snappy, deflate.
    #[arg(long, default_value = "lz4", value_name = "ALGO")]
    seal_compress: String,
}

/// The seal engine behind the cache's flash records.
struct FlashSeal {
    sealer: std::sync::Mutex<inpath_seal::Sealer>,
    unsealer: inpath_seal::Unsealer,
    describe: String,
}

impl inpath_cache::store::RecordSeal for FlashSeal {
    fn seal(&self, plain: &[u8]) -> std::result::Result<Vec<u8>, inpath_cache::store::SealError> {
        let mut s = self.sealer.lock().unwrap_or_else(|p| p.into_inner());
        s.seal(plain).map_err(Into::into)
    }
    fn unseal(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        self.unsealer.unseal(sealed).ok()
    }
    fn describe(&self) -> String {
        self.describe.clone()
    }
}

fn flash_seal(path: &std::path::Path, compress: &str) -> Result<inpath_cache::store::SealHook> {
    let keys = crate::common::read_keys(path, false)?;
    let key = keys
        .ring
        .get(keys.first_id)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let compression = inpath_seal::Compression::parse(compress)
        .map_err(|e| anyhow::anyhow!("--seal-compress: {e}"))?;
    let config = inpath_seal::SealConfig {
        compression,
        cipher: inpath_seal::Cipher::Gcm,
    };
    let sealer = inpath_seal::Sealer::new(config, Some((keys.first_id, key)))
        .map_err(|e| anyhow::anyhow!("--seal-key {}: {e}", path.display()))?;
    let describe = format!("{}+aes256-gcm", compression.describe());
    Ok(inpath_cache::store::SealHook(std::sync::Arc::new(
        FlashSeal {
            sealer: std::sync::Mutex::new(sealer),
            unsealer: inpath_seal::Unsealer::new(&keys.ring),
            describe,
        },
    )))
}

fn serve_config(a: &ServeArgs, ext: &ExtStore) -> Result<(ServerConfig, Vec<String>)> {
    // The listeners and what protects them (-l, -p, --listen, -Z and ssl_*, -Y, -S).
    let plan = security::plan(
        &a.security,
        &a.extended,
        a.listen.as_deref(),
        a.listen_addr.as_deref(),
        a.port,
        a.protocol.as_deref(),
        a.udp_port,
    )?;
    let listen = plan.listen.clone();
    let memory = match a.memory_mb {
        Some(mb) => mb.checked_mul(1 << 20).context("-m is too large")?,
        None => parse_size(&a.memory).map_err(anyhow::Error::msg)?,
    };
    let (flash, flash_size) = match (&a.flash, &ext.path) {
        (Some(_), Some((path, _))) => bail!(
            "give the flash file once: --flash {} or -o ext_path={}:SIZE, not both",
            a.flash
                .as_ref()
                .map_or(String::new(), |p| p.display().to_string()),
            path.display()
        ),
        (_, Some((path, size))) => (Some(path.clone()), *size),
        (f, None) => (
            f.clone(),
            parse_size(&a.flash_size).map_err(anyhow::Error::msg)?,
        ),
    };
    let mut store = match flash {
        Some(flash) => StoreConfig::new(flash),
        None => StoreConfig::dram_only(),
    };
    store.flush_all = !a.disable_flush_all;
    store.evictions = !a.disable_evictions;
    store.cas = !a.disable_cas;
    store.memory = memory;
    store.flash_size = flash_size;
    store.item_max = parse_size(&a.item_size).map_err(anyhow::Error::msg)? as usize;
    store.avg_item_size = match &a.avg_item_size {
        Some(size) => parse_size(size).map_err(anyhow::Error::msg)? as usize,
        None => default_avg_item_size(memory, store.flash_path.is_some().then_some(flash_size)),
    };
    store.verbose = a.verbose > 0;
    if let Some(path) = &a.seal_key {
        store.seal = Some(flash_seal(path, &a.seal_compress)?);
    }
    let mut cfg = ServerConfig::new(listen, store);
    cfg.threads = a.threads.or(4);
    cfg.max_conns = a.max_conns;
    cfg.sync_interval = Duration::from_millis(a.sync_ms.max(1));
    cfg.checkpoint_interval = Duration::from_secs(a.checkpoint_secs.max(1));
    cfg.handle_signals = true;
    let http = crate::security::http_plan(
        "cache serve",
        &a.web,
        plan.security.tls.clone(),
        None,
        plan.security.limiter.clone(),
        a.security.insecure,
    )?;
    if let Some((addr, guard)) = http {
        cfg.http = Some(addr);
        cfg.http_guard = guard;
    }
    cfg.backlog = a.backlog;
    cfg.shutdown_command = a.enable_shutdown;
    cfg.verbosity = a.verbose;
    for option in a.extended.iter().flat_map(|o| o.split(',')) {
        if option.trim().starts_with("idle_timeout") {
            cfg.idle_timeout = idle_timeout(option.trim())?;
        }
    }
    cfg.protocol = match plan.protocol {
        Some(p) => p,
        None => protocol(a)?,
    };
    cfg.security = plan.security;
    cfg.udp_port = a.udp_port.unwrap_or(0);
    cfg.reqs_per_event = match a.max_reqs_per_event {
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("-R {n}: requests per event must be 1 to {}", u32::MAX))?,
        None => 0,
    };
    cfg.dump_disabled = a.disable_dumping;
    Ok((cfg, plan.notes))
}

/// The average item size the index is sized for when none is given: 1 KiB, doubled while the
/// index for the flash file (12.8 bytes an entry) would take more than half of `memory`, so an
/// extstore command line with a large file and a small `-m` still starts (with fewer entries;
/// `--avg-item-size` chooses).
fn default_avg_item_size(memory: u64, flash_size: Option<u64>) -> usize {
    let mut avg = 1024u64;
    if let Some(flash) = flash_size {
        let index = |avg: u64| (flash / avg).div_ceil(5) * 64;
        while index(avg) > memory / 2 && avg < 1 << 20 {
            avg *= 2;
        }
        if avg > 1024 {
            eprintln!(
                "inpath cache: the index is sized for items of {avg} bytes on average so that \
                 it takes at most half of the memory (--avg-item-size to choose)"
            );
        }
    }
    avg as usize
}

/// memcached's `-B`: ascii, binary, or auto (the default).
fn protocol(a: &ServeArgs) -> Result<Protocol> {
    Ok(match a.protocol.as_deref() {
        Some("ascii") => Protocol::Ascii,
        Some("binary") => Protocol::Binary,
        None | Some("auto") => Protocol::Auto,
        Some(other) => bail!("-B {other:?}: the protocol is ascii, binary or auto"),
    })
}

fn serve(a: &ServeArgs) -> Result<()> {
    let merged;
    let a = match &a.config {
        Some(path) => {
            merged = with_config_file(path)?;
            &merged
        }
        None => a,
    };
    if a.version {
        println!(
            "inpath cache {} (memcached protocol)",
            inpath_cache::VERSION
        );
        return Ok(());
    }
    if a.license {
        println!("inpath is licensed under the Apache License, Version 2.0");
        return Ok(());
    }
    let mut no_effect = memcached_options(a)?;
    let ext = extstore(a)?;
    no_effect.extend(ext.no_effect.iter().cloned());
    let (cfg, notes) = serve_config(a, &ext)?;
    for note in &notes {
        eprintln!("inpath cache: {note}");
    }
    process_setup(a, &cfg.listen)?;
    if a.verbose > 0 && !no_effect.is_empty() {
        eprintln!(
            "inpath cache: taken without effect (no slab allocator, LRU threads, large pages or \
             dumping here): {}",
            no_effect.join(" ")
        );
    }
    let _pidfile = match &a.pidfile {
        Some(path) => Some(PidFile::write(path)?),
        None => None,
    };
    let listen = cfg.listen.clone();
    let server = Server::start(cfg).with_context(|| format!("cache server on {listen}"))?;
    let st = server.store();
    let g = st.geo;
    if !st.has_flash() {
        eprintln!(
            "inpath cache: listening on {} (memory {} MiB: index {} MiB, values {} MiB; DRAM \
             only: no --flash, nothing kept across restarts{})",
            server.local_addr(),
            st.memory() >> 20,
            (g.nbuckets * 64) >> 20,
            g.dram_budget >> 20,
            if st.evictions_enabled() {
                ""
            } else {
                "; evictions off (-M)"
            },
        );
    } else {
        eprintln!(
            "inpath cache: listening on {} (memory {} MiB: index {} MiB, values {} MiB; flash {} \
         MiB in {} chunks, {}); recovered {} items ({})",
            server.local_addr(),
            a.memory_mb
                .unwrap_or_else(|| parse_size(&a.memory).unwrap_or(0) >> 20),
            (g.nbuckets * 64) >> 20,
            g.dram_budget >> 20,
            (g.chunk_size * g.nchunks) >> 20,
            g.nchunks,
            if st.flash_direct() {
                "O_DIRECT"
            } else {
                "buffered I/O: O_DIRECT refused by the filesystem"
            },
            st.recovery.items,
            st.recovery.checkpoint_note,
        );
    }
    if let Some(line) = security_line(&a.security, server.store()) {
        eprintln!("inpath cache: {line}");
    }
    for (addr, tls) in server.listening_on().iter().skip(1) {
        let how = if *tls { "TLS" } else { "plain text" };
        eprintln!("inpath cache: also listening on {addr} ({how})");
    }
    if let (Some(http), Some(scheme)) = (server.http_addr(), server.http_scheme()) {
        eprintln!("inpath cache: live page {scheme}://{http}/ (JSON: /stats, /metrics)");
    }
    if let Some(path) = &a.seal_key {
        eprintln!(
            "inpath cache: flash records sealed ({}) with the first key of {}",
            st.stats()
                .into_iter()
                .find(|(k, _)| *k == "flash_sealed")
                .map(|(_, v)| v)
                .unwrap_or_default(),
            path.display()
        );
    }
    server.wait().context("final checkpoint")?;
    eprintln!("inpath cache: stopped");
    Ok(())
}

/// What protects the server, for the log at start (`None`: nothing, as memcached by default).
fn security_line(a: &security::SecurityArgs, store: &inpath_cache::Store) -> Option<String> {
    let settings: std::collections::HashMap<String, String> =
        store.access.settings().into_iter().collect();
    let mut parts = Vec::new();
    if a.enable_ssl {
        let mode = settings.get("ssl_verify_mode").map_or("0", String::as_str);
        parts.push(format!(
            "TLS ({}+; client certificates {})",
            settings
                .get("ssl_min_version")
                .map_or("tlsv1.2", String::as_str),
            match mode {
                "0" => "not asked for",
                "1" => "checked when given",
                _ => "required",
            }
        ));
    }
    if let Some(f) = &a.auth_file {
        parts.push(format!("ASCII authentication (-Y {})", f.display()));
    }
    if a.enable_sasl {
        parts.push("SASL PLAIN (-S)".into());
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print one JSON object instead of text")))]
pub struct BenchArgs {
    /// Server address (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Distinct keys (the working set is keys x value size).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Requests to send (after the warm-up).
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    /// Requests to send first, not measured (fills the cache the look-aside way).
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Value bytes (with --value-dist fixed).
    #[arg(long, default_value_t = 1024)]
    value_size: usize,
    /// Value sizes: `fixed` (--value-size each) or `etc`: Facebook's ETC pool (Atikoglu et
    /// al., SIGMETRICS 2012: generalized Pareto, scale 214.476, shape 0.348238) held to 100 B
    /// to 4 KiB, fixed per key (mean 341 B, median 168 B, 90th percentile 756 B).
    #[arg(long, default_value = "fixed", value_parser = ["fixed", "etc"])]
    value_dist: String,
    /// Share of gets (the rest are sets).
    #[arg(long, default_value_t = 0.95)]
    get_ratio: f64,
    /// Zipf exponent of key popularity (0 = uniform).
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Client connections, each a thread sending one request at a time.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Look-aside: on a get miss, wait this long (the backend) then set the value.
    #[arg(long)]
    backend_delay_us: Option<u64>,
    #[command(flatten)]
    json: crate::common::Json,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// First set every key once, in random order, with pipelined noreply sets (no compulsory
    /// misses afterwards; what does not fit is evicted).
    #[arg(long)]
    prefill: bool,
    /// Key names are PREFIX then the key number ("absent:" probes keys never set).
    #[arg(long, default_value = "key:")]
    key_prefix: String,
}

/// Sets keys 0..n once each in a random order, pipelined.
/// Returns the key and value bytes sent and the seconds it took.
fn prefill(a: &BenchArgs) -> Result<(u64, f64)> {
    let t0 = Instant::now();
    let mut sent = 0u64;
    let mut order: Vec<u64> = (0..a.keys).collect();
    let mut rng = SplitMix(a.seed ^ 0x5EED);
    for i in (1..order.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut c = Client::connect(&a.server)?;
    let mut batch = Vec::with_capacity(1 << 20);
    for k in order {
        let v = make_value(k, 0, value_len(a, k));
        let line = format!("set {}{k} 0 0 {} noreply\r\n", a.key_prefix, v.len());
        sent += (line.len() - "set  0 0  noreply\r\n".len() - v.len().to_string().len() + v.len())
            as u64;
        batch.extend_from_slice(line.as_bytes());
        batch.extend_from_slice(&v);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 256 * 1024 {
            batch.extend_from_slice(b"mn\r\n");
            c.w.write_all(&batch)?;
            batch.clear();
            if c.read_line()? != b"MN" {
                bail!("prefill: unexpected reply");
            }
        }
    }
    batch.extend_from_slice(b"mn\r\n");
    c.w.write_all(&batch)?;
    if c.read_line()? != b"MN" {
        bail!("prefill: unexpected reply");
    }
    Ok((sent, t0.elapsed().as_secs_f64()))
}

/// Zipf sampler over 1..=n by inverse CDF on a precomputed table (n up to a few million).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut acc = 0.0;
        for i in 1..=n {
            acc += 1.0 / (i as f64).powf(s);
            cdf.push(acc);
        }
        for c in cdf.iter_mut() {
            *c /= acc;
        }
        Zipf { cdf }
    }
    fn sample(&self, u: f64) -> u64 {
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

/// The value size of key `k`: `--value-size`, or under `--value-dist etc` a draw from the
/// ETC distribution fixed by the key (generalized Pareto quantile, held to 100..=4096 bytes).
fn value_len(a: &BenchArgs, k: u64) -> usize {
    if a.value_dist != "etc" {
        return a.value_size;
    }
    let u = SplitMix(k ^ 0x5A5A_0E7C_0000_0001).unit_below_one();
    let (scale, shape) = (214.476_f64, 0.348_238_f64);
    let x = scale / shape * ((1.0 - u).powf(-shape) - 1.0);
    (x as usize).clamp(100, 4096)
}

/// A value that checks itself: its first 8 bytes are a hash of the key and the rest.
fn make_value(key: u64, version: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size.max(16)];
    let mut r = SplitMix(key.wrapping_mul(31).wrapping_add(version));
    for b in v[16..].iter_mut() {
        *b = r.next() as u8;
    }
    v[8..16].copy_from_slice(&key.to_le_bytes());
    let sum = crc(&v[8..]);
    v[..8].copy_from_slice(&sum.to_le_bytes());
    v
}

fn crc(d: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in d {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn value_ok(key: u64, v: &[u8]) -> bool {
    v.len() >= 16 && v[..8] == crc(&v[8..]).to_le_bytes() && v[8..16] == key.to_le_bytes()
}

/// One blocking text-protocol connection.
pub struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    line: Vec<u8>,
}

impl Client {
    pub fn connect(addr: &str) -> Result<Client> {
        let s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            r: BufReader::new(s.try_clone()?),
            w: s,
            line: Vec::new(),
        })
    }
    fn read_line(&mut self) -> Result<&[u8]> {
        self.line.clear();
        self.r.read_until(b'\n', &mut self.line)?;
        if !self.line.ends_with(b"\r\n") {
            bail!("connection closed by the server");
        }
        Ok(&self.line[..self.line.len() - 2])
    }
    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>> {
        self.w.write_all(format!("get {key}\r\n").as_bytes())?;
        let line = self.read_line()?.to_vec();
        if line == b"END" {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&line).to_string();
        let len: usize = text
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("unexpected reply {text:?}"))?;
        let mut v = vec![0u8; len + 2];
        self.r.read_exact(&mut v)?;
        v.truncate(len);
        if self.read_line()? != b"END" {
            bail!("missing END");
        }
        Ok(Some(v))
    }
    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req)?;
        let line = self.read_line()?;
        if line != b"STORED" {
            bail!("set: {}", String::from_utf8_lossy(line));
        }
        Ok(())
    }
    pub fn stats(&mut self) -> Result<Vec<(String, String)>> {
        self.w.write_all(b"stats\r\n")?;
        let mut out = Vec::new();
        loop {
            let line = String::from_utf8_lossy(self.read_line()?).to_string();
            if line == "END" {
                return Ok(out);
            }
            let mut p = line.splitn(3, ' ');
            if let (Some("STAT"), Some(k), Some(v)) = (p.next(), p.next(), p.next()) {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
}

#[derive(Default)]
struct Tally {
    gets: u64,
    hits: u64,
    sets: u64,
    wrong: u64,
    lat_ns: Vec<u64>,
}

fn bench(a: &BenchArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&a.get_ratio) || a.keys == 0 || a.conns == 0 {
        bail!("--get-ratio must be in 0..1, --keys and --conns at least 1");
    }
    // The sampler's table (8 bytes a key) only when requests are sent.
    let zipf = std::sync::Arc::new(if a.ops + a.warmup > 0 {
        Zipf::new(a.keys, a.zipf)
    } else {
        Zipf { cdf: vec![1.0] }
    });
    let run = |ops: u64, measure: bool| -> Result<(Tally, f64)> {
        let per = ops / a.conns as u64;
        let t0 = Instant::now();
        let results: Vec<Result<Tally>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..a.conns)
                .map(|c| {
                    let zipf = zipf.clone();
                    s.spawn(move || -> Result<Tally> {
                        let mut cl = Client::connect(&a.server)?;
                        let mut rng =
                            SplitMix(a.seed * 1000 + c as u64 + u64::from(measure) * 7919);
                        let mut t = Tally::default();
                        for _ in 0..per {
                            let k = zipf.sample(rng.unit_below_one());
                            let key = format!("{}{k}", a.key_prefix);
                            let start = Instant::now();
                            if rng.unit_below_one() < a.get_ratio {
                                t.gets += 1;
                                match cl.get(&key)? {
                                    Some(v) => {
                                        t.hits += 1;
                                        if !value_ok(k, &v) {
                                            t.wrong += 1;
                                        }
                                    }
                                    None => {
                                        if let Some(us) = a.backend_delay_us {
                                            std::thread::sleep(Duration::from_micros(us));
                                            cl.set(&key, &make_value(k, 0, value_len(a, k)))?;
                                        }
                                    }
                                }
                            } else {
                                t.sets += 1;
                                cl.set(&key, &make_value(k, rng.next(), value_len(a, k)))?;
                            }
                            if measure {
                                t.lat_ns.push(start.elapsed().as_nanos() as u64);
                            }
                        }
                        Ok(t)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("client thread panicked")))
                })
                .collect()
        });
        let secs = t0.elapsed().as_secs_f64();
        let mut all = Tally::default();
        for r in results {
            let t = r?;
            all.gets += t.gets;
            all.hits += t.hits;
            all.sets += t.sets;
            all.wrong += t.wrong;
            all.lat_ns.extend(t.lat_ns);
        }
        Ok((all, secs))
    };
    let filled = if a.prefill { Some(prefill(a)?) } else { None };
    if a.warmup > 0 {
        run(a.warmup, false)?;
    }
    let mut probe = Client::connect(&a.server)?;
    let before = probe.stats()?;
    let (mut t, secs) = run(a.ops, true)?;
    let after = probe.stats()?;
    let stat = |s: &[(String, String)], k: &str| -> f64 {
        s.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0)
    };
    let delta = |k: &str| stat(&after, k) - stat(&before, k);
    let ops = (t.gets + t.sets) as f64;
    let cpu = delta("rusage_user") + delta("rusage_system");
    t.lat_ns.sort_unstable();
    let pct = |p: f64| -> f64 {
        if t.lat_ns.is_empty() {
            return 0.0;
        }
        let i = ((t.lat_ns.len() as f64 - 1.0) * p).round() as usize;
        t.lat_ns[i] as f64 / 1000.0
    };
    let hit_rate = if t.gets > 0 {
        t.hits as f64 / t.gets as f64
    } else {
        0.0
    };
    let report = serde_json::json!({
        "server": a.server,
        "ops": ops,
        "seconds": secs,
        "ops_per_sec": ops / secs,
        "gets": t.gets,
        "sets": t.sets,
        "hit_rate": hit_rate,
        "miss_ratio": 1.0 - hit_rate,
        "wrong_values": t.wrong,
        "p50_us": pct(0.5),
        "p99_us": pct(0.99),
        "p999_us": pct(0.999),
        "server_cpu_seconds": cpu,
        "server_cpu_us_per_1000_ops": if ops > 0.0 { cpu * 1e6 / ops * 1000.0 } else { 0.0 },
        "flash_reads": delta("flash_reads"),
        "flash_hits": delta("flash_hits"),
        "keys": a.keys,
        "value_size": a.value_size,
        "value_dist": a.value_dist,
        "prefill_bytes": filled.map(|f| f.0),
        "prefill_seconds": filled.map(|f| f.1),
        "zipf": a.zipf,
        "conns": a.conns,
        "backend_delay_us": a.backend_delay_us,
    });
    if a.json.on {
        println!("{report}");
    } else {
        println!(
            "{:.0} ops/s, hit rate {:.2}%, p50 {:.1} us, p99 {:.1} us, server CPU {:.1} us per 1000 ops, {} wrong values",
            ops / secs,
            hit_rate * 100.0,
            pct(0.5),
            pct(0.99),
            cpu * 1e9 / ops.max(1.0),
            t.wrong
        );
    }
    if t.wrong > 0 {
        bail!("{} values failed their checksum", t.wrong);
    }
    Ok(())
}

pub fn run(args: CacheArgs) -> Result<()> {
    match args.action {
        Action::Serve(a) => serve(&a),
        Action::Bench(a) => bench(&a),
    }
}

/// The `inpath demo` section: an in-process server whose working set is ten times its DRAM,
/// a Zipf read mix, and a restart that keeps the contents.
pub fn demo_section() -> Result<String> {
    use std::fmt::Write as _;
    let dir = std::env::temp_dir().join(format!("inpath-demo-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = demo_run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let (hit, stats1, stats2, back, sample, items) = result?;
    let get = |s: &[(String, String)], k: &str| -> f64 {
        s.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0)
    };
    let mut out = String::new();
    writeln!(
        out,
        "== cache (BlueCache): a memcached-compatible cache with a DRAM index and a flash tier"
    )?;
    writeln!(
        out,
        "  {items} items of 1 KiB (~{} MiB) into 8 MiB of DRAM ({:.1} MiB for values) and a 48 MiB flash file",
        items >> 10,
        get(&stats1, "dram_limit_bytes") / (1 << 20) as f64
    )?;
    writeln!(
        out,
        "  Zipf(0.99) reads: hit ratio {:.1}%; {:.0} from DRAM, {:.0} from flash with {:.0} flash reads (one per flash hit)",
        hit * 100.0,
        get(&stats1, "dram_hits"),
        get(&stats1, "flash_hits"),
        get(&stats1, "flash_reads"),
    )?;
    writeln!(
        out,
        "  DRAM per item: {:.1} bytes of index for {:.0} items ({:.0} of them only on flash)",
        get(&stats1, "index_bytes") / get(&stats1, "curr_items").max(1.0),
        get(&stats1, "curr_items"),
        get(&stats1, "flash_items"),
    )?;
    writeln!(
        out,
        "  restart (clean shutdown, checkpoint + log replay): {:.0} items recovered, {back} of {sample} sampled keys back byte for byte",
        get(&stats2, "recovered_items"),
    )?;
    writeln!(
        out,
        "  try it: inpath cache serve --listen 127.0.0.1:11211 --memory 256MiB --flash cache.flash --flash-size 8GiB\n"
    )?;
    Ok(out)
}

type DemoResult = (
    f64,
    Vec<(String, String)>,
    Vec<(String, String)>,
    usize,
    usize,
    u64,
);

fn demo_run(dir: &std::path::Path) -> Result<DemoResult> {
    let items = 40_000u64;
    let start = || -> Result<Server> {
        let mut store = StoreConfig::new(dir.join("demo.flash"));
        store.memory = 8 << 20;
        store.flash_size = 48 << 20;
        let mut cfg = ServerConfig::new("127.0.0.1:0", store);
        cfg.threads = 2;
        Ok(Server::start(cfg)?)
    };
    let server = start()?;
    let addr = server.local_addr().to_string();
    let mut c = Client::connect(&addr)?;
    let mut batch = Vec::with_capacity(1 << 20);
    for k in 0..items {
        let v = make_value(k, 0, 1024);
        batch.extend_from_slice(format!("set key:{k} 0 0 {} noreply\r\n", v.len()).as_bytes());
        batch.extend_from_slice(&v);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 512 * 1024 {
            c.w.write_all(&batch)?;
            batch.clear();
        }
    }
    batch.extend_from_slice(b"mn\r\n");
    c.w.write_all(&batch)?;
    if c.read_line()? != b"MN" {
        bail!("demo: unexpected reply");
    }
    let zipf = Zipf::new(items, 0.99);
    let mut rng = SplitMix(7);
    let (mut gets, mut hits) = (0u64, 0u64);
    for _ in 0..20_000 {
        let k = zipf.sample(rng.unit_below_one());
        gets += 1;
        if let Some(v) = c.get(&format!("key:{k}"))? {
            if !value_ok(k, &v) {
                bail!("demo: wrong value for key:{k}");
            }
            hits += 1;
        }
    }
    let stats1 = c.stats()?;
    drop(c);
    server.stop()?;
    let server = start()?;
    let mut c = Client::connect(&server.local_addr().to_string())?;
    let stats2 = c.stats()?;
    let (mut back, sample) = (0, 2000usize);
    for i in 0..sample as u64 {
        let k = items - 1 - i * 7;
        if let Some(v) = c.get(&format!("key:{k}"))? {
            if !value_ok(k, &v) {
                bail!("demo: wrong value for key:{k} after the restart");
            }
            back += 1;
        }
    }
    drop(c);
    server.stop()?;
    Ok((
        hits as f64 / gets as f64,
        stats1,
        stats2,
        back,
        sample,
        items,
    ))
}

/// `serve`'s arguments parsed again with a memcached config file's options first.
#[derive(clap::Parser)]
#[command(name = "serve", args_override_self = true)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
}

/// The options of a memcached config file (Debian's /etc/memcached.conf format: options a
/// line, `#` starts a comment, `logfile PATH` names the log), then this command line's options
/// after `serve` (which win: the last of an option counts).
fn with_config_file(path: &std::path::Path) -> Result<ServeArgs> {
    let bytes = inpath_core::source::read_bounded(path, "a memcached config file", 1 << 20)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .with_context(|| format!("config file {} is not UTF-8 text", path.display()))?;
    let mut argv: Vec<std::ffi::OsString> = vec!["serve".into()];
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        match words.next() {
            None => {}
            Some("logfile") => {
                let file = words.collect::<Vec<_>>().join(" ");
                if file.is_empty() {
                    bail!("config file {}: `logfile` needs a path", path.display());
                }
                argv.extend(["--logfile".into(), file.into()]);
            }
            Some(first) => {
                argv.push(first.into());
                argv.extend(words.map(Into::into));
            }
        }
    }
    // This command line after `serve`, without its --config.
    let mut rest = std::env::args_os().skip_while(|w| w != "serve").skip(1);
    while let Some(w) = rest.next() {
        if w == "--config" {
            rest.next();
        } else if !w.to_string_lossy().starts_with("--config=") {
            argv.push(w);
        }
    }
    use clap::Parser as _;
    ServeCli::try_parse_from(argv)
        .map(|cli| cli.args)
        .map_err(|e| anyhow::anyhow!("with the options of {}: {e}", path.display()))
}

/// `-o idle_timeout=SECONDS` (0: never, memcached's default): how long a connection may wait
/// for a request before it is closed.
fn idle_timeout(option: &str) -> Result<Option<Duration>> {
    let secs = option
        .split_once('=')
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .with_context(|| {
            format!("-o {option}: idle_timeout takes whole seconds (idle_timeout=30; 0 = never)")
        })?;
    Ok((secs > 0).then(|| Duration::from_secs(secs)))
}

/// What memcached's extstore options (`-o ext_*`, memcached 1.6.18's storage.c) ask of inpath:
/// the flash file and its size from `ext_path`, and the tuning options, each checked as memcached
/// checks it and taken without effect (inpath's log has no pages, write buffers of its own size,
/// compaction or recache rate; noted with -v).
#[derive(Default)]
struct ExtStore {
    /// `ext_path=FILE:SIZE`: the flash file and its size in bytes.
    path: Option<(PathBuf, u64)>,
    /// The tuning options given, as `-o name=value`.
    no_effect: Vec<String>,
}

/// memcached's `ext_*` tuning options that take a whole number, with what they mean there.
const EXT_WHOLE: [(&str, &str); 11] = [
    ("ext_page_size", "megabytes per storage page"),
    ("ext_wbuf_size", "megabytes per page write buffer"),
    ("ext_threads", "IO threads"),
    ("ext_io_depth", "reads queued per IO thread"),
    ("ext_item_size", "bytes an item needs to go to flash"),
    ("ext_item_age", "seconds idle before an item goes to flash"),
    ("ext_low_ttl", "seconds under which a TTL counts as low"),
    ("ext_recache_rate", "reads between recaches of a flash item"),
    (
        "ext_compact_under",
        "free pages under which compaction starts",
    ),
    (
        "ext_drop_under",
        "free pages under which cold items are dropped",
    ),
    (
        "ext_max_sleep",
        "microseconds the background threads sleep at most",
    ),
];

/// Reads the `-o ext_*` options: one `ext_path` is the flash tier; several are refused by name
/// (inpath's log is one file), as is the same file twice; the tuning options are checked and
/// listed.
fn extstore(a: &ServeArgs) -> Result<ExtStore> {
    let mut ext = ExtStore::default();
    let mut paths: Vec<(PathBuf, u64)> = Vec::new();
    for option in a.extended.iter().flat_map(|o| o.split(',')) {
        let option = option.trim();
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (option, None),
        };
        if !(name.starts_with("ext_") || name == "slab_automove_freeratio") {
            continue;
        }
        let whole = EXT_WHOLE.iter().find(|(n, _)| *n == name);
        match name {
            "ext_path" => {
                let v = value.filter(|v| !v.is_empty()).with_context(|| {
                    "-o ext_path needs FILE:SIZE, as memcached (ext_path=/var/lib/memcached/extstore:64G)"
                })?;
                paths.push(ext_path(v)?);
            }
            "ext_page_size" if !paths.is_empty() => {
                bail!("-o ext_page_size must come before any ext_path (as memcached requires)")
            }
            _ if whole.is_some() => {
                let meaning = whole.map_or("", |w| w.1);
                value.and_then(|v| v.parse::<u32>().ok()).with_context(|| {
                    format!(
                        "-o {option}: {name} takes a whole number from 0 to {} ({meaning})",
                        u32::MAX
                    )
                })?;
                ext.no_effect.push(format!("-o {option}"));
            }
            "ext_max_frag" | "slab_automove_freeratio" => {
                value
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .with_context(|| format!("-o {option}: {name} takes a fraction such as 0.8"))?;
                ext.no_effect.push(format!("-o {option}"));
            }
            "ext_drop_unread" => {
                if value.is_some() {
                    bail!("-o {option}: ext_drop_unread takes no value");
                }
                ext.no_effect.push(format!("-o {option}"));
            }
            _ => bail!(
                "-o {name}: not an extstore option of memcached 1.6.18 (ext_path, {}, \
                 ext_max_frag, ext_drop_unread)",
                EXT_WHOLE.map(|w| w.0).join(", ")
            ),
        }
    }
    for (i, (p, _)) in paths.iter().enumerate() {
        for (q, _) in &paths[..i] {
            if same_file(p, q) {
                bail!(
                    "-o ext_path names the file {} twice ({} and {}): give each file once",
                    p.display(),
                    q.display(),
                    p.display()
                );
            }
        }
    }
    if paths.len() > 1 {
        bail!(
            "-o ext_path is given {} times ({}): memcached spreads its pages over several \
             files, inpath keeps its flash log in one file; give one ext_path with the sizes \
             added, on the fastest device (or run one inpath per device)",
            paths.len(),
            paths
                .iter()
                .map(|(p, s)| format!("{}:{}M", p.display(), s >> 20))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    ext.path = paths.pop();
    Ok(ext)
}

/// `FILE:SIZE[:default]` of `-o ext_path`: SIZE is a whole number and a unit `m`, `g`, `t` or
/// `p` (either case), as memcached reads it; a bucket other than `default` is refused, as
/// memcached 1.6.18 refuses it. The file's directory must exist.
fn ext_path(v: &str) -> Result<(PathBuf, u64)> {
    let mut parts = v.split(':');
    let file = parts.next().filter(|f| !f.is_empty());
    let (Some(file), Some(size)) = (file, parts.next()) else {
        bail!("-o ext_path={v}: give FILE:SIZE, as memcached (ext_path=/var/lib/memcached/extstore:64G)");
    };
    if let Some(bucket) = parts.next() {
        if bucket != "default" {
            bail!("-o ext_path={v}: bucket {bucket:?}: only the default bucket is supported (as memcached 1.6.18)");
        }
    }
    let bad = || {
        anyhow::anyhow!(
            "-o ext_path={v}: size {size:?} is not a whole number with a unit m, g, t or p \
             (megabytes to petabytes, as memcached: 64m, 10G)"
        )
    };
    let (digits, unit) = size.split_at(size.len().saturating_sub(1));
    let shift = match unit.to_ascii_lowercase().as_str() {
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = n
        .checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            anyhow::anyhow!("-o ext_path={v}: size must be more than 0 and under 16 EiB")
        })?;
    let path = PathBuf::from(file);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        bail!(
            "-o ext_path={v}: the directory {} does not exist (create it first; the file is created)",
            dir.display()
        );
    }
    Ok((path, bytes))
}

/// Whether two paths name one file: the same inode where both exist, else the same
/// canonical directory and name.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let canon = |p: &std::path::Path| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        std::fs::canonicalize(dir)
            .ok()
            .map(|d| d.join(p.file_name().unwrap_or_default()))
    };
    canon(a).is_some() && canon(a) == canon(b)
}

/// memcached options: checks those taken with a value rule, refuses by name those inpath does
/// not have (saying why), and returns the ones that have no effect here (noted with -v).
fn memcached_options(a: &ServeArgs) -> Result<Vec<String>> {
    let refuse = |opt: &str, why: &str| -> Result<()> {
        bail!("memcached option {opt} is not supported by inpath cache serve: {why}")
    };
    if a.max_reqs_per_event == Some(0) {
        bail!("-R 0: the number of requests per event must be greater than 0");
    }
    if a.unix_socket.is_some() || a.unix_mask.is_some() {
        refuse("-s/-a", "no UNIX socket; listen on TCP with -l and -p")?;
    }
    if a.disable_evictions && a.flash.is_some() {
        refuse(
            "-M with --flash",
            "the flash log always makes room by reclaiming its oldest chunk (BlueCache's \
             design); -M works in the DRAM-only mode (no --flash)",
        )?;
    }
    if a.prefix_delimiter.is_some() {
        refuse("-D", "no per-prefix statistics are kept (stats detail)")?;
    }
    if a.memory_file.is_some() {
        refuse(
            "-e",
            "the restartable cache is the flash file: --flash PATH survives restarts",
        )?;
    }
    protocol(a)?;
    let mut no_effect: Vec<String> = Vec::new();
    for (given, name) in [
        (a.slab_growth_factor.is_some(), "-f"),
        (a.slab_min_size.is_some(), "-n"),
        (a.largepages, "-L"),
        (a.disable_watch, "-W"),
    ] {
        if given {
            no_effect.push(name.into());
        }
    }
    for option in a.extended.iter().flat_map(|o| o.split(',')) {
        let option = option.trim();
        let name = option.split('=').next().unwrap_or("");
        let bare = name.strip_prefix("no_").unwrap_or(name);
        match bare {
            "" => {}
            // Tuning of memcached's hash table, slab allocator, LRU and logging threads: inpath
            // has none of them, so the option changes nothing and is taken.
            "maxconns_fast"
            | "hashpower"
            | "tail_repair_time"
            | "hash_algorithm"
            | "lru_crawler"
            | "lru_crawler_sleep"
            | "lru_crawler_tocrawl"
            | "lru_maintainer"
            | "hot_lru_pct"
            | "warm_lru_pct"
            | "hot_max_factor"
            | "warm_max_factor"
            | "temporary_ttl"
            | "slab_chunk_max"
            | "slab_reassign"
            | "slab_automove"
            | "slab_automove_ratio"
            | "slab_automove_window"
            | "watcher_logbuf_size"
            | "worker_logbuf_size"
            | "read_buf_mem_limit"
            | "hashexpand"
            | "modern"
            | "inline_ascii_response"
            | "relaxed_privileges"
            | "drop_privileges" => {
                no_effect.push(format!("-o {option}"));
            }
            // Taken: its value is read (and checked) by `serve_config`.
            "idle_timeout" => {}
            "track_sizes" => refuse("-o track_sizes", "no size histogram is kept (stats sizes)")?,
            // extstore's: read (and checked) by `extstore`.
            b if b.starts_with("ext_") || b == "slab_automove_freeratio" => {}
            // TLS: read by `security::plan`.
            b if security::is_ssl_option(b) => {}
            _ => bail!(
                "-o {name}: not a memcached extended option inpath knows (docs/cache.md, \
                 \"Migrating from memcached\", lists those taken)"
            ),
        }
    }
    Ok(no_effect)
}

/// What memcached does to its process before serving: the log to a file, the core limit,
/// the user, the background, locked memory. Runs before the server's threads start (a fork
/// keeps only the calling thread).
fn process_setup(a: &ServeArgs, listen: &str) -> Result<()> {
    use std::os::fd::AsRawFd;
    if let Some(path) = &a.logfile {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open the log file {}", path.display()))?;
        nix::unistd::dup2(log.as_raw_fd(), 2)
            .with_context(|| format!("cannot send the log to {}", path.display()))?;
    }
    if a.enable_coredumps {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (_, hard) = getrlimit(Resource::RLIMIT_CORE).context("-r: the core file limit")?;
        setrlimit(Resource::RLIMIT_CORE, hard, hard).context("-r: raising the core file limit")?;
    }
    if let Some(name) = &a.user {
        if nix::unistd::geteuid().is_root() {
            let user = nix::unistd::User::from_name(name)
                .with_context(|| format!("-u {name}: looking up the user"))?
                .with_context(|| format!("-u {name}: no such user"))?;
            nix::unistd::setgroups(&[user.gid]).with_context(|| format!("-u {name}: groups"))?;
            nix::unistd::setgid(user.gid).with_context(|| format!("-u {name}: setgid"))?;
            nix::unistd::setuid(user.uid).with_context(|| format!("-u {name}: setuid"))?;
        }
    }
    if a.daemon {
        // A port that cannot be bound fails here, where the error can still be seen.
        drop(
            std::net::TcpListener::bind(listen)
                .with_context(|| format!("cannot listen on {listen}"))?,
        );
        // Standard input and output go to /dev/null, standard error too unless --logfile took
        // it: a parent that waits for the output's end (a shell's `$(...)`, a test) is not held.
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .context("-d: /dev/null")?;
        for fd in [0, 1] {
            nix::unistd::dup2(null.as_raw_fd(), fd).context("-d: closing standard streams")?;
        }
        if a.logfile.is_none() {
            nix::unistd::dup2(null.as_raw_fd(), 2).context("-d: closing standard error")?;
        }
        nix::unistd::daemon(true, true).context("-d: going to the background")?;
    }
    if a.lock_memory {
        use nix::sys::mman::{mlockall, MlockAllFlags};
        if let Err(e) = mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE) {
            eprintln!("inpath cache: warning: -k: cannot lock memory ({e}); serving unlocked");
        }
    }
    Ok(())
}

/// A pid file, removed when dropped (a clean stop).
struct PidFile(PathBuf);

impl PidFile {
    fn write(path: &std::path::Path) -> Result<PidFile> {
        inpath_core::output::write_file(path, format!("{}\n", std::process::id()).as_bytes(), &[])
            .with_context(|| format!("-P: cannot write the pid file {}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
