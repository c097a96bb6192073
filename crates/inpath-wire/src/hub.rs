//! The results hub: per-connection state, finished jobs, the combined view of all connections,
//! counters for `/metrics`, and the JSON-lines log.
//!
//! Every finished job is written to the log as one JSON line (`"event": "job"`), and every
//! closed connection as one more (`"event": "connection"`, with what happened to it). The hub
//! keeps the last [`crate::ServerConfig::keep_closed`] closed connections for the HTTP API, and
//! one merged partial result per tap and direction (the combined view) in constant memory.

pub use crate::metrics::{Metrics, TapCounters};
use crate::runner::{Context, Finished, TapRunner};
use crate::{Direction, JobSplit, Mode, TapPolicy, WireError};
use inpath_taps::{Partial, TapFactory};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Where result lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard output.
    Stdout,
    /// Appended to this file.
    File(PathBuf),
    /// Nowhere (results are still kept for the API).
    Discard,
}

/// Locks a mutex, recovering the data if a holder panicked (the data are counters and results
/// that stay consistent line by line).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What happened to a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// A fixed label (`closed`, `client_reset`, `destination_refused`...), for metrics.
    pub kind: &'static str,
    /// Details in words (the socket error).
    pub detail: String,
}

impl Outcome {
    pub(crate) fn new(kind: &'static str, detail: impl Into<String>) -> Self {
        Outcome {
            kind,
            detail: detail.into(),
        }
    }
}

/// Settings the hub needs (a part of [`crate::ServerConfig`]).
pub(crate) struct HubConfig {
    pub mode: Mode,
    pub taps: Vec<Arc<dyn TapFactory>>,
    /// JSON keys of the taps: the name, with `#2`... when a name repeats.
    pub labels: Vec<String>,
    pub directions: Vec<Direction>,
    pub split: JobSplit,
    pub policy: TapPolicy,
    pub keep_closed: usize,
}

/// One open connection, as the hub sees it.
pub(crate) struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    pub to: Option<SocketAddr>,
    pub opened: Instant,
    pub opened_unix: f64,
    pub bytes: [AtomicU64; 2],
    pub forwarded: [AtomicU64; 2],
    /// Bytes read but never tapped (lossy tap policy), per direction.
    pub skipped: [AtomicU64; 2],
    pub runners: Mutex<Vec<(Direction, Arc<Mutex<TapRunner>>)>>,
    pub backpressure_waits: AtomicU64,
    pub backpressure_nanos: AtomicU64,
    pub jobs: AtomicU64,
    pub state: Mutex<&'static str>,
    recent_jobs: Mutex<VecDeque<Value>>,
}

const RECENT_JOBS: usize = 8;

impl Conn {
    fn json(&self, hub: &Hub, live: bool) -> Value {
        let mut value = json!({
            "conn": self.id,
            "peer": self.peer.to_string(),
            "opened_at": self.opened_unix,
            "seconds": self.opened.elapsed().as_secs_f64(),
            "bytes_c2s": self.bytes[0].load(Ordering::Relaxed),
            "bytes_s2c": self.bytes[1].load(Ordering::Relaxed),
            "jobs": self.jobs.load(Ordering::Relaxed),
            "backpressure_waits": self.backpressure_waits.load(Ordering::Relaxed),
            "backpressure_seconds": self.backpressure_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        });
        if hub.config.policy == TapPolicy::Lossy {
            value["skipped_c2s"] = json!(self.skipped[0].load(Ordering::Relaxed));
            value["skipped_s2c"] = json!(self.skipped[1].load(Ordering::Relaxed));
        }
        if let Some(to) = self.to {
            value["to"] = json!(to.to_string());
            value["forwarded_c2s"] = json!(self.forwarded[0].load(Ordering::Relaxed));
            value["forwarded_s2c"] = json!(self.forwarded[1].load(Ordering::Relaxed));
        }
        if live {
            value["state"] = json!(*lock(&self.state));
            let mut current = Map::new();
            for (direction, runner) in lock(&self.runners).iter() {
                current.insert(
                    direction.name().into(),
                    lock(runner).live_json(&hub.config.labels),
                );
            }
            value["current_job"] = Value::Object(current);
        }
        value["recent_jobs"] = json!(lock(&self.recent_jobs).iter().collect::<Vec<_>>());
        value
    }
}

