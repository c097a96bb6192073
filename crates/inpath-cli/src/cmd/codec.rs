//! `inpath compress` and `inpath decompress`: the streaming codecs on files and pipes.
use crate::common::{bytes, print_out, Progress};
use anyhow::{bail, Context};
use clap::Args;
use inpath_core::output::Output;
use inpath_core::output::WriteBehind;
use inpath_core::Input;
use inpath_seal::codec::{Compressor, Decompressor, Format};
use std::io::IsTerminal;
use std::time::Instant;

const CHUNK: usize = 256 << 10;

/// Arguments of `inpath compress`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  inpath compress data.csv -o data.csv.gz --format gzip\n  \
    cat data.csv | inpath compress --format zstd --level 19 > data.csv.zst"
)]
#[command(mut_arg("json", |a| a.help("Print a summary as JSON (to standard output when the data goes to a file, else to standard error)")))]
pub struct CompressArgs {
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    file: String,
    /// Output file, or `-` for standard output.
    #[arg(short, long, default_value = "-")]
    output: String,
    /// Format: gzip, zlib, deflate (raw), lz4 (frame), snappy (framed), zstd.
    #[arg(short, long)]
    format: String,
    /// Level: 0-9 for gzip/zlib/deflate (default 6), 1-22 for zstd (default 3); LZ4 and
    /// Snappy have none.
    #[arg(short, long)]
    level: Option<i32>,
    #[command(flatten)]
    json: crate::common::Json,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}

/// Arguments of `inpath decompress`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  inpath decompress data.csv.gz -o data.csv\n  \
    inpath decompress --format deflate < page.deflate > page"
)]
#[command(mut_arg("json", |a| a.help("Print a summary as JSON (to standard output when the data goes to a file, else to standard error)")))]
pub struct DecompressArgs {
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    file: String,
    /// Output file, or `-` for standard output.
    #[arg(short, long, default_value = "-")]
    output: String,
    /// Format (default: recognised from the first bytes; raw deflate must be named).
    #[arg(short, long)]
    format: Option<String>,
    #[command(flatten)]
    json: crate::common::Json,
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
}

/// Opens the output after checking it is not the input: a file written all-or-nothing (see
/// `inpath_core::output`), or standard output.
fn open_output(path: &str, binary: bool, input: &Input) -> anyhow::Result<Output> {
    if path == "-" && binary && std::io::stdout().is_terminal() {
        bail!("refusing to write compressed data to a terminal; use -o FILE or a pipe");
    }
    Ok(Output::open(path, std::slice::from_ref(input))?)
}

fn report(json: bool, output: &str, value: serde_json::Value) -> anyhow::Result<()> {
    if !json {
        return Ok(());
    }
    let text = format!("{}\n", serde_json::to_string_pretty(&value)?);
    if output == "-" {
        eprint!("{text}");
        Ok(())
    } else {
        print_out(&text)
    }
}

/// Runs `inpath compress`.
pub fn run_compress(args: CompressArgs) -> anyhow::Result<()> {
    let format = Format::parse(&args.format)?;
    let mut c = Compressor::new(format, args.level)?;
    let input = Input::from_arg(&args.file);
    let out = open_output(&args.output, true, &input)?;
    let source = input.source()?;
    let progress = Progress::new(source.len(), "compressing", args.quiet);
    // The input is read ahead (or mapped) and the output written behind, on their own
    // threads, while this one compresses.
    let mut writer = WriteBehind::new(out, &args.output)?;
    let (mut read, mut written) = (0u64, 0u64);
    let start = Instant::now();
    source.for_each_chunk(input.path(), CHUNK, |chunk| {
        let mut batch = writer.spare();
        batch.resize_with(1, Vec::new);
        c.push(chunk, &mut batch[0])?;
        written += batch[0].len() as u64;
        writer.send(batch)?;
        read += chunk.len() as u64;
        progress.set(read);
        Ok::<(), anyhow::Error>(())
    })?;
    let mut tail = Vec::new();
    c.finish(&mut tail)?;
    written += tail.len() as u64;
    writer.send(vec![tail])?;
    let out = writer.finish()?;
    out.commit()?;
    progress.done();
    let secs = start.elapsed().as_secs_f64();
    report(
        args.json.on,
        &args.output,
        serde_json::json!({
            "format": format.name(), "input_bytes": read, "output_bytes": written,
            "ratio": if written > 0 { read as f64 / written as f64 } else { 0.0 }, "seconds": secs,
        }),
    )
}

