//! Exact integer kernels for 8, 16 and 32-bit items on AVX-512: the products are formed and
//! summed in integer arithmetic, so no value is split into limbs and no block has to stop at
//! 2^53 the way the `f64` tile kernel's blocks do.
//!
//! - **8-bit: VNNI.** `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds each
//!   group of four products into a 32-bit lane. Rows are packed four at a time so that a lane's
//!   four bytes are one stream's items in four consecutive rows ("quads"); a lane of stream `j`
//!   times a broadcast of stream `i` then adds four rows of `x_i * x_j` per instruction, 64
//!   products in all. The unsigned side holds `x` for u8 (`x + 128` for i8) and the signed side
//!   `x - 128` for u8 (`x` for i8); the offset terms are removed exactly when the sums are
//!   widened. A lane gains at most 4 * 255 * 128 per quad, so 65,536 rows fit its 32 bits.
//! - **16 and 32-bit: IFMA.** `vpmadd52luq` / `vpmadd52huq` add the low and high 52 bits of the
//!   104-bit product of two 52-bit lanes. Items are widened to 64-bit lanes, signed ones shifted
//!   to unsigned by adding 2^15 or 2^31 (again removed exactly at widening). A 32-bit product
//!   is below 2^64, so the low halves (below 2^52 each) fill a 64-bit lane after 4,096 rows at
//!   the earliest; 16-bit products are below 2^32 and need no high half.
//!
//! Both sweep a *panel* of rows (up to 1 MiB, so it stays in L2) tile by tile: a tile is MR
//! broadcast streams times NZ lane groups, its MR * NZ accumulators held in registers over
//! every row of the panel, then added to the *mid* sums (one per pair, upper triangle by lane
//! group). The mid sums are widened into the exact [`Statistics`] before they could overflow.
//! Results are the exact integer sums, so they equal the `f64` tile kernels' bit for bit (the
//! tests compare every type, stream count and chunking).
#![allow(unsafe_code)]
// Kernels index small fixed arrays by lane; iterators would hide the register layout.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use super::common::Path;
use crate::stats::{tri_row, Data, Statistics};
use crate::DType;
use inpath_core::{Error, Result};

/// Panel bytes to aim for: small enough that the tiles sweep it from L1.
const PANEL_BYTES: usize = 1 << 14;
/// AVX2 `vpmaddwd`: the duo panel, swept from L1.
const MADD_PANEL_BYTES: usize = 1 << 14;
/// AMX: the quad panel plus its transposed tiles, swept from L2.
const AMX_PANEL_BYTES: usize = 64 << 10;
/// AMX: 64-row steps the 32-bit block sums take: 512 * 64 * 255 * 255 < 2^31.
const AMX_C32_STEPS: usize = 512;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// 8-bit items, `vpdpbusd`, 16 streams per lane group.
    Vnni,
    /// 16/32-bit items, `vpmadd52[lh]uq`, 8 streams per lane group; `hi`: 32-bit products need
    /// the high halves.
    Ifma { hi: bool },
    /// Any 8/16/32-bit items as byte streams, AMX `tdpbuud` on 16 x 16 tiles of byte streams,
    /// padded to pairs of tiles.
    Amx,
    /// 8-bit items on AVX2, `vpmaddwd`, 8 streams per lane group: each 32-bit lane holds one
    /// stream's items of two consecutive rows (a "duo") as 16-bit integers, so one
    /// instruction adds two rows of products for 8 streams (16 products).
    Madd,
}

impl Form {
    /// Streams per lane group (one 512-bit register).
    fn lanes(self) -> usize {
        match self {
            Form::Vnni => 16,
            Form::Ifma { .. } => 8,
            Form::Amx => 32,
            Form::Madd => 8,
        }
    }

    /// Rows packed together into one 32-bit lane (quads, duos) or 1.
    fn pack_rows(self) -> usize {
        match self {
            Form::Vnni | Form::Amx => 4,
            Form::Madd => 2,
            Form::Ifma { .. } => 1,
        }
    }

    /// Lane groups per tile call, and broadcast streams per tile for each group count: as many
    /// accumulators as fit the 32 registers beside the loads, and never fewer than 8 in flight
    /// (the multiply-adds have a latency of 4-5 cycles and two issue ports).
    fn max_nz(self) -> usize {
        match self {
            Form::Vnni => 4,
            Form::Ifma { .. } => 3,
            // 4 x 3 tiles (12 accumulators, 3 lane vectors, a broadcast and a product) needed
            // 17 ymm registers: one accumulator went through the stack every duo.
            Form::Madd => 2,
            Form::Amx => unreachable!("AMX multiplies whole tiles, not register tiles"),
        }
    }

    fn mr(self, nz: usize) -> usize {
        match (self, nz) {
            (Form::Vnni, 1) => 16,
            (Form::Vnni, 2 | 3) => 8,
            (Form::Vnni, _) => 4,
            (Form::Ifma { hi: true }, 1) => 8,
            (Form::Ifma { hi: true }, _) => 4,
            (Form::Ifma { hi: false }, _) => 8,
            (Form::Madd, 1) => 8,
            (Form::Madd, _) => 4,
            (Form::Amx, _) => unreachable!("AMX multiplies whole tiles, not register tiles"),
        }
    }

    /// Rows the mid sums take before they must be widened.
    fn batch_limit(self) -> u64 {
        match self {
            // 32-bit lanes, at most 255 * 128 per row: 65,536 * 32,640 < 2^31.
            Form::Vnni => 1 << 16,
            // Low halves below 2^52 in 64-bit lanes.
            Form::Ifma { hi: true } => 1 << 12,
            // Products below 2^32 in 64-bit lanes.
            Form::Ifma { hi: false } => 1 << 31,
            // Byte products below 2^16 in 64-bit sums.
            Form::Amx => 1 << 40,
            // 32-bit lanes, at most 2 * 255 * 255 = 130,050 per duo (2 * 128 * 128 for i8):
            // 16,384 duos * 130,050 < 2^31.
            Form::Madd => 1 << 15,
        }
    }
}

/// One tile: broadcast streams `i0..i0 + mr` against lane groups starting at stream `c0`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernels
#[derive(Clone, Copy, Debug)]
struct Tile {
    i0: usize,
    c0: usize,
    mr: usize,
    nz: usize,
    /// Where each broadcast stream's sums start in the mid sums (at lane stream `c0`).
    offs: [usize; 16],
}

