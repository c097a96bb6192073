//! Sums: the bound of a column's values, wrapping sums and sums by group.

#![allow(unsafe_code)]

use super::common::*;
use inpath_core::isa::Level;
use inpath_core::kernel;

kernel! {
    /// The largest absolute value (as u64, so `i64::MIN` fits), 0 for no values: with the
    /// count, it bounds every partial sum of the values.
    max_abs(values: &[i64]) -> u64 {
        // Signed max and min vectorise on every level (unsigned 64-bit max needs AVX-512).
        let (mut hi, mut lo) = (0i64, 0i64);
        for &v in values {
            hi = hi.max(v);
            lo = lo.min(v);
        }
        hi.unsigned_abs().max(lo.unsigned_abs())
    }
}

kernel! {
    /// The wrapping sum (exact when [`max_abs`] times the count stays within i64).
    sum(values: &[i64]) -> i64 {
        values.iter().fold(0i64, |s, &v| s.wrapping_add(v))
    }
}

kernel! {
    /// `out[g] += sum of values[i] where ids[i] == g`, wrapping, for a few groups (a pass per
    /// group of compare-and-add, vectorised; no scatter). Ids at or beyond `out.len()` add
    /// nothing.
    group_sums(ids: &[u32], values: &[i64], out: &mut [i64]) {
        match out.len() {
            0 => {}
            1..=4 => super::group_sums_one_pass::<4>(ids, values, out),
            5..=8 => super::group_sums_one_pass::<8>(ids, values, out),
            _ => {
                for (g, o) in out.iter_mut().enumerate() {
                    let g = g as u32;
                    let s = ids
                        .iter()
                        .zip(values)
                        .fold(0i64, |s, (&id, &v)| s.wrapping_add(if id == g { v } else { 0 }));
                    *o = o.wrapping_add(s);
                }
            }
        }
    }
}

/// [`group_sums`] for at most `G` groups in one pass: each chunk of 8 rows is loaded once and
/// added, under each group's compare mask, into that group's 8 lanes (a pass per group read
/// the block's values from L2 once per group, a large share of Q1's time).
#[inline(always)]
fn group_sums_one_pass<const G: usize>(ids: &[u32], values: &[i64], out: &mut [i64]) {
    let mut acc = [[0i64; 8]; G];
    let tail = ids.len().min(values.len()) / 8 * 8;
    let mut i = 0;
    while i < tail {
        let ic: [u32; 8] = ids[i..i + 8].try_into().expect("8 ids");
        let vc: [i64; 8] = values[i..i + 8].try_into().expect("8 values");
        for (g, lanes) in acc.iter_mut().enumerate() {
            let g = g as u32;
            *lanes =
                std::array::from_fn(|l| lanes[l].wrapping_add(if ic[l] == g { vc[l] } else { 0 }));
        }
        i += 8;
    }
    for (&id, &v) in ids[tail..].iter().zip(&values[tail..]) {
        if let Some(lanes) = acc.get_mut(id as usize) {
            lanes[0] = lanes[0].wrapping_add(v);
        }
    }
    // Groups at or beyond out.len() (ids of rows left out) are dropped here.
    for (o, lanes) in out.iter_mut().zip(&acc) {
        *o = lanes.iter().fold(*o, |s, &x| s.wrapping_add(x));
    }
}

/// Groups [`group_sums_many`] sums in one pass over the ids.
pub(crate) const MANY_GROUPS: usize = 8;

