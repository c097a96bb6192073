//! `run_column_lanes`, the one lane driver for column-major input: any lane count gives the
//! statistics of one engine fed every row (bit for bit with integer types), and a lane's error
//! comes back as the run's.

use inpath_core::Engine;
use inpath_corr::{run_column_lanes, Corr, CorrConfig, DType, Statistics};
use rand::{Rng, SeedableRng};

/// `streams` columns of `rows` random u32 (each column's bytes contiguous), seeded.
fn columns(streams: usize, rows: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..streams)
        .map(|_| {
            (0..rows)
                .flat_map(|_| rng.gen_range(0u32..1 << 20).to_le_bytes())
                .collect()
        })
        .collect()
}

fn at_once(cols: &[Vec<u8>]) -> Statistics {
    let mut engine = Corr::new(CorrConfig::rows(DType::U32, cols.len())).unwrap();
    let refs: Vec<&[u8]> = cols.iter().map(Vec::as_slice).collect();
    engine.update_columns(&refs).unwrap();
    engine.finish().unwrap()
}

fn in_lanes(cols: &[Vec<u8>], threads: usize) -> Statistics {
    let rows = (cols[0].len() / 4) as u64;
    let mut engine = Corr::new(CorrConfig::rows(DType::U32, cols.len())).unwrap();
    run_column_lanes(&mut engine, rows, threads, |lane, range| {
        let (lo, hi) = (range.start as usize * 4, range.end as usize * 4);
        let slices: Vec<&[u8]> = cols.iter().map(|c| &c[lo..hi]).collect();
        lane.update_columns(&slices)
    })
    .unwrap();
    engine.finish().unwrap()
}

#[test]
fn any_lane_count_gives_the_statistics_of_one_engine() {
    for (rows, seed) in [
        (0usize, 1u64),
        (1, 2),
        (2, 3),
        (7, 4),
        (1000, 5),
        (10_007, 6),
    ] {
        let cols = columns(5, rows, seed);
        let want = at_once(&cols);
        for threads in [1, 2, 3, 4, 8, 300] {
            assert_eq!(
                in_lanes(&cols, threads),
                want,
                "{rows} rows on {threads} lanes"
            );
        }
    }
}

#[test]
fn a_lane_error_is_the_run_error() {
    let cols = columns(3, 100, 7);
    let mut engine = Corr::new(CorrConfig::rows(DType::U32, 3)).unwrap();
    let err = run_column_lanes(&mut engine, 100, 4, |lane, range| {
        // The lane that holds row 60 hands over one column short: the engine refuses it.
        let (lo, hi) = (range.start as usize * 4, range.end as usize * 4);
        let n = if range.contains(&60) { 2 } else { 3 };
        let slices: Vec<&[u8]> = cols[..n].iter().map(|c| &c[lo..hi]).collect();
        lane.update_columns(&slices)
    })
    .unwrap_err();
    assert!(err.to_string().contains("stream"), "{err}");
}
