//! The AVX2 integer kernel for 16 and 32-bit items (`avx2-i16`): every item is cut into 16-bit
//! digits (one for 16-bit items, two for 32-bit ones), each digit a *digit stream*, and the
//! sums of products of every pair of digit streams are formed with `vpmaddwd` on pairs of rows
//! ("duos", as in the 8-bit `avx2-i8` kernel): a 32-bit lane holds one digit stream's digits
//! of rows 2d and 2d + 1, so one instruction adds two rows of products for 8 digit-stream
//! pairs. The item statistics are put back together from the digit sums exactly (in `i128`).
//!
//! **Digits.** `vpmaddwd` multiplies signed 16-bit integers, so each item's bits are XORed
//! with a per-type mask that turns every 16-bit half into a signed digit: for a u32 item
//! `x = 2^16 h + l`, the digits are `0x7FFF - h` and `0x7FFF - l` (the mask `0x7FFF7FFF`), and
//! `x = K - y` with `y = 2^16 d_hi + d_lo` and `K = 0x7FFF7FFF`; i32 (mask `0xFFFF7FFF`,
//! `K = -32769`), u16 (`0x7FFF`, `K = 32767`) and i16 (`0xFFFF`, `K = -1`) alike. The
//! reversed digits put the one extreme digit, -32768, on the all-ones bit pattern, which
//! real data rarely repeats (see below).
//!
//! **Exact 32-bit lanes.** A product of two digits is at most 2^30 in magnitude, and a duo's
//! pair of products lies in `[-2^31 + 2^16, 2^31]`: a 32-bit lane overflows after one
//! instruction, and only when all four digits are -32768 (the result 2^31 wraps to -2^31).
//! So each register accumulator is a pair: `lo`, the wrapping sum of the results (exact modulo
//! 2^32), and `hi`, the sum of each result shifted right by 16 (its floor divided by 2^16).
//! Over `n` duos the true sum is `S = 2^16 hi + e` with `0 <= e < n 2^16`, and
//! `e = (lo - 2^16 hi) mod 2^32` as long as `n <= 2^16`: both halves stay exact for 65,536
//! rows, when they are widened into the statistics.
//!
//! Where a duo of all-ones digits could wrap (the packer sees a lane equal to `0x80008000`
//! somewhere in the panel), the panel runs the *safe* tiles instead: each result `m` is biased
//! to `u = m + 2^31 - 2^16`, which is in `[0, 2^32)` as an unsigned integer for every
//! possible `m`, and `hi` adds `u >> 16` (logical); subtracting the bias afterwards gives the
//! same `lo` and `hi` as the fast tiles, one more instruction per product. Both produce the
//! exact sums, so every panel's choice leaves the statistics unchanged.
//!
//! Tiles, panels and mid sums are laid out as in the AVX-512 integer kernels
//! (`int.rs`): MR broadcast digit streams x NZ 8-lane groups, upper triangle by group.
#![allow(unsafe_code)]
// Kernels index small fixed arrays by lane; iterators would hide the register layout.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use crate::stats::{tri_row, Data, Statistics};
use crate::DType;
use inpath_core::{Error, Result};

/// The duo panel, swept from L1.
const PANEL_BYTES: usize = 1 << 14;
/// Rows the mid sums take before they are widened: at most 2^15 + 1 duos, well inside the
/// 2^16 that keeps `lo` and `hi` exact.
const BATCH_ROWS: u64 = 1 << 16;
/// Tile shapes: MR broadcast digit streams x NZ lane groups, 2 * MR * NZ accumulators. Two
/// groups per tile halve the broadcasts (which share the vector ports with the shifts on some
/// cores);
/// a group left over takes 4 broadcasts.
const MR2: usize = 2;
const MR1: usize = 4;
/// The most broadcast streams a tile takes.
const MAX_MR: usize = 4;
/// Lane groups per tile, at most.
const NZ_MAX: usize = 2;
/// The lane value that marks a possible wrap: both rows' digits -32768.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const HAZARD: u32 = 0x8000_8000;

