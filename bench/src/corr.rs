//! Corr engine timings: the whole job (statistics and every Pearson coefficient) on
//! row-interleaved data held in memory, at each requested thread count.
use crate::timing::{measure, Measurement};
use inpath_core::{run_slice, Engine};
use inpath_corr::{Corr, CorrConfig, DType, Kernel, NanPolicy};
use std::path::PathBuf;

/// Arguments of `inpath-bench corr`.
#[derive(clap::Args)]
pub struct Args {
    /// Row-interleaved little-endian data file.
    #[arg(long)]
    data: PathBuf,
    /// Item type (u8, u16, u32, f64...).
    #[arg(long = "type")]
    dtype: String,
    /// Streams per row.
    #[arg(long)]
    streams: usize,
    /// Thread counts to time, comma-separated.
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Repetitions per measurement (the median is reported).
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// Label prefix for the measurement names.
    #[arg(long, default_value = "")]
    label: String,
    /// Kernels: auto, noamx (integer kernels: AVX-512 VNNI/IFMA or AVX2, never AMX), tiles (f64)
    /// or portable; INPATH_ISA caps the level of each.
    #[arg(long, default_value = "auto")]
    kernel: String,
}

/// Runs the corr timings.
pub fn run(args: Args) -> anyhow::Result<Vec<Measurement>> {
    let dtype = DType::parse(&args.dtype)?;
    let kernel = match args.kernel.as_str() {
        "auto" => Kernel::Auto,
        "noamx" => Kernel::NoAmx,
        "tiles" => Kernel::Tiles,
        "portable" => Kernel::Portable,
        other => anyhow::bail!("--kernel {other}: expected auto, noamx, tiles or portable"),
    };
    let config = CorrConfig {
        kernel,
        ..CorrConfig::rows(dtype, args.streams)
    };
    let data = std::fs::read(&args.data)?;
    let rows = data.len() / (args.streams * dtype.width());
    let mut out = Vec::new();
    for &threads in &args.threads {
        let mut checksum = 0.0;
        let name = format!(
            "{}{} x {} {}, {} thread(s)",
            args.label, args.streams, rows, dtype, threads
        );
        let mut m = measure(
            &name,
            data.len() as u64,
            (rows * args.streams) as u64,
            args.reps,
            || {
                let mut corr = Corr::new(config.clone()).expect("valid configuration");
                run_slice(&mut corr, &data, threads).expect("whole rows");
                let stats = corr.finish().expect("statistics");
                let r = stats.pearson(NanPolicy::Nan);
                checksum = r.iter().filter(|v| v.is_finite()).sum::<f64>();
            },
        );
        let kernel = Corr::new(config.clone())?.kernel_name();
        m.extra = serde_json::json!({ "threads": threads, "streams": args.streams, "rows": rows, "sum_of_r": checksum, "kernel": kernel });
        out.push(m);
    }
    Ok(out)
}
