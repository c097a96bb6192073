//! Graphs run in key-range passes when the rows they hold outgrow the device's memory (see
//! [`crate::graph::partition`]): a driver thread tries the graph whole, and on a memory
//! decline runs it again as restricted copies, one key range at a time, splitting a range in
//! two whenever its pass declines too. The passes' rows are combined into what the whole
//! graph would have sent: partial groups and unordered rows as they come, groups the device
//! must finish (ordered, counted or sent whole) merged by their values across the passes
//! first, in spill files when they outgrow a share of the memory.

use super::combine::merge_by_keys;
use super::finish::{count_groups, ordered_rows};
use super::spill::SpillFiles;
use super::stats::Counters;
use super::stream::{output_schema, DeviceStream};
use super::LocalDevice;
use crate::graph::partition::split;
use crate::graph::{Agg, CountGroups, Operator, Order, Partitioning, TaskGraph};
use arrow_array::RecordBatch;
use arrow_row::{RowConverter, SortField};
use arrow_schema::SchemaRef;
use inpath_table::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;

use super::spill::SpillTo;

/// The most passes one graph may be split into.
const MAX_PASSES: usize = 4096;
/// Buckets of the spill files that groups merged across passes go to.
const SPILL_BUCKETS: usize = 16;

/// Passes for a graph that needed `ratio` times its memory: a quarter more than that, at
/// least 2 (a ratio of 0 is unknown), at most 64 at a time.
fn passes_for(ratio: f64) -> usize {
    ((ratio * 1.25).ceil() as usize).clamp(2, 64)
}

/// Whether `e` is a decline for memory that passes may avoid.
fn for_memory(e: &Error) -> bool {
    matches!(e, Error::DeviceDeclined { memory: true, .. })
}

/// What becomes of the passes' rows.
enum Combine {
    /// Sent as they come: partial groups the host's Final aggregate merges, or rows.
    Stream,
    /// Rows collected from every pass, then ordered and cut by the last task's order.
    Rows(Order),
    /// Groups collected from every pass, merged by their values, then counted and ordered:
    /// what the device sends as the SQL's whole groups.
    Groups {
        keys: usize,
        aggs: Vec<Agg>,
        count: Option<CountGroups>,
        order: Option<Order>,
    },
}

/// How `graph`'s passes combine, and the graph each pass runs (its last task's order,
/// counting and whole groups left to the combining).
fn combine_for(graph: &TaskGraph) -> (Combine, TaskGraph) {
    let mut pass = graph.clone();
    let Some(task) = pass.tasks.last_mut() else {
        return (Combine::Stream, pass);
    };
    let combine = match &task.operator {
        Operator::Nop => match &task.order {
            Some(order) => Combine::Rows(order.clone()),
            None => Combine::Stream,
        },
        Operator::Aggregate { .. } => Combine::Stream,
        Operator::AggregateGroupBy { keys, aggs } => {
            if task.order.is_none() && task.count_groups.is_none() && !task.whole_groups {
                Combine::Stream
            } else {
                let c = Combine::Groups {
                    keys: keys.len(),
                    aggs: aggs.clone(),
                    count: task.count_groups,
                    order: task.order.take(),
                };
                task.count_groups = None;
                task.whole_groups = false;
                c
            }
        }
    };
    (combine, pass)
}

impl LocalDevice {
    /// Spills (groups merged across key-range passes that outgrow a quarter of the memory)
    /// under `dir` (none: the system's temporary directory), sealed as its most protected
    /// table is ([`SpillTo::for_tables`]).
    pub fn with_spill_dir(mut self, dir: Option<std::path::PathBuf>) -> LocalDevice {
        self.spill = Arc::new(SpillTo::for_tables(
            dir,
            self.tables.values().map(|t| t.as_ref()),
        ));
        self
    }

    /// The way to split `graph` into passes that restricts the most rows of build tables (or,
    /// over a key the last task groups by, of its own table: each pass then holds its range's
    /// groups alone), if any does: every restricted column must hold the same kind of value
    /// as the key.
    pub(super) fn partitioning(&self, graph: &TaskGraph) -> Option<Partitioning> {
        let kind = |t: usize, c: usize| -> Option<(u8, i8)> {
            let reader = self.tables.get(&graph.tasks.get(t)?.table)?;
            super::reduce::key_kind(reader.manifest().columns.get(c)?.logical)
        };
        let last = graph.tasks.len().checked_sub(1)?;
        Partitioning::candidates(graph)
            .into_iter()
            .filter_map(|mut p| {
                let want = kind(last, p.key)?;
                let mut rows = match p.groups_by_key(graph) {
                    true => self.tables.get(&graph.tasks[last].table)?.row_count(),
                    false => 0,
                };
                for (t, r) in p.restrict.iter_mut().enumerate().take(last) {
                    match *r {
                        Some(c) if kind(t, c) == Some(want) => {
                            rows += self.tables.get(&graph.tasks[t].table)?.row_count();
                        }
                        _ => *r = None,
                    }
                }
                (rows > 0).then_some((rows, p))
            })
            .max_by_key(|(rows, p)| (*rows, std::cmp::Reverse(p.key)))
            .map(|(_, p)| p)
    }

