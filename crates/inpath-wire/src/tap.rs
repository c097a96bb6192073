//! Taps: engines that observe the bytes of a connection as they pass, without touching them.
//!
//! # The extension point
//! A tap is three small objects:
//! - a [`TapFactory`], parsed once from a `--tap name:key=value,...` specification
//!   ([`parse_tap`]); it makes one [`Tap`] per connection direction, lazily, when the first
//!   byte arrives (so idle connections hold no tap state);
//! - the [`Tap`] itself, fed the direction's bytes in chunks of any size ([`Tap::update`]) and
//!   asked for its result when a job ends ([`Tap::finish`], which also resets it);
//! - a [`Partial`]: the mergeable part of a result, folded into the combined view of all
//!   connections and cloned for live snapshots of open ones.
//!
//! Adding an engine (for example `corr`, exact correlation statistics, whose partial states
//! merge like sketches do) means: implement these three for it, and add one arm to
//! [`parse_tap`] and one name to [`TAP_NAMES`]. Nothing else in the relay changes.
//!
//! # Calling rules
//! - `update` gets the bytes in stream order, in chunks of any size, after (or while) they are
//!   forwarded; a tap cannot change, reorder or drop forwarded bytes (it only sees `&[u8]`).
//! - An error from `update` means the bytes were not valid input for this tap (for example a
//!   bad CSV cell): the tap is not fed again until its job ends, and the job's result reports
//!   the error. Forwarding is never affected.
//! - `finish` ends the job (a connection closing, or `--job-bytes` / message boundaries), must
//!   not fail (problems go into the output) and leaves the tap ready for the next job.
//!
//! Two taps exist: `sketch` (the SKT engine: HyperLogLog + Fast-AGMS + Count-Min + min/max/count)
//! and `crc` (bytes and CRC-32 of each job; a check that the tap saw exactly what was forwarded).

use crate::{Result, WireError};
use inpath_core::{ColumnRef, Engine, Lane};

use crate::top::{TopCandidates, TopTracker};
use inpath_sketch::{format, Estimator, HashMode, Params, Parts, Sketch, SketchEngine};
use serde_json::{json, Value};
use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

/// The taps [`parse_tap`] knows.
pub const TAP_NAMES: &[&str] = &["sketch", "corr", "crc"];

/// Which job a result belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobId {
    /// The connection's number (from 1, in accept order).
    pub conn: u64,
    /// The direction tapped.
    pub direction: crate::Direction,
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
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), String>;
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
    /// The tap's name (`sketch`, `crc`).
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
            tap.update(&buf[..n])
                .map_err(|detail| option_error(&self.describe(), detail))?;
        }
        let job = JobId {
            conn: 0,
            direction: crate::Direction::C2s,
            job: 0,
        };
        Ok(tap.finish(job, None).json)
    }
}

/// The sketch and corr taps as a store's [`inpath_store::TapRunner`]: `inpath store sketch`
/// and `corr` run them over a handle's bytes, beside the pages (the store crate builds `crc`
/// in and knows no other engine).
pub struct StoreTaps;

impl inpath_store::TapRunner for StoreTaps {
    fn names(&self) -> Vec<String> {
        vec!["sketch".into(), "corr".into()]
    }

    fn run(
        &self,
        spec: &str,
        input: &mut dyn std::io::Read,
        threads: usize,
    ) -> std::result::Result<Value, String> {
        let err = |e: WireError| inpath_store::remote::error_text(&e);
        parse_tap(spec)
            .map_err(err)?
            .run_input(input, threads)
            .map_err(err)
    }
}

