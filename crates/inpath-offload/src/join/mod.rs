//! The device's joins: the rows a build task keeps, the index its join probes, and the
//! sorter behind it.
//!
//! AQUOMAN joins with what the data gives (reference 001, part II): tables generated in key
//! order are merged as they stream (lineitem against orders, both by orderkey), dense unique
//! keys are looked up by position (custkey, partkey, suppkey, nation, region: the thesis's oid
//! shortcut), and anything else is sorted into (key, row) pairs first (SORT_MERGE).

use crate::graph::{JoinKind, JoinMethod};
use arrow_array::{Array, ArrayRef, UInt32Array};
use inpath_table::error::{Error, Result};
use inpath_table::reader::TableReader;
use std::sync::Arc;

#[cfg(test)]
mod tests;

/// A column of the rows a build task kept: integers (dates as days, decimals as scaled
/// integers) by value; anything else (strings, columns with nulls) late, as the rows' places
/// in their table (AQUOMAN's oids), read only for the groups emitted to the host.
#[derive(Debug)]
pub(crate) enum Kept {
    Int(Ints),
    /// Table column `column` of the rows whose places are `Built::places[places]`.
    Late {
        column: usize,
        places: usize,
    },
}

/// Integers kept by value: 32 bits each while every value fits (keys, dates, prices and
/// quantities at TPC-H's scales), 64 once one does not. Half the memory for most builds: what
/// lets Q7's and Q9's joins fit the device at SF 1.
#[derive(Clone, Debug)]
pub(crate) enum Ints {
    Narrow(Vec<i32>),
    Wide(Vec<i64>),
}

impl Default for Ints {
    fn default() -> Self {
        Ints::Narrow(Vec::new())
    }
}

impl From<Vec<i64>> for Ints {
    fn from(values: Vec<i64>) -> Self {
        let mut ints = Ints::default();
        ints.extend(&values);
        ints
    }
}

impl Ints {
    pub(crate) fn len(&self) -> usize {
        match self {
            Ints::Narrow(v) => v.len(),
            Ints::Wide(v) => v.len(),
        }
    }

