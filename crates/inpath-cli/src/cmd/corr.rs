//! `inpath corr`: exact Pearson correlation of every pair of M parallel streams (AMNES), plus
//! covariance, regression, cosine similarity; saved statistics that merge; an SVG heatmap.

use crate::common::{self, Progress};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use inpath_core::{run_input, ColumnRef, CsvSpec, Engine, Input, LaneOptions};
use inpath_corr::{Corr, CorrConfig, DType, Ddof, Layout, Method, NanPolicy, Stat, Statistics};
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `inpath corr`.
#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:
  inpath corr --layout lines --type u32 data.bin        # 16 x u32 per 64-byte line
  inpath corr --layout rows --type i16 --streams 100 data.bin
  inpath corr --layout columns --type f64 --streams 8 cols.bin   # stream after stream
  inpath corr metrics.csv --columns cpu,mem,io --json
  inpath corr day1.bin --layout lines --type u8 --save day1.stats
  inpath corr merge day1.stats day2.stats -o both.stats
  inpath corr show both.stats --heatmap both.svg"
)]
pub struct CorrArgs {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Action {
    /// Merge saved statistics (same type, streams and names) into one file: exactly the
    /// statistics of all their inputs together.
    Merge(MergeArgs),
    /// Compute coefficients from saved statistics (the reference's "ACC only" deployment).
    Show(ShowArgs),
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum LayoutArg {
    /// The reference's 64-byte lines: 64 x 8-bit, 32 x 16-bit, 16 x 32-bit or 8 x 64-bit
    /// items per line, stream 0 first.
    Lines,
    /// Row-interleaved binary: each row holds one item of each of --streams streams.
    Rows,
    /// Column-major binary: all of stream 0, then all of stream 1, ... (a file, not a pipe).
    Columns,
    /// CSV: every column (or those in --columns) is a stream.
    Csv,
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Lanes (threads); results are identical for any count with integer types [default: 1]").short('j')))]
struct RunArgs {
    /// Input files; `-` reads standard input. Several files make one job (their rows add up).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// How the streams are laid out [default: csv for *.csv files].
    #[arg(short, long, value_enum)]
    layout: Option<LayoutArg>,
    /// Item type [default: f64 for CSV, required for binary layouts].
    #[arg(short = 't', long = "type", value_parser = crate::common::engine_values(&DType::ALL, DType::name, None))]
    dtype: Option<DType>,
    /// Number of streams M (binary rows and columns layouts; lines imply 64 / item bytes).
    #[arg(short = 'm', long)]
    streams: Option<usize>,
    /// CSV columns to correlate, by header name or 0-based index, comma-separated [default:
    /// every column].
    #[arg(short, long, value_delimiter = ',')]
    columns: Vec<String>,
    /// CSV field delimiter (one byte; `\t` for tab).
    #[arg(long, default_value = ",")]
    delimiter: String,
    /// The CSV file has no header row.
    #[arg(long)]
    no_header: bool,
    /// Stream names for binary layouts, comma-separated [default: 0, 1, ...].
    #[arg(long, value_delimiter = ',')]
    names: Vec<String>,
    /// Spearman rank correlation instead of Pearson: two passes, holding the input in memory
    /// (16 bytes per item) until it ends, then ranking.
    #[arg(long)]
    spearman: bool,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// Save the statistics to this file (docs/FORMATS.md), for `merge` and `show` later.
    #[arg(long, value_name = "FILE.stats")]
    save: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print every result as JSON (coefficients in the reference's upper-triangle order; null where undefined)")))]
struct OutputArgs {
    #[command(flatten)]
    json: crate::common::Json,
    /// With --json, also print the exact statistics (decimal strings).
    #[arg(long)]
    stats: bool,
    /// Write a labelled SVG heatmap of the Pearson matrix.
    #[arg(long, value_name = "OUT.svg")]
    heatmap: Option<PathBuf>,
    /// What a constant stream's coefficients are.
    #[arg(long, default_value = "nan", value_parser = crate::common::engine_values(&NanPolicy::ALL, NanPolicy::name, Some(NanPolicy::about)))]
    constant: NanPolicy,
    /// Pairs to list in the text report, strongest |r| first.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

#[derive(Args)]
struct MergeArgs {
    /// Statistics files to merge.
    #[arg(required = true, value_name = "FILE.stats")]
    inputs: Vec<PathBuf>,
    /// The merged statistics file.
    #[arg(short, long, value_name = "FILE.stats")]
    output: PathBuf,
    #[command(flatten)]
    report: OutputArgs,
}

#[derive(Args)]
struct ShowArgs {
    /// A statistics file.
    #[arg(value_name = "FILE.stats")]
    input: PathBuf,
    #[command(flatten)]
    report: OutputArgs,
}

/// Runs `inpath corr`.
pub fn run(args: CorrArgs) -> Result<()> {
    match args.action {
        Some(Action::Merge(merge)) => run_merge(merge),
        Some(Action::Show(show)) => {
            let stats = Statistics::load(&show.input)?;
            report(
                &stats,
                &show.report,
                &[show.input.display().to_string()],
                None,
            )
        }
        None => run_job(args.run),
    }
}

fn run_merge(args: MergeArgs) -> Result<()> {
    let inputs: Vec<Input> = args.inputs.iter().cloned().map(Input::File).collect();
    check_outputs(&[Some(&args.output), args.report.heatmap.as_ref()], &inputs)?;
    let mut merged: Option<Statistics> = None;
    for path in &args.inputs {
        let stats = Statistics::load(path)?;
        match &mut merged {
            None => merged = Some(stats),
            Some(m) => m
                .merge(&stats)
                .with_context(|| format!("merging {}", path.display()))?,
        }
    }
    let merged = merged.context("no statistics files given")?;
    inpath_core::output::write_file(&args.output, &merged.to_bytes(), &inputs)?;
    let sources: Vec<String> = args
        .inputs
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    report(&merged, &args.report, &sources, None)
}

/// Refuses, before any work, outputs that are inputs, and two outputs that are one file.
fn check_outputs(outputs: &[Option<&PathBuf>], inputs: &[Input]) -> Result<()> {
    let outputs: Vec<&PathBuf> = outputs.iter().flatten().copied().collect();
    for (i, out) in outputs.iter().enumerate() {
        inpath_core::output::check_distinct(out, inputs)?;
        if outputs[..i].iter().any(|o| o == out) {
            bail!(
                "{} is named as two outputs (--save/-o and --heatmap); give each its own file",
                out.display()
            );
        }
    }
    Ok(())
}

struct Timing {
    seconds: f64,
    bytes: u64,
    threads: usize,
    kernel: &'static str,
}

fn build_config(args: &RunArgs) -> Result<(CorrConfig, LayoutArg)> {
    let first_is_csv = args
        .files
        .first()
        .is_some_and(|f| f.to_ascii_lowercase().ends_with(".csv"));
    let layout = match args.layout {
        Some(layout) => layout,
        None if first_is_csv || !args.columns.is_empty() => LayoutArg::Csv,
        None => bail!(
            "choose a layout with --layout: lines (the reference's 64-byte lines), rows, columns or csv"
        ),
    };
    let dtype = match (args.dtype, layout) {
        (Some(t), _) => t,
        (None, LayoutArg::Csv) => DType::F64,
        (None, _) => bail!("binary layouts need an item type: --type u8, u16, u32, u64, i8, i16, i32, i64, f32 or f64"),
    };
    if layout != LayoutArg::Csv && (!args.columns.is_empty() || args.no_header) {
        bail!("--columns and --no-header apply to CSV input only (--layout csv)");
    }
    let layout_value = match layout {
        LayoutArg::Lines => {
            let m = dtype.per_line();
            if let Some(s) = args.streams {
                if s != m {
                    bail!("--layout lines holds {m} streams of {dtype} per 64-byte line, not {s}; use --layout rows --streams {s} for other row widths");
                }
            }
            Layout::Rows { streams: m }
        }
        LayoutArg::Rows | LayoutArg::Columns => match args.streams {
            Some(m) => Layout::Rows { streams: m },
            None => bail!(
                "--layout {} needs the number of streams: --streams M",
                if layout == LayoutArg::Rows {
                    "rows"
                } else {
                    "columns"
                }
            ),
        },
        LayoutArg::Csv => {
            if args.streams.is_some() {
                bail!("--streams applies to binary layouts; for CSV choose columns with --columns");
            }
            let delimiter = match args.delimiter.as_str() {
                "\\t" | "tab" => b'\t',
                d if d.len() == 1 => d.as_bytes()[0],
                d => bail!("--delimiter {d:?} must be one byte (or \\t)"),
            };
            let columns: Vec<ColumnRef> =
                args.columns.iter().map(|c| ColumnRef::parse(c)).collect();
            Layout::Csv(CsvSpec {
                columns,
                delimiter,
                has_header: !args.no_header,
            })
        }
    };
    let config = CorrConfig {
        dtype,
        layout: layout_value,
        method: if args.spearman {
            Method::Spearman
        } else {
            Method::Pearson
        },
        kernel: Default::default(),
    };
    Ok((config, layout))
}

fn run_job(args: RunArgs) -> Result<()> {
    inpath_core::lanes::check_threads(args.threads.or(1))?;
    let (config, layout) = build_config(&args)?;
    let mut engine = Corr::new(config.clone())?;
    if !args.names.is_empty() {
        if layout == LayoutArg::Csv {
            bail!("--names applies to binary layouts; CSV streams are named by the header");
        }
        engine.set_names(args.names.clone())?;
    }
    let inputs: Vec<Input> = args.files.iter().map(|f| Input::from_arg(f)).collect();
    check_outputs(&[args.save.as_ref(), args.output.heatmap.as_ref()], &inputs)?;
    let sizes: Vec<Option<u64>> = inputs
        .iter()
        .map(|i| match i {
            Input::File(p) => std::fs::metadata(p)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len()),
            Input::Stdin => None,
        })
        .collect();
    let total = sizes.iter().try_fold(0u64, |acc, s| s.map(|s| acc + s));
    let mut progress = Progress::new(total, "corr", args.quiet);
    let start = Instant::now();
    let mut bytes = 0u64;
    for input in &inputs {
        progress.next_input();
        let read = if layout == LayoutArg::Columns {
            read_columns(&mut engine, input, &config, args.threads.or(1), &progress)?
        } else {
            let options = LaneOptions {
                threads: args.threads.or(1),
                chunk_size: 1 << 20,
            };
            run_input(&mut engine, input, options, &mut |b| progress.set(b))
                .with_context(|| format!("reading {}", input.path().display()))?
        };
        bytes += read;
    }
    let kernel = engine.kernel_name();
    let stats = engine
        .finish()
        .with_context(|| format!("finishing the job over {}", args.files.join(", ")))?;
    let seconds = start.elapsed().as_secs_f64();
    progress.done();
    if let Some(path) = &args.save {
        inpath_core::output::write_file(path, &stats.to_bytes(), &inputs)?;
    }
    report(
        &stats,
        &args.output,
        &args.files,
        Some(Timing {
            seconds,
            bytes,
            threads: args.threads.or(1),
            kernel,
        }),
    )
}

/// Column-major files: N = length / (M * width); rows are read block by block from each
/// stream's region with positioned reads, split across lanes by row range.
fn read_columns(
    engine: &mut Corr,
    input: &Input,
    config: &CorrConfig,
    threads: usize,
    progress: &Progress,
) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let path = match input {
        Input::File(path) => path.clone(),
        Input::Stdin => bail!("--layout columns needs a file (it reads each stream's region); standard input cannot be read that way"),
    };
    // Checked before opening: opening a FIFO with no writer would wait for one.
    let meta = std::fs::metadata(&path).map_err(|e| inpath_core::Error::io(&path, e))?;
    if !meta.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let kind = match meta.file_type() {
            t if t.is_dir() => "a directory",
            t if t.is_fifo() => "a pipe (FIFO)",
            t if t.is_char_device() => "a character device",
            t if t.is_block_device() => "a block device",
            t if t.is_socket() => "a socket",
            _ => "not a regular file",
        };
        bail!(
            "--layout columns reads each stream's region of a file, so it needs a regular file it \
             can seek in; {} is {kind}. Save the data to a file first, or send it row by row \
             with --layout rows",
            path.display()
        );
    }
    let file = std::fs::File::open(&path).map_err(|e| inpath_core::Error::io(&path, e))?;
    let len = meta.len();
    let m = engine.streams().unwrap_or(2) as u64;
    let w = config.dtype.width() as u64;
    if len % (m * w) != 0 {
        bail!(
            "{}: {len} bytes is not {m} whole columns of {} items ({} bytes per row of all streams); {} byte(s) left over",
            path.display(),
            config.dtype,
            m * w,
            len % (m * w)
        );
    }
    let rows = len / (m * w);
    let single = threads <= 1 || rows < 2;
    inpath_corr::run_column_lanes(engine, rows, threads, |lane, range| -> Result<()> {
        const BLOCK: u64 = 1 << 14;
        let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); m as usize];
        let mut r = range.start;
        while r < range.end {
            let n = BLOCK.min(range.end - r);
            for (i, buf) in bufs.iter_mut().enumerate() {
                buf.resize((n * w) as usize, 0);
                file.read_exact_at(buf, (i as u64 * rows + r) * w)
                    .map_err(|e| inpath_core::Error::io(&path, e))?;
            }
            let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
            lane.update_columns(&refs)?;
            r += n;
            if single {
                // One lane: its progress is the whole input's.
                progress.set(r * m * w);
            }
        }
        Ok(())
    })?;
    progress.set(len);
    Ok(len)
}

fn finite(v: f64) -> serde_json::Value {
    if v.is_finite() {
        json!(v)
    } else {
        serde_json::Value::Null
    }
}

fn report(
    stats: &Statistics,
    out: &OutputArgs,
    sources: &[String],
    timing: Option<Timing>,
) -> Result<()> {
    let policy = out.constant;
    let pearson = stats.pearson(policy);
    if let Some(path) = &out.heatmap {
        let svg = heatmap_svg(stats, &pearson, &sources.join(", "));
        let inputs: Vec<Input> = sources.iter().map(|s| Input::from_arg(s)).collect();
        inpath_core::output::write_file(path, svg.as_bytes(), &inputs)?;
    }
    let text = if out.json.on {
        json_report(stats, &pearson, out, timing)?
    } else {
        text_report(stats, &pearson, out, sources, timing)
    };
    common::print_out(&text)
}

fn method_name(stats: &Statistics) -> &'static str {
    match stats.kind() {
        inpath_corr::Kind::Pearson => "pearson",
        inpath_corr::Kind::SpearmanRanks => "spearman",
    }
}

