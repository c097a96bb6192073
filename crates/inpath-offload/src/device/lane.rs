//! One lane: a task's pages read, selected and kept, block by block.

use super::compare::{
    comparator_or_columns, delta_test, flag_values, load, pack_bits, words_for, Packed, BLOCK,
};
use super::exact::FEW_GROUPS;
use super::finish::first_rows;
use super::groups::Groups;
use super::prepare::{KeepAs, Origin, Prepared, Rows};

use super::stats::Counters;
use crate::arch;
use crate::graph::{AggFunc, Comparator, GroupKey, JoinKind, Operator, Source, Test};
use crate::join::{encode_residual, pack_keys, residual_first, residual_several, Ints};
use arrow_array::types::Int32Type;
use arrow_array::{Array, ArrayRef, DictionaryArray, RecordBatch};
use inpath_table::error::{Error, Result};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Rows a lane groups before [`Lane::check_reduction`] judges its group table.
const PROBE_ROWS: u64 = 100_000;
/// Groups per row above which a group table is not reducing its rows.
const NOT_REDUCING: f64 = 0.8;

/// One lane's state: its group table and its share of the memory budget.
pub(super) struct Lane<'a> {
    pub(super) plan: &'a Prepared,
    pub(super) counters: &'a Counters,
    pub(super) budget: u64,
    pub(super) groups: Groups,
    /// Group-table bytes currently held against the device's memory.
    pub(super) held: u64,
    /// The most groups there can be (dictionary keys), once a page has shown the dictionaries.
    pub(super) group_cap: Option<usize>,
    /// A build (NOP) task's kept rows so far, in page order: per kept column its values (none
    /// for late columns), and per origin of late columns the rows' places.
    pub(super) kept_ints: Vec<Ints>,
    pub(super) kept_places: Vec<Vec<u64>>,
    /// Bytes of what the lane keeps, held against the device's memory.
    pub(super) kept_bytes: u64,
    /// A presence build ([`Prepared::presence`]): the bits of the keys seen, and the rows
    /// that set them.
    pub(super) present: Vec<u64>,
    pub(super) present_rows: u64,
    /// The task's flags over the page being read, as mask words.
    pub(super) flag_words: Vec<Vec<u64>>,
    /// The page's columns kept bit-packed, by column.
    pub(super) packed: HashMap<usize, Packed>,
    /// Delta buffers of earlier pages, for the next to unpack into (not held against the
    /// budget: at most a page of each packed column).
    pub(super) spare_deltas: Vec<Vec<u32>>,
    /// Whether the lane has sent partial groups to the host early.
    pub(super) spilled: bool,
    /// Rows the lane has put into groups (see [`Lane::not_reducing`]).
    pub(super) rows_grouped: u64,
    /// Set once the lane's groups turn out not to reduce its rows: from then on it sends its
    /// groups after every page.
    pub(super) not_reducing: bool,
    /// The selection of the block in hand when every row of the page goes through the
    /// transformer (bit i: row i of the block); none when only selected rows do.
    pub(super) block_mask: Option<Vec<u64>>,
    /// A build with a HAVING over disjoint pages ([`Prepared::complete_key`]): the groups
    /// its pages have ended that passed, and the groups at their ends (untested: later pages
    /// may add to them), for the device to merge across lanes.
    pub(super) finished: Groups,
    /// A build's averages, per aggregate: whether every value was whole at its scale, and
    /// the largest magnitude bound of a block's values (see `LocalDevice::build_groups`).
    pub(super) avg_exact: Vec<(bool, u64)>,
    /// The lane's share of the device's whole memory (its `budget` is its share of what is
    /// left after earlier builds): what an overflow is measured against.
    pub(super) whole_share: u64,
}

