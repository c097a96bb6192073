//! The one place the query engine picks its kernels for the running CPU: the offload device's
//! block loops (selector comparisons, transformer arithmetic, group sums).
//!
//! Each kernel is written once in plain Rust that compilers vectorise, and compiled three
//! times: for the baseline target (`portable`), for x86-64-v3 (`avx2`: AVX2, FMA, BMI) and for
//! x86-64-v4 (`avx512`: AVX-512 F/BW/CD/DQ/VL). The level is `inpath_core::isa::effective()`
//! (the CPU's level capped by `INPATH_ISA`), read once; `at` runs a kernel at a given level,
//! so tests compare every level the machine has against the portable one.
//!
//! The crate is built for the baseline x86-64 target, where the same loops get SSE2 at most;
//! compiled for the running CPU they use 256- or 512-bit vectors (and AVX-512's 64-bit
//! multiplies and mask compares).

#![allow(unsafe_code)]

use inpath_core::isa::{self, Level};

/// The level the kernels run at.
pub(crate) fn level() -> Level {
    isa::effective()
}

/// Defines a kernel module `$name` with `run(args)` (at [`level`]) and `at(level, args)`.
macro_rules! kernel {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        pub(crate) mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[inline(always)]
            fn imp($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
            unsafe fn v3($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(
                enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt"
            )]
            unsafe fn v4($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }

            /// Runs the kernel at `level`, or the highest level below it the CPU has.
            #[allow(dead_code)]
            pub(crate) fn at(level: Level, $($arg: $ty),*) $(-> $ret)? {
                let level = level.min(inpath_core::isa::detected());
                #[cfg(target_arch = "x86_64")]
                {
                    if level >= Level::Avx512 {
                        // SAFETY: `detected()` found every feature `v4` enables.
                        return unsafe { v4($($arg),*) };
                    }
                    if level >= Level::Avx2 {
                        // SAFETY: `detected()` found every feature `v3` enables.
                        return unsafe { v3($($arg),*) };
                    }
                }
                let _ = level;
                imp($($arg),*)
            }

            /// Runs the kernel at the level [`level`](super::level) picked.
            #[allow(dead_code)]
            pub(crate) fn run($($arg: $ty),*) $(-> $ret)? {
                at(super::level(), $($arg),*)
            }
        }
    };
}

/// A vector of `n` values that `write` puts into its memory, never zeroed first. `write` gets
/// exactly `n` slots and must write every one: each kernel zips them with inputs of at least
/// `n` values (a zeroed vector cost 3 % of Q1 in memset).
#[inline(always)]
fn written<T>(n: usize, write: impl FnOnce(&mut [std::mem::MaybeUninit<T>])) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    write(&mut out.spare_capacity_mut()[..n]);
    // SAFETY: `write` initialised all `n` slots (every caller writes one value per slot of a
    // zip whose shortest side has `n` items).
    unsafe { out.set_len(n) };
    out
}

/// Comparison operators of the kernels (the selector's, as numbers so one kernel takes any).
pub(crate) const EQ: u8 = 0;
pub(crate) const NE: u8 = 1;
pub(crate) const LT: u8 = 2;
pub(crate) const LE: u8 = 3;
pub(crate) const GT: u8 = 4;
pub(crate) const GE: u8 = 5;

/// Mask words of `values[i] op c`: bit i of word i/64 is row i (the last word's bits beyond
/// the rows are zero).
#[inline(always)]
fn cmp_bits<T: Copy + PartialOrd>(values: &[T], op: u8, c: T, out: &mut Vec<u64>) {
    #[inline(always)]
    fn words<T: Copy>(values: &[T], out: &mut Vec<u64>, f: impl Fn(T) -> bool) {
        out.reserve(values.len().div_ceil(64));
        let mut chunks = values.chunks_exact(64);
        for chunk in &mut chunks {
            let mut bits = 0u64;
            for (j, &v) in chunk.iter().enumerate() {
                bits |= (f(v) as u64) << j;
            }
            out.push(bits);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut bits = 0u64;
            for (j, &v) in rest.iter().enumerate() {
                bits |= (f(v) as u64) << j;
            }
            out.push(bits);
        }
    }
    match op {
        EQ => words(values, out, |v| v == c),
        NE => words(values, out, |v| v != c),
        LT => words(values, out, |v| v < c),
        LE => words(values, out, |v| v <= c),
        GT => words(values, out, |v| v > c),
        _ => words(values, out, |v| v >= c),
    }
}

/// Mask words of any comparable column (128-bit decimals) compared with a constant, in plain
/// Rust: no level has a wider comparison for them.
pub(crate) fn cmp_generic<T: Copy + PartialOrd>(values: &[T], op: u8, c: T) -> Vec<u64> {
    let mut out = Vec::new();
    cmp_bits(values, op, c, &mut out);
    out
}