/// `out[r][g] += sum of values[r][i] where ids[i] == g` for every register `r`, for at most
/// [`MANY_GROUPS`] groups (ids at or beyond `out[r].len()` add nothing), at `level`. At
/// AVX-512 the ids are compared once per 8 rows into mask registers and every register is
/// added under them (as many registers a pass as keep 24 accumulators in vector registers):
/// Q1 sums five registers over six group slots, and a pass per register compared the ids
/// five times (`group_sums` was a large share of Q1). At AVX2 (16 vector registers, too few to keep
/// the masks of six groups and the sums of two registers) the masks of a run of rows are
/// compared once into the L1 cache and each register's pass adds under them ([`many_v3`]; a
/// [`group_sums`] pass per register was a quarter of Q1 in a profile), which also counts the ids
/// into `counts` ([`group_counts`] elsewhere). Below AVX2, a [`group_sums`] pass per
/// register.
pub(crate) fn group_sums_many_at(
    level: Level,
    ids: &[u32],
    values: &[&[i64]],
    out: &mut [Vec<i64>],
    counts: Option<&mut [i64]>,
) {
    assert_eq!(values.len(), out.len(), "a sum per register");
    #[cfg(target_arch = "x86_64")]
    {
        let groups = out.iter().map(Vec::len).max().unwrap_or(0);
        let fits = groups <= MANY_GROUPS && values.iter().all(|v| v.len() >= ids.len());
        if level.min(inpath_core::isa::detected()) >= Level::Avx512 && fits {
            // Registers a pass, by the groups' vectors: 24 accumulators at most.
            let per = match groups {
                0..=4 => 6,
                5..=6 => 4,
                _ => 3,
            };
            for (v, o) in values.chunks(per).zip(out.chunks_mut(per)) {
                let mut acc = [[0i64; MANY_GROUPS]; 6];
                // SAFETY: `detected()` found AVX-512 F and VL; each value slice holds at least
                // `ids.len()` values (checked above).
                unsafe {
                    match (groups, v.len()) {
                        (0..=4, 1) => many_v4::<1, 4>(ids, v, &mut acc),
                        (0..=4, 2) => many_v4::<2, 4>(ids, v, &mut acc),
                        (0..=4, 3) => many_v4::<3, 4>(ids, v, &mut acc),
                        (0..=4, 4) => many_v4::<4, 4>(ids, v, &mut acc),
                        (0..=4, 5) => many_v4::<5, 4>(ids, v, &mut acc),
                        (0..=4, _) => many_v4::<6, 4>(ids, v, &mut acc),
                        (5..=6, 1) => many_v4::<1, 6>(ids, v, &mut acc),
                        (5..=6, 2) => many_v4::<2, 6>(ids, v, &mut acc),
                        (5..=6, 3) => many_v4::<3, 6>(ids, v, &mut acc),
                        (5..=6, _) => many_v4::<4, 6>(ids, v, &mut acc),
                        (_, 1) => many_v4::<1, 8>(ids, v, &mut acc),
                        (_, 2) => many_v4::<2, 8>(ids, v, &mut acc),
                        (_, _) => many_v4::<3, 8>(ids, v, &mut acc),
                    }
                }
                for (o, a) in o.iter_mut().zip(&acc) {
                    for (x, y) in o.iter_mut().zip(a) {
                        *x = x.wrapping_add(*y);
                    }
                }
            }
            if let Some(c) = counts {
                group_counts::at(level, ids, c);
            }
            return;
        }
        let counted = counts.as_ref().is_none_or(|c| c.len() <= MANY_GROUPS);
        if level.min(inpath_core::isa::detected()) >= Level::Avx2 && fits && counted {
            // SAFETY: `detected()` found AVX2; each value slice holds at least `ids.len()`
            // values (checked above).
            unsafe {
                match groups.max(counts.as_ref().map_or(0, |c| c.len())) {
                    0..=2 => many_v3::<2>(ids, values, out, counts),
                    3..=4 => many_v3::<4>(ids, values, out, counts),
                    5..=6 => many_v3::<6>(ids, values, out, counts),
                    _ => many_v3::<8>(ids, values, out, counts),
                }
            }
            return;
        }
    }
    if let Some(c) = counts {
        group_counts::at(level, ids, c);
    }
    for (v, o) in values.iter().zip(out.iter_mut()) {
        group_sums::at(level, ids, v, o);
    }
}