/// Feeds all of `input` to `engine` on `threads` lanes and closes it; an error names the tap.
pub(crate) fn run_lanes<E: Lane>(
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

/// Parses a `--tap` specification: `NAME` or `NAME:key=value,key=value,flag`.
pub fn parse_tap(spec: &str) -> Result<Arc<dyn TapFactory>> {
    let (name, options) = match spec.split_once(':') {
        Some((name, options)) => (name.trim(), options),
        None => (spec.trim(), ""),
    };
    let mut pairs = Vec::new();
    for item in options.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item, None),
        };
        if pairs.iter().any(|(k, _): &(&str, _)| *k == key) {
            return Err(option_error(spec, format!("option {key:?} is given twice")));
        }
        pairs.push((key, value));
    }
    let factory: Arc<dyn TapFactory> = match name {
        "sketch" => Arc::new(SketchTapFactory::parse(spec, &pairs)?),
        "corr" => Arc::new(crate::corr_tap::CorrTapFactory::parse(spec, &pairs)?),
        "crc" => {
            if let Some((key, _)) = pairs.first() {
                return Err(option_error(
                    spec,
                    format!("unknown option {key:?}: the crc tap takes no options"),
                ));
            }
            Arc::new(CrcTapFactory)
        }
        _ => {
            return Err(WireError::UnknownTap {
                name: name.to_string(),
                spec: spec.to_string(),
                available: TAP_NAMES.join(", "),
            })
        }
    };
    // Make one tap now so that every configuration error shows at start-up.
    factory.make()?;
    Ok(factory)
}

