//! `inpath sketch`: one-pass HyperLogLog + Fast-AGMS + Count-Min + min/max/count of a stream.

use crate::common::{self, Progress};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use inpath_core::{run_source, ColumnRef, Input, LaneOptions};
use inpath_sketch::report::summary_json;
use inpath_sketch::{
    format, Estimator, Extremes, HashMode, Params, Parts, Sketch, SketchEngine, Summary,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `inpath sketch`.
#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:
  inpath sketch --format u32 items.bin              # 4-byte little-endian integers
  inpath sketch access.log                          # one item per text line
  inpath sketch --column user_id events.csv --json  # one CSV column, JSON summary
  cat *.log | inpath sketch - --save today.skt       # from a pipe, saving the sketch
  inpath sketch merge mon.skt tue.skt -o week.skt
  inpath sketch query week.skt --key alice --key bob"
)]
pub struct SketchArgs {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    build: BuildArgs,
}

#[derive(Subcommand)]
enum Action {
    /// Merge sketch files (made anywhere, with the same settings) into one.
    Merge(MergeArgs),
    /// Count-Min point queries on a saved sketch: how often did each key occur (never below
    /// the true count).
    Query(QueryArgs),
    /// Print the summary of a saved sketch.
    Show(ShowArgs),
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum InputFormat {
    /// Little-endian unsigned 32-bit integers.
    U32,
    /// Little-endian unsigned 64-bit integers.
    U64,
    /// Text lines (one item per line; the hash covers the line's bytes).
    Lines,
    /// One CSV column (choose it with --column; the hash covers the value's bytes).
    Csv,
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Lanes (threads) to split the work across; results are identical for any count [default: the number of CPUs]").short('t')))]
#[command(mut_arg("json", |a| a.help("Print the summary as JSON")))]
struct BuildArgs {
    /// Input files; `-` reads standard input. Several files make one stream.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// How the input is cut into items [default: lines, or csv when --column is given].
    #[arg(short, long, value_enum)]
    format: Option<InputFormat>,
    /// The CSV column to sketch, by header name or 0-based index (implies --format csv).
    #[arg(short, long)]
    column: Option<String>,
    /// CSV field delimiter (one byte; `\t` for tab).
    #[arg(long, default_value = ",")]
    delimiter: String,
    /// The CSV file has no header row (columns are then named by index).
    #[arg(long)]
    no_header: bool,
    #[command(flatten)]
    params: ParamArgs,
    /// HyperLogLog estimator.
    #[arg(long, default_value = "ertl", value_parser = estimator_values())]
    estimator: Estimator,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    json: crate::common::Json,
    /// Save the sketch to this file (see docs/FORMATS.md), for `merge` and `query` later.
    #[arg(long, value_name = "FILE.skt")]
    save: Option<PathBuf>,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Args)]
struct ParamArgs {
    /// Hash: `fast` (XXH3-128) or `compat` (MurmurHash3_x64_128, bit-exact with the SKT
    /// reference software).
    #[arg(long, default_value = "fast", value_parser = crate::common::engine_values(&HashMode::ALL, HashMode::name, None))]
    hash: HashMode,
    /// Hash seed (decimal or 0x hex) [default: 0 for fast, 0xDEADF00D for compat].
    #[arg(long)]
    seed: Option<String>,
    /// HyperLogLog precision P: 2^P one-byte registers (4 to 18).
    #[arg(long, default_value_t = 16)]
    hll_p: u8,
    /// Count-Min shape ROWSxP: ROWS (1 to 16) rows of 2^P counters (P 4 to 20).
    #[arg(long, default_value = "6x13", value_name = "ROWSxP")]
    cm: String,
    /// Fast-AGMS shape ROWSxP: ROWS (1 to 16) rows of 2^P counters (P 4 to 20).
    #[arg(long, default_value = "6x13", value_name = "ROWSxP")]
    agms: String,
    /// Which sketches to keep, comma-separated: hll (distinct count), cm (Count-Min point
    /// frequencies), agms (Fast-AGMS F2), or all. Min/max/count are always kept. Fewer sketches
    /// run faster: `--sketches hll` pays only for the distinct count.
    #[arg(long, default_value = "all", value_name = "LIST")]
    sketches: String,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the merged summary as JSON")))]
struct MergeArgs {
    /// Sketch files to merge.
    #[arg(required = true, num_args = 1.., value_name = "FILE.skt")]
    inputs: Vec<PathBuf>,
    /// Where to write the merged sketch.
    #[arg(short, long, value_name = "OUT.skt")]
    output: PathBuf,
    /// HyperLogLog estimator for the printed summary.
    #[arg(long, default_value = "ertl", value_parser = estimator_values())]
    estimator: Estimator,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the answers as JSON")))]
struct QueryArgs {
    /// The sketch file.
    #[arg(value_name = "FILE.skt")]
    sketch: PathBuf,
    /// A key to look up: a number for u32/u64 sketches, the exact text for line/CSV sketches
    /// (a key may begin with `-`: `--key -5`).
    #[arg(
        short,
        long = "key",
        required = true,
        value_name = "K",
        allow_hyphen_values = true
    )]
    keys: Vec<String>,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print the summary as JSON")))]
struct ShowArgs {
    /// The sketch file.
    #[arg(value_name = "FILE.skt")]
    sketch: PathBuf,
    /// HyperLogLog estimator.
    #[arg(long, default_value = "ertl", value_parser = estimator_values())]
    estimator: Estimator,
    #[command(flatten)]
    json: crate::common::Json,
}

/// Runs `inpath sketch`.
pub fn run(args: SketchArgs) -> Result<()> {
    match args.action {
        Some(Action::Merge(merge)) => run_merge(merge),
        Some(Action::Query(query)) => run_query(query),
        Some(Action::Show(show)) => run_show(show),
        None => run_build(args.build),
    }
}

fn estimator_values() -> impl clap::builder::TypedValueParser<Value = Estimator> {
    crate::common::engine_values(&Estimator::ALL, Estimator::name, Some(Estimator::about))
}

fn params_from(args: &ParamArgs) -> Result<Params> {
    let hash = args.hash;
    let seed = match &args.seed {
        None => hash.default_seed(),
        Some(text) => {
            parse_u64(text).with_context(|| format!("--seed {text:?} is not a number"))?
        }
    };
    let (cm_rows, cm_p) = parse_shape("--cm", &args.cm)?;
    let (agms_rows, agms_p) = parse_shape("--agms", &args.agms)?;
    let parts = Parts::parse(&args.sketches).context("--sketches")?;
    let params = Params {
        hll_p: args.hll_p,
        cm_rows,
        cm_p,
        agms_rows,
        agms_p,
        hash,
        seed,
    };
    // Each shape is checked as given (so `--cm 0x13` is still an error), then the sketches not
    // chosen get zero size.
    params.validate()?;
    let params = params.with_parts(parts);
    Ok(params)
}

fn parse_u64(text: &str) -> Result<u64> {
    let t = text.trim();
    Ok(
        match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16)?,
            None => t.parse()?,
        },
    )
}