/// Results of a running relay or sink: open connections, finished jobs, the combined view and
/// the counters. Shared by the connection tasks and the HTTP API; cheap to query.
pub struct Hub {
    pub(crate) config: HubConfig,
    /// The counters behind `/metrics`.
    pub metrics: Metrics,
    open: Mutex<BTreeMap<u64, Arc<Conn>>>,
    closed: Mutex<VecDeque<Value>>,
    combined: Mutex<BTreeMap<(Direction, usize), Box<dyn Partial>>>,
    combined_jobs: AtomicU64,
    merge_errors: AtomicU64,
    log: Mutex<Option<Box<dyn Write + Send>>>,
    next_id: AtomicU64,
    started: Instant,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Hub {
    pub(crate) fn new(config: HubConfig, log: &LogTarget) -> Result<Self, WireError> {
        let sink: Option<Box<dyn Write + Send>> = match log {
            LogTarget::Stdout => Some(Box::new(std::io::stdout())),
            LogTarget::File(path) => Some(Box::new(std::io::BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(WireError::Log)?,
            ))),
            LogTarget::Discard => None,
        };
        let metrics = Metrics {
            taps: config.taps.iter().map(|_| TapCounters::default()).collect(),
            ..Metrics::default()
        };
        Ok(Hub {
            config,
            metrics,
            open: Mutex::new(BTreeMap::new()),
            closed: Mutex::new(VecDeque::new()),
            combined: Mutex::new(BTreeMap::new()),
            combined_jobs: AtomicU64::new(0),
            merge_errors: AtomicU64::new(0),
            log: Mutex::new(sink),
            next_id: AtomicU64::new(1),
            started: Instant::now(),
        })
    }

    /// Writes one JSON line to the log (flushed at once: lines are per job, not per byte).
    pub(crate) fn log(&self, value: &Value) {
        let mut log = lock(&self.log);
        if let Some(out) = log.as_mut() {
            let mut line = value.to_string();
            line.push('\n');
            if out
                .write_all(line.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                self.metrics.log_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn open_conn(&self, peer: SocketAddr, to: Option<SocketAddr>) -> Arc<Conn> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.metrics.accepted.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            peer,
            to,
            opened: Instant::now(),
            opened_unix: unix_now(),
            bytes: Default::default(),
            forwarded: Default::default(),
            skipped: Default::default(),
            runners: Mutex::new(Vec::new()),
            backpressure_waits: AtomicU64::new(0),
            backpressure_nanos: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            state: Mutex::new(if to.is_some() { "connecting" } else { "open" }),
            recent_jobs: Mutex::new(VecDeque::new()),
        });
        lock(&self.open).insert(id, conn.clone());
        conn
    }