impl<'a> Lane<'a> {
    pub(super) fn new(plan: &'a Prepared, counters: &'a Counters, budget: u64) -> Lane<'a> {
        let mut groups = Groups::new(plan.identities.len(), plan.aggs().len());
        if plan.keys().is_empty() {
            groups.push_group(&[]);
        }
        Lane {
            plan,
            counters,
            budget,
            groups,
            held: 0,
            group_cap: None,
            kept_ints: vec![Ints::default(); plan.task.keep.len()],
            kept_places: vec![Vec::new(); plan.origins.len()],
            kept_bytes: 0,
            present: Vec::new(),
            present_rows: 0,
            flag_words: Vec::new(),
            packed: HashMap::new(),
            spare_deltas: Vec::new(),
            spilled: false,
            rows_grouped: 0,
            not_reducing: false,
            block_mask: None,
            finished: Groups::new(plan.identities.len(), plan.aggs().len()),
            avg_exact: vec![(true, 0); plan.aggs().len()],
            whole_share: budget,
        }
    }

    /// The cost check of a group-by: after [`PROBE_ROWS`] rows, whether the lane holds more
    /// groups than [`NOT_REDUCING`] of its rows. Such a table saves the host almost nothing (the
    /// host's final aggregate sees about as many groups as rows) while the device pays a
    /// growing hash table, so the lane then makes each row a group of its own (no lookup) and
    /// sends each page's groups as it goes, instead of building one table of every group (TPC-H Q20's
    /// `lineitem` by part and supplier over one year: 0.8 M groups of 0.9 M rows). DataFusion's
    /// partial aggregate makes the same check (`skip_partial_aggregation_probe_*`, the same
    /// numbers). Only tasks whose groups may reach the host in parts take it: not counted, held
    /// or ordered groups, and groups to send whole only once the lane has spilled some for
    /// memory (until then the device merges them across lanes, in parts at once:
    /// `Groups::merged`; after, the host's Final aggregate merges what comes).
    fn check_reduction(&mut self) {
        let task = &self.plan.task;
        if self.not_reducing
            || self.plan.keys().is_empty()
            || self.rows_grouped < PROBE_ROWS
            || task.count_groups.is_some()
            || task.order.is_some()
            || (task.whole_groups && !self.spilled)
            || self.plan.hold_groups
        {
            return;
        }
        self.not_reducing = self.groups.len as f64 > NOT_REDUCING * self.rows_grouped as f64;
    }

    /// A build's kept rows grow with its pages: once a twentieth of its run is read (and at
    /// least 4 pages), a lane whose kept rows at that rate would end past one and a half times
    /// its share declines then, not when its share is full, so a graph that will run in
    /// key-range passes wastes a twentieth of its builds' work, not the part that fits. (Kept
    /// rows only: groups grow slower than the pages that add to them.)
    fn check_projection(&self, pages: &LanePages, done: usize) -> Result<()> {
        let LanePages::Run(run) = pages else {
            return Ok(());
        };
        // (A presence build's bitmap is whole from its first page.)
        if self.plan.task.operator != Operator::Nop
            || self.plan.task.keep.is_empty()
            || self.plan.presence.is_some()
            || self.plan.task.order.is_some()
            || done < 4
            || done * 20 < run.len()
            || done == run.len()
        {
            return Ok(());
        }
        let projected = self.kept_bytes as f64 * run.len() as f64 / done as f64;
        if projected > 1.5 * self.budget as f64 {
            return Err(Error::DeviceDeclined {
                memory: true,
                detail: format!(
                    "the rows table {} keeps for a join would reach {:.0} KiB at the rate of its \
                     first {done} pages of {}, past a lane's {} KiB of device memory",
                    self.plan.task.table,
                    projected / 1024.0,
                    run.len(),
                    self.budget >> 10
                ),
            });
        }
        Ok(())
    }

    /// The most groups a page of `rows` rows can add.
    pub(super) fn new_groups(&self, rows: usize) -> usize {
        self.group_cap.map_or(rows, |c| c.min(rows))
    }

    pub(super) fn release(&mut self) {
        self.counters.release(self.held + self.kept_bytes);
        self.held = 0;
        self.kept_bytes = 0;
    }

    pub(super) fn account_groups(&mut self) {
        let now = self.groups.bytes() + self.finished.bytes();
        if now > self.held {
            self.counters.hold(now - self.held);
        } else {
            self.counters.release(self.held - now);
        }
        self.held = now;
    }

    /// Reads `pages`, sending what the task emits through `emit` (false: stop). A lane whose
    /// held rows outgrow its share notes how many times its share the task would need (from
    /// the part of its pages read so far), for the device to choose how many key-range passes
    /// to run instead.
    pub(super) fn run(
        &mut self,
        pages: &LanePages,
        cancel: &AtomicBool,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> Result<()> {
        let mut done = 0usize;
        let result = self.run_pages(pages, cancel, emit, &mut done);
        if let Err(Error::DeviceDeclined { memory: true, .. }) = &result {
            let read = pages.fraction_read(done).max(1e-3);
            let need = (self.kept_bytes + self.held) as f64 / read;
            self.counters
                .note_overflow(need / self.whole_share.max(1) as f64);
        }
        result
    }

    fn run_pages(
        &mut self,
        pages: &LanePages,
        cancel: &AtomicBool,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
        done: &mut usize,
    ) -> Result<()> {
        let rows_per_page = self.plan.reader.rows_per_page();
        let mut last_page = 0u64;
        let mut taken = 0;
        while let Some(page) = pages.next(&mut taken) {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Offload {
                    detail: "the query was cancelled".into(),
                });
            }
            // Under memory pressure the groups so far go to the host as partial groups: before
            // a page whose reads (as large as the largest page so far) and new groups (at most
            // one per row) could take the lane past its budget.
            let worst =
                last_page + (self.new_groups(rows_per_page) * self.groups.per_group()) as u64;
            if !self.plan.keys().is_empty()
                && self.groups.len > 0
                && (worst + self.groups.bytes() > self.budget || self.not_reducing)
            {
                if self.plan.task.count_groups.is_some() || self.plan.hold_groups {
                    // Counted groups, and groups a later task joins, must all be on the
                    // device: nothing has been sent, so the host can still run the plan.
                    return Err(Error::DeviceDeclined {
                        memory: true,
                        detail: format!(
                            "the {} groups {} outgrow the lane's {} KiB",
                            self.groups.len,
                            if self.plan.hold_groups {
                                "a later task joins"
                            } else {
                                "to count"
                            },
                            self.budget >> 10
                        ),
                    });
                }
                Counters::add(&self.counters.groups_spilled, self.groups.len as u64);
                self.spilled = true;
                let batch = self.emit_groups()?;
                self.groups.clear();
                self.account_groups();
                if !emit(batch) {
                    return Ok(());
                }
            }
            last_page = last_page.max(self.page(page)?);
            *done += 1;
            self.check_projection(pages, *done)?;
            if let Some((id, column)) = self.plan.complete_key {
                self.finish_page_groups(id, column, page);
            }
            self.keep_first_rows();
            self.check_reduction();
        }
        let task = &self.plan.task;
        if task.operator == Operator::Nop
            || task.order.is_some()
            || task.count_groups.is_some()
            || (task.whole_groups && !self.spilled)
            || self.plan.hold_groups
        {
            // A NOP task's rows stay in the lane for the device to collect; so do groups to be
            // sorted, joined or sent whole, for the device to merge across lanes first.
        } else if self.plan.keys().is_empty() || self.groups.len > 0 {
            // (Groups to send whole that spilled are not whole: the lane sends the rest itself,
            // as it goes, and hands the device's finisher an empty table.)
            let batch = self.emit_groups()?;
            if task.whole_groups {
                self.groups.clear();
                self.account_groups();
            }
            emit(batch);
        }
        Ok(())
    }

    /// After a page of a build with a HAVING over disjoint pages: the groups whose key
    /// `id` (column `column`) lies strictly inside the page's range are whole, so those that
    /// pass go to `finished` and the rest are dropped; the groups at the page's two ends go
    /// to `finished` untested. The table starts empty for the next page.
    fn finish_page_groups(&mut self, id: usize, column: usize, page: usize) {
        let Some((lo, hi)) = self.plan.page_range(column, page) else {
            return;
        };
        let g = &self.groups;
        let picks: Vec<u32> = (0..g.len)
            .filter(|&i| {
                let k = g.keys[id][i] as i128;
                k <= lo || k >= hi || self.plan.passes_having(g, i)
            })
            .map(|i| i as u32)
            .collect();
        let ended = g.subset(&picks);
        let finished = std::mem::replace(&mut self.finished, Groups::new(0, 0));
        self.finished =
            Groups::concatenated(vec![finished, ended]).unwrap_or_else(|| Groups::new(0, 0));
        self.groups.clear();
        self.account_groups();
    }

    /// A NOP last task under TOPK: once the rows kept outnumber the limit by far, only those
    /// that can still be among the first stay (ties included), so a lane holds about the
    /// limit's rows, not every row it selected.
    pub(super) fn keep_first_rows(&mut self) {
        let plan = self.plan;
        let (Some(order), Operator::Nop) = (&plan.task.order, &plan.task.operator) else {
            return;
        };
        let Some(limit) = order.limit else {
            return;
        };
        if plan.hold_groups || plan.distinct || plan.summarize.is_some() {
            return;
        }
        let n = self
            .kept_ints
            .iter()
            .map(Ints::len)
            .chain(self.kept_places.iter().map(Vec::len))
            .max()
            .unwrap_or(0);
        if n <= 2 * limit + 1024 {
            return;
        }
        let keys = plan.order_keys(&self.kept_ints, order);
        let mut picks = first_rows(&keys, n, Some(limit));
        if picks.len() == n {
            return;
        }
        // Page order among the rows left, as they came.
        picks.sort_unstable();
        Counters::add(&self.counters.groups_cut, (n - picks.len()) as u64);
        let before = self.kept_bytes;
        let mut after = 0u64;
        for values in &mut self.kept_ints {
            if values.len() == n {
                *values = Ints::from(values.gather(&picks));
            }
            after += values.bytes() as u64;
        }
        for places in &mut self.kept_places {
            *places = picks.iter().map(|&r| places[r as usize]).collect();
            after += places.len() as u64 * 8;
        }
        let freed = before.saturating_sub(after);
        self.kept_bytes -= freed;
        self.counters.release(freed);
    }

    /// Reads, selects, transforms and aggregates one page; returns the bytes it held.
    pub(super) fn page(&mut self, page: usize) -> Result<u64> {
        let plan = self.plan;
        let reader = &plan.reader;
        let rows = reader.manifest().page_rows(page);
        let table = &plan.task.table;
        let mut arrays: HashMap<usize, ArrayRef> = HashMap::new();
        let mut held = 0u64;
        let read = |c: usize, arrays: &mut HashMap<usize, ArrayRef>, held: &mut u64| {
            let meta = reader.zone_map(c, page)?;
            Counters::add(&self.counters.bytes_read, meta.len);
            let a = reader.read_page_narrow(c, page)?;
            let bytes = a.get_array_memory_size() as u64;
            *held += bytes;
            self.counters.hold(bytes);
            arrays.insert(c, a);
            Ok::<(), Error>(())
        };
        let result = (|| {
            // Mask words per comparator: a comparator repeated across products (an OR of ANDs
            // distributed) is evaluated once per page; a packed column's comparators all in
            // the pass that unpacks it.
            let mut seen: Vec<(&Comparator, Vec<u64>)> = Vec::new();
            for &c in &plan.selector_columns {
                if plan.packed_columns.contains(&c) {
                    let mut tests: Vec<&Comparator> = Vec::new();
                    for cmp in plan.task.selector.products.iter().flatten() {
                        if cmp.column == c && !tests.contains(&cmp) {
                            tests.push(cmp);
                        }
                    }
                    let keep = plan.packed_kept.contains(&c);
                    if let Some((words, bytes)) = self.unpack_column(c, page, &tests, keep)? {
                        held += bytes;
                        seen.extend(tests.into_iter().zip(words));
                        continue;
                    }
                }
                read(c, &mut arrays, &mut held)?;
            }
            let column_name = |c: usize| {
                format!(
                    "table {table}, column {}, page {page}",
                    reader.manifest().columns[c].name
                )
            };
            // Row Selector: AND of ORs over 64-bit mask words.
            let mut mask = vec![u64::MAX; words_for(rows)];
            if let Some(last) = mask.last_mut() {
                if !rows.is_multiple_of(64) {
                    *last = (1u64 << (rows % 64)) - 1;
                }
            }
            for product in &plan.task.selector.products {
                let mut any = vec![0u64; mask.len()];
                for cmp in product {
                    let at = match seen.iter().position(|(c, _)| *c == cmp) {
                        Some(at) => at,
                        None => {
                            let w = comparator_or_columns(&arrays, cmp, &column_name(cmp.column))?;
                            seen.push((cmp, w));
                            seen.len() - 1
                        }
                    };
                    for (a, b) in any.iter_mut().zip(&seen[at].1) {
                        *a |= b;
                    }
                }
                for (m, a) in mask.iter_mut().zip(any) {
                    *m &= a;
                }
            }
            let selected: usize = mask.iter().map(|w| w.count_ones() as usize).sum();
            if selected == 0 {
                Counters::add(&self.counters.pages_skipped, 1);
                return Ok(());
            }
            Counters::add(&self.counters.pages_read, 1);
            Counters::add(&self.counters.rows_selected, selected as u64);
            for &c in &plan.program_columns {
                if plan.packed_columns.contains(&c) {
                    if let Some((_, bytes)) = self.unpack_column(c, page, &[], true)? {
                        held += bytes;
                        continue;
                    }
                }
                read(c, &mut arrays, &mut held)?;
            }
            self.flag_words = plan
                .task
                .flags
                .iter()
                .map(|cmp| comparator_or_columns(&arrays, cmp, &column_name(cmp.column)))
                .collect::<Result<_>>()?;
            for k in plan.keys() {
                if let GroupKey::Dictionary { column } = k {
                    if !arrays.contains_key(column) {
                        read(*column, &mut arrays, &mut held)?;
                    }
                }
            }
            // A group-by must also hold one page's worth of new groups (one per row).
            // Keys that are all dictionaries bound the groups by the product of their sizes.
            if !plan.keys().is_empty() {
                let mut cap = Some(1usize);
                for k in plan.keys() {
                    cap = match (k, cap) {
                        (GroupKey::Dictionary { column }, Some(c)) => arrays[column]
                            .as_any()
                            .downcast_ref::<DictionaryArray<Int32Type>>()
                            .and_then(|d| c.checked_mul(d.values().len().max(1))),
                        _ => None,
                    };
                }
                self.group_cap = cap;
            }
            // Most rows selected, no joins, a few groups by dictionary codes and sums and
            // counts only (TPC-H Q1): every row goes through the transformer, the unselected
            // ones zeroed, and the operator skips them; no row is gathered.
            let masked = selected < rows
                && selected * 8 >= rows * 7
                && plan.task.joins.is_empty()
                && plan.task.filter.is_none()
                && plan.task.operator != Operator::Nop
                && !plan.keys().is_empty()
                && self.group_cap.is_some_and(|c| c <= FEW_GROUPS)
                && plan
                    .aggs()
                    .iter()
                    .all(|a| !matches!(a.func, AggFunc::Min | AggFunc::Max));
            let sel: Option<Vec<u32>> = (selected < rows && !masked).then(|| {
                let mut s = Vec::with_capacity(selected);
                for (w, &word) in mask.iter().enumerate() {
                    let mut bits = word;
                    while bits != 0 {
                        s.push((w * 64) as u32 + bits.trailing_zeros());
                        bits &= bits - 1;
                    }
                }
                s
            });
            // Joins: the selected rows matched with each build in turn (inner joins repeat a
            // row per matching build row; semi and anti joins only drop rows).
            let mut matched: Vec<Vec<u32>> = Vec::with_capacity(plan.task.joins.len());
            let (sel, count) = if masked {
                (None, rows)
            } else if plan.task.joins.is_empty() {
                (sel, selected)
            } else {
                let mut picked: Vec<u32> = sel.unwrap_or_else(|| (0..rows as u32).collect());
                for (j, join) in plan.task.joins.iter().enumerate() {
                    let values = |src: &Source, matched: &[Vec<u32>]| -> Result<Vec<i64>> {
                        Ok(match *src {
                            Source::Flag(f) => {
                                flag_values(&self.flag_words[f], &Rows::Pick(&picked))
                            }
                            Source::Column(c) => {
                                self.load_column(&arrays, c, &Rows::Pick(&picked), &|| {
                                    column_name(c)
                                })?
                            }
                            Source::Build { join: k, column } => {
                                plan.builds[k].ints(column)?.gather(&matched[k])
                            }
                        })
                    };
                    let mut parts: Vec<Vec<i64>> = Vec::with_capacity(join.probe_keys.len());
                    for key in &join.probe_keys {
                        parts.push(values(key, &matched)?);
                    }
                    // A probe key beyond what packs cannot equal any build key (they all pack).
                    let (keys, packs) = pack_keys(parts);
                    let (take, build_rows) = match (&join.residual, &join.condition) {
                        (None, Some(c)) => {
                            // Each pair of a probe row and a build row of its key, tested.
                            let mut sources: Vec<(&Source, Vec<i64>)> = Vec::new();
                            for s in c.left.sources().into_iter().chain(c.right.sources()) {
                                if !sources.iter().any(|(t, _)| *t == s) {
                                    sources.push((s, values(s, &matched)?));
                                }
                            }
                            let build = &plan.builds[j];
                            let mut columns: Vec<(usize, &Ints)> = Vec::new();
                            for col in c
                                .left
                                .build_columns()
                                .into_iter()
                                .chain(c.right.build_columns())
                            {
                                if !columns.iter().any(|(k, _)| *k == col) {
                                    columns.push((col, build.ints(col)?));
                                }
                            }
                            let (pairs, rows) =
                                build.probe(&keys, packs.as_deref(), JoinKind::Inner);
                            let mut hit = vec![false; keys.len()];
                            for (&i, &b) in pairs.iter().zip(&rows) {
                                let probe = |s: &Source| {
                                    sources
                                        .iter()
                                        .find(|(t, _)| *t == s)
                                        .map_or(0, |(_, v)| v[i as usize])
                                };
                                let kept = |col: usize| {
                                    columns
                                        .iter()
                                        .find(|(k, _)| *k == col)
                                        .map_or(0, |(_, v)| v.get(b as usize))
                                };
                                if !hit[i as usize] && c.holds(&probe, &kept) {
                                    hit[i as usize] = true;
                                }
                            }
                            let want = join.kind == JoinKind::Semi;
                            let take = (0..keys.len() as u32)
                                .filter(|&i| hit[i as usize] == want)
                                .collect();
                            (take, Vec::new())
                        }
                        // Every probe row, with its key's build row or none (u32::MAX): the
                        // build's keys are its group keys, one row each.
                        (None, None) if join.kind == JoinKind::Left => {
                            let (pairs, rows) =
                                plan.builds[j].probe(&keys, packs.as_deref(), JoinKind::Inner);
                            let mut build = vec![u32::MAX; keys.len()];
                            for (&i, &b) in pairs.iter().zip(&rows) {
                                build[i as usize] = b;
                            }
                            ((0..keys.len() as u32).collect(), build)
                        }
                        (None, None) => plan.builds[j].probe(&keys, packs.as_deref(), join.kind),
                        (Some(r), _) => {
                            let v = values(&r.probe, &matched)?;
                            let take = plan.builds[j].probe_residual(
                                &keys,
                                packs.as_deref(),
                                join.kind,
                                &v,
                                r.build,
                            )?;
                            (take, Vec::new())
                        }
                    };
                    picked = take.iter().map(|&i| picked[i as usize]).collect();
                    for m in matched.iter_mut().filter(|m| !m.is_empty()) {
                        *m = take.iter().map(|&i| m[i as usize]).collect();
                    }
                    matched.push(build_rows);
                }
                let n = picked.len();
                if n == 0 {
                    return Ok(());
                }
                let bytes = (n * 4 * (1 + matched.len())) as u64;
                held += bytes;
                self.counters.hold(bytes);
                (Some(picked), n)
            };
            let groups_room = if plan.keys().is_empty() {
                0
            } else {
                (self.new_groups(count) * self.groups.per_group()) as u64
            };
            // The transformer's registers hold one block of rows at a time.
            let block = count.min(BLOCK);
            let reg_bytes = (plan.task.transformer.ops.len() * block * 8) as u64;
            if held + reg_bytes + groups_room > self.budget {
                // Before the lane has sent anything: the host can still run the query.
                return Err(Error::DeviceDeclined {
                    memory: false,
                    detail: format!(
                        "the device's memory budget ({} KiB per lane) cannot hold one page of \
                         table {table} and its groups ({} KiB: columns {} KiB, registers {} KiB, \
                         groups {} KiB); give the device more memory",
                        self.budget >> 10,
                        (held + reg_bytes + groups_room).div_ceil(1024),
                        held >> 10,
                        reg_bytes >> 10,
                        groups_room >> 10
                    ),
                });
            }
            self.counters.hold(reg_bytes);
            held += reg_bytes;
            let mut start = 0;
            while start < count {
                let n = (count - start).min(BLOCK);
                // BLOCK is a multiple of 64: a block's mask words are whole words of the page's.
                self.block_mask =
                    masked.then(|| mask[start / 64..(start + n).div_ceil(64)].to_vec());
                let block = match &sel {
                    None => Rows::Range(start, n),
                    Some(s) => Rows::Pick(&s[start..start + n]),
                };
                let m: Vec<&[u32]> = matched
                    .iter()
                    .map(|v| {
                        if v.is_empty() {
                            &[][..]
                        } else {
                            &v[start..start + n]
                        }
                    })
                    .collect();
                if plan.task.operator == Operator::Nop {
                    self.keep(page, &arrays, &block, &m)?;
                } else {
                    let Registers {
                        values: registers,
                        bounds,
                    } = self.transform(&arrays, &block, &m, n, &column_name)?;
                    match plan.task.filter {
                        Some(f) if registers[f].contains(&0) => {
                            // Only the rows the filter keeps, registers and places compacted.
                            let keep: Vec<u32> = (0..n as u32)
                                .filter(|&i| registers[f][i as usize] != 0)
                                .collect();
                            let pick = |v: &[u32]| -> Vec<u32> {
                                keep.iter().map(|&i| v[i as usize]).collect()
                            };
                            // (Constants the operator never reads are held as no rows.)
                            let regs: Vec<Cow<[i64]>> = registers
                                .iter()
                                .map(|r| {
                                    Cow::Owned(match r.len() == n {
                                        true => keep.iter().map(|&i| r[i as usize]).collect(),
                                        false => Vec::new(),
                                    })
                                })
                                .collect();
                            let rows = pick(&block.indices());
                            let kept: Vec<Vec<u32>> = m
                                .iter()
                                .map(|v| if v.is_empty() { Vec::new() } else { pick(v) })
                                .collect();
                            let kept: Vec<&[u32]> = kept.iter().map(Vec::as_slice).collect();
                            if !keep.is_empty() {
                                self.aggregate(
                                    &arrays,
                                    &regs,
                                    &bounds,
                                    &Rows::Pick(&rows),
                                    &kept,
                                    keep.len(),
                                )?;
                            }
                        }
                        _ => self.aggregate(&arrays, &registers, &bounds, &block, &m, n)?,
                    }
                }
                start += n;
            }
            Ok(())
        })();
        self.block_mask = None;
        let packed = std::mem::take(&mut self.packed);
        self.spare_deltas
            .extend(packed.into_values().map(|p| p.deltas));
        self.counters.release(held);
        result.map(|()| held)
    }

    /// Reads column `c` of `page` as its bit-packed deltas where the page is stored that way:
    /// the selector's comparators `tests` on it answered run by run as the deltas are
    /// unpacked (their mask words returned in order, each run of blocks compared while in the
    /// L1 cache), and the deltas kept for loads where `keep`. Returns the words and the bytes
    /// held, or `None` (nothing read) for a page stored otherwise.
    pub(super) fn unpack_column(
        &mut self,
        c: usize,
        page: usize,
        tests: &[&Comparator],
        keep: bool,
    ) -> Result<Option<(Vec<Vec<u64>>, u64)>> {
        let reader = &self.plan.reader;
        let rows = reader.manifest().page_rows(page);
        // Buffers of earlier pages are reused: unpacking writes into them in place.
        let mut buffer = keep.then(|| self.spare_deltas.pop().unwrap_or_default());
        let unpacked = reader.read_page_for(c, page, |block| {
            let kernels: Vec<std::result::Result<(u8, u32), bool>> = tests
                .iter()
                .map(|cmp| match cmp.test {
                    Test::Int { op, value } => delta_test(block.reference, op, value),
                    // (Packed columns have integer comparators only.)
                    _ => Err(false),
                })
                .collect();
            let mut words: Vec<Vec<u64>> = kernels
                .iter()
                .map(|_| Vec::with_capacity(words_for(rows)))
                .collect();
            block.unpack_deltas(buffer.as_mut(), |_, deltas| {
                for (kernel, w) in kernels.iter().zip(words.iter_mut()) {
                    if let Ok((op, value)) = *kernel {
                        arch::cmp_u32::run_into(deltas, op, value, w);
                    }
                }
            });
            for (kernel, w) in kernels.iter().zip(words.iter_mut()) {
                if let Err(all) = *kernel {
                    *w = pack_bits(rows, |_| all);
                }
            }
            (block.reference, block.width, words)
        })?;
        let Some((reference, width, words)) = unpacked else {
            self.spare_deltas.extend(buffer);
            return Ok(None);
        };
        Counters::add(&self.counters.bytes_read, reader.zone_map(c, page)?.len);
        let mut held = 0;
        if let Some(deltas) = buffer {
            held = deltas.len() as u64 * 4;
            self.counters.hold(held);
            self.packed.insert(c, Packed::new(deltas, reference, width));
        }
        Ok(Some((words, held)))
    }

    /// Column `c`'s values at `rows` as i64, from its packed page where it has one.
    pub(super) fn load_column(
        &self,
        arrays: &HashMap<usize, ArrayRef>,
        c: usize,
        rows: &Rows,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<i64>> {
        match self.packed.get(&c) {
            Some(p) => Ok(p.load(rows, what)?.0),
            None => load(&arrays[&c], rows, what),
        }
    }

    /// A residual build's block of rows as one row per run of equal keys (every kept column
    /// but `value`), continuing the run the lane kept last: the run's first value, marked when
    /// another value follows in it (`join::encode_residual`).
    pub(super) fn summarize_runs(
        &mut self,
        columns: Vec<(usize, Vec<i64>)>,
        value: usize,
    ) -> Result<Vec<(usize, Vec<i64>)>> {
        // Never the rows as they are: the probe reads this column as encoded.
        let Some(v) = columns.iter().position(|(c, _)| *c == value) else {
            return Err(Error::Offload {
                detail: format!("a residual join's build keeps no integer column {value}"),
            });
        };
        let keys: Vec<usize> = (0..columns.len()).filter(|&k| k != v).collect();
        let values = &columns[v].1;
        let n = values.len();
        let kept = &self.kept_ints;
        let mut starts = run_starts(&columns, &keys, kept);
        if let Some(first) = starts.first_mut() {
            *first |= kept[value].last().is_none();
        }
        // One branch-free pass: each run's first row, and whether any value of it differs from
        // the one before it in the run (then not every value is the first). Slot 0 of
        // `several` is the lane's last kept run, continued by the rows before the first start;
        // slot r + 1 is run r. (`first_at[runs]` is written on every row and kept only where a
        // run starts.)
        let mut first_at = vec![0u32; n + 1];
        let mut several = vec![false; n + 1];
        let mut runs = 0usize;
        let kept_first = kept[value].last().map(residual_first);
        for i in 0..n {
            let start = starts[i];
            first_at[runs] = i as u32;
            runs += usize::from(start);
            let before = match i {
                0 => kept_first.unwrap_or(values[0]),
                _ => values[i - 1],
            };
            several[runs] |= !start & (values[i] != before);
        }
        // The lane's last kept run, grown by another value.
        let mut grown_kept: Option<i64> = None;
        if let Some(enc) = kept[value].last() {
            if several[0] && !residual_several(enc) {
                grown_kept = Some(enc | 1);
            }
        }
        let firsts = &first_at[..runs];
        let mut out: Vec<(usize, Vec<i64>)> = Vec::with_capacity(columns.len());
        for (k, (c, col)) in columns.iter().enumerate() {
            let picked: Vec<i64> = if k == v {
                firsts
                    .iter()
                    .zip(&several[1..=runs])
                    .map(|(&at, &more)| {
                        encode_residual(col[at as usize]).map(|enc| enc | i64::from(more))
                    })
                    .collect::<Option<Vec<i64>>>()
                    .ok_or_else(|| Error::DeviceDeclined {
                        memory: false,
                        detail: "a residual join value beyond what the device keeps (+-2^62)"
                            .to_string(),
                    })?
            } else {
                firsts.iter().map(|&at| col[at as usize]).collect()
            };
            out.push((*c, picked));
        }
        if let Some(enc) = grown_kept {
            let before = self.kept_ints[value].bytes();
            self.kept_ints[value].set_last(enc);
            let grown = (self.kept_ints[value].bytes() - before) as u64;
            self.kept_bytes += grown;
            self.counters.hold(grown);
        }
        Ok(out)
    }

    /// Adds a block of rows to what a build task keeps.
    pub(super) fn keep(
        &mut self,
        page: usize,
        arrays: &HashMap<usize, ArrayRef>,
        rows: &Rows,
        matched: &[&[u32]],
    ) -> Result<()> {
        let plan = self.plan;
        if let Some((least, span)) = plan.presence {
            return self.keep_present(arrays, rows, least, span);
        }
        let mut bytes = 0u64;
        for (o, origin) in plan.origins.iter().enumerate() {
            let places: Vec<u64> = match *origin {
                Origin::Own => {
                    let first = page as u64 * plan.reader.rows_per_page() as u64;
                    rows.indices().iter().map(|&r| first + r as u64).collect()
                }
                Origin::Nested { join, places } => {
                    let p = &plan.builds[join].places[places].rows;
                    matched[join].iter().map(|&r| p[r as usize]).collect()
                }
            };
            bytes += places.len() as u64 * 8;
            self.kept_places[o].extend(places);
        }
        let mut columns: Vec<(usize, Vec<i64>)> = Vec::with_capacity(plan.keep_as.len());
        for (c, how) in plan.keep_as.iter().enumerate() {
            let KeepAs::Int(src) = *how else { continue };
            let values: Vec<i64> = match src {
                Source::Flag(f) => flag_values(&self.flag_words[f], rows),
                Source::Column(col) => {
                    self.load_column(arrays, col, rows, &|| format!("kept column {col}"))?
                }
                Source::Build { join, column } => {
                    plan.builds[join].ints(column)?.gather(matched[join])
                }
            };
            columns.push((c, values));
        }
        if let Some(v) = plan.summarize {
            columns = self.summarize_runs(columns, v)?;
        } else if plan.distinct && plan.origins.is_empty() && !columns.is_empty() {
            // Rows equal to the row before them (the last kept, across blocks) are dropped.
            let n = columns[0].1.len();
            let all: Vec<usize> = (0..columns.len()).collect();
            let keep = positions(&run_starts(&columns, &all, &self.kept_ints));
            if keep.len() < n {
                for (_, v) in &mut columns {
                    *v = keep.iter().map(|&i| v[i as usize]).collect();
                }
            }
        }
        for (c, values) in columns {
            let before = self.kept_ints[c].bytes();
            self.kept_ints[c].extend(&values);
            bytes += (self.kept_ints[c].bytes() - before) as u64;
        }
        self.hold_kept(bytes, "rows")
    }

    /// Holds `bytes` more of a build's kept `what` (rows, a key bitmap) against the lane's
    /// memory: a decline for memory once they outgrow it.
    fn hold_kept(&mut self, bytes: u64, what: &str) -> Result<()> {
        self.kept_bytes += bytes;
        self.counters.hold(bytes);
        if self.kept_bytes > self.budget {
            return Err(Error::DeviceDeclined {
                memory: true,
                detail: format!(
                    "the {what} table {} keeps for a join outgrow a lane's {} KiB of device \
                     memory",
                    self.plan.task.table,
                    self.budget >> 10
                ),
            });
        }
        Ok(())
    }

    /// A presence build's block: each selected row's key sets its bit (the bitmap, `span`
    /// bits from `least`, taken on the first block and held against the lane's memory).
    fn keep_present(
        &mut self,
        arrays: &HashMap<usize, ArrayRef>,
        rows: &Rows,
        least: i64,
        span: usize,
    ) -> Result<()> {
        let KeepAs::Int(Source::Column(column)) = self.plan.keep_as[0] else {
            return Err(Error::Offload {
                detail: "a presence build whose key is not a column kept by value".into(),
            });
        };
        let values = self.load_column(arrays, column, rows, &|| format!("key column {column}"))?;
        if self.present.is_empty() {
            self.present = vec![0u64; span.div_ceil(64)];
            self.hold_kept(self.present.len() as u64 * 8, "key bitmap")?;
        }
        for &v in &values {
            let d = v.wrapping_sub(least) as u64;
            // The zone maps bound every key: one outside them would be damage.
            if d >= span as u64 {
                return Err(Error::Offload {
                    detail: format!("a join key {v} outside its column's zone maps"),
                });
            }
            self.present[(d / 64) as usize] |= 1 << (d % 64);
        }
        self.present_rows += values.len() as u64;
        Ok(())
    }

    /// `values` with a masked block's unselected rows zeroed, for arithmetic checked row by
    /// row (an unselected row must not fail a query); as they are otherwise.
    pub(super) fn selected_only<'v>(&self, values: &'v [i64]) -> Cow<'v, [i64]> {
        match &self.block_mask {
            Some(mask) => {
                let mut owned = values.to_vec();
                arch::keep_selected::run(&mut owned, mask);
                Cow::Owned(owned)
            }
            None => Cow::Borrowed(values),
        }
    }
}

