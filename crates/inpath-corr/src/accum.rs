//! Turning rows into statistics: rows are decoded into `f64` panels of R rows, each full panel
//! goes through the tile kernel, and the kernel's block sums are added to 64-bit integer (or
//! double-double) accumulators that are widened into the exact [`Statistics`] before they
//! could overflow.
//!
//! Accumulator levels for an integer type, with the bounds that keep each one exact:
//!
//! ```text
//! level       type  holds                                       bound
//! kernel      f64   one block of R rows of A-lane x B-lane      R * max_product <= 2^53
//! mid         i64   up to `mid_limit` blocks                    mid_limit * R * max_product <= 2^62
//! statistics  i128  everything (I256 for 64-bit types)          N < 2^63 rows
//! ```
//!
//! For float types the kernel's block sums are added to double-double accumulators instead.

use crate::arch::{
    self, IntAccumulator, Isa, Kernel, Madd16Accumulator, Mid, Path, TileSpec, MAX_NZ, MR,
};
use crate::dtype::Plan;
use crate::stats::{tri_row, Data, Statistics};
use crate::wide::{two_sum, Dd, I256};
use crate::DType;
use inpath_core::isa::Level;
use inpath_core::Result;

/// Panel bytes to aim for: small enough to stay in L2 while the tiles sweep it.
const PANEL_BYTES: usize = 1 << 20;

/// The statistics of rows in progress, through whichever kernels suit the type and CPU.
pub(crate) enum Accumulator {
    /// The `f64` tile kernels (every type).
    Tiles(Box<TileAccumulator>),
    /// The integer kernels (8, 16 and 32-bit integers on AVX-512 with VNNI / IFMA or AMX, 8-bit
    /// integers on AVX2).
    Int(Box<IntAccumulator>),
    /// The AVX2 digit kernel (16 and 32-bit integers, `avx2-i16`).
    Madd16(Box<Madd16Accumulator>),
}

impl Accumulator {
    /// The accumulator for `dtype`: the integer kernels where `kernel` allows them and the CPU
    /// has them (at most at level `cap`), else the `f64` tiles on `isa`.
    pub fn new(dtype: DType, m: usize, kernel: Kernel, cap: Level) -> Accumulator {
        match arch::choose(kernel, dtype, m, cap) {
            Path::Tiles(isa) => Accumulator::Tiles(Box::new(TileAccumulator::new(dtype, m, isa))),
            Path::Avx2I16 => Accumulator::Madd16(Box::new(Madd16Accumulator::new(dtype, m))),
            path => Accumulator::Int(Box::new(IntAccumulator::new(dtype, m, path))),
        }
    }

    /// Adds whole rows: `bytes` holds `rows * M` little-endian items.
    pub fn push_rows(&mut self, bytes: &[u8], stats: &mut Statistics) -> Result<()> {
        match self {
            Accumulator::Tiles(t) => t.push_rows(bytes, stats),
            Accumulator::Int(t) => t.push_rows(bytes, stats),
            Accumulator::Madd16(t) => t.push_rows(bytes, stats),
        }
    }

    /// Ends the input: runs the partial block and brings `stats` up to date.
    pub fn close(&mut self, stats: &mut Statistics) -> Result<()> {
        match self {
            Accumulator::Tiles(t) => t.close(stats),
            Accumulator::Int(t) => t.close(stats),
            Accumulator::Madd16(t) => t.close(stats),
        }
    }
}

/// Rows through the `f64` tile kernel.
pub(crate) struct TileAccumulator {
    dtype: DType,
    plan: Plan,
    isa: Isa,
    m: usize,
    /// Streams padded to a multiple of 8.
    mp: usize,
    /// Rows per block.
    rows: usize,
    lda: usize,
    ldb: usize,
    a: Vec<f64>,
    /// Empty when A and B are the same lanes.
    b: Vec<f64>,
    fill: usize,
    tiles: Vec<TileSpec>,
    /// Start of each A lane's row in the mid arrays.
    mid_off: Vec<usize>,
    mid_int: Vec<i64>,
    mid_hi: Vec<f64>,
    mid_lo: Vec<f64>,
    col_int: Vec<i64>,
    col_hi: Vec<f64>,
    col_lo: Vec<f64>,
    /// Blocks added to the mid accumulators since they were last widened.
    blocks: u64,
    mid_limit: u64,
    /// Rows added since the statistics were last brought up to date.
    pending: u64,
    /// Per-block column sums (exact for integer types: below 2^53).
    col_block: Vec<f64>,
    /// Whether the tiles read group-major copies of the panels (`pa`, `pb`).
    packed: bool,
    pa: Vec<f64>,
    pb: Vec<f64>,
}