pub(crate) fn option_error(spec: &str, detail: impl Into<String>) -> WireError {
    WireError::TapOption {
        spec: spec.to_string(),
        detail: detail.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// sketch

/// The item format of the sketch tap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SketchFormat {
    U32,
    U64,
    Lines,
    Csv,
}

/// Makes [`SketchEngine`] taps.
///
/// Options (all optional): `format=u32|u64|lines|csv` (default `lines`, or `csv` with
/// `column`), `column=NAME|INDEX`, `delimiter=C|tab|comma|semicolon|pipe`, `no_header`,
/// `hll_p=P`, `cm=RxP`, `agms=RxP`, `sketches=hll+cm+agms` (which sketches to keep, joined
/// with `+`; default all: `sketches=hll` lets a tap keep up with a fast link),
/// `hash=fast|compat`, `seed=N|0xN`, `estimator=ertl|reference`, `save=DIR` (write each job's sketch file to
/// `DIR/conn<C>-<direction>-job<J>.skt`), `top=K` (the K most frequent items, 1 to
/// [`crate::top::MAX_TOP`], from Count-Min over sampled candidates: see [`crate::top`]; u32,
/// u64 and lines).
#[derive(Clone, Debug)]
pub struct SketchTapFactory {
    params: Params,
    format: SketchFormat,
    column: Option<String>,
    delimiter: u8,
    has_header: bool,
    estimator: Estimator,
    save: Option<PathBuf>,
    top: usize,
}

const SKETCH_OPTIONS: &str =
    "format, column, delimiter, no_header, hll_p, cm, agms, sketches, hash, seed, estimator, save, top";

impl SketchTapFactory {
    /// A factory for `u32` items with the given parameters (for library users and tests).
    pub fn u32(params: Params) -> Self {
        SketchTapFactory {
            params,
            format: SketchFormat::U32,
            column: None,
            delimiter: b',',
            has_header: true,
            estimator: Estimator::Ertl,
            save: None,
            top: 0,
        }
    }

    fn parse(spec: &str, pairs: &[(&str, Option<&str>)]) -> Result<Self> {
        let mut hash = HashMode::Fast;
        let mut seed = None;
        let mut params = Params::with_hash(hash);
        let mut format = None;
        let mut parts = Parts::ALL;
        let mut out = SketchTapFactory::u32(params);
        for (key, value) in pairs {
            let need = |v: &Option<&str>| -> Result<String> {
                match v {
                    Some(v) if !v.is_empty() => Ok(v.to_string()),
                    _ => Err(option_error(
                        spec,
                        format!("option {key:?} needs a value ({key}=...)"),
                    )),
                }
            };
            match *key {
                "format" => {
                    format = Some(match need(value)?.as_str() {
                        "u32" => SketchFormat::U32,
                        "u64" => SketchFormat::U64,
                        "lines" => SketchFormat::Lines,
                        "csv" => SketchFormat::Csv,
                        other => {
                            return Err(option_error(
                                spec,
                                format!("format={other:?}: use u32, u64, lines or csv"),
                            ))
                        }
                    })
                }
                "column" => out.column = Some(need(value)?),
                "delimiter" => {
                    out.delimiter = match need(value)?.as_str() {
                        "tab" | "\\t" => b'\t',
                        "comma" => b',',
                        "semicolon" => b';',
                        "pipe" => b'|',
                        "space" => b' ',
                        t if t.len() == 1 => t.as_bytes()[0],
                        t => {
                            return Err(option_error(
                                spec,
                                format!(
                                "delimiter={t:?}: one byte, or tab, comma, semicolon, pipe, space"
                            ),
                            ))
                        }
                    }
                }
                "no_header" => {
                    if value.is_some() {
                        return Err(option_error(spec, "no_header is a flag and takes no value"));
                    }
                    out.has_header = false;
                }
                "hll_p" => params.hll_p = parse_num(spec, key, &need(value)?)?,
                "cm" => (params.cm_rows, params.cm_p) = parse_shape(spec, key, &need(value)?)?,
                "agms" => {
                    (params.agms_rows, params.agms_p) = parse_shape(spec, key, &need(value)?)?
                }
                "sketches" => {
                    parts = Parts::parse(&need(value)?).map_err(|_| {
                        option_error(
                            spec,
                            "sketches must list hll, cm and/or agms joined with + (e.g. sketches=hll+cm)",
                        )
                    })?
                }
                "hash" => {
                    hash = need(value)?.parse().map_err(|_| {
                        option_error(spec, "hash must be fast (XXH3-128) or compat (MurmurHash3)")
                    })?
                }
                "seed" => seed = Some(parse_u64(spec, &need(value)?)?),
                "estimator" => {
                    out.estimator = need(value)?
                        .parse()
                        .map_err(|_| option_error(spec, "estimator must be ertl or reference"))?
                }
                "save" => out.save = Some(PathBuf::from(need(value)?)),
                "top" => {
                    let text = need(value)?;
                    out.top = text
                        .parse()
                        .ok()
                        .filter(|k| (1..=crate::top::MAX_TOP).contains(k))
                        .ok_or_else(|| {
                            option_error(
                                spec,
                                format!(
                                    "top={text:?} is out of range: 1 to {}",
                                    crate::top::MAX_TOP
                                ),
                            )
                        })?
                }
                other => {
                    return Err(option_error(
                        spec,
                        format!("unknown option {other:?}; the sketch tap takes {SKETCH_OPTIONS}"),
                    ))
                }
            }
        }
        params.hash = hash;
        params.seed = seed.unwrap_or(hash.default_seed());
        params.validate()?;
        out.params = params.with_parts(parts);
        out.format = match (format, &out.column) {
            (Some(SketchFormat::Csv), None) => {
                return Err(option_error(spec, "format=csv needs column=NAME|INDEX"))
            }
            (Some(f), Some(_)) if f != SketchFormat::Csv => {
                return Err(option_error(spec, "column only applies to format=csv"))
            }
            (Some(f), _) => f,
            (None, Some(_)) => SketchFormat::Csv,
            (None, None) => SketchFormat::Lines,
        };
        if out.top > 0 {
            if out.format == SketchFormat::Csv {
                return Err(option_error(
                    spec,
                    "top= takes u32, u64 or lines records, not csv",
                ));
            }
            if !out.params.parts().cm {
                return Err(option_error(
                    spec,
                    "top= needs Count-Min: add cm to sketches=",
                ));
            }
        }
        if let Some(dir) = &out.save {
            if !dir.is_dir() {
                return Err(option_error(
                    spec,
                    format!("save={}: not an existing directory", dir.display()),
                ));
            }
        }
        Ok(out)
    }

    /// Where each job's sketch file is written, if anywhere.
    pub fn save_dir(&self) -> Option<&std::path::Path> {
        self.save.as_deref()
    }

    fn engine(&self) -> Result<SketchEngine> {
        Ok(match self.format {
            SketchFormat::U32 => SketchEngine::u32(self.params)?,
            SketchFormat::U64 => SketchEngine::u64(self.params)?,
            SketchFormat::Lines => SketchEngine::lines(self.params)?,
            SketchFormat::Csv => SketchEngine::csv(
                self.params,
                ColumnRef::parse(self.column.as_deref().unwrap_or_default()),
                self.delimiter,
                self.has_header,
            )?,
        })
    }
}

fn parse_num(spec: &str, key: &str, text: &str) -> Result<u8> {
    text.parse()
        .map_err(|_| option_error(spec, format!("{key}={text:?} is not a number")))
}

fn parse_shape(spec: &str, key: &str, text: &str) -> Result<(u8, u8)> {
    text.split_once(['x', 'X'])
        .and_then(|(r, p)| Some((r.trim().parse().ok()?, p.trim().parse().ok()?)))
        .ok_or_else(|| {
            option_error(
                spec,
                format!("{key}={text:?} is not ROWSxP (for example 6x13: 6 rows of 2^13 counters)"),
            )
        })
}

fn parse_u64(spec: &str, text: &str) -> Result<u64> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| option_error(spec, format!("seed={text:?} is not a number")))
}