/// Defines a comparison kernel module `$name` (`run`, `at`) over `$ty` values: portable from
/// [`cmp_bits`]; AVX2 by compares and move masks, `$lanes2` values a compare; AVX-512 by mask
/// compares, `$lanes` values a compare, whose masks are the mask words' bits as they are
/// (compilers build each word from 64 vector lanes by OR reductions otherwise: a quarter of
/// Q6's device time).
macro_rules! cmp_kernel {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $cmp:ident, $set1:ident, $lanes:literal, $mask:ty,
     avx2: $set1_2:ident, $eq2:ident, $gt2:ident, $movemask:ident, $cast:ident, $lanes2:literal,
     $flip:expr) => {
        $(#[$doc])*
        pub(crate) mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn imp(values: &[$ty], op: u8, c: $ty, out: &mut Vec<u64>) {
                super::cmp_bits(values, op, c, out);
            }

            /// AVX2: equal and greater-than compares (unsigned values with their top bit
            /// flipped first, AVX2 comparing signed), the lanes' top bits gathered by a move
            /// mask; the other operators are their negations and swaps.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
            unsafe fn v3(values: &[$ty], op: u8, c: $ty, out: &mut Vec<u64>) {
                use std::arch::x86_64::*;
                const PER_WORD: usize = 64 / $lanes2;
                const ALL: u64 = (1u64 << $lanes2) - 1;
                let full = values.len() / 64;
                out.reserve(values.len().div_ceil(64));
                let flip = $set1_2($flip);
                let cv = _mm256_xor_si256($set1_2(c as _), flip);
                // (compare, swap the operands, negate the result)
                let (eq, swap, negate) = match op {
                    EQ => (true, false, false),
                    NE => (true, false, true),
                    GT => (false, false, false),
                    LE => (false, false, true),
                    LT => (false, true, false),
                    _ => (false, true, true),
                };
                for w in 0..full {
                    let mut word = 0u64;
                    for k in 0..PER_WORD {
                        let at = w * 64 + k * $lanes2;
                        // SAFETY: `at + $lanes2 <= full * 64 <= values.len()`; an unaligned
                        // load of 32 bytes.
                        let v = unsafe {
                            _mm256_loadu_si256(values.as_ptr().add(at) as *const __m256i)
                        };
                        let v = _mm256_xor_si256(v, flip);
                        let r = match (eq, swap) {
                            (true, _) => $eq2(v, cv),
                            (false, false) => $gt2(v, cv),
                            (false, true) => $gt2(cv, v),
                        };
                        let mut m = $movemask($cast(r)) as u64 & ALL;
                        if negate {
                            m ^= ALL;
                        }
                        word |= m << (k * $lanes2);
                    }
                    out.push(word);
                }
                // The last partial word, as the portable kernel makes it.
                super::cmp_bits(&values[full * 64..], op, c, out);
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(
                enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt"
            )]
            unsafe fn v4(values: &[$ty], op: u8, c: $ty, out: &mut Vec<u64>) {
                use std::arch::x86_64::*;
                const PER_WORD: usize = 64 / $lanes;
                let full = values.len() / 64;
                out.reserve(values.len().div_ceil(64));
                let cv = $set1(c as _);
                macro_rules! words {
                    ($pred:expr) => {
                        for w in 0..full {
                            let mut word = 0u64;
                            for k in 0..PER_WORD {
                                let at = w * 64 + k * $lanes;
                                // SAFETY: `at + $lanes <= full * 64 <= values.len()`; an
                                // unaligned load of $lanes values.
                                let v = unsafe {
                                    _mm512_loadu_si512(values.as_ptr().add(at) as *const _)
                                };
                                let m: $mask = $cmp::<{ $pred }>(v, cv);
                                word |= (m as u64) << (k * $lanes);
                            }
                            out.push(word);
                        }
                    };
                }
                match op {
                    EQ => words!(_MM_CMPINT_EQ),
                    NE => words!(_MM_CMPINT_NE),
                    LT => words!(_MM_CMPINT_LT),
                    LE => words!(_MM_CMPINT_LE),
                    GT => words!(_MM_CMPINT_NLE),
                    _ => words!(_MM_CMPINT_NLT),
                }
                // The last partial word, as the portable kernel makes it.
                super::cmp_bits(&values[full * 64..], op, c, out);
            }

            /// Appends the mask words of `values` to `out`, at `level` or the highest level
            /// below it the CPU has.
            #[allow(dead_code)]
            pub(crate) fn at_into(level: Level, values: &[$ty], op: u8, c: $ty, out: &mut Vec<u64>) {
                let level = level.min(inpath_core::isa::detected());
                #[cfg(target_arch = "x86_64")]
                {
                    if level >= Level::Avx512 {
                        // SAFETY: `detected()` found every feature `v4` enables.
                        return unsafe { v4(values, op, c, out) };
                    }
                    if level >= Level::Avx2 {
                        // SAFETY: `detected()` found every feature `v3` enables.
                        return unsafe { v3(values, op, c, out) };
                    }
                }
                let _ = level;
                imp(values, op, c, out)
            }

            /// The mask words of `values`, at `level` or the highest level below it the CPU
            /// has.
            #[allow(dead_code)]
            pub(crate) fn at(level: Level, values: &[$ty], op: u8, c: $ty) -> Vec<u64> {
                let mut out = Vec::new();
                at_into(level, values, op, c, &mut out);
                out
            }

            /// Runs the kernel at the level [`level`](super::level) picked.
            #[allow(dead_code)]
            pub(crate) fn run(values: &[$ty], op: u8, c: $ty) -> Vec<u64> {
                at(super::level(), values, op, c)
            }

            /// Appends the mask words of `values` to `out`, at the level
            /// [`level`](super::level) picked: a page compared block by block.
            #[allow(dead_code)]
            pub(crate) fn run_into(values: &[$ty], op: u8, c: $ty, out: &mut Vec<u64>) {
                at_into(super::level(), values, op, c, out)
            }
        }
    };
}

