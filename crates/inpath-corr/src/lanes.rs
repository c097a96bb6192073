//! The lane driver for column-major input: one place that splits rows across lanes, so the
//! CLI's file reader and the Python binding's array path run the same code.

use crate::engine::Corr;
use inpath_core::Lane;
use std::ops::Range;

/// Runs `engine` over `rows` rows of column-major input (each stream's items contiguous) on up
/// to `threads` lanes. The rows split into contiguous ranges, one per lane; each lane is forked
/// from `engine`, fed its range by `feed` (which hands the lane that range's slice of every
/// column through [`Corr::update_columns`]) and closed; the lanes merge into `engine` in row
/// order. Any lane count gives the same statistics (exactly for integer types).
///
/// With one lane (or fewer than two rows) `feed` runs on `engine` itself, over all rows, and
/// `engine`'s input is closed. The first error of any lane is returned; `feed` must not panic
/// (a panic in a lane is resumed here).
///
/// ```
/// use inpath_corr::{run_column_lanes, Corr, CorrConfig, DType};
/// use inpath_core::Engine;
/// // Two streams of four u32 each, column-major: [0, 1, 2, 3] and [0, 2, 4, 6].
/// let a: Vec<u8> = [0u32, 1, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let b: Vec<u8> = [0u32, 2, 4, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let mut engine = Corr::new(CorrConfig::rows(DType::U32, 2)).unwrap();
/// run_column_lanes(&mut engine, 4, 3, |lane, rows| {
///     let (lo, hi) = (rows.start as usize * 4, rows.end as usize * 4);
///     lane.update_columns(&[&a[lo..hi], &b[lo..hi]])
/// })
/// .unwrap();
/// let stats = engine.finish().unwrap();
/// assert_eq!(stats.count(), 4);
/// ```
pub fn run_column_lanes<E, F>(
    engine: &mut Corr,
    rows: u64,
    threads: usize,
    feed: F,
) -> Result<(), E>
where
    F: Fn(&mut Corr, Range<u64>) -> Result<(), E> + Sync,
    E: From<inpath_core::Error> + Send,
{
    let threads = threads.clamp(1, inpath_core::lanes::MAX_THREADS) as u64;
    if threads == 1 || rows < 2 {
        feed(engine, 0..rows)?;
        engine.close_input()?;
        return Ok(());
    }
    let lanes: Vec<Result<Corr, E>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let range = rows * t / threads..rows * (t + 1) / threads;
                let mut lane = engine.fork();
                let feed = &feed;
                scope.spawn(move || -> Result<Corr, E> {
                    feed(&mut lane, range)?;
                    lane.close_input()?;
                    Ok(lane)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for lane in lanes {
        engine.merge(&lane?)?;
    }
    Ok(())
}
