//! Test helpers: random data of every type and an independent big-integer reference.
#![allow(dead_code)]

use inpath_core::isa::{self, Level};
use inpath_core::Engine;
use inpath_corr::{Corr, CorrConfig, DType, Kernel, Stat, Statistics};
use num_bigint::BigInt;
use num_traits::{One, Signed, ToPrimitive, Zero};
use rand::{Rng, SeedableRng};

pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

pub const INT_TYPES: [DType; 8] = [
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
];

/// The range of an integer type.
pub fn range(dtype: DType) -> (i128, i128) {
    match dtype {
        DType::U8 => (0, u8::MAX as i128),
        DType::U16 => (0, u16::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::U64 => (0, u64::MAX as i128),
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        _ => panic!("not an integer type"),
    }
}

/// Little-endian bytes of an integer value of `dtype`.
pub fn encode(dtype: DType, v: i128, out: &mut Vec<u8>) {
    let w = dtype.width();
    out.extend_from_slice(&v.to_le_bytes()[..w]);
}

/// Random integer rows (row-major values) with a mix of extremes, small values and noise, and
/// some correlated streams.
pub fn random_ints(dtype: DType, m: usize, n: usize, seed: u64) -> Vec<Vec<i128>> {
    let mut r = rng(seed);
    let (lo, hi) = range(dtype);
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        let base: i128 = r.gen_range(lo..=hi);
        let row: Vec<i128> = (0..m)
            .map(|s| match (s + r.gen_range(0..4)) % 6 {
                0 => hi,
                1 => lo,
                2 => base,
                3 => r.gen_range(lo.max(-3)..=hi.min(3)),
                _ => r.gen_range(lo..=hi),
            })
            .collect();
        rows.push(row);
    }
    rows
}

pub fn ints_to_bytes(dtype: DType, rows: &[Vec<i128>]) -> Vec<u8> {
    let mut out = Vec::new();
    for row in rows {
        for v in row {
            encode(dtype, *v, &mut out);
        }
    }
    out
}

pub fn big(stat: Stat) -> BigInt {
    match stat {
        Stat::Int(v) => (BigInt::from(v.hi()) << 128) + BigInt::from(v.lo()),
        Stat::Float(_) => panic!("not an integer statistic"),
    }
}

/// Exact statistics by brute force: (N, sums, products upper triangle with the diagonal).
pub struct Exact {
    pub n: BigInt,
    pub sums: Vec<BigInt>,
    pub products: Vec<Vec<BigInt>>,
}

pub fn exact(rows: &[Vec<i128>], m: usize) -> Exact {
    let mut sums = vec![BigInt::zero(); m];
    let mut products = vec![vec![BigInt::zero(); m]; m];
    for row in rows {
        for i in 0..m {
            let x = BigInt::from(row[i]);
            sums[i] += &x;
            for j in i..m {
                products[i][j] += &x * BigInt::from(row[j]);
            }
        }
    }
    Exact {
        n: BigInt::from(rows.len()),
        sums,
        products,
    }
}

/// Pearson's r from exact integers, to about 100 bits, then rounded: an independent reference.
pub fn exact_pearson(e: &Exact, i: usize, j: usize) -> Option<f64> {
    let c = &e.n * &e.products[i][j] - &e.sums[i] * &e.sums[j];
    let vi = &e.n * &e.products[i][i] - &e.sums[i] * &e.sums[i];
    let vj = &e.n * &e.products[j][j] - &e.sums[j] * &e.sums[j];
    if vi.is_zero() || vj.is_zero() {
        return None;
    }
    let shift = 120u32;
    let denominator = ((vi * vj) << (2 * shift)).sqrt();
    let q: BigInt = (c << (2 * shift)) / denominator;
    // q ~ r * 2^shift with ~100 correct bits.
    Some(q.to_f64().unwrap() / 2f64.powi(shift as i32))
}