impl TapFactory for SketchTapFactory {
    fn name(&self) -> &str {
        "sketch"
    }

    fn describe(&self) -> String {
        let p = &self.params;
        let format = match self.format {
            SketchFormat::U32 => "u32".to_string(),
            SketchFormat::U64 => "u64".to_string(),
            SketchFormat::Lines => "lines".to_string(),
            SketchFormat::Csv => format!(
                "csv,column={},delimiter={}{}",
                self.column.as_deref().unwrap_or_default(),
                self.delimiter as char,
                if self.has_header { "" } else { ",no_header" }
            ),
        };
        let parts = p.parts();
        let mut shapes = String::new();
        if parts.hll {
            shapes.push_str(&format!(",hll_p={}", p.hll_p));
        }
        if parts.cm {
            shapes.push_str(&format!(",cm={}x{}", p.cm_rows, p.cm_p));
        }
        if parts.agms {
            shapes.push_str(&format!(",agms={}x{}", p.agms_rows, p.agms_p));
        }
        if parts != Parts::ALL {
            shapes.push_str(&format!(",sketches={}", parts.names().replace(',', "+")));
        }
        let top = if self.top > 0 {
            format!(",top={}", self.top)
        } else {
            String::new()
        };
        format!(
            "sketch:format={format}{shapes},hash={},seed={:#x}{top}",
            p.hash.name(),
            p.seed
        )
    }

    fn record_width(&self) -> Option<usize> {
        match self.format {
            SketchFormat::U32 => Some(4),
            SketchFormat::U64 => Some(8),
            _ => None,
        }
    }

    fn run_input(&self, input: &mut dyn std::io::Read, threads: usize) -> Result<Value> {
        if self.save.is_some() {
            return Err(option_error(
                &self.describe(),
                "save= writes a file per connection job; it is not taken over a whole input",
            ));
        }
        if self.top > 0 {
            return Err(option_error(
                &self.describe(),
                "top= follows a connection's records; ask a store's Count-Min with `inpath sketch query` instead",
            ));
        }
        let mut engine = self.engine()?;
        run_lanes(&mut engine, input, threads)?;
        let sketch = engine.finish()?;
        let mut value = sketch_json(&sketch, self.estimator);
        value["records"] = json!(sketch.count());
        Ok(value)
    }

    fn make(&self) -> Result<Box<dyn Tap>> {
        Ok(Box::new(SketchTap {
            engine: self.engine()?,
            estimator: self.estimator,
            save: self.save.clone(),
            lines: matches!(self.format, SketchFormat::Lines),
            tail: 0,
            top: (self.top > 0).then(|| TopTracker::new(self.top, self.record_width())),
        }))
    }
}

/// A [`SketchEngine`] on a connection.
struct SketchTap {
    engine: SketchEngine,
    estimator: Estimator,
    save: Option<PathBuf>,
    lines: bool,
    /// Bytes since the last newline (lines format): a final unterminated line.
    tail: u64,
    /// The candidates for `top=K`.
    top: Option<TopTracker>,
}

