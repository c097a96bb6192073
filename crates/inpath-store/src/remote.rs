//! `inpath store serve` and `--remote`: the store as a process that owns its directory and
//! answers kernel requests with results only. Raw pages leave it only through an explicit
//! `read`.
//!
//! The protocol (docs/FORMATS.md, "store server protocol") is frames over TCP: a 4-byte
//! little-endian length, then that many bytes. A request is one frame of JSON naming its
//! `op` and parameters ([`Request`]); the answer is one frame, `{"ok": RESULT}` or
//! `{"error": MESSAGE}`. `read` answers `{"ok": {"length": N}}` and then streams the bytes
//! as data frames, ended by an empty frame (or by a frame of length `u32::MAX` followed by an
//! error frame). A connection carries any number of requests, one after another.
//!
//! The same [`Service::answer`] serves local verbs and the server, so a result has one shape
//! whether the store is a directory or an address. The CLI (`inpath store serve`, `--remote`)
//! and the Python package (`inpath.store.Store`) both use this module.

use crate::error::{Result, StoreError};
use crate::guard::{self, GuardCounters, Security, Session, Verdict};
use crate::kernel::run_counted;
use crate::tap::{Crc, HandleReader};
use crate::{
    CsrGraph, FlashReader, Hamming, HammingKernel, HandleRef, Literal, LshIndex, LshParams,
    OpenHandle, PutOptions, ReaderCounters, RegexSearch, RunStats, Stop, Store, Tier,
};
use inpath_net::{Credentials, Role, Stream};
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};
use inpath_taps::{tap_name, TAP_NAMES};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest request frame a server takes (queries for `nn` are the big ones).
pub const MAX_REQUEST: usize = 64 << 20;
/// The largest answer frame a client takes.
pub const MAX_ANSWER: usize = 1 << 30;
/// The protocol version a request may name (`"v"`, default 1).
pub const PROTOCOL_VERSION: u32 = 1;
/// A frame length that announces an error frame in a `read` stream.
const STREAM_ERROR: u32 = u32::MAX;
/// Bytes per data frame of a `read` stream.
const STREAM_FRAME: usize = 1 << 20;

fn one() -> usize {
    1
}
fn default_tables() -> u32 {
    crate::lsh::DEFAULT_TABLES
}
fn default_bits() -> u32 {
    crate::lsh::DEFAULT_BITS
}
fn default_seed() -> u64 {
    crate::lsh::DEFAULT_SEED
}

/// A request: the verb and its parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The handles.
    Ls,
    /// Literal or regex search.
    Grep {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// The pattern.
        pattern: String,
        /// A regular expression, matched line by line.
        #[serde(default)]
        regex: bool,
        /// Line count only (no offsets).
        #[serde(default)]
        count: bool,
        /// Lanes.
        #[serde(default = "one")]
        threads: usize,
        /// Also return the matched bytes of a regex search (for `OFFSET:MATCH` output).
        #[serde(default)]
        with_text: bool,
    },
    /// Hamming nearest neighbours.
    Nn {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// Item size in bytes.
        item_size: usize,
        /// The queries, back to back, in hexadecimal.
        queries_hex: String,
        /// Neighbours per query.
        k: usize,
        /// Lanes.
        #[serde(default = "one")]
        threads: usize,
        /// Approximate search through the handle's LSH index (built by `index`).
        #[serde(default)]
        lsh: bool,
        /// LSH multi-probe radius: also the buckets whose keys differ in up to this many bits.
        #[serde(default)]
        probe: u32,
    },
    /// Builds (or rebuilds) the LSH index of a handle's items (`DIR/index/ID.lsh`).
    Index {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// Item size in bytes.
        item_size: usize,
        /// Tables.
        #[serde(default = "default_tables")]
        tables: u32,
        /// Sampled bits per table.
        #[serde(default = "default_bits")]
        bits: u32,
        /// Seed of the bit positions.
        #[serde(default = "default_seed")]
        seed: u64,
        /// Lanes of the build scan.
        #[serde(default = "one")]
        threads: usize,
    },
    /// Raw bytes of a handle (streamed).
    Read {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// First byte.
        #[serde(default)]
        offset: u64,
        /// Bytes (default: to the end).
        #[serde(default)]
        length: Option<u64>,
    },
    /// The server's counters.
    Stats,
    /// Remove a handle and its pages.
    Rm {
        /// `ID` or `ID@GEN`.
        handle: String,
    },
    /// Store bytes under a name: answered `{"ok": {"send": LENGTH}}`, then the client sends
    /// `length` bytes as data frames ended by an empty frame, then the server answers the
    /// new entry (or an error; nothing is stored).
    Put {
        /// Name in the catalog (an existing name keeps its handle, next generation).
        name: String,
        /// Bytes that follow.
        length: u64,
        /// Page size in bytes.
        #[serde(default = "default_page_size")]
        page_size: u32,
        /// Cipher of the sealed tier (`aes256-gcm`, ...; none: raw pages unless `compress`).
        #[serde(default)]
        seal_tier: Option<String>,
        /// Compression of the sealed tier (`lz4`, `zstd-3`, ...).
        #[serde(default)]
        compress: Option<String>,
        /// Key id to seal with (default: the server's first key).
        #[serde(default)]
        key_id: Option<u32>,
    },
    /// Breadth-first search over a CSR graph handle.
    Bfs {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// The vertex to start from.
        source: u64,
        /// Lanes per level.
        #[serde(default = "one")]
        threads: usize,
        /// Also the visit order, levels and predecessors (-1: none).
        #[serde(default)]
        arrays: bool,
    },
    /// The out-neighbours of some vertices of a CSR graph handle (one hop of a search that
    /// runs elsewhere).
    Neighbours {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// The vertices.
        vertices: Vec<u64>,
    },
    /// Follow a chase file's pages, each naming the next.
    Chase {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// The page to start from.
        #[serde(default)]
        start: u64,
        /// Most pages read (default: the handle's page count).
        #[serde(default)]
        hops: Option<u64>,
        /// Runs (the median time is reported).
        #[serde(default = "one")]
        repeat: usize,
    },
    /// An in-store tap over a handle: `crc`, or a tap the server's runner knows (`sketch`,
    /// `corr`), with options as in `inpath wire --tap` (`sketch:format=u32`).
    Tap {
        /// `ID` or `ID@GEN`.
        handle: String,
        /// `NAME` or `NAME:key=value,...`.
        spec: String,
        /// Lanes.
        #[serde(default = "one")]
        threads: usize,
    },
}

