//! The block kernel: sums of products of a block of rows, tile by tile (a SYRK-like update).
//!
//! A *panel* holds a block of up to R rows as `f64` lanes, row-major (one row after another,
//! each row holding every lane of that row). A *tile* is MR = 4 consecutive A lanes times NZ
//! groups of 8 consecutive B lanes; the kernel returns, for every (A lane, B lane) of the tile,
//! the sum over the block's rows of `a * b`, accumulated in order with fused multiply-adds.
//!
//! The implementations, side by side, produce bit-identical results (same operations in the
//! same order): [`tile_portable`], safe Rust, and the same loop written with AVX2 + FMA and
//! with AVX-512 intrinsics (24 accumulators in registers). [`super`] picks the [`Isa`]; the
//! tests here compare every level this CPU has with the portable kernel on random data.
#![allow(unsafe_code)]
// Kernels index small fixed arrays by lane; iterators would hide the register layout.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use super::common::Isa;

/// A lanes per tile.
pub(crate) const MR: usize = 4;
/// The most 8-lane B groups per tile (MR * MAX_NZ = 24 vector accumulators).
pub(crate) const MAX_NZ: usize = 6;

/// Runs `f` compiled for `isa`: with AVX-512 enabled, the loops `f` inlines (panel decoding,
/// accumulator updates) are vectorised with 512-bit registers and 64-bit integer conversions.
#[inline(always)]
pub(crate) fn dispatch<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    match isa {
        Isa::Portable => f(),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: Isa::Avx2 is only produced by arch::tile_isa after detecting avx2 and
            // fma; `f` itself is safe code.
            unsafe { avx2::with_avx2(f) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: Isa::Avx512 is only produced by arch::tile_isa after detecting the
            // features `with_avx512` enables; `f` itself is safe code.
            unsafe { avx512::with_avx512(f) }
        }
    }
}

/// One tile call: MR A lanes from `p0` against `nz` groups of 8 B lanes at offsets `boff`
/// within a B row; group `z` of A lane `i` accumulates into `mid[base[i] + rel[z]..+8]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileSpec {
    /// First A lane.
    pub p0: usize,
    /// Number of 8-lane B groups (1 to MAX_NZ).
    pub nz: usize,
    /// Offset of each group's first lane within a B row.
    pub boff: [usize; MAX_NZ],
    /// Offset of each group within its A lane's row of the mid accumulators.
    pub rel: [usize; MAX_NZ],
    /// Start of each A lane's row in the mid accumulators.
    pub base: [usize; MR],
    /// Bit `z`: the first 4 lanes of group `z` come before every A lane of the tile (lower
    /// triangle, never read), so the 4-wide kernels may skip them.
    pub skip_lo: u8,
}

/// Where a tile's block sums go.
pub(crate) enum Mid<'a> {
    /// Integer types: the block sums are exact integers below 2^53, added to 64-bit integers.
    Int(&'a mut [i64]),
    /// Float types: added to double-double accumulators with TwoSum.
    Float {
        /// Leading parts.
        hi: &'a mut [f64],
        /// Trailing parts.
        lo: &'a mut [f64],
    },
}

impl Mid<'_> {
    fn len(&self) -> usize {
        match self {
            Mid::Int(v) => v.len(),
            Mid::Float { hi, lo } => hi.len().min(lo.len()),
        }
    }
}

/// Checks the slices cover every element the kernel touches.
fn check(a: &[f64], lda: usize, b: &[f64], ldb: usize, spec: &TileSpec, rows: usize, mid: &Mid) {
    assert!((1..=MAX_NZ).contains(&spec.nz), "tile width");
    let rel = spec.rel[..spec.nz].iter().max().copied().unwrap_or(0);
    let base = spec.base.iter().max().copied().unwrap_or(0);
    assert!(base + rel + 8 <= mid.len(), "mid accumulators too short");
    if rows > 0 {
        assert!(
            a.len() >= (rows - 1) * lda + spec.p0 + MR,
            "A panel too short"
        );
        let reach = spec.boff[..spec.nz].iter().max().copied().unwrap_or(0) + 8;
        assert!(b.len() >= (rows - 1) * ldb + reach, "B panel too short");
    }
}

