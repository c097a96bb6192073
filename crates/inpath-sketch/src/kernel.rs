//! The hot loops: hash a batch of items, then update each sketch row in its own pass.
//!
//! The loops are written once, generically, and compiled three times: for the baseline x86-64
//! target, for x86-64-v3 (AVX2, BMI2: one-micro-op variable shifts, LZCNT) and for x86-64-v4
//! (AVX-512). [`run`] picks the best version the CPU supports at run time. The baseline version
//! is the safe scalar twin: the tests feed the same input through every version the machine
//! supports and require identical states. On other architectures only the baseline exists.
//!
//! Within each version, the SKT default layout (P_HLL = 16, 6×13, 6×13) has its own copy with
//! every shift a constant. A sketch keeping HyperLogLog alone (`--sketches hll`) takes its own
//! loop: only the high half of each hash, no counter rows. Without AVX-512's vector LZCNT the
//! HyperLogLog ranks are taken in the same scalar pass that updates the registers.
//!
//! [`chosen_level`] is the crate's one dispatch point: the CPU's level capped by `INPATH_ISA`.
//! A sketch can be pinned to another supported level (`Sketch::set_kernel_level`, a test hook),
//! so one test process compares every level for every item kind, hash mode and layout.
#![allow(unsafe_code)]

use crate::hash::{self, HashMode};
use crate::params::Parts;
use crate::sketch::BATCH;

/// The state arrays a kernel updates.
pub(crate) struct Target<'a> {
    pub hll: &'a mut [u8],
    pub cm: &'a mut [i16],
    pub agms: &'a mut [i16],
}

/// What to do with the items.
#[derive(Clone, Copy)]
pub(crate) struct Job {
    pub layout: Layout,
    pub parts: Parts,
    pub mode: HashMode,
    pub seed: u64,
}

/// The items of one call.
#[derive(Clone, Copy)]
pub(crate) enum Items<'a> {
    /// Little-endian u32 items.
    U32(&'a [u8]),
    /// Little-endian u64 items.
    U64(&'a [u8]),
    /// Hashes already computed (byte values).
    Hashes(&'a [u64], &'a [u64]),
}

/// The CPU levels with their own compiled kernel: `Portable` (the target's baseline; x86-64:
/// SSE2), `Avx2` (x86-64-v3: AVX2, BMI1/2, LZCNT, FMA) and `Avx512` (x86-64-v4) — the levels of
/// `inpath_core::isa`.
pub use inpath_core::isa::Level;

/// The best level this CPU supports.
pub fn detected_level() -> Level {
    inpath_core::isa::detected()
}

/// Every level this CPU supports up to the `INPATH_ISA` cap (for tests comparing them).
pub fn supported_levels() -> Vec<Level> {
    Level::ALL
        .into_iter()
        .filter(|&l| l <= chosen_level())
        .collect()
}

/// The level the kernel runs at: the CPU's, capped by `INPATH_ISA=portable|avx2|avx512` (and
/// the older `INPATH_KERNEL=baseline|v3`, still honoured).
pub fn chosen_level() -> Level {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let legacy = match std::env::var("INPATH_KERNEL").as_deref() {
            Ok("baseline") => Level::Portable,
            Ok("v3") => Level::Avx2,
            _ => Level::Avx512,
        };
        inpath_core::isa::effective().min(legacy)
    })
}

/// The name of the kernel that runs here (`portable`, `avx2`, `avx512`).
pub fn kernel_name() -> &'static str {
    chosen_level().name()
}

/// Runs the kernel at [`chosen_level`].
/// Returns the min and max of integer items.
pub(crate) fn run(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_at(chosen_level(), target, job, items)
}

/// Runs the kernel compiled for `level`, which must be supported (else the baseline runs).
pub(crate) fn run_at(
    level: Level,
    target: Target<'_>,
    job: &Job,
    items: Items<'_>,
) -> Option<(u64, u64)> {
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && detected_level() >= Level::Avx512 {
            // SAFETY: the CPU supports every feature `run_v4` is compiled for (checked above).
            return unsafe { run_v4(target, job, items) };
        }
        if level >= Level::Avx2 && detected_level() >= Level::Avx2 {
            // SAFETY: the CPU supports every feature `run_v3` is compiled for (checked above).
            return unsafe { run_v3(target, job, items) };
        }
    }
    let _ = level;
    run_generic::<false>(target, job, items)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,fma,popcnt")]
unsafe fn run_v3(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_generic::<false>(target, job, items)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "avx2,bmi1,bmi2,lzcnt,fma,popcnt,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
)]
unsafe fn run_v4(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_generic::<true>(target, job, items)
}

