//! Sketch engine timings: u32 items in memory, all three sketches and each alone, 1..N lanes.

use crate::timing::{measure, Measurement};
use anyhow::Context;
use inpath_core::run_slice;
use inpath_sketch::{Estimator, HashMode, ItemKind, Params, Parts, Sketch, SketchEngine};

/// Arguments of `inpath-bench sketch`.
#[derive(clap::Args)]
pub struct Args {
    /// Little-endian u32 items to sketch (as written by numpy's `tofile`); without it, `--items`
    /// uniform random items are generated.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Items to generate when no `--data` is given.
    #[arg(long, default_value_t = 100_000_000)]
    items: usize,
    /// Lane counts to time all three sketches with.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Repetitions per measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Skip the per-sketch and compat measurements.
    #[arg(long)]
    quick: bool,
    /// The sketches the main (per thread count) measurement keeps: `all`, or a list such as
    /// `hll` or `hll,cm` (as `inpath sketch --sketches`).
    #[arg(long, default_value = "all")]
    sketches: String,
}

/// Runs the sketch timings.
pub fn run(args: Args) -> anyhow::Result<Vec<Measurement>> {
    let bytes = match &args.data {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        None => generate(args.items),
    };
    anyhow::ensure!(bytes.len() % 4 == 0, "data length is not a multiple of 4");
    let items: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    let n = items.len() as u64;
    let size = bytes.len() as u64;
    let exact = exact_distinct(&items);
    let mut out = Vec::new();

    let main_parts = match args.sketches.as_str() {
        "all" => Parts::ALL,
        list => Parts::parse(list)?,
    };
    let main_name = if main_parts == Parts::ALL {
        "all three".to_string()
    } else {
        main_parts.names()
    };
    for &threads in &args.threads {
        let params = Params::default().with_parts(main_parts);
        let name = format!("{main_name}, fast, {threads} thread(s)");
        let (mut m, sketch) = measure_engine(&name, params, &bytes, threads, n, args.reps);
        m.extra = accuracy(&sketch, exact, params, threads);
        out.push(m);
    }
    if args.quick {
        return Ok(out);
    }
    {
        let params = Params::with_hash(HashMode::Compat);
        let name = "all three, compat, 1 thread(s)";
        let (mut m, sketch) = measure_engine(name, params, &bytes, 1, n, args.reps);
        m.extra = accuracy(&sketch, exact, params, 1);
        out.push(m);
    }
    {
        // The hash alone: what every sketch pays before it touches its state.
        let mut sketch = Sketch::new(Params::default(), ItemKind::U32)?;
        out.push(measure(
            "hash only, fast, 1 thread(s)",
            size,
            n,
            args.reps,
            || {
                sketch.clear();
                sketch.bench_update_u32_parts(&bytes, Parts::NONE);
            },
        ));
    }
    // One sketch kept (`--sketches`): what a user who needs only that one pays.
    let alone = [
        ("HLL alone", Parts::HLL, &[1usize, 2][..]),
        (
            "Count-Min alone",
            Parts {
                hll: false,
                cm: true,
                agms: false,
            },
            &[1][..],
        ),
        (
            "Fast-AGMS alone",
            Parts {
                hll: false,
                cm: false,
                agms: true,
            },
            &[1][..],
        ),
    ];
    for (name, parts, thread_counts) in alone {
        let params = Params::default().with_parts(parts);
        for &threads in thread_counts {
            let name = format!("{name}, fast, {threads} thread(s)");
            let (mut m, sketch) = measure_engine(&name, params, &bytes, threads, n, args.reps);
            if parts.hll {
                m.extra = accuracy(&sketch, exact, params, threads);
            }
            out.push(m);
        }
    }
    Ok(out)
}

/// Times sketching `bytes` (u32 items) through the engine on `threads` lanes; returns the
/// measurement and the last run's sketch.
fn measure_engine(
    name: &str,
    params: Params,
    bytes: &[u8],
    threads: usize,
    items: u64,
    reps: usize,
) -> (Measurement, Sketch) {
    let mut result = None;
    let m = measure(name, bytes.len() as u64, items, reps, || {
        let mut engine = SketchEngine::u32(params).expect("valid parameters");
        run_slice(&mut engine, bytes, threads).expect("whole items");
        result = Some(engine.into_sketch().expect("closed"));
    });
    (m, result.expect("ran at least once"))
}

fn accuracy(sketch: &Sketch, exact: u64, params: Params, threads: usize) -> serde_json::Value {
    let estimate = sketch.cardinality(Estimator::Ertl).unwrap_or(f64::NAN);
    serde_json::json!({
        "threads": threads,
        "exact_distinct": exact,
        "hll_estimate": estimate,
        "hll_relative_error": (estimate - exact as f64) / exact as f64,
        "f2_estimate": sketch.f2(),
        "state_bytes_per_lane": params.state_bytes(),
    })
}

/// Uniform random u32 items from a fixed-seed SplitMix64.
fn generate(items: usize) -> Vec<u8> {
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut out = Vec::with_capacity(items * 4);
    for _ in 0..items {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&((z ^ (z >> 31)) as u32).to_le_bytes());
    }
    out
}

/// Exact number of distinct u32 values, with a 512 MiB bitmap.
fn exact_distinct(items: &[u32]) -> u64 {
    let mut bits = vec![0u64; 1 << 26];
    let mut distinct = 0;
    for &x in items {
        let (word, bit) = ((x >> 6) as usize, x & 63);
        let before = bits[word];
        bits[word] = before | (1 << bit);
        distinct += ((before >> bit) & 1 == 0) as u64;
    }
    distinct
}
