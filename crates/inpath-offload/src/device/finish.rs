//! Finishing a task: merging the lanes' groups and rows, ordering them, top-k with ties,
//! counted groups.

use super::groups::{Groups, MulHasher};
use super::prepare::Prepared;
use super::stats::Counters;
use crate::graph::Order;
use crate::join::Ints;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema};
use inpath_table::error::{Error, Result};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// The finisher of a sorted task: takes every lane's group table, merges them, orders them
/// (SORT, TOPK) and sends the batch. A lane that failed has sent its error instead; then
/// nothing is sent here. Each table arrives with its bytes still held against the device's
/// memory (the lane handed them over); they are released here once the batch is made.
pub(super) fn finish_groups(
    plan: &Prepared,
    order: Option<&Order>,
    tables_rx: Receiver<(Groups, bool)>,
    lanes: usize,
    counters: &Counters,
    tx: &std::sync::mpsc::SyncSender<Result<RecordBatch>>,
) {
    let mut tables = Vec::with_capacity(lanes);
    let (mut spilled, mut held) = (false, 0u64);
    for (groups, lane_spilled) in tables_rx.iter() {
        spilled |= lane_spilled;
        held += groups.bytes();
        tables.push(groups);
        if tables.len() == lanes {
            break;
        }
    }
    // A lane that failed has sent its error and no table: nothing more is sent.
    let batches: Vec<Result<RecordBatch>> =
        match (tables.len() == lanes, order, plan.task.count_groups) {
            (false, ..) => Vec::new(),
            // Groups to send whole of which a lane spilled some on the way are not whole, and the
            // host merges them: each lane's table goes as it is, unmerged.
            (true, None, None) if spilled && plan.task.whole_groups => tables
                .iter()
                .filter(|g| g.len > 0)
                .map(|g| plan.emit_groups(g))
                .collect(),
            (true, order, Some(c)) => {
                let counted = counted_batch(plan, &tables, c.keys, lanes, counters);
                let counted = match order {
                    Some(o) => counted.map(|b| b.and_then(|b| ordered_rows(&b, o))),
                    None => counted,
                };
                counted.into_iter().collect()
            }
            (true, ..) => merged_batch(plan, tables, order, spilled, counters)
                .into_iter()
                .collect(),
        };
    counters.release(held);
    for batch in batches {
        if let Ok(b) = &batch {
            Counters::add(&counters.bytes_sent, b.get_array_memory_size() as u64);
        }
        if tx.send(batch).is_err() {
            break;
        }
    }
}

