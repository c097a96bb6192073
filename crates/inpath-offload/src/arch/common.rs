//! What every kernel file shares: the level they run at, the comparison operators, and an
//! output vector that is never zeroed first.

#![allow(unsafe_code)]

use inpath_core::isa::{self, Level};

/// The level the kernels run at.
pub(crate) fn level() -> Level {
    isa::effective()
}

/// A vector of `n` values that `write` puts into its memory, never zeroed first. `write` gets
/// exactly `n` slots and must write every one: each kernel zips them with inputs of at least
/// `n` values (zeroing first showed in Q1's profile as memset).
#[inline(always)]
pub(super) fn written<T>(n: usize, write: impl FnOnce(&mut [std::mem::MaybeUninit<T>])) -> Vec<T> {
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
