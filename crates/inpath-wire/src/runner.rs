//! Runs the taps of one connection direction: cuts the stream into jobs, feeds every tap, emits
//! a result per job. Lives behind a mutex so the HTTP API can read live state.

use crate::hub::{Conn, Hub};
use crate::job::Splitter;
use crate::Direction;
use inpath_taps::{JobId, Partial, Tap};
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How a job ended, for its JSON line.
#[derive(Clone, Debug)]
pub(crate) struct JobEnd {
    /// `close`, `bytes`, `message`, or the connection's fault outcome.
    pub reason: String,
    /// Whether the job's bytes are all there (false for resets, timeouts, cut messages).
    pub complete: bool,
}

pub(crate) struct TapRunner {
    conn: u64,
    direction: Direction,
    next_job: u64,
    /// Made on the first byte, so idle connections hold no tap state.
    taps: Vec<Box<dyn Tap>>,
    errors: Vec<Option<String>>,
    splitter: Splitter,
    job_bytes: u64,
    job_started: Option<Instant>,
}

impl TapRunner {
    pub fn new(hub: &Hub, conn: u64, direction: Direction) -> Self {
        TapRunner {
            conn,
            direction,
            next_job: 0,
            taps: Vec::new(),
            errors: Vec::new(),
            splitter: Splitter::new(hub.config.split),
            job_bytes: 0,
            job_started: None,
        }
    }

    fn ensure_taps(&mut self, hub: &Hub) {
        if !self.taps.is_empty() || hub.config.taps.is_empty() {
            return;
        }
        for factory in &hub.config.taps {
            match factory.make() {
                Ok(tap) => {
                    self.taps.push(tap);
                    self.errors.push(None);
                }
                Err(e) => {
                    // Validated at start-up; if it still fails, report instead of tapping.
                    self.taps.push(Box::new(FailedTap));
                    self.errors.push(Some(e.to_string()));
                }
            }
        }
    }

    /// Feeds the next chunk of this direction's bytes.
    pub fn feed(&mut self, mut chunk: &[u8], hub: &Hub, conn: &Conn) {
        self.ensure_taps(hub);
        while !chunk.is_empty() {
            let step = self.splitter.step(chunk);
            let data = &chunk[step.data];
            if !data.is_empty() {
                self.job_started.get_or_insert_with(Instant::now);
                self.job_bytes += data.len() as u64;
                for (i, tap) in self.taps.iter_mut().enumerate() {
                    if self.errors[i].is_some() {
                        continue;
                    }
                    let start = Instant::now();
                    if let Err(e) = tap.update(data) {
                        hub.metrics.tap_errors.fetch_add(1, Ordering::Relaxed);
                        self.errors[i] = Some(e.to_string());
                    }
                    let nanos = start.elapsed().as_nanos() as u64;
                    hub.metrics.taps[i]
                        .bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                    hub.metrics.taps[i]
                        .nanos
                        .fetch_add(nanos, Ordering::Relaxed);
                }
            }
            if step.end {
                let reason = hub.config.split.name().to_string();
                self.finish_job(
                    hub,
                    conn,
                    &JobEnd {
                        reason,
                        complete: true,
                    },
                    None,
                );
            }
            chunk = &chunk[step.consumed..];
        }
    }

    /// The stream of this direction ended (cleanly or not): finishes an open job.
    pub fn close(&mut self, hub: &Hub, conn: &Conn, end: &JobEnd) {
        let close = self.splitter.at_close();
        if !close.open_job && close.header_bytes == 0 {
            return;
        }
        self.ensure_taps(hub);
        let mut end = end.clone();
        let mut extra = Map::new();
        if hub.config.split == crate::JobSplit::Message {
            if close.missing > 0 {
                end.complete = false;
                extra.insert("missing_bytes".into(), json!(close.missing));
            }
            if close.header_bytes > 0 {
                extra.insert("header_leftover_bytes".into(), json!(close.header_bytes));
                hub.metrics
                    .leftover
                    .fetch_add(close.header_bytes, Ordering::Relaxed);
            }
        }
        self.finish_job(hub, conn, &end, Some(extra));
    }

    fn finish_job(
        &mut self,
        hub: &Hub,
        conn: &Conn,
        end: &JobEnd,
        extra: Option<Map<String, Value>>,
    ) {
        let id = JobId {
            conn: self.conn,
            direction: self.direction,
            job: self.next_job,
        };
        self.next_job += 1;
        let mut taps = Map::new();
        let mut partials = Vec::with_capacity(self.taps.len());
        for (i, tap) in self.taps.iter_mut().enumerate() {
            let error = self.errors[i].take();
            let out = tap.finish(id, error.as_deref());
            if let Some(left) = out.json.get("leftover_bytes").and_then(Value::as_u64) {
                hub.metrics.leftover.fetch_add(left, Ordering::Relaxed);
            }
            taps.insert(hub.config.labels[i].clone(), out.json);
            partials.push(out.partial);
        }
        let seconds = self
            .job_started
            .take()
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let mut record = json!({
            "event": "job",
            "mode": hub.config.mode.name(),
            "conn": self.conn,
            "peer": conn.peer.to_string(),
            "direction": self.direction.name(),
            "job": id.job,
            "split": hub.config.split.name(),
            "bytes": self.job_bytes,
            "seconds": seconds,
            "end": end.reason,
            "complete": end.complete,
        });
        if let Some(extra) = extra {
            for (k, v) in extra {
                record[k] = v;
            }
        }
        record["taps"] = Value::Object(taps);
        self.job_bytes = 0;
        hub.job_done(conn, self.direction, record, partials);
    }

    /// The current job's live state, per tap label.
    pub fn live_json(&self, hub: &Hub) -> Value {
        let mut taps = Map::new();
        for (i, tap) in self.taps.iter().enumerate() {
            let mut value = tap.live_json();
            if let Some(e) = &self.errors[i] {
                value["error"] = json!(e);
            }
            taps.insert(hub.config.labels[i].clone(), value);
        }
        json!({
            "job": self.next_job,
            "bytes": self.job_bytes,
            "taps": taps,
        })
    }

    /// The current job's mergeable state per tap (empty before the first byte).
    pub fn snapshots(&self) -> Vec<Box<dyn Partial>> {
        if self.job_bytes == 0 {
            return Vec::new();
        }
        self.taps.iter().map(|t| t.snapshot()).collect()
    }
}

/// Stands in for a tap whose factory failed after start-up; never fed (its error is set).
struct FailedTap;

impl Tap for FailedTap {
    fn update(&mut self, _chunk: &[u8]) -> Result<(), inpath_core::Error> {
        Ok(())
    }
    fn live_json(&self) -> Value {
        json!({})
    }
    fn snapshot(&self) -> Box<dyn Partial> {
        Box::new(inpath_taps::CrcPartial {
            bytes: 0,
            jobs: 0,
            crc32: None,
        })
    }
    fn finish(&mut self, _job: JobId, error: Option<&str>) -> inpath_taps::TapOutput {
        inpath_taps::TapOutput {
            json: json!({ "error": error }),
            partial: self.snapshot(),
        }
    }
}