    /// What [`Device::passes_plan`](super::Device::passes_plan) tells of `graph`.
    pub(super) fn plan_passes(&self, graph: &TaskGraph) -> Option<super::PassesPlan> {
        let parting = self.partitioning(graph)?;
        let name = |t: usize, c: usize| -> Option<String> {
            let table = &graph.tasks.get(t)?.table;
            let reader = self.tables.get(table)?;
            Some(format!("{table}.{}", reader.schema().field(c).name()))
        };
        let last = graph.tasks.len() - 1;
        let mut held = 0u64;
        for task in &graph.tasks[..last] {
            let reader = self.tables.get(&task.table)?;
            let pages = super::prepare::pruned_pages(task, reader).ok()?.len();
            let rows = (pages as u64 * reader.rows_per_page() as u64).min(reader.row_count());
            let width = match task.operator {
                Operator::Nop => task.keep.len() as u64 * 4 + 8,
                _ => task.output.fields.len() as u64 * 8 + 40,
            };
            held += rows * width;
        }
        let restricts = parting
            .restrict
            .iter()
            .enumerate()
            .take(last)
            .filter_map(|(t, c)| name(t, (*c)?))
            .collect();
        Some(super::PassesPlan {
            key: name(last, parting.key)?,
            restricts,
            held_at_most: held,
            memory: self.memory_budget,
            passes_at_most: match held > self.memory_budget {
                true => passes_for(held as f64 / self.memory_budget.max(1) as f64),
                false => 1,
            },
        })
    }

    /// `graph` run by a driver thread: whole first (unless it ran in passes before), then in
    /// key-range passes if its held rows outgrow the memory. The stream's rows are the whole
    /// graph's either way.
    ///
    /// With `whole_only` (the name its whole attempt is remembered by), only the whole attempt
    /// runs: a decline for memory is sent on, with what the passes would start from noted for
    /// a later run of the same graph in passes.
    pub(super) fn passes(
        &self,
        graph: TaskGraph,
        parting: Partitioning,
        text: Arc<String>,
        whole_only: Option<Arc<String>>,
    ) -> DeviceStream {
        let (tx, rx) = sync_channel(2 * self.lanes);
        let stream = DeviceStream::new(rx, None);
        let cancel = stream.cancel.clone();
        let device = self.clone();
        let spawned = std::thread::Builder::new()
            .name("inpath-device-passes".into())
            .spawn({
                let tx = tx.clone();
                move || {
                    super::run::failing_loudly(&tx.clone(), "the device's passes", move || {
                        device.drive(&graph, &parting, &text, whole_only.as_ref(), &tx, &cancel)
                    })
                }
            });
        if let Err(e) = spawned {
            let _ = tx.send(Err(Error::Offload {
                detail: format!("cannot start the device's passes: {e}"),
            }));
        }
        stream
    }

