//! The Swissknife aggregate: group ids of a block's rows and their accumulators.

use super::exact::{exact_sum, sum_by_group, sums_in_i64, FEW_GROUPS};
use super::groups::{DENSE_SLOTS, LOOKUP_BYTES, RANGE_SLOTS};
use super::lane::Lane;
use super::prepare::{Identity, Rows};
use crate::arch;
use crate::graph::AggFunc;
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray, RecordBatch};
use inpath_table::error::{Error, Result};
use std::borrow::Cow;
use std::collections::HashMap;

impl<'a> Lane<'a> {
    /// [`Lane::group_ids`] of a run of rows keyed by one or two dictionary columns whose
    /// slots in the dense table all have groups (every block after the first few): one kernel
    /// over the 32-bit codes. `None` where that does not hold; the general path then takes
    /// the block (and adds its groups).
    pub(super) fn dense_dictionary_ids(
        &self,
        arrays: &HashMap<usize, ArrayRef>,
        rows: &Rows,
    ) -> Option<Vec<u32>> {
        let (strides, slots) = self.groups.dense.as_ref()?;
        let &Rows::Range(start, n) = rows else {
            return None;
        };
        let keys = &self.plan.identities;
        if keys.len() > 2 {
            return None;
        }
        let mut codes: Vec<&[i32]> = Vec::with_capacity(2);
        let mut sizes = Vec::with_capacity(2);
        for key in keys {
            let Identity::Dictionary(column) = *key else {
                return None;
            };
            let dict = arrays
                .get(&column)?
                .as_any()
                .downcast_ref::<DictionaryArray<Int32Type>>()?;
            if dict.null_count() > 0 {
                return None;
            }
            codes.push(dict.keys().values().get(start..start + n)?);
            sizes.push(dict.values().len().max(1));
        }
        // The table has the shape these dictionaries give it (else the general path
        // re-shapes it).
        let shaped = match sizes[..] {
            [a] => slots.len() == a,
            [a, b] => strides.get(1) == Some(&a) && a.checked_mul(b) == Some(slots.len()),
            _ => false,
        };
        if !shaped {
            return None;
        }
        // (One key: its codes are the slots, the table's length their bound.)
        let stride = if codes.len() == 1 {
            slots.len()
        } else {
            sizes[0]
        };
        arch::dense_ids(
            codes[0],
            codes.get(1).copied(),
            u32::try_from(stride).ok()?,
            slots,
            self.block_mask.as_deref(),
        )
    }

