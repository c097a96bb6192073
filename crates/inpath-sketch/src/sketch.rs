//! The sketch state: HyperLogLog registers, Count-Min and Fast-AGMS counters, min/max/count,
//! and the batch kernel that updates them from one hash per item.
//!
//! # The kernel
//! Items are processed in batches of [`BATCH`]: first every item's 128-bit hash is computed into
//! two arrays, then each sketch row is updated in its own pass over the batch. A 6×13 row is
//! 32 KiB, so each pass works inside the L1 cache instead of touching all 448 KiB of state per
//! item; the index extraction passes are plain shifts and masks that the compiler vectorises.
//!
//! # Counter width
//! Counters are 16-bit in the hot loop and folded into 32- and 64-bit tiers before they could
//! overflow ([`crate::counters`]), so a 6×13 row pass works on 16 KiB that stays in L1 (Fast-AGMS:
//! 2 × 16 KiB, its hot counts split by sign so that every update is an increment). SKT used
//! 32-bit counters (Table 4.3); the totals here are exact 64-bit values.

use crate::arch::{self, Items, Job, Layout, Level, Target};
use crate::counters::{Tiers, HOT_LIMIT, MID_LIMIT};
use crate::hash::{self, Hash128};
use crate::params::{Params, Parts, Slicing};
use crate::{Error, Result};

pub use crate::arch::BATCH;

/// What the items are: fixes how they are hashed, how min/max are kept and how keys are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// Unsigned 32-bit little-endian integers.
    U32,
    /// Unsigned 64-bit little-endian integers.
    U64,
    /// Byte strings: text lines or CSV fields. Min/max are taken over the values that parse as
    /// finite numbers.
    Bytes,
}

impl ItemKind {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ItemKind::U32 => "u32",
            ItemKind::U64 => "u64",
            ItemKind::Bytes => "bytes",
        }
    }
}

/// Exact minimum and maximum of the items.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Extremes {
    /// For integer items: `None` until the first item.
    Int(Option<(u64, u64)>),
    /// For byte items: the range of the values that parse as finite numbers and how many did.
    Numeric {
        /// `(min, max)`, `None` until the first numeric value.
        range: Option<(f64, f64)>,
        /// Values that parsed as numbers.
        numeric: u64,
    },
}

/// HyperLogLog + Count-Min + Fast-AGMS + min/max/count, fed one hash per item.
#[derive(Clone, Debug)]
pub struct Sketch {
    params: Params,
    slicing: Slicing,
    kind: ItemKind,
    hll: Vec<u8>,
    cm: Tiers,
    agms: Tiers,
    /// Items in the hot tiers since they were last folded.
    hot_items: u64,
    /// Items in the mid tiers since they were last folded.
    mid_items: u64,
    count: u64,
    extremes: Extremes,
    /// The kernel level set by [`Sketch::set_kernel_level`] (a test hook); `None` runs the
    /// process-wide [`arch::chosen_level`]. Not part of the state.
    level: Option<Level>,
}

impl Sketch {
    /// An empty sketch for items of `kind`.
    pub fn new(params: Params, kind: ItemKind) -> Result<Self> {
        params.validate()?;
        Ok(Sketch {
            params,
            slicing: params.slicing(),
            kind,
            hll: vec![0; params.hll_registers()],
            cm: Tiers::new(params.cm_rows as usize * params.cm_width()),
            agms: Tiers::new_split(
                params.agms_rows as usize * params.agms_width(),
                params.agms_width(),
            ),
            hot_items: 0,
            mid_items: 0,
            count: 0,
            extremes: empty_extremes(kind),
            level: None,
        })
    }

