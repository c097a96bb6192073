//! Exact arithmetic: overflow checks and sums that stay exact in 64 or 128 bits.

use crate::arch;
use crate::graph::Op;

/// `x op y` row by row (0 add, 1 subtract, 2 multiply), or none where a row overflows.
pub(super) fn checked_op(code: u8, x: &[i64], y: &[i64]) -> Option<Vec<i64>> {
    x.iter()
        .zip(y)
        .map(|(&p, &q)| match code {
            0 => p.checked_add(q),
            1 => p.checked_sub(q),
            _ => p.checked_mul(q),
        })
        .collect()
}

/// Whether `x op y` cannot overflow 64 bits on any row, by the operands' largest magnitudes.
pub(super) fn no_overflow(op: &Op, x: &[i64], y: &[i64]) -> bool {
    let (a, b) = (arch::max_abs::run(x), arch::max_abs::run(y));
    match op {
        Op::Add(..) | Op::Sub(..) => a.checked_add(b).is_some_and(|t| t <= i64::MAX as u64),
        _ => a.checked_mul(b).is_some_and(|t| t <= i64::MAX as u64),
    }
}

/// Whether `values`, each of magnitude at most `bound`, sum in 64 bits without overflow,
/// whatever their order (every partial sum is bounded by n * bound).
pub(super) fn sums_in_i64(values: &[i64], bound: u64) -> bool {
    bound
        .checked_mul(values.len() as u64)
        .is_some_and(|t| t <= i64::MAX as u64)
}

/// The exact sum of a block (values of magnitude at most `bound`): in 64 bits (vectorised)
/// when it cannot overflow, else 128.
pub(super) fn exact_sum(values: &[i64], bound: u64) -> i128 {
    if sums_in_i64(values, bound) {
        arch::sum::run(values) as i128
    } else {
        values.iter().map(|&v| v as i128).sum()
    }
}

/// Groups few enough that a compare-and-add pass per group (vectorised) beats a scatter.
pub(super) const FEW_GROUPS: usize = 8;

/// Adds a block's values into their groups' 128-bit sums. With few groups, four interleaved
/// 64-bit partial sums per group break the chain of dependent adds on a hot group (rows of a
/// block fall on the same few groups, as in TPC-H Q1's four).
pub(super) fn sum_by_group(ids: &[u32], values: &[i64], bound: u64, acc: &mut [i128]) {
    let groups = acc.len();
    if groups <= FEW_GROUPS && sums_in_i64(values, bound) {
        let mut part = vec![0i64; groups];
        arch::group_sums::run(ids, values, &mut part);
        for (a, p) in acc.iter_mut().zip(part) {
            *a += p as i128;
        }
    } else if groups <= 1024 && groups <= ids.len() && sums_in_i64(values, bound) {
        let mut part = vec![0i64; groups * 4];
        let mut chunks = ids.chunks_exact(4).zip(values.chunks_exact(4));
        for (g, v) in &mut chunks {
            part[g[0] as usize * 4] += v[0];
            part[g[1] as usize * 4 + 1] += v[1];
            part[g[2] as usize * 4 + 2] += v[2];
            part[g[3] as usize * 4 + 3] += v[3];
        }
        let tail = ids.len() / 4 * 4;
        for (&g, &v) in ids[tail..].iter().zip(&values[tail..]) {
            part[g as usize * 4] += v;
        }
        for (a, p) in acc.iter_mut().zip(part.chunks_exact(4)) {
            *a += p.iter().map(|&x| x as i128).sum::<i128>();
        }
    } else {
        // Ids beyond the groups (rows a block's mask leaves out) add nothing.
        for (&g, &v) in ids.iter().zip(values) {
            if let Some(a) = acc.get_mut(g as usize) {
                *a += v as i128;
            }
        }
    }
}