    /// Bytes held (the values, not spare capacity).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Ints::Narrow(v) => v.len() * 4,
            Ints::Wide(v) => v.len() * 8,
        }
    }

    pub(crate) fn get(&self, i: usize) -> i64 {
        match self {
            Ints::Narrow(v) => v[i] as i64,
            Ints::Wide(v) => v[i],
        }
    }

    pub(crate) fn last(&self) -> Option<i64> {
        self.len().checked_sub(1).map(|i| self.get(i))
    }

    /// The values at `rows`.
    pub(crate) fn gather(&self, rows: &[u32]) -> Vec<i64> {
        match self {
            Ints::Narrow(v) => rows.iter().map(|&r| v[r as usize] as i64).collect(),
            Ints::Wide(v) => rows.iter().map(|&r| v[r as usize]).collect(),
        }
    }

    /// The values at `rows`, 0 where a row is `u32::MAX` (a left join's row without a match).
    pub(crate) fn gather_or_zero(&self, rows: &[u32]) -> Vec<i64> {
        let at = |r: u32, v: &dyn Fn(usize) -> i64| if r == u32::MAX { 0 } else { v(r as usize) };
        match self {
            Ints::Narrow(v) => rows.iter().map(|&r| at(r, &|i| v[i] as i64)).collect(),
            Ints::Wide(v) => rows.iter().map(|&r| at(r, &|i| v[i])).collect(),
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<i64> {
        match self {
            Ints::Narrow(v) => v.iter().map(|&x| x as i64).collect(),
            Ints::Wide(v) => v.clone(),
        }
    }

    /// Appends `values`, widening every value held when one of them needs 64 bits.
    pub(crate) fn extend(&mut self, values: &[i64]) {
        if let Ints::Narrow(v) = self {
            if values.iter().all(|&x| i32::try_from(x).is_ok()) {
                v.extend(values.iter().map(|&x| x as i32));
                return;
            }
            *self = Ints::Wide(v.iter().map(|&x| x as i64).collect());
        }
        if let Ints::Wide(v) = self {
            v.extend_from_slice(values);
        }
    }

    /// Sets the last value (widening every value held when it needs 64 bits).
    pub(crate) fn set_last(&mut self, value: i64) {
        let Some(i) = self.len().checked_sub(1) else {
            return;
        };
        if let Ints::Narrow(v) = self {
            if let Ok(x) = i32::try_from(value) {
                v[i] = x;
                return;
            }
            *self = Ints::Wide(v.iter().map(|&x| x as i64).collect());
        }
        if let Ints::Wide(v) = self {
            v[i] = value;
        }
    }

    /// Appends `other`, taking it as it is when nothing is held yet.
    pub(crate) fn append(&mut self, other: Ints) {
        if self.len() == 0 {
            *self = other;
            return;
        }
        match (&mut *self, other) {
            (Ints::Narrow(a), Ints::Narrow(b)) => a.extend(b),
            (Ints::Wide(a), Ints::Wide(b)) => a.extend(b),
            (_, b) => self.extend(&b.to_vec()),
        }
    }
}

/// Rows' places in a table: page * rows-per-page + row in the page.
#[derive(Debug)]
pub(crate) struct Places {
    pub(crate) reader: Arc<TableReader>,
    pub(crate) rows: Vec<u64>,
}

/// Table column `column` at the rows `places` (any order, repeats allowed): the pages holding
/// them are read once each.
pub(crate) fn read_places(reader: &TableReader, column: usize, places: &[u64]) -> Result<ArrayRef> {
    let per = reader.rows_per_page().max(1) as u64;
    let mut order: Vec<u32> = (0..places.len() as u32).collect();
    order.sort_unstable_by_key(|&i| places[i as usize]);
    let mut parts: Vec<ArrayRef> = Vec::new();
    let mut at = 0;
    while at < order.len() {
        let page = places[order[at] as usize] / per;
        let mut end = at;
        let mut local = Vec::new();
        while end < order.len() && places[order[end] as usize] / per == page {
            local.push((places[order[end] as usize] % per) as u32);
            end += 1;
        }
        let array = reader.read_page(column, page as usize)?;
        parts.push(take_rows(&array, &local)?);
        at = end;
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    let sorted = if refs.is_empty() {
        arrow_array::new_empty_array(reader.schema().field(column).data_type())
    } else {
        arrow_select::concat::concat(&refs).map_err(|e| Error::Offload {
            detail: format!("reading kept rows: {e}"),
        })?
    };
    // Back from page order to the order asked for.
    let mut back = vec![0u32; order.len()];
    for (k, &i) in order.iter().enumerate() {
        back[i as usize] = k as u32;
    }
    take_rows(&sorted, &back)
}

/// `array` at `rows` (Arrow's take).
pub(crate) fn take_rows(array: &ArrayRef, rows: &[u32]) -> Result<ArrayRef> {
    let idx = UInt32Array::from(rows.to_vec());
    arrow_select::take::take(array.as_ref(), &idx, None).map_err(|e| Error::Offload {
        detail: format!("gathering kept rows: {e}"),
    })
}

/// Bytes of a build's kept rows: integers by value, late columns as row places.
fn kept_bytes(columns: &[Kept], places: &[Places]) -> u64 {
    let ints: usize = columns
        .iter()
        .map(|c| match c {
            Kept::Int(v) => v.bytes(),
            Kept::Late { .. } => 0,
        })
        .sum();
    let places: usize = places.iter().map(|p| p.rows.len() * 8).sum();
    (ints + places) as u64
}

/// How a build's key is found.
#[derive(Debug)]
enum Index {
    /// Unique keys in a dense range: `slots[key - min]` is the row (`u32::MAX`: none).
    Positional { min: i64, slots: Vec<u32> },
    /// Which keys are present, one bit each from `min` (semi and anti joins: no build row is
    /// ever fetched).
    Bitmap { min: i64, bits: Vec<u64> },
    /// A two-column key whose first column is dense: the rows of first key `k` are
    /// `rows[offsets[k - min]..offsets[k - min + 1]]` (`rows` `None`: the build arrived grouped
    /// by it, row `i` is place `i`), each checked against the second key in kept column
    /// `second`. One or two loads a probe instead of a search among packed pairs (TPC-H Q5's
    /// suppliers by key and nation, Q9's partsupp by part and supplier: four rows a part).
    Runs {
        min: i64,
        offsets: Vec<u32>,
        rows: Option<Vec<u32>>,
        second: usize,
    },
    /// Keys ascending, with the row each came from (`None`: the build was already sorted, row
    /// `i` is pair `i`).
    Sorted {
        keys: SortedKeys,
        rows: Option<Vec<u32>>,
        /// A presence bitmap over the keys' range, where it is small: a probe key absent from
        /// it is rejected with one load instead of a search (a few parts against every
        /// lineitem).
        present: Option<(i64, Vec<u64>)>,
        /// Every [`FENCE`]-th key: a far key is searched here first (a table small enough to
        /// stay in cache), then among the [`FENCE`] keys between two fences.
        fences: Vec<i64>,
        /// Unique keys with a presence bitmap: per bitmap word, the keys below it, so a present
        /// key's place is that count plus the bits set before it in its word (a popcount, not
        /// a search: a filtered supplier probed by every partsupp row, TPC-H Q11). Empty
        /// otherwise.
        ranks: Vec<u32>,
    },
}

/// The sorted keys of an index: its own, or (a one-column key that arrived sorted) the kept
/// key column itself, not held twice.
#[derive(Debug)]
enum SortedKeys {
    Own(Ints),
    Kept(usize),
}

/// The rows a build task kept on the device, indexed by its join key.
#[derive(Debug)]
pub(crate) struct Built {
    pub(crate) columns: Vec<Kept>,
    /// The places late columns are read from.
    pub(crate) places: Vec<Places>,
    index: Index,
    rows: usize,
    /// No two rows share a key: a probe row matches at most one build row.
    unique: bool,
}

impl Built {
    /// Indexes `columns` by the integer column `key`, choosing the method from the data when
    /// `method` is `Auto`.
    #[cfg(test)]
    pub(crate) fn new(
        columns: Vec<Kept>,
        places: Vec<Places>,
        key_columns: &[usize],
        method: JoinMethod,
        presence_only: bool,
    ) -> Result<Built> {
        Built::within(
            columns,
            places,
            key_columns,
            method,
            presence_only,
            u64::MAX,
        )
    }

    /// As [`Built::new`], within `budget` bytes for the kept rows and the index: `Auto` takes
    /// a positional index only where its slots fit in what the rows leave (sorted pairs take
    /// less where keys fill under a third of their range: orders' keys at a quarter).
    pub(crate) fn within(
        columns: Vec<Kept>,
        places: Vec<Places>,
        key_columns: &[usize],
        method: JoinMethod,
        presence_only: bool,
        budget: u64,
    ) -> Result<Built> {
        let room = budget.saturating_sub(kept_bytes(&columns, &places));
        let bad = |detail: String| Error::Offload { detail };
        let rows = match columns.first() {
            Some(Kept::Int(v)) => v.len(),
            Some(Kept::Late { places: p, .. }) => places
                .get(*p)
                .ok_or_else(|| bad("late column without places".into()))?
                .rows
                .len(),
            None => return Err(bad("a build that keeps no column".into())),
        };
        let mut parts = Vec::with_capacity(key_columns.len());
        for &key in key_columns {
            let Some(Kept::Int(keys)) = columns.get(key) else {
                return Err(bad(format!(
                    "build key column {key} is not an integer column"
                )));
            };
            parts.push(keys.to_vec());
        }
        let (keys, packs) = pack_keys(parts);
        if packs.is_some_and(|p| p.iter().any(|ok| !ok)) {
            return Err(Error::DeviceDeclined {
                memory: false,
                detail: "two-column join keys beyond 32 bits each".into(),
            });
        }
        if rows > u32::MAX as usize - 1 {
            return Err(bad(format!("a build of {rows} rows (at most 2^32 - 2)")));
        }
        let bitmap = if presence_only && method == JoinMethod::Auto {
            bitmap(&keys, room)
        } else {
            None
        };
        let arrived_sorted = key_columns.len() == 1 && keys.windows(2).all(|w| w[0] <= w[1]);
        let runs = match (method, &bitmap, key_columns) {
            (JoinMethod::Auto, None, &[first, second]) => match columns.get(first) {
                Some(Kept::Int(firsts)) => runs(firsts, second, room),
                _ => None,
            },
            _ => None,
        };
        let index = match (method, bitmap) {
            (_, Some(bitmap)) => bitmap,
            (_, None) if runs.is_some() => runs.expect("checked"),
            (JoinMethod::Auto | JoinMethod::Merge, None) if arrived_sorted => {
                // Keys that arrived sorted are merged at no cost in memory beyond a presence
                // bitmap: a positional index (one load a probe, where probes come in any
                // order) is taken only where its slots take no more than the rows kept or an
                // eighth of the memory left. (Taking it wherever it fit starved later builds:
                // Q21 at one lane spent 24 MB of its 40 on one build's slots.)
                let room = room.min(kept_bytes(&columns, &places).max(budget / 8));
                match positional(&keys, room).filter(|_| method == JoinMethod::Auto) {
                    Some(index) => index,
                    None => Index::Sorted {
                        present: presence(&keys, room),
                        fences: fences(&keys),
                        keys: SortedKeys::Kept(key_columns[0]),
                        rows: None,
                        ranks: Vec::new(),
                    },
                }
            }
            (JoinMethod::Positional, None) => positional(&keys, u64::MAX).ok_or_else(|| {
                bad("positional join on keys that are not unique and dense".into())
            })?,
            (JoinMethod::Auto, None) => match positional(&keys, room) {
                Some(index) => index,
                None => sorted(keys, room),
            },
            (JoinMethod::Merge, None) => sorted(keys, room),
        };
        let mut built = Built {
            columns,
            places,
            index,
            rows,
            unique: false,
        };
        built.unique = match &built.index {
            Index::Positional { .. } => true,
            Index::Sorted { keys, .. } => match built.sorted_keys(keys) {
                Ints::Narrow(v) => v.windows(2).all(|w| w[0] < w[1]),
                Ints::Wide(v) => v.windows(2).all(|w| w[0] < w[1]),
            },
            Index::Bitmap { .. } => false,
            Index::Runs {
                offsets,
                rows,
                second,
                ..
            } => match built.columns.get(*second) {
                Some(Kept::Int(seconds)) => runs_unique(offsets, rows.as_deref(), seconds),
                _ => false,
            },
        };
        if let (
            true,
            Index::Sorted {
                present: Some((_, bits)),
                ranks,
                ..
            },
        ) = (built.unique, &mut built.index)
        {
            // Place counts fit u32: a build holds fewer than 2^32 rows.
            let mut below = 0u32;
            *ranks = bits
                .iter()
                .map(|w| {
                    let r = below;
                    below += w.count_ones();
                    r
                })
                .collect();
        }
        Ok(built)
    }

    /// A semi or anti join's build made as a presence bitmap by the lanes: `bits` from `min`,
    /// set by `rows` rows; its `width` kept columns hold no values (such a join never fetches
    /// one).
    pub(crate) fn presence(min: i64, bits: Vec<u64>, width: usize, rows: usize) -> Built {
        Built {
            columns: (0..width).map(|_| Kept::Int(Ints::default())).collect(),
            places: Vec::new(),
            index: Index::Bitmap { min, bits },
            rows,
            unique: false,
        }
    }

    fn sorted_keys<'a>(&'a self, keys: &'a SortedKeys) -> &'a Ints {
        static NONE: Ints = Ints::Narrow(Vec::new());
        match keys {
            SortedKeys::Own(k) => k,
            SortedKeys::Kept(c) => match self.columns.get(*c) {
                Some(Kept::Int(v)) => v,
                _ => &NONE,
            },
        }
    }

    /// Rows kept.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Whether the keys are unique (known for inner joins' builds; a semi or anti join's
    /// presence bitmap does not say).
    pub(crate) fn unique_keys(&self) -> bool {
        self.unique
    }

    /// The method the index uses: `positional`, `bitmap` (positional presence), `merge` (the
    /// build arrived sorted) or `sort-merge` (radix-sorted here).
    pub(crate) fn method(&self) -> &'static str {
        match &self.index {
            Index::Positional { .. } => "positional",
            Index::Bitmap { .. } => "bitmap",
            Index::Runs { .. } => "positional",
            Index::Sorted { rows: None, .. } => "merge",
            Index::Sorted { rows: Some(_), .. } => "sort-merge",
        }
    }

    /// Bytes held: the kept columns and the index.
    pub(crate) fn bytes(&self) -> u64 {
        let index = match &self.index {
            Index::Positional { slots, .. } => slots.len() * 4,
            Index::Bitmap { bits, .. } => bits.len() * 8,
            Index::Runs { offsets, rows, .. } => {
                offsets.len() * 4 + rows.as_ref().map_or(0, |r| r.len() * 4)
            }
            Index::Sorted {
                keys,
                rows,
                present,
                fences,
                ranks,
            } => {
                let own = match keys {
                    SortedKeys::Own(k) => k.bytes(),
                    SortedKeys::Kept(_) => 0,
                };
                own + rows.as_ref().map_or(0, |r| r.len() * 4)
                    + present.as_ref().map_or(0, |(_, b)| b.len() * 8)
                    + fences.len() * 8
                    + ranks.len() * 4
            }
        };
        kept_bytes(&self.columns, &self.places) + index as u64
    }

    /// An integer kept column.
    pub(crate) fn ints(&self, column: usize) -> Result<&Ints> {
        match self.columns.get(column) {
            Some(Kept::Int(v)) => Ok(v),
            _ => Err(Error::Offload {
                detail: format!("kept column {column} is not an integer column"),
            }),
        }
    }

    /// Matches probe `keys`: the probe positions kept, and for an inner join the build row
    /// of each (a probe key matching several build rows repeats).
    pub(crate) fn probe(
        &self,
        keys: &[i64],
        packs: Option<&[bool]>,
        kind: JoinKind,
    ) -> (Vec<u32>, Vec<u32>) {
        let mut take = Vec::with_capacity(keys.len());
        let mut build = Vec::new();
        match &self.index {
            Index::Positional { min, slots } => {
                // The slots are gathered a block at a time before any is tested: loads with no
                // branch on a loaded value between them, so the core keeps many cache misses
                // in flight (slots larger than the L2, probed in key order they are not).
                let mut gathered = [u32::MAX; POSITIONAL_BLOCK];
                for (b, block) in keys.chunks(POSITIONAL_BLOCK).enumerate() {
                    for (g, &k) in gathered.iter_mut().zip(block) {
                        let d = k.wrapping_sub(*min) as u64;
                        *g = usize::try_from(d)
                            .ok()
                            .and_then(|d| slots.get(d))
                            .copied()
                            .unwrap_or(u32::MAX);
                    }
                    for (j, &row) in gathered[..block.len()].iter().enumerate() {
                        let i = b * POSITIONAL_BLOCK + j;
                        let hit = row != u32::MAX && packs.is_none_or(|p| p[i]);
                        match kind {
                            JoinKind::Inner if hit => {
                                take.push(i as u32);
                                build.push(row);
                            }
                            JoinKind::Semi if hit => take.push(i as u32),
                            JoinKind::Anti if !hit => take.push(i as u32),
                            _ => {}
                        }
                    }
                }
            }
            Index::Bitmap { min, bits } => {
                for (i, &k) in keys.iter().enumerate() {
                    let d = k.wrapping_sub(*min) as u64;
                    let hit = d < bits.len() as u64 * 64
                        && (bits[(d / 64) as usize] >> (d % 64)) & 1 == 1
                        && packs.is_none_or(|p| p[i]);
                    match kind {
                        JoinKind::Semi if hit => take.push(i as u32),
                        JoinKind::Anti if !hit => take.push(i as u32),
                        // Inner joins never get a bitmap (they fetch build rows).
                        _ => {}
                    }
                }
            }
            Index::Runs {
                min,
                offsets,
                rows,
                second,
            } => {
                let seconds = match self.columns.get(*second) {
                    Some(Kept::Int(v)) => v,
                    _ => &Ints::Narrow(Vec::new()),
                };
                for (i, &k) in keys.iter().enumerate() {
                    // The probe's packed pair (see `pack_keys`): its first key in the high
                    // half, its second in the low, each a 32-bit signed value.
                    let d = ((k >> 32) as i32 as i64).wrapping_sub(*min) as u64;
                    let low = k as u32 as i32 as i64;
                    let run = match d < (offsets.len() - 1) as u64 && packs.is_none_or(|p| p[i]) {
                        true => offsets[d as usize] as usize..offsets[d as usize + 1] as usize,
                        false => 0..0,
                    };
                    let mut hit = false;
                    for p in run {
                        let row = rows.as_ref().map_or(p as u32, |r| r[p]);
                        if seconds.get(row as usize) != low {
                            continue;
                        }
                        hit = true;
                        match kind {
                            JoinKind::Inner => {
                                take.push(i as u32);
                                build.push(row);
                            }
                            _ => break,
                        }
                    }
                    match kind {
                        JoinKind::Semi if hit => take.push(i as u32),
                        JoinKind::Anti if !hit => take.push(i as u32),
                        _ => {}
                    }
                }
            }
            Index::Sorted {
                keys: sorted,
                rows,
                present,
                fences,
                ranks,
            } => {
                let probe = SortedProbe {
                    rows: rows.as_deref(),
                    present: present.as_ref(),
                    ranks: (!ranks.is_empty()).then_some(ranks.as_slice()),
                    fences,
                    packs,
                    kind,
                };
                match self.sorted_keys(sorted) {
                    Ints::Narrow(v) => probe.run(v, keys, &mut take, &mut build),
                    Ints::Wide(v) => probe.run(v, keys, &mut take, &mut build),
                }
            }
        }
        (take, build)
    }
}

/// A residual build's value as kept: the run's first value times two, plus one once another
/// value followed it (`None` beyond +-2^62). Values that fit 31 bits stay 32-bit when kept.
pub(crate) fn encode_residual(first: i64) -> Option<i64> {
    first.checked_mul(2)
}

/// The run's first value of a kept residual value.
pub(crate) fn residual_first(kept: i64) -> i64 {
    kept >> 1
}

/// Whether another value followed the first in the run.
pub(crate) fn residual_several(kept: i64) -> bool {
    kept & 1 == 1
}

impl Built {
    /// A semi or anti join with a residual `probe <> build` condition: the probe positions
    /// kept. A probe row matches when some build row of its key holds a value other than
    /// `values[i]`: one whose run held several values, or whose first value differs. (Build
    /// rows summarize runs of equal keys; a key in several runs has several rows, and the
    /// answer over them is the answer over the rows they summarize.)
    pub(crate) fn probe_residual(
        &self,
        keys: &[i64],
        packs: Option<&[bool]>,
        kind: JoinKind,
        values: &[i64],
        column: usize,
    ) -> Result<Vec<u32>> {
        let kept = self.ints(column)?;
        let (pairs, rows) = self.probe(keys, packs, JoinKind::Inner);
        let mut other = vec![false; keys.len()];
        for (&i, &b) in pairs.iter().zip(&rows) {
            let k = kept.get(b as usize);
            if residual_several(k) || residual_first(k) != values[i as usize] {
                other[i as usize] = true;
            }
        }
        let want = kind == JoinKind::Semi;
        Ok((0..keys.len() as u32)
            .filter(|&i| other[i as usize] == want)
            .collect())
    }
}

/// One join key per row: a single key as it is; two packed as the low 32 bits of each (both
/// must lie in the 32-bit signed range; `Some` marks the rows whose keys do).
pub(crate) fn pack_keys(mut parts: Vec<Vec<i64>>) -> (Vec<i64>, Option<Vec<bool>>) {
    if parts.len() == 1 {
        return (parts.pop().unwrap_or_default(), None);
    }
    let fits = |v: i64| i32::try_from(v).is_ok();
    let (a, b) = (&parts[0], &parts[1]);
    let packs: Vec<bool> = a.iter().zip(b).map(|(&x, &y)| fits(x) && fits(y)).collect();
    let keys = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (((x as i32 as u32 as u64) << 32) | (y as i32 as u32 as u64)) as i64)
        .collect();
    (keys, Some(packs))
}