#[inline(always)]
/// `VECTOR_LZCNT`: the target has a vector leading-zero count (AVX-512 CD), so HyperLogLog
/// ranks are taken in a vectorised pass; elsewhere a fused scalar pass (LZCNT) is faster.
fn run_generic<const VECTOR_LZCNT: bool>(
    target: Target<'_>,
    job: &Job,
    items: Items<'_>,
) -> Option<(u64, u64)> {
    if job.layout == Layout::DEFAULT {
        body::<VECTOR_LZCNT>(target, &Layout::DEFAULT, job, items)
    } else {
        body::<VECTOR_LZCNT>(target, &job.layout, job, items)
    }
}

#[inline(always)]
fn body<const VECTOR_LZCNT: bool>(
    mut target: Target<'_>,
    layout: &Layout,
    job: &Job,
    items: Items<'_>,
) -> Option<(u64, u64)> {
    let seed = job.seed;
    if job.parts == Parts::HLL {
        // HyperLogLog alone: no counter rows, so no batch of three hash windows either.
        return match (items, job.mode) {
            (Items::U32(bytes), HashMode::Fast) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                4,
                |v| hash::xxh3_128_small_high_limbs(v as u32, v as u32, 4, seed),
                |v| hash::xxh3_128_small(v as u32, v as u32, 4, seed),
            ),
            (Items::U64(bytes), HashMode::Fast) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                8,
                |v| hash::xxh3_128_small_high_limbs(v as u32, (v >> 32) as u32, 8, seed),
                |v| hash::xxh3_128_small(v as u32, (v >> 32) as u32, 8, seed),
            ),
            (Items::U32(bytes), HashMode::Compat) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                4,
                |v| hash::murmur3_x64_128_small(v, 4, seed as u32).1,
                |v| hash::murmur3_x64_128_small(v, 4, seed as u32),
            ),
            (Items::U64(bytes), HashMode::Compat) => hll_only(
                target.hll,
                layout.hll_p,
                bytes,
                8,
                |v| hash::murmur3_x64_128_small(v, 8, seed as u32).1,
                |v| hash::murmur3_x64_128_small(v, 8, seed as u32),
            ),
            (Items::Hashes(lo, hi), _) => {
                let (mut bucket, mut rank) = (vec![0u32; BATCH], vec![0u8; BATCH]);
                for (lo, hi) in lo.chunks(BATCH).zip(hi.chunks(BATCH)) {
                    let n = lo.len();
                    hll_buckets_and_ranks(layout.hll_p, lo, hi, &mut bucket[..n], &mut rank[..n]);
                    hll_update(target.hll, &bucket[..n], &rank[..n]);
                }
                None
            }
        };
    }
    // The batch buffers live as long as the thread: made per call they were allocated and
    // returned to the OS up to 16 times per 4 MiB (once per hot-counter fold), and with two
    // lanes each trim's TLB shootdown interrupted the other lane (2 threads, all three
    // sketches ran markedly slower than in a process whose allocator had stopped trimming).
    // Taken out of the thread-local and put back, not used inside a closure, so that the work
    // stays inlined in the caller compiled for this CPU's features.
    let mut scratch = SCRATCH.take().unwrap_or_else(Scratch::new);
    let range = run_with_scratch::<VECTOR_LZCNT>(&mut target, layout, job, items, &mut scratch);
    SCRATCH.set(Some(scratch));
    range
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Scratch>> = const { std::cell::Cell::new(None) };
}

#[inline(always)]
fn run_with_scratch<const VECTOR_LZCNT: bool>(
    target: &mut Target<'_>,
    layout: &Layout,
    job: &Job,
    items: Items<'_>,
    scratch: &mut Scratch,
) -> Option<(u64, u64)> {
    let seed = job.seed;
    match (items, job.mode) {
        (Items::U32(bytes), HashMode::Fast) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 4, |v| {
                hash::xxh3_128_small_limbs(v as u32, v as u32, 4, seed)
            })
        }
        (Items::U32(bytes), HashMode::Compat) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 4, |v| {
                hash::murmur3_x64_128_small(v, 4, seed as u32)
            })
        }
        (Items::U64(bytes), HashMode::Fast) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 8, |v| {
                hash::xxh3_128_small_limbs(v as u32, (v >> 32) as u32, 8, seed)
            })
        }
        (Items::U64(bytes), HashMode::Compat) => {
            hash_and_apply::<VECTOR_LZCNT>(target, layout, job.parts, scratch, bytes, 8, |v| {
                hash::murmur3_x64_128_small(v, 8, seed as u32)
            })
        }
        (Items::Hashes(lo, hi), _) => {
            for (lo, hi) in lo.chunks(BATCH).zip(hi.chunks(BATCH)) {
                let mid = &mut scratch.mid[..lo.len()];
                for ((m, &l), &h) in mid.iter_mut().zip(lo).zip(hi) {
                    *m = (l >> 32) | (h << 32);
                }
                apply::<VECTOR_LZCNT>(target, layout, job.parts, lo, mid, hi);
            }
            None
        }
    }
}

