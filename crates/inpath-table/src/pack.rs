//! Frame of reference + bit-packing of integers.
//!
//! A FOR block stores `n` integers as a reference (the smallest) and the deltas from it at the
//! narrowest width that holds the largest delta:
//!
//! ```text
//! offset size field
//!  0     16   reference, i128 little-endian
//! 16      1   width w in bits: 0, 1..=32, 64 or 128
//! 17      7   reserved, zero
//! 24      -   deltas: w = 0: nothing (every value equals the reference);
//!             w = 1..=32: ⌈n/128⌉ blocks of 16·w bytes, the `bitpacking` crate's BitPacker4x
//!             layout (the last block padded with zero deltas);
//!             w = 64: n × u64 LE; w = 128: n × u128 LE
//! ```

use crate::error::{malformed, Malformed};
use bitpacking::{BitPacker, BitPacker4x};

/// Values per bit-packed block.
pub const BLOCK: usize = BitPacker4x::BLOCK_LEN;
/// Deltas per run that [`ForBlock::unpack_deltas`] hands on at once: 8 KiB of them, in the L1
/// cache for whatever reads them next.
pub const RUN: usize = 16 * BLOCK;
/// Length of the FOR block header.
pub const FOR_HEADER: usize = 24;

/// The stored width for a largest delta: 0..=32 as is, 33..=64 → 64, wider → 128.
pub fn width_for(max_delta: u128) -> u8 {
    let bits = 128 - max_delta.leading_zeros();
    match bits {
        0..=32 => bits as u8,
        33..=64 => 64,
        _ => 128,
    }
}

/// Bytes of packed deltas for `n` values at width `w`.
pub fn packed_len(n: usize, width: u8) -> Option<usize> {
    match width {
        0 => Some(0),
        1..=32 => n.div_ceil(BLOCK).checked_mul(16 * width as usize),
        64 => n.checked_mul(8),
        128 => n.checked_mul(16),
        _ => None,
    }
}

/// Appends the FOR block of `values` (`valid[i] == false` marks a null slot, stored as the
/// reference) to `out`; returns the width.
pub fn encode_for(values: &[i128], valid: Option<&[bool]>, out: &mut Vec<u8>) -> u8 {
    let is_valid = |i: usize| valid.is_none_or(|v| v[i]);
    let mut min = i128::MAX;
    let mut max = i128::MIN;
    for (i, &v) in values.iter().enumerate() {
        if is_valid(i) {
            min = min.min(v);
            max = max.max(v);
        }
    }
    if min > max {
        min = 0;
        max = 0;
    }
    let width = width_for(max.wrapping_sub(min) as u128);
    out.extend_from_slice(&min.to_le_bytes());
    out.push(width);
    out.extend_from_slice(&[0; 7]);
    let delta = |i: usize| -> u128 {
        if is_valid(i) {
            values[i].wrapping_sub(min) as u128
        } else {
            0
        }
    };
    match width {
        0 => {}
        1..=32 => {
            let packer = BitPacker4x::new();
            let mut block = [0u32; BLOCK];
            let start = out.len();
            let total = packed_len(values.len(), width).expect("small page");
            out.resize(start + total, 0);
            let mut at = start;
            for chunk in 0..values.len().div_ceil(BLOCK) {
                let base = chunk * BLOCK;
                for (j, slot) in block.iter_mut().enumerate() {
                    let i = base + j;
                    *slot = if i < values.len() { delta(i) as u32 } else { 0 };
                }
                at += packer.compress(&block, &mut out[at..], width);
            }
            debug_assert_eq!(at, start + total);
        }
        64 => {
            for i in 0..values.len() {
                out.extend_from_slice(&(delta(i) as u64).to_le_bytes());
            }
        }
        _ => {
            for i in 0..values.len() {
                out.extend_from_slice(&delta(i).to_le_bytes());
            }
        }
    }
    width
}

/// A parsed FOR block: the reference, the width and the packed deltas.
pub struct ForBlock<'a> {
    /// The reference (smallest value).
    pub reference: i128,
    /// Bits per delta.
    pub width: u8,
    data: &'a [u8],
    n: usize,
}

