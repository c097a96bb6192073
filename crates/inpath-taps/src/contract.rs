//! The contract between a tap and whatever feeds it (the wire relay, a store): [`TapFactory`],
//! [`Tap`], [`Partial`], and the [`JobId`] and [`Direction`] a result is filed under.

use crate::error::{Result, TapError};
use inpath_core::Lane;
use serde_json::Value;
use std::any::Any;

/// A direction of a relayed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Client to server: the bytes the relay (or sink) receives on its accepted connections.
    C2s,
    /// Server to client: the destination's answers (relay only).
    S2c,
}

impl Direction {
    /// Both directions.
    pub const ALL: [Direction; 2] = [Direction::C2s, Direction::S2c];

    /// `c2s` or `s2c`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::C2s => "c2s",
            Direction::S2c => "s2c",
        }
    }

    /// 0 for c2s, 1 for s2c.
    pub fn index(self) -> usize {
        match self {
            Direction::C2s => 0,
            Direction::S2c => 1,
        }
    }
}

/// Which job a result belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobId {
    /// The connection's number (from 1, in accept order).
    pub conn: u64,
    /// The direction tapped.
    pub direction: Direction,
    /// The job's number within this connection and direction (from 0).
    pub job: u64,
}

/// The mergeable part of a tap's result.
pub trait Partial: Send + Sync + 'static {
    /// The result as JSON (for the HTTP API's combined view).
    fn to_json(&self) -> Value;
    /// Folds `other` (made by the same tap specification) into this one.
    fn merge_from(&mut self, other: &dyn Partial) -> Result<()>;
    /// A copy.
    fn clone_box(&self) -> Box<dyn Partial>;
    /// For downcasting in [`Partial::merge_from`] and by library users.
    fn as_any(&self) -> &dyn Any;
}

/// What a tap emits at the end of a job.
pub struct TapOutput {
    /// The result as it appears in the job's JSON line.
    pub json: Value,
    /// The mergeable state, folded into the combined view.
    pub partial: Box<dyn Partial>,
}

/// A tap on one direction of one connection. See the module docs for the calling rules.
pub trait Tap: Send {
    /// Feeds the next chunk of the current job.
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), inpath_core::Error>;
    /// The current job's state so far, as JSON (live view of an open connection).
    fn live_json(&self) -> Value;
    /// The current job's mergeable state so far (combined view while connections are open).
    fn snapshot(&self) -> Box<dyn Partial>;
    /// Ends the job: returns its result and resets. `error` is the error `update` returned for
    /// this job, if any.
    fn finish(&mut self, job: JobId, error: Option<&str>) -> TapOutput;
}

/// Makes taps of one specification.
pub trait TapFactory: Send + Sync {
    /// The tap's name (`sketch`, `corr`, `crc`).
    fn name(&self) -> &str;
    /// The specification with every option spelled out (shown in logs and `/metrics`).
    fn describe(&self) -> String;
    /// A fresh tap.
    fn make(&self) -> Result<Box<dyn Tap>>;
    /// The width of the tap's fixed-width records, if it reads such records: `--job-bytes`
    /// must then be a multiple of it, so that no record straddles two jobs.
    fn record_width(&self) -> Option<usize> {
        None
    }

    /// The byte that ends each record, if the tap reads delimited records (text lines: `\n`).
    /// A feeder that skips bytes (the wire relay's lossy tap policy) uses it, as it uses
    /// [`TapFactory::record_width`], to hand the tap whole records only and never a record
    /// glued together from both sides of a gap.
    fn record_delimiter(&self) -> Option<u8> {
        None
    }

    /// Runs one job over a whole input (a file, a handle in a store) and returns its result.
    /// Taps whose engines split into lanes (sketch, corr) use up to `threads` of them; the
    /// result does not depend on the lane count. Bad input is an error here (not a field of
    /// the result), since there is no stream to keep forwarding.
    fn run_input(&self, input: &mut dyn std::io::Read, threads: usize) -> Result<Value> {
        let _ = threads;
        let mut tap = self.make()?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(inpath_core::Error::Io {
                        path: "the input".into(),
                        source,
                    }
                    .into())
                }
            };
            tap.update(&buf[..n]).map_err(|source| TapError::Input {
                spec: self.describe(),
                source,
            })?;
        }
        let job = JobId {
            conn: 0,
            direction: Direction::C2s,
            job: 0,
        };
        Ok(tap.finish(job, None).json)
    }
}

/// Feeds all of `input` to `engine` on `threads` lanes and closes it; an error names the tap.
pub fn run_lanes<E: Lane>(
    engine: &mut E,
    input: &mut dyn std::io::Read,
    threads: usize,
) -> Result<()> {
    let options = inpath_core::LaneOptions {
        threads: threads.clamp(1, inpath_core::lanes::MAX_THREADS),
        ..Default::default()
    };
    inpath_core::lanes::run_reader(
        engine,
        input,
        std::path::Path::new("the input"),
        options,
        &mut |_| {},
    )?;
    Ok(())
}

/// Closes the input of a job on `engine`: returns the bytes of a trailing partial record (a
/// count for the result, not an error: the whole records before it were taken) and the job's
/// first problem: `error` (what `update` returned), else what closing the input found.
pub fn close_job<E: Lane>(engine: &mut E, error: Option<&str>) -> (u64, Option<String>) {
    let problem = error.map(str::to_string);
    match engine.close_input() {
        Ok(()) => (0, problem),
        Err(inpath_core::Error::TrailingBytes { trailing, .. }) => (trailing as u64, problem),
        Err(e) => (0, problem.or_else(|| Some(e.to_string()))),
    }
}