    /// Group ids of the selected rows (all zero without keys), adding new groups.
    pub(super) fn group_ids(
        &mut self,
        arrays: &HashMap<usize, ArrayRef>,
        registers: &[Cow<'_, [i64]>],
        rows: &Rows,
        matched: &[&[u32]],
        n: usize,
    ) -> Result<Vec<u32>> {
        let keys = &self.plan.identities;
        if keys.is_empty() {
            return Ok(vec![0; n]);
        }
        if let Some(ids) = self.dense_dictionary_ids(arrays, rows) {
            return Ok(ids);
        }
        // Per key: the selected rows' key values, and the dictionary size where it is one.
        let mut columns: Vec<Vec<i64>> = Vec::with_capacity(keys.len());
        let mut sizes: Vec<Option<usize>> = Vec::with_capacity(keys.len());
        // What a dense slot subtracts from each key's value (a register key's least value).
        let mut offsets: Vec<i64> = vec![0; keys.len()];
        let mut by_range = false;
        for (k, key) in keys.iter().enumerate() {
            match key {
                Identity::Dictionary(column) => {
                    let array = &arrays[column];
                    let dict = array
                        .as_any()
                        .downcast_ref::<DictionaryArray<Int32Type>>()
                        .ok_or_else(|| Error::Offload {
                            detail: format!(
                                "group key column {column} is not dictionary-coded on this page"
                            ),
                        })?;
                    if dict.null_count() > 0 {
                        return Err(Error::Offload {
                            detail: format!("group key column {column} holds nulls"),
                        });
                    }
                    let codes = dict.keys().values();
                    columns.push(match *rows {
                        Rows::Pick(picks) => arch::gather_i32::run(codes, picks),
                        Rows::Range(start, n) => arch::widen_i32::run(&codes[start..start + n]),
                    });
                    sizes.push(Some(dict.values().len()));
                    if self.groups.dictionaries[k].is_none() {
                        self.groups.dictionaries[k] = Some(dict.values().clone());
                    }
                }
                Identity::Register(r) => {
                    columns.push(registers[*r].to_vec());
                    // Not for a table cleared after every page (a HAVING over disjoint pages):
                    // resetting every slot each time would cost more than it saves.
                    let range =
                        self.plan.register_ranges[k].filter(|_| self.plan.complete_key.is_none());
                    sizes.push(range.map(|(_, size)| size));
                    offsets[k] = range.map_or(0, |(least, _)| least);
                    by_range |= range.is_some();
                }
                // Build rows are numbered densely: a key the dense table can take.
                Identity::BuildRow(j) => {
                    columns.push(matched[*j].iter().map(|&r| r as i64).collect());
                    sizes.push(Some(self.plan.builds[*j].len()));
                }
            }
        }
        let mut ids = Vec::with_capacity(n);
        // A dense table takes at most a quarter of the lane's budget. One keyed by a register's
        // range may hold far fewer groups than it has slots: it replaces the map only once its
        // 4 bytes a slot cost no more than the map's share of the groups held after this block
        // would, so it never costs more memory than the map it replaces.
        let quarter = (self.budget / 4) as usize;
        let most_slots = if by_range { RANGE_SLOTS } else { DENSE_SLOTS };
        let dense_strides = sizes
            .iter()
            .try_fold((Vec::new(), 1usize), |(mut st, p), s| {
                let s = (*s)?;
                st.push(p);
                let next = p.checked_mul(s.max(1))?;
                (next <= most_slots && next * 4 <= quarter).then_some((st, next))
            });
        let worth = !by_range
            || dense_strides.as_ref().is_some_and(|(_, slots)| {
                slots.saturating_mul(4) <= (self.groups.len + n).saturating_mul(LOOKUP_BYTES)
            });
        let mut key = vec![0i64; keys.len()];
        // Dictionaries are the column's own, shared by every page, so the dense table's shape
        // stays; should it change with groups held, they move to the sparse table.
        let keep = matches!((&self.groups.dense, &dense_strides),
            (Some((s, t)), Some((s2, n2))) if s == s2 && t.len() == *n2);
        if !keep {
            match dense_strides {
                Some((strides, slots))
                    if worth && (self.groups.len == 0 || self.groups.dense.is_none()) =>
                {
                    // Groups held in the map take their slots; should one lie outside the
                    // table (it cannot, by the zone maps), they all stay in the map.
                    if let Some(table) = self.groups.slotted(&strides, &offsets, slots) {
                        self.groups.dense = Some((strides, table));
                    }
                }
                // Fewer groups than the table would pay for: they stay in the map.
                Some(_) if self.groups.dense.is_none() => {}
                _ => {
                    if self.groups.dense.take().is_some() {
                        for g in 0..self.groups.len {
                            if keys.len() <= 2 {
                                let hi = self.groups.keys.get(1).map_or(0, |c| c[g] as u64);
                                let lo = self.groups.keys[0][g] as u64;
                                let packed = ((hi as u128) << 64) | lo as u128;
                                self.groups.packed.insert(packed, g as u32);
                            } else {
                                let k: Box<[i64]> = self.groups.keys.iter().map(|c| c[g]).collect();
                                self.groups.sparse.insert(k, g as u32);
                            }
                        }
                    }
                }
            }
        }
        // Rows the block's mask leaves out get no group (an id beyond every group, which the
        // operator skips).
        let block_mask = self.block_mask.clone();
        let skipped = |r: usize| {
            block_mask
                .as_ref()
                .is_some_and(|m| m[r / 64] >> (r % 64) & 1 == 0)
        };
        if self.not_reducing && self.groups.dense.is_none() {
            // A table that does not reduce its rows (`Lane::check_reduction`): every row is a
            // group of its own, with no lookup; the host's final aggregate merges equal keys,
            // as it merges groups sent early.
            for r in 0..n {
                if skipped(r) {
                    ids.push(u32::MAX);
                    continue;
                }
                for (k, c) in key.iter_mut().zip(&columns) {
                    *k = c[r];
                }
                ids.push(self.groups.push_group(&key));
            }
            return Ok(ids);
        }
        match self.groups.dense.take() {
            Some((strides, mut slots)) => {
                // Each row's slot; once every slot a block touches has its group (all but the
                // first blocks), the ids are one gather.
                let base: i64 = offsets
                    .iter()
                    .zip(&strides)
                    .map(|(o, s)| o * *s as i64)
                    .sum();
                // (One key: its values less the base, in the one pass that copies them.)
                let mut at: Vec<i64> = match columns.len() {
                    1 => columns[0].iter().map(|&v| v - base).collect(),
                    2 => arch::dense_slots::run(&columns[0], &columns[1], strides[1] as i64),
                    _ => (0..n)
                        .map(|r| {
                            columns
                                .iter()
                                .zip(&strides)
                                .map(|(c, s)| c[r] * *s as i64)
                                .sum()
                        })
                        .collect(),
                };
                if base != 0 && columns.len() > 1 {
                    at.iter_mut().for_each(|a| *a -= base);
                }
                let mut found = arch::slot_ids(&at, &slots);
                if !found.contains(&u32::MAX) {
                    if let Some(mask) = &block_mask {
                        arch::drop_unselected::run(&mut found, mask);
                    }
                    self.groups.dense = Some((strides, slots));
                    return Ok(found);
                }
                for r in 0..n {
                    if skipped(r) {
                        ids.push(u32::MAX);
                        continue;
                    }
                    let at = at[r] as usize;
                    // A register key's values come from pages its zone maps bound (the
                    // kernel above gives a slot outside the table no group): one outside
                    // would be damage.
                    let Some(&found) = slots.get(at) else {
                        return Err(Error::Offload {
                            detail: "a group key outside its column's zone maps".into(),
                        });
                    };
                    let mut g = found;
                    if g == u32::MAX {
                        for (k, c) in key.iter_mut().zip(&columns) {
                            *k = c[r];
                        }
                        g = self.groups.push_group(&key);
                        slots[at] = g;
                    }
                    ids.push(g);
                }
                self.groups.dense = Some((strides, slots));
            }
            None if keys.len() <= 2 => {
                // One or two keys (an order number; a part and a supplier): a map from the
                // values packed in 128 bits.
                let pack = |r: usize| -> u128 {
                    let hi = columns.get(1).map_or(0, |c| c[r] as u64);
                    ((hi as u128) << 64) | columns[0][r] as u64 as u128
                };
                for r in 0..n {
                    if skipped(r) {
                        ids.push(u32::MAX);
                        continue;
                    }
                    let packed = pack(r);
                    let g = match self.groups.packed.get(&packed) {
                        Some(&g) => g,
                        None => {
                            for (k, c) in key.iter_mut().zip(&columns) {
                                *k = c[r];
                            }
                            let g = self.groups.push_group(&key);
                            self.groups.packed.insert(packed, g);
                            g
                        }
                    };
                    ids.push(g);
                }
            }
            None => {
                for r in 0..n {
                    if skipped(r) {
                        ids.push(u32::MAX);
                        continue;
                    }
                    for (k, c) in key.iter_mut().zip(&columns) {
                        *k = c[r];
                    }
                    let g = match self.groups.sparse.get(&key[..]) {
                        Some(&g) => g,
                        None => {
                            let g = self.groups.push_group(&key);
                            self.groups.sparse.insert(key.clone().into_boxed_slice(), g);
                            g
                        }
                    };
                    ids.push(g);
                }
            }
        }
        Ok(ids)
    }

    pub(super) fn aggregate(
        &mut self,
        arrays: &HashMap<usize, ArrayRef>,
        registers: &[Cow<'_, [i64]>],
        bounds: &[u64],
        rows: &Rows,
        matched: &[&[u32]],
        n: usize,
    ) -> Result<()> {
        let ids = self.group_ids(arrays, registers, rows, matched, n)?;
        self.rows_grouped += ids.len() as u64;
        let single = self.plan.keys().is_empty();
        let groups = self.groups.len;
        let dense = single || groups <= n;
        // (A block with a mask has at most FEW_GROUPS groups and ids beyond them.)
        let counted_few = !single && ((dense && groups <= FEW_GROUPS) || self.block_mask.is_some());
        // A register summed by several aggregates (Q1's sum and avg of one column) is summed
        // once per block where the groups are few; with at most MANY_GROUPS groups, every
        // register summed in 64 bits in one pass over the group ids, which also counts them.
        let few = single || groups <= FEW_GROUPS || self.block_mask.is_some();
        let mut regs: Vec<usize> = Vec::new();
        if few && !single && groups <= arch::MANY_GROUPS {
            regs = self
                .plan
                .aggs()
                .iter()
                .filter_map(|agg| match (agg.func, agg.arg) {
                    (AggFunc::Sum | AggFunc::Avg, Some(r))
                        if registers[r].len() >= ids.len()
                            && sums_in_i64(&registers[r][..ids.len()], bounds[r]) =>
                    {
                        Some(r)
                    }
                    _ => None,
                })
                .collect();
            regs.sort_unstable();
            regs.dedup();
        }
        let mut summed: Vec<(usize, Vec<i128>)> = Vec::new();
        let mut counts = counted_few.then(|| vec![0i64; groups]);
        if regs.len() > 1 {
            let views: Vec<&[i64]> = regs.iter().map(|&r| &registers[r][..ids.len()]).collect();
            let mut sums = vec![vec![0i64; groups]; regs.len()];
            arch::group_sums_many(&ids, &views, &mut sums, counts.as_deref_mut());
            summed = regs
                .into_iter()
                .zip(sums)
                .map(|(r, s)| (r, s.into_iter().map(i128::from).collect()))
                .collect();
        } else if let Some(c) = counts.as_mut() {
            arch::group_counts::run(&ids, c);
        }
        // Rows per group in this block, counted once for every aggregate (no argument is
        // ever null: the transformer takes only non-null columns). Few groups against the
        // block: counted once into a block-sized table (above); many (a block touching a few
        // of 100,000 groups): counted row by row, never a table as large as the group table
        // per block.
        let per_group: Vec<i64> = if single {
            vec![n as i64]
        } else if let Some(c) = counts {
            c
        } else if dense {
            let mut c = vec![0i64; groups];
            for &g in &ids {
                c[g as usize] += 1;
            }
            c
        } else {
            Vec::new()
        };
        for (a, agg) in self.plan.aggs().iter().enumerate() {
            if let (AggFunc::Avg, Some(r), true) = (agg.func, agg.arg, self.plan.hold_groups) {
                // The host's average is a sum of doubles in its own order: it is this exact
                // sum only while every value is whole and the sums stay below 2^53.
                let unit = 10i64.pow(agg.scale.max(0) as u32);
                let (whole, bound) = &mut self.avg_exact[a];
                *whole &= registers[r][..ids.len()].iter().all(|v| v % unit == 0);
                *bound = (*bound).max(bounds[r]);
            }
            let acc = &mut self.groups.acc[a];
            let count = &mut self.groups.count[a];
            if agg.func != AggFunc::Min && agg.func != AggFunc::Max {
                if dense {
                    for (c, add) in count.iter_mut().zip(&per_group) {
                        *c += add;
                    }
                } else {
                    for &g in &ids {
                        count[g as usize] += 1;
                    }
                }
            }
            match (agg.func, agg.arg) {
                (AggFunc::CountAll | AggFunc::Count, _) => {}
                (AggFunc::Sum | AggFunc::Avg, Some(r)) if few => {
                    let at = match summed.iter().position(|(reg, _)| *reg == r) {
                        Some(at) => at,
                        None => {
                            let mut part = vec![0i128; acc.len()];
                            if single {
                                part[0] = exact_sum(&registers[r], bounds[r]);
                            } else {
                                sum_by_group(&ids, &registers[r], bounds[r], &mut part);
                            }
                            summed.push((r, part));
                            summed.len() - 1
                        }
                    };
                    for (x, p) in acc.iter_mut().zip(&summed[at].1) {
                        *x += p;
                    }
                }
                (AggFunc::Sum | AggFunc::Avg, Some(r)) => {
                    sum_by_group(&ids, &registers[r], bounds[r], acc)
                }
                (AggFunc::Min | AggFunc::Max, Some(r)) => {
                    let max = agg.func == AggFunc::Max;
                    for (&g, &v) in ids.iter().zip(registers[r].iter()) {
                        let (g, v) = (g as usize, v as i128);
                        if count[g] == 0 || (max && v > acc[g]) || (!max && v < acc[g]) {
                            acc[g] = v;
                        }
                        count[g] += 1;
                    }
                }
                (func, None) => {
                    return Err(Error::Offload {
                        detail: format!("{func:?} without an argument"),
                    })
                }
            }
        }
        self.account_groups();
        Ok(())
    }

    /// The group table as a batch of the task's output schema.
    pub(super) fn emit_groups(&self) -> Result<RecordBatch> {
        self.plan.emit_groups(&self.groups)
    }
}
