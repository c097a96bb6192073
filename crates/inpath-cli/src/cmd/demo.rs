//! `inpath demo`: every engine on built-in generated data, with the exact answers beside
//! inpath's so the report shows what each engine is for and how well it does.

use crate::common::{bytes, thousands, SplitMix};
use anyhow::{Context, Result};
use clap::Args;
use inpath_core::run_slice;
use inpath_sketch::{Estimator, Params, Parts, SketchEngine};
use std::fmt::Write;
use std::time::Instant;

/// Arguments of `inpath demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Items in the generated sketch stream.
    #[arg(long, default_value_t = 20_000_000)]
    items: usize,
}

/// Runs the demo.
pub fn run(args: DemoArgs) -> Result<()> {
    let mut out = String::new();
    writeln!(
        out,
        "inpath demo: every engine on built-in generated data\n"
    )?;
    out.push_str(&sketch_section(args.items)?);
    writeln!(
        out,
        "== corr (AMNES): the exact Pearson correlation of every pair of streams, in one pass"
    )?;
    out.push_str(&crate::cmd::corr::demo_report()?);
    writeln!(
        out,
        "  try it: inpath corr data.bin --layout lines --type u32 --heatmap corr.svg\n"
    )?;
    writeln!(
        out,
        "== seal (SAP HANA security engine): compress then encrypt each page, and back"
    )?;
    out.push_str(&crate::cmd::seal::demo_report()?);
    writeln!(
        out,
        "  AES kernel: {} (cap with INPATH_ISA; pick a lower one with INPATH_AES=library|aesni|vaes256|vaes512)",
        inpath_seal::kernel::aes_kernel()
    )?;
    writeln!(out, "  try it: inpath seal keygen -o keys.txt; inpath seal FILE -o FILE.sealed --key-file keys.txt\n")?;
    out.push_str(&wire_section()?);
    out.push_str(&crate::cmd::cache::demo_section()?);
    out.push_str(&crate::cmd::query::demo_section()?);
    out.push_str(&crate::cmd::store::demo_section()?);
    crate::common::print_out(&out)
}

const PAGES: u32 = 2_000_000;

/// Page ids of a web log: half the views go to pages with Zipf(2)-like popularity, half are
/// spread evenly over all pages. Returns the page ranks (1 = most popular).
fn page_views(n: usize) -> Vec<u32> {
    let mut rng = SplitMix(2026);
    (0..n)
        .map(|_| {
            if rng.next() & 1 == 0 {
                // P(rank >= k) = 1/k: Zipf with s = 2.
                ((1.0 / rng.unit()) as u64).min(PAGES as u64) as u32
            } else {
                (rng.next() % PAGES as u64) as u32 + 1
            }
        })
        .collect()
}

/// Page rank -> page id, a bijection so ids look arbitrary.
fn page_id(rank: u32) -> u32 {
    rank.wrapping_mul(0x9E37_79B1)
}

