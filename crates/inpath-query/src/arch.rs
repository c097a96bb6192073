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
/// five times (`group_sums` was 18 % of Q1). Below AVX-512, a [`group_sums`] pass per
/// register.
pub(crate) fn group_sums_many_at(
    level: Level,
    ids: &[u32],
    values: &[&[i64]],
    out: &mut [Vec<i64>],
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
            return;
        }
    }
    for (v, o) in values.iter().zip(out.iter_mut()) {
        group_sums::at(level, ids, v, o);
    }
}

/// [`group_sums_many_at`] at the level [`level`] picked.
pub(crate) fn group_sums_many(ids: &[u32], values: &[&[i64]], out: &mut [Vec<i64>]) {
    group_sums_many_at(level(), ids, values, out)
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

kernel! {
    /// `x op y` element by element, wrapping (`op` 0 add, 1 subtract, 2 multiply): exact when
    /// the operands' [`max_abs`] bounds rule overflow out, which the caller checks.
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
                _ => rows.for_each(|(o, (a, b))| {
                    o.write(a.wrapping_mul(*b));
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
                _ => rows.for_each(|(o, q)| {
                    o.write(q.wrapping_mul(c));
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

kernel! {
    /// The group id in `slots` of each row's slot; `u32::MAX` where the slot has no group yet
    /// or lies beyond the table.
    slot_ids(at: &[i64], slots: &[u32]) -> Vec<u32> {
        super::written(at.len(), |out| {
            for (o, &a) in out.iter_mut().zip(at) {
                o.write(slots.get(a as usize).copied().unwrap_or(u32::MAX));
            }
        })
    }
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
        // Unsigned, a negative code is beyond any length: one compare a code.
        let len = len.min(u32::MAX as usize) as u32;
        codes.iter().fold(true, |ok, &c| ok & ((c as u32) < len))
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
                        group_sums_many_at(level, &ids, &views, &mut got);
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
                assert_eq!(slot_ids::at(level, &at, &slots), want, "{level}");
                let a: Vec<i64> = ids.iter().map(|&i| i as i64 % 3).collect();
                let b: Vec<i64> = ids.iter().map(|&i| i as i64 / 3).collect();
                let want: Vec<i64> = a.iter().zip(&b).map(|(x, y)| x + y * 3).collect();
                assert_eq!(dense_slots::at(level, &a, &b, 3), want, "{level}");
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