    fn drive(
        &self,
        graph: &TaskGraph,
        parting: &Partitioning,
        text: &Arc<String>,
        whole_only: Option<&Arc<String>>,
        tx: &SyncSender<Result<RecordBatch>>,
        cancel: &AtomicBool,
    ) {
        let known = self
            .passes_known
            .lock()
            .ok()
            .and_then(|k| k.get(text.as_ref()).copied());
        let noted = match whole_only {
            Some(_) => None,
            None => self
                .whole_declined
                .lock()
                .ok()
                .and_then(|k| k.get(text.as_ref()).copied()),
        };
        let mut first_passes = known.or(noted.map(|n| n.0)).unwrap_or(2);
        // How many times its memory the whole graph needed (0: unknown).
        let mut whole = noted.map_or(0.0, |n| n.1);
        // Declined whole for memory, alone: noted, and the decline goes to the caller.
        let declined_whole = |e: Error, whole: f64| {
            let name = whole_only.expect("only alone");
            if let Ok(mut k) = self.whole_declined.lock() {
                k.insert(text.as_ref().clone(), (passes_for(whole), whole));
            }
            self.refused(&e, name);
            let _ = tx.send(Err(e));
        };
        if known.is_none() && noted.is_none() {
            self.counters.take_overflow();
            match self.start(graph, None) {
                Err(e) if for_memory(&e) && whole_only.is_some() => {
                    return declined_whole(e, self.counters.take_overflow());
                }
                Err(e) if for_memory(&e) => {
                    whole = self.counters.take_overflow();
                    first_passes = passes_for(whole);
                }
                Err(e) => {
                    self.refused(&e, text);
                    let _ = tx.send(Err(e));
                    return;
                }
                Ok(mut stream) => match stream.next() {
                    Some(Err(e)) if for_memory(&e) && whole_only.is_some() => {
                        drop(stream);
                        return declined_whole(e, self.counters.take_overflow());
                    }
                    Some(Err(e)) if for_memory(&e) => {
                        drop(stream);
                        whole = self.counters.take_overflow();
                        first_passes = passes_for(whole);
                    }
                    first => {
                        if let Some(Err(e)) = &first {
                            self.refused(e, text);
                        }
                        // Dropping the graph's stream (once the consumer cancels or goes)
                        // stops its lanes.
                        for item in first.into_iter().chain(stream) {
                            if cancel.load(Ordering::Relaxed) || tx.send(item).is_err() {
                                return;
                            }
                        }
                        return;
                    }
                },
            }
        }
        Counters::add(&self.counters.graphs_partitioned, 1);
        let mut sent = false;
        match self.run_passes(graph, parting, first_passes, whole, tx, cancel, &mut sent) {
            Ok(Some(n)) => {
                if let Ok(mut k) = self.passes_known.lock() {
                    k.insert(text.as_ref().clone(), n);
                }
            }
            Ok(None) => {}
            Err(e) => {
                // Once rows went out, the host can no longer run the plan instead.
                let e = match e {
                    Error::DeviceDeclined { detail, .. } if sent => Error::Offload {
                        detail: format!("a pass declined after earlier passes sent rows: {detail}"),
                    },
                    e => e,
                };
                self.refused(&e, text);
                let _ = tx.send(Err(e));
            }
        }
    }

    /// A decline of the graph `text` is counted as a refusal and remembered: the same graph
    /// is declined at once from then on.
    fn refused(&self, e: &Error, text: &Arc<String>) {
        if matches!(e, Error::DeviceDeclined { .. }) {
            Counters::add(&self.counters.graphs_refused, 1);
            if let Ok(mut d) = self.declined.lock() {
                d.insert(text.as_ref().clone());
            }
        }
    }

