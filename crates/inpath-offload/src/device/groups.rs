//! The lanes' group table: keys to accumulators, merged across lanes.

use crate::graph::{Agg, AggFunc};
use arrow_array::ArrayRef;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The group table of AGGREGATE (one group) or AGGREGATE_GROUPBY.
pub(super) struct Groups {
    /// Per key: each group's key (a dictionary code or a register value).
    pub(super) keys: Vec<Vec<i64>>,
    /// Per key that is a dictionary column: its values (to emit codes as a dictionary).
    pub(super) dictionaries: Vec<Option<ArrayRef>>,
    /// Dense lookup by composite dictionary code (when every key is a small dictionary).
    pub(super) dense: Option<(Vec<usize>, Vec<u32>)>,
    pub(super) sparse: HashMap<Box<[i64]>, u32, BuildHasherDefault<MulHasher>>,
    pub(super) packed: HashMap<u128, u32, BuildHasherDefault<MulHasher>>,
    /// Per aggregate: sums, minima or maxima, and counts, per group.
    pub(super) acc: Vec<Vec<i128>>,
    pub(super) count: Vec<Vec<i64>>,
    pub(super) len: usize,
}

impl Groups {
    pub(super) fn new(keys: usize, aggs: usize) -> Groups {
        Groups {
            keys: vec![Vec::new(); keys],
            dictionaries: vec![None; keys],
            dense: None,
            sparse: HashMap::default(),
            packed: HashMap::default(),
            acc: vec![Vec::new(); aggs],
            count: vec![Vec::new(); aggs],
            len: 0,
        }
    }

    /// Bytes one group holds (keys, accumulators, counts, and its share of the map's lookup:
    /// a dense table's slots are counted apart, by [`Groups::bytes`]).
    pub(super) fn per_group(&self) -> usize {
        let lookup = match self.dense {
            Some(_) => 0,
            None => LOOKUP_BYTES,
        };
        self.keys.len() * 8 + self.acc.len() * 24 + lookup
    }

    /// A dense table of `slots` slots (`strides` apart per key, each key's value less its
    /// `offsets` entry) with the groups held given their slots, the maps emptied; `None`
    /// (the maps kept) if a group's keys fall outside the table.
    pub(super) fn slotted(
        &mut self,
        strides: &[usize],
        offsets: &[i64],
        slots: usize,
    ) -> Option<Vec<u32>> {
        let mut table = vec![u32::MAX; slots];
        for g in 0..self.len {
            let mut at = 0i64;
            for ((k, s), o) in self.keys.iter().zip(strides).zip(offsets) {
                at = at.checked_add(k[g].checked_sub(*o)?.checked_mul(*s as i64)?)?;
            }
            *table.get_mut(usize::try_from(at).ok()?)? = g as u32;
        }
        self.sparse = HashMap::default();
        self.packed = HashMap::default();
        Some(table)
    }

    pub(super) fn bytes(&self) -> u64 {
        let dense = self.dense.as_ref().map_or(0, |(_, slots)| slots.len() * 4);
        (self.len * self.per_group() + dense) as u64
    }

    pub(super) fn push_group(&mut self, key: &[i64]) -> u32 {
        for (k, v) in self.keys.iter_mut().zip(key) {
            k.push(*v);
        }
        for (a, c) in self.acc.iter_mut().zip(&mut self.count) {
            a.push(0);
            c.push(0);
        }
        self.len += 1;
        (self.len - 1) as u32
    }

    pub(super) fn clear(&mut self) {
        for k in &mut self.keys {
            k.clear();
        }
        for (a, c) in self.acc.iter_mut().zip(&mut self.count) {
            a.clear();
            c.clear();
        }
        if let Some((_, slots)) = &mut self.dense {
            slots.iter_mut().for_each(|s| *s = u32::MAX);
        }
        self.sparse.clear();
        self.packed.clear();
        self.len = 0;
    }