fn json_report(
    stats: &Statistics,
    pearson: &[f64],
    out: &OutputArgs,
    timing: Option<Timing>,
) -> Result<String> {
    let policy = out.constant;
    let pairs = stats.pair_list();
    let regressions: Vec<_> = pairs
        .iter()
        .map(|&(i, j)| stats.regression(i, j, policy))
        .collect();
    let mut value = json!({
        "method": method_name(stats),
        "type": stats.dtype().name(),
        "exact": !stats.dtype().is_float(),
        "streams": stats.streams(),
        "rows": stats.count(),
        "names": stats.names(),
        "order": "upper triangle without the diagonal, row by row: (0,1), (0,2), ..., (0,M-1), (1,2), ...",
        "pearson": pearson.iter().map(|v| finite(*v)).collect::<Vec<_>>(),
        "covariance": stats.covariance(Ddof::Sample).into_iter().map(finite).collect::<Vec<_>>(),
        "means": stats.means().into_iter().map(finite).collect::<Vec<_>>(),
        "std_devs": stats.std_devs(Ddof::Sample).into_iter().map(finite).collect::<Vec<_>>(),
        "regression": {
            "of": "stream j on stream i for each pair (i, j): y_j = slope * x_i + intercept",
            "slope": regressions.iter().map(|r| finite(r.slope)).collect::<Vec<_>>(),
            "intercept": regressions.iter().map(|r| finite(r.intercept)).collect::<Vec<_>>(),
            "slope_through_origin": regressions.iter().map(|r| finite(r.slope_origin)).collect::<Vec<_>>(),
        },
        "cosine": stats.cosine(policy).into_iter().map(finite).collect::<Vec<_>>(),
    });
    if out.stats {
        let m = stats.streams();
        value["statistics"] = json!({
            "sums": (0..m).map(|i| stat_text(stats.sum(i))).collect::<Vec<_>>(),
            "sums_of_squares": (0..m).map(|i| stat_text(stats.sum_of_squares(i))).collect::<Vec<_>>(),
            "sums_of_products": pairs.iter().map(|&(i, j)| stat_text(stats.sum_of_products(i, j))).collect::<Vec<_>>(),
        });
    }
    if let Some(t) = timing {
        value["seconds"] = json!(t.seconds);
        value["bytes"] = json!(t.bytes);
        value["threads"] = json!(t.threads);
        value["kernel"] = json!(t.kernel);
    }
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}

