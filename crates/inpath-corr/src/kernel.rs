//! The block kernel: sums of products of a block of rows, tile by tile (a SYRK-like update).
//!
//! A *panel* holds a block of up to R rows as `f64` lanes, row-major (one row after another,
//! each row holding every lane of that row). A *tile* is MR = 4 consecutive A lanes times NZ
//! groups of 8 consecutive B lanes; the kernel returns, for every (A lane, B lane) of the tile,
//! the sum over the block's rows of `a * b`, accumulated in order with fused multiply-adds.
//!
//! Two implementations produce bit-identical results (same operations in the same order):
//! [`tile_portable`], safe Rust, and `tile_avx512`, the same loop written with AVX-512
//! intrinsics (24 accumulators in registers). Tests compare them on random data.
#![allow(unsafe_code)]
// Kernels index small fixed arrays by lane; iterators would hide the register layout.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

/// A lanes per tile.
pub(crate) const MR: usize = 4;
/// The most 8-lane B groups per tile (MR * MAX_NZ = 24 vector accumulators).
pub(crate) const MAX_NZ: usize = 6;

/// Which implementation of the kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kernel {
    /// The fastest the CPU supports (AVX-512 where available, else the portable kernels).
    #[default]
    Auto,
    /// The safe portable kernels only (for tests and comparison).
    Portable,
}

/// A kernel choice resolved against the running CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Kernel {
    pub(crate) fn resolve(self) -> Isa {
        #[cfg(target_arch = "x86_64")]
        if self == Kernel::Auto
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Isa::Avx512;
        }
        Isa::Portable
    }
}

/// One tile call: `nz` groups of 8 B lanes at offsets `boff` within a B row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileSpec {
    /// First A lane.
    pub p0: usize,
    /// Number of 8-lane B groups (1 to MAX_NZ).
    pub nz: usize,
    /// Offset of each group's first lane within a B row.
    pub boff: [usize; MAX_NZ],
}

/// Checks the slices cover every element the kernel touches.
fn check(a: &[f64], lda: usize, b: &[f64], ldb: usize, spec: &TileSpec, rows: usize, out: &[f64]) {
    assert!((1..=MAX_NZ).contains(&spec.nz), "tile width");
    assert!(out.len() >= MR * spec.nz * 8, "tile output");
    if rows > 0 {
        assert!(
            a.len() >= (rows - 1) * lda + spec.p0 + MR,
            "A panel too short"
        );
        let reach = spec.boff[..spec.nz].iter().max().copied().unwrap_or(0) + 8;
        assert!(b.len() >= (rows - 1) * ldb + reach, "B panel too short");
    }
}

/// Computes one tile: `out[(i * nz + z) * 8 + l] = sum over r < rows of
/// a[r * lda + p0 + i] * b[r * ldb + boff[z] + l]`, accumulated in row order with `mul_add`.
pub(crate) fn tile(
    isa: Isa,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    spec: &TileSpec,
    rows: usize,
    out: &mut [f64],
) {
    check(a, lda, b, ldb, spec, rows, out);
    match isa {
        Isa::Portable => tile_portable(a, lda, b, ldb, spec, rows, out),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: Isa::Avx512 is only produced by Kernel::resolve after detecting avx512f,
            // avx512dq and fma; `check` has verified every index the kernel reads or writes.
            unsafe { avx512::tile(a, lda, b, ldb, spec, rows, out) }
        }
    }
}

/// The safe portable kernel (the scalar twin of the AVX-512 one).
pub(crate) fn tile_portable(
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    spec: &TileSpec,
    rows: usize,
    out: &mut [f64],
) {
    match spec.nz {
        1 => portable_n::<1>(a, lda, b, ldb, spec, rows, out),
        2 => portable_n::<2>(a, lda, b, ldb, spec, rows, out),
        3 => portable_n::<3>(a, lda, b, ldb, spec, rows, out),
        4 => portable_n::<4>(a, lda, b, ldb, spec, rows, out),
        5 => portable_n::<5>(a, lda, b, ldb, spec, rows, out),
        _ => portable_n::<6>(a, lda, b, ldb, spec, rows, out),
    }
}