    /// Runs the passes, starting from `n` of them; the passes run (`None`: the consumer went
    /// away). `sent` is set once a row has gone out. `whole` is how many times its memory the
    /// whole graph needed (0: unknown): a pass over at most half the key's pages that still
    /// needs most of that shows the rows that outgrow the memory are not restricted by the
    /// key (a build no range reaches), and the device declines rather than split further.
    #[allow(clippy::too_many_arguments)]
    fn run_passes(
        &self,
        graph: &TaskGraph,
        parting: &Partitioning,
        n: usize,
        whole: f64,
        tx: &SyncSender<Result<RecordBatch>>,
        cancel: &AtomicBool,
        sent: &mut bool,
    ) -> Result<Option<usize>> {
        let last = graph.tasks.len() - 1;
        let (combine, pass_graph) = combine_for(graph);
        let reader = self.reader(&graph.tasks[last].table)?;
        let mut zones = Vec::with_capacity(reader.page_count());
        for page in 0..reader.page_count() {
            let z = reader.zone_map(parting.key, page)?;
            if let (
                Some(inpath_table::format::Scalar::Int(lo)),
                Some(inpath_table::format::Scalar::Int(hi)),
            ) = (&z.min, &z.max)
            {
                zones.push((*lo, *hi));
            }
        }
        let cuts = split(&zones, None, None, n);
        let mut ranges: Vec<(Option<i128>, Option<i128>)> = Vec::with_capacity(cuts.len() + 1);
        let mut lo = None;
        for &c in &cuts {
            ranges.push((lo, Some(c)));
            lo = Some(c);
        }
        ranges.push((lo, None));
        ranges.reverse();
        let schema = output_schema(&graph.tasks[last])?;
        let mut collected = Collected::new(self, &combine, schema.clone());
        let mut done = 0usize;
        'ranges: while let Some((lo, hi)) = ranges.pop() {
            if cancel.load(Ordering::Relaxed) {
                return Ok(None);
            }
            // A pass that declined: its range in as many parts as it needed its memory.
            let mut split_range = |counters: &Counters| -> Result<()> {
                let ratio = counters.take_overflow();
                let share = zones
                    .iter()
                    .filter(|z| lo.is_none_or(|l| z.1 >= l) && hi.is_none_or(|h| z.0 < h))
                    .count() as f64
                    / zones.len().max(1) as f64;
                if whole > 0.0 && share <= 0.5 && ratio >= 0.8 * whole {
                    return Err(Error::DeviceDeclined {
                        memory: true,
                        detail: format!(
                            "a pass over {:.0} % of {}'s key range still needs {ratio:.1} times \
                             the device's memory (the whole graph {whole:.1}): what outgrows it \
                             is not restricted by the key",
                            share * 100.0,
                            graph.tasks[last].table
                        ),
                    });
                }
                let cuts = split(&zones, lo, hi, passes_for(ratio));
                if done + ranges.len() + cuts.len() + 1 > MAX_PASSES {
                    return Err(Error::DeviceDeclined {
                        memory: true,
                        detail: format!("more than {MAX_PASSES} key-range passes would be needed"),
                    });
                }
                if cuts.is_empty() {
                    return Err(Error::DeviceDeclined {
                        memory: true,
                        detail: format!(
                            "the rows of one value of {}'s column {} outgrow the device's memory",
                            graph.tasks[last].table, parting.key
                        ),
                    });
                }
                let mut upper = hi;
                for &c in cuts.iter().rev() {
                    ranges.push((Some(c), upper));
                    upper = Some(c);
                }
                ranges.push((lo, upper));
                Ok(())
            };
            self.counters.take_overflow();
            Counters::add(&self.counters.passes, 1);
            let pass = parting.restricted(&pass_graph, lo, hi);
            let stream = match self.start(&pass, None) {
                Ok(s) => s,
                Err(e) if for_memory(&e) => {
                    split_range(&self.counters)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut first = true;
            for item in stream {
                if cancel.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                match item {
                    Err(e) if first && for_memory(&e) => {
                        collected.drop_pass();
                        split_range(&self.counters)?;
                        continue 'ranges;
                    }
                    Err(e) => return Err(e),
                    Ok(batch) => {
                        first = false;
                        match &combine {
                            Combine::Stream => {
                                if tx.send(Ok(batch)).is_err() {
                                    return Ok(None);
                                }
                                *sent = true;
                            }
                            _ => collected.push(batch)?,
                        }
                    }
                }
            }
            collected.end_pass()?;
            done += 1;
        }
        if let Some(batch) = collected.finish(&combine, self.lanes)? {
            if batch.num_rows() > 0 || !matches!(combine, Combine::Groups { .. }) {
                Counters::add(
                    &self.counters.bytes_sent,
                    batch.get_array_memory_size() as u64,
                );
                if tx.send(Ok(batch)).is_err() {
                    return Ok(None);
                }
                *sent = true;
            }
        }
        Ok(Some(done))
    }
}

/// The passes' rows held for combining: in memory up to a quarter of the device's memory,
/// then in spill files, split into buckets by a hash of the keys that decide a row's group.
struct Collected<'a> {
    device: &'a LocalDevice,
    schema: SchemaRef,
    /// The leading columns a row's bucket is chosen by.
    hash_keys: usize,
    batches: Vec<RecordBatch>,
    /// Of `batches`, those of the pass running now (dropped if it declines).
    this_pass: usize,
    held: u64,
    limit: u64,
    spill: Option<SpillFiles>,
}

impl<'a> Collected<'a> {
    fn new(device: &'a LocalDevice, combine: &Combine, schema: SchemaRef) -> Collected<'a> {
        let hash_keys = match combine {
            Combine::Groups { count: Some(c), .. } => c.keys,
            Combine::Groups { keys, .. } => *keys,
            _ => 0,
        };
        Collected {
            device,
            schema,
            hash_keys,
            batches: Vec::new(),
            this_pass: 0,
            held: 0,
            limit: device.memory_budget / 4,
            spill: None,
        }
    }

    fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = batch.get_array_memory_size() as u64;
        self.device.counters.hold(bytes);
        self.held += bytes;
        self.batches.push(batch);
        self.this_pass += 1;
        // Groups beyond the share go to the spill files, bucketed; so do the ones held, once
        // the pass is over (a pass that declines drops its own).
        if self.held > self.limit && self.hash_keys > 0 && self.spill.is_none() {
            self.spill = Some(SpillFiles::create(&self.device.spill, SPILL_BUCKETS)?);
        }
        Ok(())
    }