/// One tile: broadcast digit streams `i0..i0 + mr` against the `nz` lane groups from `c0`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
struct Tile {
    i0: usize,
    c0: usize,
    mr: usize,
    nz: usize,
    /// Where each broadcast stream's sums for lane `c0` are in the mid sums (its next groups
    /// follow).
    offs: [usize; MAX_MR],
}

/// Statistics of 16 and 32-bit rows through `vpmaddwd` on 16-bit digits.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Madd16Accumulator {
    m: usize,
    /// Item width in bytes (2 or 4).
    width: usize,
    /// XOR mask that turns an item's halves into signed digits (`x = k - y`).
    mask: u32,
    k: i128,
    /// Digit lanes: streams padded to 8 (16-bit) or 8 streams' two digits per 16 lanes.
    mp: usize,
    /// Panel capacity in rows (even).
    rows: usize,
    /// Rows packed in the panel (even).
    fill: usize,
    /// `rows / 2 * mp` duo lanes.
    panel: Vec<u32>,
    /// Whether a lane of the panel equals `HAZARD`.
    hazard: bool,
    /// Tests: run the safe tiles on every panel.
    pub(super) force_safe: bool,
    /// A row waiting for its partner.
    stage: Vec<u8>,
    staged: bool,
    tiles: Vec<Tile>,
    /// Start of each digit lane's row of mid sums (which begins at its group's first lane).
    mid_off: Vec<usize>,
    mid_lo: Vec<i32>,
    mid_hi: Vec<i32>,
    /// Per-lane sums of the digits since the last widening.
    col: Vec<i64>,
    /// Input rows since the last widening.
    batch: u64,
}

/// The digit lane of stream `s`'s digit `d` (0: low half, 1: high half of a 32-bit item).
fn lane(width: usize, s: usize, d: usize) -> usize {
    if width == 2 {
        s
    } else {
        16 * (s / 8) + if d == 1 { s % 8 } else { 8 + s % 8 }
    }
}

impl Madd16Accumulator {
    /// A new accumulator; only build it where `arch::avx2_i16` said the CPU runs it.
    pub fn new(dtype: DType, m: usize) -> Madd16Accumulator {
        let (width, mask, k) = match dtype {
            DType::U16 => (2, 0x7FFF, 0x7FFF),
            DType::I16 => (2, 0xFFFF, -1),
            DType::U32 => (4, 0x7FFF_7FFF, 0x7FFF_7FFF),
            DType::I32 => (4, 0xFFFF_7FFF, -32769),
            _ => unreachable!("avx2-i16 takes 16 and 32-bit integers"),
        };
        let mp = if width == 2 {
            m.div_ceil(8) * 8
        } else {
            m.div_ceil(8) * 16
        };
        let rows = ((PANEL_BYTES / (2 * mp)).clamp(64, 4096)) & !1;
        // Mid rows: lane p holds its group's first lane .. mp.
        let mut mid_off = Vec::with_capacity(mp + 1);
        let mut total = 0usize;
        for p in 0..mp {
            mid_off.push(total);
            total += mp - (p & !7);
        }
        mid_off.push(total);
        let mut real = vec![false; mp];
        for s in 0..m {
            for d in 0..width / 2 {
                real[lane(width, s, d)] = true;
            }
        }
        let mut tiles = Vec::new();
        for g in 0..mp / 8 {
            let groups: Vec<usize> = (8 * g..mp)
                .step_by(8)
                .filter(|&c0| real[c0..c0 + 8].iter().any(|&r| r))
                .collect();
            for chunk in groups.chunks(NZ_MAX) {
                let (nz, c0) = (chunk.len(), chunk[0]);
                // Two groups must be adjacent (their sums are contiguous in the mid rows).
                let (nz, rest) = if nz == 2 && chunk[1] != c0 + 8 {
                    (1, Some(chunk[1]))
                } else {
                    (nz, None)
                };
                for (c0, nz) in std::iter::once((c0, nz)).chain(rest.map(|c| (c, 1))) {
                    let mr = if nz == 2 { MR2 } else { MR1 };
                    for i0 in (8 * g..8 * g + 8).step_by(mr) {
                        if real[i0..i0 + mr].iter().any(|&r| r) {
                            let mut offs = [0; MAX_MR];
                            for (i, o) in offs.iter_mut().enumerate().take(mr) {
                                *o = mid_off[i0 + i] + c0 - 8 * g;
                            }
                            tiles.push(Tile {
                                i0,
                                c0,
                                mr,
                                nz,
                                offs,
                            });
                        }
                    }
                }
            }
        }
        Madd16Accumulator {
            m,
            width,
            mask,
            k,
            mp,
            rows,
            fill: 0,
            panel: vec![0; rows / 2 * mp],
            hazard: false,
            force_safe: false,
            stage: vec![0; m * width],
            staged: false,
            tiles,
            mid_off,
            mid_lo: vec![0; total],
            mid_hi: vec![0; total],
            col: vec![0; mp],
            batch: 0,
        }
    }