impl Tap for SketchTap {
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), String> {
        if self.lines {
            match memchr::memrchr(b'\n', chunk) {
                Some(at) => self.tail = (chunk.len() - at - 1) as u64,
                None => self.tail += chunk.len() as u64,
            }
        }
        if let Some(top) = &mut self.top {
            top.feed(chunk);
        }
        self.engine.update(chunk).map_err(|e| e.to_string())
    }

    fn live_json(&self) -> Value {
        // From the engine's sketch in place: no copy of the counters for a look.
        let top = self.top.as_ref().map(TopTracker::candidates);
        sketch_result_json(self.engine.sketch(), self.estimator, top.as_ref())
    }

    fn snapshot(&self) -> Box<dyn Partial> {
        Box::new(self.snapshot_partial())
    }

    fn finish(&mut self, job: JobId, error: Option<&str>) -> TapOutput {
        // Close the input first: a partial fixed-width record is reported, the whole records
        // before it stay in the sketch.
        let mut leftover = 0u64;
        let mut problem = error.map(str::to_string);
        match self.engine.close_input() {
            Ok(()) => {}
            Err(inpath_core::Error::TrailingBytes { trailing, .. }) => leftover = trailing as u64,
            Err(e) => {
                problem.get_or_insert(e.to_string());
            }
        }
        // The input is closed, so `finish` cannot fail; it hands the sketch over and resets.
        let sketch = match self.engine.finish() {
            Ok(sketch) => sketch,
            Err(e) => {
                problem.get_or_insert(e.to_string());
                self.engine.sketch().clone()
            }
        };
        let unterminated = if self.lines { self.tail } else { 0 };
        self.tail = 0;
        let top = self.top.as_mut().map(|t| {
            let candidates = t.candidates();
            t.reset();
            candidates
        });
        let partial = SketchPartial {
            sketch,
            estimator: self.estimator,
            top,
        };
        let mut value = partial.to_json();
        let sketch = &partial.sketch;
        value["records"] = json!(sketch.count());
        value["leftover_bytes"] = json!(leftover);
        if self.lines {
            value["unterminated_line_bytes"] = json!(unterminated);
        }
        if let Some(problem) = problem {
            value["error"] = json!(problem);
        }
        if let Some(dir) = &self.save {
            let path = dir.join(format!(
                "conn{}-{}-job{}.skt",
                job.conn,
                job.direction.name(),
                job.job
            ));
            match inpath_core::output::write_file(&path, &format::to_bytes(sketch), &[]) {
                Ok(()) => value["saved"] = json!(path),
                Err(e) => value["save_error"] = json!(e.to_string()),
            }
        }
        TapOutput {
            json: value,
            partial: Box::new(partial),
        }
    }
}

impl SketchTap {
    /// The state so far as a result: the sketch and the top candidates.
    fn snapshot_partial(&self) -> SketchPartial {
        SketchPartial {
            sketch: self.engine.sketch().clone(),
            estimator: self.estimator,
            top: self.top.as_ref().map(TopTracker::candidates),
        }
    }
}

/// A finished (or snapshotted) sketch; merges exactly.
#[derive(Clone, Debug)]
pub struct SketchPartial {
    /// The sketch.
    pub sketch: Sketch,
    /// The estimator used for JSON summaries.
    pub estimator: Estimator,
    /// With `top=K`: the candidates of the top items.
    pub top: Option<TopCandidates>,
}

impl Partial for SketchPartial {
    fn to_json(&self) -> Value {
        sketch_result_json(&self.sketch, self.estimator, self.top.as_ref())
    }

    fn merge_from(&mut self, other: &dyn Partial) -> Result<()> {
        let other = other
            .as_any()
            .downcast_ref::<SketchPartial>()
            .ok_or_else(|| WireError::Merge {
                what: "sketch".into(),
                detail: "the other result is not a sketch".into(),
            })?;
        self.sketch.merge(&other.sketch)?;
        match (&mut self.top, &other.top) {
            (Some(mine), Some(theirs)) => mine.merge(theirs, &self.sketch),
            (None, Some(theirs)) => {
                let mut mine = TopCandidates::default();
                mine.merge(theirs, &self.sketch);
                self.top = Some(mine);
            }
            _ => {}
        }
        Ok(())
    }

