//! Count-Min and Fast-AGMS rows: a batch of hashes as overlapping windows, hashed and applied
//! row by row (HyperLogLog in the same call, through [`super::hll`]).

use super::common::{read_item, Layout, Target, BATCH};
use super::hll::{hll_buckets_and_ranks, hll_fused, hll_update};
use crate::hash;
use crate::params::Parts;

/// Per-call buffers for one batch of hashes, on the heap (3 × 64 KiB), and the HyperLogLog
/// buckets and ranks of the vectorised pass (40 KiB).
pub(super) struct Scratch {
    pub(super) lo: Vec<u64>,
    pub(super) mid: Vec<u64>,
    pub(super) hi: Vec<u64>,
    pub(super) ranks: Ranks,
}

/// HyperLogLog buckets and ranks of one batch.
pub(super) struct Ranks {
    bucket: Vec<u32>,
    rank: Vec<u8>,
}

impl Scratch {
    pub(super) fn new() -> Self {
        Scratch {
            lo: vec![0; BATCH],
            mid: vec![0; BATCH],
            hi: vec![0; BATCH],
            ranks: Ranks {
                bucket: vec![0; BATCH],
                rank: vec![0; BATCH],
            },
        }
    }
}

/// Hashes little-endian items of `width` bytes (4 or 8) batch by batch and applies them. The
/// hash pass and the min/max pass are separate, branch-free loops so each vectorises.
#[inline(always)]
pub(super) fn hash_and_apply<const VECTOR_LZCNT: bool>(
    target: &mut Target<'_>,
    layout: &Layout,
    parts: Parts,
    scratch: &mut Scratch,
    bytes: &[u8],
    width: usize,
    hash: impl Fn(u64) -> (u64, u64),
) -> Option<(u64, u64)> {
    let read = |item: &[u8]| read_item(item, width);
    let (mut min, mut max) = (u64::MAX, 0u64);
    for batch in bytes.chunks(BATCH * width) {
        let n = batch.len() / width;
        let (lo, mid, hi) = (
            &mut scratch.lo[..n],
            &mut scratch.mid[..n],
            &mut scratch.hi[..n],
        );
        for (((item, l), m), h) in batch
            .chunks_exact(width)
            .zip(lo.iter_mut())
            .zip(mid.iter_mut())
            .zip(hi.iter_mut())
        {
            let (a, b) = hash(read(item));
            *l = a;
            *h = b;
            *m = (a >> 32) | (b << 32);
        }
        for item in batch.chunks_exact(width) {
            let v = read(item);
            min = min.min(v);
            max = max.max(v);
        }
        apply::<VECTOR_LZCNT>(target, layout, parts, lo, mid, hi, &mut scratch.ranks);
    }
    (!bytes.is_empty()).then_some((min, max))
}

/// Updates the chosen sketches from one batch of hashes.
#[inline(always)]
pub(super) fn apply<const VECTOR_LZCNT: bool>(
    target: &mut Target<'_>,
    layout: &Layout,
    parts: Parts,
    lo: &[u64],
    mid: &[u64],
    hi: &[u64],
    ranks: &mut Ranks,
) {
    let n = lo.len();
    let mut windows = Windows {
        lo,
        mid,
        hi,
        extension: Vec::new(),
    };
    if parts.hll && VECTOR_LZCNT {
        // A vectorised pass computes buckets and ranks, then a scalar pass updates registers.
        let (bucket, rank) = (&mut ranks.bucket[..n], &mut ranks.rank[..n]);
        hll_buckets_and_ranks(layout.hll_p, lo, hi, bucket, rank);
        hll_update(target.hll, bucket, rank);
    } else if parts.hll {
        // Without a vector LZCNT that pass is scalar anyway: one fused pass saves the two
        // intermediate arrays (several times faster; `bench/sketch.py` measures it).
        hll_fused(target.hll, layout.hll_p, lo, hi);
    }
    // Count-Min and Fast-AGMS rows, two rows of a kind per pass. The limit is the random
    // read-modify-write of a 16-bit counter: one row per pass ran at ~2.1 cycles per update on
    // a Zen 4, two independent rows interleaved in one pass (four hashes per iteration) at
    // ~1.4. A Fast-AGMS row counts its −1 and +1 updates apart (its hot tier is split by
    // sign, `crate::counters`), so its slice of P + 1 bits, sign bit on top, is the index of
    // the count to increment: the same pass as a Count-Min row of 2^(P+1) counters.
    if parts.cm {
        let (p, rpb) = (layout.cm_p, layout.cm_rows_per_block);
        count_rows(&mut windows, target.cm, layout.cm_rows, p, rpb);
    }
    if parts.agms {
        let (p, rpb) = (layout.agms_p + 1, layout.agms_rows_per_block);
        count_rows(&mut windows, target.agms, layout.agms_rows, p, rpb);
    }
}

