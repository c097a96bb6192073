//! `inpath`: compute on data while it moves. This binary only parses arguments and wires the
//! engine crates together; each engine's command lives in its own module under `cmd/`.
#![forbid(unsafe_code)]

mod cmd;
mod common;
mod security;

use clap::{Parser, Subcommand};

/// inpath: one-pass analytics and transforms on data as it streams by.
#[derive(Parser)]
#[command(
    name = "inpath",
    version,
    about = "inpath: compute on data while it moves: sketches, exact correlation, page \
             sealing and compression, and TCP taps, in one pass as the data streams by.",
    after_help = "Start with `inpath demo`; every command has --help and most have --json.\n\
                  Docs: docs/ in the repository (sketch.md, corr.md, seal.md, wire.md, python.md).",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every engine on built-in generated data and print a report.
    Demo(cmd::demo::DemoArgs),
    /// One-pass HyperLogLog + Fast-AGMS + Count-Min sketch of a stream (SKT).
    Sketch(Box<cmd::sketch::SketchArgs>),
    /// Exact Pearson correlation of every pair of parallel streams (AMNES).
    Corr(Box<cmd::corr::CorrArgs>),
    /// Compress then encrypt a file page by page (SAP HANA security engine); also
    /// `seal inspect` and `seal keygen`.
    Seal(cmd::seal::SealArgs),
    /// Decrypt then decompress a sealed file back to its pages.
    Unseal(cmd::seal::UnsealArgs),
    /// Compress a stream: gzip, zlib, deflate, lz4, snappy or zstd.
    Compress(cmd::codec::CompressArgs),
    /// Decompress a stream (format recognised from its first bytes, or --format).
    Decompress(cmd::codec::DecompressArgs),
    /// Relay or receive TCP connections and run engines as taps on the bytes as they pass.
    Wire(Box<cmd::wire::WireArgs>),
    /// A memcached-compatible cache with a DRAM index and a flash tier (BlueCache).
    Cache(cmd::cache::CacheArgs),
    /// Column tables of sealed pages (AQUOMAN's storage side): `query gen` (TPC-H),
    /// `query inspect`.
    Query(cmd::query::QueryArgs),
    /// A page store with kernels beside the pages (BlueDBM): put, ls, read, rm, grep, nn, bfs,
    /// chase.
    Store(cmd::store::StoreArgs),
    /// Certificates and tokens for the servers' TLS and authentication: `tls init`,
    /// `tls token`.
    Tls(cmd::tls::TlsArgs),
}

fn main() {
    inpath_core::keep_large_buffers();
    let cli = Cli::parse();
    // A mistyped kernel cap would silently run the best kernels: refuse it instead.
    let caps = || -> anyhow::Result<()> {
        inpath_core::isa::check_env()?;
        inpath_seal::kernel::check_env()?;
        Ok(())
    };
    if let Err(e) = caps() {
        common::exit_with(Err(e));
    }
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Sketch(args) => cmd::sketch::run(*args),
        Command::Corr(args) => cmd::corr::run(*args),
        Command::Seal(args) => cmd::seal::run(args),
        Command::Unseal(args) => cmd::seal::run_unseal(args),
        Command::Compress(args) => cmd::codec::run_compress(args),
        Command::Decompress(args) => cmd::codec::run_decompress(args),
        Command::Wire(args) => cmd::wire::run(*args),
        Command::Cache(args) => cmd::cache::run(args),
        Command::Query(args) => cmd::query::run(args),
        Command::Store(args) => cmd::store::run_store(args),
        Command::Tls(args) => cmd::tls::run(args),
    };
    common::exit_with(result);
}