    fn clone_box(&self) -> Box<dyn Partial> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A sketch tap's result: the summary, and with `top=K` the top items estimated on `sketch`.
fn sketch_result_json(sketch: &Sketch, estimator: Estimator, top: Option<&TopCandidates>) -> Value {
    let mut value = sketch_json(sketch, estimator);
    if let Some(top) = top {
        value["top"] = top.to_json(sketch);
    }
    value
}

/// A sketch's summary as JSON; the same fields as `inpath sketch --json` (docs/sketch.md).
pub fn sketch_json(sketch: &Sketch, estimator: Estimator) -> Value {
    inpath_sketch::report::summary_json(sketch, &sketch.summary(estimator))
}

// ---------------------------------------------------------------------------------------------
// crc

/// Makes [`CrcTap`]s: bytes and CRC-32 (IEEE) of each job. A second, simple tap: it proves
/// that several taps run on the same bytes and lets a test check that a tap saw exactly the
/// forwarded stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrcTapFactory;

impl TapFactory for CrcTapFactory {
    fn name(&self) -> &str {
        "crc"
    }

    fn describe(&self) -> String {
        "crc".into()
    }

    fn make(&self) -> Result<Box<dyn Tap>> {
        Ok(Box::new(CrcTap::default()))
    }
}

/// Bytes and CRC-32 of a job.
#[derive(Default)]
pub struct CrcTap {
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl Tap for CrcTap {
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), String> {
        self.hasher.update(chunk);
        self.bytes += chunk.len() as u64;
        Ok(())
    }

    fn live_json(&self) -> Value {
        json!({"bytes": self.bytes, "crc32": self.hasher.clone().finalize()})
    }

    fn snapshot(&self) -> Box<dyn Partial> {
        Box::new(CrcPartial {
            bytes: self.bytes,
            jobs: 1,
            crc32: Some(self.hasher.clone().finalize()),
        })
    }

    fn finish(&mut self, _job: JobId, _error: Option<&str>) -> TapOutput {
        let hasher = std::mem::take(&mut self.hasher);
        let partial = CrcPartial {
            bytes: std::mem::take(&mut self.bytes),
            jobs: 1,
            crc32: Some(hasher.finalize()),
        };
        TapOutput {
            json: partial.to_json(),
            partial: Box::new(partial),
        }
    }
}

/// Bytes and jobs of merged `crc` results. The CRC of a single job is kept; merged results
/// have none (jobs from different connections have no order to checksum them in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrcPartial {
    /// Bytes seen.
    pub bytes: u64,
    /// Jobs merged.
    pub jobs: u64,
    /// CRC-32 of the job's bytes, for a single job.
    pub crc32: Option<u32>,
}

impl Partial for CrcPartial {
    fn to_json(&self) -> Value {
        match self.crc32 {
            Some(crc) => json!({"bytes": self.bytes, "crc32": crc}),
            None => json!({"bytes": self.bytes, "jobs": self.jobs}),
        }
    }

    fn merge_from(&mut self, other: &dyn Partial) -> Result<()> {
        let other =
            other
                .as_any()
                .downcast_ref::<CrcPartial>()
                .ok_or_else(|| WireError::Merge {
                    what: "crc".into(),
                    detail: "the other result is not a crc result".into(),
                })?;
        self.bytes += other.bytes;
        self.jobs += other.jobs;
        self.crc32 = None;
        Ok(())
    }