/// Items per HyperLogLog-only batch: the high hash halves (8 KiB) stay in L1 next to the
/// registers' hot lines.
const HLL_BATCH: usize = 1024;

/// HyperLogLog alone over little-endian items of `width` bytes: a vectorised pass computes the
/// high 64 bits of each hash (and the min/max), then one scalar pass takes bucket and rank and
/// updates the register. `hash_high` gives the high half, `hash_full` the whole hash for the
/// rare item whose rank reaches into the low half.
#[inline(always)]
fn hll_only(
    hll: &mut [u8],
    p: u32,
    bytes: &[u8],
    width: usize,
    hash_high: impl Fn(u64) -> u64,
    hash_full: impl Fn(u64) -> (u64, u64),
) -> Option<(u64, u64)> {
    let read = |item: &[u8]| read_item(item, width);
    let mask = hll.len() - 1;
    let mut high = [0u64; HLL_BATCH];
    let (mut min, mut max) = (u64::MAX, 0u64);
    for batch in bytes.chunks(HLL_BATCH * width) {
        let n = batch.len() / width;
        for (item, h) in batch.chunks_exact(width).zip(high.iter_mut()) {
            *h = hash_high(read(item));
        }
        for item in batch.chunks_exact(width) {
            let v = read(item);
            min = min.min(v);
            max = max.max(v);
        }
        for (i, &h) in high[..n].iter().enumerate() {
            let bucket = (h >> (64 - p)) as usize & mask;
            let shifted = h << p;
            let rank = if shifted != 0 {
                // The low half's bits only fill in below the high half's first set bit.
                (shifted.leading_zeros() + 1) as u8
            } else {
                let (l, _) = hash_full(read(&batch[i * width..(i + 1) * width]));
                hll_rank(p, h, l)
            };
            raise(&mut hll[bucket], rank);
        }
    }
    (!bytes.is_empty()).then_some((min, max))
}

/// A little-endian item of `width` (4 or 8) bytes.
#[inline(always)]
fn read_item(item: &[u8], width: usize) -> u64 {
    if width == 4 {
        u32::from_le_bytes(item.try_into().expect("4 bytes")) as u64
    } else {
        u64::from_le_bytes(item.try_into().expect("8 bytes"))
    }
}

/// HyperLogLog rank of the hash `(h << 64) | l`: clz((h << P) | (2^P − 1)) + 1 over 128 bits.
#[inline(always)]
fn hll_rank(p: u32, h: u64, l: u64) -> u8 {
    // The top 64 bits of h << P; all zero only with probability 2^-(64-P).
    let top = (h << p) | (l >> (64 - p));
    if top != 0 {
        (top.leading_zeros() + 1) as u8
    } else {
        (65 + ((l << p) | ((1u64 << p) - 1)).leading_zeros()) as u8
    }
}

/// Raises a register to `rank`. Once the registers fill up a new rank rarely beats the old
/// one: a predictable branch is cheaper than a store per item.
#[inline(always)]
fn raise(register: &mut u8, rank: u8) {
    if rank > *register {
        *register = rank;
    }
}

/// Bucket, rank and register update of each hash in one scalar pass.
#[inline(always)]
fn hll_fused(hll: &mut [u8], p: u32, lo: &[u64], hi: &[u64]) {
    let mask = hll.len() - 1;
    for (&l, &h) in lo.iter().zip(hi) {
        raise(&mut hll[(h >> (64 - p)) as usize & mask], hll_rank(p, h, l));
    }
}

/// Raises each bucket's register to its rank.
#[inline(always)]
fn hll_update(hll: &mut [u8], bucket: &[u32], rank: &[u8]) {
    for (&bucket, &rank) in bucket.iter().zip(rank) {
        raise(&mut hll[bucket as usize], rank);
    }
}

/// Per-call buffers for one batch of hashes, on the heap (3 × 64 KiB).
struct Scratch {
    lo: Vec<u64>,
    mid: Vec<u64>,
    hi: Vec<u64>,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            lo: vec![0; BATCH],
            mid: vec![0; BATCH],
            hi: vec![0; BATCH],
        }
    }
}

/// Hashes little-endian items of `width` bytes (4 or 8) batch by batch and applies them. The
/// hash pass and the min/max pass are separate, branch-free loops so each vectorises.
#[inline(always)]
fn hash_and_apply<const VECTOR_LZCNT: bool>(
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
        apply::<VECTOR_LZCNT>(target, layout, parts, lo, mid, hi);
    }
    (!bytes.is_empty()).then_some((min, max))
}