fn sketch_section(items: usize) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "== sketch (SKT): cardinality, F2 and frequencies in one pass, one hash per item"
    )?;
    let ranks = page_views(items);
    let data: Vec<u8> = ranks
        .iter()
        .flat_map(|&r| page_id(r).to_le_bytes())
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let params = Params::default();

    let start = Instant::now();
    let mut engine = SketchEngine::u32(params)?;
    run_slice(&mut engine, &data, threads)?;
    let sketch = engine.into_sketch()?;
    let seconds = start.elapsed().as_secs_f64();
    let summary = sketch.summary(Estimator::Ertl);
    // The same stream with HyperLogLog alone (`--sketches hll`): what a distinct count costs.
    let hll_params = params.with_parts(Parts::HLL);
    let start = Instant::now();
    let mut hll_engine = SketchEngine::u32(hll_params)?;
    run_slice(&mut hll_engine, &data, threads)?;
    let hll_only = hll_engine.into_sketch()?;
    let hll_seconds = start.elapsed().as_secs_f64();

    // The exact answers, the slow way, for comparison.
    let mut counts = vec![0u64; PAGES as usize + 1];
    for &r in &ranks {
        counts[r as usize] += 1;
    }
    let distinct = counts.iter().filter(|&&c| c > 0).count() as u64;
    let f2: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    let min = ranks.iter().map(|&r| page_id(r)).min().unwrap_or(0);
    let max = ranks.iter().map(|&r| page_id(r)).max().unwrap_or(0);

    writeln!(
        out,
        "data: {} page views (u32 page ids, {}) over {} pages: half Zipf(2)-popular, half spread evenly",
        thousands(items as u64),
        bytes(data.len() as u64),
        thousands(PAGES as u64)
    )?;
    writeln!(
        out,
        "sketched in {:.3} s = {:.2} GB/s on {threads} lane(s), {} kernel; state {} per lane (HLL P=16, Count-Min 6x13, Fast-AGMS 6x13)",
        seconds,
        data.len() as f64 / seconds / 1e9,
        inpath_sketch::kernel::kernel_name(),
        bytes(params.state_bytes() as u64)
    )?;
    writeln!(
        out,
        "HyperLogLog alone (--sketches hll): {:.3} s = {:.2} GB/s, the same {} registers ({})\n",
        hll_seconds,
        data.len() as f64 / hll_seconds / 1e9,
        thousands(hll_only.hll_registers().len() as u64),
        if hll_only.hll_registers() == sketch.hll_registers() {
            "equal to the full sketch's"
        } else {
            "DIFFERENT from the full sketch's"
        }
    )?;
    writeln!(
        out,
        "  {:<22} {:>20} {:>20} {:>10}",
        "", "inpath sketch", "exact", "error"
    )?;
    let row = |out: &mut String, name: &str, est: f64, exact: f64| -> std::fmt::Result {
        let error = if exact == 0.0 {
            0.0
        } else {
            (est - exact) / exact * 100.0
        };
        writeln!(
            out,
            "  {name:<22} {:>20} {:>20} {:>+9.2}%",
            thousands(est.round() as u64),
            thousands(exact as u64),
            error
        )
    };
    row(
        &mut out,
        "views (count)",
        summary.count as f64,
        items as f64,
    )?;
    row(
        &mut out,
        "distinct pages (HLL)",
        // The demo's sketch keeps all three sketches, so every estimate is there.
        summary.cardinality.unwrap_or(f64::NAN),
        distinct as f64,
    )?;
    row(
        &mut out,
        "F2 = Σ views² (AGMS)",
        summary.f2.unwrap_or(f64::NAN),
        f2,
    )?;
    if let inpath_sketch::Extremes::Int(Some((smin, smax))) = sketch.extremes() {
        writeln!(
            out,
            "  {:<22} {:>20} {:>20} {:>10}",
            "min page id",
            thousands(smin),
            thousands(min as u64),
            "exact"
        )?;
        writeln!(
            out,
            "  {:<22} {:>20} {:>20} {:>10}",
            "max page id",
            thousands(smax),
            thousands(max as u64),
            "exact"
        )?;
    }
    writeln!(
        out,
        "\n  views of the top pages (Count-Min point queries: never below the truth)"
    )?;
    for rank in [1u32, 2, 3, 10, 100, 1000] {
        let estimate = sketch.frequency_of_bytes(&page_id(rank).to_le_bytes())?;
        let exact = counts[rank as usize];
        writeln!(
            out,
            "  {:<22} {:>20} {:>20} {:>+10}",
            format!("page #{rank}"),
            thousands(estimate),
            thousands(exact),
            estimate as i64 - exact as i64
        )?;
    }
    let cm = summary
        .count_min
        .as_ref()
        .context("the demo's sketch keeps Count-Min")?;
    writeln!(
        out,
        "\n  Count-Min bound: at most {} too high with probability {:.1}%; {:.0} distinct pages per counter, so it is {}",
        thousands(cm.error_bound.ceil() as u64),
        cm.confidence * 100.0,
        cm.collision_load,
        if cm.trustworthy {
            "trusted for the popular pages (the stream is skewed) but not for rare ones"
        } else {
            "flagged as untrustworthy"
        }
    )?;
    // The same ids as an Apache DataSketches HLL image: what Spark's hll_sketch_agg writes and
    // hll_union_agg reads (docs/distributed.md).
    let mut ds = inpath_sketch::datasketches::DsHll::new(12)?;
    for &r in &ranks {
        ds.update_u64(page_id(r) as u64);
    }
    let image = ds.to_bytes();
    let back = inpath_sketch::datasketches::DsHll::from_bytes(&image)?;
    writeln!(
        out,
        "\n  for Spark and DataSketches: the ids as a DataSketches HLL image (lg_k 12, {}; Spark's hll_sketch_agg format): {} distinct, read back {}",
        bytes(image.len() as u64),
        thousands(ds.estimate().round() as u64),
        if back == ds { "equal" } else { "DIFFERENT" }
    )?;
    writeln!(out, "  try it on your data: inpath sketch --format u32 FILE, or --column NAME file.csv, or text lines\n")?;
    Ok(out)
}