/// Statistics of 8/16/32-bit rows through the integer kernels.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernels
pub(crate) struct IntAccumulator {
    form: Form,
    /// The amount added to each item to make it unsigned (IFMA), 0 for unsigned types.
    offset: i128,
    signed: bool,
    width: usize,
    m: usize,
    /// Streams as the kernels see them: M, or M x width byte streams for AMX.
    pm: usize,
    /// Those padded to whole lane groups.
    mp: usize,
    /// Quad packing: what each lane's four bytes are XORed with on the unsigned (lane) side and
    /// the signed (broadcast) side.
    u_flip: [u32; 16],
    s_flip: [u32; 16],
    /// Panel capacity in rows (a multiple of 4).
    rows: usize,
    /// Rows in the panel.
    fill: usize,
    /// IFMA: `rows * mp` widened items.
    wide: Vec<u64>,
    /// VNNI: `rows / 4 * mp` quads, unsigned side (lanes); AMX: the quads; AVX2 `vpmaddwd`:
    /// `rows / 2 * mp` duos (one side serves both).
    quad_u: Vec<u32>,
    /// VNNI: `rows / 4 * mp` quads, signed side (broadcasts).
    quad_s: Vec<u32>,
    /// VNNI: rows waiting to complete a quad.
    stage: Vec<u8>,
    staged: usize,
    tiles: Vec<Tile>,
    /// Start of each stream's row of mid sums (which begins at its lane group's first stream).
    mid_off: Vec<usize>,
    mid_lo: Vec<u64>,
    mid_hi: Vec<u64>,
    mid32: Vec<i32>,
    /// AMX: the quads of each 64-row step transposed into 16 x 64-byte tiles (one row per
    /// byte stream).
    a_tiles: Vec<u32>,
    /// AMX: 32-bit sums of each 16 x 16 block of byte-stream pairs (full grid of blocks).
    c32: Vec<i32>,
    /// AMX: 64-row steps in `c32` since it was last added to `mid64`.
    c_steps: usize,
    /// AMX: 64-bit sums of the same blocks.
    mid64: Vec<i64>,
    /// Per-stream sums of the kernel's (offset) items since the last widening.
    col: Vec<u64>,
    /// Rows since the last widening.
    batch: u64,
}

fn group_start(i: usize, lanes: usize) -> usize {
    i - i % lanes
}