/// A probe of a sorted index, over its keys at either width.
struct SortedProbe<'a> {
    rows: Option<&'a [u32]>,
    present: Option<&'a (i64, Vec<u64>)>,
    /// With `present`, over unique keys: the keys below each bitmap word (see `Index::Sorted`).
    ranks: Option<&'a [u32]>,
    fences: &'a [i64],
    packs: Option<&'a [bool]>,
    kind: JoinKind,
}

impl SortedProbe<'_> {
    fn run<T: Copy + Into<i64>>(
        &self,
        sorted: &[T],
        keys: &[i64],
        take: &mut Vec<u32>,
        build: &mut Vec<u32>,
    ) {
        let kind = self.kind;
        if let (Some((min, bits)), Some(ranks)) = (self.present, self.ranks) {
            self.run_ranked(*min, bits, ranks, keys, take, build);
            return;
        }
        // A cursor that gallops forward while the probe keys ascend (a streaming merge of two
        // sorted inputs) and searches from the start when they do not.
        let mut pos = 0usize;
        let mut prev = i64::MIN;
        for (i, &k) in keys.iter().enumerate() {
            if let Some((min, bits)) = self.present {
                let d = k.wrapping_sub(*min) as u64;
                let maybe =
                    d < bits.len() as u64 * 64 && (bits[(d / 64) as usize] >> (d % 64)) & 1 == 1;
                if !maybe {
                    if kind == JoinKind::Anti {
                        take.push(i as u32);
                    }
                    continue;
                }
            }
            // Near keys ascending: gallop from the cursor; a key below the last or far beyond
            // it: through the fences.
            pos = match k < prev {
                true => None,
                false => gallop(sorted, pos, k),
            }
            .unwrap_or_else(|| fenced(sorted, self.fences, k));
            prev = k;
            let mut end = pos;
            while end < sorted.len() && sorted[end].into() == k {
                end += 1;
            }
            if self.packs.is_some_and(|p| !p[i]) {
                end = pos;
            }
            let hit = end > pos;
            match kind {
                JoinKind::Inner => {
                    for p in pos..end {
                        take.push(i as u32);
                        build.push(self.rows.map_or(p as u32, |r| r[p]));
                    }
                }
                JoinKind::Semi if hit => take.push(i as u32),
                JoinKind::Anti if !hit => take.push(i as u32),
                _ => {}
            }
        }
    }

    /// The probe where the keys are unique and a presence bitmap covers them: a present key's
    /// place is the keys below its word plus the bits set before it in the word.
    fn run_ranked(
        &self,
        min: i64,
        bits: &[u64],
        ranks: &[u32],
        keys: &[i64],
        take: &mut Vec<u32>,
        build: &mut Vec<u32>,
    ) {
        let span = bits.len() as u64 * 64;
        for (i, &k) in keys.iter().enumerate() {
            let d = k.wrapping_sub(min) as u64;
            let (w, b) = ((d / 64) as usize, d % 64);
            let word = if d < span { bits[w] } else { 0 };
            let hit = (word >> b) & 1 == 1 && self.packs.is_none_or(|p| p[i]);
            match self.kind {
                JoinKind::Inner if hit => {
                    let p = ranks[w] as usize + (word & ((1u64 << b) - 1)).count_ones() as usize;
                    take.push(i as u32);
                    build.push(self.rows.map_or(p as u32, |r| r[p]));
                }
                JoinKind::Semi if hit => take.push(i as u32),
                JoinKind::Anti if !hit => take.push(i as u32),
                _ => {}
            }
        }
    }
}