    /// The lanes' tables of one task as one, groups with the same keys merged: the device's
    /// own final aggregate. The table is then only emitted (it has no lookups). Many groups
    /// from several lanes are merged in as many parts at once, split by a hash of their keys
    /// (TPC-H Q20 sends 0.54 M whole groups from 0.9 M rows: one thread took ~75 ms to merge
    /// them, the host's two partitions half that).
    pub(super) fn merged(tables: Vec<Groups>, aggs: &[Agg]) -> Option<Groups> {
        let parts = tables.len();
        let total: usize = tables.iter().map(|g| g.len).sum();
        let g = Groups::concatenated(tables)?;
        let width = g.keys.len();
        if parts < 2 || total < PARALLEL_MERGE {
            return Some(merge_by_values(g, aggs, width, |g, k, i| g.keys[k][i]));
        }
        let mut picks: Vec<Vec<u32>> = vec![Vec::with_capacity(total / parts + 1); parts];
        for i in 0..g.len {
            let mut h = MulHasher::default();
            for k in &g.keys {
                h.write_u64(k[i] as u64);
            }
            // The high bits: the merge's own table indexes by the low ones.
            picks[((h.finish() >> 32) % parts as u64) as usize].push(i as u32);
        }
        let merged: Vec<Groups> = std::thread::scope(|scope| {
            let handles: Vec<_> = picks
                .iter()
                .map(|p| {
                    let part = g.subset(p);
                    scope.spawn(move || merge_by_values(part, aggs, width, |g, k, i| g.keys[k][i]))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        Groups::concatenated(merged)
    }

    /// The tables one after the other, with no lookups (none if there are no tables).
    pub(super) fn concatenated(tables: Vec<Groups>) -> Option<Groups> {
        let mut tables = tables.into_iter();
        let mut g = tables.next()?;
        g.dense = None;
        g.sparse.clear();
        g.packed.clear();
        for other in tables {
            for (k, theirs) in g.keys.iter_mut().zip(&other.keys) {
                k.extend_from_slice(theirs);
            }
            for (a, theirs) in g.acc.iter_mut().zip(&other.acc) {
                a.extend_from_slice(theirs);
            }
            for (c, theirs) in g.count.iter_mut().zip(&other.count) {
                c.extend_from_slice(theirs);
            }
            g.len += other.len;
            for (d, theirs) in g.dictionaries.iter_mut().zip(other.dictionaries) {
                if d.is_none() {
                    *d = theirs;
                }
            }
        }
        Some(g)
    }

    /// The groups at `picks`, in that order.
    pub(super) fn subset(&self, picks: &[u32]) -> Groups {
        let gather = |v: &Vec<i64>| picks.iter().map(|&g| v[g as usize]).collect::<Vec<_>>();
        Groups {
            keys: self.keys.iter().map(gather).collect(),
            dictionaries: self.dictionaries.clone(),
            dense: None,
            sparse: HashMap::default(),
            packed: HashMap::default(),
            acc: self
                .acc
                .iter()
                .map(|v| picks.iter().map(|&g| v[g as usize]).collect())
                .collect(),
            count: self.count.iter().map(gather).collect(),
            len: picks.len(),
        }
    }
}

/// The table with the groups of equal `key` merged (the first one stays, in order).
pub(super) fn merge_groups<K: std::hash::Hash + Eq>(
    mut g: Groups,
    aggs: &[Agg],
    key: impl Fn(&Groups, usize) -> K,
) -> Groups {
    let mut first: HashMap<K, u32, BuildHasherDefault<MulHasher>> =
        HashMap::with_capacity_and_hasher(g.len, Default::default());
    let mut picks: Vec<u32> = Vec::with_capacity(g.len);
    for i in 0..g.len {
        let k = key(&g, i);
        match first.entry(k) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(i as u32);
                picks.push(i as u32);
            }
            std::collections::hash_map::Entry::Occupied(e) => {
                let t = *e.get() as usize;
                for (a, agg) in aggs.iter().enumerate() {
                    let (count, value) = (g.count[a][i], g.acc[a][i]);
                    let (c, v) = (&mut g.count[a], &mut g.acc[a]);
                    merge_state(agg.func, (&mut c[t], &mut v[t]), (count, value));
                }
            }
        }
    }
    if picks.len() == g.len {
        g
    } else {
        g.subset(&picks)
    }
}

/// The table with the groups whose `width` values `value(g, k, i)` (k below `width`) are
/// equal merged, the values side by side in one buffer (no allocation a group).
pub(super) fn merge_by_values(
    g: Groups,
    aggs: &[Agg],
    width: usize,
    value: impl Fn(&Groups, usize, usize) -> i64,
) -> Groups {
    let flat: Vec<i64> = (0..g.len)
        .flat_map(|i| (0..width).map(move |k| (i, k)))
        .map(|(i, k)| value(&g, k, i))
        .collect();
    merge_groups(g, aggs, |_, i| &flat[i * width..(i + 1) * width])
}

/// Folds one group's state of an aggregate (`count` rows, `value`) into another's.
pub(super) fn merge_state(
    func: AggFunc,
    (c, v): (&mut i64, &mut i128),
    (count, value): (i64, i128),
) {
    match func {
        AggFunc::Min | AggFunc::Max => {
            let max = func == AggFunc::Max;
            if count > 0 && (*c == 0 || (max && value > *v) || (!max && value < *v)) {
                *v = value;
            }
        }
        _ => *v += value,
    }
    *c += count;
}

/// A multiplicative hash for one or two packed 64-bit group keys: keys are ours (column values), not an
/// attacker's, and SipHash would cost more than the rest of the group-by.
#[derive(Default)]
pub(super) struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        for &b in words.remainder() {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u64(&mut self, v: u64) {
        let p = (v ^ self.0) as u128 * 0x9E37_79B9_7F4A_7C15u128;
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_u128(&mut self, v: u128) {
        // Each half multiplied, the high half of each product folded down: the table indexes
        // by the low bits.
        let mix = |x: u64| {
            let p = x as u128 * 0x9E37_79B9_7F4A_7C15u128;
            (p as u64) ^ ((p >> 64) as u64)
        };
        self.0 = mix(mix(v as u64 ^ self.0) ^ (v >> 64) as u64);
    }
}

/// Groups from several lanes above which [`Groups::merged`] merges in parts at once.
const PARALLEL_MERGE: usize = 1 << 16;

/// Largest dense group table (composite dictionary codes).
pub(super) const DENSE_SLOTS: usize = 1 << 22;

/// Largest dense group table keyed by register values over their columns' zone-map ranges
/// (its 4 bytes a slot are also bounded by a quarter of the lane's memory).
pub(super) const RANGE_SLOTS: usize = 1 << 28;

/// Bytes a group's entry takes in the group maps (a 128-bit key and a 32-bit id, with the
/// map's spare room).
pub(super) const LOOKUP_BYTES: usize = 32;
