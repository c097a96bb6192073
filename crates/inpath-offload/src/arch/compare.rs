//! The selector's kernels: mask words of a column compared with a constant.

#![allow(unsafe_code)]

use super::common::*;
use inpath_core::isa::Level;

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
