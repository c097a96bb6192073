//! The lossy tap policy: the link never waits for its taps. A test tap behind a gate the test
//! opens and closes stands in for a slow tap, so what is skipped depends on the steps of the
//! test, not on the speed of the machine: with one buffer per direction, the first read of each
//! phase reaches the tap (which then holds the buffer at the closed gate) and every later read
//! of the phase is forwarded untapped. No timing is asserted.

use crate::common::*;
use inpath_taps::{parse_tap, CrcPartial, JobId, Partial, Tap, TapFactory, TapOutput};
use inpath_wire::{Direction, JobSplit, Server, ServerConfig, TapPolicy};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Holds the test tap's `update` while closed (at most [`LIMIT`], so a failing test ends).
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    turned: Condvar,
}

impl Gate {
    fn set(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.turned.notify_all();
    }

    fn pass(&self) {
        let deadline = std::time::Instant::now() + LIMIT;
        let mut open = self.open.lock().unwrap();
        while !*open {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            open = self.turned.wait_timeout(open, left).unwrap().0;
        }
    }
}

/// The records of the test streams: each carries its index and a check of it, so a record
/// read out of alignment, or glued together from two records, is caught.
#[derive(Clone, Copy)]
enum Kind {
    /// 4 bytes: the index (u16, little-endian), then `check(index)`.
    U32,
    /// `index:check\n`.
    Lines,
}

fn check(i: u64) -> u16 {
    ((i.wrapping_mul(0x9E37_79B9) >> 7) as u16) ^ 0xA5C3
}

fn stream(kind: Kind, records: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..records {
        match kind {
            Kind::U32 => {
                out.extend_from_slice(&(i as u16).to_le_bytes());
                out.extend_from_slice(&check(i).to_le_bytes());
            }
            Kind::Lines => out.extend_from_slice(format!("{i}:{}\n", check(i)).as_bytes()),
        }
    }
    out
}

/// The index a record holds, if its check is right.
fn index_of(kind: Kind, record: &[u8]) -> Option<u64> {
    match kind {
        Kind::U32 => {
            let i = u16::from_le_bytes([record[0], record[1]]) as u64;
            (u16::from_le_bytes([record[2], record[3]]) == check(i)).then_some(i)
        }
        Kind::Lines => {
            let text = std::str::from_utf8(record).ok()?;
            let (i, c) = text.split_once(':')?;
            let i: u64 = i.parse().ok()?;
            (c.parse::<u16>().ok()? == check(i)).then_some(i)
        }
    }
}

struct CheckFactory {
    gate: Arc<Gate>,
    kind: Kind,
}

impl TapFactory for CheckFactory {
    fn name(&self) -> &str {
        "check"
    }
    fn describe(&self) -> String {
        "check".into()
    }
    fn make(&self) -> inpath_taps::Result<Box<dyn Tap>> {
        Ok(Box::new(CheckTap {
            gate: self.gate.clone(),
            kind: self.kind,
            held: Vec::new(),
            seen: Vec::new(),
            bad: 0,
        }))
    }
    fn record_width(&self) -> Option<usize> {
        matches!(self.kind, Kind::U32).then_some(4)
    }
    fn record_delimiter(&self) -> Option<u8> {
        matches!(self.kind, Kind::Lines).then_some(b'\n')
    }
}

/// Checks every record it is given; reports the indices it saw.
struct CheckTap {
    gate: Arc<Gate>,
    kind: Kind,
    held: Vec<u8>,
    seen: Vec<u64>,
    bad: u64,
}

