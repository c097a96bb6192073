//! The `sketch` tap: SKT's HyperLogLog, Fast-AGMS and Count-Min (with count, min and max) over
//! the records of a stream; results merge exactly, and `top=K` adds the top items
//! ([`crate::top`]).

use crate::contract::{close_job, run_lanes, JobId, Partial, Tap, TapFactory, TapOutput};
use crate::error::{not_mergeable, option_error, Result};
use crate::top::{TopCandidates, TopTracker, MAX_TOP};
use inpath_core::{ColumnRef, Engine};
use inpath_sketch::{format, Estimator, HashMode, Params, Parts, Sketch, SketchEngine};
use serde_json::{json, Value};
use std::any::Any;
use std::path::PathBuf;

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
/// [`MAX_TOP`], from Count-Min over sampled candidates: see [`crate::top`]; u32,
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

    pub(crate) fn parse(spec: &str, pairs: &[(&str, Option<&str>)]) -> Result<Self> {
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
                        .filter(|k| (1..=MAX_TOP).contains(k))
                        .ok_or_else(|| {
                            option_error(
                                spec,
                                format!(
                                    "top={text:?} is out of range: 1 to {}",
                                    MAX_TOP
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

    fn record_delimiter(&self) -> Option<u8> {
        match self.format {
            SketchFormat::Lines | SketchFormat::Csv => Some(b'\n'),
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
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), inpath_core::Error> {
        if self.lines {
            match memchr::memrchr(b'\n', chunk) {
                Some(at) => self.tail = (chunk.len() - at - 1) as u64,
                None => self.tail += chunk.len() as u64,
            }
        }
        if let Some(top) = &mut self.top {
            top.feed(chunk);
        }
        self.engine.update(chunk)
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
        let (leftover, mut problem) = close_job(&mut self.engine, error);
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
            .ok_or_else(|| not_mergeable("sketch", "a sketch"))?;
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