/// The wire placement: a sink with a sketch tap on loopback, fed by four connections; the
/// merged result is compared with sketching the same bytes in memory.
fn wire_section() -> Result<String> {
    use inpath_taps::{parse_tap, SketchPartial};
    use inpath_wire::{Direction, LogTarget, Server, ServerConfig};
    use tokio::io::AsyncWriteExt;

    const CONNECTIONS: usize = 4;
    let items = 8_000_000usize;
    let data: Vec<u8> = page_views(items)
        .iter()
        .flat_map(|&r| page_id(r).to_le_bytes())
        .collect();
    let per = items / CONNECTIONS * 4;
    let mut out = String::new();
    writeln!(out, "== wire (SmartNIC placement): a TCP sink runs the sketch as a tap on the bytes as they arrive")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (merged, seconds) = runtime.block_on(async {
        let mut config = ServerConfig::sink("127.0.0.1:0");
        config.taps.push(parse_tap("sketch:format=u32")?);
        config.log = LogTarget::Discard;
        let server = Server::bind(config).await?;
        let (addr, hub, stop) = (server.local_addr(), server.hub(), server.shutdown());
        let task = tokio::spawn(server.run());
        let start = Instant::now();
        let mut senders = Vec::new();
        for part in data.chunks(per) {
            let part = part.to_vec();
            senders.push(tokio::spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(addr).await?;
                stream.write_all(&part).await?;
                stream.shutdown().await
            }));
        }
        for sender in senders {
            sender.await??;
        }
        // Each connection is a job; wait until all of them are in the combined (merged) view.
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let merged = loop {
            let done = hub.combined(Direction::C2s, 0, false).and_then(|p| {
                p.as_any()
                    .downcast_ref::<SketchPartial>()
                    .map(|s| s.sketch.clone())
            });
            match done {
                Some(sketch) if sketch.count() == items as u64 => break sketch,
                _ if Instant::now() > deadline => {
                    anyhow::bail!("the demo sink did not finish in 30 s")
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(2)).await,
            }
        };
        let seconds = start.elapsed().as_secs_f64();
        stop.drain();
        task.await?;
        anyhow::Ok((merged, seconds))
    })?;
    let mut engine = SketchEngine::u32(Params::default())?;
    run_slice(&mut engine, &data, 1)?;
    let memory = engine.into_sketch()?;
    writeln!(
        out,
        "{} page views ({}) over {CONNECTIONS} loopback connections in {:.3} s ({:.2} GB/s, sender and sink on the same cores)",
        thousands(items as u64),
        bytes(data.len() as u64),
        seconds,
        data.len() as f64 / seconds / 1e9
    )?;
    writeln!(
        out,
        "  the four connections' sketches merged: {} items, ~{} distinct pages; {} the sketch of the same bytes in memory",
        thousands(merged.count()),
        thousands(merged.cardinality(Estimator::Ertl).unwrap_or(0.0).round() as u64),
        if merged.same_state(&memory) { "register for register and counter for counter equal to" } else { "DIFFERENT from" }
    )?;
    writeln!(out, "  try it: inpath wire sink --listen 127.0.0.1:9000 --tap sketch:format=u32 --http 127.0.0.1:9100, or inpath wire relay --to HOST:PORT ...")?;
    Ok(out)
}