#[inline(always)]
fn portable_n<const NZ: usize>(
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    spec: &TileSpec,
    rows: usize,
    out: &mut [f64],
) {
    let mut acc = [[[0f64; 8]; NZ]; MR];
    for r in 0..rows {
        let ar = &a[r * lda + spec.p0..r * lda + spec.p0 + MR];
        let br = &b[r * ldb..];
        for z in 0..NZ {
            let bz = &br[spec.boff[z]..spec.boff[z] + 8];
            for i in 0..MR {
                for l in 0..8 {
                    acc[i][z][l] = ar[i].mul_add(bz[l], acc[i][z][l]);
                }
            }
        }
    }
    for i in 0..MR {
        for z in 0..NZ {
            out[(i * NZ + z) * 8..(i * NZ + z) * 8 + 8].copy_from_slice(&acc[i][z]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{TileSpec, MR};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support avx512f; the slices must cover every index (see `check`).
    #[target_feature(enable = "avx512f,avx512dq,fma")]
    pub(super) unsafe fn tile(
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        spec: &TileSpec,
        rows: usize,
        out: &mut [f64],
    ) {
        // SAFETY (all calls below): forwarded from the caller's contract.
        unsafe {
            match spec.nz {
                1 => tile_n::<1>(a, lda, b, ldb, spec, rows, out),
                2 => tile_n::<2>(a, lda, b, ldb, spec, rows, out),
                3 => tile_n::<3>(a, lda, b, ldb, spec, rows, out),
                4 => tile_n::<4>(a, lda, b, ldb, spec, rows, out),
                5 => tile_n::<5>(a, lda, b, ldb, spec, rows, out),
                _ => tile_n::<6>(a, lda, b, ldb, spec, rows, out),
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512dq,fma")]
    #[inline]
    unsafe fn tile_n<const NZ: usize>(
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        spec: &TileSpec,
        rows: usize,
        out: &mut [f64],
    ) {
        let mut acc = [[_mm512_setzero_pd(); NZ]; MR];
        let ap = a.as_ptr().wrapping_add(spec.p0);
        let bp = b.as_ptr();
        for r in 0..rows {
            // SAFETY: `check` verified (rows-1)*lda + p0 + MR <= a.len() and
            // (rows-1)*ldb + boff[z] + 8 <= b.len() for every z < NZ.
            unsafe {
                let arow = ap.add(r * lda);
                let brow = bp.add(r * ldb);
                let mut bv = [_mm512_setzero_pd(); NZ];
                for z in 0..NZ {
                    bv[z] = _mm512_loadu_pd(brow.add(spec.boff[z]));
                }
                for i in 0..MR {
                    let av = _mm512_set1_pd(*arow.add(i));
                    for z in 0..NZ {
                        acc[i][z] = _mm512_fmadd_pd(av, bv[z], acc[i][z]);
                    }
                }
            }
        }
        for i in 0..MR {
            for z in 0..NZ {
                // SAFETY: `check` verified out.len() >= MR * NZ * 8.
                unsafe { _mm512_storeu_pd(out.as_mut_ptr().add((i * NZ + z) * 8), acc[i][z]) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn simd_and_portable_kernels_agree_bit_for_bit() {
        let isa = Kernel::Auto.resolve();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for nz in 1..=MAX_NZ {
            let rows = rng.gen_range(1..70);
            let lda = 16;
            let ldb = 8 * nz + 24;
            let a: Vec<f64> = (0..rows * lda).map(|_| rng.gen_range(-1e3..1e3)).collect();
            let b: Vec<f64> = (0..rows * ldb)
                .map(|_| rng.gen::<f64>() * 1e5 - 3.0)
                .collect();
            let mut boff = [0; MAX_NZ];
            for (z, o) in boff.iter_mut().enumerate().take(nz) {
                *o = ((z * 5 + 3) % (nz + 3)) * 8;
            }
            let spec = TileSpec { p0: 8, nz, boff };
            let mut x = vec![0.0; MR * nz * 8];
            let mut y = vec![1.0; MR * nz * 8];
            tile(isa, &a, lda, &b, ldb, &spec, rows, &mut x);
            tile_portable(&a, lda, &b, ldb, &spec, rows, &mut y);
            assert_eq!(x, y);
            // And against a plain loop.
            for i in 0..MR {
                for z in 0..nz {
                    for l in 0..8 {
                        let mut s = 0.0f64;
                        for r in 0..rows {
                            s = a[r * lda + 8 + i].mul_add(b[r * ldb + boff[z] + l], s);
                        }
                        assert_eq!(s, y[(i * nz + z) * 8 + l]);
                    }
                }
            }
        }
    }
}