fn stat_text(s: Stat) -> String {
    match s {
        Stat::Int(v) => v.to_string(),
        Stat::Float(d) => format!("{}", d.to_f64()),
    }
}

fn text_report(
    stats: &Statistics,
    pearson: &[f64],
    out: &OutputArgs,
    sources: &[String],
    timing: Option<Timing>,
) -> String {
    let m = stats.streams();
    let names = stats.names();
    let mut s = String::new();
    let method = if stats.kind() == inpath_corr::Kind::SpearmanRanks {
        "Spearman rank"
    } else {
        "Pearson"
    };
    let exactness = if stats.dtype().is_float() {
        "double-double statistics"
    } else {
        "exact integer statistics"
    };
    let _ = writeln!(
        s,
        "{method} correlation of {m} streams x {} rows of {} ({exactness}), {} coefficients",
        common::thousands(stats.count()),
        stats.dtype(),
        common::thousands(pearson.len() as u64)
    );
    let _ = writeln!(s, "input: {}", sources.join(", "));
    if let Some(t) = &timing {
        let _ = writeln!(
            s,
            "time: {:.3} s for {} ({:.2} GB/s, {} thread{}, {} kernel)",
            t.seconds,
            common::bytes(t.bytes),
            t.bytes as f64 / t.seconds.max(1e-9) / 1e9,
            t.threads,
            if t.threads == 1 { "" } else { "s" },
            t.kernel
        );
    }
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(1)
        .clamp(6, 24);
    let ranks = stats.kind() == inpath_corr::Kind::SpearmanRanks;
    if ranks {
        let _ = writeln!(
            s,
            "(two passes: values held in memory, then ranked; ties share their average rank)"
        );
    }
    if m <= 64 && !ranks {
        let means = stats.means();
        let stds = stats.std_devs(Ddof::Sample);
        let _ = writeln!(
            s,
            "\n{:<width$}  {:>16}  {:>16}",
            "stream", "mean", "std dev"
        );
        for i in 0..m {
            let _ = writeln!(
                s,
                "{:<width$}  {:>16}  {:>16}",
                short(&names[i], width),
                num(means[i]),
                num(stds[i])
            );
        }
    }
    if m <= 12 {
        let _ = writeln!(s, "\n{:<width$}", "r");
        s.pop();
        for name in names {
            let _ = write!(s, " {:>8}", short(name, 8));
        }
        s.push('\n');
        let matrix = stats.pearson_matrix(out.constant);
        for i in 0..m {
            let _ = write!(s, "{:<width$}", short(&names[i], width));
            for j in 0..m {
                let _ = write!(s, " {:>8}", fixed(matrix[i * m + j]));
            }
            s.push('\n');
        }
    }
    if out.top > 0 {
        let mut order: Vec<usize> = (0..pearson.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (pearson[a].abs(), pearson[b].abs());
            y.partial_cmp(&x)
                .unwrap_or_else(|| x.is_nan().cmp(&y.is_nan()))
        });
        let shown = out.top.min(order.len());
        if ranks {
            let _ = writeln!(
                s,
                "\nstrongest {shown} of {} pairs (|rho| first):",
                pearson.len()
            );
            let _ = writeln!(s, "{:<w2$}  {:>9}", "pair", "rho", w2 = 2 * width + 3);
        } else {
            let _ = writeln!(
                s,
                "\nstrongest {shown} of {} pairs (|r| first; y on x regression, cosine):",
                pearson.len()
            );
            let _ = writeln!(
                s,
                "{:<w2$}  {:>9}  {:>12}  {:>12}  {:>9}",
                "pair",
                "r",
                "slope",
                "intercept",
                "cosine",
                w2 = 2 * width + 3
            );
        }
        let p = out.constant;
        for &z in order.iter().take(shown) {
            let (i, j) = stats.pair_at(z);
            let reg = stats.regression(i, j, p);
            let pair = format!("{} ~ {}", short(&names[j], width), short(&names[i], width));
            if ranks {
                let _ = writeln!(
                    s,
                    "{:<w2$}  {:>9}",
                    pair,
                    fixed(pearson[z]),
                    w2 = 2 * width + 3
                );
                continue;
            }
            let _ = writeln!(
                s,
                "{:<w2$}  {:>9}  {:>12}  {:>12}  {:>9}",
                pair,
                fixed(pearson[z]),
                num(reg.slope),
                num(reg.intercept),
                fixed(stats.cosine_pair(i, j, p)),
                w2 = 2 * width + 3
            );
        }
    }
    let stds = stats.std_devs(Ddof::Population);
    let constant: Vec<&str> = (0..m)
        .filter(|&i| stats.count() >= 2 && stds[i] == 0.0)
        .map(|i| names[i].as_str())
        .collect();
    if !constant.is_empty() {
        let _ = writeln!(
            s,
            "\nconstant stream(s) {}: their coefficients are undefined ({})",
            constant.join(", "),
            if out.constant == NanPolicy::Nan {
                "NaN; --constant zero reports 0"
            } else {
                "reported as 0"
            }
        );
    }
    if out.heatmap.is_some() {
        let _ = writeln!(
            s,
            "\nheatmap written to {}",
            out.heatmap
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
    }
    s
}