impl Request {
    /// The verb, as the protocol's `"op"` names it.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Ls => "ls",
            Request::Grep { .. } => "grep",
            Request::Nn { .. } => "nn",
            Request::Index { .. } => "index",
            Request::Read { .. } => "read",
            Request::Stats => "stats",
            Request::Rm { .. } => "rm",
            Request::Put { .. } => "put",
            Request::Bfs { .. } => "bfs",
            Request::Neighbours { .. } => "neighbours",
            Request::Chase { .. } => "chase",
            Request::Tap { .. } => "tap",
        }
    }

    /// The role a request needs on a server that authenticates: `write` for what changes
    /// the store (`put`, `rm`, `index`), `read` for the rest.
    pub fn role(&self) -> Role {
        match self {
            Request::Put { .. } | Request::Rm { .. } | Request::Index { .. } => Role::Write,
            _ => Role::Read,
        }
    }

    /// The handle the request names, if it names one.
    pub fn handle(&self) -> Option<&str> {
        match self {
            Request::Grep { handle, .. }
            | Request::Nn { handle, .. }
            | Request::Index { handle, .. }
            | Request::Read { handle, .. }
            | Request::Rm { handle, .. }
            | Request::Bfs { handle, .. }
            | Request::Neighbours { handle, .. }
            | Request::Chase { handle, .. }
            | Request::Tap { handle, .. } => Some(handle),
            Request::Ls | Request::Stats | Request::Put { .. } => None,
        }
    }
}

fn default_page_size() -> u32 {
    crate::DEFAULT_PAGE_SIZE
}

/// Totals over every request a service answered.
#[derive(Default)]
struct Totals {
    requests: AtomicU64,
    errors: AtomicU64,
    bytes_scanned: AtomicU64,
    bytes_returned: AtomicU64,
    pages_read: AtomicU64,
    connections: AtomicU64,
}

/// A store directory with its keys and one reader: what answers requests.
pub struct Service {
    dir: PathBuf,
    ring: Option<KeyRing>,
    reader: FlashReader,
    max_threads: usize,
    started: Instant,
    cpu_at_start: f64,
    totals: Totals,
    /// The latest kernel runs, newest last (for `stats` and the live page).
    recent: Mutex<std::collections::VecDeque<Value>>,
    /// A store the caller opened just before, for the next request (see
    /// [`Service::with_opened`]).
    opened: Mutex<Option<Store>>,
    /// Refused connections and requests (a served store with TLS or authentication).
    guard: GuardCounters,
}

/// Kernel runs [`Service::stats`] lists under `recent`.
pub const RECENT_RUNS: usize = 20;

/// What a kernel run cost: bytes scanned, pages and reads, CPU seconds per GB.
struct RunCost {
    start: Instant,
    cpu: f64,
    reads: ReaderCounters,
}

fn cpu_now() -> f64 {
    let (u, s) = inpath_core::cpu_times();
    u + s
}

impl RunCost {
    fn start(reader: &FlashReader) -> RunCost {
        RunCost {
            start: Instant::now(),
            cpu: cpu_now(),
            reads: reader.counters(),
        }
    }

    fn json(&self, reader: &FlashReader, stats: &RunStats) -> Value {
        let seconds = self.start.elapsed().as_secs_f64();
        let cpu = cpu_now() - self.cpu;
        let now = reader.counters();
        let path = if stats.mapped {
            "mapped"
        } else if reader.config().direct {
            "direct"
        } else {
            "pread"
        };
        let gb = stats.bytes_scanned as f64 / 1e9;
        json!({
            "read_path": path,
            "lanes": stats.lanes,
            "bytes_scanned": stats.bytes_scanned,
            "pages_read": stats.pages,
            "reads": now.reads - self.reads.reads,
            "reads_in_flight": now.in_flight,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "cpu_seconds_per_gb": if gb > 0.0 { cpu / gb } else { 0.0 },
            "gb_per_second": if seconds > 0.0 { gb / seconds } else { 0.0 },
        })
    }
}

/// Adds a run's counters to a result, and the bytes the result itself returns (the in-store
/// promise: results leave the store, not pages).
fn with_counters(mut v: Value, counters: Value) -> Value {
    if let (Some(obj), Value::Object(c)) = (v.as_object_mut(), counters) {
        obj.extend(c);
    }
    let returned = v.to_string().len() as u64;
    v["bytes_returned"] = returned.into();
    v
}