/// Increments, in each of `rows` rows of `2^bits` counters, the counter its slice of the hash
/// names: row j's `bits` bits start at bit (j mod k)·bits of block ⌊j / k⌋, k =
/// `rows_per_block`. Two rows per pass.
#[inline(always)]
fn count_rows(
    windows: &mut Windows<'_>,
    counters: &mut [i16],
    rows: usize,
    bits: u32,
    rows_per_block: u32,
) {
    let width = 1usize << bits;
    let mask = width as u64 - 1;
    let place = |row: usize| {
        let row = row as u32;
        (row / rows_per_block, (row % rows_per_block) * bits)
    };
    // A counted loop (not `while`), so that the default layout's rows unroll with constant
    // shifts.
    for pair in 0..rows / 2 {
        let row = 2 * pair;
        let (block_a, offset_a) = place(row);
        let (block_b, offset_b) = place(row + 1);
        windows.prepare(block_a);
        windows.prepare(block_b);
        let (wa, sa) = windows.get(block_a, offset_a, bits);
        let (wb, sb) = windows.get(block_b, offset_b, bits);
        let (ca, cb) = counters[row * width..(row + 2) * width].split_at_mut(width);
        count_pair(ca, cb, wa, sa, wb, sb, mask);
    }
    if rows % 2 == 1 {
        let row = rows - 1;
        let (block, offset) = place(row);
        windows.prepare(block);
        let (words, shift) = windows.get(block, offset, bits);
        let counters = &mut counters[row * width..(row + 1) * width];
        for &w in words {
            let c = &mut counters[((w >> shift) & mask) as usize];
            *c = c.wrapping_add(1);
        }
    }
}

/// One increment in each of two rows per hash: `a` at the slice of `wa` at `sa`, `b` at that
/// of `wb` at `sb` (both `mask + 1` counters long).
#[inline(always)]
fn count_pair(a: &mut [i16], b: &mut [i16], wa: &[u64], sa: u32, wb: &[u64], sb: u32, mask: u64) {
    let (a, b) = (&mut a[..=mask as usize], &mut b[..=mask as usize]);
    let mut one = |x: u64, y: u64| {
        let i = ((x >> sa) & mask) as usize;
        a[i] = a[i].wrapping_add(1);
        let j = ((y >> sb) & mask) as usize;
        b[j] = b[j].wrapping_add(1);
    };
    // Four hashes per iteration, written out: the loop overhead is a fair share of so small
    // a body (unrolled: ~1.4 cycles per update; as a plain loop ~1.7).
    let (xs, ys) = (wa.chunks_exact(UNROLL), wb.chunks_exact(UNROLL));
    let (xr, yr) = (xs.remainder(), ys.remainder());
    for (x, y) in xs.zip(ys) {
        for k in 0..UNROLL {
            one(x[k], y[k]);
        }
    }
    for (&x, &y) in xr.iter().zip(yr) {
        one(x, y);
    }
}

/// Hashes per unrolled iteration of the paired row passes.
const UNROLL: usize = 4;

/// A batch of hashes as three overlapping 64-bit windows per 128-bit block: bits 0..63 (`lo`),
/// 32..95 (`mid`) and 64..127 (`hi`). Any slice of at most 32 bits lies inside one window, so
/// each row reads one word and takes one shift and one mask.
struct Windows<'a> {
    lo: &'a [u64],
    mid: &'a [u64],
    hi: &'a [u64],
    /// Blocks 1.. of the hash stream, as (lo, mid, hi), made only when a row needs them.
    extension: Vec<(Vec<u64>, Vec<u64>, Vec<u64>)>,
}

impl Windows<'_> {
    /// Derives the hash stream's blocks up to `block` if they are not there yet.
    #[inline(always)]
    fn prepare(&mut self, block: u32) {
        let n = self.lo.len();
        while self.extension.len() < block as usize {
            let k = self.extension.len() as u64 + 1;
            let (elo, ehi): (Vec<u64>, Vec<u64>) = (0..n)
                .map(|i| hash::extension_block((self.lo[i], self.hi[i]), k))
                .unzip();
            let emid = elo
                .iter()
                .zip(&ehi)
                .map(|(&l, &h)| (l >> 32) | (h << 32))
                .collect();
            self.extension.push((elo, emid, ehi));
        }
    }

    /// The window holding bits `offset .. offset + width` of block `block` (made by
    /// [`Windows::prepare`]), and the shift that brings them down to bit 0.
    #[inline(always)]
    fn get(&self, block: u32, offset: u32, width: u32) -> (&[u64], u32) {
        let (lo, mid, hi): (&[u64], &[u64], &[u64]) = if block == 0 {
            (self.lo, self.mid, self.hi)
        } else {
            let (elo, emid, ehi) = &self.extension[block as usize - 1];
            (elo, emid, ehi)
        };
        if offset + width <= 64 {
            (lo, offset)
        } else if offset >= 32 && offset + width <= 96 {
            (mid, offset - 32)
        } else {
            (hi, offset - 64)
        }
    }
}