/// The AVX2 pass of [`group_sums_many_at`] over `G` groups (at most [`MANY_GROUPS`]): for each
/// run of 256 rows, the ids' compare masks of every group are written once (16 KiB at
/// most, in the L1 cache), and counted where `counts` is given (the masks are all ones
/// where an id matches: subtracted, they count); then each register's values are added under
/// them into `G` accumulators held in vector registers. Adds `out[r][g]` for `g <
/// out[r].len()` and `counts[g]` for `g < counts.len()`.
///
/// # Safety
/// The CPU has AVX2; `values[r]` holds at least `ids.len()` values for every register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn many_v3<const G: usize>(
    ids: &[u32],
    values: &[&[i64]],
    out: &mut [Vec<i64>],
    counts: Option<&mut [i64]>,
) {
    use std::arch::x86_64::*;
    const MASK_RUN: usize = 256;
    let n = ids.len();
    let whole = n / 4 * 4;
    let group: [__m256i; G] = std::array::from_fn(|g| _mm256_set1_epi64x(g as i64));
    let mut masks = [[_mm256_setzero_si256(); G]; MASK_RUN / 4];
    let mut sums = vec![[_mm256_setzero_si256(); G]; values.len()];
    let mut negative_counts = [_mm256_setzero_si256(); G];
    let mut start = 0;
    while start < whole {
        let steps = (whole - start).min(MASK_RUN) / 4;
        for (s, m) in masks[..steps].iter_mut().enumerate() {
            // SAFETY: rows start + 4s .. start + 4s + 4 lie below `whole` <= n.
            let four = unsafe { _mm_loadu_si128(ids.as_ptr().add(start + 4 * s).cast()) };
            let id = _mm256_cvtepu32_epi64(four);
            *m = std::array::from_fn(|g| _mm256_cmpeq_epi64(id, group[g]));
            if counts.is_some() {
                for g in 0..G {
                    negative_counts[g] = _mm256_add_epi64(negative_counts[g], m[g]);
                }
            }
        }
        for (v, sum) in values.iter().zip(sums.iter_mut()) {
            let mut acc = *sum;
            let at = v.as_ptr();
            for (s, m) in masks[..steps].iter().enumerate() {
                // SAFETY: as above; `v` holds at least n values.
                let x = unsafe { _mm256_loadu_si256(at.add(start + 4 * s).cast()) };
                for g in 0..G {
                    acc[g] = _mm256_add_epi64(acc[g], _mm256_and_si256(x, m[g]));
                }
            }
            *sum = acc;
        }
        start += steps * 4;
    }
    // Each group's 4 lanes, added.
    let total = |sum: &[__m256i; G], g: usize| {
        let mut lanes = [0i64; 4];
        // SAFETY: a 32-byte store into a 4 x i64 array.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sum[g]) };
        lanes.iter().fold(0i64, |a, &x| a.wrapping_add(x))
    };
    for ((v, sum), o) in values.iter().zip(&sums).zip(out.iter_mut()) {
        for (g, o) in o.iter_mut().enumerate().take(G) {
            *o = o.wrapping_add(total(sum, g));
        }
        for (&id, &x) in ids[whole..].iter().zip(&v[whole..]) {
            if let Some(o) = o.get_mut(id as usize) {
                *o = o.wrapping_add(x);
            }
        }
    }
    if let Some(counts) = counts {
        for (g, c) in counts.iter_mut().enumerate().take(G) {
            *c -= total(&negative_counts, g);
        }
        for &id in &ids[whole..] {
            if let Some(c) = counts.get_mut(id as usize) {
                *c += 1;
            }
        }
    }
}

/// [`group_sums_many_at`] at the level [`level`] picked.
pub(crate) fn group_sums_many(
    ids: &[u32],
    values: &[&[i64]],
    out: &mut [Vec<i64>],
    counts: Option<&mut [i64]>,
) {
    group_sums_many_at(level(), ids, values, out, counts)
}

/// The AVX-512 pass of [`group_sums_many_at`] over `R` registers and `G` groups:
/// `acc[r][g]` gets the wrapping sums of group `g` (ids at or beyond `G` add nothing).
///
/// # Safety
/// The CPU has AVX-512 F and VL; `values[r]` holds at least `ids.len()` values for r < R.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
unsafe fn many_v4<const R: usize, const G: usize>(
    ids: &[u32],
    values: &[&[i64]],
    acc: &mut [[i64; MANY_GROUPS]; 6],
) {
    use std::arch::x86_64::*;
    let n = ids.len();
    let ptrs: [*const i64; R] = std::array::from_fn(|r| values[r].as_ptr());
    let mut sums = [[_mm512_setzero_si512(); G]; R];
    let group: [__m256i; G] = std::array::from_fn(|g| _mm256_set1_epi32(g as i32));
    let chunks = n / 8;
    for c in 0..chunks {
        // SAFETY: rows c*8 .. c*8+8 are within the ids and every register's values.
        let id = unsafe { _mm256_loadu_si256(ids.as_ptr().add(c * 8).cast()) };
        let masks: [__mmask8; G] = std::array::from_fn(|g| _mm256_cmpeq_epi32_mask(id, group[g]));
        for r in 0..R {
            let v = unsafe { _mm512_loadu_si512(ptrs[r].add(c * 8).cast()) };
            for g in 0..G {
                sums[r][g] = _mm512_mask_add_epi64(sums[r][g], masks[g], sums[r][g], v);
            }
        }
    }
    for r in 0..R {
        for g in 0..G {
            acc[r][g] = _mm512_reduce_add_epi64(sums[r][g]);
        }
        for (i, &id) in ids.iter().enumerate().skip(chunks * 8) {
            if let Some(a) = acc[r][..G].get_mut(id as usize) {
                *a = a.wrapping_add(values[r][i]);
            }
        }
    }
}

kernel! {
    /// `out[g] += number of ids equal to g`, for a few groups.
    group_counts(ids: &[u32], out: &mut [i64]) {
        for (g, o) in out.iter_mut().enumerate() {
            let g = g as u32;
            *o += ids.iter().fold(0i64, |s, &id| s + (id == g) as i64);
        }
    }
}
