//! Runs the taps of one connection direction: cuts the stream into jobs, feeds every tap, emits
//! a result per job. Lives behind a mutex so the HTTP API can read live state.

use crate::gap::{Aligner, Frame};
use crate::job::Splitter;
use crate::metrics::{Metrics, TapCounters};
use crate::{Direction, JobSplit};
use inpath_taps::{JobId, Partial, Tap, TapFactory};
use serde_json::{json, Map, Value};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// How a job ended, for its JSON line.
#[derive(Clone, Debug)]
pub(crate) struct JobEnd {
    /// `close`, `bytes`, `message`, or the connection's fault outcome.
    pub reason: String,
    /// Whether the job's bytes are all there (false for resets, timeouts, cut messages).
    pub complete: bool,
}

/// What a runner needs of the hub (the hub makes it: `Hub::runner_context`).
pub(crate) struct Context<'a> {
    pub taps: &'a [Arc<dyn TapFactory>],
    /// JSON keys of the taps, in `taps` order.
    pub labels: &'a [String],
    pub split: JobSplit,
    /// `relay` or `sink`, for the job's JSON line.
    pub mode: &'static str,
    pub metrics: &'a Metrics,
}

/// How a tap's records are framed, for keeping them whole around gaps.
fn frame_of(factory: &dyn TapFactory) -> Frame {
    match (factory.record_width(), factory.record_delimiter()) {
        (Some(width), _) if width > 1 => Frame::Fixed(width),
        (_, Some(delimiter)) => Frame::Delimited(delimiter),
        _ => Frame::Bytes,
    }
}

/// Feeds `data` to one tap, unless an earlier chunk of the job was bad input for it.
fn feed_tap(
    tap: &mut dyn Tap,
    error: &mut Option<String>,
    counters: &TapCounters,
    metrics: &Metrics,
    data: &[u8],
) {
    if error.is_some() {
        return;
    }
    let start = Instant::now();
    if let Err(e) = tap.update(data) {
        metrics.tap_errors.fetch_add(1, Ordering::Relaxed);
        *error = Some(e.to_string());
    }
    let nanos = start.elapsed().as_nanos() as u64;
    counters
        .bytes
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    counters.nanos.fetch_add(nanos, Ordering::Relaxed);
}

/// A job the runner finished: its JSON line and the taps' mergeable results, for the hub.
pub(crate) struct Finished {
    pub direction: Direction,
    pub record: Value,
    pub partials: Vec<Box<dyn Partial>>,
}

pub(crate) struct TapRunner {
    conn: u64,
    peer: SocketAddr,
    direction: Direction,
    next_job: u64,
    /// Made on the first byte, so idle connections hold no tap state.
    taps: Vec<Box<dyn Tap>>,
    errors: Vec<Option<String>>,
    splitter: Splitter,
    /// Bytes of the current job in the stream (with the lossy policy, tapped or not).
    job_bytes: u64,
    job_started: Option<Instant>,
    /// Lossy tap policy: one aligner per tap (made with the taps), and the bytes of the
    /// current job the taps never saw.
    lossy: bool,
    aligners: Vec<Aligner>,
    job_skipped: u64,
}

impl TapRunner {
    pub fn new(
        split: JobSplit,
        lossy: bool,
        conn: u64,
        peer: SocketAddr,
        direction: Direction,
    ) -> Self {
        TapRunner {
            conn,
            peer,
            direction,
            next_job: 0,
            taps: Vec::new(),
            errors: Vec::new(),
            splitter: Splitter::new(split),
            job_bytes: 0,
            job_started: None,
            lossy,
            aligners: Vec::new(),
            job_skipped: 0,
        }
    }

    fn ensure_taps(&mut self, ctx: &Context) {
        if !self.taps.is_empty() || ctx.taps.is_empty() {
            return;
        }
        for factory in ctx.taps {
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
            if self.lossy {
                self.aligners.push(Aligner::new(frame_of(factory.as_ref())));
            }
        }
    }

    /// Feeds the next chunk of this direction's bytes; returns the jobs it finished.
    pub fn feed(&mut self, mut chunk: &[u8], ctx: &Context) -> Vec<Finished> {
        let mut done = Vec::new();
        self.ensure_taps(ctx);
        while !chunk.is_empty() {
            let step = self.splitter.step(chunk);
            let data = &chunk[step.data];
            if !data.is_empty() {
                self.job_started.get_or_insert_with(Instant::now);
                self.job_bytes += data.len() as u64;
                for (i, tap) in self.taps.iter_mut().enumerate() {
                    let error = &mut self.errors[i];
                    let mut feed = |d: &[u8]| {
                        feed_tap(tap.as_mut(), error, &ctx.metrics.taps[i], ctx.metrics, d)
                    };
                    match self.aligners.get_mut(i) {
                        Some(aligner) => aligner.feed(data, &mut feed),
                        None => feed(data),
                    }
                }
            }
            if step.end {
                done.push(self.finish_split_job(ctx));
            }
            chunk = &chunk[step.consumed..];
        }
        done
    }

