//! `inpath wire`: a bump-in-the-wire TCP relay and a receiving sink that run engines as taps on
//! the bytes as they pass (docs/wire.md).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use inpath_wire::{Direction, JobSplit, LogTarget, Server, ServerConfig, TapPolicy};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `inpath wire`.
#[derive(Args)]
pub struct WireArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Forward connections unchanged to a destination and tap the bytes as they pass.
    #[command(after_help = "Examples:
  inpath wire relay --listen 127.0.0.1:9000 --to 127.0.0.1:9001 --tap sketch:format=u32
  inpath wire relay --listen 127.0.0.1:9000 --to db:5432 --direction both --tap crc --http 9100
  inpath wire relay --listen 127.0.0.1:9000 --to 127.0.0.1:9001 --tap sketch --job-bytes 1G --log jobs.jsonl
  inpath wire relay --listen 127.0.0.1:9000 --to 127.0.0.1:9001 --tap sketch:format=u32 --tap-policy lossy

Tap specifications (--tap, repeatable; every tap sees the same bytes):
  sketch[:format=u32|u64|lines|csv,column=NAME|INDEX,delimiter=C|tab,no_header,
          hll_p=16,cm=6x13,agms=6x13,hash=fast|compat,seed=N,estimator=ertl|reference,save=DIR]
  crc     bytes and CRC-32 of each job")]
    Relay(RelayArgs),
    /// Receive connections and tap them, forwarding nothing.
    #[command(after_help = "Examples:
  inpath wire sink --listen 127.0.0.1:9000 --tap sketch:format=u32,save=/tmp/sketches
  inpath wire sink --listen [::1]:9000 --tap sketch --tap crc --http 127.0.0.1:9100 --log jobs.jsonl

Tap specifications: see `inpath wire relay --help`.")]
    Sink(SinkArgs),
}

#[derive(Args)]
struct RelayArgs {
    /// Where to forward each connection (HOST:PORT).
    #[arg(long, value_name = "HOST:PORT")]
    to: String,
    /// Which bytes the taps see: client to server, server to client, or both (separately).
    #[arg(long, value_enum, default_value = "c2s")]
    direction: DirectionArg,
    /// Give up connecting to the destination after this many seconds.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    connect_timeout: f64,
    /// Near end of a protected link: seal the client's bytes (compress, encrypt) on their way
    /// out and unseal the answers, with the keys of this key file (`inpath seal keygen`). The
    /// relay at the far end runs with --unseal and the same key file.
    #[arg(long, value_name = "KEYFILE", conflicts_with = "unseal")]
    seal: Option<std::path::PathBuf>,
    /// Far end of a protected link: unseal what arrives from the client side and seal the
    /// destination's answers.
    #[arg(long, value_name = "KEYFILE")]
    unseal: Option<std::path::PathBuf>,
    /// Largest page per sealed record (each read is sealed at once, up to this size).
    #[arg(long, default_value = "64KiB", value_name = "SIZE")]
    seal_page: String,
    /// Compression of sealed records: none, deflate, lz4, zstd, snappy.
    #[arg(long, default_value = "lz4", value_name = "ALGO")]
    seal_compress: String,
    /// Cipher of sealed records (authenticated aes256-gcm by default; see docs/seal.md).
    #[arg(long, default_value = "aes256-gcm", value_name = "CIPHER")]
    seal_cipher: String,
    #[command(flatten)]
    common: CommonArgs,
}

/// The (direction, transform) pairs for `--seal` / `--unseal`.
fn seal_transforms(
    relay: &RelayArgs,
) -> Result<
    Vec<(
        Direction,
        std::sync::Arc<dyn inpath_wire::transform::TransformFactory>,
    )>,
> {
    use inpath_wire::transform::{SealFactory, UnsealFactory};
    let (path, near) = match (&relay.seal, &relay.unseal) {
        (Some(path), None) => (path, true),
        (None, Some(path)) => (path, false),
        _ => return Ok(Vec::new()),
    };
    let keys = crate::common::read_keys(path, false)?;
    let page = parse_size("--seal-page", &relay.seal_page)?;
    let compression = inpath_seal::Compression::parse(&relay.seal_compress)
        .map_err(|e| anyhow::anyhow!("--seal-compress: {e}"))?;
    let (cipher, _) = inpath_seal::Cipher::parse(&relay.seal_cipher)
        .map_err(|e| anyhow::anyhow!("--seal-cipher: {e}"))?;
    let key = keys
        .ring
        .get(keys.first_id)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .clone();
    let config = inpath_seal::SealConfig {
        compression,
        cipher,
    };
    let page = usize::try_from(page).context("--seal-page is too large")?;
    let seal: std::sync::Arc<dyn inpath_wire::transform::TransformFactory> =
        std::sync::Arc::new(SealFactory::new(config, keys.first_id, key, page)?);
    // Records from the far side may use a different page size; cap what one record may claim.
    let unseal: std::sync::Arc<dyn inpath_wire::transform::TransformFactory> =
        // Only records of this relay's own cipher: with aes256-gcm every record is
        // authenticated, and one claiming no encryption (forged without the key) is refused.
        std::sync::Arc::new(
            UnsealFactory::new(&keys.ring, (page as u64).max(64 << 20)).only(cipher),
        );
    Ok(if near {
        vec![(Direction::C2s, seal), (Direction::S2c, unseal)]
    } else {
        vec![(Direction::C2s, unseal), (Direction::S2c, seal)]
    })
}