fn short(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        name.to_string()
    } else {
        let mut t: String = name.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn fixed(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v:.4}")
    }
}

/// Seven significant digits, in exponent form outside 1e-3..1e7.
fn num(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    if (-3..7).contains(&exp) {
        format!("{v:.*}", (6 - exp).max(0) as usize)
    } else {
        format!("{v:.6e}")
    }
}

/// The heatmap: at most 256 x 256 cells (a larger M averages square blocks of pairs), a
/// blue-white-red scale from -1 to 1, grey for undefined, names on both axes where they fit
/// and values in the cells when M is small.
pub fn heatmap_svg(stats: &Statistics, pearson: &[f64], source: &str) -> String {
    let m = stats.streams();
    let names = stats.names();
    let block = m.div_ceil(256);
    let cells = m.div_ceil(block);
    let cell = (720.0 / cells as f64).clamp(2.0, 48.0);
    let label_every = if cell >= 11.0 {
        1
    } else {
        (11.0 / cell).ceil() as usize
    };
    let show_labels = block == 1;
    let max_name = names
        .iter()
        .map(|n| n.chars().count().min(16))
        .max()
        .unwrap_or(1) as f64;
    let margin_left = if show_labels {
        16.0 + 7.0 * max_name
    } else {
        60.0
    };
    let margin_top = 70.0 + if show_labels { 7.0 * max_name } else { 20.0 };
    let grid = cell * cells as f64;
    let height = margin_top + grid + 40.0;
    let title = format!(
        "{} correlation, {} streams x {} rows ({})",
        if stats.kind() == inpath_corr::Kind::SpearmanRanks {
            "Spearman"
        } else {
            "Pearson"
        },
        m,
        stats.count(),
        stats.dtype()
    );
    // Wide enough for the grid and colour bar, and for the title (about 9 px a character).
    let width = (margin_left + grid + 140.0).max(24.0 + 9.0 * title.chars().count() as f64);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="12" y="24" font-size="16" font-weight="bold">{}</text>"#,
        xml(&title)
    );
    let subtitle = if block > 1 {
        format!(
            "{} - each cell is the mean r of a {block} x {block} block of pairs",
            short(source, 60)
        )
    } else {
        short(source, 90)
    };
    let _ = writeln!(
        svg,
        r##"<text x="12" y="44" font-size="12" fill="#444">{}</text>"##,
        xml(&subtitle)
    );
    // Cells.
    let value = |i: usize, j: usize| -> f64 {
        let (a, b) = (i.min(j), i.max(j));
        pearson[stats.pair_index(a, b)]
    };
    let stds = stats.std_devs(Ddof::Population);
    for bi in 0..cells {
        for bj in 0..cells {
            let (mut sum, mut count) = (0.0, 0usize);
            for (i, &std) in stds
                .iter()
                .enumerate()
                .take(((bi + 1) * block).min(m))
                .skip(bi * block)
            {
                for j in bj * block..((bj + 1) * block).min(m) {
                    let v = if i == j {
                        if std > 0.0 {
                            1.0
                        } else {
                            f64::NAN
                        }
                    } else {
                        value(i, j)
                    };
                    if v.is_finite() {
                        sum += v;
                        count += 1;
                    }
                }
            }
            let v = if count > 0 {
                sum / count as f64
            } else {
                f64::NAN
            };
            let x = margin_left + bj as f64 * cell;
            let y = margin_top + bi as f64 * cell;
            let tip = if block == 1 {
                format!("{} ~ {}: {}", names[bi], names[bj], fixed(v))
            } else {
                format!("block ({bi}, {bj}): mean r {}", fixed(v))
            };
            let _ = writeln!(
                svg,
                r#"<rect x="{x:.2}" y="{y:.2}" width="{cell:.2}" height="{cell:.2}" fill="{}"><title>{}</title></rect>"#,
                color(v),
                xml(&tip)
            );
            if block == 1 && cell >= 30.0 {
                let ink = if v.is_finite() && v.abs() > 0.6 {
                    "white"
                } else {
                    "#222"
                };
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.2}" y="{:.2}" font-size="{:.0}" text-anchor="middle" dominant-baseline="central" fill="{ink}">{}</text>"#,
                    x + cell / 2.0,
                    y + cell / 2.0,
                    (cell / 3.6).min(12.0),
                    if v.is_finite() {
                        format!("{v:.2}")
                    } else {
                        "NaN".into()
                    }
                );
            }
        }
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{margin_left:.2}" y="{margin_top:.2}" width="{grid:.2}" height="{grid:.2}" fill="none" stroke="#333" stroke-width="1"/>"##
    );
    // Axis labels.
    if show_labels {
        let font = (cell * 0.7).clamp(6.0, 12.0);
        for (k, name) in names.iter().enumerate() {
            if k % label_every != 0 {
                continue;
            }
            let c = k as f64 * cell + cell / 2.0;
            let _ = writeln!(
                svg,
                r#"<text x="{:.2}" y="{:.2}" font-size="{font:.1}" text-anchor="end" dominant-baseline="central">{}</text>"#,
                margin_left - 4.0,
                margin_top + c,
                xml(&short(name, 16))
            );
            let (tx, ty) = (margin_left + c, margin_top - 4.0);
            let _ = writeln!(
                svg,
                r#"<text x="{tx:.2}" y="{ty:.2}" font-size="{font:.1}" text-anchor="start" dominant-baseline="central" transform="rotate(-90 {tx:.2} {ty:.2})">{}</text>"#,
                xml(&short(name, 16))
            );
        }
    } else {
        let _ = writeln!(
            svg,
            r#"<text x="{:.2}" y="{:.2}" font-size="11">streams 0 to {} (row and column order)</text>"#,
            margin_left,
            margin_top - 8.0,
            m - 1
        );
    }
    // Colour bar.
    let bx = margin_left + grid + 30.0;
    let bar = grid.clamp(120.0, 360.0);
    let steps = 40;
    for k in 0..steps {
        let v = 1.0 - 2.0 * (k as f64 + 0.5) / steps as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{bx:.2}" y="{:.2}" width="18" height="{:.2}" fill="{}"/>"#,
            margin_top + bar * k as f64 / steps as f64,
            bar / steps as f64 + 0.5,
            color(v)
        );
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{bx:.2}" y="{margin_top:.2}" width="18" height="{bar:.2}" fill="none" stroke="#333"/>"##
    );
    for v in [1.0, 0.5, 0.0, -0.5, -1.0] {
        let y = margin_top + bar * (1.0 - v) / 2.0;
        let _ = writeln!(
            svg,
            r#"<text x="{:.2}" y="{y:.2}" font-size="11" dominant-baseline="central">{v:+.1}</text>"#,
            bx + 24.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{bx:.2}" y="{:.2}" font-size="11">r</text>"#,
        margin_top - 8.0
    );
    let ny = margin_top + bar + 16.0;
    let _ = writeln!(
        svg,
        r#"<rect x="{bx:.2}" y="{ny:.2}" width="18" height="12" fill="{}"/>"#,
        color(f64::NAN)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.2}" y="{:.2}" font-size="11" dominant-baseline="central">undefined</text>"#,
        bx + 24.0,
        ny + 6.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// Blue (-1) through white (0) to red (+1); grey when undefined.
fn color(v: f64) -> String {
    if !v.is_finite() {
        return "#b0b0b0".into();
    }
    let v = v.clamp(-1.0, 1.0);
    let (end, t) = if v < 0.0 {
        ((33.0, 102.0, 172.0), -v)
    } else {
        ((178.0, 24.0, 43.0), v)
    };
    let white = (247.0, 247.0, 247.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(white.0, end.0),
        mix(white.1, end.1),
        mix(white.2, end.2)
    )
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A short report of corr on built-in generated data (for `inpath demo`): 16 u32 streams x 1 M
/// rows where stream k follows a shared signal with growing noise and stream 15 runs against
/// it; checks the exact statistics against a direct sum and shows the strongest pairs.
// Called by `inpath demo` (wired in by the demo command).
pub fn demo_report() -> Result<String> {
    const M: usize = 16;
    const N: usize = 1 << 20;
    let mut data = Vec::with_capacity(M * N * 4);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..N {
        let signal = (next() >> 40) as u32; // 24 bits
        for k in 0..M as u32 {
            let noise = (next() >> 40) as u32 >> (15 - k.min(15)).min(8);
            let v = if k == 15 {
                u32::MAX - signal * 200
            } else {
                signal.wrapping_mul(k + 1) / 2 + noise * 40
            };
            data.extend_from_slice(&v.to_le_bytes());
        }
    }
    let start = Instant::now();
    let mut engine = Corr::new(CorrConfig::rows(DType::U32, M))?;
    let kernel = engine.kernel_name();
    inpath_core::run_slice(&mut engine, &data, 1)?;
    let stats = engine.finish()?;
    let r = stats.pearson(NanPolicy::Nan);
    let seconds = start.elapsed().as_secs_f64();
    // An independent check of one exact statistic: the sum of products of streams 0 and 1.
    let direct: u128 = data
        .chunks_exact(M * 4)
        .map(|row| {
            let x = u32::from_le_bytes([row[0], row[1], row[2], row[3]]) as u128;
            let y = u32::from_le_bytes([row[4], row[5], row[6], row[7]]) as u128;
            x * y
        })
        .sum();
    let exact_ok = stats.sum_of_products(0, 1).to_string() == direct.to_string();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "corr: Pearson of 16 u32 streams x {} rows ({}) in {:.1} ms ({:.2} GB/s, {} kernel), {} coefficients",
        common::thousands(N as u64),
        common::bytes(data.len() as u64),
        seconds * 1e3,
        data.len() as f64 / seconds / 1e9,
        kernel,
        r.len()
    );
    let _ = writeln!(
        s,
        "  exact 128-bit statistics: sum of products (0,1) = {} ({})",
        stats.sum_of_products(0, 1),
        if exact_ok {
            "matches a direct u128 sum"
        } else {
            "MISMATCH with a direct sum"
        }
    );
    let _ = writeln!(
        s,
        "  r(0,1) = {:.4}  r(0,8) = {:.4}  r(0,14) = {:.4}  r(0,15) = {:.4} (stream 15 runs against the signal)",
        r[stats.pair_index(0, 1)],
        r[stats.pair_index(0, 8)],
        r[stats.pair_index(0, 14)],
        r[stats.pair_index(0, 15)]
    );
    if !exact_ok {
        bail!("corr demo: the exact statistics disagree with a direct sum\n{s}");
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_report_runs_and_is_exact() {
        let text = demo_report().unwrap();
        assert!(text.contains("matches a direct u128 sum"), "{text}");
        assert!(text.contains("r(0,15) = -"), "{text}");
    }

    #[test]
    fn colours_run_from_blue_through_white_to_red() {
        assert_eq!(color(-1.0), "#2166ac");
        assert_eq!(color(0.0), "#f7f7f7");
        assert_eq!(color(1.0), "#b2182b");
        assert_eq!(color(f64::NAN), "#b0b0b0");
        assert_eq!(xml("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }
}
