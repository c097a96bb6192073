//! `inpath-bench wire`: loopback throughput and added latency of `inpath wire` (run as its own
//! process, as a user would), next to a direct sender-to-receiver run.
//!
//! - `throughput`: N parallel connections carry `--bytes` in total (random u32 items, repeated
//!   from an 8 MiB buffer). `direct`: sender → receiver; `relay`: sender → `inpath wire relay`
//!   → receiver; `sink`: sender → `inpath wire sink`. The clock stops when every receiver has
//!   seen its end of stream (for the sink: when the sink has closed every connection, which it
//!   does after reading everything).
//!   With a relay or sink, the result's `extra.tapped` says what share of the bytes (and of the
//!   records, for a tap with fixed-width records) the taps saw, from the job lines: below 1
//!   only with `--tap-policy lossy`.
//! - `latency`: one connection, `--messages` ping-pongs of `--size` bytes through an echo
//!   server, directly or through the relay; reports round-trip percentiles.

use crate::timing::Measurement;
use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Relay,
    Sink,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum What {
    Throughput,
    Latency,
}

/// Arguments of `inpath-bench wire`.
#[derive(ClapArgs)]
pub struct Args {
    /// Throughput or latency.
    #[arg(value_enum)]
    what: What,
    /// Direct, through the relay, or into the sink.
    #[arg(long, value_enum)]
    mode: Mode,
    /// The `inpath` binary.
    #[arg(long, default_value = "target/release/inpath")]
    inpath: String,
    /// Taps for the relay or sink (repeatable).
    #[arg(long = "tap")]
    taps: Vec<String>,
    /// Parallel connections (throughput).
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Bytes per repetition, over all connections (throughput).
    #[arg(long, default_value_t = 2_000_000_000)]
    bytes: u64,
    /// Repetitions (median reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Worker threads of the relay or sink.
    #[arg(long)]
    threads: Option<usize>,
    /// The relay's or sink's `--tap-policy` (`exact`, its default, or `lossy`).
    #[arg(long, value_name = "POLICY")]
    tap_policy: Option<String>,
    /// More arguments for the relay or sink (repeatable, e.g. `--wire-arg=--buffer=1M`).
    #[arg(long = "wire-arg", allow_hyphen_values = true)]
    wire_args: Vec<String>,
    /// Messages (latency).
    #[arg(long, default_value_t = 5000)]
    messages: usize,
    /// Message size in bytes (latency).
    #[arg(long, default_value_t = 64)]
    size: usize,
}

/// A relay or sink process; SIGTERM on drop.
struct Wire {
    child: Child,
    listen: String,
    /// Reads the result lines (so the relay never blocks on a full pipe) and adds up the jobs.
    lines: Option<std::thread::JoinHandle<Tapped>>,
    stopped: bool,
}

/// What the taps saw, added up over the job lines of a run.
#[derive(Default)]
struct Tapped {
    jobs: u64,
    bytes: u64,
    skipped_bytes: u64,
    /// Of the first tap (in label order) that reports `skipped_records` (fixed-width records,
    /// lossy policy).
    records: u64,
    skipped_records: u64,
}

impl Tapped {
    fn add(&mut self, job: &serde_json::Value) {
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        self.jobs += 1;
        self.bytes += n(&job["bytes"]);
        self.skipped_bytes += n(&job["skipped_bytes"]);
        let taps = job["taps"].as_object();
        if let Some(tap) =
            taps.and_then(|t| t.values().find(|v| v.get("skipped_records").is_some()))
        {
            self.records += n(&tap["records"]);
            self.skipped_records += n(&tap["skipped_records"]);
        }
    }

    fn json(&self) -> serde_json::Value {
        let share = |seen: u64, all: u64| (all > 0).then(|| seen as f64 / all as f64);
        json!({
            "jobs": self.jobs,
            "bytes": self.bytes,
            "skipped_bytes": self.skipped_bytes,
            "share_of_bytes": share(self.bytes - self.skipped_bytes, self.bytes),
            "records": self.records,
            "skipped_records": self.skipped_records,
            "share_of_records": share(self.records, self.records + self.skipped_records),
        })
    }
}

impl Wire {
    fn start(args: &Args, to: Option<&str>) -> Result<Wire> {
        let mut cmd = Command::new(&args.inpath);
        cmd.arg("wire");
        match to {
            Some(to) => cmd.args(["relay", "--to", to]),
            None => cmd.arg("sink"),
        };
        cmd.args(["--listen", "127.0.0.1:0", "--quiet", "--idle-timeout", "0"]);
        for tap in &args.taps {
            cmd.args(["--tap", tap]);
        }
        if let Some(t) = args.threads {
            cmd.args(["--threads", &t.to_string()]);
        }
        if let Some(policy) = &args.tap_policy {
            cmd.args(["--tap-policy", policy]);
        }
        cmd.args(&args.wire_args);
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} (build it first)", args.inpath))?;
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().context("no stdout")?).read_line(&mut line)?;
        let first: serde_json::Value =
            serde_json::from_str(&line).context("the first line is the listening event")?;
        let listen = first["listen"]
            .as_str()
            .context("listen address")?
            .to_string();
        let out = child.stdout.take().context("no stdout")?;
        let lines = std::thread::spawn(move || {
            let mut tapped = Tapped::default();
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if v["event"] == "job" {
                        tapped.add(&v);
                    }
                }
            }
            tapped
        });
        Ok(Wire {
            child,
            listen,
            lines: Some(lines),
            stopped: false,
        })
    }

    /// Stops the process (it writes every open job's line first) and adds up its job lines.
    fn stop(mut self) -> Tapped {
        self.terminate();
        self.lines
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }

    fn terminate(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Receives connections and drains them; reports each end of stream.
fn receiver() -> Result<(String, mpsc::Receiver<u64>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 << 10];
                let mut total = 0u64;
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                }
                let _ = tx.send(total);
            });
        }
    });
    Ok((addr, rx))
}

