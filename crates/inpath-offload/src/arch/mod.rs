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
//! (group slots of dictionary-code keys), each a leaf over [`common`] (the level, the
//! operators, an unzeroed output vector).

#![allow(unsafe_code)]

mod common;
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

pub(crate) use common::{EQ, GE, GT, LE, LT, NE};