    /// Adds whole rows: `bytes` holds `rows * M` little-endian items.
    pub fn push_rows(&mut self, mut bytes: &[u8], stats: &mut Statistics) -> Result<()> {
        let row = self.m * self.width;
        debug_assert_eq!(bytes.len() % row, 0);
        while !bytes.is_empty() {
            if self.staged {
                // Complete the staged duo with the next row.
                let mut duo = std::mem::take(&mut self.stage);
                duo.extend_from_slice(&bytes[..row]);
                bytes = &bytes[row..];
                self.pack(&duo, 1);
                duo.truncate(row);
                self.stage = duo;
                self.staged = false;
            } else if bytes.len() < 2 * row {
                self.stage.copy_from_slice(&bytes[..row]);
                self.staged = true;
                bytes = &bytes[row..];
            } else {
                let duos = ((self.rows - self.fill) / 2).min(bytes.len() / (2 * row));
                let (now, rest) = bytes.split_at(duos * 2 * row);
                self.pack(now, duos);
                bytes = rest;
            }
            if self.fill == self.rows {
                self.flush(stats, self.fill, bytes)?;
            }
        }
        Ok(())
    }

    /// Packs `duos` pairs of rows from `src` into the panel.
    fn pack(&mut self, src: &[u8], duos: usize) {
        assert!(src.len() >= duos * 2 * self.m * self.width);
        assert!(self.fill / 2 + duos <= self.rows / 2);
        // SAFETY: `new` is only called where arch::avx2_i16 detected AVX2; the bounds are
        // checked above.
        unsafe { x86::pack(src, duos, self) };
        self.fill += 2 * duos;
    }

    /// Ends the input: runs the partial panel and brings `stats` up to date.
    pub fn close(&mut self, stats: &mut Statistics) -> Result<()> {
        if self.staged {
            // The last row: a duo whose second row is zero digits.
            let mut duo = std::mem::take(&mut self.stage);
            let row = duo.len();
            duo.resize(2 * row, 0);
            let at = self.fill / 2 * self.mp;
            self.pack(&duo, 1);
            // The packer XORed the zero row with the mask: clear its halves again, and take
            // its digits back out of the column sums.
            for s in 0..self.m {
                for d in 0..self.width / 2 {
                    let p = lane(self.width, s, d);
                    let v = &mut self.panel[at + p];
                    self.col[p] -= (*v >> 16) as u16 as i16 as i64;
                    *v &= 0xFFFF;
                }
            }
            duo.truncate(row);
            self.stage = duo;
            self.staged = false;
            self.flush(stats, self.fill - 1, &[])?;
        } else {
            self.flush(stats, self.fill, &[])?;
        }
        self.widen(stats)
    }

    /// Runs the tiles over the panel (`fill` rows, `real` of them input rows); `next` is the
    /// input that follows, prefetched while the tiles run.
    fn flush(&mut self, stats: &mut Statistics, real: usize, next: &[u8]) -> Result<()> {
        if self.fill == 0 {
            return Ok(());
        }
        if self.batch + real as u64 > BATCH_ROWS {
            self.widen(stats)?;
        }
        let ahead = next.len().min(self.rows * self.m * self.width);
        // SAFETY: as in `pack`; the panel holds `fill / 2` packed duos.
        unsafe { x86::sweep(self, &next[..ahead]) };
        self.batch += real as u64;
        self.fill = 0;
        self.hazard = false;
        Ok(())
    }

