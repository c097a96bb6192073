//! Every level this machine has against the portable kernels and a plain reference.

use super::*;
use inpath_core::isa::{self, Level};

fn values(n: usize, seed: u64, spread: i64) -> Vec<i64> {
    inpath_table::testing::xorshift(seed, n, -spread, 2 * spread as u64 + 1)
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
        }
    }
}