    fn clone_box(&self) -> Box<dyn Partial> {
        Box::new(*self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        match parse_tap(spec) {
            Ok(_) => panic!("{spec} should be refused"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_sketch_choice() {
        let tap = parse_tap("sketch:format=u32,sketches=hll").unwrap();
        assert_eq!(
            tap.describe(),
            "sketch:format=u32,hll_p=16,sketches=hll,hash=fast,seed=0x0"
        );
        // What describe() prints parses back to the same tap.
        let again = parse_tap(&tap.describe()).unwrap();
        assert_eq!(again.describe(), tap.describe());
        let tap = parse_tap("sketch:format=u32,sketches=cm+agms,cm=4x12").unwrap();
        assert_eq!(
            tap.describe(),
            "sketch:format=u32,cm=4x12,agms=6x13,sketches=cm+agms,hash=fast,seed=0x0"
        );
    }

    #[test]
    fn parses_sketch_options() {
        let tap = parse_tap("sketch:format=u32,cm=4x12,agms=5x10,hll_p=14,seed=0x10").unwrap();
        assert_eq!(
            tap.describe(),
            "sketch:format=u32,hll_p=14,cm=4x12,agms=5x10,hash=fast,seed=0x10"
        );
        let e = err("sketch:column=user,delimiter=tab,no_header");
        assert!(e.contains("index"), "{e}");
        let tap = parse_tap("sketch:column=2,delimiter=tab,no_header").unwrap();
        assert!(tap.describe().contains("csv,column=2"));
        assert_eq!(
            parse_tap("sketch").unwrap().describe().split(',').next(),
            Some("sketch:format=lines")
        );
        assert_eq!(parse_tap("crc").unwrap().name(), "crc");
    }

    #[test]
    fn refuses_bad_specs() {
        assert!(err("sketchy").contains("unknown tap \"sketchy\""));
        assert!(err("sketch:fmt=u32").contains("unknown option \"fmt\""));
        assert!(err("sketch:format=u16").contains("use u32, u64, lines or csv"));
        assert!(err("sketch:hll_p=30").contains("hll_p = 30 is out of range"));
        assert!(err("sketch:cm=6").contains("not ROWSxP"));
        assert!(err("sketch:format=u32,format=u64").contains("twice"));
        assert!(err("sketch:format=csv").contains("needs column"));
        assert!(err("sketch:sketches=hll+xyz").contains("joined with +"));
        assert!(err("sketch:format=u32,column=a").contains("only applies"));
        assert!(err("sketch:save=/nonexistent/dir").contains("not an existing directory"));
        assert!(err("sketch:hash=md5").contains("fast"));
        assert!(err("crc:x=1").contains("takes no options"));
        assert!(err("sketch:format").contains("needs a value"));
    }

    #[test]
    fn sketch_tap_reports_leftover_and_keeps_whole_records() {
        let factory = parse_tap("sketch:format=u32").unwrap();
        let mut tap = factory.make().unwrap();
        let bytes: Vec<u8> = (0u32..1000).flat_map(|v| v.to_le_bytes()).collect();
        tap.update(&bytes[..1001]).unwrap();
        tap.update(&bytes[1001..]).unwrap();
        tap.update(&[1, 2, 3]).unwrap();
        let job = JobId {
            conn: 1,
            direction: crate::Direction::C2s,
            job: 0,
        };
        let out = tap.finish(job, None);
        assert_eq!(out.json["records"], 1000);
        assert_eq!(out.json["leftover_bytes"], 3);
        assert_eq!(out.json["max"], 999);
        // Reset: the next job starts empty.
        let out = tap.finish(job, None);
        assert_eq!(out.json["records"], 0);
        assert_eq!(out.json["leftover_bytes"], 0);
    }

    #[test]
    fn lines_tap_reports_unterminated_line() {
        let mut tap = parse_tap("sketch").unwrap().make().unwrap();
        tap.update(b"a\nbb\nccc").unwrap();
        let job = JobId {
            conn: 1,
            direction: crate::Direction::C2s,
            job: 0,
        };
        let out = tap.finish(job, None);
        assert_eq!(out.json["records"], 3);
        assert_eq!(out.json["unterminated_line_bytes"], 3);
    }

    #[test]
    fn partials_merge() {
        let factory = parse_tap("crc").unwrap();
        let mut a = factory.make().unwrap();
        a.update(b"hello").unwrap();
        let job = JobId {
            conn: 1,
            direction: crate::Direction::C2s,
            job: 0,
        };
        let mut merged = a.finish(job, None).partial;
        assert_eq!(merged.to_json()["crc32"], crc32fast::hash(b"hello"));
        a.update(b"abc").unwrap();
        merged
            .merge_from(a.finish(job, None).partial.as_ref())
            .unwrap();
        assert_eq!(merged.to_json(), json!({"bytes": 8, "jobs": 2}));
        let sketch = parse_tap("sketch").unwrap().make().unwrap().snapshot();
        assert!(merged.merge_from(sketch.as_ref()).is_err());
    }
}