fn parse_shape(flag: &str, text: &str) -> Result<(u8, u8)> {
    let parsed = text
        .split_once(['x', 'X'])
        .and_then(|(r, p)| Some((r.trim().parse::<u8>().ok()?, p.trim().parse::<u8>().ok()?)));
    match parsed {
        Some(shape) => Ok(shape),
        None => bail!("{flag} {text:?} is not ROWSxP (for example 6x13: 6 rows of 2^13 counters)"),
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Builds a sketch from the inputs; returns it with the bytes read and the CSV column name.
fn build(args: &BuildArgs) -> Result<(Sketch, u64, Option<String>)> {
    let params = params_from(&args.params)?;
    let format = match (args.format, &args.column) {
        (Some(InputFormat::Csv), None) => bail!("--format csv needs --column NAME|INDEX"),
        (Some(f), Some(_)) if f != InputFormat::Csv => {
            bail!("--column only applies to CSV input; drop it or use --format csv")
        }
        (Some(f), _) => f,
        (None, Some(_)) => InputFormat::Csv,
        (None, None) => InputFormat::Lines,
    };
    let mut engine = match format {
        InputFormat::U32 => SketchEngine::u32(params)?,
        InputFormat::U64 => SketchEngine::u64(params)?,
        InputFormat::Lines => SketchEngine::lines(params)?,
        InputFormat::Csv => {
            let column = ColumnRef::parse(args.column.as_deref().unwrap_or_default());
            SketchEngine::csv(
                params,
                column,
                parse_delimiter(&args.delimiter)?,
                !args.no_header,
            )?
        }
    };
    let threads = args.threads.given().unwrap_or_else(default_threads);
    inpath_core::lanes::check_threads(threads)?;
    let inputs: Vec<Input> = args.files.iter().map(|f| Input::from_arg(f)).collect();
    if inputs.iter().filter(|i| **i == Input::Stdin).count() > 1 {
        bail!("standard input (-) can be read only once");
    }
    // Every input is opened (and a missing one reported) before any is read.
    let opened: Vec<_> = inputs
        .iter()
        .map(|input| input.source().map(|source| (input, source)))
        .collect::<Result<_, _>>()?;
    let total: Option<u64> = opened.iter().map(|(_, source)| source.len()).sum();
    let mut progress = Progress::new(total, "sketching", args.quiet);
    let mut bytes = 0u64;
    for (input, source) in opened {
        let options = LaneOptions {
            threads,
            ..LaneOptions::default()
        };
        bytes += run_source(&mut engine, source, input.path(), options, &mut |n| {
            progress.set(n)
        })
        .with_context(|| format!("while sketching {}", input.path().display()))?;
        progress.next_input();
    }
    progress.done();
    let column = engine.column_name();
    Ok((engine.into_sketch()?, bytes, column))
}

fn parse_delimiter(text: &str) -> Result<u8> {
    match text {
        "\\t" | "tab" => Ok(b'\t'),
        t if t.len() == 1 => Ok(t.as_bytes()[0]),
        t => bail!("--delimiter {t:?} must be a single byte (or \\t)"),
    }
}

fn run_build(args: BuildArgs) -> Result<()> {
    let inputs: Vec<Input> = args.files.iter().map(|f| Input::from_arg(f)).collect();
    if let Some(path) = &args.save {
        // Refuse before reading: the sketch must not replace one of its inputs.
        inpath_core::output::check_distinct(path, &inputs)?;
    }
    let start = Instant::now();
    let (sketch, bytes, column) = build(&args)?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(path) = &args.save {
        save(&sketch, path, &inputs)?;
    }
    let estimator = args.estimator;
    let summary = sketch.summary(estimator);
    let threads = args.threads.given().unwrap_or_else(default_threads);
    if args.json.on {
        let mut value = summary_json(&sketch, &summary);
        value["input"] = json!({
            "files": args.files,
            "column": column,
            "bytes": bytes,
            "seconds": seconds,
            "gb_per_s": bytes as f64 / seconds.max(1e-9) / 1e9,
            "threads": threads,
            "kernel": inpath_sketch::kernel::kernel_name(),
        });
        if let Some(path) = &args.save {
            value["saved"] = json!(path);
        }
        common::print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?))
    } else {
        let source = match &column {
            Some(c) => format!("column {c:?} of {}", args.files.join(", ")),
            None => args.files.join(", "),
        };
        let mut text = format!(
            "sketched {} items from {source} ({}) in {:.2} s ({:.2} GB/s, {threads} thread{}, {} kernel)\n",
            common::thousands(sketch.count()),
            common::bytes(bytes),
            seconds,
            bytes as f64 / seconds.max(1e-9) / 1e9,
            if threads == 1 { "" } else { "s" },
            inpath_sketch::kernel::kernel_name(),
        );
        text.push_str(&summary_text(&sketch, &summary));
        if let Some(path) = &args.save {
            text.push_str(&format!("  saved        {}\n", path.display()));
        }
        common::print_out(&text)
    }
}