/// Output a decompressor may hold before it goes to the writer: bounds memory whatever the
/// expansion of the input.
const DECOMPRESSED_BATCH: usize = 4 << 20;

/// Runs `inpath decompress`.
pub fn run_decompress(args: DecompressArgs) -> anyhow::Result<()> {
    let input = Input::from_arg(&args.file);
    let out = open_output(&args.output, false, &input)?;
    let source = input.source()?;
    let total = source.len();
    let named = args.format.as_deref().map(Format::parse).transpose()?;
    let detect = |first: &[u8]| -> anyhow::Result<Format> {
        match named {
            Some(format) => Ok(format),
            None => Format::detect(first).with_context(|| {
                format!(
                    "cannot tell the format of {} from its first bytes; name it with --format (raw deflate always needs it)",
                    input.path().display()
                )
            }),
        }
    };
    let mut writer = WriteBehind::new(out, &args.output)?;
    let progress = Progress::new(total, "decompressing", args.quiet);
    let mut scratch = Vec::with_capacity(2 << 20);
    let (mut read, mut written) = (0u64, 0u64);
    let start = Instant::now();
    let context = |format: Format| format!("{} ({} stream)", input.path().display(), format.name());
    // Decompressed pieces gather in `pending` and go to the writer every few MiB.
    let mut pending = writer.spare();
    pending.resize_with(1, Vec::new);
    let flush = |pending: &mut Vec<Vec<u8>>, writer: &mut WriteBehind| {
        let full = std::mem::replace(pending, writer.spare());
        pending.resize_with(1, Vec::new);
        writer.send(full)
    };
    let mut decoder: Option<(Format, Decompressor)> = None;
    let mut write_error: Option<inpath_core::Error> = None;
    source.for_each_chunk(input.path(), CHUNK, |chunk| {
        let (format, d) = match &mut decoder {
            Some(d) => d,
            slot => {
                let format = detect(chunk)?;
                slot.insert((format, Decompressor::new(format)))
            }
        };
        let pushed = {
            let mut sink = |piece: &[u8]| -> inpath_seal::Result<()> {
                written += piece.len() as u64;
                pending[0].extend_from_slice(piece);
                if pending[0].len() >= DECOMPRESSED_BATCH {
                    if let Err(e) = flush(&mut pending, &mut writer) {
                        // The decompressor's sink can only say "stop"; the cause is kept here.
                        write_error = Some(e);
                        return Err(inpath_seal::Error::State("the output is closed".into()));
                    }
                }
                Ok(())
            };
            d.push_to(chunk, &mut scratch, &mut sink)
        };
        if let Some(e) = write_error.take() {
            return Err(anyhow::Error::new(e));
        }
        pushed.with_context(|| context(*format))?;
        read += chunk.len() as u64;
        progress.set(read);
        Ok::<(), anyhow::Error>(())
    })?;
    let (format, mut d) = match decoder {
        Some(d) => d,
        None => {
            let format = detect(&[])?;
            (format, Decompressor::new(format))
        }
    };
    scratch.clear();
    d.finish(&mut scratch).with_context(|| context(format))?;
    written += scratch.len() as u64;
    pending[0].extend_from_slice(&scratch);
    flush(&mut pending, &mut writer)?;
    let out = writer.finish()?;
    out.commit()?;
    progress.done();
    let secs = start.elapsed().as_secs_f64();
    if !args.json.on && !args.quiet && args.output != "-" && std::io::stderr().is_terminal() {
        eprintln!("{}: {} -> {}", format.name(), bytes(read), bytes(written));
    }
    report(
        args.json.on,
        &args.output,
        serde_json::json!({"format": format.name(), "input_bytes": read, "output_bytes": written, "seconds": secs}),
    )
}