/// Panels with rows of at least this many lanes are copied group-major before the tiles run
/// (AVX2 and portable levels): 2 KiB or more between a lane's rows made the tiles' loads
/// alias in L1 (seen with 1024 f64 streams; `bench/corr.py` measures it).
const PACK_MIN_LANES: usize = 256;

/// Whether the tiles at `isa` read group-major panels (the AVX-512 path is left as it was).
fn packs(isa: Isa, lanes: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        return false;
    }
    let _ = isa;
    lanes >= PACK_MIN_LANES
}

/// Copies `rows` rows of `ld` lanes (a multiple of 8) group-major: group `g`'s rows at
/// `g * rows * 8`, 8 lanes each.
#[inline(always)]
fn pack_groups(src: &[f64], ld: usize, rows: usize, dst: &mut [f64]) {
    for g in 0..ld / 8 {
        let out = &mut dst[g * rows * 8..(g + 1) * rows * 8];
        for (r, o) in out.chunks_exact_mut(8).enumerate() {
            o.copy_from_slice(&src[r * ld + g * 8..r * ld + g * 8 + 8]);
        }
    }
}

/// First stream of the 8-lane group holding stream `i`.
fn group_start(i: usize) -> usize {
    i & !7
}

impl TileAccumulator {
    pub fn new(dtype: DType, m: usize, isa: Isa) -> TileAccumulator {
        let plan = dtype.plan();
        let mp = m.div_ceil(8) * 8;
        let lda = plan.a_limbs * mp;
        let ldb = plan.b_limbs * mp;
        let lanes = if plan.shared() { lda } else { lda + ldb };
        let rows = (PANEL_BYTES / (lanes * 8)).clamp(8, plan.max_rows);
        let rows = if dtype.is_float() {
            plan.max_rows
        } else {
            rows
        };
        // Mid rows: A lane p = a*mp + i holds, for each B limb, lanes group_start(i)..mp.
        let mut mid_off = Vec::with_capacity(lda + 1);
        let mut total = 0usize;
        for p in 0..lda {
            mid_off.push(total);
            let i = p % mp;
            total += plan.b_limbs * (mp - group_start(i));
        }
        mid_off.push(total);
        // Tiles: MR A lanes (same limb, streams i0..i0+MR) against every 8-lane B group that
        // holds a stream >= i0, grouped MAX_NZ at a time.
        let mut tiles = Vec::new();
        for a_limb in 0..plan.a_limbs {
            for i0 in (0..m).step_by(MR) {
                let start = group_start(i0);
                let mut groups = Vec::new();
                for b_limb in 0..plan.b_limbs {
                    for c0 in (start..m).step_by(8) {
                        let boff = b_limb * mp + c0;
                        let rel = b_limb * (mp - start) + (c0 - start);
                        // A lanes i0..i0 + 4 in the upper half of their group: the group's
                        // first 4 lanes are below all of them.
                        let skip = c0 == start && i0 % 8 == 4;
                        groups.push((boff, rel, skip));
                    }
                }
                for chunk in groups.chunks(MAX_NZ) {
                    let p0 = a_limb * mp + i0;
                    let mut spec = TileSpec {
                        p0,
                        nz: chunk.len(),
                        boff: [0; MAX_NZ],
                        rel: [0; MAX_NZ],
                        base: [0; MR],
                        skip_lo: 0,
                    };
                    for (i, base) in spec.base.iter_mut().enumerate() {
                        *base = mid_off[p0 + i];
                    }
                    for (z, (boff, r, skip)) in chunk.iter().enumerate() {
                        spec.boff[z] = *boff;
                        spec.rel[z] = *r;
                        spec.skip_lo |= (*skip as u8) << z;
                    }
                    tiles.push(spec);
                }
            }
        }
        let float = dtype.is_float();
        let mid_limit = if float {
            u64::MAX
        } else {
            ((1u64 << 62) / (rows as u64 * plan.max_product)).max(1)
        };
        TileAccumulator {
            dtype,
            plan,
            isa,
            m,
            mp,
            rows,
            lda,
            ldb,
            a: vec![0.0; rows * lda],
            b: if plan.shared() {
                Vec::new()
            } else {
                vec![0.0; rows * ldb]
            },
            fill: 0,
            tiles,
            mid_off,
            mid_int: if float { Vec::new() } else { vec![0; total] },
            mid_hi: if float { vec![0.0; total] } else { Vec::new() },
            mid_lo: if float { vec![0.0; total] } else { Vec::new() },
            col_int: if float { Vec::new() } else { vec![0; lda] },
            col_hi: if float { vec![0.0; lda] } else { Vec::new() },
            col_lo: if float { vec![0.0; lda] } else { Vec::new() },
            blocks: 0,
            mid_limit,
            pending: 0,
            col_block: vec![0.0; lda],
            packed: packs(isa, lda.max(ldb)),
            pa: if packs(isa, lda.max(ldb)) {
                vec![0.0; rows * lda]
            } else {
                Vec::new()
            },
            pb: if packs(isa, lda.max(ldb)) && !plan.shared() {
                vec![0.0; rows * ldb]
            } else {
                Vec::new()
            },
        }
    }