cmp_kernel!(
    /// Mask words of an `i64` column compared with a constant (operators [`EQ`]..[`GE`]).
    cmp_i64, i64, _mm512_cmp_epi64_mask, _mm512_set1_epi64, 8, u8,
    avx2: _mm256_set1_epi64x, _mm256_cmpeq_epi64, _mm256_cmpgt_epi64, _mm256_movemask_pd,
    _mm256_castsi256_pd, 4, 0
);
cmp_kernel!(
    /// Mask words of 32-bit deltas compared with a constant (the selector on bit-packed pages).
    cmp_u32, u32, _mm512_cmp_epu32_mask, _mm512_set1_epi32, 16, u16,
    avx2: _mm256_set1_epi32, _mm256_cmpeq_epi32, _mm256_cmpgt_epi32, _mm256_movemask_ps,
    _mm256_castsi256_ps, 8, i32::MIN
);
cmp_kernel!(
    /// Mask words of an `i32` column (dates, 32-bit integers) compared with a constant.
    cmp_i32, i32, _mm512_cmp_epi32_mask, _mm512_set1_epi32, 16, u16,
    avx2: _mm256_set1_epi32, _mm256_cmpeq_epi32, _mm256_cmpgt_epi32, _mm256_movemask_ps,
    _mm256_castsi256_ps, 8, 0
);

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
/// the block's values from L2 once per group: 18 % of Q1).
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
/// five times (`group_sums` was 18 % of Q1). At AVX2 (16 vector registers, too few to keep
/// the masks of six groups and the sums of two registers) the masks of a run of rows are
/// compared once into the L1 cache and each register's pass adds under them ([`many_v3`]; a
/// [`group_sums`] pass per register was 27 % of Q1 on a Zen 3), which also counts the ids
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
        if level.min(isa::detected()) >= Level::Avx512 && fits {
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
        if level.min(isa::detected()) >= Level::Avx2 && fits && counted {
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

/// Operation code of [`wrapping_op`] and [`const_op`] for a product of operands within i32.
pub(crate) const MUL_I32: u8 = 3;

/// `a * b` of two values within i32, from their low 32 bits: one signed 32x32 → 64-bit
/// multiply (`vpmuldq`), where a full 64-bit product takes three multiplies and five other
/// operations below AVX-512 (Q1's and Q6's price-times-discount products).
#[inline(always)]
fn mul_i32(a: i64, b: i64) -> i64 {
    i64::from(a as i32) * i64::from(b as i32)
}

kernel! {
    /// `x op y` element by element, wrapping (`op` 0 add, 1 subtract, 2 multiply, 3 multiply
    /// of operands within i32): exact when the operands' [`max_abs`] bounds rule overflow out,
    /// which the caller checks.
    wrapping_op(op: u8, x: &[i64], y: &[i64]) -> Vec<i64> {
        // Loops into the vector's memory rather than `collect`: the iterator's own functions
        // may stay out of line, compiled for the baseline target.
        super::written(x.len().min(y.len()), |out| {
            let rows = out.iter_mut().zip(x.iter().zip(y));
            match op {
                0 => rows.for_each(|(o, (a, b))| {
                    o.write(a.wrapping_add(*b));
                }),
                1 => rows.for_each(|(o, (a, b))| {
                    o.write(a.wrapping_sub(*b));
                }),
                2 => rows.for_each(|(o, (a, b))| {
                    o.write(a.wrapping_mul(*b));
                }),
                _ => rows.for_each(|(o, (a, b))| {
                    o.write(super::mul_i32(*a, *b));
                }),
            }
        })
    }
}

kernel! {
    /// `c op v` (`first`) or `v op c` element by element, wrapping (`op` as [`wrapping_op`]):
    /// an operation with a constant, which is never filled out.
    const_op(op: u8, c: i64, v: &[i64], first: bool) -> Vec<i64> {
        super::written(v.len(), |out| {
            let rows = out.iter_mut().zip(v);
            match (op, first) {
                (0, _) => rows.for_each(|(o, q)| {
                    o.write(q.wrapping_add(c));
                }),
                (1, true) => rows.for_each(|(o, q)| {
                    o.write(c.wrapping_sub(*q));
                }),
                (1, false) => rows.for_each(|(o, q)| {
                    o.write(q.wrapping_sub(c));
                }),
                (2, _) => rows.for_each(|(o, q)| {
                    o.write(q.wrapping_mul(c));
                }),
                _ => rows.for_each(|(o, q)| {
                    o.write(super::mul_i32(*q, c));
                }),
            }
        })
    }
}

kernel! {
    /// `values[rows[i]]` for each row.
    gather_i64(values: &[i64], rows: &[u32]) -> Vec<i64> {
        super::written(rows.len(), |out| {
            for (o, &r) in out.iter_mut().zip(rows) {
                o.write(values[r as usize]);
            }
        })
    }
}

kernel! {
    /// `values[rows[i]]` widened to i64, for each row (dates, 32-bit integers, codes).
    gather_i32(values: &[i32], rows: &[u32]) -> Vec<i64> {
        super::written(rows.len(), |out| {
            for (o, &r) in out.iter_mut().zip(rows) {
                o.write(values[r as usize] as i64);
            }
        })
    }
}

kernel! {
    /// Each value widened to 64 bits (a block's dictionary codes as group keys).
    widen_i32(values: &[i32]) -> Vec<i64> {
        super::written(values.len(), |out| {
            for (o, &v) in out.iter_mut().zip(values) {
                o.write(v as i64);
            }
        })
    }
}

kernel! {
    /// `reference + deltas[i]` for each delta: a bit-packed page's values (wrapping; the
    /// caller checked that the reference plus the largest delta fits in i64).
    offset_u32(deltas: &[u32], reference: i64) -> Vec<i64> {
        super::written(deltas.len(), |out| {
            for (o, &d) in out.iter_mut().zip(deltas) {
                o.write(reference.wrapping_add(d as i64));
            }
        })
    }
}

kernel! {
    /// `reference + deltas[rows[i]]` for each row.
    gather_offset_u32(deltas: &[u32], rows: &[u32], reference: i64) -> Vec<i64> {
        super::written(rows.len(), |out| {
            for (o, &r) in out.iter_mut().zip(rows) {
                o.write(reference.wrapping_add(deltas[r as usize] as i64));
            }
        })
    }
}

/// The group id in `slots` of each row's slot; `u32::MAX` where the slot has no group yet or
/// lies beyond the table, at `level`. A table of at most 8 slots (Q1's six) is looked up at
/// AVX2 by a vector permute, 8 rows at a time ([`slot_ids_v3_small`]; a load a row was 9 % of
/// Q1 on a Zen 3); others by [`slot_ids_gathered`].
pub(crate) fn slot_ids_at(level: Level, at: &[i64], slots: &[u32]) -> Vec<u32> {
    #[cfg(target_arch = "x86_64")]
    if slots.len() <= 8 && level.min(isa::detected()) >= Level::Avx2 {
        // SAFETY: `detected()` found AVX2.
        return unsafe { slot_ids_v3_small(at, slots) };
    }
    slot_ids_gathered::at(level, at, slots)
}

/// [`slot_ids_at`] at the level [`level`] picked.
pub(crate) fn slot_ids(at: &[i64], slots: &[u32]) -> Vec<u32> {
    slot_ids_at(level(), at, slots)
}

/// [`slot_ids_at`] for a table of at most 8 slots: each 8 rows' slots are narrowed to 32 bits
/// and looked up by one `vpermd` in the table held in a vector register; a slot outside the
/// table (compared in 64 bits) gets `u32::MAX`.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn slot_ids_v3_small(at: &[i64], slots: &[u32]) -> Vec<u32> {
    use std::arch::x86_64::*;
    let mut padded = [u32::MAX; 8];
    padded[..slots.len()].copy_from_slice(slots);
    // SAFETY: a 32-byte load of an 8 x u32 array.
    let table = unsafe { _mm256_loadu_si256(padded.as_ptr().cast()) };
    let last = _mm256_set1_epi64x(slots.len() as i64 - 1);
    let zero = _mm256_setzero_si256();
    // The low 32 bits of each 64-bit lane, in order, after `_mm256_shuffle_ps` took them
    // from two vectors lane by lane.
    const ORDER: i32 = 0b11_01_10_00;
    let whole = at.len() / 8 * 8;
    written(at.len(), |out| {
        for (i, o) in out[..whole].chunks_exact_mut(8).enumerate() {
            // SAFETY: rows 8i .. 8i + 8 lie below `whole` <= at.len().
            let (a, b) = unsafe {
                let p = at.as_ptr().add(8 * i);
                (
                    _mm256_loadu_si256(p.cast()),
                    _mm256_loadu_si256(p.add(4).cast()),
                )
            };
            let outside =
                |x| _mm256_or_si256(_mm256_cmpgt_epi64(x, last), _mm256_cmpgt_epi64(zero, x));
            let narrow = |x: __m256i, y: __m256i| {
                let even = _mm256_shuffle_ps::<0b10_00_10_00>(
                    _mm256_castsi256_ps(x),
                    _mm256_castsi256_ps(y),
                );
                _mm256_permute4x64_epi64::<ORDER>(_mm256_castps_si256(even))
            };
            let ids = _mm256_permutevar8x32_epi32(table, narrow(a, b));
            let ids = _mm256_or_si256(ids, narrow(outside(a), outside(b)));
            // SAFETY: 8 u32 slots of `out` take the 32-byte store.
            unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), ids) };
        }
        for (o, &a) in out[whole..].iter_mut().zip(&at[whole..]) {
            o.write(slots.get(a as usize).copied().unwrap_or(u32::MAX));
        }
    })
}