/// Parses the FOR block of `n` values at the start of `bytes`; returns it and the bytes used.
pub fn parse_for(bytes: &[u8], n: usize) -> Result<(ForBlock<'_>, usize), Malformed> {
    if bytes.len() < FOR_HEADER {
        return Err(malformed!(
            "a FOR block needs {FOR_HEADER} header bytes, {} left",
            bytes.len()
        ));
    }
    let reference = i128::from_le_bytes(bytes[..16].try_into().expect("16 bytes"));
    let width = bytes[16];
    if bytes[17..24] != [0; 7] {
        return Err(malformed!("FOR block reserved bytes are not zero"));
    }
    let len = packed_len(n, width).ok_or_else(|| malformed!("width {width} is not valid"))?;
    let end = FOR_HEADER + len;
    if bytes.len() < end {
        return Err(malformed!(
            "{n} values at width {width} need {len} bytes, {} left",
            bytes.len() - FOR_HEADER
        ));
    }
    Ok((
        ForBlock {
            reference,
            width,
            data: &bytes[FOR_HEADER..end],
            n,
        },
        end,
    ))
}

impl ForBlock<'_> {
    /// Calls `f(i, delta)` for every value in order.
    pub fn for_each(&self, mut f: impl FnMut(usize, u128)) {
        match self.width {
            0 => (0..self.n).for_each(|i| f(i, 0)),
            1..=32 => self.unpack_blocks(|base, deltas| {
                for (j, &d) in deltas.iter().enumerate() {
                    f(base + j, d as u128);
                }
            }),
            64 => {
                for (i, b) in self.data.chunks_exact(8).enumerate() {
                    f(
                        i,
                        u64::from_le_bytes(b.try_into().expect("8 bytes")) as u128,
                    );
                }
            }
            _ => {
                for (i, b) in self.data.chunks_exact(16).enumerate() {
                    f(i, u128::from_le_bytes(b.try_into().expect("16 bytes")));
                }
            }
        }
    }

    /// Calls `each(first value's index, deltas)` for every bit-packed block (width 1 to 32),
    /// the last one cut to the values it holds.
    fn unpack_blocks(&self, mut each: impl FnMut(usize, &[u32])) {
        let packer = BitPacker4x::new();
        let mut block = [0u32; BLOCK];
        let step = 16 * self.width as usize;
        for (chunk, bytes) in self.data.chunks_exact(step).enumerate() {
            packer.decompress(bytes, &mut block, self.width);
            let base = chunk * BLOCK;
            let take = (self.n - base).min(BLOCK);
            each(base, &block[..take]);
        }
    }

    /// The bit-packed deltas (width 1 to 32), each through `f`, appended block by block: the
    /// output is written once, never zeroed first (a page's values are 512 KiB at 64 bits).
    fn unpack_collect<T: Copy>(&self, f: impl Fn(u32) -> T) -> Vec<T> {
        let mut out = Vec::with_capacity(self.n);
        self.unpack_blocks(|_, deltas| out.extend(deltas.iter().map(|&d| f(d))));
        // (The blocks hold every value: `read_for` checked their length.)
        out.resize(self.n, f(0));
        out
    }

    /// The values as i64 (reference + delta, wrapping: the writer never wraps).
    pub fn to_i64(&self) -> Vec<i64> {
        let r = self.reference as i64;
        if self.width <= 32 && self.width > 0 {
            // The hot path: unpack whole blocks straight into the output.
            return self.unpack_collect(|d| r.wrapping_add(d as i64));
        }
        let mut out = vec![0i64; self.n];
        self.for_each(|i, d| out[i] = r.wrapping_add(d as i64));
        out
    }

    /// The values as i32 when every value the block can hold (reference plus any delta of its
    /// width) fits in i32: dates, 32-bit integers and dictionary codes, without a 64-bit pass.
    pub fn to_i32(&self) -> Option<Vec<i32>> {
        let widest = match self.width {
            0 => 0i128,
            1..=32 => (1i128 << self.width) - 1,
            _ => return None,
        };
        if self.reference < i32::MIN as i128 || self.reference + widest > i32::MAX as i128 {
            return None;
        }
        let r = self.reference as i64;
        if self.width == 0 {
            return Some(vec![r as i32; self.n]);
        }
        Some(self.unpack_collect(|d| (r + d as i64) as i32))
    }

    /// The deltas themselves (width 0 to 32), a run of blocks at a time: each run of up to
    /// [`RUN`] deltas goes to `each(first value's index, deltas)` while it is in the L1 cache.
    /// With `keep`, the deltas are unpacked straight into it (its contents replaced, its
    /// memory reused: no zeroing, no copy) and handed to `each` from there. `false` (nothing
    /// done) when the width is over 32.
    pub fn unpack_deltas(
        &self,
        keep: Option<&mut Vec<u32>>,
        mut each: impl FnMut(usize, &[u32]),
    ) -> bool {
        let width = self.width;
        if width > 32 {
            return false;
        }
        let packer = BitPacker4x::new();
        let step = 16 * width as usize;
        let blocks = self.n.div_ceil(BLOCK);
        // Unpacks blocks `first..first + slots.len() / BLOCK` into `slots`.
        let unpack = |first: usize, slots: &mut [u32]| {
            for (k, out) in slots.chunks_exact_mut(BLOCK).enumerate() {
                let at = (first + k) * step;
                if width == 0 {
                    out.fill(0);
                } else {
                    packer.decompress(&self.data[at..at + step], out, width);
                }
            }
        };
        let per_run = RUN / BLOCK;
        match keep {
            Some(out) => {
                // Whole blocks: `resize` writes only slots the buffer never had.
                out.resize(blocks * BLOCK, 0);
                for first in (0..blocks).step_by(per_run) {
                    let end = (first + per_run).min(blocks);
                    let slots = &mut out[first * BLOCK..end * BLOCK];
                    unpack(first, slots);
                    let n = (self.n - first * BLOCK).min(slots.len());
                    each(first * BLOCK, &slots[..n]);
                }
                out.truncate(self.n);
            }
            None => {
                let mut run = [0u32; RUN];
                for first in (0..blocks).step_by(per_run) {
                    let end = (first + per_run).min(blocks);
                    let slots = &mut run[..(end - first) * BLOCK];
                    unpack(first, slots);
                    let n = (self.n - first * BLOCK).min(slots.len());
                    each(first * BLOCK, &slots[..n]);
                }
            }
        }
        true
    }

    /// The values as i128.
    pub fn to_i128(&self) -> Vec<i128> {
        let mut out = vec![0i128; self.n];
        let r = self.reference;
        self.for_each(|i, d| out[i] = r.wrapping_add(d as i128));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert_eq!(width_for(0), 0);
        assert_eq!(width_for(1), 1);
        assert_eq!(width_for(u32::MAX as u128), 32);
        assert_eq!(width_for(1 << 32), 64);
        assert_eq!(width_for(u64::MAX as u128), 64);
        assert_eq!(width_for(u128::MAX), 128);
    }

    /// `unpack_deltas` gives every delta once, in order, in runs of at most `RUN`, into a
    /// kept buffer of any earlier contents or none, for any width and length; widths over 32
    /// decline.
    #[test]
    fn unpack_deltas_equals_the_values_less_the_reference() {
        for (len, spread) in [
            (0usize, 1i128),
            (1, 1),
            (127, 5),
            (128, 1 << 20),
            (1000, 3),
            (333, 1 << 32),
            (300, 1),
        ] {
            let values: Vec<i128> = (0..len as i128).map(|i| 40 + (i * 7919) % spread).collect();
            let mut bytes = Vec::new();
            encode_for(&values, None, &mut bytes);
            let (block, _) = parse_for(&bytes, len).unwrap();
            let want: Vec<u32> = values
                .iter()
                .map(|&v| (v - block.reference) as u32)
                .collect();
            if block.width > 32 {
                assert!(!block.unpack_deltas(None, |_, _| {}));
                continue;
            }
            for keep in [None, Some(Vec::new()), Some(vec![9u32; 5000])] {
                let mut seen = Vec::new();
                let mut kept = keep.clone();
                assert!(block.unpack_deltas(kept.as_mut(), |base, d| {
                    assert_eq!(base, seen.len());
                    assert!(d.len() <= RUN);
                    seen.extend_from_slice(d);
                }));
                assert_eq!(seen, want, "len {len} spread {spread}");
                if let Some(k) = kept {
                    assert_eq!(k, want);
                }
            }
        }
    }

    /// `to_i32` gives `to_i64`'s values where the width cannot reach past i32, and declines
    /// where it could (values near i32's edge), for any length.
    #[test]
    fn to_i32_equals_to_i64_or_declines() {
        for (values, fits) in [
            ((0..1000).map(|i| i * 7 - 300).collect::<Vec<i128>>(), true),
            (vec![5; 129], true),
            (vec![i32::MIN as i128, 0, 12], true),
            (vec![i32::MAX as i128 - 5, i32::MAX as i128 - 1], false),
        ] {
            let mut out = Vec::new();
            encode_for(&values, None, &mut out);
            let (block, _) = parse_for(&out, values.len()).unwrap();
            let wide: Vec<i32> = block.to_i64().iter().map(|&v| v as i32).collect();
            match block.to_i32() {
                Some(narrow) => {
                    assert!(fits);
                    assert_eq!(narrow, wide);
                }
                None => assert!(!fits),
            }
        }
    }
}
