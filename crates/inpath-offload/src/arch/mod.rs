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

//!
//! The kernels, by concern: [`compare`] (the selector's mask words), [`sums`] (exact and
//! grouped sums), [`rows`] (the transformer's arithmetic, gathers and selections) and [`ids`]
//! (group slots of dictionary-code keys).

#![allow(unsafe_code)]

use inpath_core::isa::{self, Level};

mod compare;
mod ids;
mod rows;
mod sums;
#[cfg(test)]
mod tests;

pub(crate) use compare::*;
pub(crate) use ids::*;
pub(crate) use rows::*;
pub(crate) use sums::*;

/// The level the kernels run at.
pub(crate) fn level() -> Level {
    isa::effective()
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