/// Computes one tile's block sums, `sum over r < rows of a[r * lda + p0 + i] *
/// b[r * ldb + boff[z] + l]` accumulated in row order with fused multiply-adds, and adds them to
/// `mid[base[i] + rel[z] + l]`.
pub(crate) fn tile(
    isa: Isa,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    spec: &TileSpec,
    rows: usize,
    mid: &mut Mid,
) {
    check(a, lda, b, ldb, spec, rows, mid);
    match isa {
        Isa::Portable => tile_portable(a, lda, b, ldb, spec, rows, mid),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: Isa::Avx2 is only produced by arch::tile_isa after detecting avx2 and
            // fma; `check` has verified every index the kernel reads or writes.
            unsafe { avx2::tile(a, lda, b, ldb, spec, rows, mid) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: Isa::Avx512 is only produced by arch::tile_isa after detecting avx512f,
            // avx512dq and fma; `check` has verified every index the kernel reads or writes.
            unsafe { avx512::tile(a, lda, b, ldb, spec, rows, mid) }
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
    mid: &mut Mid,
) {
    match spec.nz {
        1 => portable_n::<1>(a, lda, b, ldb, spec, rows, mid),
        2 => portable_n::<2>(a, lda, b, ldb, spec, rows, mid),
        3 => portable_n::<3>(a, lda, b, ldb, spec, rows, mid),
        4 => portable_n::<4>(a, lda, b, ldb, spec, rows, mid),
        5 => portable_n::<5>(a, lda, b, ldb, spec, rows, mid),
        _ => portable_n::<6>(a, lda, b, ldb, spec, rows, mid),
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
    mid: &mut Mid,
) {
    let mut acc = [[[0f64; 8]; NZ]; MR];
    let int = matches!(mid, Mid::Int(_));
    for r in 0..rows {
        let ar = &a[r * lda + spec.p0..r * lda + spec.p0 + MR];
        let br = &b[r * ldb..];
        for z in 0..NZ {
            let bz = &br[spec.boff[z]..spec.boff[z] + 8];
            for i in 0..MR {
                if int {
                    // Integer types: every product and partial sum is an integer below 2^53,
                    // so a multiply and an add round exactly like a fused multiply-add; they
                    // vectorise on every target, where `mul_add` is a libm call on x86-64
                    // builds without FMA (the portable level there).
                    for l in 0..8 {
                        acc[i][z][l] += ar[i] * bz[l];
                    }
                } else {
                    for l in 0..8 {
                        acc[i][z][l] = ar[i].mul_add(bz[l], acc[i][z][l]);
                    }
                }
            }
        }
    }
    for i in 0..MR {
        for z in 0..NZ {
            let at = spec.base[i] + spec.rel[z];
            match mid {
                Mid::Int(m) => {
                    for (d, v) in m[at..at + 8].iter_mut().zip(&acc[i][z]) {
                        *d += *v as i64;
                    }
                }
                Mid::Float { hi, lo } => {
                    for l in 0..8 {
                        let (s, e) = crate::wide::two_sum(hi[at + l], acc[i][z][l]);
                        hi[at + l] = s;
                        lo[at + l] += e;
                    }
                }
            }
        }
    }
}

/// The AVX2 + FMA tile kernel: the same fused multiply-adds in the same row order as
/// [`tile_portable`], 4-wide. A tile's `2 * nz` vectors of B lanes are taken in chunks of up
/// to two (8 accumulators, 2 B loads and a broadcast; chunks of three, 12 accumulators, made
/// the compiler spill one in the row loop); each accumulator is one (A lane, 4 B lanes) sum,
/// so chunking changes no result.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Mid, TileSpec, MAX_NZ, MR};
    use std::arch::x86_64::*;

    /// Vectors of 4 B lanes per chunk.
    const CHUNK: usize = 2;

    /// Calls `f` in a function compiled with AVX2 and FMA enabled.
    ///
    /// # Safety
    /// The CPU must support avx2 and fma.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// # Safety
    /// The CPU must support avx2 and fma; the slices must cover every index (see `check`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile(
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        spec: &TileSpec,
        rows: usize,
        mid: &mut Mid,
    ) {
        // Vector v of the tile: group v / 2, half v % 2.
        // The tile's vectors of 4 B lanes, less the lower-triangle ones.
        let mut vb = [0usize; 2 * MAX_NZ];
        let mut vr = [0usize; 2 * MAX_NZ];
        let mut vecs = 0;
        for z in 0..spec.nz {
            for h in 0..2 {
                if h == 0 && spec.skip_lo & (1 << z) != 0 {
                    continue;
                }
                vb[vecs] = spec.boff[z] + 4 * h;
                vr[vecs] = spec.rel[z] + 4 * h;
                vecs += 1;
            }
        }
        let mut v = 0;
        while v < vecs {
            let w = (vecs - v).min(CHUNK);
            let mut boff = [0usize; CHUNK];
            let mut rel = [0usize; CHUNK];
            boff[..w].copy_from_slice(&vb[v..v + w]);
            rel[..w].copy_from_slice(&vr[v..v + w]);
            // SAFETY: forwarded from the caller's contract; every B offset is inside a group
            // that `check` verified.
            unsafe {
                match w {
                    1 => chunk::<1>(a, lda, b, ldb, spec, &boff, &rel, rows, mid),
                    _ => chunk::<2>(a, lda, b, ldb, spec, &boff, &rel, rows, mid),
                }
            }
            v += w;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn chunk<const W: usize>(
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        spec: &TileSpec,
        boff: &[usize; CHUNK],
        rel: &[usize; CHUNK],
        rows: usize,
        mid: &mut Mid,
    ) {
        let mut acc = [[_mm256_setzero_pd(); W]; MR];
        let ap = a.as_ptr().wrapping_add(spec.p0);
        let bp = b.as_ptr();
        for r in 0..rows {
            // SAFETY: `check` verified (rows-1)*lda + p0 + MR <= a.len() and
            // (rows-1)*ldb + boff[z] + 8 <= b.len(); boff[k] + 4 <= that group's end.
            unsafe {
                let arow = ap.add(r * lda);
                let brow = bp.add(r * ldb);
                let mut bv = [_mm256_setzero_pd(); W];
                for k in 0..W {
                    bv[k] = _mm256_loadu_pd(brow.add(boff[k]));
                }
                for i in 0..MR {
                    let av = _mm256_broadcast_sd(&*arow.add(i));
                    for k in 0..W {
                        acc[i][k] = _mm256_fmadd_pd(av, bv[k], acc[i][k]);
                    }
                }
            }
        }
        for i in 0..MR {
            for k in 0..W {
                let at = spec.base[i] + rel[k];
                match mid {
                    Mid::Int(m) => {
                        // Block sums are integers below 2^53 (AVX2 has no exact 64-bit
                        // conversion of that range): converted one by one.
                        let mut s = [0f64; 4];
                        // SAFETY: `s` holds four f64.
                        unsafe { _mm256_storeu_pd(s.as_mut_ptr(), acc[i][k]) };
                        for (d, v) in m[at..at + 4].iter_mut().zip(s) {
                            // SAFETY: an integer below 2^53 in magnitude (the block bound of
                            // `Plan::max_rows`), so in range of i64 and not NaN.
                            *d += unsafe { v.to_int_unchecked::<i64>() };
                        }
                    }
                    Mid::Float { hi, lo } => {
                        // TwoSum, as in `wide::two_sum`.
                        // SAFETY: `check` verified base[i] + rel[z] + 8 <= the mid length.
                        unsafe {
                            let hp = hi.as_mut_ptr().add(at);
                            let lp = lo.as_mut_ptr().add(at);
                            let h = _mm256_loadu_pd(hp);
                            let x = acc[i][k];
                            let s = _mm256_add_pd(h, x);
                            let bb = _mm256_sub_pd(s, h);
                            let e = _mm256_add_pd(
                                _mm256_sub_pd(h, _mm256_sub_pd(s, bb)),
                                _mm256_sub_pd(x, bb),
                            );
                            _mm256_storeu_pd(hp, s);
                            _mm256_storeu_pd(lp, _mm256_add_pd(_mm256_loadu_pd(lp), e));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Mid, TileSpec, MR};
    use std::arch::x86_64::*;

    /// Calls `f` in a function compiled with AVX-512 enabled.
    ///
    /// # Safety
    /// The CPU must support avx512f, avx512dq and fma.
    #[target_feature(enable = "avx512f,avx512dq,fma")]
    pub(super) unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// # Safety
    /// The CPU must support avx512f, avx512dq and fma; the slices must cover every index (see
    /// `check`).
    #[target_feature(enable = "avx512f,avx512dq,fma")]
    pub(super) unsafe fn tile(
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        spec: &TileSpec,
        rows: usize,
        mid: &mut Mid,
    ) {
        // SAFETY (all calls below): forwarded from the caller's contract.
        unsafe {
            match spec.nz {
                1 => tile_n::<1>(a, lda, b, ldb, spec, rows, mid),
                2 => tile_n::<2>(a, lda, b, ldb, spec, rows, mid),
                3 => tile_n::<3>(a, lda, b, ldb, spec, rows, mid),
                4 => tile_n::<4>(a, lda, b, ldb, spec, rows, mid),
                5 => tile_n::<5>(a, lda, b, ldb, spec, rows, mid),
                _ => tile_n::<6>(a, lda, b, ldb, spec, rows, mid),
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
        mid: &mut Mid,
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
                let at = spec.base[i] + spec.rel[z];
                // SAFETY: `check` verified base[i] + rel[z] + 8 <= the mid length.
                unsafe {
                    match mid {
                        Mid::Int(m) => {
                            // Block sums are integers below 2^53: the truncating conversion
                            // is exact.
                            let p = m.as_mut_ptr().add(at) as *mut __m512i;
                            let sum = _mm512_add_epi64(
                                _mm512_loadu_si512(p),
                                _mm512_cvttpd_epi64(acc[i][z]),
                            );
                            _mm512_storeu_si512(p, sum);
                        }
                        Mid::Float { hi, lo } => {
                            // TwoSum, as in `wide::two_sum`.
                            let hp = hi.as_mut_ptr().add(at);
                            let lp = lo.as_mut_ptr().add(at);
                            let h = _mm512_loadu_pd(hp);
                            let x = acc[i][z];
                            let s = _mm512_add_pd(h, x);
                            let bb = _mm512_sub_pd(s, h);
                            let e = _mm512_add_pd(
                                _mm512_sub_pd(h, _mm512_sub_pd(s, bb)),
                                _mm512_sub_pd(x, bb),
                            );
                            _mm512_storeu_pd(hp, s);
                            _mm512_storeu_pd(lp, _mm512_add_pd(_mm512_loadu_pd(lp), e));
                        }
                    }
                }
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
        // Every level this CPU runs, whatever INPATH_ISA says.
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut isas = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") {
                isas.push(Isa::Avx2);
            }
            if has!("avx512f") && has!("avx512dq") && has!("fma") {
                isas.push(Isa::Avx512);
            }
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for float in [false, true] {
            for nz in 1..=MAX_NZ {
                let rows = rng.gen_range(1..70);
                let lda = 16;
                let ldb = 8 * nz + 24;
                let (a, b): (Vec<f64>, Vec<f64>) = if float {
                    (
                        (0..rows * lda).map(|_| rng.gen_range(-1e3..1e3)).collect(),
                        (0..rows * ldb)
                            .map(|_| rng.gen::<f64>() * 1e5 - 3.0)
                            .collect(),
                    )
                } else {
                    (
                        (0..rows * lda)
                            .map(|_| rng.gen_range(-65535..65535) as f64)
                            .collect(),
                        (0..rows * ldb)
                            .map(|_| rng.gen_range(-65535..65535) as f64)
                            .collect(),
                    )
                };
                let mut spec = TileSpec {
                    p0: 8,
                    nz,
                    boff: [0; MAX_NZ],
                    rel: [0; MAX_NZ],
                    base: [0, 100, 50, 150],
                    skip_lo: 0,
                };
                for z in 0..nz {
                    spec.boff[z] = ((z * 5 + 3) % (nz + 3)) * 8;
                    spec.rel[z] = 8 * z;
                }
                let len = 250;
                let start_hi: Vec<f64> = (0..len).map(|k| k as f64 * 0.5).collect();
                let start_int: Vec<i64> = (0..len as i64).map(|k| k * 3 - 7).collect();
                let run = |isa: Option<Isa>| {
                    let (mut hi, mut lo, mut int) =
                        (start_hi.clone(), vec![0.0; len], start_int.clone());
                    let mut mid = if float {
                        Mid::Float {
                            hi: &mut hi,
                            lo: &mut lo,
                        }
                    } else {
                        Mid::Int(&mut int)
                    };
                    match isa {
                        None => tile_portable(&a, lda, &b, ldb, &spec, rows, &mut mid),
                        Some(isa) => tile(isa, &a, lda, &b, ldb, &spec, rows, &mut mid),
                    }
                    (hi, lo, int)
                };
                let portable = run(None);
                for &isa in &isas {
                    assert_eq!(run(Some(isa)), portable, "{isa:?} float {float} nz {nz}");
                }
                // And against a plain loop.
                for i in 0..MR {
                    for z in 0..nz {
                        for l in 0..8 {
                            let mut s = 0.0f64;
                            for r in 0..rows {
                                s = a[r * lda + 8 + i].mul_add(b[r * ldb + spec.boff[z] + l], s);
                            }
                            let at = spec.base[i] + spec.rel[z] + l;
                            if float {
                                assert_eq!(portable.0[at] + portable.1[at], start_hi[at] + s);
                            } else {
                                assert_eq!(portable.2[at], start_int[at] + s as i64);
                            }
                        }
                    }
                }
            }
        }
    }
}