    /// The pass running now declined: its batches are dropped.
    fn drop_pass(&mut self) {
        let keep = self.batches.len() - self.this_pass;
        for b in self.batches.drain(keep..) {
            let bytes = b.get_array_memory_size() as u64;
            self.device.counters.release(bytes);
            self.held -= bytes;
        }
        self.this_pass = 0;
    }

    /// The pass ended: its batches stay; with spill files, every held batch goes to them.
    fn end_pass(&mut self) -> Result<()> {
        self.this_pass = 0;
        self.spill_held()
    }

    /// Writes every held batch to the spill files, bucketed.
    fn spill_held(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        for batch in std::mem::take(&mut self.batches) {
            for (bucket, part) in buckets(&batch, self.hash_keys, SPILL_BUCKETS)? {
                spill.write(bucket, &part, &self.device.counters)?;
            }
        }
        self.device.counters.release(self.held);
        self.held = 0;
        Ok(())
    }

    /// What the passes' rows combine into (none: nothing to send).
    fn finish(mut self, combine: &Combine, lanes: usize) -> Result<Option<RecordBatch>> {
        let counters = &self.device.counters;
        let out =
            match combine {
                Combine::Stream => None,
                Combine::Rows(order) => {
                    let all = arrow_select::concat::concat_batches(&self.schema, &self.batches)
                        .map_err(|e| Error::Offload {
                            detail: format!("combining the passes' rows: {e}"),
                        })?;
                    Some(ordered_rows(&all, order)?)
                }
                Combine::Groups {
                    keys,
                    aggs,
                    count,
                    order,
                } => {
                    self.spill_held()?;
                    let finish_part = |batches: &[RecordBatch]| -> Result<Option<RecordBatch>> {
                        if batches.iter().all(|b| b.num_rows() == 0) {
                            return Ok(None);
                        }
                        let merged = merge_by_keys(batches, &self.schema, *keys, aggs)?;
                        Ok(Some(match count {
                            Some(c) => count_groups(&merged, c.keys, lanes, counters)?,
                            None => merged,
                        }))
                    };
                    let mut parts = Vec::new();
                    match self.spill.as_mut() {
                        None => parts.extend(finish_part(&self.batches)?),
                        Some(spill) => {
                            for bucket in 0..SPILL_BUCKETS {
                                let batches = spill.read(bucket)?;
                                if let Some(mut part) = finish_part(&batches)? {
                                    // Only what can be among the first rows stays.
                                    if let Some(o) = order.as_ref().filter(|o| o.limit.is_some()) {
                                        part = ordered_rows(&part, o)?;
                                    }
                                    parts.push(part);
                                }
                            }
                        }
                    }
                    let Some(first) = parts.first() else {
                        return Ok(None);
                    };
                    let all = arrow_select::concat::concat_batches(&first.schema(), &parts)
                        .map_err(|e| Error::Offload {
                            detail: format!("combining the passes' groups: {e}"),
                        })?;
                    Some(match order {
                        Some(o) => ordered_rows(&all, o)?,
                        None => all,
                    })
                }
            };
        counters.release(self.held);
        self.held = 0;
        Ok(out)
    }
}

impl Drop for Collected<'_> {
    fn drop(&mut self) {
        self.device.counters.release(self.held);
    }
}

/// `batch`'s rows split by a hash of their first `keys` columns into `n` buckets: the
/// non-empty ones.
fn buckets(batch: &RecordBatch, keys: usize, n: usize) -> Result<Vec<(usize, RecordBatch)>> {
    let bad = |e: arrow_schema::ArrowError| Error::Offload {
        detail: format!("bucketing groups to spill: {e}"),
    };
    let columns = &batch.columns()[..keys.min(batch.num_columns())];
    let converter = RowConverter::new(
        columns
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )
    .map_err(bad)?;
    let rows = converter.convert_columns(columns).map_err(bad)?;
    let mut picks: Vec<Vec<u32>> = vec![Vec::new(); n];
    for i in 0..batch.num_rows() {
        let mut h = super::groups::MulHasher::default();
        std::hash::Hasher::write(&mut h, rows.row(i).data());
        picks[(std::hash::Hasher::finish(&h) % n as u64) as usize].push(i as u32);
    }
    picks
        .into_iter()
        .enumerate()
        .filter(|(_, p)| !p.is_empty())
        .map(|(b, p)| {
            let idx = arrow_array::UInt32Array::from(p);
            Ok((
                b,
                arrow_select::take::take_record_batch(batch, &idx).map_err(bad)?,
            ))
        })
        .collect()
}