/// The register tiles of `form` over `m` streams (padded to `mp`): for each lane group, its
/// broadcast streams in steps of MR against the lane groups from its own on, NZ at a time.
fn make_tiles(form: Form, m: usize, mp: usize, mid_off: &[usize]) -> Vec<Tile> {
    let lanes = form.lanes();
    let mut tiles = Vec::new();
    let groups = mp / lanes;
    for gi in 0..groups {
        let firsts: Vec<usize> = (gi..groups).collect();
        for chunk in firsts.chunks(form.max_nz()) {
            let nz = chunk.len();
            let mr = form.mr(nz);
            for i0 in (gi * lanes..(gi + 1) * lanes).step_by(mr) {
                if i0 < m {
                    let c0 = chunk[0] * lanes;
                    let mut offs = [0usize; 16];
                    for (i, o) in offs.iter_mut().enumerate().take(mr) {
                        *o = mid_off[i0 + i] + c0 - gi * lanes;
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
    tiles
}

/// Start of each stream's row of mid sums (its lane group's first stream to `mp`), and the
/// total.
fn mid_offsets(mp: usize, lanes: usize) -> (Vec<usize>, usize) {
    let mut mid_off = Vec::with_capacity(mp + 1);
    let mut total = 0usize;
    for i in 0..mp {
        mid_off.push(total);
        total += mp - group_start(i, lanes);
    }
    mid_off.push(total);
    (mid_off, total)
}

impl IntAccumulator {
    /// A new accumulator for `path` (never `Path::Tiles`); only call with the path
    /// `super::choose` gave for `dtype`, which checked the CPU can run it.
    pub fn new(dtype: DType, m: usize, path: Path) -> IntAccumulator {
        match path {
            Path::Amx => return IntAccumulator::new_amx(dtype, m),
            Path::Avx2Int => return IntAccumulator::new_madd(dtype, m),
            Path::Avx512Int => {}
            Path::Tiles(_) | Path::Avx2I16 => {
                unreachable!("the f64 tiles and avx2-i16 have accumulators of their own")
            }
        }
        let (form, offset) = match dtype {
            DType::U8 | DType::I8 => (Form::Vnni, 0),
            DType::U16 => (Form::Ifma { hi: false }, 0),
            DType::I16 => (Form::Ifma { hi: false }, 1i128 << 15),
            DType::U32 => (Form::Ifma { hi: true }, 0),
            DType::I32 => (Form::Ifma { hi: true }, 1i128 << 31),
            _ => unreachable!("integer kernels take 8, 16 and 32-bit integers"),
        };
        let lanes = form.lanes();
        let mp = m.div_ceil(lanes) * lanes;
        let row_cost = match form {
            Form::Vnni | Form::Amx | Form::Madd => 2 * mp,
            Form::Ifma { .. } => 8 * mp,
        };
        let rows = ((PANEL_BYTES / row_cost).clamp(64, 4096)) & !3;
        let (mid_off, total) = mid_offsets(mp, lanes);
        let tiles = make_tiles(form, m, mp, &mid_off);
        let vnni = form == Form::Vnni;
        let hi = form == Form::Ifma { hi: true };
        let signed = dtype.is_signed();
        let (u_flip, s_flip) = if signed {
            ([0x8080_8080; 16], [0; 16])
        } else {
            ([0; 16], [0x8080_8080; 16])
        };
        IntAccumulator {
            form,
            offset,
            signed,
            width: dtype.width(),
            m,
            pm: m,
            mp,
            u_flip,
            s_flip,
            rows,
            fill: 0,
            wide: if vnni { Vec::new() } else { vec![0; rows * mp] },
            quad_u: if vnni {
                vec![0; rows / 4 * mp]
            } else {
                Vec::new()
            },
            quad_s: if vnni {
                vec![0; rows / 4 * mp]
            } else {
                Vec::new()
            },
            stage: if vnni { vec![0; 4 * m] } else { Vec::new() },
            staged: 0,
            tiles,
            mid_off,
            mid_lo: if vnni { Vec::new() } else { vec![0; total] },
            mid_hi: if hi { vec![0; total] } else { Vec::new() },
            mid32: if vnni { vec![0; total] } else { Vec::new() },
            a_tiles: Vec::new(),
            c32: Vec::new(),
            c_steps: 0,
            mid64: Vec::new(),
            col: vec![0; mp],
            batch: 0,
        }
    }

    /// The AVX2 form for 8-bit items: duos of rows as 16-bit pairs, `vpmaddwd`, no offsets
    /// (8-bit values, signed or not, are valid 16-bit signed integers).
    fn new_madd(dtype: DType, m: usize) -> IntAccumulator {
        let form = Form::Madd;
        let mp = m.div_ceil(8) * 8;
        let rows = ((MADD_PANEL_BYTES / (2 * mp)).clamp(64, 4096)) & !3;
        let (mid_off, total) = mid_offsets(mp, 8);
        let tiles = make_tiles(form, m, mp, &mid_off);
        IntAccumulator {
            form,
            offset: 0,
            signed: dtype.is_signed(),
            width: 1,
            m,
            pm: m,
            mp,
            u_flip: [0; 16],
            s_flip: [0; 16],
            rows,
            fill: 0,
            wide: Vec::new(),
            quad_u: vec![0; rows / 2 * mp],
            quad_s: Vec::new(),
            stage: vec![0; 4 * m],
            staged: 0,
            tiles,
            mid_off,
            mid_lo: Vec::new(),
            mid_hi: Vec::new(),
            mid32: vec![0; total],
            a_tiles: Vec::new(),
            c32: Vec::new(),
            c_steps: 0,
            mid64: Vec::new(),
            col: vec![0; mp],
            batch: 0,
        }
    }

    /// The AMX form: every item split into its bytes, the byte streams multiplied pairwise
    /// in 16 x 16 tiles, and recombined (by powers of 256) when widening.
    fn new_amx(dtype: DType, m: usize) -> IntAccumulator {
        let w = dtype.width();
        let signed = dtype.is_signed();
        let pm = m * w;
        let mp = pm.div_ceil(32) * 32;
        // The quad panel and its transposed tiles, 2 * rows * mp bytes (64 KiB: measured
        // faster than L1-sized or larger panels on 16 x u32, 32 x u16 and 64 x u8 lines).
        let steps = (AMX_PANEL_BYTES / (128 * mp)).clamp(4, 64);
        let rows = 64 * steps;
        let groups = mp / 16;
        // Signed items are offset to unsigned by flipping their top byte.
        let mut u_flip = [0u32; 16];
        if signed {
            for (l, f) in u_flip.iter_mut().enumerate() {
                if l % w == w - 1 {
                    *f = 0x8080_8080;
                }
            }
        }
        IntAccumulator {
            form: Form::Amx,
            offset: if signed { 1i128 << (8 * w - 1) } else { 0 },
            signed,
            width: w,
            m,
            pm,
            mp,
            u_flip,
            s_flip: [0; 16],
            rows,
            fill: 0,
            wide: Vec::new(),
            quad_u: vec![0; rows / 4 * mp],
            quad_s: Vec::new(),
            stage: vec![0; 4 * pm],
            staged: 0,
            tiles: Vec::new(),
            mid_off: Vec::new(),
            mid_lo: Vec::new(),
            mid_hi: Vec::new(),
            mid32: Vec::new(),
            a_tiles: vec![0; rows / 4 * mp],
            c32: vec![0; groups * groups * 256],
            c_steps: 0,
            mid64: vec![0; groups * groups * 256],
            col: vec![0; mp],
            batch: 0,
        }
    }

    /// Adds whole rows: `bytes` holds `rows * M` little-endian items.
    pub fn push_rows(&mut self, mut bytes: &[u8], stats: &mut Statistics) -> Result<()> {
        let row_bytes = self.m * self.width;
        debug_assert_eq!(bytes.len() % row_bytes, 0);
        match self.form {
            Form::Ifma { .. } => {
                while !bytes.is_empty() {
                    let n = (self.rows - self.fill).min(bytes.len() / row_bytes);
                    let (now, rest) = bytes.split_at(n * row_bytes);
                    // SAFETY: `supported` checked the CPU (the only way to build an
                    // IntAccumulator in the engine); the panel has room for `n` more rows.
                    unsafe { x86::pack_wide(now, n, self) };
                    self.fill += n;
                    bytes = rest;
                    if self.fill == self.rows {
                        self.flush_rows(stats, self.fill, bytes)?;
                    }
                }
            }
            Form::Vnni | Form::Amx | Form::Madd => {
                // Rows go in packs of `k` (quads, duos), staged where the input splits one.
                let k = self.form.pack_rows();
                let quad_bytes = k * row_bytes;
                while !bytes.is_empty() {
                    if self.staged > 0 || bytes.len() < quad_bytes {
                        // Complete (or start) a quad in the stage.
                        let take = (k - self.staged).min(bytes.len() / row_bytes);
                        let at = self.staged * row_bytes;
                        self.stage[at..at + take * row_bytes]
                            .copy_from_slice(&bytes[..take * row_bytes]);
                        self.staged += take;
                        bytes = &bytes[take * row_bytes..];
                        if self.staged == k {
                            let stage = std::mem::take(&mut self.stage);
                            // SAFETY: as above; the panel has room for a pack (fill is a
                            // multiple of 4 below the capacity, also a multiple of 4).
                            unsafe { self.pack(&stage, 1) };
                            self.stage = stage;
                            self.staged = 0;
                            self.fill += k;
                        }
                    } else {
                        let quads = ((self.rows - self.fill) / k).min(bytes.len() / quad_bytes);
                        let (now, rest) = bytes.split_at(quads * quad_bytes);
                        // SAFETY: as above.
                        unsafe { self.pack(now, quads) };
                        self.fill += k * quads;
                        bytes = rest;
                    }
                    if self.fill == self.rows {
                        self.flush_rows(stats, self.fill, bytes)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Packs `packs` quads (duos for AVX2) of rows from `src` into the panel.
    ///
    /// # Safety
    /// The CPU must run this accumulator's form (checked by `arch::choose`).
    unsafe fn pack(&mut self, src: &[u8], packs: usize) {
        // SAFETY: forwarded.
        unsafe {
            if self.form == Form::Madd {
                x86::pack_duos(src, packs, self)
            } else {
                x86::pack_quads(src, packs, self)
            }
        }
    }

    /// Ends the input: runs the partial panel and brings `stats` up to date.
    pub fn close(&mut self, stats: &mut Statistics) -> Result<()> {
        if self.staged > 0 {
            // The last rows: a partial pack, the missing rows zero on both sides.
            let (real, k) = (self.staged, self.form.pack_rows());
            if self.form == Form::Madd {
                self.pack_partial_duo();
            } else {
                self.pack_partial_quad(real);
            }
            self.staged = 0;
            self.fill += k;
            self.flush_rows(stats, self.fill - k + real, &[])?;
        } else {
            self.flush_rows(stats, self.fill, &[])?;
        }
        self.widen(stats)
    }

    /// Runs the tiles over the panel (`fill` rows packed, of which `real` are input rows).
    /// `next` is the input that follows: the tiles prefetch the start of it into L2 while they
    /// compute, so packing the next panel does not wait for memory.
    fn flush_rows(&mut self, stats: &mut Statistics, real: usize, next: &[u8]) -> Result<()> {
        if self.fill == 0 {
            return Ok(());
        }
        if self.batch + real as u64 > self.form.batch_limit() {
            self.widen(stats)?;
        }
        if self.form == Form::Amx && !self.fill.is_multiple_of(64) {
            // The last rows: zero quads up to a whole 64-row step.
            let end = self.fill.next_multiple_of(64);
            self.quad_u[self.fill / 4 * self.mp..end / 4 * self.mp].fill(0);
            self.fill = end;
        }
        if self.form == Form::Amx && self.c_steps + self.fill / 64 > AMX_C32_STEPS {
            self.fold_c32();
        }
        let ahead = next.len().min(self.rows * self.m * self.width);
        // SAFETY: `supported` (and for AMX `amx_supported`) checked the CPU features and the
        // OS grant before this accumulator was built; the panel holds `fill` packed rows.
        unsafe { x86::sweep(self, &next[..ahead]) };
        self.batch += real as u64;
        self.fill = 0;
        Ok(())
    }

    /// Packs the staged rows `0..real` as one quad, later rows zero.
    fn pack_partial_quad(&mut self, real: usize) {
        let (pm, mp) = (self.pm, self.mp);
        let q = self.fill / 4;
        let amx = self.form == Form::Amx;
        for s in 0..pm {
            let mut u = 0u32;
            let mut v = 0u32;
            for t in 0..real {
                let x = self.stage[t * pm + s];
                let ub = x ^ self.u_flip[s % 16] as u8;
                let sb = x ^ self.s_flip[s % 16] as u8;
                u |= (ub as u32) << (8 * t);
                v |= (sb as u32) << (8 * t);
                self.col[s] += ub as u64;
            }
            self.quad_u[q * mp + s] = u;
            if !amx {
                self.quad_s[q * mp + s] = v;
            }
        }
        for s in pm..mp {
            self.quad_u[q * mp + s] = 0;
            if !amx {
                self.quad_s[q * mp + s] = 0;
            }
        }
    }

    /// AVX2: packs the one staged row as a duo whose second row is zero.
    fn pack_partial_duo(&mut self) {
        let (m, mp) = (self.m, self.mp);
        let d = self.fill / 2;
        for s in 0..mp {
            let x = if s >= m {
                0
            } else if self.signed {
                self.stage[s] as i8 as i64
            } else {
                self.stage[s] as i64
            };
            self.quad_u[d * mp + s] = x as u16 as u32;
            self.col[s] = self.col[s].wrapping_add(x as u64);
        }
    }

    /// AMX: adds the 32-bit block sums into the 64-bit ones and clears them.
    fn fold_c32(&mut self) {
        for (d, c) in self.mid64.iter_mut().zip(self.c32.iter_mut()) {
            *d += *c as i64;
            *c = 0;
        }
        self.c_steps = 0;
    }

    /// Adds the mid sums into `stats`, removing the offsets, and clears them.
    fn widen(&mut self, stats: &mut Statistics) -> Result<()> {
        if self.batch == 0 {
            return Ok(());
        }
        let (m, lanes) = (self.m, self.form.lanes());
        let n = self.batch as i128;
        let overflow = || Error::State("statistics overflow".into());
        let Data::Int { sums, products } = &mut stats.data else {
            return Err(Error::State(
                "integer kernels need integer statistics".into(),
            ));
        };
        if self.form == Form::Amx {
            self.fold_c32();
            let (w, groups, off) = (self.width, self.mp / 16, self.offset);
            let mid = &self.mid64;
            // The sum over rows of byte stream a times byte stream b (blocks hold a <= b).
            let pair = |a: usize, b: usize| -> i128 {
                let (a, b) = (a.min(b), a.max(b));
                mid[((a / 16) * groups + b / 16) * 256 + (a % 16) * 16 + b % 16] as i128
            };
            // Items from bytes: x' = sum over k of 256^k * byte k (x' = x + offset).
            let col: Vec<i128> = (0..m)
                .map(|i| {
                    (0..w)
                        .map(|k| (self.col[i * w + k] as i128) << (8 * k))
                        .sum()
                })
                .collect();
            for (s, c) in sums.iter_mut().zip(&col) {
                *s = s.checked_add(c - n * off).ok_or_else(overflow)?;
            }
            for i in 0..m {
                let row = tri_row(m, i);
                for j in i..m {
                    let mut raw = 0i128;
                    for k in 0..w {
                        for l in 0..w {
                            raw += pair(i * w + k, j * w + l) << (8 * (k + l));
                        }
                    }
                    let p = raw - off * (col[i] + col[j]) + n * off * off;
                    let d = &mut products[row + j - i];
                    *d = d.checked_add(p).ok_or_else(overflow)?;
                }
            }
            stats.add_count(self.batch)?;
            self.batch = 0;
            self.mid64.iter_mut().for_each(|v| *v = 0);
            self.col.iter_mut().for_each(|v| *v = 0);
            return Ok(());
        }
        if self.form == Form::Madd {
            // No offsets: the column sums are the items' (held as two's complement) and the
            // mid sums the products'.
            for (s, &c) in sums.iter_mut().zip(&self.col[..m]) {
                *s = s.checked_add(c as i64 as i128).ok_or_else(overflow)?;
            }
            for i in 0..m {
                let row = tri_row(m, i);
                let base = self.mid_off[i] - group_start(i, lanes);
                for j in i..m {
                    let d = &mut products[row + j - i];
                    *d = d
                        .checked_add(self.mid32[base + j] as i128)
                        .ok_or_else(overflow)?;
                }
            }
            stats.add_count(self.batch)?;
            self.batch = 0;
            self.mid32.iter_mut().for_each(|v| *v = 0);
            self.col.iter_mut().for_each(|v| *v = 0);
            return Ok(());
        }
        // The kernel's column sums, and the true sums of the items.
        let col: Vec<i128> = self.col[..m].iter().map(|&c| c as i128).collect();
        let item_sum: Vec<i128> = col
            .iter()
            .map(|&c| match self.form {
                Form::Vnni if self.signed => c - 128 * n,
                Form::Vnni => c,
                Form::Ifma { .. } | Form::Amx | Form::Madd => c - n * self.offset,
            })
            .collect();
        for (s, v) in sums.iter_mut().zip(&item_sum) {
            *s = s.checked_add(*v).ok_or_else(overflow)?;
        }
        let off = self.offset;
        for i in 0..m {
            let row = tri_row(m, i);
            let base = self.mid_off[i] - group_start(i, lanes);
            for j in i..m {
                let at = base + j;
                let p = match self.form {
                    Form::Vnni => {
                        let dot = self.mid32[at] as i128;
                        if self.signed {
                            // Lanes held x_j + 128: dot = P + 128 * sum x_i.
                            dot - 128 * item_sum[i]
                        } else {
                            // Broadcasts held x_i - 128: dot = P - 128 * sum x_j.
                            dot + 128 * col[j]
                        }
                    }
                    Form::Amx | Form::Madd => unreachable!("handled above"),
                    Form::Ifma { hi } => {
                        let mut raw = self.mid_lo[at] as i128;
                        if hi {
                            raw += (self.mid_hi[at] as i128) << 52;
                        }
                        // (x_i + o)(x_j + o) = x_i x_j + o (sum'_i + sum'_j) - n o^2.
                        raw - off * (col[i] + col[j]) + n * off * off
                    }
                };
                let d = &mut products[row + j - i];
                *d = d.checked_add(p).ok_or_else(overflow)?;
            }
        }
        stats.add_count(self.batch)?;
        self.batch = 0;
        self.mid_lo.iter_mut().for_each(|v| *v = 0);
        self.mid_hi.iter_mut().for_each(|v| *v = 0);
        self.mid32.iter_mut().for_each(|v| *v = 0);
        self.col.iter_mut().for_each(|v| *v = 0);
        Ok(())
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Form, IntAccumulator};
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// Widens `n` rows of 16/32-bit items into the panel's 64-bit lanes (offset to unsigned;
    /// padding lanes zero).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn pack_wide(src: &[u8], n: usize, acc: &mut IntAccumulator) {
        unsafe {
            let (m, mp, w) = (acc.m, acc.mp, acc.width);
            assert!(src.len() >= n * m * w && (acc.fill + n) * mp <= acc.wide.len());
            let flip = _mm512_set1_epi64(acc.offset as i64);
            let dst = acc.wide.as_mut_ptr().add(acc.fill * mp);
            let col = acc.col.as_mut_ptr();
            // Blocks of rows, column group by column group, so each group's sum stays in a
            // register (the block's rows stay in L1).
            for r0 in (0..n).step_by(32) {
                let r1 = (r0 + 32).min(n);
                for s0 in (0..mp).step_by(8) {
                    let k = (m - s0).min(8);
                    let mask = ((1u32 << k) - 1) as u8;
                    let mut sum = _mm512_setzero_si512();
                    for r in r0..r1 {
                        let item = src.as_ptr().add((r * m + s0) * w);
                        // Masked-off lanes are not read, so the row is never overrun.
                        let v = if w == 4 {
                            _mm512_cvtepu32_epi64(_mm256_maskz_loadu_epi32(
                                mask,
                                item as *const i32,
                            ))
                        } else {
                            _mm512_cvtepu16_epi64(_mm_maskz_loadu_epi16(mask, item as *const i16))
                        };
                        let v = _mm512_maskz_xor_epi64(mask, v, flip);
                        _mm512_storeu_si512(dst.add(r * mp + s0) as *mut __m512i, v);
                        sum = _mm512_add_epi64(sum, v);
                    }
                    let c = col.add(s0).cast::<__m512i>();
                    _mm512_storeu_si512(c, _mm512_add_epi64(_mm512_loadu_si512(c), sum));
                }
            }
        }
    }

    /// Packs `quads` groups of four rows of 8-bit items into the quad panels.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    pub(super) unsafe fn pack_quads(src: &[u8], quads: usize, acc: &mut IntAccumulator) {
        unsafe {
            let (m, mp) = (acc.pm, acc.mp);
            let q0 = acc.fill / 4;
            assert!(src.len() >= quads * 4 * m && (q0 + quads) * mp <= acc.quad_u.len());
            // Output byte 4s + t is row t's byte s: the four rows' 16 bytes sit at 16t.
            let mut idx = [0u8; 64];
            for (b, v) in idx.iter_mut().enumerate() {
                *v = (16 * (b % 4) + b / 4) as u8;
            }
            let idx = _mm512_loadu_si512(idx.as_ptr() as *const __m512i);
            let u_flip = _mm512_loadu_si512(acc.u_flip.as_ptr().cast());
            let s_flip = _mm512_loadu_si512(acc.s_flip.as_ptr().cast());
            let both = !acc.quad_s.is_empty();
            let u_out = acc.quad_u.as_mut_ptr().add(q0 * mp);
            let s_out = acc.quad_s.as_mut_ptr().wrapping_add(q0 * mp);
            let ones = _mm512_set1_epi8(1);
            for qb in (0..quads).step_by(16) {
                let qe = (qb + 16).min(quads);
                for s0 in (0..mp).step_by(16) {
                    let k = m.saturating_sub(s0).min(16);
                    let bytes = ((1u32 << k) - 1) as u16;
                    let mut sum = _mm512_setzero_si512();
                    for q in qb..qe {
                        let at = q * mp + s0;
                        if k == 0 {
                            // A padding group (AMX pads to pairs of tiles).
                            _mm512_storeu_si512(u_out.add(at).cast(), _mm512_setzero_si512());
                            continue;
                        }
                        let base = src.as_ptr().add(q * 4 * m + s0);
                        let r0 = _mm_maskz_loadu_epi8(bytes, base as *const i8);
                        let r1 = _mm_maskz_loadu_epi8(bytes, base.add(m) as *const i8);
                        let r2 = _mm_maskz_loadu_epi8(bytes, base.add(2 * m) as *const i8);
                        let r3 = _mm_maskz_loadu_epi8(bytes, base.add(3 * m) as *const i8);
                        let v = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(r0), r1);
                        let v = _mm512_inserti32x4::<2>(v, r2);
                        let v = _mm512_inserti32x4::<3>(v, r3);
                        let t = _mm512_permutexvar_epi8(idx, v);
                        let u = _mm512_maskz_xor_epi32(bytes, t, u_flip);
                        _mm512_storeu_si512(u_out.add(at) as *mut __m512i, u);
                        if both {
                            let s = _mm512_maskz_xor_epi32(bytes, t, s_flip);
                            _mm512_storeu_si512(s_out.add(at) as *mut __m512i, s);
                        }
                        sum = _mm512_dpbusd_epi32(sum, u, ones);
                    }
                    // Column sums of the unsigned side (at most 16 * 4 * 255 per lane here).
                    let c = acc.col.as_mut_ptr().add(s0);
                    let lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(sum));
                    let hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64::<1>(sum));
                    let c0 = c.cast::<__m512i>();
                    let c1 = c.add(8).cast::<__m512i>();
                    _mm512_storeu_si512(c0, _mm512_add_epi64(_mm512_loadu_si512(c0), lo));
                    _mm512_storeu_si512(c1, _mm512_add_epi64(_mm512_loadu_si512(c1), hi));
                }
            }
        }
    }

    /// Packs `duos` pairs of rows of 8-bit items into the duo panel: lane `s` of duo `d` holds
    /// row 2d's item s in its low 16 bits and row 2d + 1's in its high 16 bits (sign- or
    /// zero-extended), padding lanes zero; adds the items to the column sums.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_duos(src: &[u8], duos: usize, acc: &mut IntAccumulator) {
        let (m, mp) = (acc.m, acc.mp);
        let d0 = acc.fill / 2;
        assert!(src.len() >= duos * 2 * m && (d0 + duos) * mp <= acc.quad_u.len());
        let signed = acc.signed;
        let ones = _mm256_set1_epi16(1);
        // SAFETY: every load reads 16 bytes inside `src` (a partial group is copied to a
        // zeroed buffer first); every store is inside the duo panel (mp lanes per duo) and
        // the column sums (mp).
        unsafe {
            let out = acc.quad_u.as_mut_ptr().add(d0 * mp);
            let widen = |p: *const u8| {
                let v = _mm_loadu_si128(p.cast());
                if signed {
                    _mm256_cvtepi8_epi16(v)
                } else {
                    _mm256_cvtepu8_epi16(v)
                }
            };
            for s0 in (0..mp).step_by(16) {
                let k = (m - s0).min(16);
                let two = s0 + 8 < mp;
                let mut sum0 = _mm256_setzero_si256();
                let mut sum1 = _mm256_setzero_si256();
                for d in 0..duos {
                    let base = src.as_ptr().add(2 * d * m + s0);
                    let (a, b) = if k == 16 {
                        (widen(base), widen(base.add(m)))
                    } else {
                        let mut buf = [0u8; 32];
                        buf[..k].copy_from_slice(std::slice::from_raw_parts(base, k));
                        buf[16..16 + k].copy_from_slice(std::slice::from_raw_parts(base.add(m), k));
                        (widen(buf.as_ptr()), widen(buf.as_ptr().add(16)))
                    };
                    let lo = _mm256_unpacklo_epi16(a, b);
                    let hi = _mm256_unpackhi_epi16(a, b);
                    let v0 = _mm256_permute2x128_si256::<0x20>(lo, hi);
                    let at = out.add(d * mp + s0);
                    _mm256_storeu_si256(at.cast(), v0);
                    sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(v0, ones));
                    if two {
                        let v1 = _mm256_permute2x128_si256::<0x31>(lo, hi);
                        _mm256_storeu_si256(at.add(8).cast(), v1);
                        sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(v1, ones));
                    }
                }
                // At most 4,096 rows * 255 per lane: the 32-bit sums are exact.
                let c = acc.col.as_mut_ptr().add(s0);
                let add = |c: *mut u64, v: __m128i| {
                    let p = c.cast::<__m256i>();
                    let w = _mm256_cvtepi32_epi64(v);
                    _mm256_storeu_si256(p, _mm256_add_epi64(_mm256_loadu_si256(p), w));
                };
                add(c, _mm256_castsi256_si128(sum0));
                add(c.add(4), _mm256_extracti128_si256::<1>(sum0));
                if two {
                    add(c.add(8), _mm256_castsi256_si128(sum1));
                    add(c.add(12), _mm256_extracti128_si256::<1>(sum1));
                }
            }
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn sweep_madd(acc: &mut IntAccumulator, next: &[u8]) {
        let duos = acc.fill / 2;
        let (d, mid, mp) = (acc.quad_u.as_ptr(), acc.mid32.as_mut_ptr(), acc.mp);
        let per = (next.len() / 64).div_ceil(acc.tiles.len());
        for k in 0..acc.tiles.len() {
            let t = acc.tiles[k];
            let args = tile_args(acc, k, next, per);
            let (i0, c0) = (t.i0, t.c0);
            // SAFETY: the tiles stay inside the duo panel (`duos * mp` lanes, streams padded
            // to whole groups) and the mid sums (`mid_off` rows per stream).
            unsafe {
                match (t.mr, t.nz) {
                    (8, 1) => madd::<8, 1>(d, mp, duos, i0, c0, mid, &args),
                    (4, 2) => madd::<4, 2>(d, mp, duos, i0, c0, mid, &args),
                    _ => unreachable!("tile shapes come from Form::mr"),
                }
            }
        }
    }

    /// AVX2: MR broadcast streams x NZ groups of 8 lane streams over `duos` duos.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn madd<const MR: usize, const NZ: usize>(
        d: *const u32,
        mp: usize,
        duos: usize,
        i0: usize,
        c0: usize,
        mid: *mut i32,
        args: &TileArgs,
    ) {
        unsafe {
            let mut acc = [[_mm256_setzero_si256(); NZ]; MR];
            for q in 0..duos {
                if q < args.lines {
                    _mm_prefetch::<_MM_HINT_T0>(args.prefetch.add(64 * q).cast());
                }
                let row = d.add(q * mp);
                let mut lanes = [_mm256_setzero_si256(); NZ];
                for z in 0..NZ {
                    lanes[z] = _mm256_loadu_si256(row.add(c0 + 8 * z).cast());
                }
                for i in 0..MR {
                    let b = _mm256_set1_epi32(*row.add(i0 + i) as i32);
                    for z in 0..NZ {
                        acc[i][z] = _mm256_add_epi32(acc[i][z], _mm256_madd_epi16(lanes[z], b));
                    }
                }
            }
            for i in 0..MR {
                for z in 0..NZ {
                    let p = mid.add(args.offs[i] + 8 * z).cast::<__m256i>();
                    _mm256_storeu_si256(p, _mm256_add_epi32(_mm256_loadu_si256(p), acc[i][z]));
                }
            }
        }
    }

    /// Runs every tile over the panel, prefetching `next` (the input that follows) into L2.
    pub(super) unsafe fn sweep(acc: &mut IntAccumulator, next: &[u8]) {
        unsafe {
            match acc.form {
                Form::Vnni => sweep_vnni(acc, next),
                Form::Ifma { hi } => sweep_ifma(acc, hi, next),
                Form::Madd => sweep_madd(acc, next),
                Form::Amx => {
                    // Half of the next panel's input is prefetched while transposing, half
                    // while multiplying, so memory reads overlap both.
                    let half = (next.len() / 128) * 64;
                    transpose_steps(acc, &next[..half]);
                    sweep_amx(acc, &next[half..]);
                }
            }
        }
    }

    /// AMX: transposes each 16 x 16 block of quads (16 quads of one 64-row step x 16 byte
    /// streams) into a tile whose rows are byte streams: row `c` holds stream `c`'s 64 bytes.
    #[target_feature(enable = "avx512f")]
    unsafe fn transpose_steps(acc: &mut IntAccumulator, next: &[u8]) {
        let (groups, steps) = (acc.mp / 16, acc.fill / 64);
        let src = acc.quad_u.as_ptr();
        let dst = acc.a_tiles.as_mut_ptr();
        let lines = next.len() / 64;
        let per_tile = lines.div_ceil((steps * groups).max(1));
        let mut line = 0;
        for step in 0..steps {
            for g in 0..groups {
                for _ in 0..per_tile {
                    if line < lines {
                        // SAFETY: line < lines keeps the address inside `next`.
                        unsafe { _mm_prefetch::<_MM_HINT_T1>(next.as_ptr().add(64 * line).cast()) };
                        line += 1;
                    }
                }
                // SAFETY: step < fill / 64 and g < mp / 16 stay inside both panels.
                unsafe {
                    let from = src.add(step * 16 * acc.mp + g * 16);
                    let to = dst.add((step * groups + g) * 256);
                    transpose16(from, acc.mp, to);
                }
            }
        }
    }

    #[cfg(test)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose16_for_test(src: *const u32, stride: usize, dst: *mut u32) {
        unsafe { transpose16(src, stride, dst) }
    }

    /// Transposes the 16 x 16 dwords at `src` (rows `stride` dwords apart) into `dst`.
    #[inline(always)]
    unsafe fn transpose16(src: *const u32, stride: usize, dst: *mut u32) {
        unsafe {
            let mut r = [_mm512_setzero_si512(); 16];
            for (i, v) in r.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(src.add(i * stride).cast());
            }
            // Pairs of rows interleaved by dword, then by qword: u[4i + e] holds, in 128-bit
            // lane L, element 4L + e of rows 4i..4i + 4.
            let mut t = [_mm512_setzero_si512(); 16];
            for i in 0..8 {
                t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
            }
            let mut u = [_mm512_setzero_si512(); 16];
            for i in 0..4 {
                u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
                u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
                u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
                u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
            }
            // Output row 4L + e is lane L of u[e], u[4 + e], u[8 + e], u[12 + e].
            for e in 0..4 {
                let (a, b, c, d) = (u[e], u[4 + e], u[8 + e], u[12 + e]);
                let x0 = _mm512_shuffle_i32x4::<0x88>(a, b);
                let x1 = _mm512_shuffle_i32x4::<0xdd>(a, b);
                let x2 = _mm512_shuffle_i32x4::<0x88>(c, d);
                let x3 = _mm512_shuffle_i32x4::<0xdd>(c, d);
                let out = [
                    _mm512_shuffle_i32x4::<0x88>(x0, x2),
                    _mm512_shuffle_i32x4::<0x88>(x1, x3),
                    _mm512_shuffle_i32x4::<0xdd>(x0, x2),
                    _mm512_shuffle_i32x4::<0xdd>(x1, x3),
                ];
                for (l, v) in out.iter().enumerate() {
                    _mm512_storeu_si512(dst.add((4 * l + e) * 16).cast(), *v);
                }
            }
        }
    }

    /// The AMX tile configuration: palette 1, tiles 0-7 all 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    /// AMX: for every pair of tile pairs (a, a + 1) x (b, b + 1) with a <= b, the 32-bit block
    /// sums are loaded into tiles 0-3, every 64-row step multiplies the transposed tiles of a
    /// (tiles 4, 5) by the quads of b (tiles 6, 7, read in place), and the sums are stored back.
    #[target_feature(enable = "avx512f")]
    unsafe fn sweep_amx(acc: &mut IntAccumulator, next: &[u8]) {
        let (groups, steps) = (acc.mp / 16, acc.fill / 64);
        let mut config = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            config.colsb[t] = 64;
            config.rows[t] = 16;
        }
        let quads = acc.quad_u.as_ptr().cast::<u8>();
        let a_tiles = acc.a_tiles.as_ptr().cast::<u8>();
        let c32 = acc.c32.as_mut_ptr().cast::<u8>();
        let quad_stride = acc.mp * 4;
        let lines = next.len() / 64;
        let mut line = 0usize;
        // Spread the prefetches of the next panel's input over every step of every batch.
        let batches = (groups / 2) * (groups / 2 + 1) / 2;
        let per_step = lines.div_ceil((batches * steps).max(1));
        // SAFETY: amx_supported checked the CPU and the OS grant; every tile load and store
        // stays inside the panels (steps * 16 quads of mp dwords) and c32 (groups^2 blocks).
        unsafe {
            asm!("ldtilecfg [{0}]", in(reg) &config as *const TileConfig, options(nostack));
            for a in (0..groups).step_by(2) {
                for b in (a..groups).step_by(2) {
                    let c = |x: usize, y: usize| c32.add(((a + x) * groups + b + y) * 1024);
                    asm!(
                        "tileloadd tmm0, [{c00} + {s}*1]",
                        "tileloadd tmm1, [{c01} + {s}*1]",
                        "tileloadd tmm2, [{c10} + {s}*1]",
                        "tileloadd tmm3, [{c11} + {s}*1]",
                        c00 = in(reg) c(0, 0), c01 = in(reg) c(0, 1),
                        c10 = in(reg) c(1, 0), c11 = in(reg) c(1, 1),
                        s = in(reg) 64usize, options(nostack, readonly),
                    );
                    for step in 0..steps {
                        for _ in 0..per_step {
                            if line < lines {
                                _mm_prefetch::<_MM_HINT_T1>(next.as_ptr().add(64 * line).cast());
                                line += 1;
                            }
                        }
                        let a0 = a_tiles.add((step * groups + a) * 1024);
                        let b0 = quads.add(step * 16 * quad_stride + b * 64);
                        asm!(
                            "tileloadd tmm4, [{a0} + {s}*1]",
                            "tileloadd tmm5, [{a1} + {s}*1]",
                            "tileloadd tmm6, [{b0} + {qs}*1]",
                            "tileloadd tmm7, [{b1} + {qs}*1]",
                            "tdpbuud tmm0, tmm4, tmm6",
                            "tdpbuud tmm1, tmm4, tmm7",
                            "tdpbuud tmm2, tmm5, tmm6",
                            "tdpbuud tmm3, tmm5, tmm7",
                            a0 = in(reg) a0, a1 = in(reg) a0.add(1024),
                            b0 = in(reg) b0, b1 = in(reg) b0.add(64),
                            s = in(reg) 64usize, qs = in(reg) quad_stride,
                            options(nostack, readonly),
                        );
                    }
                    asm!(
                        "tilestored [{c00} + {s}*1], tmm0",
                        "tilestored [{c01} + {s}*1], tmm1",
                        "tilestored [{c10} + {s}*1], tmm2",
                        "tilestored [{c11} + {s}*1], tmm3",
                        c00 = in(reg) c(0, 0), c01 = in(reg) c(0, 1),
                        c10 = in(reg) c(1, 0), c11 = in(reg) c(1, 1),
                        s = in(reg) 64usize, options(nostack),
                    );
                }
            }
            asm!("tilerelease", options(nostack, nomem));
        }
        acc.c_steps += steps;
    }

    /// Where a tile's sums go, and the input lines it prefetches (one per row or quad).
    struct TileArgs {
        offs: [usize; 16],
        prefetch: *const u8,
        lines: usize,
    }

    /// The arguments of tile `k`: its offsets into the mid sums and its share (`per` lines)
    /// of the lines of `next` to prefetch.
    #[inline(always)]
    fn tile_args(acc: &IntAccumulator, k: usize, next: &[u8], per: usize) -> TileArgs {
        let total = next.len() / 64;
        let l0 = (k * per).min(total);
        TileArgs {
            offs: acc.tiles[k].offs,
            prefetch: next.as_ptr().wrapping_add(l0 * 64),
            lines: per.min(total - l0),
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn sweep_vnni(acc: &mut IntAccumulator, next: &[u8]) {
        let quads = acc.fill / 4;
        let (u, s, mid, mp) = (
            acc.quad_u.as_ptr(),
            acc.quad_s.as_ptr(),
            acc.mid32.as_mut_ptr(),
            acc.mp,
        );
        let per = (next.len() / 64).div_ceil(acc.tiles.len());
        for k in 0..acc.tiles.len() {
            let t = acc.tiles[k];
            let args = tile_args(acc, k, next, per);
            let (i0, c0) = (t.i0, t.c0);
            // SAFETY: the tiles stay inside the quad panels (`quads * mp` lanes, streams
            // padded to whole groups) and the mid sums (`mid_off` rows per stream).
            unsafe {
                match (t.mr, t.nz) {
                    (16, 1) => vnni::<16, 1>(u, s, mp, quads, i0, c0, mid, &args),
                    (8, 2) => vnni::<8, 2>(u, s, mp, quads, i0, c0, mid, &args),
                    (8, 3) => vnni::<8, 3>(u, s, mp, quads, i0, c0, mid, &args),
                    (4, 4) => vnni::<4, 4>(u, s, mp, quads, i0, c0, mid, &args),
                    _ => unreachable!("tile shapes come from Form::mr"),
                }
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512ifma")]
    unsafe fn sweep_ifma(acc: &mut IntAccumulator, hi: bool, next: &[u8]) {
        let (p, lo_mid, hi_mid) = (
            acc.wide.as_ptr(),
            acc.mid_lo.as_mut_ptr(),
            acc.mid_hi.as_mut_ptr(),
        );
        let (mp, rows) = (acc.mp, acc.fill);
        let per = (next.len() / 64).div_ceil(acc.tiles.len());
        for k in 0..acc.tiles.len() {
            let t = acc.tiles[k];
            let a = tile_args(acc, k, next, per);
            let (i0, c0) = (t.i0, t.c0);
            // SAFETY: the tiles stay inside the panel (`rows * mp` lanes) and the mid sums.
            unsafe {
                match (hi, t.mr, t.nz) {
                    (true, 8, 1) => ifma::<8, 1, true>(p, mp, rows, i0, c0, lo_mid, hi_mid, &a),
                    (true, 4, 2) => ifma::<4, 2, true>(p, mp, rows, i0, c0, lo_mid, hi_mid, &a),
                    (true, 4, 3) => ifma::<4, 3, true>(p, mp, rows, i0, c0, lo_mid, hi_mid, &a),
                    (false, 8, 1) => ifma::<8, 1, false>(p, mp, rows, i0, c0, lo_mid, hi_mid, &a),
                    (false, 8, 2) => ifma::<8, 2, false>(p, mp, rows, i0, c0, lo_mid, hi_mid, &a),
                    (false, 8, 3) => ifma::<8, 3, false>(p, mp, rows, i0, c0, lo_mid, hi_mid, &a),
                    _ => unreachable!("tile shapes come from Form::mr"),
                }
            }
        }
    }

    /// MR broadcast streams x NZ groups of 16 lane streams over `quads` quads.
    #[inline(always)]
    unsafe fn vnni<const MR: usize, const NZ: usize>(
        u: *const u32,
        s: *const u32,
        mp: usize,
        quads: usize,
        i0: usize,
        c0: usize,
        mid: *mut i32,
        args: &TileArgs,
    ) {
        unsafe {
            let mut acc = [[_mm512_setzero_si512(); NZ]; MR];
            for q in 0..quads {
                if q < args.lines {
                    _mm_prefetch::<_MM_HINT_T0>(args.prefetch.add(64 * q).cast());
                }
                let ub = u.add(q * mp + c0);
                let mut lanes = [_mm512_setzero_si512(); NZ];
                for z in 0..NZ {
                    lanes[z] = _mm512_loadu_si512(ub.add(16 * z).cast());
                }
                let sb = s.add(q * mp + i0);
                for i in 0..MR {
                    let b = _mm512_set1_epi32(*sb.add(i) as i32);
                    for z in 0..NZ {
                        acc[i][z] = _mm512_dpbusd_epi32(acc[i][z], lanes[z], b);
                    }
                }
            }
            for i in 0..MR {
                for z in 0..NZ {
                    let p = mid.add(args.offs[i] + 16 * z).cast::<__m512i>();
                    _mm512_storeu_si512(p, _mm512_add_epi32(_mm512_loadu_si512(p), acc[i][z]));
                }
            }
        }
    }

    /// One row of an IFMA tile.
    #[inline(always)]
    unsafe fn ifma_row<const MR: usize, const NZ: usize, const HI: bool>(
        row: *const u64,
        i0: usize,
        c0: usize,
        lo: &mut [[__m512i; NZ]; MR],
        hi: &mut [[__m512i; NZ]; MR],
    ) {
        unsafe {
            let mut lanes = [_mm512_setzero_si512(); NZ];
            for z in 0..NZ {
                lanes[z] = _mm512_loadu_si512(row.add(c0 + 8 * z).cast());
            }
            for i in 0..MR {
                let b = _mm512_set1_epi64(*row.add(i0 + i) as i64);
                for z in 0..NZ {
                    lo[i][z] = _mm512_madd52lo_epu64(lo[i][z], lanes[z], b);
                    if HI {
                        hi[i][z] = _mm512_madd52hi_epu64(hi[i][z], lanes[z], b);
                    }
                }
            }
        }
    }

    /// MR broadcast streams x NZ groups of 8 lane streams over `rows` rows.
    #[inline(always)]
    unsafe fn ifma<const MR: usize, const NZ: usize, const HI: bool>(
        p: *const u64,
        mp: usize,
        rows: usize,
        i0: usize,
        c0: usize,
        lo_mid: *mut u64,
        hi_mid: *mut u64,
        args: &TileArgs,
    ) {
        unsafe {
            let mut lo = [[_mm512_setzero_si512(); NZ]; MR];
            let mut hi = [[_mm512_setzero_si512(); NZ]; MR];
            let ahead = args.lines.min(rows / 2);
            for r2 in 0..rows / 2 {
                if r2 < ahead {
                    _mm_prefetch::<_MM_HINT_T0>(args.prefetch.add(64 * r2).cast());
                }
                ifma_row::<MR, NZ, HI>(p.add(2 * r2 * mp), i0, c0, &mut lo, &mut hi);
                ifma_row::<MR, NZ, HI>(p.add((2 * r2 + 1) * mp), i0, c0, &mut lo, &mut hi);
            }
            if rows % 2 == 1 {
                ifma_row::<MR, NZ, HI>(p.add((rows - 1) * mp), i0, c0, &mut lo, &mut hi);
            }
            for i in 0..MR {
                for z in 0..NZ {
                    let at = args.offs[i] + 8 * z;
                    let l = lo_mid.add(at).cast::<__m512i>();
                    _mm512_storeu_si512(l, _mm512_add_epi64(_mm512_loadu_si512(l), lo[i][z]));
                    if HI {
                        let h = hi_mid.add(at).cast::<__m512i>();
                        _mm512_storeu_si512(h, _mm512_add_epi64(_mm512_loadu_si512(h), hi[i][z]));
                    }
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::IntAccumulator;
    pub(super) unsafe fn pack_wide(_: &[u8], _: usize, _: &mut IntAccumulator) {
        unreachable!("integer kernels are x86-64 only")
    }
    pub(super) unsafe fn pack_quads(_: &[u8], _: usize, _: &mut IntAccumulator) {
        unreachable!("integer kernels are x86-64 only")
    }
    pub(super) unsafe fn pack_duos(_: &[u8], _: usize, _: &mut IntAccumulator) {
        unreachable!("integer kernels are x86-64 only")
    }
    pub(super) unsafe fn sweep(_: &mut IntAccumulator, _: &[u8]) {
        unreachable!("integer kernels are x86-64 only")
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    #[test]
    fn transpose16_matches_a_scalar_transpose() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let stride = 48;
        let src: Vec<u32> = (0..16 * stride as u32)
            .map(|v| v.wrapping_mul(2654435761))
            .collect();
        let mut dst = vec![0u32; 256];
        // SAFETY: AVX-512F was detected; src holds 16 rows of `stride` dwords, dst 256.
        unsafe { super::x86::transpose16_for_test(src.as_ptr(), stride, dst.as_mut_ptr()) };
        for r in 0..16 {
            for c in 0..16 {
                assert_eq!(dst[c * 16 + r], src[r * stride + c], "row {r} column {c}");
            }
        }
    }
}