kernel! {
    /// [`slot_ids_at`] a row at a time (any table).
    slot_ids_gathered(at: &[i64], slots: &[u32]) -> Vec<u32> {
        super::written(at.len(), |out| {
            for (o, &a) in out.iter_mut().zip(at) {
                o.write(slots.get(a as usize).copied().unwrap_or(u32::MAX));
            }
        })
    }
}

/// Group ids of rows keyed by one or two dictionary codes, from a dense table of slots
/// `a[i] + b[i] * stride` (`b` absent: one key, `stride` the table's length): `slots` of each
/// row's slot, `u32::MAX` for rows whose bit in `mask` is clear. `None` where any row's slot
/// has no group yet, or a code lies beyond its key's size (`a` below `stride`, `b` below
/// `slots.len() / stride`); the caller then adds groups row by row. At AVX2, 8 rows at a time
/// from the 32-bit codes ([`dense_ids_v3`]): widening the codes, their slots, the lookup and
/// the mask were four passes over 64-bit values, 11 % of Q1 on a Zen 3.
pub(crate) fn dense_ids_at(
    level: Level,
    a: &[i32],
    b: Option<&[i32]>,
    stride: u32,
    slots: &[u32],
    mask: Option<&[u64]>,
) -> Option<Vec<u32>> {
    let n = a.len();
    assert!(b.is_none_or(|b| b.len() >= n), "a code of each key a row");
    assert!(mask.is_none_or(|m| m.len() * 64 >= n), "a mask bit a row");
    if stride == 0 {
        return (n == 0).then(Vec::new);
    }
    #[cfg(target_arch = "x86_64")]
    if level.min(isa::detected()) >= Level::Avx2 && slots.len() <= i32::MAX as usize {
        // SAFETY: `detected()` found AVX2; the lengths were checked above.
        return unsafe { dense_ids_v3(a, b, stride, slots, mask) };
    }
    let mut ids = dense_ids_rows(a, b, stride, slots, 0)?;
    if let Some(mask) = mask {
        drop_unselected::at(level, &mut ids, mask);
    }
    Some(ids)
}