#[derive(Args)]
struct SinkArgs {
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Worker threads [default: the number of CPUs]").short('t')))]
struct CommonArgs {
    /// Where to accept connections (HOST:PORT; port 0 picks a free one, shown in the first
    /// log line).
    #[arg(long, value_name = "HOST:PORT")]
    listen: String,
    /// A tap: NAME[:key=value,...] (repeatable). See the list below.
    #[arg(long = "tap", value_name = "SPEC")]
    taps: Vec<String>,
    /// End a job every N bytes of a tapped direction (suffixes K, M, G = KiB, MiB, GiB)
    /// instead of at the close of the connection.
    #[arg(long, value_name = "N", conflicts_with = "job_per_message")]
    job_bytes: Option<String>,
    /// Each length-prefixed message (4-byte big-endian length, then the payload) is a job;
    /// the taps see the payloads.
    #[arg(long)]
    job_per_message: bool,
    /// Live results (/connections, /combined, /metrics and the live page): --http, with
    /// HTTPS and a token as for the other servers.
    #[command(flatten)]
    http: crate::security::HttpArgs,
    #[command(flatten)]
    insecure: crate::security::Insecure,
    /// Append the JSON result lines to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Close a connection after this many seconds without a byte moving either way (0: never).
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    idle_timeout: f64,
    /// On SIGINT/SIGTERM, let open connections finish for this many seconds before closing
    /// them (a second signal closes them at once). Results are written either way.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    grace: f64,
    /// Bytes per read (suffixes K, M).
    #[arg(long, default_value = "128K", value_name = "BYTES")]
    buffer: String,
    /// Buffers a tapped direction may have waiting for its taps before the connection stops
    /// reading (back-pressure).
    #[arg(long, default_value_t = 4, value_name = "N")]
    depth: usize,
    /// What a tapped direction does when its taps fall behind: exact (wait for them, slowing
    /// the link; nothing is skipped) or lossy (forward at the link's own speed; the taps skip
    /// what they cannot reach, counted, and the job's result is marked partial).
    #[arg(long, default_value = "exact", value_name = "POLICY")]
    tap_policy: String,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_connections: usize,
    /// Closed connections kept for the HTTP API.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    keep: usize,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// No start-up and shutdown messages on standard error.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum DirectionArg {
    C2s,
    S2c,
    Both,
}

/// Runs `inpath wire`.
pub fn run(args: WireArgs) -> Result<()> {
    let (mut config, common) = match args.action {
        Action::Relay(relay) => {
            let mut config = ServerConfig::relay(&relay.common.listen, &relay.to);
            config.directions = match relay.direction {
                DirectionArg::C2s => vec![Direction::C2s],
                DirectionArg::S2c => vec![Direction::S2c],
                DirectionArg::Both => vec![Direction::C2s, Direction::S2c],
            };
            config.connect_timeout = seconds("--connect-timeout", relay.connect_timeout)?
                .context("--connect-timeout must be above 0")?;
            config.transforms = seal_transforms(&relay)?;
            check_listener(&relay.common, Some(&relay))?;
            (config, relay.common)
        }
        Action::Sink(sink) => {
            check_listener(&sink.common, None)?;
            (ServerConfig::sink(&sink.common.listen), sink.common)
        }
    };
    for spec in &common.taps {
        config.taps.push(inpath_taps::parse_tap(spec)?);
    }
    if let Some(n) = &common.job_bytes {
        config.split = JobSplit::bytes(parse_size("--job-bytes", n)?)?;
    } else if common.job_per_message {
        config.split = JobSplit::Message;
    }
    let service = format!("wire {}", config.mode.name());
    if let Some((addr, guard)) = crate::security::http_plan(
        &service,
        &common.http,
        None,
        None,
        std::sync::Arc::new(inpath_net::Limiter::default()),
        common.insecure,
    )? {
        config.http = Some(addr);
        config.http_guard = guard;
    }
    config.log = match &common.log {
        Some(path) => LogTarget::File(path.clone()),
        None => LogTarget::Stdout,
    };
    config.idle_timeout = seconds("--idle-timeout", common.idle_timeout)?;
    config.grace = seconds("--grace", common.grace)?.unwrap_or_default();
    config.buffer = usize::try_from(parse_size("--buffer", &common.buffer)?)
        .context("--buffer is too large")?;
    config.depth = common.depth;
    config.tap_policy = common.tap_policy.parse::<TapPolicy>()?;
    config.max_connections = common.max_connections;
    config.keep_closed = common.keep;
    let threads = match common.threads.given() {
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    runtime.block_on(serve(config, common.quiet))
}

async fn serve(config: ServerConfig, quiet: bool) -> Result<()> {
    let mode = config.mode;
    let to = config.to.clone();
    let taps: Vec<String> = config.taps.iter().map(|t| t.describe()).collect();
    let log = config.log.clone();
    let scheme = config.http_guard.scheme();
    let server = Server::bind(config).await?;
    let shutdown = server.shutdown();
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("cannot watch SIGINT")?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    if !quiet {
        let mut text = format!(
            "inpath wire {}: listening on {}",
            mode.name(),
            server.local_addr()
        );
        if let Some(to) = &to {
            text.push_str(&format!(", forwarding to {to}"));
        }
        text.push_str(&format!(
            "\n  taps: {}\n  results: {}",
            if taps.is_empty() {
                "none".to_string()
            } else {
                taps.join(" ")
            },
            match &log {
                LogTarget::File(path) => path.display().to_string(),
                _ => "standard output (JSON lines)".into(),
            }
        ));
        if let Some(http) = server.http_addr() {
            text.push_str(&format!(
                "\n  live results: {scheme}://{http}/connections, /combined, /metrics"
            ));
        }
        eprintln!("{text}");
    }
    tokio::spawn(async move {
        for round in 0..2 {
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
            if round == 0 {
                if !quiet {
                    eprintln!("inpath wire: stopping (open connections get the grace period; signal again to close them now)");
                }
                shutdown.drain();
            } else {
                shutdown.now();
            }
        }
    });
    server.run().await;
    if !quiet {
        eprintln!("inpath wire: stopped; every job's result is written");
    }
    Ok(())
}

/// The listener policy for a relay or sink (docs/SECURITY.md): beyond loopback, only the far
/// end of a sealed link (`--unseal KEYFILE` with the authenticated aes256-gcm cipher) is
/// protected, since every record it takes must carry the key; anything else needs
/// --insecure-no-auth, and is then announced at start.
fn check_listener(common: &CommonArgs, relay: Option<&RelayArgs>) -> Result<()> {
    // An address that does not resolve is the server's to report (in its own words).
    let Ok(addrs) = inpath_net::policy::resolve(&common.listen) else {
        return Ok(());
    };
    let open: Vec<_> = addrs
        .iter()
        .filter(|a| !inpath_net::policy::is_loopback(a.ip()))
        .collect();
    let Some(first) = open.first() else {
        return Ok(());
    };
    let (mode, risk, fix) = match relay {
        None => (
            "sink",
            "feed its taps".to_string(),
            "put a relay with --unseal KEYFILE in front of it (the sink on loopback, the relay \
             taking sealed records from a relay with --seal KEYFILE beside the senders)"
                .to_string(),
        ),
        Some(r) => {
            let to = &r.to;
            match &r.unseal {
                None => (
                    "relay",
                    format!("reach {to} through it"),
                    "make it the far end of a sealed link: --unseal KEYFILE here and --seal \
                     KEYFILE on a relay beside the clients (every record is then \
                     authenticated with the key; docs/wire.md)"
                        .to_string(),
                ),
                Some(_) => {
                    let (cipher, _) = inpath_seal::Cipher::parse(&r.seal_cipher)
                        .map_err(|e| anyhow::anyhow!("--seal-cipher: {e}"))?;
                    if cipher == inpath_seal::Cipher::Gcm {
                        return Ok(());
                    }
                    (
                        "relay",
                        format!("reach {to} through it with records forged without the key"),
                        format!(
                            "keep --unseal with the authenticated cipher (--seal-cipher \
                             aes256-gcm, the default, on both relays): --seal-cipher {} does \
                             not authenticate records",
                            r.seal_cipher
                        ),
                    )
                }
            }
        }
    };
    let reach = if first.ip().is_unspecified() {
        "every network interface".to_string()
    } else {
        format!("{} (not loopback)", first.ip())
    };
    let listen = &common.listen;
    if common.insecure.insecure_no_auth {
        eprintln!(
            "warning: inpath wire {mode} listens on {listen}, {reach}, without authentication \
             (--insecure-no-auth): anyone who can reach it can {risk}"
        );
        return Ok(());
    }
    bail!(
        "refusing to listen on {listen}: it is {reach}, and anyone who can reach it could \
         {risk}. Listen on loopback (127.0.0.1), or {fix}, or accept an open port with \
         --insecure-no-auth (docs/SECURITY.md)"
    )
}

fn seconds(flag: &str, value: f64) -> Result<Option<Duration>> {
    if !value.is_finite() || !(0.0..=1e9).contains(&value) {
        bail!("{flag} {value} must be between 0 and 1e9 seconds");
    }
    Ok((value > 0.0).then(|| Duration::from_secs_f64(value)))
}

/// `4096`, `64K`, `1M`, `2G` (binary units).
fn parse_size(flag: &str, text: &str) -> Result<u64> {
    crate::common::parse_size(text).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}