/// The pages a lane of the last task reads.
pub(super) enum LanePages {
    /// A run of its own, read in order: a NOP task's kept rows and sorted groups follow page
    /// order, lane by lane.
    Run(Vec<usize>),
    /// A queue all lanes share, each taking the next page when done with its last: where which
    /// lane reads a page does not change the result (the groups of an aggregate merge
    /// exactly), a lane on a slower core reads fewer pages instead of holding the query up.
    Shared(Arc<(Vec<usize>, AtomicUsize)>),
}

impl LanePages {
    /// The part of the pages read (of a run: by this lane, `done` of them; of a shared
    /// queue: by every lane).
    pub(super) fn fraction_read(&self, done: usize) -> f64 {
        match self {
            LanePages::Run(run) => done as f64 / run.len().max(1) as f64,
            LanePages::Shared(queue) => {
                let taken = queue.1.load(Ordering::Relaxed).min(queue.0.len());
                taken as f64 / queue.0.len().max(1) as f64
            }
        }
    }

    /// The next page to read, none when all are taken; `taken` counts a run's pages so far.
    pub(super) fn next(&self, taken: &mut usize) -> Option<usize> {
        match self {
            LanePages::Run(run) => {
                *taken += 1;
                run.get(*taken - 1).copied()
            }
            LanePages::Shared(queue) => queue
                .0
                .get(queue.1.fetch_add(1, Ordering::Relaxed))
                .copied(),
        }
    }
}