    /// A gap of `len` bytes the taps never saw (lossy tap policy): counted in the jobs it
    /// falls in, which are marked partial; the taps drop the records it cuts. Returns the jobs
    /// it finished (with `--job-bytes`, a gap may span several).
    pub fn gap(&mut self, mut len: u64, ctx: &Context) -> Vec<Finished> {
        let mut done = Vec::new();
        self.ensure_taps(ctx);
        while len > 0 {
            let (skipped, end) = self.splitter.skip(len);
            len -= skipped;
            self.job_started.get_or_insert_with(Instant::now);
            self.job_bytes += skipped;
            self.job_skipped += skipped;
            let resume_at = self.job_bytes;
            for (i, tap) in self.taps.iter_mut().enumerate() {
                let error = &mut self.errors[i];
                let mut feed =
                    |d: &[u8]| feed_tap(tap.as_mut(), error, &ctx.metrics.taps[i], ctx.metrics, d);
                if let Some(aligner) = self.aligners.get_mut(i) {
                    aligner.gap(resume_at, &mut feed);
                }
            }
            if end {
                done.push(self.finish_split_job(ctx));
            }
        }
        done
    }

    /// Finishes the job the splitter just ended (its size or its message reached).
    fn finish_split_job(&mut self, ctx: &Context) -> Finished {
        let reason = ctx.split.name().to_string();
        self.finish_job(
            ctx,
            &JobEnd {
                reason,
                complete: true,
            },
            None,
        )
    }

    /// The stream of this direction ended (cleanly or not): finishes an open job, if any.
    pub fn close(&mut self, ctx: &Context, end: &JobEnd) -> Option<Finished> {
        let close = self.splitter.at_close();
        if !close.open_job && close.header_bytes == 0 {
            return None;
        }
        self.ensure_taps(ctx);
        let mut end = end.clone();
        let mut extra = Map::new();
        if ctx.split == JobSplit::Message {
            if close.missing > 0 {
                end.complete = false;
                extra.insert("missing_bytes".into(), json!(close.missing));
            }
            if close.header_bytes > 0 {
                extra.insert("header_leftover_bytes".into(), json!(close.header_bytes));
                ctx.metrics
                    .leftover
                    .fetch_add(close.header_bytes, Ordering::Relaxed);
            }
        }
        Some(self.finish_job(ctx, &end, Some(extra)))
    }

    fn finish_job(
        &mut self,
        ctx: &Context,
        end: &JobEnd,
        extra: Option<Map<String, Value>>,
    ) -> Finished {
        let id = JobId {
            conn: self.conn,
            direction: self.direction,
            job: self.next_job,
        };
        self.next_job += 1;
        let mut taps = Map::new();
        let mut partials = Vec::with_capacity(self.taps.len());
        for (i, tap) in self.taps.iter_mut().enumerate() {
            let counters = &ctx.metrics.taps[i];
            // Lossy: the aligner hands over the unfinished record it holds, as it would have
            // reached the tap without the policy.
            let aligned = self.aligners.get_mut(i).map(|aligner| {
                let error = &mut self.errors[i];
                let counts = aligner.end_job(&mut |d: &[u8]| {
                    feed_tap(tap.as_mut(), error, counters, ctx.metrics, d)
                });
                (aligner.frame(), counts)
            });
            let error = self.errors[i].take();
            let mut out = tap.finish(id, error.as_deref());
            if let Some(left) = out.json.get("leftover_bytes").and_then(Value::as_u64) {
                ctx.metrics.leftover.fetch_add(left, Ordering::Relaxed);
            }
            if let (Some((frame, counts)), Some(json)) = (aligned, out.json.as_object_mut()) {
                counters
                    .cut_bytes
                    .fetch_add(counts.cut_bytes, Ordering::Relaxed);
                match frame {
                    Frame::Fixed(width) => {
                        let whole = self.job_bytes / width as u64;
                        let skipped = whole.saturating_sub(counts.whole_bytes / width as u64);
                        counters
                            .skipped_records
                            .fetch_add(skipped, Ordering::Relaxed);
                        json.insert("skipped_records".into(), json!(skipped));
                        json.insert("cut_record_bytes".into(), json!(counts.cut_bytes));
                    }
                    Frame::Delimited(_) => {
                        json.insert("cut_record_bytes".into(), json!(counts.cut_bytes));
                        json.insert("shortened_lines".into(), json!(counts.shortened_lines));
                    }
                    Frame::Bytes => {}
                }
            }
            taps.insert(ctx.labels[i].clone(), out.json);
            partials.push(out.partial);
        }
        let seconds = self
            .job_started
            .take()
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let mut record = json!({
            "event": "job",
            "mode": ctx.mode,
            "conn": self.conn,
            "peer": self.peer.to_string(),
            "direction": self.direction.name(),
            "job": id.job,
            "split": ctx.split.name(),
            "bytes": self.job_bytes,
            "seconds": seconds,
            "end": end.reason,
            "complete": end.complete,
        });
        if self.lossy {
            record["skipped_bytes"] = json!(self.job_skipped);
            record["partial"] = json!(self.job_skipped > 0);
        }
        if let Some(extra) = extra {
            for (k, v) in extra {
                record[k] = v;
            }
        }
        record["taps"] = Value::Object(taps);
        self.job_bytes = 0;
        self.job_skipped = 0;
        Finished {
            direction: self.direction,
            record,
            partials,
        }
    }

    /// The current job's live state, per tap label.
    pub fn live_json(&self, labels: &[String]) -> Value {
        let mut taps = Map::new();
        for (i, tap) in self.taps.iter().enumerate() {
            let mut value = tap.live_json();
            if let Some(e) = &self.errors[i] {
                value["error"] = json!(e);
            }
            taps.insert(labels[i].clone(), value);
        }
        let mut value = json!({
            "job": self.next_job,
            "bytes": self.job_bytes,
            "taps": taps,
        });
        if self.lossy {
            value["skipped_bytes"] = json!(self.job_skipped);
        }
        value
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