    /// What a tap runner needs of the hub to run a job: the taps, how jobs are cut and
    /// labelled, the counters.
    pub(crate) fn runner_context(&self) -> Context<'_> {
        Context {
            taps: &self.config.taps,
            labels: &self.config.labels,
            split: self.config.split,
            mode: self.config.mode.name(),
            metrics: &self.metrics,
        }
    }

    /// Files the jobs a runner finished: the log, the combined view, the connection's recent
    /// jobs.
    pub(crate) fn jobs_done(&self, conn: &Conn, jobs: Vec<Finished>) {
        for job in jobs {
            self.job_done(conn, job.direction, job.record, job.partials);
        }
    }

    fn job_done(
        &self,
        conn: &Conn,
        direction: Direction,
        record: Value,
        partials: Vec<Box<dyn Partial>>,
    ) {
        self.metrics.jobs.fetch_add(1, Ordering::Relaxed);
        conn.jobs.fetch_add(1, Ordering::Relaxed);
        {
            let mut combined = lock(&self.combined);
            for (i, partial) in partials.into_iter().enumerate() {
                match combined.get_mut(&(direction, i)) {
                    Some(acc) => {
                        if acc.merge_from(partial.as_ref()).is_err() {
                            self.merge_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    None => {
                        combined.insert((direction, i), partial);
                    }
                }
            }
            self.combined_jobs.fetch_add(1, Ordering::Relaxed);
        }
        self.log(&record);
        let mut recent = lock(&conn.recent_jobs);
        if recent.len() == RECENT_JOBS {
            recent.pop_front();
        }
        recent.push_back(record);
    }

    pub(crate) fn close_conn(&self, conn: &Conn, outcome: &Outcome) {
        lock(&self.open).remove(&conn.id);
        *lock(&self.metrics.outcomes)
            .entry(outcome.kind)
            .or_insert(0) += 1;
        let mut record = conn.json(self, false);
        record["event"] = json!("connection");
        record["mode"] = json!(self.config.mode.name());
        record["outcome"] = json!(outcome.kind);
        if !outcome.detail.is_empty() {
            record["detail"] = json!(outcome.detail);
        }
        let recent = record
            .as_object_mut()
            .and_then(|o| o.remove("recent_jobs"))
            .unwrap_or(Value::Null);
        self.log(&record);
        record["recent_jobs"] = recent;
        let mut closed = lock(&self.closed);
        if self.config.keep_closed > 0 {
            if closed.len() == self.config.keep_closed {
                closed.pop_front();
            }
            closed.push_back(record);
        }
    }

    /// Connections open now.
    pub fn open_count(&self) -> usize {
        lock(&self.open).len()
    }

    /// The records of the most recently closed connections (oldest first).
    pub fn closed(&self) -> Vec<Value> {
        lock(&self.closed).iter().cloned().collect()
    }

    /// `GET /connections`: open connections with their live tap state, and recently closed ones.
    pub fn connections_json(&self) -> Value {
        let open: Vec<Arc<Conn>> = lock(&self.open).values().cloned().collect();
        json!({
            "open": open.iter().map(|c| c.json(self, true)).collect::<Vec<_>>(),
            "closed": self.closed(),
        })
    }

    /// `GET /connections/ID`: one connection, open or recently closed.
    pub fn connection_json(&self, id: u64) -> Option<Value> {
        let open = lock(&self.open).get(&id).cloned();
        if let Some(conn) = open {
            return Some(conn.json(self, true));
        }
        lock(&self.closed)
            .iter()
            .find(|c| c["conn"].as_u64() == Some(id))
            .cloned()
    }

    /// The merged result of tap `tap` (in `--tap` order) over every finished job in `direction`,
    /// plus the current state of open jobs when `with_open`.
    pub fn combined(
        &self,
        direction: Direction,
        tap: usize,
        with_open: bool,
    ) -> Option<Box<dyn Partial>> {
        let mut acc = lock(&self.combined)
            .get(&(direction, tap))
            .map(|p| p.clone_box());
        if with_open {
            let open: Vec<Arc<Conn>> = lock(&self.open).values().cloned().collect();
            for conn in open {
                let runners: Vec<_> = lock(&conn.runners)
                    .iter()
                    .filter(|(d, _)| *d == direction)
                    .map(|(_, r)| r.clone())
                    .collect();
                for runner in runners {
                    let snapshot = lock(&runner).snapshots().into_iter().nth(tap);
                    if let Some(snapshot) = snapshot {
                        match &mut acc {
                            Some(acc) => {
                                if acc.merge_from(snapshot.as_ref()).is_err() {
                                    self.merge_errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            None => acc = Some(snapshot),
                        }
                    }
                }
            }
        }
        acc
    }

    /// `GET /combined`: every tap's result merged over all connections (finished jobs and the
    /// open jobs' state so far).
    pub fn combined_json(&self) -> Value {
        let mut directions = Map::new();
        for &direction in &self.config.directions {
            let mut taps = Map::new();
            for (i, label) in self.config.labels.iter().enumerate() {
                let value = self
                    .combined(direction, i, true)
                    .map_or(Value::Null, |p| p.to_json());
                taps.insert(label.clone(), value);
            }
            directions.insert(direction.name().into(), Value::Object(taps));
        }
        json!({
            "mode": self.config.mode.name(),
            "taps": self.config.taps.iter().map(|t| t.describe()).collect::<Vec<_>>(),
            "tap_policy": self.config.policy.name(),
            "connections_total": self.metrics.accepted.load(Ordering::Relaxed),
            "connections_open": self.open_count(),
            "jobs_finished": self.combined_jobs.load(Ordering::Relaxed),
            "merge_errors": self.merge_errors.load(Ordering::Relaxed),
            "totals": {
                "bytes_read_c2s": self.metrics.bytes_read[0].load(Ordering::Relaxed),
                "bytes_read_s2c": self.metrics.bytes_read[1].load(Ordering::Relaxed),
                "bytes_forwarded_c2s": self.metrics.bytes_forwarded[0].load(Ordering::Relaxed),
                "bytes_forwarded_s2c": self.metrics.bytes_forwarded[1].load(Ordering::Relaxed),
                "tap_skipped_bytes_c2s": self.metrics.skipped_bytes[0].load(Ordering::Relaxed),
                "tap_skipped_bytes_s2c": self.metrics.skipped_bytes[1].load(Ordering::Relaxed),
            },
            "combined": directions,
        })
    }

    /// `GET /metrics`: the counters in the Prometheus text exposition format (version 0.0.4).
    pub fn metrics_text(&self) -> String {
        let m = &self.metrics;
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
            out.push_str(&format!(
                "# HELP inpath_wire_{name} {help}\n# TYPE inpath_wire_{name} {kind}\n"
            ));
            for (labels, value) in samples {
                out.push_str(&format!("inpath_wire_{name}{labels} {value}\n"));
            }
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let dirs = |arr: &[AtomicU64; 2]| -> Vec<(String, f64)> {
            Direction::ALL
                .iter()
                .map(|d| {
                    (
                        format!("{{direction=\"{}\"}}", d.name()),
                        get(&arr[d.index()]),
                    )
                })
                .collect()
        };
        metric(
            "uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            &[(String::new(), self.started.elapsed().as_secs_f64())],
        );
        metric(
            "connections_accepted_total",
            "counter",
            "Connections accepted.",
            &[(String::new(), get(&m.accepted))],
        );
        metric(
            "connections_open",
            "gauge",
            "Connections open now.",
            &[(String::new(), self.open_count() as f64)],
        );
        let outcomes: Vec<(String, f64)> = lock(&m.outcomes)
            .iter()
            .map(|(k, v)| (format!("{{outcome=\"{k}\"}}"), *v as f64))
            .collect();
        metric(
            "connections_closed_total",
            "counter",
            "Closed connections by what happened to them.",
            &outcomes,
        );
        metric(
            "accept_errors_total",
            "counter",
            "Failed accept calls (for example out of file descriptors).",
            &[(String::new(), get(&m.accept_errors))],
        );
        metric(
            "bytes_read_total",
            "counter",
            "Bytes read: c2s from clients, s2c from destinations.",
            &dirs(&m.bytes_read),
        );
        if self.config.mode != Mode::Sink {
            metric(
                "bytes_forwarded_total",
                "counter",
                "Bytes written onward, unchanged.",
                &dirs(&m.bytes_forwarded),
            );
        }
        let tap_samples = |f: &dyn Fn(&TapCounters) -> f64| -> Vec<(String, f64)> {
            self.config
                .labels
                .iter()
                .zip(&m.taps)
                .map(|(label, c)| (format!("{{tap=\"{label}\"}}"), f(c)))
                .collect()
        };
        metric(
            "tap_bytes_total",
            "counter",
            "Bytes fed to each tap.",
            &tap_samples(&|c| get(&c.bytes)),
        );
        metric(
            "tap_busy_seconds_total",
            "counter",
            "Seconds each tap spent processing (throughput = bytes / busy seconds).",
            &tap_samples(&|c| get(&c.nanos) / 1e9),
        );
        metric(
            "tap_backlog_bytes",
            "gauge",
            "Bytes read but not yet processed by the taps (bounded per connection).",
            &[(String::new(), get(&m.backlog))],
        );
        metric("backpressure_waits_total", "counter", "Times a connection stopped reading because its taps were behind (the link slowed; no byte was skipped).", &[(String::new(), get(&m.backpressure_waits))]);
        metric(
            "backpressure_seconds_total",
            "counter",
            "Seconds connections spent stopped for their taps.",
            &[(String::new(), get(&m.backpressure_nanos) / 1e9)],
        );
        metric(
            "tap_skipped_bytes_total",
            "counter",
            "Bytes read but never fed to the taps (lossy tap policy; always 0 with the exact policy).",
            &dirs(&m.skipped_bytes),
        );
        metric(
            "tap_skipped_records_total",
            "counter",
            "Fixed-width records a gap kept from each tap, whole or in part (lossy tap policy).",
            &tap_samples(&|c| get(&c.skipped_records)),
        );
        metric(
            "tap_cut_record_bytes_total",
            "counter",
            "Bytes that reached each tap's side but were dropped because a gap cut their record (lossy tap policy).",
            &tap_samples(&|c| get(&c.cut_bytes)),
        );
        metric(
            "jobs_total",
            "counter",
            "Jobs finished.",
            &[(String::new(), get(&m.jobs))],
        );
        metric(
            "leftover_bytes_total",
            "counter",
            "Bytes left over at job ends (partial records, cut message headers).",
            &[(String::new(), get(&m.leftover))],
        );
        metric(
            "tap_errors_total",
            "counter",
            "Tap input errors (the job's result reports them).",
            &[(String::new(), get(&m.tap_errors))],
        );
        metric(
            "log_errors_total",
            "counter",
            "Result lines that could not be written.",
            &[(String::new(), get(&m.log_errors))],
        );
        out
    }
}