/// The first position at or after `from` whose key is not below `k` (`sorted` ascending):
/// doubling steps, then a binary search within the last step. `None` when it is further than
/// [`GALLOP_STEPS`] doublings (then [`fenced`] finds it in fewer cache misses).
fn gallop<T: Copy + Into<i64>>(sorted: &[T], from: usize, k: i64) -> Option<usize> {
    let n = sorted.len();
    if from >= n || sorted[from].into() >= k {
        return Some(from);
    }
    let mut step = 1;
    let mut lo = from;
    while lo + step < n && sorted[lo + step].into() < k {
        lo += step;
        if step == GALLOP_STEPS {
            return None;
        }
        step *= 2;
    }
    let hi = (lo + step + 1).min(n);
    Some(lo + sorted[lo..hi].partition_point(|&x| x.into() < k))
}

/// Probe keys whose positional slots are gathered before they are tested.
const POSITIONAL_BLOCK: usize = 256;

/// The longest doubling step [`gallop`] takes.
const GALLOP_STEPS: usize = 64;

/// Keys between two fences of a sorted index.
const FENCE: usize = 16;

/// Every [`FENCE`]-th key of `sorted`.
fn fences(sorted: &[i64]) -> Vec<i64> {
    sorted.iter().step_by(FENCE).copied().collect()
}