    /// The exact sum of products of digit lanes `p` and `q` since the last widening.
    fn digit_pair(&self, p: usize, q: usize) -> i64 {
        let (p, q) = if p & !7 <= q & !7 { (p, q) } else { (q, p) };
        let at = self.mid_off[p] + q - (p & !7);
        let (lo, hi) = (self.mid_lo[at], self.mid_hi[at]);
        // S = 2^16 hi + e, e = (lo - 2^16 hi) mod 2^32 (see the module notes).
        let e = (lo as u32).wrapping_sub((hi as u32) << 16);
        ((hi as i64) << 16) + e as i64
    }

    /// Adds the mid sums into `stats` and clears them.
    fn widen(&mut self, stats: &mut Statistics) -> Result<()> {
        if self.batch == 0 {
            return Ok(());
        }
        let (m, k, n) = (self.m, self.k, self.batch as i128);
        let digits = self.width / 2;
        let overflow = || Error::State("statistics overflow".into());
        let Data::Int { sums, products } = &mut stats.data else {
            return Err(Error::State(
                "integer kernels need integer statistics".into(),
            ));
        };
        // y = sum of 2^16d digit d; x = k - y.
        let t: Vec<i128> = (0..m)
            .map(|s| {
                (0..digits)
                    .map(|d| (self.col[lane(self.width, s, d)] as i128) << (16 * d))
                    .sum()
            })
            .collect();
        for (s, ts) in sums.iter_mut().zip(&t) {
            *s = s.checked_add(n * k - ts).ok_or_else(overflow)?;
        }
        for i in 0..m {
            let row = tri_row(m, i);
            for j in i..m {
                let mut yy = 0i128;
                for d in 0..digits {
                    for e in 0..digits {
                        let s = self.digit_pair(lane(self.width, i, d), lane(self.width, j, e));
                        yy += (s as i128) << (16 * (d + e));
                    }
                }
                let p = n * k * k - k * (t[i] + t[j]) + yy;
                let dst = &mut products[row + j - i];
                *dst = dst.checked_add(p).ok_or_else(overflow)?;
            }
        }
        stats.add_count(self.batch)?;
        self.batch = 0;
        self.mid_lo.iter_mut().for_each(|v| *v = 0);
        self.mid_hi.iter_mut().for_each(|v| *v = 0);
        self.col.iter_mut().for_each(|v| *v = 0);
        Ok(())
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Madd16Accumulator, HAZARD, MAX_MR, MR1, MR2};
    use std::arch::x86_64::*;

