//! The `corr` tap: AMNES's exact correlation statistics of the records on a connection.
//!
//! `--tap corr[:type=u32,streams=16,constant=nan]`: each record is one row of `streams` items of
//! `type` (default: the reference's 64-byte lines, 16 × u32). A job's result is the Pearson
//! coefficients (upper triangle, row by row), means and standard deviations; the statistics
//! merge exactly into the combined view. Results appear when a job ends (the engine does not
//! expose a mid-job snapshot); the live view shows the bytes seen so far.

use crate::contract::{close_job, run_lanes, JobId, Partial, Tap, TapFactory, TapOutput};
use crate::error::{not_mergeable, option_error, Result};
use inpath_core::Engine;
use inpath_corr::{default_names, Corr, CorrConfig, DType, Ddof, NanPolicy, Statistics};
use serde_json::{json, Value};
use std::any::Any;

const CORR_OPTIONS: &str = "type, streams, constant";

/// Makes [`CorrTap`]s of one configuration.
#[derive(Clone, Debug)]
pub struct CorrTapFactory {
    dtype: DType,
    streams: usize,
    policy: NanPolicy,
}

impl CorrTapFactory {
    /// Parses `corr` options.
    pub(crate) fn parse(spec: &str, pairs: &[(&str, Option<&str>)]) -> Result<Self> {
        let mut dtype = DType::U32;
        let mut streams = None;
        let mut policy = NanPolicy::Nan;
        for &(key, value) in pairs {
            let value = value.ok_or_else(|| {
                option_error(spec, format!("option {key:?} needs a value ({key}=...)"))
            })?;
            match key {
                "type" => {
                    dtype = DType::parse(value).map_err(|e| option_error(spec, e.to_string()))?
                }
                "streams" => {
                    streams = Some(value.parse::<usize>().map_err(|_| {
                        option_error(spec, format!("streams={value:?} is not a number"))
                    })?)
                }
                "constant" => {
                    policy = NanPolicy::ALL
                        .into_iter()
                        .find(|p| p.name() == value)
                        .ok_or_else(|| {
                            option_error(spec, format!("constant={value:?} is not nan or zero"))
                        })?
                }
                other => {
                    return Err(option_error(
                        spec,
                        format!("unknown option {other:?}; the corr tap takes {CORR_OPTIONS}"),
                    ))
                }
            }
        }
        let streams = streams.unwrap_or_else(|| dtype.per_line());
        let factory = CorrTapFactory {
            dtype,
            streams,
            policy,
        };
        factory.engine()?;
        Ok(factory)
    }

    fn engine(&self) -> Result<Corr> {
        Ok(Corr::new(CorrConfig::rows(self.dtype, self.streams))?)
    }
}

impl TapFactory for CorrTapFactory {
    fn name(&self) -> &str {
        "corr"
    }

    fn describe(&self) -> String {
        format!(
            "corr:type={},streams={},constant={}",
            self.dtype.name(),
            self.streams,
            self.policy.name()
        )
    }

    fn make(&self) -> Result<Box<dyn Tap>> {
        Ok(Box::new(CorrTap {
            engine: self.engine()?,
            factory: self.clone(),
            bytes: 0,
        }))
    }

    fn record_width(&self) -> Option<usize> {
        Some(self.dtype.width() * self.streams)
    }

    fn run_input(&self, input: &mut dyn std::io::Read, threads: usize) -> Result<Value> {
        let mut engine = self.engine()?;
        run_lanes(&mut engine, input, threads)?;
        let partial = CorrPartial {
            stats: Some(engine.finish()?),
            policy: self.policy,
        };
        Ok(partial.to_json())
    }
}

/// A [`Corr`] engine on a connection.
struct CorrTap {
    engine: Corr,
    factory: CorrTapFactory,
    bytes: u64,
}

impl Tap for CorrTap {
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), inpath_core::Error> {
        self.bytes += chunk.len() as u64;
        self.engine.update(chunk)
    }

    fn live_json(&self) -> Value {
        json!({"bytes": self.bytes, "note": "correlation results appear when the job ends"})
    }

    fn snapshot(&self) -> Box<dyn Partial> {
        Box::new(CorrPartial {
            stats: None,
            policy: self.factory.policy,
        })
    }

    fn finish(&mut self, _job: JobId, error: Option<&str>) -> TapOutput {
        let (leftover, mut problem) = close_job(&mut self.engine, error);
        let stats = match self.engine.finish() {
            Ok(stats) => Some(stats),
            Err(e) => {
                problem.get_or_insert(e.to_string());
                self.engine = self.factory.engine().expect("validated at start-up");
                None
            }
        };
        self.bytes = 0;
        let partial = CorrPartial {
            stats,
            policy: self.factory.policy,
        };
        let mut value = partial.to_json();
        value["leftover_bytes"] = json!(leftover);
        if let Some(problem) = problem {
            value["error"] = json!(problem);
        }
        TapOutput {
            json: value,
            partial: Box::new(partial),
        }
    }
}

/// Finished correlation statistics (`None` before any job ended); merges exactly.
#[derive(Clone)]
pub struct CorrPartial {
    stats: Option<Statistics>,
    policy: NanPolicy,
}

fn finite(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        Value::Null
    }
}

impl Partial for CorrPartial {
    fn to_json(&self) -> Value {
        let Some(stats) = &self.stats else {
            return json!({"rows": 0});
        };
        json!({
            "type": stats.dtype().name(),
            "streams": stats.streams(),
            "rows": stats.count(),
            "names": if stats.names() == default_names(stats.streams()).as_slice() { Value::Null } else { json!(stats.names()) },
            "order": "upper triangle without the diagonal, row by row: (0,1), (0,2), ..., (1,2), ...",
            "pearson": stats.pearson(self.policy).into_iter().map(finite).collect::<Vec<_>>(),
            "means": stats.means().into_iter().map(finite).collect::<Vec<_>>(),
            "std_devs": stats.std_devs(Ddof::Sample).into_iter().map(finite).collect::<Vec<_>>(),
        })
    }

    fn merge_from(&mut self, other: &dyn Partial) -> Result<()> {
        let other = other
            .as_any()
            .downcast_ref::<CorrPartial>()
            .ok_or_else(|| not_mergeable("corr", "correlation statistics"))?;
        match (&mut self.stats, &other.stats) {
            (_, None) => {}
            (None, Some(theirs)) => self.stats = Some(theirs.clone()),
            (Some(mine), Some(theirs)) => mine.merge(theirs)?,
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
