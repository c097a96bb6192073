//! `inpath-bench`: times inpath engines in-process (no process start-up or file I/O in the
//! timed region) and prints JSON. The per-engine scripts in `bench/` (`bench/sketch.py`...)
//! run this next to the peer tools on the same data and print the side-by-side ratios.

mod corr;
mod seal;
mod sketch;
mod timing;
mod wire;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "inpath-bench",
    about = "In-process timings of inpath engines (JSON on stdout)"
)]
struct Cli {
    #[command(subcommand)]
    engine: Engine,
}

#[derive(Subcommand)]
enum Engine {
    /// Time the sketch engine.
    Sketch(sketch::Args),
    /// Time the corr engine.
    Corr(corr::Args),
    /// Time the seal engine (AES modes, page codec tiers, HANA size mix).
    Seal(seal::Args),
    /// Loopback throughput and latency of `inpath wire` (relay, sink) against a direct run.
    Wire(wire::Args),
}

fn main() -> anyhow::Result<()> {
    inpath_core::keep_large_buffers();
    let cli = Cli::parse();
    let measurements = match cli.engine {
        Engine::Sketch(args) => sketch::run(args)?,
        Engine::Corr(args) => corr::run(args)?,
        Engine::Seal(args) => seal::run(args)?,
        Engine::Wire(args) => wire::run(args)?,
    };
    println!("{}", serde_json::to_string_pretty(&measurements)?);
    Ok(())
}