    /// Packs `duos` pairs of rows from `src` into the panel: lane `p` of duo `d` holds digit
    /// lane `p` of row 2d in its low 16 bits and of row 2d + 1 in its high 16 bits (padding
    /// lanes zero); adds the digits to the column sums and notes any `HAZARD` lane.
    ///
    /// # Safety
    /// The CPU must support AVX2; `src` must hold `2 * duos` rows and the panel room for
    /// `duos` more duos.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack(src: &[u8], duos: usize, acc: &mut Madd16Accumulator) {
        let (m, mp, w) = (acc.m, acc.mp, acc.width);
        let row = m * w;
        let d0 = acc.fill / 2;
        let ones = _mm256_set1_epi16(1);
        let hazard = _mm256_set1_epi32(HAZARD as i32);
        let mut seen = _mm256_setzero_si256();
        // SAFETY: every load reads 32 bytes inside `src` (a partial block is copied to a
        // zeroed buffer first); every store is inside the panel (mp lanes per duo) and the
        // column sums (mp).
        unsafe {
            let out = acc.panel.as_mut_ptr().add(d0 * mp);
            // 8 streams (32-bit) or 16 streams (16-bit) per block: 32 bytes of a row.
            for b in 0..row.div_ceil(32) {
                let at = 32 * b;
                let k = (row - at).min(32);
                // The mask on real items only, so padding lanes stay zero.
                let mut mbuf = [0u32; 8];
                for (i, v) in mbuf.iter_mut().enumerate() {
                    if w == 4 && 4 * i < k {
                        *v = acc.mask;
                    } else if w == 2 {
                        let lo = if 4 * i < k { acc.mask & 0xFFFF } else { 0 };
                        let hi = if 4 * i + 2 < k { acc.mask << 16 } else { 0 };
                        *v = lo | hi;
                    }
                }
                let mask = _mm256_loadu_si256(mbuf.as_ptr().cast());
                let load = |p: *const u8| -> (__m256i, __m256i) {
                    if k == 32 {
                        (
                            _mm256_loadu_si256(p.cast()),
                            _mm256_loadu_si256(p.add(row).cast()),
                        )
                    } else {
                        let mut buf = [0u8; 64];
                        buf[..k].copy_from_slice(std::slice::from_raw_parts(p, k));
                        buf[32..32 + k].copy_from_slice(std::slice::from_raw_parts(p.add(row), k));
                        (
                            _mm256_loadu_si256(buf.as_ptr().cast()),
                            _mm256_loadu_si256(buf.as_ptr().add(32).cast()),
                        )
                    }
                };
                // Output lanes of this block: 16-bit: streams 16b.. (two groups, the second
                // only if inside mp); 32-bit: the high digits' group then the low digits'.
                let (o0, o1) = (16 * b, 16 * b + 8);
                let two = o1 < mp;
                let mut sum0 = _mm256_setzero_si256();
                let mut sum1 = _mm256_setzero_si256();
                for d in 0..duos {
                    let (a, c) = load(src.as_ptr().add(2 * d * row + at));
                    let a = _mm256_xor_si256(a, mask);
                    let c = _mm256_xor_si256(c, mask);
                    let (v0, v1) = if w == 4 {
                        let hi = _mm256_blend_epi16::<0xAA>(_mm256_srli_epi32::<16>(a), c);
                        let lo = _mm256_blend_epi16::<0xAA>(a, _mm256_slli_epi32::<16>(c));
                        (hi, lo)
                    } else {
                        let lo = _mm256_unpacklo_epi16(a, c);
                        let hi = _mm256_unpackhi_epi16(a, c);
                        (
                            _mm256_permute2x128_si256::<0x20>(lo, hi),
                            _mm256_permute2x128_si256::<0x31>(lo, hi),
                        )
                    };
                    let dst = out.add(d * mp);
                    _mm256_storeu_si256(dst.add(o0).cast(), v0);
                    sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(v0, ones));
                    seen = _mm256_or_si256(seen, _mm256_cmpeq_epi32(v0, hazard));
                    if two {
                        _mm256_storeu_si256(dst.add(o1).cast(), v1);
                        sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(v1, ones));
                        seen = _mm256_or_si256(seen, _mm256_cmpeq_epi32(v1, hazard));
                    }
                }
                // At most 2,048 duos * 2^16 per lane: the 32-bit sums are exact.
                let add = |c: *mut i64, v: __m256i| {
                    let lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
                    let hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(v));
                    let p0 = c.cast::<__m256i>();
                    let p1 = c.add(4).cast::<__m256i>();
                    _mm256_storeu_si256(p0, _mm256_add_epi64(_mm256_loadu_si256(p0), lo));
                    _mm256_storeu_si256(p1, _mm256_add_epi64(_mm256_loadu_si256(p1), hi));
                };
                add(acc.col.as_mut_ptr().add(o0), sum0);
                if two {
                    add(acc.col.as_mut_ptr().add(o1), sum1);
                }
            }
        }
        acc.hazard |= _mm256_movemask_epi8(seen) != 0;
    }

    /// Runs every tile over the panel, prefetching `next` (the input that follows) into L1.
    ///
    /// # Safety
    /// The CPU must support AVX2; the panel holds `fill / 2` duos.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sweep(acc: &mut Madd16Accumulator, next: &[u8]) {
        let duos = acc.fill / 2;
        let (p, mp) = (acc.panel.as_ptr(), acc.mp);
        let (lo, hi) = (acc.mid_lo.as_mut_ptr(), acc.mid_hi.as_mut_ptr());
        let lines = next.len() / 64;
        let per = lines.div_ceil(acc.tiles.len());
        for (k, t) in acc.tiles.iter().enumerate() {
            let l0 = (k * per).min(lines);
            let pf = (next.as_ptr().wrapping_add(64 * l0), per.min(lines - l0));
            // SAFETY: the tiles stay inside the panel (`duos * mp` lanes) and the mid sums
            // (`mid_off` rows per lane); the prefetches stay inside `next`.
            unsafe {
                let safe = acc.hazard || acc.force_safe;
                let args = (p, mp, duos, t.i0, t.c0, lo, hi, &t.offs, pf);
                match (t.mr, t.nz, safe) {
                    (MR2, 2, false) => tile::<MR2, 2, false>(args),
                    (MR2, 2, true) => tile::<MR2, 2, true>(args),
                    (MR1, 1, false) => tile::<MR1, 1, false>(args),
                    (MR1, 1, true) => tile::<MR1, 1, true>(args),
                    _ => unreachable!("tile shapes come from Madd16Accumulator::new"),
                }
            }
        }
    }

    type TileArgs<'a> = (
        *const u32,
        usize,
        usize,
        usize,
        usize,
        *mut i32,
        *mut i32,
        &'a [usize; MAX_MR],
        (*const u8, usize),
    );

    /// MR broadcast digit streams x NZ groups of 8 lanes over `duos` duos. `SAFE`: bias each
    /// result so that a wrapped 2^31 is still read right (see the module notes).
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile<const MR: usize, const NZ: usize, const SAFE: bool>(
        (p, mp, duos, i0, c0, mid_lo, mid_hi, offs, (pf, lines)): TileArgs,
    ) {
        const BIAS: i32 = i32::MAX - 0xFFFF; // 2^31 - 2^16
        unsafe {
            let bias = _mm256_set1_epi32(BIAS);
            let mut lo = [[_mm256_setzero_si256(); NZ]; MR];
            let mut hi = [[_mm256_setzero_si256(); NZ]; MR];
            for q in 0..duos {
                if q < lines {
                    _mm_prefetch::<_MM_HINT_T0>(pf.add(64 * q).cast());
                }
                let row = p.add(q * mp);
                let mut v = [_mm256_setzero_si256(); NZ];
                for z in 0..NZ {
                    v[z] = _mm256_loadu_si256(row.add(c0 + 8 * z).cast());
                }
                for i in 0..MR {
                    let b = _mm256_set1_epi32(*row.add(i0 + i) as i32);
                    for z in 0..NZ {
                        let m = _mm256_madd_epi16(v[z], b);
                        if SAFE {
                            let u = _mm256_add_epi32(m, bias);
                            lo[i][z] = _mm256_add_epi32(lo[i][z], u);
                            hi[i][z] = _mm256_add_epi32(hi[i][z], _mm256_srli_epi32::<16>(u));
                        } else {
                            lo[i][z] = _mm256_add_epi32(lo[i][z], m);
                            hi[i][z] = _mm256_add_epi32(hi[i][z], _mm256_srai_epi32::<16>(m));
                        }
                    }
                }
            }
            // Safe tiles: take the bias back out, n * (2^31 - 2^16) from lo (mod 2^32) and
            // n * (2^15 - 1) from hi.
            let (dl, dh) = if SAFE {
                (
                    _mm256_set1_epi32((duos as i32).wrapping_mul(BIAS)),
                    _mm256_set1_epi32(duos as i32 * ((1 << 15) - 1)),
                )
            } else {
                (_mm256_setzero_si256(), _mm256_setzero_si256())
            };
            for i in 0..MR {
                for z in 0..NZ {
                    let pl = mid_lo.add(offs[i] + 8 * z).cast::<__m256i>();
                    let ph = mid_hi.add(offs[i] + 8 * z).cast::<__m256i>();
                    let l = _mm256_sub_epi32(lo[i][z], dl);
                    let h = _mm256_sub_epi32(hi[i][z], dh);
                    _mm256_storeu_si256(pl, _mm256_add_epi32(_mm256_loadu_si256(pl), l));
                    _mm256_storeu_si256(ph, _mm256_add_epi32(_mm256_loadu_si256(ph), h));
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::Madd16Accumulator;
    pub(super) unsafe fn pack(_: &[u8], _: usize, _: &mut Madd16Accumulator) {
        unreachable!("the avx2-i16 kernel is x86-64 only")
    }
    pub(super) unsafe fn sweep(_: &mut Madd16Accumulator, _: &[u8]) {
        unreachable!("the avx2-i16 kernel is x86-64 only")
    }
}
