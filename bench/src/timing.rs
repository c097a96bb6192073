//! Timing helpers: repeat a run, keep every sample, report the median.

use serde::Serialize;
use std::time::Instant;

/// One measurement: what ran, on how many bytes, and how long each repetition took.
#[derive(Serialize)]
pub struct Measurement {
    /// What was measured, e.g. `all three, fast hash, 1 thread`.
    pub name: String,
    /// Input bytes per repetition.
    pub bytes: u64,
    /// Items per repetition.
    pub items: u64,
    /// Seconds of each repetition.
    pub samples: Vec<f64>,
    /// Median of `samples`.
    pub median_s: f64,
    /// `bytes / median_s / 1e9`.
    pub gb_per_s: f64,
    /// Anything else worth keeping (accuracy, state size...).
    pub extra: serde_json::Value,
}

/// Runs `f` once to warm up, then `reps` times, and returns the measurement.
pub fn measure(
    name: &str,
    bytes: u64,
    items: u64,
    reps: usize,
    mut f: impl FnMut(),
) -> Measurement {
    f();
    let mut samples: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    let mut sorted = samples.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median_s = sorted[sorted.len() / 2];
    samples.shrink_to_fit();
    Measurement {
        name: name.to_string(),
        bytes,
        items,
        samples,
        median_s,
        gb_per_s: bytes as f64 / median_s / 1e9,
        extra: serde_json::Value::Null,
    }
}