/// [`dense_ids_at`] at the level [`level`] picked.
pub(crate) fn dense_ids(
    a: &[i32],
    b: Option<&[i32]>,
    stride: u32,
    slots: &[u32],
    mask: Option<&[u64]>,
) -> Option<Vec<u32>> {
    dense_ids_at(level(), a, b, stride, slots, mask)
}

/// [`dense_ids_at`]'s lookup a row at a time, for rows `from..a.len()` (no mask).
fn dense_ids_rows(
    a: &[i32],
    b: Option<&[i32]>,
    stride: u32,
    slots: &[u32],
    from: usize,
) -> Option<Vec<u32>> {
    let height = slots.len() as u64 / u64::from(stride);
    (from..a.len())
        .map(|i| {
            let (x, y) = (a[i] as u32, b.map_or(0, |b| b[i] as u32));
            if x >= stride || u64::from(y) >= height {
                return None;
            }
            let g = slots[x as usize + y as usize * stride as usize];
            (g != u32::MAX).then_some(g)
        })
        .collect()
}

/// [`dense_ids_at`] at AVX2: 8 rows a step, slots in 32-bit lanes, looked up by `vpermd` in a
/// table of at most 8 slots held in a register, by `vpgatherdd` otherwise; each step's 8 mask
/// bits spread to lanes by one compare.
///
/// # Safety
/// The CPU has AVX2; `b` (if any) holds at least `a.len()` codes, `mask` (if any) a bit for
/// each; `slots.len()` is at most `i32::MAX` and `stride` is not zero.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dense_ids_v3(
    a: &[i32],
    b: Option<&[i32]>,
    stride: u32,
    slots: &[u32],
    mask: Option<&[u64]>,
) -> Option<Vec<u32>> {
    use std::arch::x86_64::*;
    let n = a.len();
    let whole = n / 8 * 8;
    let height = (slots.len() as u64 / u64::from(stride)).min(u64::from(u32::MAX)) as u32;
    if height == 0 {
        return (n == 0).then(Vec::new);
    }
    let small = slots.len() <= 8;
    let mut padded = [u32::MAX; 8];
    if small {
        padded[..slots.len()].copy_from_slice(slots);
    }
    // SAFETY: a 32-byte load of an 8 x u32 array.
    let table = unsafe { _mm256_loadu_si256(padded.as_ptr().cast()) };
    let none = _mm256_set1_epi32(-1);
    let (last_a, last_b) = (
        _mm256_set1_epi32((stride - 1) as i32),
        _mm256_set1_epi32((height - 1) as i32),
    );
    let step = _mm256_set1_epi32(stride as i32);
    let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    // Lanes at or below `last`, unsigned (a negative code is beyond any size).
    let within = |x: __m256i, last: __m256i| _mm256_cmpeq_epi32(_mm256_max_epu32(x, last), last);
    let mut missing = _mm256_setzero_si256();
    let mut ids: Vec<u32> = Vec::with_capacity(n);
    let out = ids.as_mut_ptr();
    for c in 0..whole / 8 {
        let i = 8 * c;
        // SAFETY: rows i .. i + 8 lie below `whole` <= n, and `b` holds n codes.
        let x = unsafe { _mm256_loadu_si256(a.as_ptr().add(i).cast()) };
        let mut ok = within(x, last_a);
        let mut at = x;
        if let Some(b) = b {
            let y = unsafe { _mm256_loadu_si256(b.as_ptr().add(i).cast()) };
            ok = _mm256_and_si256(ok, within(y, last_b));
            at = _mm256_add_epi32(x, _mm256_mullo_epi32(y, step));
        }
        // Codes within their sizes give slots within the table; others look up slot 0 and
        // are then marked missing.
        let at = _mm256_and_si256(at, ok);
        let g = if small {
            _mm256_permutevar8x32_epi32(table, at)
        } else {
            // SAFETY: every index is a slot of the table (below `height * stride`).
            unsafe { _mm256_i32gather_epi32::<4>(slots.as_ptr().cast(), at) }
        };
        let g = _mm256_or_si256(g, _mm256_andnot_si256(ok, none));
        missing = _mm256_or_si256(missing, _mm256_cmpeq_epi32(g, none));
        let g = match mask {
            Some(m) => {
                let byte = (m[i / 64] >> (i % 64)) & 0xFF;
                let on = _mm256_cmpeq_epi32(
                    _mm256_and_si256(_mm256_set1_epi32(byte as i32), bits),
                    bits,
                );
                _mm256_or_si256(g, _mm256_andnot_si256(on, none))
            }
            None => g,
        };
        // SAFETY: slots i .. i + 8 of the vector's capacity n.
        unsafe { _mm256_storeu_si256(out.add(i).cast(), g) };
    }
    if _mm256_testz_si256(missing, missing) == 0 {
        return None;
    }
    let rest = dense_ids_rows(a, b, stride, slots, whole)?;
    // SAFETY: `whole` ids were stored; the rest go after them within the capacity.
    unsafe {
        std::ptr::copy_nonoverlapping(rest.as_ptr(), out.add(whole), rest.len());
        ids.set_len(n);
    }
    if let Some(m) = mask {
        for (i, id) in ids.iter_mut().enumerate().skip(whole) {
            if m[i / 64] >> (i % 64) & 1 == 0 {
                *id = u32::MAX;
            }
        }
    }
    Some(ids)
}