    /// An empty sketch with the same parameters, kind and kernel level.
    pub(crate) fn empty_like(&self) -> Sketch {
        let mut sketch =
            Sketch::new(self.params, self.kind).expect("parameters were validated already");
        sketch.level = self.level;
        sketch
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The item kind.
    pub fn kind(&self) -> ItemKind {
        self.kind
    }

    /// Items seen.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact min and max.
    pub fn extremes(&self) -> Extremes {
        self.extremes
    }

    /// The HLL registers.
    pub fn hll_registers(&self) -> &[u8] {
        &self.hll
    }

    /// Count-Min counter `index` of row `row` (the full 64-bit total).
    pub fn cm_counter(&self, row: usize, index: usize) -> u64 {
        let at = row * self.params.cm_width() + index;
        self.cm.total(at) as u64
    }

    /// Fast-AGMS counter `index` of row `row` (the full 64-bit total).
    pub fn agms_counter(&self, row: usize, index: usize) -> i64 {
        let at = row * self.params.agms_width() + index;
        self.agms.total(at)
    }

    /// All Count-Min counters, row-major, as 64-bit totals.
    pub fn cm_counters(&self) -> Vec<u64> {
        self.cm.totals().into_iter().map(|c| c as u64).collect()
    }

    /// All Fast-AGMS counters, row-major, as 64-bit totals.
    pub fn agms_counters(&self) -> Vec<i64> {
        self.agms.totals()
    }

    /// Resets to the empty state, keeping parameters and kind.
    pub fn clear(&mut self) {
        self.hll.fill(0);
        self.cm.clear();
        self.agms.clear();
        self.hot_items = 0;
        self.mid_items = 0;
        self.count = 0;
        self.extremes = empty_extremes(self.kind);
    }

    /// Whether nothing has been inserted.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    // -----------------------------------------------------------------------------------------
    // Updates

    /// Inserts `u32` items given as little-endian bytes (`items.len()` must be a multiple of 4).
    pub fn update_u32_le(&mut self, items: &[u8]) -> Result<()> {
        self.expect_kind(ItemKind::U32)?;
        self.ingest(Items::U32(items), self.params.parts());
        Ok(())
    }

    /// Inserts `u32` items.
    pub fn update_u32(&mut self, items: &[u32]) -> Result<()> {
        // Little-endian bytes are the item's canonical form; on little-endian machines this is
        // a plain reinterpretation, done safely chunk by chunk.
        let mut bytes = Vec::with_capacity(BATCH * 4);
        for chunk in items.chunks(BATCH) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            self.update_u32_le(&bytes)?;
        }
        Ok(())
    }

    /// Inserts `u64` items given as little-endian bytes (`items.len()` must be a multiple of 8).
    pub fn update_u64_le(&mut self, items: &[u8]) -> Result<()> {
        self.expect_kind(ItemKind::U64)?;
        self.ingest(Items::U64(items), self.params.parts());
        Ok(())
    }