/// Asserts the engine's statistics equal the exact ones bit for bit.
pub fn assert_stats_exact(stats: &Statistics, e: &Exact, label: &str) {
    let m = stats.streams();
    assert_eq!(BigInt::from(stats.count()), e.n, "{label}: count");
    for i in 0..m {
        assert_eq!(big(stats.sum(i)), e.sums[i], "{label}: sum of stream {i}");
        for j in i..m {
            assert_eq!(
                big(stats.sum_of_products(i, j)),
                e.products[i][j],
                "{label}: product ({i},{j})"
            );
        }
    }
}

/// |a - b| within `ulps` units of 2^-53 (values in [-1, 1]).
pub fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol || (a.is_nan() && b.is_nan())
}

/// Runs one engine over `bytes` in one update.
pub fn run(config: CorrConfig, bytes: &[u8]) -> Statistics {
    let mut corr = Corr::new(config).expect("config");
    corr.update(bytes).expect("update");
    corr.finish().expect("finish")
}

/// Every kernel level this CPU runs (capped by `INPATH_ISA`), lowest first.
pub fn levels() -> Vec<Level> {
    isa::supported()
}

/// Runs one engine with its kernels capped at `cap` over `bytes` in one update.
pub fn run_at(config: CorrConfig, cap: Level, bytes: &[u8]) -> Statistics {
    let mut corr = Corr::with_isa_cap(config, cap).expect("config");
    corr.update(bytes).expect("update");
    corr.finish().expect("finish")
}

/// Runs one engine capped at `cap` over `bytes` in random chunks (partial rows, duos, quads).
pub fn run_chunked(
    config: CorrConfig,
    cap: Level,
    bytes: &[u8],
    r: &mut impl Rng,
) -> Result<Statistics, inpath_core::Error> {
    let row = match config.layout {
        inpath_corr::Layout::Rows { streams } => streams * config.dtype.width(),
        _ => panic!("rows layouts only"),
    };
    let mut corr = Corr::with_isa_cap(config, cap).expect("config");
    let mut at = 0;
    while at < bytes.len() {
        let size = r.gen_range(1..=3 * row + 5).min(bytes.len() - at);
        corr.update(&bytes[at..at + size]).expect("update");
        at += size;
    }
    corr.finish()
}

/// One engine setup of a comparison: a kernel choice at a capped level, and the kernel it
/// runs.
#[derive(Clone, Copy, Debug)]
pub struct KernelRun {
    pub cap: Level,
    pub kernel: Kernel,
    pub name: &'static str,
}

/// Each distinct kernel that `kernels` run for `m` streams of `dtype` at every level this CPU
/// supports, once (the name identifies the kernels: two choices of the same name run the same
/// code), in the order met, lowest level first; `skip` names kernels to leave out.
pub fn kernel_runs(dtype: DType, m: usize, kernels: &[Kernel], skip: &[&str]) -> Vec<KernelRun> {
    let mut runs: Vec<KernelRun> = Vec::new();
    for cap in levels() {
        for &kernel in kernels {
            let name = kernel.name_at(cap, dtype, m);
            if !skip.contains(&name) && runs.iter().all(|k| k.name != name) {
                runs.push(KernelRun { cap, kernel, name });
            }
        }
    }
    runs
}

pub fn config(dtype: DType, m: usize, kernel: Kernel) -> CorrConfig {
    let mut c = CorrConfig::rows(dtype, m);
    c.kernel = kernel;
    c
}

/// A rational reference for float data: each f64 is m * 2^e exactly; scale everything by 2^1100.
pub fn f64_big(v: f64) -> BigInt {
    if v == 0.0 {
        return BigInt::zero();
    }
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let mant = if exp == 0 {
        bits & ((1 << 52) - 1)
    } else {
        (bits & ((1 << 52) - 1)) | (1 << 52)
    };
    let e = exp.max(1) - 1075 + 1100;
    let mag = BigInt::from(mant) << (e as usize);
    if v < 0.0 {
        -mag
    } else {
        mag
    }
}

pub fn unit() -> BigInt {
    BigInt::one()
}

pub fn abs(b: &BigInt) -> BigInt {
    b.abs()
}