/// Writes a sketch file all-or-nothing (see `inpath_core::output`), never over an input.
fn save(sketch: &Sketch, path: &Path, inputs: &[Input]) -> Result<()> {
    inpath_core::output::write_file(path, &format::to_bytes(sketch), inputs)?;
    Ok(())
}

fn load(path: &Path) -> Result<Sketch> {
    let bytes = inpath_core::source::read_bounded(path, "a saved sketch", format::MAX_FILE)?;
    Ok(format::from_bytes(
        &bytes,
        &format!("sketch file {}", path.display()),
    )?)
}

fn run_merge(args: MergeArgs) -> Result<()> {
    let inputs: Vec<Input> = args.inputs.iter().cloned().map(Input::File).collect();
    inpath_core::output::check_distinct(&args.output, &inputs)?;
    let mut merged: Option<Sketch> = None;
    for path in &args.inputs {
        let sketch = load(path)?;
        match &mut merged {
            None => merged = Some(sketch),
            Some(m) => m.merge(&sketch).with_context(|| {
                format!(
                    "{} does not match {}",
                    path.display(),
                    args.inputs[0].display()
                )
            })?,
        }
    }
    let merged = merged.expect("clap requires at least one input");
    save(&merged, &args.output, &inputs)?;
    let summary = merged.summary(args.estimator);
    if args.json.on {
        let mut value = summary_json(&merged, &summary);
        value["merged"] = json!(args.inputs);
        value["saved"] = json!(args.output);
        common::print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?))
    } else {
        let mut text = format!(
            "merged {} sketches into {}\n",
            args.inputs.len(),
            args.output.display()
        );
        text.push_str(&summary_text(&merged, &summary));
        common::print_out(&text)
    }
}