    /// Adds whole rows: `bytes` holds `rows * M` little-endian items.
    pub fn push_rows(&mut self, bytes: &[u8], stats: &mut Statistics) -> Result<()> {
        let isa = self.isa;
        // The closure must be inlined into the dispatch's AVX2 / AVX-512 function, or its loops
        // are compiled for the baseline ISA.
        arch::dispatch(
            isa,
            #[inline(always)]
            || self.push_rows_body(bytes, stats),
        )
    }

    #[inline(always)]
    fn push_rows_body(&mut self, mut bytes: &[u8], stats: &mut Statistics) -> Result<()> {
        let row_bytes = self.m * self.dtype.width();
        debug_assert_eq!(bytes.len() % row_bytes, 0);
        while !bytes.is_empty() {
            let n = (self.rows - self.fill).min(bytes.len() / row_bytes);
            let (now, rest) = bytes.split_at(n * row_bytes);
            self.decode(now, n);
            self.fill += n;
            bytes = rest;
            if self.fill == self.rows {
                self.block(stats)?;
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn decode(&mut self, src: &[u8], n: usize) {
        let (m, mp, lda, ldb, fill) = (self.m, self.mp, self.lda, self.ldb, self.fill);
        let w = self.dtype.width();
        let a = &mut self.a[fill * lda..(fill + n) * lda];
        let rows = src.chunks_exact(m * w);
        match self.dtype {
            DType::U8 => plain::<1>(rows, a, lda, |b| b[0] as f64),
            DType::I8 => plain::<1>(rows, a, lda, |b| b[0] as i8 as f64),
            DType::U16 => plain::<2>(rows, a, lda, |b| u16::from_le_bytes(b) as f64),
            DType::I16 => plain::<2>(rows, a, lda, |b| i16::from_le_bytes(b) as f64),
            DType::F32 => plain::<4>(rows, a, lda, |b| f32::from_le_bytes(b) as f64),
            DType::F64 => plain::<8>(rows, a, lda, f64::from_le_bytes),
            DType::U32 => {
                let bpanel = &mut self.b[fill * ldb..(fill + n) * ldb];
                halves(rows, a, lda, bpanel, ldb, mp, |b| {
                    u32::from_le_bytes(b) as i64
                });
            }
            DType::I32 => {
                let bpanel = &mut self.b[fill * ldb..(fill + n) * ldb];
                halves(rows, a, lda, bpanel, ldb, mp, |b| {
                    i32::from_le_bytes(b) as i64
                });
            }
            DType::U64 | DType::I64 => {
                let signed = self.dtype.is_signed();
                let bits = self.plan.limb_bits;
                let mask = (1i128 << bits) - 1;
                for (row, ar) in rows.zip(a.chunks_exact_mut(lda)) {
                    for (i, item) in row.chunks_exact(8).enumerate() {
                        let mut b8 = [0u8; 8];
                        b8.copy_from_slice(item);
                        let v = if signed {
                            i64::from_le_bytes(b8) as i128
                        } else {
                            u64::from_le_bytes(b8) as i128
                        };
                        ar[i] = (v & mask) as f64;
                        ar[mp + i] = ((v >> bits) & mask) as f64;
                        ar[2 * mp + i] = (v >> (2 * bits)) as f64;
                    }
                }
            }
        }
    }

    /// Runs the kernel over the current block and adds its sums to the mid accumulators.
    #[inline(always)]
    fn block(&mut self, stats: &mut Statistics) -> Result<()> {
        let rows = self.fill;
        if rows == 0 {
            return Ok(());
        }
        let b: &[f64] = if self.b.is_empty() { &self.a } else { &self.b };
        let float = self.dtype.is_float();
        let mut mid = if float {
            Mid::Float {
                hi: &mut self.mid_hi,
                lo: &mut self.mid_lo,
            }
        } else {
            Mid::Int(&mut self.mid_int)
        };
        if self.packed {
            // Group-major copies: each 8-lane group's rows contiguous, so a tile reads its
            // lanes from consecutive lines instead of lines a whole (aliasing) row apart.
            pack_groups(&self.a, self.lda, rows, &mut self.pa);
            if !self.b.is_empty() {
                pack_groups(&self.b, self.ldb, rows, &mut self.pb);
            }
            let pb: &[f64] = if self.b.is_empty() {
                &self.pa
            } else {
                &self.pb
            };
            for spec in &self.tiles {
                let mut packed = *spec;
                packed.p0 = (spec.p0 / 8) * rows * 8 + spec.p0 % 8;
                for z in 0..spec.nz {
                    packed.boff[z] = (spec.boff[z] / 8) * rows * 8;
                }
                arch::tile(self.isa, &self.pa, 8, pb, 8, &packed, rows, &mut mid);
            }
        } else {
            for spec in &self.tiles {
                arch::tile(
                    self.isa, &self.a, self.lda, b, self.ldb, spec, rows, &mut mid,
                );
            }
        }
        // Column sums (the per-stream sums), in row order, in f64: exact for integer types
        // (a block's column sum stays below 2^53).
        let a = &self.a[..rows * self.lda];
        let sums = &mut self.col_block;
        sums.iter_mut().for_each(|s| *s = 0.0);
        for row in a.chunks_exact(self.lda) {
            for (s, v) in sums.iter_mut().zip(row) {
                *s += *v;
            }
        }
        if float {
            add_dd(&mut self.col_hi, &mut self.col_lo, sums);
        } else {
            for (d, s) in self.col_int.iter_mut().zip(sums.iter()) {
                *d += *s as i64;
            }
        }
        self.pending += rows as u64;
        self.fill = 0;
        self.blocks += 1;
        if self.blocks >= self.mid_limit {
            self.widen(stats)?;
        }
        Ok(())
    }

    /// Ends the input: runs the partial block and brings `stats` up to date.
    pub fn close(&mut self, stats: &mut Statistics) -> Result<()> {
        let isa = self.isa;
        arch::dispatch(
            isa,
            #[inline(always)]
            || self.block(stats),
        )?;
        self.widen(stats)
    }

    /// Adds the mid accumulators into `stats` and clears them.
    fn widen(&mut self, stats: &mut Statistics) -> Result<()> {
        let (m, mp) = (self.m, self.mp);
        let plan = self.plan;
        let a_bits = plan.limb_bits_a();
        let b_bits = plan.limb_bits;
        let overflow = || inpath_core::Error::State("statistics overflow".into());
        let mid_at = |p: usize, b_limb: usize, j: usize| {
            let start = group_start(p % mp);
            self.mid_off[p] + b_limb * (mp - start) + (j - start)
        };
        match &mut stats.data {
            Data::Int { sums, products } => {
                for (i, s) in sums.iter_mut().enumerate() {
                    let v = self.col_int[i] as i128;
                    *s = s.checked_add(v).ok_or_else(overflow)?;
                }
                for i in 0..m {
                    let row = tri_row(m, i);
                    for j in i..m {
                        let mut v = 0i128;
                        for b_limb in 0..plan.b_limbs {
                            v += (self.mid_int[mid_at(i, b_limb, j)] as i128)
                                << (b_limb as u32 * b_bits);
                        }
                        let d = &mut products[row + j - i];
                        *d = d.checked_add(v).ok_or_else(overflow)?;
                    }
                }
            }
            Data::Wide { sums, products } => {
                for (i, s) in sums.iter_mut().enumerate() {
                    let mut v = 0i128;
                    for a_limb in 0..plan.a_limbs {
                        v += (self.col_int[a_limb * mp + i] as i128) << (a_limb as u32 * a_bits);
                    }
                    *s = s.checked_add(v).ok_or_else(overflow)?;
                }
                // Limb products by weight 2^(bits * (a + b)); each diagonal sum fits an i128.
                let diagonals = plan.a_limbs + plan.b_limbs - 1;
                for i in 0..m {
                    let row = tri_row(m, i);
                    for j in i..m {
                        let mut total = I256::ZERO;
                        for k in 0..diagonals {
                            let mut diag = 0i128;
                            for a_limb in 0..plan.a_limbs {
                                if k >= a_limb && k - a_limb < plan.b_limbs {
                                    diag += self.mid_int[mid_at(a_limb * mp + i, k - a_limb, j)]
                                        as i128;
                                }
                            }
                            let term = I256::mul_i128(diag, 1i128 << (k as u32 * b_bits));
                            total = total.checked_add(term).ok_or_else(overflow)?;
                        }
                        let d = &mut products[row + j - i];
                        *d = d.checked_add(total).ok_or_else(overflow)?;
                    }
                }
            }
            Data::Float { sums, products } => {
                for (i, s) in sums.iter_mut().enumerate() {
                    *s = *s
                        + Dd {
                            hi: self.col_hi[i],
                            lo: self.col_lo[i],
                        };
                }
                for i in 0..m {
                    let row = tri_row(m, i);
                    for j in i..m {
                        let at = mid_at(i, 0, j);
                        let d = &mut products[row + j - i];
                        *d = *d
                            + Dd {
                                hi: self.mid_hi[at],
                                lo: self.mid_lo[at],
                            };
                    }
                }
            }
        }
        stats.add_count(self.pending)?;
        self.pending = 0;
        self.blocks = 0;
        self.mid_int.iter_mut().for_each(|v| *v = 0);
        self.mid_hi.iter_mut().for_each(|v| *v = 0.0);
        self.mid_lo.iter_mut().for_each(|v| *v = 0.0);
        self.col_int.iter_mut().for_each(|v| *v = 0);
        self.col_hi.iter_mut().for_each(|v| *v = 0.0);
        self.col_lo.iter_mut().for_each(|v| *v = 0.0);
        Ok(())
    }
}

/// Decodes rows of single-lane items of `W` bytes into the A panel.
#[inline(always)]
fn plain<'a, const W: usize>(
    rows: impl Iterator<Item = &'a [u8]>,
    a: &mut [f64],
    lda: usize,
    f: impl Fn([u8; W]) -> f64,
) {
    for (row, ar) in rows.zip(a.chunks_exact_mut(lda)) {
        let (items, _) = row.as_chunks::<W>();
        for (d, item) in ar.iter_mut().zip(items) {
            *d = f(*item);
        }
    }
}

/// Decodes rows of 32-bit items: the value into the A panel, its low and high 16-bit halves
/// (the high half keeping the sign) into the B panel's two limb lanes.
#[inline(always)]
fn halves<'a>(
    rows: impl Iterator<Item = &'a [u8]>,
    a: &mut [f64],
    lda: usize,
    b: &mut [f64],
    ldb: usize,
    mp: usize,
    value: impl Fn([u8; 4]) -> i64,
) {
    for ((row, ar), br) in rows
        .zip(a.chunks_exact_mut(lda))
        .zip(b.chunks_exact_mut(ldb))
    {
        let (lo, hi) = br.split_at_mut(mp);
        // Three simple passes vectorise where one interleaved pass does not.
        let (items, _) = row.as_chunks::<4>();
        for (x, item) in ar.iter_mut().zip(items) {
            *x = value(*item) as f64;
        }
        for (l, item) in lo.iter_mut().zip(items) {
            *l = (value(*item) & 0xffff) as f64;
        }
        for (h, item) in hi.iter_mut().zip(items) {
            *h = (value(*item) >> 16) as f64;
        }
    }
}

/// Adds `src` into double-double accumulators `(hi, lo)` with TwoSum.
#[inline(always)]
fn add_dd(hi: &mut [f64], lo: &mut [f64], src: &[f64]) {
    for ((h, l), s) in hi.iter_mut().zip(lo.iter_mut()).zip(src) {
        let (sum, err) = two_sum(*h, *s);
        *h = sum;
        *l += err;
    }
}