kernel! {
    /// Zeroes the values whose bit in `mask` is clear (bit i of word i/64 is value i).
    keep_selected(values: &mut [i64], mask: &[u64]) {
        for (chunk, &word) in values.chunks_mut(64).zip(mask) {
            for (j, v) in chunk.iter_mut().enumerate() {
                *v &= ((word >> j) & 1).wrapping_neg() as i64;
            }
        }
    }
}

kernel! {
    /// Sets the ids whose bit in `mask` is clear to `u32::MAX` (no group).
    drop_unselected(ids: &mut [u32], mask: &[u64]) {
        for (chunk, &word) in ids.chunks_mut(64).zip(mask) {
            for (j, id) in chunk.iter_mut().enumerate() {
                *id |= (((word >> j) & 1) as u32).wrapping_sub(1);
            }
        }
    }
}

kernel! {
    /// Dense group slots of two dictionary-code keys: `a[i] + b[i] * stride`.
    dense_slots(a: &[i64], b: &[i64], stride: i64) -> Vec<i64> {
        super::written(a.len().min(b.len()), |out| {
            for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
                o.write(x + y * stride);
            }
        })
    }
}

kernel! {
    /// Whether every code lies in `0..len` (a dictionary page's codes against its values).
    codes_within(codes: &[i32], len: usize) -> bool {
        // Unsigned, a negative code is beyond any length: the largest code against the
        // length (a max reduction vectorises; an AND of compares did not).
        let len = len.min(u32::MAX as usize) as u32;
        codes.is_empty() || codes.iter().fold(0u32, |m, &c| m.max(c as u32)) < len
    }
}

