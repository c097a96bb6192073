//! Group ids: slots of dictionary-code keys, by table lookup or by dense arithmetic.

#![allow(unsafe_code)]

use super::common::*;
use super::rows::drop_unselected;
use inpath_core::isa::Level;
use inpath_core::kernel;

/// The group id in `slots` of each row's slot; `u32::MAX` where the slot has no group yet or
/// lies beyond the table, at `level`. A table of at most 8 slots (Q1's six) is looked up at
/// AVX2 by a vector permute, 8 rows at a time ([`slot_ids_v3_small`]; a load a row showed in
/// Q1's profile); others by [`slot_ids_gathered`].
pub(crate) fn slot_ids_at(level: Level, at: &[i64], slots: &[u32]) -> Vec<u32> {
    #[cfg(target_arch = "x86_64")]
    if slots.len() <= 8 && level.min(inpath_core::isa::detected()) >= Level::Avx2 {
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
/// the mask were four passes over 64-bit values, which showed in Q1's profile.
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
    if level.min(inpath_core::isa::detected()) >= Level::Avx2 && slots.len() <= i32::MAX as usize {
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
    /// Dense group slots of two dictionary-code keys: `a[i] + b[i] * stride`.
    dense_slots(a: &[i64], b: &[i64], stride: i64) -> Vec<i64> {
        super::written(a.len().min(b.len()), |out| {
            for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b)) {
                o.write(x + y * stride);
            }
        })
    }
}