/// Updates the chosen sketches from one batch of hashes.
#[inline(always)]
fn apply<const VECTOR_LZCNT: bool>(
    target: &mut Target<'_>,
    layout: &Layout,
    parts: Parts,
    lo: &[u64],
    mid: &[u64],
    hi: &[u64],
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
        let (mut bucket, mut rank) = (vec![0u32; n], vec![0u8; n]);
        hll_buckets_and_ranks(layout.hll_p, lo, hi, &mut bucket, &mut rank);
        hll_update(target.hll, &bucket, &rank);
    } else if parts.hll {
        // Without a vector LZCNT that pass is scalar anyway: one fused pass saves the two
        // intermediate arrays (several times faster; `bench/sketch.py` measures it).
        hll_fused(target.hll, layout.hll_p, lo, hi);
    }
    // Count-Min and Fast-AGMS rows: one fused pass per row (word, shift, mask, update). Here
    // the limit is the store per update: an L1 cache commits about one store per cycle to
    // distinct lines, so precomputing indices (tried) only adds work, and pairing a Count-Min
    // row with a Fast-AGMS row in one pass (tried) gained nothing measurable.
    if parts.cm {
        let p = layout.cm_p;
        let width = 1usize << p;
        let mask = width as u64 - 1;
        for row in 0..layout.cm_rows {
            let block = row as u32 / layout.cm_rows_per_block;
            let offset = (row as u32 % layout.cm_rows_per_block) * p;
            windows.prepare(block);
            let (words, shift) = windows.get(block, offset, p);
            let counters = &mut target.cm[row * width..(row + 1) * width];
            for &w in words {
                let c = &mut counters[((w >> shift) & mask) as usize];
                *c = c.wrapping_add(1);
            }
        }
    }
    if parts.agms {
        let p = layout.agms_p;
        let width = 1usize << p;
        let mask = width as u64 - 1;
        for row in 0..layout.agms_rows {
            let block = row as u32 / layout.agms_rows_per_block;
            let offset = (row as u32 % layout.agms_rows_per_block) * (p + 1);
            windows.prepare(block);
            let (words, shift) = windows.get(block, offset, p + 1);
            let counters = &mut target.agms[row * width..(row + 1) * width];
            for &w in words {
                let v = w >> shift;
                let c = &mut counters[(v & mask) as usize];
                // Bit P of the slice is the sign: set +1, clear -1.
                *c = c.wrapping_add(((v >> p) & 1) as i16 * 2 - 1);
            }
        }
    }
}

/// HyperLogLog bucket (top P bits) and rank (clz((h << P) | (2^P − 1)) + 1 over 128 bits) of
/// every hash, branch-free so it vectorises.
#[inline(always)]
fn hll_buckets_and_ranks(p: u32, lo: &[u64], hi: &[u64], bucket: &mut [u32], rank: &mut [u8]) {
    let low_mask = (1u64 << p) - 1;
    for (((b, r), &l), &h) in bucket.iter_mut().zip(rank.iter_mut()).zip(lo).zip(hi) {
        *b = (h >> (64 - p)) as u32;
        // The top 64 bits of h << P; all zero only with probability 2^-(64-P).
        let top = (h << p) | (l >> (64 - p));
        let low_rank = 65 + ((l << p) | low_mask).leading_zeros();
        *r = if top != 0 {
            top.leading_zeros() + 1
        } else {
            low_rank
        } as u8;
    }
}

/// Where each row's bits are, resolved for the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    hll_p: u32,
    cm_p: u32,
    cm_rows: usize,
    agms_p: u32,
    agms_rows: usize,
    cm_rows_per_block: u32,
    agms_rows_per_block: u32,
}

impl Layout {
    /// P_HLL = 16, Count-Min 6×13, Fast-AGMS 6×13: all rows in the first 128 bits.
    const DEFAULT: Layout = Layout {
        hll_p: 16,
        cm_p: 13,
        cm_rows: 6,
        agms_p: 13,
        agms_rows: 6,
        cm_rows_per_block: 128 / 13,
        agms_rows_per_block: 128 / 14,
    };

    pub(crate) fn new(params: &Params, slicing: &Slicing) -> Layout {
        Layout {
            hll_p: params.hll_p as u32,
            cm_p: params.cm_p as u32,
            cm_rows: params.cm_rows as usize,
            agms_p: params.agms_p as u32,
            agms_rows: params.agms_rows as usize,
            cm_rows_per_block: slicing.cm_rows_per_block,
            agms_rows_per_block: slicing.agms_rows_per_block,
        }
    }
}

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

use crate::params::{Params, Slicing};