/// The first position whose key is not below `k` (`sorted` ascending, `fences` its every
/// [`FENCE`]-th key): a binary search of the fences, then of the keys after the last fence
/// below `k`.
fn fenced<T: Copy + Into<i64>>(sorted: &[T], fences: &[i64], k: i64) -> usize {
    match fences.partition_point(|&f| f < k) {
        0 => 0,
        f => {
            let lo = (f - 1) * FENCE;
            let hi = (f * FENCE).min(sorted.len());
            lo + sorted[lo..hi].partition_point(|&x| x.into() < k)
        }
    }
}

/// A presence bitmap when the keys' range is at most 64 bits per key (8 bytes, what keeping
/// the key itself would take), or fits a sixteenth of `room` (see [`presence`]).
fn bitmap(keys: &[i64], room: u64) -> Option<Index> {
    bitmap_within(
        keys,
        (64 * keys.len() as u128 + 65_536).max(u128::from(room / 16) * 8),
    )
}

/// A presence bitmap when the keys' range is at most `limit` bits.
fn bitmap_within(keys: &[i64], limit: u128) -> Option<Index> {
    let (&first, rest) = keys.split_first()?;
    let (min, max) = rest
        .iter()
        .fold((first, first), |(lo, hi), &k| (lo.min(k), hi.max(k)));
    let range = (max as i128 - min as i128 + 1) as u128;
    if range > limit {
        return None;
    }
    let mut bits = vec![0u64; (range as usize).div_ceil(64)];
    for &k in keys {
        let d = (k - min) as usize;
        bits[d / 64] |= 1 << (d % 64);
    }
    Some(Index::Bitmap { min, bits })
}

