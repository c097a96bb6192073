//! TPC-H data generation into column tables, from the `tpchgen` / `tpchgen-arrow` crates
//! (spec-conformant text; decimals stay `Decimal128(15, 2)`, dates `Date32`).

use crate::error::{Error, Result};
use crate::writer::{TableSummary, TableWriter, WriteOptions};
use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

/// The eight TPC-H tables, in the order [`generate_tpch`] writes them.
pub const TPCH_TABLES: [&str; 8] = [
    "lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region",
];

/// How [`generate_tpch`] works.
#[derive(Clone, Debug)]
pub struct GenOptions {
    /// How each table is written (tier, key, rows per page, overwrite). Its `threads` is
    /// replaced by `threads` below.
    pub write: WriteOptions,
    /// Threads: generator parts run side by side on this many threads, and the writer encodes
    /// and seals the columns of a page on as many.
    pub threads: usize,
    /// Rows per generator part (the unit of parallel generation; the output does not depend
    /// on it). Default 250,000.
    pub part_rows: usize,
    /// Counts the rows written, as they are (for a progress bar).
    pub rows_written: Option<Arc<AtomicU64>>,
    /// Set to stop: the table being written is abandoned (its staging directory removed) and
    /// [`Error::Interrupted`] returned; tables finished before stay.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            write: WriteOptions::default(),
            threads: 1,
            part_rows: 250_000,
            rows_written: None,
            cancel: None,
        }
    }
}

/// Rows of the eight tables at scale factor 1 (lineitem's count varies slightly with the
/// seed-driven line counts; this is its expected value).
pub const SF1_ROWS: u64 = 8_661_245;

/// Bytes of the eight tables at scale factor `sf` in plain pages of 65,536 rows, for checking
/// free space before generating: SF 1 measured at 475.3 MiB, scaled linearly, 3 % added for
/// the larger keys and dates of larger scale factors. A codec on the string heaps writes less;
/// a cipher adds 64 bytes a page.
pub fn estimated_bytes(sf: f64) -> f64 {
    sf * 475.3 * 1024.0 * 1024.0 * 1.03
}

/// Rows of the eight tables at scale factor `sf`, as [`generate_tpch`] writes them (about).
pub fn estimated_rows(sf: f64) -> u64 {
    TPCH_TABLES
        .iter()
        .map(|t| estimate(t, sf).0)
        .sum::<f64>()
        .round() as u64
}

type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send>;

const BATCH_ROWS: usize = 8192;

fn boxed<I>(it: I) -> Batches
where
    I: Iterator<Item = std::result::Result<RecordBatch, ArrowError>> + Send + 'static,
{
    Box::new(it)
}

/// The schema tpchgen-arrow gives `table`.
pub fn tpch_schema(table: &str) -> Option<SchemaRef> {
    Some(match table {
        "lineitem" => LineItemArrow::schema_ref(),
        "orders" => OrderArrow::schema_ref(),
        "customer" => CustomerArrow::schema_ref(),
        "part" => PartArrow::schema_ref(),
        "partsupp" => PartSuppArrow::schema_ref(),
        "supplier" => SupplierArrow::schema_ref(),
        "nation" => NationArrow::schema_ref(),
        "region" => RegionArrow::schema_ref(),
        _ => return None,
    })
}

/// tpchgen-arrow's batches of part `part` (1-based) of `parts` of `table`.
pub fn tpch_batches(table: &str, sf: f64, part: i32, parts: i32) -> Option<Batches> {
    Some(match table {
        "lineitem" => boxed(
            LineItemArrow::new(LineItemGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS),
        ),
        "orders" => {
            boxed(OrderArrow::new(OrderGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS))
        }
        "customer" => boxed(
            CustomerArrow::new(CustomerGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS),
        ),
        "part" => {
            boxed(PartArrow::new(PartGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS))
        }
        "partsupp" => boxed(
            PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS),
        ),
        "supplier" => boxed(
            SupplierArrow::new(SupplierGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS),
        ),
        "nation" => boxed(
            NationArrow::new(NationGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS),
        ),
        "region" => boxed(
            RegionArrow::new(RegionGenerator::new(sf, part, parts)).with_batch_size(BATCH_ROWS),
        ),
        _ => return None,
    })
}