/// A block's transformer registers, with a bound on each register's magnitudes.
pub(super) struct Registers<'a> {
    pub(super) values: Vec<Cow<'a, [i64]>>,
    pub(super) bounds: Vec<u64>,
}

/// Where runs of rows equal in the `keys` of `columns` (kept column, values) start: row 0
/// unless it equals the lane's last kept row (`kept`, by kept column) in every key, and every
/// row that differs from the row before in some key. One pass per key over neighbouring pairs,
/// which the compiler vectorises.
fn run_starts(columns: &[(usize, Vec<i64>)], keys: &[usize], kept: &[Ints]) -> Vec<bool> {
    let n = columns.first().map_or(0, |(_, v)| v.len());
    let mut starts = vec![false; n];
    if n > 0 {
        starts[0] = !keys
            .iter()
            .all(|&k| kept[columns[k].0].last() == Some(columns[k].1[0]));
    }
    for &k in keys {
        for (s, pair) in starts[1..].iter_mut().zip(columns[k].1.windows(2)) {
            *s |= pair[0] != pair[1];
        }
    }
    starts
}

/// The places where `flags` holds, ascending: written on every place and kept by advancing,
/// so no place costs a branch.
fn positions(flags: &[bool]) -> Vec<u32> {
    let mut out = vec![0u32; flags.len()];
    let mut m = 0;
    for (i, &f) in flags.iter().enumerate() {
        out[m] = i as u32;
        m += usize::from(f);
    }
    out.truncate(m);
    out
}