/// The rows (of `n`) ordered by `keys` (values, descending) and cut to the first `limit`,
/// rows tied with the last one kept included; all rows, in order, without keys.
pub(super) fn first_rows(keys: &[(&Ints, bool)], n: usize, limit: Option<usize>) -> Vec<u32> {
    let mut picks: Vec<u32> = (0..n as u32).collect();
    if keys.is_empty() {
        return picks;
    }
    let cmp = |a: u32, b: u32| {
        for &(values, descending) in keys {
            let o = values.get(a as usize).cmp(&values.get(b as usize));
            let o = if descending { o.reverse() } else { o };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    };
    picks.sort_by(|&a, &b| cmp(a, b));
    if let Some(limit) = limit.filter(|&k| k > 0 && k < n) {
        let end = tied_end(&picks, limit, |a, b| cmp(a, b).is_eq());
        picks.truncate(end);
    }
    picks
}

/// Where the first `limit` of `picks` (rows in order) end once the rows after them that `same`
/// finds tied with the last of them are kept too.
pub(super) fn tied_end(picks: &[u32], limit: usize, same: impl Fn(u32, u32) -> bool) -> usize {
    let last = picks[limit - 1];
    limit
        + picks[limit..]
            .iter()
            .take_while(|&&r| same(r, last))
            .count()
}

/// What a lane of a NOP last task kept: its place among the lanes, its kept columns' values
/// and its late columns' row places.
pub(super) type LaneRows = (usize, Vec<Ints>, Vec<Vec<u64>>);

/// The finisher of a NOP last task: takes every lane's kept rows, in lane order (pages in
/// table order), orders them and keeps the first `limit` (TOPK, rows tied with the last
/// included) and sends them. A lane that failed has sent its error instead; then nothing is
/// sent here.
pub(super) fn finish_rows(
    plan: &Prepared,
    order: Option<&Order>,
    rows_rx: Receiver<LaneRows>,
    lanes: usize,
    counters: &Counters,
    tx: &std::sync::mpsc::SyncSender<Result<RecordBatch>>,
) {
    let mut parts: Vec<LaneRows> = rows_rx.iter().take(lanes).collect();
    if parts.len() < lanes {
        return;
    }
    parts.sort_by_key(|p| p.0);
    let mut ints: Vec<Ints> = vec![Ints::default(); plan.task.keep.len()];
    let mut places: Vec<Vec<u64>> = vec![Vec::new(); plan.origins.len()];
    for (_, i, p) in parts {
        for (all, part) in ints.iter_mut().zip(i) {
            all.append(part);
        }
        for (all, part) in places.iter_mut().zip(p) {
            all.extend(part);
        }
    }
    match plan.emit_rows(&ints, &places, order, counters) {
        Ok(None) => {}
        Ok(Some(batch)) => {
            Counters::add(&counters.bytes_sent, batch.get_array_memory_size() as u64);
            let _ = tx.send(Ok(batch));
        }
        Err(e) => {
            let _ = tx.send(Err(e));
        }
    }
}

/// The lanes' tables merged (the device's own final aggregate), ordered and cut by `order`:
/// none for a group-by without groups.
pub(super) fn merged_batch(
    plan: &Prepared,
    tables: Vec<Groups>,
    order: Option<&Order>,
    spilled: bool,
    counters: &Counters,
) -> Option<Result<RecordBatch>> {
    let groups = Groups::merged(tables, plan.aggs())?;
    let empty_groupby = !plan.keys().is_empty() && groups.len == 0;
    let all = groups.len;
    let finished = match order {
        Some(order) => plan.order_groups(groups, order, spilled),
        None => Ok(groups),
    };
    match finished {
        Ok(finished) => {
            Counters::add(&counters.groups_cut, (all - finished.len) as u64);
            (!empty_groupby).then(|| plan.emit_groups(&finished))
        }
        Err(e) => Some(Err(e)),
    }
}

/// COUNT_GROUPS over the lanes' tables as they are: counting takes each distinct row once,
/// whichever lane holds it, so they are never merged first (merging was a third of Q16's
/// device time in a profile). None when no lane holds a group.
pub(super) fn counted_batch(
    plan: &Prepared,
    tables: &[Groups],
    keys: usize,
    lanes: usize,
    counters: &Counters,
) -> Option<Result<RecordBatch>> {
    let rows: usize = tables.iter().map(|g| g.len).sum();
    (rows > 0).then(|| {
        let batches = tables
            .iter()
            .filter(|g| g.len > 0)
            .map(|g| plan.emit_groups(g))
            .collect::<Result<Vec<_>>>()?;
        let all = arrow_select::concat::concat_batches(&plan.schema, &batches).map_err(|e| {
            Error::Offload {
                detail: format!("cannot count groups: {e}"),
            }
        })?;
        count_groups(&all, keys, lanes, counters)
    })
}

/// `batch`'s rows ordered by `order`'s keys (its columns, as Arrow orders them: strings by
/// their bytes) and, with a limit, cut to the first `limit` and the rows tied with the last
/// on every key: counted groups are whole, so any of them may be cut.
pub(super) fn ordered_rows(batch: &RecordBatch, order: &Order) -> Result<RecordBatch> {
    let bad = |e: &dyn std::fmt::Display| Error::Offload {
        detail: format!("cannot order counted groups: {e}"),
    };
    let columns = order
        .keys
        .iter()
        .map(|k| {
            let values = batch
                .columns()
                .get(k.column)
                .ok_or_else(|| bad(&format!("no column {} to sort by", k.column)))?;
            Ok(arrow_ord::sort::SortColumn {
                values: values.clone(),
                options: Some(arrow_schema::SortOptions {
                    descending: k.descending,
                    nulls_first: k.nulls_first,
                }),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let picks = arrow_ord::sort::lexsort_to_indices(&columns, None).map_err(|e| bad(&e))?;
    let picks = match order.limit.filter(|&k| k > 0 && k < picks.len()) {
        Some(limit) => {
            let compare = arrow_ord::sort::LexicographicalComparator::try_new(&columns)
                .map_err(|e| bad(&e))?;
            let end = tied_end(picks.values(), limit, |a, b| {
                compare.compare(a as usize, b as usize).is_eq()
            });
            picks.slice(0, end)
        }
        None => picks,
    };
    arrow_select::take::take_record_batch(batch, &picks).map_err(|e| bad(&e))
}

/// COUNT_GROUPS over a batch holding every group (a row of values may repeat, for groups
/// told apart by build rows): per distinct value of its first `keys` columns (in the order
/// they first occur), those values and the number of distinct values of column `keys`, nulls
/// left out (`count(DISTINCT x)` grouped by the leading columns), on `threads` threads.
pub(super) fn count_groups(
    batch: &RecordBatch,
    keys: usize,
    threads: usize,
    counters: &Counters,
) -> Result<RecordBatch> {
    let bad = |e: &dyn std::fmt::Display| Error::Offload {
        detail: format!("cannot count groups: {e}"),
    };
    let (leading, counted) = match batch.columns().get(..=keys) {
        Some(c) => (&c[..keys], &c[keys]),
        None => {
            return Err(bad(&format!(
                "{} columns, {keys} keys and the counted one",
                batch.num_columns()
            )))
        }
    };
    let converter = RowConverter::new(
        leading
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )
    .map_err(|e| bad(&e))?;
    let rows = converter.convert_columns(leading).map_err(|e| bad(&e))?;
    // The counted values as 64-bit integers where they are integers or dates (count(DISTINCT
    // ps_suppkey) in Q16): each part then sorts (group, value) pairs and counts the runs,
    // instead of hashing each value's row bytes into a set (two thirds of Q16's finishing
    // time in a profile at SF 10); other types keep the set of row bytes.
    let ints: Option<Vec<u64>> = integer_values(counted);
    let whole = match ints {
        Some(_) => None,
        None => Some(
            RowConverter::new(vec![SortField::new(counted.data_type().clone())])
                .and_then(|c| c.convert_columns(std::slice::from_ref(counted)))
                .map_err(|e| bad(&e))?,
        ),
    };
    // The rows split by a hash of their leading values, one part per lane, counted in
    // parallel (the lanes are done by now): a leading value's rows all fall in one part.
    let n = batch.num_rows();
    let parts = threads.clamp(1, 64);
    let hash = |bytes: &[u8]| {
        let mut h = MulHasher::default();
        h.write(bytes);
        h.finish()
    };
    let mut split: Vec<Vec<u32>> = vec![Vec::with_capacity(n / parts + 1); parts];
    for i in 0..n {
        split[(hash(rows.row(i).data()) % parts as u64) as usize].push(i as u32);
    }
    let count_part = |picks: &[u32]| {
        // Sized up front: growing the tables was a fifth of the count's time.
        let mut at: HashMap<&[u8], usize, BuildHasherDefault<MulHasher>> =
            HashMap::with_capacity_and_hasher(picks.len(), Default::default());
        let (mut first, mut counts): (Vec<u32>, Vec<i64>) = (Vec::new(), Vec::new());
        let mut group_of = |i: usize| {
            *at.entry(rows.row(i).data()).or_insert_with(|| {
                first.push(i as u32);
                counts.push(0);
                counts.len() - 1
            })
        };
        // Each group's count is one for each distinct value it holds: the groups of the pairs
        // or set entries that were new, counted once the group lookups are done.
        let mut hits: Vec<u32> = Vec::new();
        match (&ints, &whole) {
            (Some(values), _) => {
                let mut pairs: Vec<(u32, u64)> = Vec::with_capacity(picks.len());
                for &i in picks {
                    let i = i as usize;
                    let g = group_of(i);
                    if counted.is_valid(i) {
                        pairs.push((g as u32, values[i]));
                    }
                }
                pairs.sort_unstable();
                pairs.dedup();
                hits.extend(pairs.into_iter().map(|(g, _)| g));
            }
            (None, Some(whole)) => {
                let mut seen: std::collections::HashSet<
                    (usize, &[u8]),
                    BuildHasherDefault<MulHasher>,
                > = std::collections::HashSet::with_capacity_and_hasher(
                    picks.len(),
                    Default::default(),
                );
                for &i in picks {
                    let i = i as usize;
                    let g = group_of(i);
                    if counted.is_valid(i) && seen.insert((g, whole.row(i).data())) {
                        hits.push(g as u32);
                    }
                }
            }
            (None, None) => unreachable!("row bytes are made where the values are not integers"),
        }
        for g in hits {
            counts[g as usize] += 1;
        }
        (first, counts)
    };
    let counted_parts: Vec<(Vec<u32>, Vec<i64>)> = if parts == 1 {
        vec![count_part(&split[0])]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = split
                .iter()
                .map(|picks| {
                    scope.spawn(|| {
                        // The device's time, though not on a lane or the finisher.
                        let cpu = inpath_core::thread_cpu_seconds();
                        let part = count_part(picks);
                        let used = (inpath_core::thread_cpu_seconds() - cpu).max(0.0);
                        Counters::add(&counters.cpu_micros, (used * 1e6) as u64);
                        part
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().map_err(|_| bad(&"a counting thread failed")))
                .collect::<Result<Vec<_>>>()
        })?
    };
    let (mut first, mut counts) = (Vec::new(), Vec::new());
    for (f, c) in counted_parts {
        first.extend(f);
        counts.extend(c);
    }
    let picks = arrow_array::UInt32Array::from(first);
    let mut columns = Vec::with_capacity(keys + 1);
    let mut fields = Vec::with_capacity(keys + 1);
    for (c, f) in leading.iter().zip(batch.schema().fields()) {
        columns.push(arrow_select::take::take(c.as_ref(), &picks, None).map_err(|e| bad(&e))?);
        fields.push(f.clone());
    }
    columns.push(Arc::new(Int64Array::from(counts)) as ArrayRef);
    fields.push(Arc::new(Field::new("count", DataType::Int64, false)));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| bad(&e))
}

/// A column's values as 64-bit integers (nulls as 0; the caller skips them by validity) when
/// it holds signed or unsigned integers of up to 64 bits or dates: equal values give equal
/// integers and distinct ones distinct integers. None for other types.
fn integer_values(column: &ArrayRef) -> Option<Vec<u64>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    macro_rules! widen {
        ($t:ty) => {
            Some(
                column
                    .as_primitive::<$t>()
                    .values()
                    .iter()
                    .map(|&v| v as i64 as u64)
                    .collect(),
            )
        };
    }
    match column.data_type() {
        DataType::Int8 => widen!(Int8Type),
        DataType::Int16 => widen!(Int16Type),
        DataType::Int32 => widen!(Int32Type),
        DataType::Int64 => widen!(Int64Type),
        DataType::UInt8 => widen!(UInt8Type),
        DataType::UInt16 => widen!(UInt16Type),
        DataType::UInt32 => widen!(UInt32Type),
        DataType::UInt64 => Some(column.as_primitive::<UInt64Type>().values().to_vec()),
        DataType::Date32 => widen!(Date32Type),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, StringArray};
    use rand::{Rng, SeedableRng};

    /// Counting integers by sorting pairs gives the counts of counting their row bytes in a
    /// set (the same values as strings), for any threads, with nulls and repeats.
    #[test]
    fn integer_counts_equal_the_row_bytes_counts() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(55);
        for rows in [0usize, 1, 7, 1000, 20_000] {
            let keys: Vec<String> = (0..rows)
                .map(|_| format!("k{}", rng.gen_range(0..50)))
                .collect();
            let values: Vec<Option<i32>> = (0..rows)
                .map(|_| rng.gen_bool(0.9).then(|| rng.gen_range(-30..30)))
                .collect();
            let schema = |t: DataType| {
                Arc::new(Schema::new(vec![
                    Field::new("k", DataType::Utf8, false),
                    Field::new("v", t, true),
                ]))
            };
            let ints = RecordBatch::try_new(
                schema(DataType::Int32),
                vec![
                    Arc::new(StringArray::from(keys.clone())) as ArrayRef,
                    Arc::new(Int32Array::from(values.clone())),
                ],
            )
            .unwrap();
            let texts = RecordBatch::try_new(
                schema(DataType::Utf8),
                vec![
                    Arc::new(StringArray::from(keys)) as ArrayRef,
                    Arc::new(StringArray::from(
                        values
                            .iter()
                            .map(|v| v.map(|v| v.to_string()))
                            .collect::<Vec<_>>(),
                    )),
                ],
            )
            .unwrap();
            for threads in [1, 2, 3] {
                let c = Counters::default();
                let a = count_groups(&ints, 1, threads, &c).unwrap();
                let b = count_groups(&texts, 1, threads, &c).unwrap();
                assert_eq!(a, b, "{rows} rows, {threads} threads");
                let total: i64 = a
                    .column(1)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .iter()
                    .sum();
                // Against a reference: the distinct (key, value) pairs with a value.
                let mut pairs = std::collections::BTreeSet::new();
                let k = ints
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .unwrap();
                let v = ints
                    .column(1)
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .unwrap();
                for i in 0..rows {
                    if v.is_valid(i) {
                        pairs.insert((k.value(i).to_string(), v.value(i)));
                    }
                }
                assert_eq!(total as usize, pairs.len(), "{rows} rows");
            }
        }
    }
}