/// `[[{"index", "distance"}, ...], ...]`, one list per query.
fn neighbours_json(n: &crate::Neighbours) -> Value {
    n.queries
        .iter()
        .map(|q| {
            q.iter()
                .map(|n| json!({"index": n.index, "distance": n.distance}))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .into()
}

/// Adds the bytes a result returns (its JSON text).
fn with_returned(mut v: Value) -> Value {
    let returned = v.to_string().len() as u64;
    v["bytes_returned"] = returned.into();
    v
}

/// What a checked `put` request stores: see [`Service::put_options`].
pub struct PutPlan {
    name: String,
    length: u64,
    page_size: u32,
    seal: Option<SealConfig>,
    key: Option<(u32, Key)>,
}

impl PutPlan {
    /// The bytes the client announced.
    pub fn length(&self) -> u64 {
        self.length
    }
}

/// A reader that counts what it gives.
struct Counted<R> {
    inner: R,
    bytes: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// JSON of a catalog entry.
pub fn entry_json(e: &crate::Entry) -> Value {
    json!({
        "handle": e.handle,
        "generation": e.generation,
        "name": e.name,
        "size": e.size,
        "page_size": e.page_size,
        "pages": e.pages(),
        "tier": match e.tier { Tier::Raw => "raw", Tier::Sealed => "sealed" },
        "codec": e.codec,
        "stored_bytes": e.stored_bytes(),
    })
}

fn bad_request(detail: impl Into<String>) -> StoreError {
    StoreError::BadRequest {
        detail: detail.into(),
    }
}

/// Lower-case hexadecimal.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Parses hexadecimal (either case).
pub fn from_hex(text: &str) -> Result<Vec<u8>> {
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return Err(bad_request(format!(
            "hexadecimal text of odd length {}",
            t.len()
        )));
    }
    let digit = |c: u8| -> Result<u8> {
        Ok(match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => {
                return Err(bad_request(format!(
                    "{:?} is not a hexadecimal digit",
                    c as char
                )))
            }
        })
    };
    t.chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

impl Service {
    /// A service over `dir` (opened afresh for every request, so handles put by another
    /// process are seen), sealed pages opened with `ring`.
    pub fn new(dir: PathBuf, ring: Option<KeyRing>, reader: FlashReader) -> Service {
        let max_threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Service {
            dir,
            ring,
            reader,
            max_threads,
            started: Instant::now(),
            cpu_at_start: cpu_now(),
            totals: Totals::default(),
            recent: Mutex::new(std::collections::VecDeque::with_capacity(RECENT_RUNS)),
            opened: Mutex::new(None),
            guard: GuardCounters::default(),
        }
    }

    /// The same service, with `store` (the same directory, opened by the caller a moment
    /// before, with the same keys) used by the next request instead of reading the catalog
    /// again: a one-shot command reads it once (1.5 MB for a 1 GB handle of 8 KiB pages).
    /// Later requests open the directory afresh, as always.
    pub fn with_opened(self, store: Store) -> Service {
        *self.opened.lock().unwrap_or_else(|p| p.into_inner()) = Some(store);
        self
    }

    /// The reader kernels and taps read through.
    pub fn reader(&self) -> &FlashReader {
        &self.reader
    }

    /// The counters of refused connections and requests (`stats` shows them).
    pub fn guard_counters(&self) -> &GuardCounters {
        &self.guard
    }

    fn store(&self) -> Result<Store> {
        if let Some(store) = self.opened.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Ok(store);
        }
        let store = Store::open(&self.dir)?;
        Ok(match &self.ring {
            Some(ring) => store.with_keys(ring),
            None => store,
        })
    }

    fn lanes(&self, threads: usize) -> usize {
        threads.clamp(1, self.max_threads.max(1) * 4)
    }

    /// Answers a request other than `read` (which streams: see [`Service::read_range`]).
    pub fn answer(&self, req: &Request) -> Result<Value> {
        self.totals.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = self.answer_inner(req);
        self.remember(req, &result, started.elapsed().as_secs_f64());
        match &result {
            Ok(v) => {
                let scanned = v.get("bytes_scanned").and_then(Value::as_u64).unwrap_or(0);
                let returned = v.get("bytes_returned").and_then(Value::as_u64).unwrap_or(0);
                let pages = v.get("pages_read").and_then(Value::as_u64).unwrap_or(0);
                self.totals
                    .bytes_scanned
                    .fetch_add(scanned, Ordering::Relaxed);
                self.totals
                    .bytes_returned
                    .fetch_add(returned, Ordering::Relaxed);
                self.totals.pages_read.fetch_add(pages, Ordering::Relaxed);
            }
            Err(_) => {
                self.totals.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Keeps a kernel run (a request that scanned pages, or failed) in the `recent` list.
    fn remember(&self, req: &Request, result: &Result<Value>, seconds: f64) {
        if matches!(req, Request::Stats | Request::Ls) {
            return;
        }
        let scanned = result
            .as_ref()
            .ok()
            .and_then(|v| v.get("bytes_scanned"))
            .and_then(Value::as_u64);
        if result.is_ok() && scanned.is_none() {
            return;
        }
        let run = json!({
            "op": req.op(),
            "handle": req.handle(),
            "bytes_scanned": scanned.unwrap_or(0),
            "seconds": seconds,
            "ok": result.is_ok(),
            "at_unix": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        });
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == RECENT_RUNS {
            recent.pop_front();
        }
        recent.push_back(run);
    }

    fn answer_inner(&self, req: &Request) -> Result<Value> {
        match req {
            Request::Ls => {
                let store = self.store()?;
                Ok(Value::Array(
                    store.entries().iter().map(entry_json).collect(),
                ))
            }
            Request::Grep {
                handle,
                pattern,
                regex,
                count,
                threads,
                with_text,
            } => self.grep(handle, pattern, *regex, *count, *threads, *with_text),
            Request::Nn {
                handle,
                item_size,
                queries_hex,
                k,
                threads,
                lsh,
                probe,
            } => {
                let queries = from_hex(queries_hex)?;
                if *lsh {
                    self.nn_lsh(handle, *item_size, queries, *k, *probe)
                } else {
                    self.nn(handle, *item_size, queries, *k, *threads)
                }
            }
            Request::Index {
                handle,
                item_size,
                tables,
                bits,
                seed,
                threads,
            } => {
                let params = LshParams {
                    tables: *tables,
                    bits: *bits,
                    seed: *seed,
                };
                self.index(handle, *item_size, params, *threads)
            }
            Request::Read { .. } => Err(bad_request(
                "read streams its bytes: use Service::read_range and Service::read_into",
            )),
            Request::Put { .. } => Err(bad_request(
                "put streams its bytes: use Service::put_options and Service::put",
            )),
            Request::Stats => Ok(self.stats()),
            Request::Rm { handle } => {
                let mut store = Store::open(&self.dir)?;
                let entry = store.remove(store.handle_ref(handle)?)?;
                Ok(entry_json(&entry))
            }
            Request::Bfs {
                handle,
                source,
                threads,
                arrays,
            } => self.bfs(handle, *source, *threads, *arrays),
            Request::Chase {
                handle,
                start,
                hops,
                repeat,
            } => self.chase(handle, *start, *hops, *repeat),
            Request::Neighbours { handle, vertices } => {
                let store = self.store()?;
                let handle = store.open_handle(store.handle_ref(handle)?)?;
                let graph = CsrGraph::open(&handle)?;
                let (targets, counts) = graph.neighbours_of(vertices)?;
                Ok(with_returned(json!({
                    "handle": handle.entry().handle,
                    "generation": handle.entry().generation,
                    "targets": targets,
                    "counts": counts,
                })))
            }
            Request::Tap {
                handle,
                spec,
                threads,
            } => self.tap(handle, spec, *threads),
        }
    }

    fn bfs(&self, handle: &str, source: u64, threads: usize, arrays: bool) -> Result<Value> {
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        let started = Instant::now();
        let cpu = cpu_now();
        let graph = CsrGraph::open(&handle)?;
        let opened = started.elapsed().as_secs_f64();
        let threads = self.lanes(threads);
        let searched = Instant::now();
        let result = graph.bfs(source, threads)?;
        let search_secs = searched.elapsed().as_secs_f64();
        let seconds = started.elapsed().as_secs_f64();
        let pages = graph.pages_read() + result.pages_read;
        let scanned = pages * handle.entry().page_size as u64;
        let mut v = json!({
            "handle": handle.entry().handle,
            "generation": handle.entry().generation,
            "source": source,
            "vertices": graph.vertices(),
            "edges": graph.edges(),
            "undirected": graph.header().undirected,
            "threads": threads,
            "reached": result.reached(),
            "depth": result.level_sizes.len() - 1,
            "level_sizes": result.level_sizes,
            "edges_traversed": result.edges_traversed,
            "pages_read": pages,
            "bytes_scanned": scanned,
            "open_seconds": opened,
            "bfs_seconds": search_secs,
            "seconds": seconds,
            "cpu_seconds": cpu_now() - cpu,
            "edges_per_second": result.edges_traversed as f64 / seconds.max(1e-9),
        });
        if arrays {
            let none = |x: u32| if x == u32::MAX { -1 } else { x as i64 };
            v["order"] = result.order.into();
            v["levels"] = result
                .levels
                .iter()
                .map(|&x| none(x))
                .collect::<Vec<_>>()
                .into();
            v["predecessors"] = result
                .predecessors
                .iter()
                .map(|&x| none(x))
                .collect::<Vec<_>>()
                .into();
        }
        Ok(with_returned(v))
    }

    fn chase(&self, handle: &str, start: u64, hops: Option<u64>, repeat: usize) -> Result<Value> {
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        let entry = handle.entry();
        let hops = hops.unwrap_or(entry.pages());
        let repeat = repeat.clamp(1, 1000);
        let mut runs = Vec::with_capacity(repeat);
        let mut last = None;
        for _ in 0..repeat {
            let t = Instant::now();
            let r = crate::chase(&handle, start, hops)?;
            runs.push(t.elapsed().as_secs_f64());
            last = Some(r);
        }
        let r = last.expect("at least one run");
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        let seconds = sorted[sorted.len() / 2];
        let n = r.sequence.len() as u64;
        let mut v = json!({
            "handle": entry.handle,
            "generation": entry.generation,
            "mode": "kernel",
            "start": start,
            "hops": n,
            "stop": match r.stop {
                Stop::End => "end",
                Stop::MaxHops => "max-hops",
                Stop::Cycle { .. } => "cycle",
            },
            "page_size": entry.page_size,
            "pages_read": n,
            "bytes_scanned": n * entry.page_size as u64,
            "seconds": seconds,
            "runs": runs,
            "ns_per_hop": seconds * 1e9 / n.max(1) as f64,
            "sequence": r.sequence,
        });
        if let Stop::Cycle { page } = r.stop {
            v["cycle_page"] = page.into();
        }
        Ok(with_returned(v))
    }

    fn tap(&self, handle: &str, spec: &str, threads: usize) -> Result<Value> {
        let name = tap_name(spec);
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        let lanes = self.lanes(threads);
        let cost = RunCost::start(&self.reader);
        let head = |v: Value| {
            json!({
                "handle": handle.entry().handle,
                "generation": handle.entry().generation,
                "tap": spec,
                "threads": lanes,
                "result": v,
            })
        };
        if name == "crc" {
            if spec.trim() != "crc" {
                return Err(bad_request(format!(
                    "tap {spec:?}: the crc tap takes no options"
                )));
            }
            let (p, stats) = run_counted(&self.reader, &handle, &Crc, lanes)?;
            let v = head(json!({"bytes": p.bytes, "crc32": p.crc32}));
            return Ok(with_counters(v, cost.json(&self.reader, &stats)));
        }
        if !TAP_NAMES.contains(&name) {
            return Err(bad_request(format!(
                "there is no tap {name:?}; this store runs: {}",
                TAP_NAMES.join(", ")
            )));
        }
        let tap_error = |source| StoreError::Tap {
            spec: spec.to_string(),
            source: Box::new(source),
        };
        let factory = inpath_taps::parse_tap(spec).map_err(tap_error)?;
        let size = handle.entry().size;
        let mut input = HandleReader::new(&self.reader, &handle, 0, size)?;
        let result = factory.run_input(&mut input, lanes).map_err(tap_error)?;
        let stats = RunStats {
            bytes_scanned: input.bytes_read(),
            pages: input.pages_read(),
            lanes,
            mapped: false,
        };
        Ok(with_counters(head(result), cost.json(&self.reader, &stats)))
    }

    /// Checks a `put` request before its bytes are sent: the page size, the seal tier and its
    /// key. Returns what [`Service::put`] needs.
    pub fn put_options(&self, req: &Request) -> Result<PutPlan> {
        let Request::Put {
            name,
            length,
            page_size,
            seal_tier,
            compress,
            key_id,
        } = req
        else {
            return Err(bad_request("not a put request"));
        };
        if name.is_empty() {
            return Err(StoreError::parameter("name", "\"\"", "a non-empty name"));
        }
        if !(crate::catalog::MIN_PAGE..=crate::catalog::MAX_PAGE).contains(page_size) {
            return Err(StoreError::parameter(
                "page size",
                page_size,
                "512 bytes to 16 MiB",
            ));
        }
        let seal_err = |e: inpath_seal::Error| bad_request(e.to_string());
        let cipher = match seal_tier {
            Some(t) => Some(Cipher::parse(t).map_err(seal_err)?),
            None => None,
        };
        let compression = match compress {
            Some(c) => Some(Compression::parse(c).map_err(seal_err)?),
            None => None,
        };
        let sealed = cipher.is_some() || compression.is_some();
        let (cipher, bits) = cipher.unwrap_or((Cipher::None, 0));
        let key = if cipher == Cipher::None {
            None
        } else {
            let ring = self.ring.as_ref().ok_or_else(|| {
                bad_request(format!(
                    "seal tier {:?} needs a key, and this store was opened without a key file",
                    seal_tier.as_deref().unwrap_or_default()
                ))
            })?;
            let id = match key_id {
                Some(id) => *id,
                None => ring
                    .ids()
                    .next()
                    .ok_or_else(|| bad_request("the store's key file holds no keys"))?,
            };
            let key = ring.get(id).map_err(seal_err)?;
            if key.bits() != bits {
                return Err(bad_request(format!(
                    "seal tier {:?} needs a {bits}-bit key, but key {id} is {} bits",
                    seal_tier.as_deref().unwrap_or_default(),
                    key.bits()
                )));
            }
            Some((id, key.clone()))
        };
        Ok(PutPlan {
            name: name.clone(),
            length: *length,
            page_size: *page_size,
            seal: sealed.then_some(SealConfig {
                compression: compression.unwrap_or(Compression::None),
                cipher,
            }),
            key,
        })
    }

    /// Stores what `input` gives under the plan's name (exactly `plan.length` bytes, else an
    /// error and nothing stored). Returns the new entry as JSON.
    pub fn put(&self, plan: &PutPlan, input: impl Read) -> Result<Value> {
        let options = PutOptions {
            page_size: plan.page_size,
            seal: plan
                .seal
                .map(|c| (c, plan.key.as_ref().map(|(id, k)| (*id, k)))),
        };
        let mut counted = Counted {
            inner: input,
            bytes: 0,
        };
        let mut store = Store::create(&self.dir)?;
        let entry = store.put_reader(&mut counted, &plan.name, &options)?;
        if counted.bytes != plan.length {
            // The client sent a different length than it announced: undo.
            let _ = store.remove(HandleRef {
                id: entry.handle,
                generation: Some(entry.generation),
            });
            return Err(bad_request(format!(
                "put announced {} bytes and sent {}",
                plan.length, counted.bytes
            )));
        }
        Ok(entry_json(&entry))
    }

    fn nn(
        &self,
        handle: &str,
        item_size: usize,
        queries: Vec<u8>,
        k: usize,
        threads: usize,
    ) -> Result<Value> {
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        let kernel = Hamming::new(item_size, queries, k)?;
        kernel.check_size(handle.entry().size)?;
        let cost = RunCost::start(&self.reader);
        let (result, stats) = run_counted(&self.reader, &handle, &kernel, self.lanes(threads))?;
        let v = json!({
            "handle": handle.entry().handle,
            "generation": handle.entry().generation,
            "item_size": item_size,
            "items": handle.entry().size / item_size as u64,
            "k": k,
            "kernel": kernel.kernel().name(),
            "neighbours": neighbours_json(&result),
        });
        Ok(with_counters(v, cost.json(&self.reader, &stats)))
    }

    fn nn_lsh(
        &self,
        handle: &str,
        item_size: usize,
        queries: Vec<u8>,
        k: usize,
        probe: u32,
    ) -> Result<Value> {
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        // Checked before the index is read, so bad queries are named first.
        Hamming::new(item_size, queries.clone(), k)?.check_size(handle.entry().size)?;
        let cost = RunCost::start(&self.reader);
        let index = LshIndex::load(&self.dir, &handle, Some(item_size))?;
        let loaded = cost.start.elapsed().as_secs_f64();
        let kernel = HammingKernel::best();
        let (result, st) = index.search(&handle, &queries, k, probe, kernel)?;
        let is = item_size as u64;
        let ps = handle.entry().page_size as u64;
        let stats = RunStats {
            bytes_scanned: st.bytes_read,
            pages: st.candidates * is.div_ceil(ps).max(1),
            lanes: 1,
            mapped: false,
        };
        let items = handle.entry().size / is;
        let v = json!({
            "handle": handle.entry().handle,
            "generation": handle.entry().generation,
            "item_size": item_size,
            "items": items,
            "k": k,
            "kernel": kernel.name(),
            "lsh": {
                "tables": index.params.tables,
                "bits": index.params.bits,
                "seed": index.params.seed,
                "probe": probe,
                "buckets_probed": st.buckets_probed,
                "candidates": st.candidates,
                "bytes_read": st.bytes_read,
                "index_seconds": loaded,
            },
            "neighbours": neighbours_json(&result),
        });
        Ok(with_counters(v, cost.json(&self.reader, &stats)))
    }

    fn index(
        &self,
        handle: &str,
        item_size: usize,
        params: LshParams,
        threads: usize,
    ) -> Result<Value> {
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        let cost = RunCost::start(&self.reader);
        let (index, stats) = LshIndex::build(
            &self.reader,
            &handle,
            item_size,
            params,
            self.lanes(threads),
        )?;
        let path = LshIndex::path(&self.dir, handle.entry().handle);
        index.save(&path)?;
        let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let v = json!({
            "handle": handle.entry().handle,
            "generation": handle.entry().generation,
            "item_size": item_size,
            "items": index.items(),
            "tables": params.tables,
            "bits": params.bits,
            "seed": params.seed,
            "path": path.display().to_string(),
            "index_bytes": file_bytes,
        });
        Ok(with_counters(v, cost.json(&self.reader, &stats)))
    }

    fn grep(
        &self,
        handle: &str,
        pattern: &str,
        regex: bool,
        count: bool,
        threads: usize,
        with_text: bool,
    ) -> Result<Value> {
        if pattern.is_empty() {
            return Err(StoreError::parameter(
                "pattern",
                "\"\"",
                "at least one byte",
            ));
        }
        if !regex && pattern.contains('\n') {
            return Err(StoreError::parameter(
                "pattern",
                format!("{pattern:?}"),
                "one line: a literal pattern may not hold a newline (search for one line at a time)",
            ));
        }
        let store = self.store()?;
        let handle = store.open_handle(store.handle_ref(handle)?)?;
        let lanes = self.lanes(threads);
        let offsets = !count;
        let cost = RunCost::start(&self.reader);
        let (kind, lines, matches, offs, lengths, stats) = if regex {
            let k = RegexSearch::new(pattern, offsets)?;
            let (h, stats) = run_counted(&self.reader, &handle, &k, lanes)?;
            ("regex", h.lines, h.matches, h.offsets, h.lengths, stats)
        } else {
            let k = Literal::new(pattern.as_bytes(), offsets)?;
            let (h, stats) = run_counted(&self.reader, &handle, &k, lanes)?;
            let n = h.offsets.len();
            let len = pattern.len() as u64;
            (
                "literal",
                h.lines,
                h.matches,
                h.offsets,
                vec![len; n],
                stats,
            )
        };
        let counters = cost.json(&self.reader, &stats);
        let mut v = json!({
            "handle": handle.entry().handle,
            "generation": handle.entry().generation,
            "pattern": pattern,
            "kind": kind,
            "lines": lines,
            "threads": lanes,
        });
        if offsets {
            v["matches"] = matches.into();
            if with_text && regex {
                let texts = offs
                    .iter()
                    .zip(&lengths)
                    .map(|(&o, &l)| Ok(to_hex(&handle.read(o, l)?)))
                    .collect::<Result<Vec<_>>>()?;
                v["texts_hex"] = texts.into();
            }
            v["offsets"] = offs.into();
            v["lengths"] = lengths.into();
        }
        Ok(with_counters(v, counters))
    }

    /// The server's counters since it started, and its latest kernel runs (`recent`, newest
    /// last): the `stats` request's answer and `GET /stats` of `store serve --http`.
    pub fn stats(&self) -> Value {
        let t = &self.totals;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let cpu = cpu_now() - self.cpu_at_start;
        let scanned = load(&t.bytes_scanned);
        let c = self.reader.counters();
        let mut v = json!({
            "dir": self.dir.display().to_string(),
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "requests": load(&t.requests),
            "errors": load(&t.errors),
            "connections": load(&t.connections),
            "bytes_scanned": scanned,
            "bytes_returned": load(&t.bytes_returned),
            "pages_read": load(&t.pages_read),
            "reads": c.reads,
            "reads_in_flight": c.in_flight,
            "cpu_seconds": cpu,
            "cpu_seconds_per_gb": if scanned > 0 { cpu / (scanned as f64 / 1e9) } else { 0.0 },
            "recent": self.recent.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect::<Vec<_>>(),
        });
        if let (Some(obj), Value::Object(g)) = (v.as_object_mut(), self.guard.json()) {
            obj.extend(g);
        }
        v
    }

    /// Resolves a `read` request: the handle and the byte range.
    pub fn read_range(
        &self,
        handle: &str,
        offset: u64,
        length: Option<u64>,
    ) -> Result<(Arc<OpenHandle>, u64)> {
        let store = self.store()?;
        let h = store.handle_ref(handle)?;
        let handle = store.open_handle(h)?;
        let size = handle.entry().size;
        let length = match length {
            Some(l) => l,
            None => size.checked_sub(offset).ok_or(StoreError::RangePastEnd {
                handle: h.id,
                offset,
                length: 0,
                size,
            })?,
        };
        handle.check_range(offset, length)?;
        Ok((handle, length))
    }

    /// Streams `length` bytes at `offset` of `handle` to `write`, a chunk at a time.
    pub fn read_into(
        &self,
        handle: &Arc<OpenHandle>,
        offset: u64,
        length: u64,
        mut write: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<()> {
        for chunk in self.reader.request(handle, offset, length)? {
            write(chunk?.bytes()).map_err(|source| StoreError::Connection {
                addr: "the output".into(),
                what: "cannot write the bytes read".into(),
                source,
            })?;
        }
        Ok(())
    }
}

fn write_frame(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(bytes)
}

/// Reads a frame; `Ok(None)` at a clean end of stream (before a frame's first byte). Errors
/// are described in words (the caller knows the peer).
/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
enum FrameError {
    #[error("the connection closed in the middle of a {what} frame's length")]
    ClosedInLength { what: &'static str },
    #[error("reading a {what}: {source}")]
    Read {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("a {what} frame of {len} bytes is over the limit of {max} bytes")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("the connection closed in the middle of a {what} of {len} bytes ({source})")]
    ClosedInFrame {
        what: &'static str,
        len: usize,
        source: std::io::Error,
    },
}

/// Why a served connection ended before the client closed it.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the client left: {0}")]
    Left(#[from] std::io::Error),
    #[error("the client left in the middle of a put: {0}")]
    LeftInPut(String),
    #[error("{0}")]
    Refused(String),
}

impl FrameError {
    /// The error in words for a client: a TLS refusal that arrives after the handshake (a
    /// client certificate refused under TLS 1.3) in rustls' reason, not as a broken read.
    fn client_text(&self) -> String {
        match self {
            FrameError::Read { source, .. } | FrameError::ClosedInFrame { source, .. }
                if source
                    .get_ref()
                    .is_some_and(|e| e.is::<inpath_net::rustls::Error>()) =>
            {
                inpath_net::stream::io_text(source, false)
            }
            other => other.to_string(),
        }
    }
}

fn read_frame(
    r: &mut impl Read,
    max: usize,
    what: &'static str,
) -> std::result::Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            // A TLS client that leaves without close_notify, between frames: a clean end.
            Err(e) if got == 0 && e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Ok(0) => return Err(FrameError::ClosedInLength { what }),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(FrameError::Read { what, source }),
        }
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > max {
        return Err(FrameError::TooLong { what, len: n, max });
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf)
        .map_err(|source| FrameError::ClosedInFrame {
            what,
            len: n,
            source,
        })?;
    Ok(Some(buf))
}

/// An error in words with its causes, as the CLI prints them.
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn error_frame(e: &(dyn std::error::Error + 'static)) -> Vec<u8> {
    json!({ "error": error_text(e) }).to_string().into_bytes()
}

fn answer_of(result: Result<Value>) -> Vec<u8> {
    match result {
        Ok(v) => json!({ "ok": v }).to_string().into_bytes(),
        Err(e) => error_frame(&e),
    }
}

/// Parses a request frame, refusing other protocol versions.
pub fn parse_request(frame: &[u8]) -> Result<Request> {
    let mut v: Value = serde_json::from_slice(frame)
        .map_err(|e| bad_request(format!("the request is not JSON: {e}")))?;
    if let Some(obj) = v.as_object_mut() {
        if let Some(ver) = obj.remove("v") {
            if ver.as_u64() != Some(PROTOCOL_VERSION as u64) {
                return Err(bad_request(format!(
                    "protocol version {ver} is not served (this server speaks {PROTOCOL_VERSION})"
                )));
            }
        }
    }
    serde_json::from_value(v)
        .map_err(|e| bad_request(format!("the request is not one this server knows: {e}")))
}

/// Serves one connection until the client closes it or a write fails (the client left).
/// Returns why it ended early.
fn serve_connection(
    service: &Service,
    security: &Security,
    session: &mut Session,
) -> std::result::Result<(), Ended> {
    session.stream.tcp().set_nodelay(true).ok();
    // A client that stops in the middle of a request frame is dropped after this long.
    let _ = session
        .stream
        .tcp()
        .set_read_timeout(Some(Duration::from_secs(300)));
    let _ = session.stream.tcp().set_write_timeout(None);
    let gone = Ended::Left;
    loop {
        let frame = match read_frame(&mut session.stream, MAX_REQUEST, "request") {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e) => {
                // Tell the client if it is still there; then close.
                let _ = write_frame(&mut session.stream, &error_frame(&e));
                return Err(e.into());
            }
        };
        let parsed = parse_request(&frame);
        let needed = parsed.as_ref().ok().map(Request::role);
        match session.check(security, &service.guard, &frame, needed) {
            Verdict::Serve => {}
            Verdict::Answer(v) => {
                write_frame(&mut session.stream, &answer_of(Ok(v))).map_err(gone)?;
                continue;
            }
            Verdict::Refuse { error, close } => {
                service.totals.errors.fetch_add(1, Ordering::Relaxed);
                let text = error.to_string();
                write_frame(&mut session.stream, &answer_of(Err(error))).map_err(gone)?;
                if close {
                    session.stream.close();
                    return Err(Ended::Refused(text));
                }
                continue;
            }
        }
        let stream = &mut session.stream;
        let req = match parsed {
            Ok(r) => r,
            Err(e) => {
                service.totals.errors.fetch_add(1, Ordering::Relaxed);
                write_frame(stream, &answer_of(Err(e))).map_err(gone)?;
                continue;
            }
        };
        if let Request::Read {
            handle,
            offset,
            length,
        } = &req
        {
            service.totals.requests.fetch_add(1, Ordering::Relaxed);
            let (h, length) = match service.read_range(handle, *offset, *length) {
                Ok(x) => x,
                Err(e) => {
                    service.totals.errors.fetch_add(1, Ordering::Relaxed);
                    write_frame(stream, &answer_of(Err(e))).map_err(gone)?;
                    continue;
                }
            };
            write_frame(stream, &answer_of(Ok(json!({ "length": length })))).map_err(gone)?;
            let mut pending = Vec::with_capacity(STREAM_FRAME);
            let result = service.read_into(&h, *offset, length, |bytes| {
                pending.extend_from_slice(bytes);
                if pending.len() >= STREAM_FRAME {
                    write_frame(stream, &pending)?;
                    pending.clear();
                }
                Ok(())
            });
            match result {
                Ok(()) => {
                    if !pending.is_empty() {
                        write_frame(stream, &pending).map_err(gone)?;
                    }
                    write_frame(stream, &[]).map_err(gone)?;
                    service
                        .totals
                        .bytes_returned
                        .fetch_add(length, Ordering::Relaxed);
                }
                Err(StoreError::Connection { source, .. }) => return Err(gone(source)),
                Err(e) => {
                    service.totals.errors.fetch_add(1, Ordering::Relaxed);
                    stream
                        .write_all(&STREAM_ERROR.to_le_bytes())
                        .map_err(gone)?;
                    write_frame(stream, &answer_of(Err(e))).map_err(gone)?;
                }
            }
            continue;
        }
        if let Request::Put { .. } = &req {
            service.totals.requests.fetch_add(1, Ordering::Relaxed);
            let plan = match service.put_options(&req) {
                Ok(p) => p,
                Err(e) => {
                    service.totals.errors.fetch_add(1, Ordering::Relaxed);
                    write_frame(stream, &answer_of(Err(e))).map_err(gone)?;
                    continue;
                }
            };
            write_frame(stream, &answer_of(Ok(json!({ "send": plan.length() })))).map_err(gone)?;
            let mut frames = FrameReader {
                stream: &mut *stream,
                left: None,
                ended: false,
                broken: None,
            };
            let result = service.put(&plan, &mut frames);
            // A put that failed before the stream's end (a full disk) reads the rest, so the
            // connection stays in step; a client that left ends the connection.
            let drained = frames.drain();
            if let Some(e) = frames.broken.take() {
                return Err(Ended::LeftInPut(e));
            }
            drained.map_err(gone)?;
            if result.is_err() {
                service.totals.errors.fetch_add(1, Ordering::Relaxed);
            }
            write_frame(stream, &answer_of(result)).map_err(gone)?;
            continue;
        }
        let answer = answer_of(service.answer(&req));
        write_frame(stream, &answer).map_err(gone)?;
    }
}

/// The data frames of a `put` as a [`Read`]: ends at the empty frame.
struct FrameReader<'s, R: Read> {
    stream: &'s mut R,
    /// Bytes left in the current frame (`None`: at a frame's length).
    left: Option<usize>,
    ended: bool,
    /// Why the stream broke (the client left or broke the framing).
    broken: Option<String>,
}

impl<R: Read> FrameReader<'_, R> {
    fn fail(&mut self, e: String) -> std::io::Error {
        self.broken = Some(e.clone());
        std::io::Error::other(e)
    }

    /// Reads and drops the rest of the frames, up to the empty one.
    fn drain(&mut self) -> std::io::Result<()> {
        let mut sink = vec![0u8; 64 << 10];
        while !self.ended && self.broken.is_none() {
            if self.read(&mut sink)? == 0 {
                break;
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for FrameReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.ended || buf.is_empty() {
            return Ok(0);
        }
        if let Some(e) = &self.broken {
            return Err(std::io::Error::other(e.clone()));
        }
        let left = match self.left {
            Some(n) => n,
            None => {
                let mut len = [0u8; 4];
                if let Err(e) = self.stream.read_exact(&mut len) {
                    return Err(self.fail(format!("reading a data frame's length: {e}")));
                }
                let n = u32::from_le_bytes(len) as usize;
                if n == 0 {
                    self.ended = true;
                    return Ok(0);
                }
                if n > MAX_REQUEST {
                    return Err(self.fail(format!(
                        "a data frame of {n} bytes is over the limit of {MAX_REQUEST} bytes"
                    )));
                }
                n
            }
        };
        let want = buf.len().min(left);
        let got = loop {
            match self.stream.read(&mut buf[..want]) {
                Ok(0) => return Err(self.fail("the connection closed inside a data frame".into())),
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.fail(format!("reading a data frame: {e}"))),
            }
        };
        self.left = (left - got > 0).then_some(left - got);
        Ok(got)
    }
}

/// Listens on `listen` and serves each connection on its own thread, at most `max_conns` at
/// once (a connection over the limit is told so and closed), protected by `security` (TLS,
/// credentials: [`guard`]). Calls `bound` with the address once listening (the CLI prints
/// it). Runs until the process is stopped. The listener policy (no unprotected port beyond
/// loopback) is the caller's: `inpath_net::policy::check`.
pub fn serve(
    service: Arc<Service>,
    listen: &str,
    max_conns: usize,
    security: Arc<Security>,
    bound: impl FnOnce(SocketAddr),
) -> Result<()> {
    let io = |source| StoreError::Connection {
        addr: listen.to_string(),
        what: "cannot listen".into(),
        source,
    };
    let listener = TcpListener::bind(listen).map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    bound(addr);
    let open = Arc::new(Mutex::new(0usize));
    for stream in listener.incoming() {
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                eprintln!("inpath store serve: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        {
            let mut n = open.lock().unwrap_or_else(|p| p.into_inner());
            if *n >= max_conns {
                // In plain text, which a TLS client cannot read: it sees the close.
                if security.tls.is_none() {
                    let busy = StoreError::Busy { max_conns };
                    let _ = write_frame(&mut stream, &error_frame(&busy));
                }
                continue;
            }
            *n += 1;
        }
        service.totals.connections.fetch_add(1, Ordering::Relaxed);
        let (service, open, security) = (
            Arc::clone(&service),
            Arc::clone(&open),
            Arc::clone(&security),
        );
        let peer = stream.peer_addr().ok();
        let spawned = std::thread::Builder::new()
            .name("inpath-store-conn".into())
            .spawn(move || {
                let who = || peer.map_or("a client".to_string(), |p| p.to_string());
                match guard::open(&security, &service.guard, stream) {
                    Ok(mut session) => {
                        if let Err(e) = serve_connection(&service, &security, &mut session) {
                            eprintln!("inpath store serve: {}: {e}", who());
                        }
                    }
                    Err(refusal) => {
                        eprintln!("inpath store serve: {}: refused: {}", who(), refusal.reason);
                        if let Some((mut tcp, error)) = refusal.plain.map(|b| *b) {
                            if write_frame(&mut tcp, &error_frame(&error)).is_ok() {
                                guard::linger(tcp);
                            }
                        }
                    }
                }
                *open.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
            });
        if let Err(e) = spawned {
            eprintln!("inpath store serve: cannot start a connection thread: {e}");
        }
    }
    Ok(())
}

/// A connection to a store server.
pub struct Client {
    stream: Stream,
    addr: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("tls", &self.stream.is_tls())
            .finish()
    }
}

impl Drop for Client {
    /// Ends a TLS connection with `close_notify`, so the server sees a clean end.
    fn drop(&mut self) {
        self.stream.close();
    }
}

impl Client {
    /// Connects to `addr` (`HOST:PORT`) in plain TCP without a credential, waiting at most
    /// 10 seconds.
    pub fn connect(addr: &str) -> Result<Client> {
        Client::connect_with(addr, &Credentials::default())
    }

    /// Connects to `addr` with `credentials`: TLS when they have a CA, then the token, if
    /// any, in an `auth` frame (a server that refuses it says why).
    pub fn connect_with(addr: &str, credentials: &Credentials) -> Result<Client> {
        use inpath_net::client::ConnectError;
        let stream = inpath_net::client::connect(addr, credentials, Duration::from_secs(10))
            .map_err(|e| match e {
                ConnectError::Resolve(source) => StoreError::Connection {
                    addr: addr.to_string(),
                    what: "cannot resolve the address".into(),
                    source,
                },
                ConnectError::Connect(source) => StoreError::Connection {
                    addr: addr.to_string(),
                    what: "cannot connect".into(),
                    source,
                },
                other => StoreError::Remote {
                    addr: addr.to_string(),
                    detail: format!("TLS: {other}"),
                },
            })?;
        let mut client = Client {
            stream,
            addr: addr.to_string(),
        };
        if let Some(token) = &credentials.token {
            if !client.stream.is_tls() {
                let loopback = client
                    .stream
                    .tcp()
                    .peer_addr()
                    .is_ok_and(|a| inpath_net::policy::is_loopback(a.ip()));
                if !loopback {
                    return Err(StoreError::Refused {
                        detail: format!(
                            "a token is only sent over TLS, and {addr} is not loopback: give \
                             --tls-ca"
                        ),
                    });
                }
            }
            write_frame(&mut client.stream, &guard::auth_frame(token)).map_err(|source| {
                StoreError::Connection {
                    addr: addr.to_string(),
                    what: "cannot send the token".into(),
                    source,
                }
            })?;
            client.receive()?;
        }
        Ok(client)
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn remote(&self, detail: impl Into<String>) -> StoreError {
        StoreError::Remote {
            addr: self.addr.clone(),
            detail: detail.into(),
        }
    }

    fn send(&mut self, req: &Request) -> Result<()> {
        let mut v = serde_json::to_value(req).map_err(|e| bad_request(e.to_string()))?;
        v["v"] = PROTOCOL_VERSION.into();
        write_frame(&mut self.stream, v.to_string().as_bytes()).map_err(|source| {
            StoreError::Connection {
                addr: self.addr.clone(),
                what: "cannot send a request".into(),
                source,
            }
        })
    }

    fn receive(&mut self) -> Result<Value> {
        let frame = read_frame(&mut self.stream, MAX_ANSWER, "answer")
            .map_err(|e| self.remote(e.client_text()))?
            .ok_or_else(|| self.remote("the server closed the connection"))?;
        let v: Value = serde_json::from_slice(&frame)
            .map_err(|e| self.remote(format!("the answer is not JSON: {e}")))?;
        if let Some(e) = v.get("error") {
            return Err(self.remote(e.as_str().unwrap_or("the server reported an error")));
        }
        v.get("ok")
            .cloned()
            .ok_or_else(|| self.remote("the answer has neither ok nor error"))
    }

    /// Sends a `put` request, then the request's `length` bytes from `input`; returns the
    /// new entry. An `input` shorter than announced fails the put (nothing is stored).
    pub fn put(&mut self, req: &Request, mut input: impl Read) -> Result<Value> {
        let Request::Put { length, .. } = req else {
            return Err(bad_request("Client::put takes a put request"));
        };
        self.send(req)?;
        self.receive()?;
        let mut left = *length;
        let mut buf = vec![0u8; STREAM_FRAME];
        let addr = self.addr.clone();
        let cut = |source| StoreError::Connection {
            addr: addr.clone(),
            what: "cannot send the bytes to put".into(),
            source,
        };
        while left > 0 {
            let want = (left as usize).min(buf.len());
            let n = match input.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    // End the stream so the server answers (and stores nothing).
                    write_frame(&mut self.stream, &[]).map_err(cut)?;
                    let _ = self.receive();
                    return Err(StoreError::Read {
                        path: "the input".into(),
                        source,
                    });
                }
            };
            write_frame(&mut self.stream, &buf[..n]).map_err(cut)?;
            left -= n as u64;
        }
        write_frame(&mut self.stream, &[]).map_err(cut)?;
        self.receive()
    }

    /// Sends a request other than `read` and `put` and returns its result.
    pub fn call(&mut self, req: &Request) -> Result<Value> {
        if matches!(req, Request::Read { .. }) {
            return Err(bad_request("read streams its bytes: use Client::read"));
        }
        if matches!(req, Request::Put { .. }) {
            return Err(bad_request("put streams its bytes: use Client::put"));
        }
        self.send(req)?;
        self.receive()
    }

    /// Sends a `read` request and hands the streamed bytes to `write`; returns their count.
    pub fn read(
        &mut self,
        req: &Request,
        mut write: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        if !matches!(req, Request::Read { .. }) {
            return Err(bad_request("Client::read takes a read request"));
        }
        self.send(req)?;
        let head = self.receive()?;
        let want = head.get("length").and_then(Value::as_u64).unwrap_or(0);
        let mut got = 0u64;
        let cut = |e: std::io::Error| format!("the server stopped in the middle of a read: {e}");
        loop {
            let mut len = [0u8; 4];
            if let Err(e) = self.stream.read_exact(&mut len) {
                return Err(self.remote(cut(e)));
            }
            let n = u32::from_le_bytes(len);
            if n == 0 {
                break;
            }
            if n == STREAM_ERROR {
                self.receive()?;
                return Err(self.remote("the server failed the read without saying why"));
            }
            let mut buf = vec![0u8; n as usize];
            if let Err(e) = self.stream.read_exact(&mut buf) {
                return Err(self.remote(cut(e)));
            }
            got += n as u64;
            write(&buf).map_err(|source| StoreError::Connection {
                addr: "the output".into(),
                what: "cannot write the bytes read".into(),
                source,
            })?;
        }
        if got != want {
            return Err(self.remote(format!("sent {got} bytes of the {want} it announced")));
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    }

    #[test]
    fn put_frames_read_in_any_piece_sizes_and_drain_to_the_end() {
        let (mut client, mut server) = pair();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for piece in data.chunks(70_001) {
            write_frame(&mut client, piece).unwrap();
        }
        write_frame(&mut client, &[]).unwrap();
        write_frame(&mut client, b"next").unwrap();
        let mut r = FrameReader {
            stream: &mut server,
            left: None,
            ended: false,
            broken: None,
        };
        // A reader that stops early (a put that failed) and drains the rest.
        let mut got = vec![0u8; 100_000];
        r.read_exact(&mut got).unwrap();
        assert_eq!(got, data[..100_000]);
        r.drain().unwrap();
        assert!(r.ended && r.broken.is_none());
        assert_eq!(r.read(&mut got).unwrap(), 0);
        // The connection is in step: the next frame is the one after the empty frame.
        let next = read_frame(&mut server, 100, "request").unwrap().unwrap();
        assert_eq!(next, b"next");

        // Whole: exactly the bytes sent, whatever the read sizes.
        write_frame(&mut client, &data[..5]).unwrap();
        write_frame(&mut client, &data[5..]).unwrap();
        write_frame(&mut client, &[]).unwrap();
        let mut r = FrameReader {
            stream: &mut server,
            left: None,
            ended: false,
            broken: None,
        };
        let mut all = Vec::new();
        let mut buf = [0u8; 777];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        assert_eq!(all, data);
    }

    #[test]
    fn a_client_that_leaves_inside_a_frame_breaks_the_stream() {
        let (mut client, mut server) = pair();
        client.write_all(&1000u32.to_le_bytes()).unwrap();
        client.write_all(&[1u8; 10]).unwrap();
        drop(client);
        let mut r = FrameReader {
            stream: &mut server,
            left: None,
            ended: false,
            broken: None,
        };
        let mut sink = Vec::new();
        let err = r.read_to_end(&mut sink).unwrap_err();
        assert!(
            err.to_string().contains("closed inside a data frame"),
            "{err}"
        );
        assert!(r.broken.is_some());
        assert!(r.drain().is_ok()); // nothing more to read: the caller sees `broken`
    }
}