/// A positional index when the keys are unique and fill at least an eighth of their range (4
/// bytes a slot: at most 32 bytes a key, against 12 for sorted pairs, and one load a probe
/// instead of a search).
fn positional(keys: &[i64], room: u64) -> Option<Index> {
    let (&first, rest) = keys.split_first()?;
    let (min, max) = rest
        .iter()
        .fold((first, first), |(lo, hi), &k| (lo.min(k), hi.max(k)));
    let range = (max as i128 - min as i128 + 1) as u128;
    if range > 8 * keys.len() as u128 + 4096 || range * 4 > room as u128 {
        return None;
    }
    let mut slots = vec![u32::MAX; range as usize];
    for (row, &k) in keys.iter().enumerate() {
        let s = &mut slots[(k - min) as usize];
        if *s != u32::MAX {
            return None;
        }
        *s = row as u32;
    }
    Some(Index::Positional { min, slots })
}

/// A runs index over a two-column key whose first column's distinct values (`firsts`) fill at
/// least an eighth of their range, as a positional index's do, each held by at most four rows
/// on average, within `room`: the rows of each first key
/// by a counting sort (none when they arrived grouped by it), checked against kept column
/// `second` at probe time.
fn runs(firsts: &Ints, second: usize, room: u64) -> Option<Index> {
    let n = firsts.len();
    let values = firsts.to_vec();
    let (&first, rest) = values.split_first()?;
    let (min, max) = rest
        .iter()
        .fold((first, first), |(lo, hi), &k| (lo.min(k), hi.max(k)));
    let range = (max as i128 - min as i128 + 1) as u128;
    let grouped = values.windows(2).all(|w| w[0] <= w[1]);
    let bytes = (range + 1) * 4 + if grouped { 0 } else { 4 * n as u128 };
    if range > 8 * n as u128 + 4096 || bytes > room as u128 || n >= u32::MAX as usize {
        return None;
    }
    let mut offsets = vec![0u32; range as usize + 1];
    for &k in &values {
        offsets[(k - min) as usize + 1] += 1;
    }
    // Dense by its distinct first keys, not its rows: Q9's partsupp of green parts holds 0.47 M
    // rows over 2 M part keys but only 0.11 M distinct ones, and its offsets (8 MB) probed at
    // random cost more cache misses than the search among its sorted pairs (1.09x its time).
    // Short runs only, at most four rows a first key on average: a probe checks its run's rows
    // one by one (Q9's green lineitem by supplier then part: 32 rows a supplier, 1.1x the time
    // of a search among its sorted pairs).
    let distinct = offsets.iter().filter(|&&c| c > 0).count() as u128;
    if range > 8 * distinct + 4096 || n as u128 > 4 * distinct {
        return None;
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    let rows = (!grouped).then(|| {
        let mut next = offsets.clone();
        let mut rows = vec![0u32; n];
        for (row, &k) in values.iter().enumerate() {
            let at = &mut next[(k - min) as usize];
            rows[*at as usize] = row as u32;
            *at += 1;
        }
        rows
    });
    Some(Index::Runs {
        min,
        offsets,
        rows,
        second,
    })
}

/// Whether no two rows of a runs index share both keys (the second key's values differ within
/// each run).
fn runs_unique(offsets: &[u32], rows: Option<&[u32]>, seconds: &Ints) -> bool {
    let row = |p: usize| rows.map_or(p, |r| r[p] as usize);
    offsets.windows(2).all(|w| {
        let run = w[0] as usize..w[1] as usize;
        match run.len() {
            0 | 1 => true,
            2..=8 => run
                .clone()
                .all(|a| (a + 1..run.end).all(|b| seconds.get(row(a)) != seconds.get(row(b)))),
            _ => {
                let mut v: Vec<i64> = run.map(|p| seconds.get(row(p))).collect();
                v.sort_unstable();
                v.windows(2).all(|p| p[0] != p[1])
            }
        }
    })
}

/// A sorted index: the keys as they are when they already ascend, radix-sorted otherwise.
fn sorted(keys: Vec<i64>, room: u64) -> Index {
    let present = presence(&keys, room);
    if keys.windows(2).all(|w| w[0] <= w[1]) {
        return Index::Sorted {
            fences: fences(&keys),
            keys: SortedKeys::Own(keys.into()),
            rows: None,
            present,
            ranks: Vec::new(),
        };
    }
    let (keys, rows) = radix_sort_pairs(&keys);
    Index::Sorted {
        fences: fences(&keys),
        keys: SortedKeys::Own(keys.into()),
        rows: Some(rows),
        present,
        ranks: Vec::new(),
    }
}

/// A sorted index's presence bitmap, where its range is at most 1 Mi bits beyond 64 a key, or
/// fits a sixteenth of `room` (the bytes the build leaves of its budget). The second bound
/// keeps the bitmap as the data grows: a filter that keeps one part in a thousand keeps 2,000
/// keys over a range of 2 M at SF 10, past the first bound, and without the bitmap every
/// lineitem row's key was searched among them (TPC-H Q17 at SF 10: 83 times SF 1's device CPU
/// for 10 times the rows).
fn presence(keys: &[i64], room: u64) -> Option<(i64, Vec<u64>)> {
    let limit = (64 * keys.len() as u128 + (1 << 20)).max(u128::from(room / 16) * 8);
    match bitmap_within(keys, limit) {
        Some(Index::Bitmap { min, bits }) => Some((min, bits)),
        _ => None,
    }
}

/// Sorts (key, row) pairs by key, stably (rows of equal keys stay in row order): a least
/// significant digit radix sort, 8 bits a pass, over only the bytes the key range needs.
pub(crate) fn radix_sort_pairs(keys: &[i64]) -> (Vec<i64>, Vec<u32>) {
    let n = keys.len();
    let Some(&min) = keys.iter().min() else {
        return (Vec::new(), Vec::new());
    };
    let max = keys.iter().copied().max().unwrap_or(min);
    let range = max.wrapping_sub(min) as u64;
    let passes = (64 - range.leading_zeros()).div_ceil(8) as usize;
    let mut k: Vec<u64> = keys.iter().map(|&v| v.wrapping_sub(min) as u64).collect();
    let mut r: Vec<u32> = (0..n as u32).collect();
    let (mut k2, mut r2) = (vec![0u64; n], vec![0u32; n]);
    for pass in 0..passes {
        let shift = pass * 8;
        let mut count = [0usize; 257];
        for &v in &k {
            count[((v >> shift) & 0xff) as usize + 1] += 1;
        }
        for d in 0..256 {
            count[d + 1] += count[d];
        }
        for (&v, &row) in k.iter().zip(&r) {
            let d = ((v >> shift) & 0xff) as usize;
            k2[count[d]] = v;
            r2[count[d]] = row;
            count[d] += 1;
        }
        std::mem::swap(&mut k, &mut k2);
        std::mem::swap(&mut r, &mut r2);
    }
    let keys = k
        .into_iter()
        .map(|v| (v as i64).wrapping_add(min))
        .collect();
    (keys, r)
}