    /// Inserts `u64` items.
    pub fn update_u64(&mut self, items: &[u64]) -> Result<()> {
        let mut bytes = Vec::with_capacity(BATCH * 8);
        for chunk in items.chunks(BATCH) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            self.update_u64_le(&bytes)?;
        }
        Ok(())
    }

    /// Inserts byte-string values (lines, fields). For many values prefer a [`ValueBatcher`],
    /// which hashes them in batches.
    pub fn update_values<'a>(&mut self, values: impl IntoIterator<Item = &'a [u8]>) -> Result<()> {
        let mut batcher = ValueBatcher::new();
        for value in values {
            batcher.push(self, value)?;
        }
        batcher.flush(self)
    }

    fn expect_kind(&self, kind: ItemKind) -> Result<()> {
        if self.kind == kind {
            Ok(())
        } else {
            Err(Error::State(format!(
                "this sketch takes {} items, not {}",
                self.kind.name(),
                kind.name()
            )))
        }
    }

    fn note_int_range(&mut self, min: u64, max: u64) {
        if let Extremes::Int(range) = &mut self.extremes {
            *range = Some(match *range {
                None => (min, max),
                Some((a, b)) => (a.min(min), b.max(max)),
            });
        }
    }

    fn note_numeric(&mut self, value: f64) {
        if let Extremes::Numeric { range, numeric } = &mut self.extremes {
            *numeric += 1;
            *range = Some(match *range {
                None => (value, value),
                Some((a, b)) => (a.min(value), b.max(value)),
            });
        }
    }

    /// Updates all three sketches from hashes `h = (hi << 64) | lo` of byte values.
    pub(crate) fn apply(&mut self, lo: &[u64], hi: &[u64]) {
        self.ingest(Items::Hashes(lo, hi), self.params.parts());
    }

    /// Feeds items through the kernel (at the sketch's own level if one is set, else at
    /// [`arch::chosen_level`]), folding the hot counters every [`HOT_LIMIT`] items.
    fn ingest(&mut self, items: Items<'_>, parts: Parts) {
        let level = self.level;
        let n = match items {
            Items::U32(bytes) => bytes.len() / 4,
            Items::U64(bytes) => bytes.len() / 8,
            Items::Hashes(lo, _) => lo.len(),
        };
        let job = Job {
            layout: Layout::new(&self.params, &self.slicing),
            parts,
            mode: self.params.hash,
            seed: self.params.seed,
        };
        let mut done = 0;
        while done < n {
            if self.hot_items >= HOT_LIMIT {
                self.fold_hot();
            }
            let take = ((HOT_LIMIT - self.hot_items) as usize).min(n - done);
            let part = match items {
                Items::U32(bytes) => Items::U32(&bytes[done * 4..(done + take) * 4]),
                Items::U64(bytes) => Items::U64(&bytes[done * 8..(done + take) * 8]),
                Items::Hashes(lo, hi) => {
                    Items::Hashes(&lo[done..done + take], &hi[done..done + take])
                }
            };
            let target = Target {
                hll: &mut self.hll,
                cm: &mut self.cm.hot,
                agms: &mut self.agms.hot,
            };
            let range = match level {
                Some(level) => arch::run_at(level, target, &job, part),
                None => arch::run(target, &job, part),
            };
            if let Some((min, max)) = range {
                self.note_int_range(min, max);
            }
            self.hot_items += take as u64;
            self.count += take as u64;
            done += take;
        }
    }

    /// Test hook: every later update of this sketch (u32 and u64 items, hashes of byte values,
    /// any choice of sketches and layout) runs the kernel compiled for `level` (see
    /// [`crate::arch::supported_levels`]) instead of the process-wide
    /// [`arch::chosen_level`]; `None` goes back to that. Lets one test process compare every
    /// version without `INPATH_ISA`. An unsupported level runs the best one below it. The level
    /// is not part of the state: [`Sketch::same_state`], merges and files ignore it, and
    /// [`Sketch::clear`] keeps it.
    #[doc(hidden)]
    pub fn set_kernel_level(&mut self, level: Option<Level>) {
        self.level = level;
    }

    /// The level set by [`Sketch::set_kernel_level`], if any.
    #[doc(hidden)]
    pub fn kernel_level(&self) -> Option<Level> {
        self.level
    }

    /// Benchmark hook: inserts `u32` items into only the chosen sketches of those kept
    /// ([`Parts::NONE`] measures the hash alone). The other sketches are left untouched (and so
    /// inconsistent with the count): use only on throw-away sketches.
    #[doc(hidden)]
    pub fn bench_update_u32_parts(&mut self, items: &[u8], parts: Parts) {
        let kept = self.params.parts();
        let parts = Parts {
            hll: parts.hll && kept.hll,
            cm: parts.cm && kept.cm,
            agms: parts.agms && kept.agms,
        };
        self.ingest(Items::U32(items), parts);
    }

    /// Folds the hot tiers into the mid tiers (first folding the mid tiers into the wide ones
    /// if the hot items would not fit).
    fn fold_hot(&mut self) {
        if self.mid_items + self.hot_items > MID_LIMIT {
            self.cm.fold_mid();
            self.agms.fold_mid();
            self.mid_items = 0;
        }
        self.cm.fold_hot();
        self.agms.fold_hot();
        self.mid_items += self.hot_items;
        self.hot_items = 0;
    }

    // -----------------------------------------------------------------------------------------
    // Merge

    /// Whether `other` can be merged into this sketch; the error says which setting differs.
    pub fn check_compatible(&self, other: &Sketch) -> Result<()> {
        let (a, b) = (&self.params, &other.params);
        let mut diffs = Vec::new();
        if self.kind != other.kind {
            diffs.push(format!(
                "item kind {} vs {}",
                self.kind.name(),
                other.kind.name()
            ));
        }
        if a.hash != b.hash {
            diffs.push(format!("hash {} vs {}", a.hash.name(), b.hash.name()));
        }
        if a.seed != b.seed {
            diffs.push(format!("seed {:#x} vs {:#x}", a.seed, b.seed));
        }
        if a.hll_p != b.hll_p {
            diffs.push(format!("HLL precision {} vs {}", a.hll_p, b.hll_p));
        }
        if (a.cm_rows, a.cm_p) != (b.cm_rows, b.cm_p) {
            diffs.push(format!(
                "Count-Min {}x{} vs {}x{}",
                a.cm_rows, a.cm_p, b.cm_rows, b.cm_p
            ));
        }
        if (a.agms_rows, a.agms_p) != (b.agms_rows, b.agms_p) {
            diffs.push(format!(
                "Fast-AGMS {}x{} vs {}x{}",
                a.agms_rows, a.agms_p, b.agms_rows, b.agms_p
            ));
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(Error::Incompatible(format!(
                "the sketches were made with different settings: {}",
                diffs.join(", ")
            )))
        }
    }

    /// Merges `other` into this sketch: registers take the max, counters add, min/max/count
    /// combine. The result equals the sketch of both inputs together.
    pub fn merge(&mut self, other: &Sketch) -> Result<()> {
        self.check_compatible(other)?;
        for (a, &b) in self.hll.iter_mut().zip(&other.hll) {
            *a = (*a).max(b);
        }
        // Our hot tier goes up a tier, their hot tier into our mid tier, the rest of theirs
        // into our wide tier: every tier stays within its limit.
        self.fold_hot();
        if self.mid_items + other.hot_items > MID_LIMIT {
            self.cm.fold_mid();
            self.agms.fold_mid();
            self.mid_items = 0;
        }
        self.cm.add_hot_to_mid(&other.cm);
        self.agms.add_hot_to_mid(&other.agms);
        self.mid_items += other.hot_items;
        if other.cm.has_mid_or_wide(other.mid_items) {
            self.cm.add_mid_and_wide_to_wide(&other.cm);
            self.agms.add_mid_and_wide_to_wide(&other.agms);
        }
        self.count += other.count;
        self.extremes = match (self.extremes, other.extremes) {
            (Extremes::Int(a), Extremes::Int(b)) => Extremes::Int(match (a, b) {
                (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
                (x, None) | (None, x) => x,
            }),
            (
                Extremes::Numeric {
                    range: a,
                    numeric: na,
                },
                Extremes::Numeric {
                    range: b,
                    numeric: nb,
                },
            ) => Extremes::Numeric {
                range: match (a, b) {
                    (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
                    (x, None) | (None, x) => x,
                },
                numeric: na + nb,
            },
            _ => unreachable!("kinds were checked equal"),
        };
        Ok(())
    }

    /// Whether two sketches hold the same state (registers, counters, min/max/count).
    pub fn same_state(&self, other: &Sketch) -> bool {
        self.params == other.params
            && self.kind == other.kind
            && self.count == other.count
            && self.extremes == other.extremes
            && self.hll == other.hll
            && self.cm_counters() == other.cm_counters()
            && self.agms_counters() == other.agms_counters()
    }

    // -----------------------------------------------------------------------------------------
    // Restoring from a file

    /// Builds a sketch from saved parts (used by the file reader).
    pub(crate) fn from_parts(
        params: Params,
        kind: ItemKind,
        count: u64,
        extremes: Extremes,
        hll: Vec<u8>,
        cm: Vec<i64>,
        agms: Vec<i64>,
    ) -> Result<Sketch> {
        let mut sketch = Sketch::new(params, kind)?;
        sketch.count = count;
        sketch.extremes = extremes;
        sketch.hll = hll;
        sketch.cm = Tiers::from_totals(cm, count, &sketch.cm);
        sketch.agms = Tiers::from_totals(agms, count, &sketch.agms);
        sketch.mid_items = count;
        Ok(sketch)
    }

    pub(crate) fn hash_key(&self, key: &[u8]) -> Hash128 {
        let (mode, seed) = (self.params.hash, self.params.seed);
        hash::hash_bytes(mode, seed, key)
    }

    /// The hash stream blocks of one hash (block 0 is the hash itself).
    pub(crate) fn blocks_of(&self, h: Hash128) -> Vec<Hash128> {
        (0..self.slicing.blocks as u64)
            .map(|k| {
                if k == 0 {
                    h
                } else {
                    hash::extension_block(h, k)
                }
            })
            .collect()
    }

    pub(crate) fn slicing(&self) -> &Slicing {
        &self.slicing
    }
}

/// Hashes byte-string values in batches and feeds them to a sketch; also tracks the numeric
/// range of the values.
#[derive(Debug)]
pub struct ValueBatcher {
    lo: Vec<u64>,
    hi: Vec<u64>,
}

impl Default for ValueBatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl ValueBatcher {
    /// An empty batcher.
    pub fn new() -> Self {
        ValueBatcher {
            lo: Vec::with_capacity(BATCH),
            hi: Vec::with_capacity(BATCH),
        }
    }

    /// Adds one value; the sketch is updated when a batch is full.
    pub fn push(&mut self, sketch: &mut Sketch, value: &[u8]) -> Result<()> {
        sketch.expect_kind(ItemKind::Bytes)?;
        let (lo, hi) = sketch.hash_key(value);
        self.lo.push(lo);
        self.hi.push(hi);
        if let Some(number) = parse_number(value) {
            sketch.note_numeric(number);
        }
        if self.lo.len() == BATCH {
            self.flush(sketch)?;
        }
        Ok(())
    }

    /// Feeds the values held so far.
    pub fn flush(&mut self, sketch: &mut Sketch) -> Result<()> {
        sketch.apply(&self.lo, &self.hi);
        self.lo.clear();
        self.hi.clear();
        Ok(())
    }

    /// Values held, not yet in the sketch.
    pub fn pending(&self) -> usize {
        self.lo.len()
    }
}

/// Parses a value as a finite number, ignoring surrounding ASCII whitespace.
fn parse_number(value: &[u8]) -> Option<f64> {
    let text = value.trim_ascii();
    match text.first() {
        Some(b'0'..=b'9' | b'-' | b'+' | b'.') => {}
        _ => return None,
    }
    let number: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    number.is_finite().then_some(number)
}

fn empty_extremes(kind: ItemKind) -> Extremes {
    match kind {
        ItemKind::U32 | ItemKind::U64 => Extremes::Int(None),
        ItemKind::Bytes => Extremes::Numeric {
            range: None,
            numeric: 0,
        },
    }
}
