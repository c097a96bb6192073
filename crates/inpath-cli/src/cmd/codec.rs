//! `inpath compress` and `inpath decompress`: the streaming codecs on files and pipes.
use crate::common::{bytes, print_out, Progress};
use anyhow::{bail, Context};
use clap::Args;
use inpath_core::output::Output;
use inpath_core::source::read_full;
use inpath_core::Input;
use inpath_seal::codec::{Compressor, Decompressor, Format};
use std::io::{IsTerminal, Write};
use std::time::Instant;

const CHUNK: usize = 256 << 10;

/// Arguments of `inpath compress`.
#[derive(Args)]
#[command(
    after_help = "Examples:\n  inpath compress data.csv -o data.csv.gz --format gzip\n  \
    cat data.csv | inpath compress --format zstd --level 19 > data.csv.zst"
)]
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
    /// Print a summary as JSON (to standard output when the data goes to a file, else to
    /// standard error).
    #[arg(long)]
    json: bool,
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
    /// Print a summary as JSON (to standard output when the data goes to a file, else to
    /// standard error).
    #[arg(long)]
    json: bool,
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
    let mut out = open_output(&args.output, true, &input)?;
    let (mut reader, total) = input.open()?;
    let progress = Progress::new(total, "compressing", args.quiet);
    let mut buf = vec![0u8; CHUNK];
    let mut packed = Vec::with_capacity(CHUNK);
    let (mut read, mut written) = (0u64, 0u64);
    let start = Instant::now();
    loop {
        let n = read_full(&mut reader, &mut buf, input.path())?;
        packed.clear();
        if n > 0 {
            c.push(&buf[..n], &mut packed)?;
        }
        if n < buf.len() {
            c.finish(&mut packed)?;
        }
        out.write_all(&packed)
            .with_context(|| format!("cannot write {}", args.output))?;
        written += packed.len() as u64;
        read += n as u64;
        progress.set(read);
        if n < buf.len() {
            break;
        }
    }
    out.commit()?;
    progress.done();
    let secs = start.elapsed().as_secs_f64();
    report(
        args.json,
        &args.output,
        serde_json::json!({
            "format": format.name(), "input_bytes": read, "output_bytes": written,
            "ratio": if written > 0 { read as f64 / written as f64 } else { 0.0 }, "seconds": secs,
        }),
    )
}

/// Runs `inpath decompress`.
pub fn run_decompress(args: DecompressArgs) -> anyhow::Result<()> {
    let input = Input::from_arg(&args.file);
    let mut out = open_output(&args.output, false, &input)?;
    let (mut reader, total) = input.open()?;
    let mut buf = vec![0u8; CHUNK];
    let first = read_full(&mut reader, &mut buf, input.path())?;
    let format = match &args.format {
        Some(name) => Format::parse(name)?,
        None => Format::detect(&buf[..first]).with_context(|| {
            format!(
                "cannot tell the format of {} from its first bytes; name it with --format (raw deflate always needs it)",
                input.path().display()
            )
        })?,
    };
    let mut d = Decompressor::new(format);
    let progress = Progress::new(total, "decompressing", args.quiet);
    let mut scratch = Vec::with_capacity(2 << 20);
    let (mut read, mut written) = (0u64, 0u64);
    let start = Instant::now();
    let mut n = first;
    let context = || format!("{} ({} stream)", input.path().display(), format.name());
    let mut write_error: Option<std::io::Error> = None;
    loop {
        let pushed = {
            let mut sink = |piece: &[u8]| -> inpath_seal::Result<()> {
                written += piece.len() as u64;
                out.write_all(piece).map_err(|e| {
                    write_error = Some(e);
                    inpath_seal::Error::State("the output is closed".into())
                })
            };
            d.push_to(&buf[..n], &mut scratch, &mut sink)
        };
        if let Some(e) = write_error.take() {
            return Err(anyhow::Error::new(e).context(format!("cannot write {}", args.output)));
        }
        pushed.with_context(context)?;
        read += n as u64;
        progress.set(read);
        if n < buf.len() {
            break;
        }
        n = read_full(&mut reader, &mut buf, input.path())?;
    }
    scratch.clear();
    d.finish(&mut scratch).with_context(context)?;
    out.write_all(&scratch)
        .with_context(|| format!("cannot write {}", args.output))?;
    written += scratch.len() as u64;
    out.commit()?;
    progress.done();
    let secs = start.elapsed().as_secs_f64();
    if !args.json && !args.quiet && args.output != "-" && std::io::stderr().is_terminal() {
        eprintln!("{}: {} -> {}", format.name(), bytes(read), bytes(written));
    }
    report(
        args.json,
        &args.output,
        serde_json::json!({"format": format.name(), "input_bytes": read, "output_bytes": written, "seconds": secs}),
    )
}