fn data() -> Vec<u8> {
    // Random u32 items (xorshift), 8 MiB.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..(8 << 20) / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn send(addr: &str, bytes: u64, data: &[u8], wait_close: bool) -> Result<()> {
    let mut s = TcpStream::connect(addr)?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(data.len() as u64) as usize;
        s.write_all(&data[..n])?;
        left -= n as u64;
    }
    s.shutdown(Shutdown::Write)?;
    if wait_close {
        let mut b = [0u8; 16];
        while s.read(&mut b)? > 0 {}
    }
    Ok(())
}

fn throughput(args: &Args) -> Result<Measurement> {
    let (recv_addr, ends) = receiver()?;
    let wire = match args.mode {
        Mode::Direct => None,
        Mode::Relay => Some(Wire::start(args, Some(&recv_addr))?),
        Mode::Sink => Some(Wire::start(args, None)?),
    };
    let target = wire
        .as_ref()
        .map_or(recv_addr.clone(), |w| w.listen.clone());
    let per_conn = (args.bytes / args.conns as u64) & !7;
    let total = per_conn * args.conns as u64;
    let data = std::sync::Arc::new(data());
    let mut samples = Vec::new();
    for rep in 0..=args.reps {
        let start = Instant::now();
        let senders: Vec<_> = (0..args.conns)
            .map(|_| {
                let (target, data) = (target.clone(), data.clone());
                let sink = args.mode == Mode::Sink;
                std::thread::spawn(move || send(&target, per_conn, &data, sink))
            })
            .collect();
        for s in senders {
            s.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
        }
        if args.mode != Mode::Sink {
            for _ in 0..args.conns {
                let got = ends.recv_timeout(Duration::from_secs(600))?;
                if got != per_conn {
                    bail!("a receiver got {got} bytes, {per_conn} were sent");
                }
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        if rep > 0 {
            samples.push(seconds); // rep 0 warms up
        }
    }
    let tapped = wire.map(Wire::stop);
    let mut sorted = samples.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median_s = sorted[sorted.len() / 2];
    Ok(Measurement {
        name: format!(
            "{} throughput, {} conn(s)",
            mode_name(args.mode),
            args.conns
        ),
        bytes: total,
        items: total / 4,
        samples,
        median_s,
        gb_per_s: total as f64 / median_s / 1e9,
        extra: json!({
            "conns": args.conns,
            "taps": args.taps,
            "tap_policy": args.tap_policy,
            "tapped": tapped.map(|t| t.json()),
        }),
    })
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Direct => "direct",
        Mode::Relay => "relay",
        Mode::Sink => "sink",
    }
}

fn latency(args: &Args) -> Result<Measurement> {
    if args.mode == Mode::Sink {
        bail!("latency is measured direct or through the relay");
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let echo_addr = listener.local_addr()?.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_nodelay(true);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let wire = match args.mode {
        Mode::Relay => Some(Wire::start(args, Some(&echo_addr))?),
        _ => None,
    };
    let target = wire
        .as_ref()
        .map_or(echo_addr.clone(), |w| w.listen.clone());
    let mut s = TcpStream::connect(&target)?;
    s.set_nodelay(true)?;
    let msg = vec![7u8; args.size];
    let mut back = vec![0u8; args.size];
    let mut rtts = Vec::with_capacity(args.messages);
    for i in 0..args.messages + 100 {
        let start = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        if i >= 100 {
            rtts.push(start.elapsed().as_secs_f64());
        }
        // Low load: a message every 200 µs at most.
        std::thread::sleep(Duration::from_micros(200));
    }
    s.shutdown(Shutdown::Write)?;
    drop(wire);
    rtts.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| rtts[((rtts.len() as f64 * p) as usize).min(rtts.len() - 1)];
    Ok(Measurement {
        name: format!(
            "{} round trip, {} B messages",
            mode_name(args.mode),
            args.size
        ),
        bytes: (args.size * args.messages) as u64,
        items: args.messages as u64,
        samples: Vec::new(),
        median_s: pct(0.5),
        gb_per_s: 0.0,
        extra: json!({"p50_s": pct(0.5), "p99_s": pct(0.99), "p999_s": pct(0.999), "taps": args.taps}),
    })
}

/// Runs the wire benchmark.
pub fn run(args: Args) -> Result<Vec<Measurement>> {
    Ok(vec![match args.what {
        What::Throughput => throughput(&args)?,
        What::Latency => latency(&args)?,
    }])
}