impl Tap for CheckTap {
    fn update(&mut self, chunk: &[u8]) -> Result<(), inpath_core::Error> {
        // Off the runtime's worker while held, so the relay's other tasks (and the test's)
        // keep running: a tap that blocked its worker for good could strand the tasks queued
        // on it.
        tokio::task::block_in_place(|| self.gate.pass());
        self.held.extend_from_slice(chunk);
        let mut at = 0;
        loop {
            let end = match self.kind {
                Kind::U32 => (self.held.len() - at >= 4).then_some(at + 4),
                Kind::Lines => memchr_nl(&self.held[at..]).map(|n| at + n + 1),
            };
            let Some(end) = end else { break };
            let record = match self.kind {
                Kind::U32 => &self.held[at..end],
                Kind::Lines => &self.held[at..end - 1],
            };
            match index_of(self.kind, record) {
                Some(i) if self.seen.last().is_none_or(|&last| i > last) => self.seen.push(i),
                _ => self.bad += 1,
            }
            at = end;
        }
        self.held.drain(..at);
        Ok(())
    }
    fn live_json(&self) -> Value {
        json!({})
    }
    fn snapshot(&self) -> Box<dyn Partial> {
        Box::new(CrcPartial {
            bytes: 0,
            jobs: 1,
            crc32: None,
        })
    }
    fn finish(&mut self, _job: JobId, _error: Option<&str>) -> TapOutput {
        let jumps = self.seen.windows(2).filter(|w| w[1] != w[0] + 1).count();
        let value = json!({
            "records": self.seen.len(),
            "bad": self.bad,
            "jumps": jumps,
            "first": self.seen.first(),
            "last": self.seen.last(),
            "leftover_bytes": self.held.len(),
        });
        self.held.clear();
        self.seen.clear();
        self.bad = 0;
        TapOutput {
            json: value,
            partial: self.snapshot(),
        }
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

fn lossy(mut config: ServerConfig, gate: &Arc<Gate>, kind: Kind) -> ServerConfig {
    config.taps.insert(
        0,
        Arc::new(CheckFactory {
            gate: gate.clone(),
            kind,
        }),
    );
    config.tap_policy = TapPolicy::Lossy;
    config.depth = 1;
    config.buffer = 4096;
    config
}

/// Sends `data` in phases of `phase` bytes. After each phase has been read (`read` says how
/// many bytes the server has read), the gate opens until the taps have caught up, then closes
/// again; at the end it stays open.
async fn send_in_phases(
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    data: &[u8],
    phase: usize,
    gate: &Gate,
    hub: &inpath_wire::Hub,
    read: impl Fn() -> u64,
) {
    let mut sent = 0u64;
    for piece in data.chunks(phase) {
        to.write_all(piece).await.unwrap();
        sent += piece.len() as u64;
        wait_for("the phase to be read", || read() >= sent).await;
        gate.set(true);
        wait_for("the taps to catch up", || {
            hub.metrics.backlog.load(Ordering::Relaxed) == 0
        })
        .await;
        gate.set(false);
    }
    gate.set(true);
    to.shutdown().await.unwrap();
}

/// A destination that keeps what it reads.
async fn collector() -> (std::net::SocketAddr, Arc<Mutex<Vec<u8>>>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let (g, d) = (got.clone(), done.clone());
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            g.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        d.store(true, Ordering::SeqCst);
    });
    (addr, got, done)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lossy_relay_forwards_every_byte_and_keeps_records_whole() {
    const RECORDS: u64 = 60_000;
    let data = stream(Kind::U32, RECORDS);
    let gate = Arc::new(Gate::default());
    let (dest, got, done) = collector().await;
    let mut config = ServerConfig::relay("127.0.0.1:0", dest.to_string());
    config.taps = vec![
        parse_tap("sketch:format=u32").unwrap(),
        parse_tap("crc").unwrap(),
    ];
    let server = start(lossy(config, &gate, Kind::U32)).await;
    let client = TcpStream::connect(server.addr).await.unwrap();
    let (_rd, mut wr) = client.into_split();
    let hub = server.hub.clone();
    let g = got.clone();
    send_in_phases(&mut wr, &data, 20_001, &gate, &hub, || {
        g.lock().unwrap().len() as u64
    })
    .await;
    wait_for("the destination's end", || done.load(Ordering::SeqCst)).await;
    assert!(
        *got.lock().unwrap() == data,
        "every byte forwarded, unchanged"
    );
    drop(wr);
    wait_for("closed", || server.hub.open_count() == 0).await;
    let metrics = server.hub.metrics_text();
    let (log, _dir) = server.stop().await;

    let jobs = events(&log, "job");
    assert_eq!(jobs.len(), 1);
    let job = jobs[0];
    let total = data.len() as u64;
    let skipped = u(&job["skipped_bytes"]);
    assert_eq!(u(&job["bytes"]), total);
    assert!(skipped > 0, "the closed gate made the relay skip");
    assert_eq!(job["partial"], true);
    assert_eq!(
        job["complete"], true,
        "complete is about the connection's end"
    );
    // Skipped and tapped make up what was read.
    let tapped = total - skipped;
    assert_eq!(u(&job["taps"]["crc"]["bytes"]), tapped);
    let samples = parse_prometheus(&metrics);
    let get = |k: &str| samples.iter().find(|(s, _)| s == k).map(|(_, v)| *v);
    assert_eq!(
        get("inpath_wire_tap_skipped_bytes_total{direction=\"c2s\"}"),
        Some(skipped as f64)
    );
    assert_eq!(
        get("inpath_wire_bytes_read_total{direction=\"c2s\"}"),
        Some(total as f64)
    );

    // Every record the check tap got was whole and in true alignment; gaps happened between.
    let check = &job["taps"]["check"];
    assert_eq!(
        u(&check["bad"]),
        0,
        "no record glued or out of alignment: {check}"
    );
    assert!(
        u(&check["jumps"]) >= 1,
        "records resumed after a gap: {check}"
    );
    let seen = u(&check["records"]);
    assert!(seen > 0);
    assert_eq!(seen + u(&check["skipped_records"]), RECORDS);
    assert_eq!(
        seen * 4 + u(&check["cut_record_bytes"]) + u(&check["leftover_bytes"]),
        tapped,
        "what reached the taps: whole records, the cut parts of records, a partial tail"
    );
    // The sketch tap got the same records.
    let sketch = &job["taps"]["sketch"];
    assert_eq!(u(&sketch["records"]), seen);
    assert_eq!(sketch["skipped_records"], check["skipped_records"]);
    assert_eq!(sketch["cut_record_bytes"], check["cut_record_bytes"]);
    assert_eq!(
        get("inpath_wire_tap_skipped_records_total{tap=\"sketch\"}"),
        Some((RECORDS - seen) as f64)
    );
    let conn = &events(&log, "connection")[0];
    assert_eq!(u(&conn["skipped_c2s"]), skipped);
    assert_eq!(conn["outcome"], "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gaps_land_in_the_right_byte_jobs() {
    const RECORDS: u64 = 50_000;
    const JOB: u64 = 4000; // 1000 records
    let data = stream(Kind::U32, RECORDS);
    let gate = Arc::new(Gate::default());
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![parse_tap("crc").unwrap()];
    config.split = JobSplit::bytes(JOB).unwrap();
    let server = start(lossy(config, &gate, Kind::U32)).await;
    let client = TcpStream::connect(server.addr).await.unwrap();
    let (mut rd, mut wr) = client.into_split();
    let hub = server.hub.clone();
    send_in_phases(&mut wr, &data, 30_001, &gate, &hub, || {
        hub.metrics.bytes_read[0].load(Ordering::Relaxed)
    })
    .await;
    let rest = tokio::time::timeout(LIMIT, read_all(&mut rd)).await;
    assert!(
        rest.unwrap().unwrap().is_empty(),
        "the sink closes after reading all"
    );
    wait_for("closed", || server.hub.open_count() == 0).await;
    let skipped_total = server.hub.metrics.skipped_bytes[0].load(Ordering::Relaxed);
    let (log, _dir) = server.stop().await;

    let mut jobs = events(&log, "job");
    jobs.sort_by_key(|j| u(&j["job"]));
    assert_eq!(jobs.len() as u64, (data.len() as u64).div_ceil(JOB));
    let mut skipped_sum = 0;
    let (mut unseen, mut seen_some) = (0, 0);
    for (n, job) in jobs.iter().enumerate() {
        let n = n as u64;
        assert_eq!(u(&job["job"]), n);
        let bytes = u(&job["bytes"]);
        assert_eq!(bytes, JOB.min(data.len() as u64 - n * JOB), "job {n}");
        let skipped = u(&job["skipped_bytes"]);
        skipped_sum += skipped;
        assert_eq!(job["partial"], skipped > 0, "job {n}");
        assert_eq!(u(&job["taps"]["crc"]["bytes"]), bytes - skipped, "job {n}");
        let check = &job["taps"]["check"];
        assert_eq!(u(&check["bad"]), 0, "job {n}: {check}");
        let seen = u(&check["records"]);
        assert_eq!(seen + u(&check["skipped_records"]), bytes / 4, "job {n}");
        // Every record a job saw belongs to it: the gaps were counted in the right jobs.
        if seen > 0 {
            seen_some += 1;
            let (first, last) = (u(&check["first"]), u(&check["last"]));
            assert!(
                first >= n * 1000 && last < (n + 1) * 1000,
                "job {n} saw records {first}..={last}"
            );
        }
        if skipped == bytes {
            unseen += 1;
            assert_eq!(seen, 0);
        }
    }
    assert_eq!(skipped_sum, skipped_total);
    assert!(unseen > 0, "some jobs fell wholly in a gap");
    assert!(seen_some > 0, "some jobs were tapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lines_are_never_glued_across_a_gap() {
    const RECORDS: u64 = 40_000;
    let data = stream(Kind::Lines, RECORDS);
    let gate = Arc::new(Gate::default());
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![parse_tap("sketch:format=lines").unwrap()];
    let server = start(lossy(config, &gate, Kind::Lines)).await;
    let client = TcpStream::connect(server.addr).await.unwrap();
    let (mut rd, mut wr) = client.into_split();
    let hub = server.hub.clone();
    send_in_phases(&mut wr, &data, 25_013, &gate, &hub, || {
        hub.metrics.bytes_read[0].load(Ordering::Relaxed)
    })
    .await;
    let _ = tokio::time::timeout(LIMIT, read_all(&mut rd)).await;
    wait_for("closed", || server.hub.open_count() == 0).await;
    let (log, _dir) = server.stop().await;
    let job = events(&log, "job")[0].clone();
    assert!(u(&job["skipped_bytes"]) > 0);
    let check = &job["taps"]["check"];
    assert_eq!(u(&check["bad"]), 0, "no line glued from two: {check}");
    assert!(u(&check["jumps"]) >= 1, "{check}");
    let sketch = &job["taps"]["sketch"];
    assert_eq!(sketch["records"], check["records"]);
    assert_eq!(sketch["cut_record_bytes"], check["cut_record_bytes"]);
    assert_eq!(sketch["shortened_lines"], 0);
    assert_eq!(sketch["unterminated_line_bytes"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tap_policies_are_clear_errors() {
    let e = "fast".parse::<TapPolicy>().unwrap_err().to_string();
    assert!(e.contains("tap-policy = fast"), "{e}");
    assert!(e.contains("exact") && e.contains("lossy"), "{e}");
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![parse_tap("crc").unwrap()];
    config.split = JobSplit::Message;
    config.tap_policy = TapPolicy::Lossy;
    let e = match Server::bind(config).await {
        Ok(_) => panic!("lossy with a job per message must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("tap-policy = lossy"), "{e}");
    assert!(e.contains("--job-per-message"), "{e}");
    // Both directions of a lossy relay are accepted.
    let mut config = ServerConfig::relay("127.0.0.1:0", "127.0.0.1:9");
    config.directions = vec![Direction::C2s, Direction::S2c];
    config.tap_policy = TapPolicy::Lossy;
    assert!(Server::bind(config).await.is_ok());
}
