//! The transformer's kernels: arithmetic, gathers, widening and selections.

#![allow(unsafe_code)]

use super::common::*;
use inpath_core::kernel;

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