fn run_query(args: QueryArgs) -> Result<()> {
    let sketch = load(&args.sketch)?;
    let Some(report) = sketch.count_min_report(Estimator::Ertl) else {
        bail!(
            "{} keeps no Count-Min (it was made with --sketches {}), so it cannot answer point queries; sketch the data again with cm in --sketches",
            args.sketch.display(),
            sketch.params().parts()
        );
    };
    let answers: Vec<(String, u64)> = args
        .keys
        .iter()
        .map(|k| sketch.frequency(k).map(|f| (k.clone(), f)))
        .collect::<Result<_, _>>()?;
    if args.json.on {
        let value = json!({
            "answers": answers.iter().map(|(k, f)| json!({"key": k, "count_at_most": f})).collect::<Vec<_>>(),
            "error_bound": report.error_bound,
            "confidence": report.confidence,
            "trustworthy": report.trustworthy,
        });
        return common::print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut text = String::new();
    let width = answers.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, count) in &answers {
        text.push_str(&format!("{key:<width$}  {}\n", common::thousands(*count)));
    }
    text.push_str(&format!(
        "(Count-Min: never below the true count; above it by at most {} with probability {:.1}%{})\n",
        common::thousands(report.error_bound.ceil() as u64),
        report.confidence * 100.0,
        if report.trustworthy { "" } else { "; this sketch is too crowded for point queries to be trusted" }
    ));
    common::print_out(&text)
}

fn run_show(args: ShowArgs) -> Result<()> {
    let sketch = load(&args.sketch)?;
    let summary = sketch.summary(args.estimator);
    if args.json.on {
        let value = summary_json(&sketch, &summary);
        common::print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?))
    } else {
        common::print_out(&format!(
            "{}\n{}",
            args.sketch.display(),
            summary_text(&sketch, &summary)
        ))
    }
}

fn approx(x: f64) -> String {
    if x < 1e15 {
        common::thousands(x.round() as u64)
    } else {
        format!("{x:.4e}")
    }
}

/// The summary as readable text, one fact per line.
pub fn summary_text(sketch: &Sketch, summary: &Summary) -> String {
    let p = sketch.params();
    let range = match sketch.extremes() {
        Extremes::Int(Some((min, max))) => {
            format!("{} / {}", common::thousands(min), common::thousands(max))
        }
        Extremes::Int(None) => "- (no items)".into(),
        Extremes::Numeric {
            range: Some((min, max)),
            numeric,
        } => format!(
            "{min} / {max} (over the {} values that are numbers)",
            common::thousands(numeric)
        ),
        Extremes::Numeric { range: None, .. } => "- (no numeric values)".into(),
    };
    let mut text = String::new();
    text.push_str(&format!(
        "  count        {}\n",
        common::thousands(summary.count)
    ));
    text.push_str(&format!("  min / max    {range}\n"));
    match (summary.cardinality, summary.cardinality_std_error) {
        (Some(cardinality), Some(error)) => text.push_str(&format!(
            "  distinct     ≈ {}   (HyperLogLog P={}, ±{:.2}% std. error, {} estimator)\n",
            approx(cardinality),
            p.hll_p,
            error * 100.0,
            summary.estimator.name()
        )),
        _ => text.push_str("  distinct     - (HyperLogLog not kept: --sketches without hll)\n"),
    }
    match summary.f2 {
        Some(f2) => text.push_str(&format!(
            "  F2           ≈ {}   (Fast-AGMS {}x{}: Σ frequency², the stream's skew)\n",
            approx(f2),
            p.agms_rows,
            p.agms_p
        )),
        None => text.push_str("  F2           - (Fast-AGMS not kept: --sketches without agms)\n"),
    }
    match &summary.count_min {
        Some(cm) => {
            let trust = if cm.trustworthy {
                if cm.collision_load > 0.5 {
                    format!(
                        "yes for the frequent items (skewed stream); rare items share counters with {:.1} others",
                        cm.collision_load
                    )
                } else {
                    "yes".to_string()
                }
            } else {
                format!(
                    "no: {:.1} distinct items per counter and a flat distribution (use --cm with a larger P)",
                    cm.collision_load
                )
            };
            text.push_str(&format!(
                "  Count-Min    {}x{}: point queries are at most {} too high with probability {:.1}%\n",
                p.cm_rows,
                p.cm_p,
                common::thousands(cm.error_bound.ceil() as u64),
                cm.confidence * 100.0
            ));
            text.push_str(&format!("  trustworthy  {trust}\n"));
        }
        None => text.push_str("  Count-Min    - (not kept: --sketches without cm)\n"),
    }
    text.push_str(&format!(
        "  hash         {} ({}, seed {:#x}), {}\n",
        p.hash.name(),
        p.hash.algorithm(),
        p.seed,
        match sketch.kind() {
            inpath_sketch::ItemKind::Bytes => "text values".to_string(),
            kind => format!("{} items", kind.name()),
        }
    ));
    text
}