/// Roughly how many rows `table` has, and the count of the generator's own unit (orders for
/// lineitem, parts for partsupp) that bounds the number of parts.
fn estimate(table: &str, sf: f64) -> (f64, f64) {
    match table {
        "lineitem" => (6_000_000.0 * sf, 1_500_000.0 * sf),
        "orders" => (1_500_000.0 * sf, 1_500_000.0 * sf),
        "customer" => (150_000.0 * sf, 150_000.0 * sf),
        "part" => (200_000.0 * sf, 200_000.0 * sf),
        "partsupp" => (800_000.0 * sf, 200_000.0 * sf),
        "supplier" => (10_000.0 * sf, 10_000.0 * sf),
        _ => (25.0, 1.0),
    }
}

/// Writes the eight TPC-H tables at scale factor `sf` as table directories under `dir`
/// (created if needed): `dir/lineitem`, `dir/orders`, ... Returns one summary per table, in
/// [`TPCH_TABLES`] order. Tables already written stay when a later one fails; each table
/// appears whole or not at all.
pub fn generate_tpch(sf: f64, dir: &Path, options: &GenOptions) -> Result<Vec<TableSummary>> {
    if !(sf.is_finite() && sf > 0.0 && sf <= 100_000.0) {
        return Err(Error::parameter(
            "scale factor",
            sf,
            "above 0, at most 100000",
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    TPCH_TABLES
        .iter()
        .map(|table| generate_table(table, sf, dir, options))
        .collect()
}

/// Writes one TPC-H table (`table` one of [`TPCH_TABLES`]) as `dir/<table>`.
pub fn generate_table(
    table: &str,
    sf: f64,
    dir: &Path,
    options: &GenOptions,
) -> Result<TableSummary> {
    let schema = tpch_schema(table)
        .ok_or_else(|| Error::parameter("TPC-H table", table, TPCH_TABLES.join(", ")))?;
    let threads = options.threads.max(1);
    let mut write = options.write.clone();
    write.threads = threads;
    let (rows, units) = estimate(table, sf);
    let parts = (rows / options.part_rows.max(1) as f64)
        .ceil()
        .clamp(1.0, units.max(1.0).min(i32::MAX as f64)) as i32;
    let mut writer = TableWriter::create(&dir.join(table), schema, write)?;
    let gen_err = |e: ArrowError| Error::Arrow {
        table: table.to_string(),
        detail: e.to_string(),
    };
    // Each batch is counted as it is written, and a cancel stops before the next one.
    let write = |writer: &mut TableWriter, batch: &RecordBatch| -> Result<()> {
        if options
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(Error::Interrupted {
                table: table.to_string(),
            });
        }
        writer.write(batch)?;
        if let Some(n) = &options.rows_written {
            n.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        }
        Ok(())
    };
    if threads == 1 || parts == 1 {
        for part in 1..=parts {
            for batch in tpch_batches(table, sf, part, parts).expect("known table") {
                write(&mut writer, &batch.map_err(gen_err)?)?;
            }
        }
        return writer.finish();
    }
    // Parts are generated on `threads` threads, at most `window` parts ahead of the writer,
    // and written in order: the table is the same as one part's.
    let window = threads + 1;
    let state = Mutex::new((
        BTreeMap::<i32, std::result::Result<Vec<RecordBatch>, ArrowError>>::new(),
        0i32,
    ));
    let ready = Condvar::new();
    let next = AtomicUsize::new(1);
    let abort = AtomicBool::new(false);
    let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
    let result = std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let part = next.fetch_add(1, Ordering::Relaxed) as i32;
                if part > parts {
                    break;
                }
                {
                    let mut g = lock();
                    while part > g.1 + window as i32 && !abort.load(Ordering::Relaxed) {
                        g = ready.wait(g).unwrap_or_else(|p| p.into_inner());
                    }
                }
                if abort.load(Ordering::Relaxed) {
                    break;
                }
                let batches: std::result::Result<Vec<RecordBatch>, ArrowError> =
                    tpch_batches(table, sf, part, parts)
                        .expect("known table")
                        .collect();
                lock().0.insert(part, batches);
                ready.notify_all();
            });
        }
        let mut run = || -> Result<()> {
            for part in 1..=parts {
                let batches = {
                    let mut g = lock();
                    loop {
                        if let Some(b) = g.0.remove(&part) {
                            break b;
                        }
                        g = ready.wait(g).unwrap_or_else(|p| p.into_inner());
                    }
                };
                for batch in batches.map_err(gen_err)? {
                    write(&mut writer, &batch)?;
                }
                lock().1 = part;
                ready.notify_all();
            }
            Ok(())
        };
        let result = run();
        abort.store(true, Ordering::Relaxed);
        ready.notify_all();
        result
    });
    result?;
    writer.finish()
}