/// A dictionary array of `keys` over `values`, its codes checked by [`codes_within`] (Arrow's
/// own check, a branch a code, took 9 % of Q1 on the device); Arrow's checked constructor
/// where the keys have nulls.
pub(crate) fn dictionary_array(
    keys: arrow_array::Int32Array,
    values: arrow_array::ArrayRef,
) -> Result<arrow_array::DictionaryArray<arrow_array::types::Int32Type>, String> {
    use arrow_array::Array;
    if keys.null_count() == 0 {
        if !codes_within::run(keys.values(), values.len()) {
            return Err(format!(
                "a dictionary code is outside the dictionary's {} values",
                values.len()
            ));
        }
        // SAFETY: every key is non-null and in 0..values.len(), what `try_new` checks.
        return Ok(unsafe { arrow_array::DictionaryArray::new_unchecked(keys, values) });
    }
    arrow_array::DictionaryArray::try_new(keys, values).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64, spread: i64) -> Vec<i64> {
        crate::testing::xorshift(seed, n, -spread, 2 * spread as u64 + 1)
    }

    /// Every level this machine has gives the portable answers, which equal a plain reference.
    #[test]
    fn every_level_equals_the_reference() {
        for n in [0, 1, 63, 64, 65, 1000, 4096] {
            let v = values(n, 7 + n as u64, 1_000_000);
            let w = values(n, 11 + n as u64, 1_000);
            let ids: Vec<u32> = values(n, 3, 5)
                .iter()
                .map(|&x| x.unsigned_abs() as u32)
                .collect();
            let rows: Vec<u32> = (0..n as u32).rev().step_by(3).collect();
            for level in isa::supported() {
                for op in [EQ, NE, LT, LE, GT, GE] {
                    let c = v.get(n / 2).copied().unwrap_or(0);
                    let want: Vec<bool> = v
                        .iter()
                        .map(|&x| match op {
                            EQ => x == c,
                            NE => x != c,
                            LT => x < c,
                            LE => x <= c,
                            GT => x > c,
                            _ => x >= c,
                        })
                        .collect();
                    let got = cmp_i64::at(level, &v, op, c);
                    assert_eq!(got.len(), n.div_ceil(64));
                    for (i, &b) in want.iter().enumerate() {
                        assert_eq!(
                            got[i / 64] >> (i % 64) & 1 == 1,
                            b,
                            "{level} op {op} row {i}"
                        );
                    }
                    let v32: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                    assert_eq!(cmp_i32::at(level, &v32, op, c as i32), got, "{level}");
                    // As deltas from the smallest value, against the constant's delta.
                    let min = v.iter().copied().min().unwrap_or(0);
                    let deltas: Vec<u32> = v.iter().map(|&x| (x - min) as u32).collect();
                    assert_eq!(
                        cmp_u32::at(level, &deltas, op, (c - min) as u32),
                        got,
                        "{level}"
                    );
                    // Appended block by block (128 values, as pages are unpacked).
                    let mut blocks = Vec::new();
                    for chunk in deltas.chunks(128) {
                        cmp_u32::at_into(level, chunk, op, (c - min) as u32, &mut blocks);
                    }
                    assert_eq!(blocks, got, "{level} by blocks");
                    // Deltas with and without the top bit compare unsigned.
                    let high: Vec<u32> = deltas
                        .iter()
                        .enumerate()
                        .map(|(i, &d)| if i % 3 == 0 { d | (1 << 31) } else { d })
                        .collect();
                    let ch = (c - min) as u32;
                    let want_high = cmp_generic(&high, op, ch);
                    assert_eq!(cmp_u32::at(level, &high, op, ch), want_high, "{level}");
                    let wide: Vec<i64> = v.iter().map(|&x| x << 40).collect();
                    assert_eq!(
                        cmp_i64::at(level, &wide, op, c << 40),
                        got,
                        "{level} 64-bit"
                    );
                }
                let max = v.iter().map(|x| x.unsigned_abs()).max().unwrap_or(0);
                assert_eq!(max_abs::at(level, &v), max, "{level}");
                let narrow: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                let wide: Vec<i64> = narrow.iter().map(|&x| x as i64).collect();
                assert_eq!(widen_i32::at(level, &narrow), wide, "{level}");
                assert_eq!(max_abs::at(level, &[i64::MIN, 3]), 1 << 63, "{level}");
                assert_eq!(sum::at(level, &v), v.iter().sum::<i64>(), "{level}");
                // Ids run 0 to 5: fewer groups than ids (ids beyond add nothing), within 8
                // (one pass), and beyond 8 (a pass per group).
                for groups in [3usize, 6, 12] {
                    let mut sums = vec![5i64; groups];
                    let mut counts = vec![0i64; groups];
                    group_sums::at(level, &ids, &v, &mut sums);
                    group_counts::at(level, &ids, &mut counts);
                    for g in 0..groups as u32 {
                        let rows = ids.iter().zip(&v).filter(|(&i, _)| i == g);
                        assert_eq!(
                            sums[g as usize],
                            5 + rows.clone().map(|(_, &x)| x).sum::<i64>(),
                            "{level} {groups} groups"
                        );
                        assert_eq!(counts[g as usize], rows.count() as i64, "{level}");
                    }
                }
                // Several registers at once: 1 to 7 registers (passes of 6, 4 or 3 and more),
                // 1 to 8 groups, ids beyond them; the same as a pass per register.
                for registers in 1..=7usize {
                    for groups in 1..=MANY_GROUPS {
                        let regs: Vec<Vec<i64>> = (0..registers)
                            .map(|r| values(n, 100 + r as u64, i64::MAX / 2))
                            .collect();
                        let views: Vec<&[i64]> = regs.iter().map(Vec::as_slice).collect();
                        let mut got = vec![vec![7i64; groups]; registers];
                        let mut counts = vec![3i64; groups];
                        group_sums_many_at(level, &ids, &views, &mut got, Some(&mut counts));
                        let mut want_counts = vec![3i64; groups];
                        group_counts::at(Level::Portable, &ids, &mut want_counts);
                        assert_eq!(
                            counts, want_counts,
                            "{level} {registers} registers {groups} groups"
                        );
                        let mut uncounted = vec![vec![7i64; groups]; registers];
                        group_sums_many_at(level, &ids, &views, &mut uncounted, None);
                        assert_eq!(
                            uncounted, got,
                            "{level} {registers} registers {groups} groups"
                        );
                        for (r, g) in regs.iter().zip(&got) {
                            let mut want = vec![7i64; groups];
                            for (&id, &x) in ids.iter().zip(r) {
                                if let Some(w) = want.get_mut(id as usize) {
                                    *w = w.wrapping_add(x);
                                }
                            }
                            assert_eq!(g, &want, "{level} {registers} registers {groups} groups");
                        }
                    }
                }
                for (op, f) in [
                    (0u8, (|a: i64, b: i64| a + b) as fn(i64, i64) -> i64),
                    (1, |a, b| a - b),
                    (2, |a, b| a * b),
                    // (Both operands lie within i32 here: spreads of 10^6 and 10^3.)
                    (MUL_I32, |a, b| a * b),
                ] {
                    let want: Vec<i64> = v.iter().zip(&w).map(|(&a, &b)| f(a, b)).collect();
                    assert_eq!(wrapping_op::at(level, op, &v, &w), want, "{level} op {op}");
                    let c = w.first().copied().unwrap_or(-7);
                    let first: Vec<i64> = v.iter().map(|&b| f(c, b)).collect();
                    let second: Vec<i64> = v.iter().map(|&a| f(a, c)).collect();
                    assert_eq!(
                        const_op::at(level, op, c, &v, true),
                        first,
                        "{level} op {op}"
                    );
                    assert_eq!(
                        const_op::at(level, op, c, &v, false),
                        second,
                        "{level} op {op}"
                    );
                }
                let want: Vec<i64> = rows.iter().map(|&r| v[r as usize]).collect();
                assert_eq!(gather_i64::at(level, &v, &rows), want, "{level}");
                let v32: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                assert_eq!(gather_i32::at(level, &v32, &rows), want, "{level}");
                // As deltas from a reference near either end of i64.
                for reference in [-3i64, i64::MIN + 5, i64::MAX - u32::MAX as i64] {
                    let deltas: Vec<u32> = v.iter().map(|&x| x as u32).collect();
                    let all: Vec<i64> = deltas.iter().map(|&d| reference + d as i64).collect();
                    assert_eq!(offset_u32::at(level, &deltas, reference), all, "{level}");
                    let picked: Vec<i64> = rows.iter().map(|&r| all[r as usize]).collect();
                    assert_eq!(
                        gather_offset_u32::at(level, &deltas, &rows, reference),
                        picked,
                        "{level}"
                    );
                }
                let slots: Vec<u32> = (0..40u32)
                    .map(|s| if s % 7 == 0 { u32::MAX } else { s * 3 })
                    .collect();
                let at: Vec<i64> = v.iter().map(|&x| x.rem_euclid(45)).collect();
                let want: Vec<u32> = at
                    .iter()
                    .map(|&a| {
                        if a >= 40 || a % 7 == 0 {
                            u32::MAX
                        } else {
                            a as u32 * 3
                        }
                    })
                    .collect();
                assert_eq!(slot_ids_at(level, &at, &slots), want, "{level}");
                // A table of at most 8 slots (looked up in a vector register at AVX2), with
                // slots beyond it either side of 32 bits and negative.
                for len in [1usize, 6, 8] {
                    let small: Vec<u32> = (0..len as u32)
                        .map(|s| if s == 2 { u32::MAX } else { s + 10 })
                        .collect();
                    let at: Vec<i64> = v
                        .iter()
                        .map(|&x| match x.rem_euclid(12) {
                            9 => -1 - x.abs(),
                            10 => (1 << 32) + 1,
                            11 => x.abs() + 100,
                            r => r,
                        })
                        .collect();
                    let want: Vec<u32> = at
                        .iter()
                        .map(|&a| usize::try_from(a).ok().and_then(|a| small.get(a)).copied())
                        .map(|s| s.unwrap_or(u32::MAX))
                        .collect();
                    assert_eq!(slot_ids_at(level, &at, &small), want, "{level} {len} slots");
                }
                let a: Vec<i64> = ids.iter().map(|&i| i as i64 % 3).collect();
                let b: Vec<i64> = ids.iter().map(|&i| i as i64 / 3).collect();
                let want: Vec<i64> = a.iter().zip(&b).map(|(x, y)| x + y * 3).collect();
                assert_eq!(dense_slots::at(level, &a, &b, 3), want, "{level}");
                // Ids from one or two keys' codes: a small table (a register at AVX2) and a
                // large one (gathered); full, with a slot missing, with codes beyond a size;
                // with and without a mask.
                let mask: Vec<u64> = values(n.div_ceil(64), 9, i64::MAX / 2)
                    .iter()
                    .map(|&x| x as u64)
                    .collect();
                for (width, height) in [(3u32, 2u32), (5, 9), (7, 1)] {
                    let len = (width * height) as usize;
                    let full: Vec<u32> = (0..len as u32).map(|s| s * 2 + 1).collect();
                    let mut gap = full.clone();
                    gap[len / 2] = u32::MAX;
                    let xs: Vec<i32> = v
                        .iter()
                        .map(|&x| x.rem_euclid(width as i64) as i32)
                        .collect();
                    let ys: Vec<i32> = w
                        .iter()
                        .map(|&y| y.rem_euclid(height as i64) as i32)
                        .collect();
                    let reference = |slots: &[u32],
                                     x: &[i32],
                                     y: Option<&[i32]>,
                                     stride: u32,
                                     mask: Option<&[u64]>| {
                        let height = slots.len() as i64 / stride as i64;
                        let mut ids = Vec::new();
                        for i in 0..x.len() {
                            let (a, b) = (x[i] as i64, y.map_or(0, |y| y[i] as i64));
                            if !(0..stride as i64).contains(&a) || !(0..height).contains(&b) {
                                return None;
                            }
                            let g = slots[(a + b * stride as i64) as usize];
                            if g == u32::MAX {
                                return None;
                            }
                            let on = mask.is_none_or(|m| m[i / 64] >> (i % 64) & 1 == 1);
                            ids.push(if on { g } else { u32::MAX });
                        }
                        Some(ids)
                    };
                    let mut beyond = xs.clone();
                    if let Some(x) = beyond.get_mut(n / 3) {
                        *x = if n % 2 == 0 { -1 } else { width as i32 };
                    }
                    for slots in [&full, &gap] {
                        for x in [&xs, &beyond] {
                            for m in [None, Some(&mask[..])] {
                                let want = reference(slots, x, Some(&ys), width, m);
                                let got = dense_ids_at(level, x, Some(&ys), width, slots, m);
                                assert_eq!(got, want, "{level} {width}x{height} two keys");
                                let want = reference(slots, x, None, len as u32, m);
                                let got = dense_ids_at(level, x, None, len as u32, slots, m);
                                assert_eq!(got, want, "{level} {width}x{height} one key");
                            }
                        }
                    }
                    if n > 0 && level == Level::Portable {
                        assert!(reference(&full, &xs, Some(&ys), width, None).is_some());
                    }
                }
                let mask: Vec<u64> = values(n.div_ceil(64), 5, i64::MAX / 2)
                    .iter()
                    .map(|&x| x as u64)
                    .collect();
                let bit = |i: usize| mask[i / 64] >> (i % 64) & 1 == 1;
                let mut kept = v.clone();
                keep_selected::at(level, &mut kept, &mask);
                let want: Vec<i64> = (0..n).map(|i| if bit(i) { v[i] } else { 0 }).collect();
                assert_eq!(kept, want, "{level}");
                let mut dropped = ids.clone();
                drop_unselected::at(level, &mut dropped, &mask);
                let want: Vec<u32> = (0..n)
                    .map(|i| if bit(i) { ids[i] } else { u32::MAX })
                    .collect();
                assert_eq!(dropped, want, "{level}");
                let codes: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
                let top = codes.iter().copied().max().unwrap_or(-1);
                assert!(
                    codes_within::at(level, &codes, (top + 1) as usize),
                    "{level}"
                );
                if n > 0 {
                    assert!(!codes_within::at(level, &codes, top as usize), "{level}");
                    let mut negative = codes.clone();
                    negative[n / 2] = -1;
                    assert!(!codes_within::at(level, &negative, 1 << 20), "{level}");
                }
            }
        }
    }

    #[test]
    fn dictionary_arrays_check_their_codes() {
        use arrow_array::{Array, Int32Array, StringArray};
        let values: arrow_array::ArrayRef = std::sync::Arc::new(StringArray::from(vec!["a", "b"]));
        let ok = dictionary_array(Int32Array::from(vec![0, 1, 1]), values.clone()).unwrap();
        assert_eq!(ok.len(), 3);
        assert!(dictionary_array(Int32Array::from(vec![0, 2]), values.clone()).is_err());
        assert!(dictionary_array(Int32Array::from(vec![-1]), values.clone()).is_err());
        let with_null = Int32Array::from(vec![Some(1), None]);
        assert_eq!(dictionary_array(with_null, values).unwrap().null_count(), 1);
    }
}
