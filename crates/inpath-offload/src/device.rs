//! The device: where Table Tasks run, beside the pages. [`LocalDevice`] runs them on its own
//! threads (lanes) within its own memory budget and counts what it did, so that the host's
//! share of a query's work can be told apart from the device's.

use crate::arch;
use crate::graph::{
    Agg, AggFunc, CmpOp, Comparator, GroupKey, MaskSource, Op, Operator, Order, SortKey, Source,
    TableTask, TaskGraph, Test,
};
use crate::join::{
    encode_residual, pack_keys, read_places, residual_first, Built, Ints, Kept, Places,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array,
    Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use arrow_row::{Row, RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use inpath_table::error::{Error, Result};
use inpath_table::format::LogicalType;
use inpath_table::reader::TableReader;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

/// Device memory per TPC-H scale factor 1 by default: the thesis's 40 MiB per SF 1 ratio
/// (reference 001, part II), as bytes.
pub const DEFAULT_MEMORY_PER_SF: u64 = 40 << 20;

/// A place Table Task graphs run.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Starts a graph; its last task's rows come back through the stream.
    fn submit(&self, graph: &TaskGraph) -> Result<DeviceStream>;
    /// What the device did since it was made or last reset.
    fn stats(&self) -> DeviceStats;
    /// Sets the counts to zero.
    fn reset_stats(&self);
    /// The memory the device may hold, in bytes.
    fn memory_budget(&self) -> u64;
    /// Whether the device's lanes run in the host's process (their CPU time is then part of
    /// the process's own, and the host's share is the process's less the lanes').
    fn in_host_process(&self) -> bool {
        true
    }
}

/// What a device did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Graphs run.
    pub graphs: u64,
    /// Pages whose columns were read.
    pub pages_read: u64,
    /// Pages skipped: pruned by zone maps, or read only as far as the selector and holding no
    /// selected row.
    pub pages_skipped: u64,
    /// Bytes of the page records read (what flash would have sent to the device).
    pub bytes_read: u64,
    /// Bytes handed to the host (Arrow buffers of the emitted batches).
    pub bytes_sent: u64,
    /// Rows the selectors kept.
    pub rows_selected: u64,
    /// CPU seconds the device's lanes used.
    pub cpu_seconds: f64,
    /// The most memory the device held at once (pages, registers, group tables).
    pub peak_memory: u64,
    /// Groups emitted early because the group table reached the memory budget.
    pub groups_spilled: u64,
    /// Rows build tasks kept on the device for joins.
    pub rows_kept: u64,
    /// Joins run, by method: positional lookup, streaming merge of sorted inputs, and merge
    /// after a radix sort.
    pub joins_positional: u64,
    /// See `joins_positional`.
    pub joins_merge: u64,
    /// See `joins_positional`.
    pub joins_sort_merge: u64,
    /// Graphs refused because their build rows outgrew the memory budget (the host ran them).
    pub graphs_refused: u64,
    /// Groups TOPK left on the device (they could not be among the first k).
    pub groups_cut: u64,
    /// A device in a process of its own ([`ProcessDevice`](super::ProcessDevice)): that
    /// process's peak resident set in bytes (its VmHWM). 0 for a device in the host's process,
    /// whose memory is the host's.
    #[serde(default)]
    pub process_peak_rss: u64,
}

#[derive(Debug, Default)]
struct Counters {
    graphs: AtomicU64,
    pages_read: AtomicU64,
    pages_skipped: AtomicU64,
    bytes_read: AtomicU64,
    bytes_sent: AtomicU64,
    rows_selected: AtomicU64,
    cpu_micros: AtomicU64,
    memory: AtomicU64,
    peak_memory: AtomicU64,
    groups_spilled: AtomicU64,
    rows_kept: AtomicU64,
    joins_positional: AtomicU64,
    joins_merge: AtomicU64,
    joins_sort_merge: AtomicU64,
    graphs_refused: AtomicU64,
    groups_cut: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn hold(&self, bytes: u64) {
        let now = self.memory.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_memory.fetch_max(now, Ordering::Relaxed);
    }

    fn release(&self, bytes: u64) {
        self.memory.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The device built into inpath: lanes on threads of their own, a memory budget, counters.
#[derive(Debug)]
pub struct LocalDevice {
    tables: HashMap<String, Arc<TableReader>>,
    lanes: usize,
    memory_budget: u64,
    counters: Arc<Counters>,
    /// Graphs this device declined for memory (as JSON): declined again at once, before any
    /// build runs, so a repeated query pays for the attempt only once.
    declined: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl LocalDevice {
    /// A device over every table under `dir` (named as a SQL session over `dir` names them,
    /// see [`inpath_table::table_dirs`]), with `lanes` lanes and `memory_budget` bytes: what
    /// `inpath query serve-device` serves.
    pub fn open(
        dir: &std::path::Path,
        keys: &inpath_seal::KeyRing,
        lanes: usize,
        memory_budget: u64,
    ) -> Result<LocalDevice> {
        let tables = inpath_table::open_table_dirs(dir, keys)?
            .into_iter()
            .map(|(name, reader)| (name, Arc::new(reader.with_dictionary_arrays())))
            .collect();
        LocalDevice::new(tables, lanes, memory_budget)
    }

    /// A device over `tables` (by name) with `lanes` threads and `memory_budget` bytes.
    pub fn new(
        tables: HashMap<String, Arc<TableReader>>,
        lanes: usize,
        memory_budget: u64,
    ) -> Result<LocalDevice> {
        if lanes == 0 || lanes > 1024 {
            return Err(Error::parameter("device lanes", lanes, "1 to 1024"));
        }
        if memory_budget < (64 << 10) {
            return Err(Error::parameter(
                "device memory",
                memory_budget,
                "at least 65536 bytes",
            ));
        }
        Ok(LocalDevice {
            tables,
            lanes,
            memory_budget,
            counters: Arc::new(Counters::default()),
            declined: Default::default(),
        })
    }

    /// The lanes.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// The table registered under `name`.
    pub fn table(&self, name: &str) -> Option<&Arc<TableReader>> {
        self.tables.get(name)
    }

    fn reader(&self, name: &str) -> Result<Arc<TableReader>> {
        self.tables
            .get(name)
            .cloned()
            .ok_or_else(|| Error::Offload {
                detail: format!("the device holds no table {name:?}"),
            })
    }

    /// Runs a build (NOP) task on every lane and indexes its kept rows by `key`.
    fn build(
        &self,
        task: &TableTask,
        built: &[Option<Arc<Built>>],
        join: &crate::graph::Join,
        reserve: u64,
    ) -> Result<Built> {
        let (keys, method) = (&join.build_keys, join.method);
        // A residual condition reads the build rows' values: no presence bitmap then.
        let presence_only = join.kind != crate::graph::JoinKind::Inner && join.residual.is_none();
        let builds = join_builds(task, built)?;
        let held: u64 = built.iter().flatten().map(|b| b.bytes()).sum();
        let reader = self.reader(&task.table)?;
        let schema = Arc::new(Schema::empty());
        let mut plan = Prepared::new(reader, task.clone(), schema, builds)?;
        // A semi or anti join needs each key once: lanes drop a row whose keys repeat the
        // row before (a table in key order keeps one row per key). With a residual
        // condition, one row per run of equal keys, summarizing the run's values.
        plan.distinct = presence_only;
        if let Some(r) = &join.residual {
            if !plan.origins.is_empty() || !plan.keep_as.iter().all(|k| matches!(k, KeepAs::Int(_)))
            {
                return Err(Error::DeviceDeclined {
                    detail: format!(
                        "a residual join condition on columns of {} not kept by value",
                        task.table
                    ),
                });
            }
            plan.summarize = Some(r.build);
        }
        let budget = self.memory_budget.saturating_sub(held + reserve);
        type Part = (Vec<Ints>, Vec<Vec<u64>>);
        let parts: Vec<Result<Part>> = self.on_lanes(&plan, budget, |lane| {
            (
                std::mem::take(&mut lane.kept_ints),
                std::mem::take(&mut lane.kept_places),
            )
        })?;
        // The lanes' rows in lane order: pages in table order.
        let mut ints: Vec<Ints> = vec![Ints::default(); task.keep.len()];
        let mut places: Vec<Vec<u64>> = vec![Vec::new(); plan.origins.len()];
        for lane in parts {
            let (i, p) = lane?;
            for (all, part) in ints.iter_mut().zip(i) {
                all.append(part);
            }
            for (all, part) in places.iter_mut().zip(p) {
                all.extend(part);
            }
        }
        let columns: Vec<Kept> = plan
            .keep_as
            .iter()
            .zip(ints)
            .map(|(how, values)| match *how {
                KeepAs::Int(_) => Kept::Int(values),
                KeepAs::Late { origin, column } => Kept::Late {
                    column,
                    places: origin,
                },
            })
            .collect();
        let places: Vec<Places> = plan
            .origins
            .iter()
            .zip(places)
            .map(|(o, rows)| Places {
                reader: plan.origin_reader(*o),
                rows,
            })
            .collect();
        let b = Built::within(columns, places, keys, method, presence_only, budget)?;
        Counters::add(&self.counters.rows_kept, b.len() as u64);
        if b.bytes() > budget {
            return Err(Error::DeviceDeclined {
                detail: format!(
                    "the {} rows table {} keeps for a join take {} KiB; the device has {} KiB \
                     left of {} KiB ({} KiB kept for the last task's pages)",
                    b.len(),
                    task.table,
                    b.bytes().div_ceil(1024),
                    budget >> 10,
                    self.memory_budget >> 10,
                    reserve >> 10
                ),
            });
        }
        Ok(b)
    }

    /// Runs a build task's plan on every lane over its pages (after zone maps), `budget`
    /// bytes shared among the lanes; `take` collects what each lane holds at its end, in lane
    /// order (pages in table order).
    fn on_lanes<T: Send>(
        &self,
        plan: &Prepared,
        budget: u64,
        take: impl Fn(&mut Lane) -> T + Sync,
    ) -> Result<Vec<Result<T>>> {
        let pages = plan.pruned_pages()?;
        let total = plan.reader.page_count() as u64;
        Counters::add(&self.counters.pages_skipped, total - pages.len() as u64);
        let lanes = self.lanes.min(pages.len()).max(1);
        let lane_budget = budget / lanes as u64;
        let runs = lane_runs(&pages, lanes);
        let never = AtomicBool::new(false);
        Ok(std::thread::scope(|scope| {
            let handles: Vec<_> = runs
                .into_iter()
                .map(|run| {
                    let (counters, never, take) = (&*self.counters, &never, &take);
                    scope.spawn(move || {
                        let cpu = inpath_core::thread_cpu_seconds();
                        let mut lane = Lane::new(plan, counters, lane_budget);
                        let result = lane.run(&LanePages::Run(run.to_vec()), never, &mut |_| true);
                        let held = take(&mut lane);
                        lane.release();
                        let used = (inpath_core::thread_cpu_seconds() - cpu).max(0.0);
                        Counters::add(&counters.cpu_micros, (used * 1e6) as u64);
                        result.map(|()| held)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::Offload {
                            detail: "a device lane failed".into(),
                        })
                    })
                })
                .collect()
        }))
    }

    /// Runs a build task that aggregates by group on every lane, merges the lanes' groups
    /// into the SQL's groups and indexes them, as rows (keys, then values), by `key`. Every
    /// column must be an integer without nulls; groups that outgrow a lane decline.
    fn build_groups(
        &self,
        task: &TableTask,
        built: &[Option<Arc<Built>>],
        join: &crate::graph::Join,
        reserve: u64,
    ) -> Result<Built> {
        let declined = |detail: String| Error::DeviceDeclined { detail };
        if join.residual.is_some() {
            return Err(declined(format!(
                "a residual condition on the groups of {}",
                task.table
            )));
        }
        let builds = join_builds(task, built)?;
        let held: u64 = built.iter().flatten().map(|b| b.bytes()).sum();
        let reader = self.reader(&task.table)?;
        let schema = output_schema(task)?;
        let mut plan = Prepared::new(reader, task.clone(), schema, builds)?;
        plan.hold_groups = true;
        let budget = self.memory_budget.saturating_sub(held + reserve);
        let parts = self.on_lanes(&plan, budget, |lane| {
            std::mem::replace(&mut lane.groups, Groups::new(0, 0))
        })?;
        let tables = parts.into_iter().collect::<Result<Vec<Groups>>>()?;
        let group_bytes: u64 = tables.iter().map(Groups::bytes).sum();
        self.counters.hold(group_bytes);
        let rows = (|| {
            let Some(groups) = Groups::merged(tables, plan.aggs()) else {
                return Ok(None);
            };
            let groups = plan.regroup(groups)?;
            plan.emit_groups(&groups).map(Some)
        })();
        self.counters.release(group_bytes);
        let width = task.output.fields.len();
        let columns: Vec<Kept> = match rows? {
            None => (0..width).map(|_| Kept::Int(Ints::default())).collect(),
            Some(batch) => batch
                .columns()
                .iter()
                .zip(batch.schema().fields())
                .map(|(a, f)| {
                    let values = integers(a).ok_or_else(|| {
                        declined(format!(
                            "group column {} of {} ({}) kept for a join: only integers \
                             without nulls within 64 bits are",
                            f.name(),
                            task.table,
                            f.data_type()
                        ))
                    })?;
                    Ok(Kept::Int(Ints::from(values)))
                })
                .collect::<Result<_>>()?,
        };
        let b = Built::within(
            columns,
            Vec::new(),
            &join.build_keys,
            join.method,
            join.kind != crate::graph::JoinKind::Inner,
            budget,
        )?;
        Counters::add(&self.counters.rows_kept, b.len() as u64);
        if b.bytes() > budget {
            return Err(declined(format!(
                "the {} groups of {} kept for a join take {} KiB; the device has {} KiB left",
                b.len(),
                task.table,
                b.bytes().div_ceil(1024),
                budget >> 10
            )));
        }
        Ok(b)
    }
}

/// Runs `body`; if it panics, the stream gets an error naming `what` instead of ending as if
/// complete (a lane that dies must never look like a lane that found nothing).
fn failing_loudly(
    tx: &std::sync::mpsc::SyncSender<Result<RecordBatch>>,
    what: &str,
    body: impl FnOnce(),
) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let _ = tx.send(Err(Error::Offload {
            detail: format!("{what} failed: {why}"),
        }));
    }
}

/// Starts the device's `what` (a finisher of the last task) on a thread of its own, its CPU
/// time counted as the device's; if it panics, the stream gets an error naming it.
fn spawn_finisher(
    what: &str,
    tx: &std::sync::mpsc::SyncSender<Result<RecordBatch>>,
    counters: &Arc<Counters>,
    body: impl FnOnce(&Counters, &std::sync::mpsc::SyncSender<Result<RecordBatch>>) + Send + 'static,
) -> Result<()> {
    let (tx, counters) = (tx.clone(), counters.clone());
    let name = format!("the device's {what}");
    std::thread::Builder::new()
        .name("inpath-device-finish".into())
        .spawn(move || {
            failing_loudly(&tx.clone(), &name, move || {
                let cpu = inpath_core::thread_cpu_seconds();
                body(&counters, &tx);
                let used = (inpath_core::thread_cpu_seconds() - cpu).max(0.0);
                Counters::add(&counters.cpu_micros, (used * 1e6) as u64);
            })
        })
        .map(|_| ())
        .map_err(|e| Error::Offload {
            detail: format!("cannot start the device's {what}: {e}"),
        })
}

/// `pages` split into `lanes` consecutive runs whose lengths differ by at most one.
fn lane_runs(pages: &[usize], lanes: usize) -> Vec<&[usize]> {
    let (per, extra) = (pages.len() / lanes, pages.len() % lanes);
    let mut runs = Vec::with_capacity(lanes);
    let mut start = 0;
    for k in 0..lanes {
        let len = per + usize::from(k < extra);
        runs.push(&pages[start..start + len]);
        start += len;
    }
    runs
}

/// The pages a lane of the last task reads.
enum LanePages {
    /// A run of its own, read in order: a NOP task's kept rows and sorted groups follow page
    /// order, lane by lane.
    Run(Vec<usize>),
    /// A queue all lanes share, each taking the next page when done with its last: where which
    /// lane reads a page does not change the result (the groups of an aggregate merge
    /// exactly), a lane on a slower core reads fewer pages instead of holding the query up.
    Shared(Arc<(Vec<usize>, AtomicUsize)>),
}

impl LanePages {
    /// The next page to read, none when all are taken; `taken` counts a run's pages so far.
    fn next(&self, taken: &mut usize) -> Option<usize> {
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

/// The builds of a task's joins, in join order.
fn join_builds(task: &TableTask, built: &[Option<Arc<Built>>]) -> Result<Vec<Arc<Built>>> {
    task.joins
        .iter()
        .map(|j| {
            built
                .get(j.build)
                .cloned()
                .flatten()
                .ok_or_else(|| Error::Offload {
                    detail: format!("join with task {}, which has not run", j.build),
                })
        })
        .collect()
}

/// A plan whose builds are held against the device's memory until the last lane is done.
struct PlanHold {
    plan: Prepared,
    counters: Arc<Counters>,
    held: u64,
}

impl Drop for PlanHold {
    fn drop(&mut self) {
        self.counters.release(self.held);
    }
}

/// Rows coming back from a device, with a way to stop it: dropping the stream cancels the
/// graph (lanes stop at their next page).
pub struct DeviceStream {
    rows: Receiver<Result<RecordBatch>>,
    pub(crate) cancel: Arc<AtomicBool>,
    /// Tells a device elsewhere (another process) to stop, once.
    notify: Option<Box<dyn Fn() + Send + Sync>>,
    /// The device sent its last item: nothing is left to cancel.
    done: bool,
}

impl DeviceStream {
    /// A stream of what arrives on `rows`; `notify` runs once when it is cancelled (or dropped
    /// before its end), to stop a device that is not in this process.
    pub(crate) fn new(
        rows: Receiver<Result<RecordBatch>>,
        notify: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> DeviceStream {
        DeviceStream {
            rows,
            cancel: Arc::new(AtomicBool::new(false)),
            notify,
            done: false,
        }
    }

    /// Stops the graph; lanes finish their current page and exit.
    pub fn cancel(&self) {
        let first = !self.cancel.swap(true, Ordering::Relaxed);
        if let (true, Some(notify)) = (first, &self.notify) {
            notify();
        }
    }
}

impl Iterator for DeviceStream {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.rows.recv().ok();
        self.done |= item.is_none();
        item
    }
}

impl Drop for DeviceStream {
    fn drop(&mut self) {
        if !self.done {
            self.cancel();
        }
        // Unblock lanes waiting to send; they stop at their next page and exit on their own
        // (they run detached: nothing waits on them).
        while self.rows.try_recv().is_ok() {}
    }
}

/// The output schema a task declares.
pub fn output_schema(task: &TableTask) -> Result<SchemaRef> {
    let mut fields = Vec::with_capacity(task.output.fields.len());
    for (name, ty) in &task.output.fields {
        let dt = DataType::from_str(ty).map_err(|e| Error::Offload {
            detail: format!("output column {name}: type {ty:?} is not an Arrow type ({e})"),
        })?;
        fields.push(Field::new(name, dt, true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

impl Device for LocalDevice {
    fn submit(&self, graph: &TaskGraph) -> Result<DeviceStream> {
        graph.check()?;
        if graph.version > super::GRAPH_VERSION {
            return Err(Error::Offload {
                detail: format!("graph version {} is newer than this build", graph.version),
            });
        }
        if graph.tasks.iter().any(|t| t.mask != MaskSource::All) {
            return Err(Error::Offload {
                detail: "a mask from another task: this device joins rows instead".into(),
            });
        }
        Counters::add(&self.counters.graphs, 1);
        let text = graph.to_json();
        let lock = |d: &std::sync::Mutex<std::collections::HashSet<String>>| {
            d.lock().map(|g| g.contains(&text)).unwrap_or(false)
        };
        if lock(&self.declined) {
            Counters::add(&self.counters.graphs_refused, 1);
            return Err(Error::DeviceDeclined {
                detail: "this graph outgrew the device's memory before".into(),
            });
        }
        let remember = || {
            if let Ok(mut d) = self.declined.lock() {
                d.insert(text.clone());
            }
        };
        // Build tasks first, each on all lanes; their rows stay on the device, held against
        // its memory, until the graph's last task has run.
        let last = graph.tasks.len() - 1;
        let mut built: Vec<Option<Arc<Built>>> = vec![None; graph.tasks.len()];
        let mut held = 0u64;
        // What the last task's lanes will need (a decoded page and a block of registers each),
        // reserved before any build: builds that would leave less decline at once, not after
        // every build has run.
        let reserve = {
            let task = &graph.tasks[last];
            let rows = self.reader(&task.table)?.rows_per_page() as u64;
            let mut columns = task.selector.columns();
            columns.extend(task.transformer.columns());
            columns.extend(task.flags.iter().flat_map(Comparator::columns));
            columns.extend(task.joins.iter().flat_map(|j| {
                j.probe_sources().filter_map(|k| match k {
                    Source::Column(c) => Some(*c),
                    _ => None,
                })
            }));
            columns.sort_unstable();
            columns.dedup();
            let registers = (task.transformer.ops.len() * BLOCK * 8) as u64;
            self.lanes as u64 * (rows * 16 * columns.len() as u64 + registers)
        };
        let cpu = inpath_core::thread_cpu_seconds();
        for (t, task) in graph.tasks[..last].iter().enumerate() {
            let uses: Vec<_> = graph.tasks[t + 1..]
                .iter()
                .flat_map(|later| later.joins.iter().filter(|j| j.build == t))
                .collect();
            let [join] = uses.as_slice() else {
                self.counters.release(held);
                return Err(Error::Offload {
                    detail: format!(
                        "build task {t} serves {} joins; each build serves exactly one",
                        uses.len()
                    ),
                });
            };
            let b = match task.operator {
                Operator::Nop => self.build(task, &built, join, reserve),
                _ => self.build_groups(task, &built, join, reserve),
            };
            let b = match b {
                Ok(b) => b,
                Err(e) => {
                    self.counters.release(held);
                    if matches!(e, Error::DeviceDeclined { .. }) {
                        Counters::add(&self.counters.graphs_refused, 1);
                        remember();
                    }
                    return Err(e);
                }
            };
            let counter = match b.method() {
                "positional" | "bitmap" => &self.counters.joins_positional,
                "merge" => &self.counters.joins_merge,
                _ => &self.counters.joins_sort_merge,
            };
            Counters::add(counter, 1);
            self.counters.hold(b.bytes());
            held += b.bytes();
            built[t] = Some(Arc::new(b));
        }
        let used = (inpath_core::thread_cpu_seconds() - cpu).max(0.0);
        Counters::add(&self.counters.cpu_micros, (used * 1e6) as u64);
        // What the builds hold is released when the last lane drops the plan.
        let hold = |plan: Prepared| PlanHold {
            plan,
            counters: self.counters.clone(),
            held,
        };
        let task = graph.tasks[last].clone();
        let prepared = join_builds(&task, &built).and_then(|builds| {
            let reader = self.reader(&task.table)?;
            let schema = output_schema(&task)?;
            Prepared::new(reader, task, schema, builds)
        });
        let plan = match prepared {
            Ok(p) => Arc::new(hold(p)),
            Err(e) => {
                self.counters.release(held);
                return Err(e);
            }
        };

        // Zone maps first: pages a single-comparator product excludes are never read.
        let pages = plan.plan.pruned_pages()?;
        let total = plan.plan.reader.page_count() as u64;
        Counters::add(&self.counters.pages_skipped, total - pages.len() as u64);

        let lanes = self.lanes.min(pages.len()).max(1);
        let lane_budget = self.memory_budget.saturating_sub(held) / self.lanes as u64;
        let shared_text = Arc::new(text.clone());
        let (tx, rx) = sync_channel(2 * lanes);
        let stream = DeviceStream::new(rx, None);
        let cancel = stream.cancel.clone();
        // SORT and TOPK, and groups sent whole: the lanes hand their group tables to a
        // finisher, which merges them (the device's own final aggregate), orders them and sends
        // what can be in the result.
        let task = &plan.plan.task;
        let finisher =
            match (task.order.is_some() || task.count_groups.is_some() || task.whole_groups)
                && task.operator != Operator::Nop
            {
                true => {
                    let (gtx, grx) = std::sync::mpsc::channel::<(Groups, bool)>();
                    let plan = plan.clone();
                    let order = task.order.clone();
                    spawn_finisher("sorter", &tx, &self.counters, move |counters, tx| {
                        finish_groups(&plan.plan, order.as_ref(), grx, lanes, counters, tx)
                    })?;
                    Some(gtx)
                }
                false => None,
            };
        // A NOP last task: the lanes hand their kept rows to a finisher, which orders and cuts
        // them (TOPK), reads their late columns and sends them.
        let rows_finisher = match task.operator == Operator::Nop {
            true => {
                let (rtx, rrx) = std::sync::mpsc::channel::<LaneRows>();
                let plan = plan.clone();
                let order = task.order.clone();
                spawn_finisher("row sorter", &tx, &self.counters, move |counters, tx| {
                    finish_rows(&plan.plan, order.as_ref(), rrx, lanes, counters, tx)
                })?;
                Some(rtx)
            }
            false => None,
        };
        // Lanes of an aggregate without an order share one queue of pages (`LanePages`).
        let shared = (task.operator != Operator::Nop && task.order.is_none())
            .then(|| Arc::new((pages.clone(), AtomicUsize::new(0))));
        for (k, run) in lane_runs(&pages, lanes).into_iter().enumerate() {
            let run = match &shared {
                Some(queue) => LanePages::Shared(queue.clone()),
                None => LanePages::Run(run.to_vec()),
            };
            let (plan, tx, cancel, counters) = (
                plan.clone(),
                tx.clone(),
                cancel.clone(),
                self.counters.clone(),
            );
            let (declined, text) = (self.declined.clone(), shared_text.clone());
            let (finisher, rows_finisher) = (finisher.clone(), rows_finisher.clone());
            std::thread::Builder::new()
                .name("inpath-device".into())
                .spawn(move || {
                    failing_loudly(&tx.clone(), "a device lane", move || {
                        let cpu = inpath_core::thread_cpu_seconds();
                        let mut lane = Lane::new(&plan.plan, &counters, lane_budget);
                        let result = lane.run(&run, &cancel, &mut |batch| {
                            Counters::add(
                                &counters.bytes_sent,
                                batch.get_array_memory_size() as u64,
                            );
                            tx.send(Ok(batch)).is_ok()
                        });
                        if let (Ok(()), Some(finisher)) = (&result, finisher) {
                            let groups = std::mem::replace(&mut lane.groups, Groups::new(0, 0));
                            let _ = finisher.send((groups, lane.spilled));
                        }
                        if let (Ok(()), Some(rows)) = (&result, rows_finisher) {
                            let _ = rows.send((
                                k,
                                std::mem::take(&mut lane.kept_ints),
                                std::mem::take(&mut lane.kept_places),
                            ));
                        }
                        lane.release();
                        if let Err(e) = result {
                            if matches!(e, Error::DeviceDeclined { .. }) {
                                Counters::add(&counters.graphs_refused, 1);
                                if let Ok(mut d) = declined.lock() {
                                    d.insert(text.as_ref().clone());
                                }
                            }
                            let _ = tx.send(Err(e));
                        }
                        let used = (inpath_core::thread_cpu_seconds() - cpu).max(0.0);
                        Counters::add(&counters.cpu_micros, (used * 1e6) as u64);
                    })
                })
                .map_err(|e| Error::Offload {
                    detail: format!("cannot start a device lane: {e}"),
                })?;
        }
        Ok(stream)
    }

    fn stats(&self) -> DeviceStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeviceStats {
            graphs: get(&c.graphs),
            pages_read: get(&c.pages_read),
            pages_skipped: get(&c.pages_skipped),
            bytes_read: get(&c.bytes_read),
            bytes_sent: get(&c.bytes_sent),
            rows_selected: get(&c.rows_selected),
            cpu_seconds: get(&c.cpu_micros) as f64 / 1e6,
            peak_memory: get(&c.peak_memory),
            groups_spilled: get(&c.groups_spilled),
            rows_kept: get(&c.rows_kept),
            joins_positional: get(&c.joins_positional),
            joins_merge: get(&c.joins_merge),
            joins_sort_merge: get(&c.joins_sort_merge),
            graphs_refused: get(&c.graphs_refused),
            groups_cut: get(&c.groups_cut),
            process_peak_rss: 0,
        }
    }

    fn memory_budget(&self) -> u64 {
        self.memory_budget
    }

    fn reset_stats(&self) {
        let c = &self.counters;
        for a in [
            &c.graphs,
            &c.pages_read,
            &c.pages_skipped,
            &c.bytes_read,
            &c.bytes_sent,
            &c.rows_selected,
            &c.cpu_micros,
            &c.groups_spilled,
            &c.rows_kept,
            &c.joins_positional,
            &c.joins_merge,
            &c.joins_sort_merge,
            &c.graphs_refused,
            &c.groups_cut,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        c.peak_memory
            .store(c.memory.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// The finisher of a sorted task: takes every lane's group table, merges them, orders them
/// (SORT, TOPK) and sends the batch. A lane that failed has sent its error instead; then
/// nothing is sent here.
fn finish_groups(
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
        counters.hold(groups.bytes());
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
fn first_rows(keys: &[(&Ints, bool)], n: usize, limit: Option<usize>) -> Vec<u32> {
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
fn tied_end(picks: &[u32], limit: usize, same: impl Fn(u32, u32) -> bool) -> usize {
    let last = picks[limit - 1];
    limit
        + picks[limit..]
            .iter()
            .take_while(|&&r| same(r, last))
            .count()
}

/// What a lane of a NOP last task kept: its place among the lanes, its kept columns' values
/// and its late columns' row places.
type LaneRows = (usize, Vec<Ints>, Vec<Vec<u64>>);

/// The finisher of a NOP last task: takes every lane's kept rows, in lane order (pages in
/// table order), orders them and keeps the first `limit` (TOPK, rows tied with the last
/// included) and sends them. A lane that failed has sent its error instead; then nothing is
/// sent here.
fn finish_rows(
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
fn merged_batch(
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
/// whichever lane holds it, so they are never merged first (merging was 35 % of Q16's
/// device). None when no lane holds a group.
fn counted_batch(
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
fn ordered_rows(batch: &RecordBatch, order: &Order) -> Result<RecordBatch> {
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
fn count_groups(
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
    let whole = RowConverter::new(vec![SortField::new(counted.data_type().clone())])
        .and_then(|c| c.convert_columns(std::slice::from_ref(counted)))
        .map_err(|e| bad(&e))?;
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
        let mut seen: std::collections::HashSet<(usize, &[u8]), BuildHasherDefault<MulHasher>> =
            std::collections::HashSet::with_capacity_and_hasher(picks.len(), Default::default());
        let (mut first, mut counts): (Vec<u32>, Vec<i64>) = (Vec::new(), Vec::new());
        for &i in picks {
            let i = i as usize;
            let g = *at.entry(rows.row(i).data()).or_insert_with(|| {
                first.push(i as u32);
                counts.push(0);
                counts.len() - 1
            });
            if counted.is_valid(i) && seen.insert((g, whole.row(i).data())) {
                counts[g] += 1;
            }
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

/// A task checked against its table, ready for lanes.
struct Prepared {
    reader: Arc<TableReader>,
    task: TableTask,
    schema: SchemaRef,
    /// Columns the selector reads, then those only the program reads.
    selector_columns: Vec<usize>,
    /// Columns read only as integers: kept as their pages' bit-packed deltas where a page
    /// allows ([`Packed`]), never decoded whole.
    packed_columns: Vec<usize>,
    /// Packed columns loaded beyond the selector (their deltas kept for the page).
    packed_kept: Vec<usize>,
    program_columns: Vec<usize>,
    /// Per output column, in order: what fills it.
    emit: Vec<Emit>,
    /// Per join of the task: the build rows it matches.
    builds: Vec<Arc<Built>>,
    /// What the group table keys on: group keys naming the same thing (two columns of one
    /// join's build row) share one identity.
    identities: Vec<Identity>,
    /// Per group key: its identity.
    key_identity: Vec<usize>,
    /// A build task: how each kept column is kept.
    keep_as: Vec<KeepAs>,
    /// The tables late kept columns are read from.
    origins: Vec<Origin>,
    /// A build for a semi or anti join: rows repeating the previous row's kept values are
    /// dropped.
    distinct: bool,
    /// A build for a semi or anti join with a residual condition on kept column `c`: one row
    /// per run of equal keys (every other kept column), `c` holding the run's first value
    /// and whether another followed (see `join::encode_residual`).
    summarize: Option<usize>,
    /// A build that aggregates: lanes hold their groups for the device to merge into build
    /// rows, and never spill them (partial groups are no join's rows).
    hold_groups: bool,
}

/// How a build task keeps a column.
#[derive(Clone, Copy, Debug)]
enum KeepAs {
    /// By value.
    Int(Source),
    /// Late: the rows' places in `origins[origin]`'s table, whose column `column` it is.
    Late { origin: usize, column: usize },
}

/// Where late kept rows are: the task's own table, or a table a join's build kept late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Own,
    Nested { join: usize, places: usize },
}

/// What a group is told apart by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    /// A dictionary code of the task's table's column.
    Dictionary(usize),
    /// A register's value.
    Register(usize),
    /// The build row a join matched.
    BuildRow(usize),
}

#[derive(Clone, Copy, Debug)]
enum Emit {
    Key(usize),
    /// An aggregate's state field: (aggregate, which field of its state).
    State(usize, usize),
}

impl Prepared {
    fn new(
        reader: Arc<TableReader>,
        task: TableTask,
        schema: SchemaRef,
        builds: Vec<Arc<Built>>,
    ) -> Result<Prepared> {
        let columns = reader.manifest().columns.len();
        let bad = |detail: String| Error::Offload { detail };
        for c in task
            .selector
            .columns()
            .into_iter()
            .chain(task.transformer.columns())
        {
            if c >= columns {
                return Err(bad(format!(
                    "table {} has {columns} columns; the task reads column {c}",
                    task.table
                )));
            }
        }
        let selector_columns = task.selector.columns();
        // Integer columns read as nothing but integers (integer comparators, transformer
        // loads, join keys, kept values) stay bit-packed.
        let packable =
            |c: usize| {
                let only_int_tests =
                    task.selector.products.iter().flatten().all(|cmp| {
                        !cmp.columns().contains(&c) || matches!(cmp.test, Test::Int { .. })
                    });
                let otherwise = task.flags.iter().any(|f| f.columns().contains(&c))
                    || matches!(&task.operator, Operator::AggregateGroupBy { keys, .. }
                    if keys.contains(&GroupKey::Dictionary { column: c }));
                let integer = matches!(
                    reader.manifest().columns[c].logical,
                    LogicalType::Int32
                        | LogicalType::Int64
                        | LogicalType::Date32
                        | LogicalType::Decimal128 { .. }
                );
                only_int_tests && !otherwise && integer
            };
        // Join keys and kept columns of the table are read with the program's columns.
        let sources = task
            .joins
            .iter()
            .flat_map(|j| j.probe_sources().copied())
            .chain(task.keep.iter().copied());
        let mut program_columns: Vec<usize> = task.transformer.columns();
        program_columns.extend(task.flags.iter().flat_map(Comparator::columns));
        for src in sources {
            if let Source::Column(c) = src {
                if c >= columns {
                    return Err(bad(format!(
                        "table {} has {columns} columns; the task reads column {c}",
                        task.table
                    )));
                }
                program_columns.push(c);
            }
        }
        program_columns.sort_unstable();
        program_columns.dedup();
        program_columns.retain(|c| !selector_columns.contains(c));
        let packed_columns: Vec<usize> = selector_columns
            .iter()
            .chain(&program_columns)
            .copied()
            .filter(|&c| packable(c))
            .collect();
        // Of those, the ones read beyond the selector: their deltas stay for the page.
        let loaded = |c: usize| {
            task.transformer.columns().contains(&c)
                || task
                    .joins
                    .iter()
                    .flat_map(|j| j.probe_sources())
                    .chain(task.keep.iter())
                    .any(|s| *s == Source::Column(c))
        };
        let packed_kept: Vec<usize> = packed_columns
            .iter()
            .copied()
            .filter(|&c| loaded(c))
            .collect();
        if builds.len() != task.joins.len() {
            return Err(bad(format!(
                "{} joins but {} builds",
                task.joins.len(),
                builds.len()
            )));
        }
        let (keys, aggs): (&[GroupKey], &[Agg]) = match &task.operator {
            Operator::Nop => (&[], &[]),
            Operator::Aggregate { aggs } => (&[], aggs),
            Operator::AggregateGroupBy { keys, aggs } => (keys, aggs),
        };
        let mut emit: Vec<Emit> = (0..keys.len()).map(Emit::Key).collect();
        for (i, a) in aggs.iter().enumerate() {
            let n = if a.func == AggFunc::Avg { 2 } else { 1 };
            emit.extend((0..n).map(|f| Emit::State(i, f)));
        }
        let mut identities: Vec<Identity> = Vec::new();
        let mut key_identity = Vec::with_capacity(keys.len());
        for k in keys {
            let id = match *k {
                GroupKey::Dictionary { column } => Identity::Dictionary(column),
                GroupKey::Register(r) => Identity::Register(r),
                GroupKey::Build { join, .. } => Identity::BuildRow(join),
            };
            let at = identities.iter().position(|&i| i == id).unwrap_or_else(|| {
                identities.push(id);
                identities.len() - 1
            });
            key_identity.push(at);
        }
        let mut origins: Vec<Origin> = Vec::new();
        let mut origin = |o: Origin| {
            origins.iter().position(|&x| x == o).unwrap_or_else(|| {
                origins.push(o);
                origins.len() - 1
            })
        };
        let mut keep_as = Vec::with_capacity(task.keep.len());
        for src in &task.keep {
            keep_as.push(match *src {
                Source::Flag(_) => KeepAs::Int(*src),
                Source::Column(c) => {
                    let field = reader.schema().field(c).clone();
                    let by_value = !field.is_nullable()
                        && matches!(
                            field.data_type(),
                            DataType::Int64
                                | DataType::Int32
                                | DataType::Date32
                                | DataType::Decimal128(..)
                        );
                    if by_value {
                        KeepAs::Int(*src)
                    } else {
                        KeepAs::Late {
                            origin: origin(Origin::Own),
                            column: c,
                        }
                    }
                }
                Source::Build { join, column } => {
                    match builds.get(join).and_then(|b| b.columns.get(column)) {
                        Some(Kept::Int(_)) => KeepAs::Int(*src),
                        Some(&Kept::Late { column, places }) => KeepAs::Late {
                            origin: origin(Origin::Nested { join, places }),
                            column,
                        },
                        None => {
                            return Err(bad(format!(
                                "task keeps column {column} of join {join}, which it lacks"
                            )))
                        }
                    }
                }
            });
        }
        if !matches!(task.operator, Operator::Nop) && emit.len() != schema.fields().len() {
            return Err(bad(format!(
                "the task emits {} columns but declares {}",
                emit.len(),
                schema.fields().len()
            )));
        }
        for k in keys {
            if let GroupKey::Dictionary { column } = k {
                if *column >= columns {
                    return Err(bad(format!(
                        "group key column {column} is not in the table"
                    )));
                }
            }
        }
        Ok(Prepared {
            reader,
            task,
            schema,
            selector_columns,
            packed_columns,
            packed_kept,
            program_columns,
            emit,
            builds,
            identities,
            key_identity,
            keep_as,
            origins,
            distinct: false,
            summarize: None,
            hold_groups: false,
        })
    }

    fn origin_reader(&self, o: Origin) -> Arc<TableReader> {
        match o {
            Origin::Own => self.reader.clone(),
            Origin::Nested { join, places } => self.builds[join].places[places].reader.clone(),
        }
    }

    fn keys(&self) -> &[GroupKey] {
        match &self.task.operator {
            Operator::AggregateGroupBy { keys, .. } => keys,
            _ => &[],
        }
    }

    fn aggs(&self) -> &[Agg] {
        match &self.task.operator {
            Operator::Aggregate { aggs } | Operator::AggregateGroupBy { aggs, .. } => aggs,
            Operator::Nop => &[],
        }
    }

    /// The pages left after zone maps: products of one integer comparator confine the column
    /// to a range.
    fn pruned_pages(&self) -> Result<Vec<usize>> {
        let mut pages: Vec<usize> = (0..self.reader.page_count()).collect();
        for product in &self.task.selector.products {
            let [Comparator {
                column,
                test: Test::Int { op, value },
            }] = product.as_slice()
            else {
                continue;
            };
            let v = inpath_table::format::Scalar::Int(*value);
            let (lo, hi) = match op {
                CmpOp::Eq => (Some(v.clone()), Some(v)),
                CmpOp::Lt | CmpOp::Le => (None, Some(v)),
                CmpOp::Gt | CmpOp::Ge => (Some(v), None),
                CmpOp::Ne => continue,
            };
            let keep = self.reader.prune(*column, lo.as_ref(), hi.as_ref())?;
            pages.retain(|p| keep.binary_search(p).is_ok());
        }
        Ok(pages)
    }
}

/// Rows of a page the transformer works on: a run, or picked rows (ascending).
enum Rows<'a> {
    Range(usize, usize),
    Pick(&'a [u32]),
}

impl Rows<'_> {
    /// The rows' places in the page.
    fn indices(&self) -> Vec<u32> {
        match *self {
            Rows::Range(start, n) => (start as u32..(start + n) as u32).collect(),
            Rows::Pick(rows) => rows.to_vec(),
        }
    }

    fn gather<T: Copy, U>(&self, values: &[T], f: impl Fn(T) -> U) -> Vec<U> {
        match *self {
            Rows::Range(start, n) => values[start..start + n].iter().map(|&v| f(v)).collect(),
            Rows::Pick(rows) => rows.iter().map(|&r| f(values[r as usize])).collect(),
        }
    }
}

/// Rows of this many at a time go through the transformer and the operator: registers stay
/// in cache and within the memory budget.
const BLOCK: usize = 4096;

/// A page of an integer, date or decimal column kept as its bit-packed deltas, unpacked to 32
/// bits and never widened: the selector compares the deltas, and loads add the reference for
/// only the rows they read (a page's values at 64 bits would be twice the bytes, written for
/// every row, where Q6 reads 2 % of them).
struct Packed {
    deltas: Vec<u32>,
    reference: i128,
    /// Every value is within `reference..=reference + span`.
    span: u32,
}

impl Packed {
    fn new(deltas: Vec<u32>, reference: i128, width: u8) -> Packed {
        let mut span = match width {
            0 => 0,
            w => u32::MAX >> (32 - u32::from(w.min(32))),
        };
        // The width's span can pass i64::MAX where the values do not: then the largest delta.
        if reference + i128::from(span) > i128::from(i64::MAX) {
            span = deltas.iter().copied().max().unwrap_or(0);
        }
        Packed {
            deltas,
            reference,
            span,
        }
    }

    /// The values at `rows` as i64, and a bound on every value's magnitude (from the page's
    /// reference and width, without scanning).
    fn load(&self, rows: &Rows, what: &dyn Fn() -> String) -> Result<(Vec<i64>, u64)> {
        let top = self.reference + i128::from(self.span);
        let (Ok(reference), Ok(_)) = (i64::try_from(self.reference), i64::try_from(top)) else {
            return Err(Error::Offload {
                detail: format!("{}: a value is outside the device's 64-bit range", what()),
            });
        };
        let bound = self.reference.unsigned_abs().max(top.unsigned_abs()) as u64;
        let values = match *rows {
            Rows::Range(start, n) => {
                arch::offset_u32::run(&self.deltas[start..start + n], reference)
            }
            Rows::Pick(picks) => arch::gather_offset_u32::run(&self.deltas, picks, reference),
        };
        Ok((values, bound))
    }
}

/// An integer column's values at `rows` as i64 (dates as days, decimals as scaled integers).
fn load(array: &ArrayRef, rows: &Rows, what: &dyn Fn() -> String) -> Result<Vec<i64>> {
    Ok(match array.data_type() {
        DataType::Int64 => match *rows {
            Rows::Pick(picks) => {
                arch::gather_i64::run(array.as_primitive::<Int64Type>().values(), picks)
            }
            Rows::Range(..) => rows.gather(array.as_primitive::<Int64Type>().values(), |v| v),
        },
        DataType::Int32 | DataType::Date32 => {
            let values: &[i32] = match array.data_type() {
                DataType::Int32 => array.as_primitive::<Int32Type>().values(),
                _ => array.as_primitive::<Date32Type>().values(),
            };
            match *rows {
                Rows::Pick(picks) => arch::gather_i32::run(values, picks),
                Rows::Range(..) => rows.gather(values, |v| v as i64),
            }
        }
        DataType::Decimal128(..) => {
            let values = array.as_primitive::<Decimal128Type>().values();
            // Narrowed with wrapping casts; one check over the block finds any value beyond
            // 64 bits.
            let out = rows.gather(values, |v| v as i64);
            let fits = match *rows {
                Rows::Range(start, n) => values[start..start + n]
                    .iter()
                    .zip(&out)
                    .all(|(&w, &v)| w == v as i128),
                Rows::Pick(_) => rows
                    .gather(values, |v| v)
                    .iter()
                    .zip(&out)
                    .all(|(&w, &v)| w == v as i128),
            };
            if !fits {
                return Err(Error::Offload {
                    detail: format!("{}: a decimal is outside the device's 64-bit range", what()),
                });
            }
            out
        }
        other => {
            return Err(Error::Offload {
                detail: format!("{}: a {other} column is not an integer column", what()),
            })
        }
    })
}

/// Mask words: bit i of word i/64 is row i.
fn words_for(rows: usize) -> usize {
    rows.div_ceil(64)
}

fn pack_bits(rows: usize, mut test: impl FnMut(usize) -> bool) -> Vec<u64> {
    let mut words = vec![0u64; words_for(rows)];
    for (w, word) in words.iter_mut().enumerate() {
        let base = w * 64;
        let n = (rows - base).min(64);
        let mut bits = 0u64;
        for j in 0..n {
            bits |= (test(base + j) as u64) << j;
        }
        *word = bits;
    }
    words
}

/// The kernels' number for an operator.
fn op_code(op: CmpOp) -> u8 {
    match op {
        CmpOp::Eq => arch::EQ,
        CmpOp::Ne => arch::NE,
        CmpOp::Lt => arch::LT,
        CmpOp::Le => arch::LE,
        CmpOp::Gt => arch::GT,
        CmpOp::Ge => arch::GE,
    }
}

/// Mask words of `values[i] op value` by `kernel` (an `arch` comparison). A constant outside
/// the type's range answers every row alike.
fn cmp_words<T>(
    values: &[T],
    op: CmpOp,
    value: i128,
    kernel: fn(&[T], u8, T) -> Vec<u64>,
) -> Vec<u64>
where
    T: Copy + TryFrom<i128> + Into<i128>,
{
    match T::try_from(value) {
        Ok(c) => kernel(values, op_code(op), c),
        // Every row compares the same way with a constant beyond the type's range.
        Err(_) => {
            let all = match values.first() {
                Some(&v) => op.holds(v.into(), value),
                None => false,
            };
            pack_bits(values.len(), |_| all)
        }
    }
}

/// A SQL LIKE match (`%` any run, `_` one character; no escape).
fn like(text: &str, pattern: &str) -> bool {
    if text.is_ascii() && pattern.is_ascii() {
        return like_units(text.as_bytes(), pattern.as_bytes(), b'%', b'_');
    }
    let t: Vec<char> = text.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    like_units(&t, &p, '%', '_')
}

/// SQL LIKE over units (bytes of ASCII text, or chars): `any` matches any run, `one` one unit;
/// backtracking to the last `any` only, linear for patterns of one `any`.
fn like_units<T: PartialEq + Copy>(t: &[T], p: &[T], any: T, one: T) -> bool {
    let (mut ti, mut pi) = (0usize, 0usize);
    let (mut star, mut mark) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == one || (p[pi] != any && p[pi] == t[ti])) {
            ti += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == any {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == any {
        pi += 1;
    }
    pi == p.len()
}

/// A LIKE pattern read once for a page: the common shapes (`ab%`, `%ab`, `%ab%`, `ab`, no `_`)
/// as plain string tests, any other by the general matcher.
enum LikeMatcher<'p> {
    Exact(&'p str),
    Prefix(&'p str),
    Suffix(&'p str),
    Contains(&'p str),
    General(&'p str),
}

impl<'p> LikeMatcher<'p> {
    fn new(pattern: &'p str) -> LikeMatcher<'p> {
        if pattern.contains('_') {
            return LikeMatcher::General(pattern);
        }
        let inner = pattern.trim_matches('%');
        if inner.contains('%') {
            return LikeMatcher::General(pattern);
        }
        match (pattern.starts_with('%'), pattern.ends_with('%')) {
            (false, false) => LikeMatcher::Exact(inner),
            (false, true) => LikeMatcher::Prefix(inner),
            (true, false) => LikeMatcher::Suffix(inner),
            (true, true) => LikeMatcher::Contains(inner),
        }
    }

    fn matches(&self, s: &str) -> bool {
        match *self {
            LikeMatcher::Exact(v) => s == v,
            LikeMatcher::Prefix(v) => s.starts_with(v),
            LikeMatcher::Suffix(v) => s.ends_with(v),
            LikeMatcher::Contains(v) => s.contains(v),
            LikeMatcher::General(p) => like(s, p),
        }
    }
}

/// The mask words of one comparator over a page column.
/// Mask words of a comparator over a page's columns.
fn comparator_or_columns(
    arrays: &HashMap<usize, ArrayRef>,
    cmp: &Comparator,
    what: &str,
) -> Result<Vec<u64>> {
    match cmp.test {
        Test::Columns { op, other } => {
            columns_words(&arrays[&cmp.column], &arrays[&other], op, what)
        }
        _ => comparator_words(&arrays[&cmp.column], &cmp.test, what),
    }
}

/// How `reference + delta op value` is answered over deltas in [0, 2^32): by the comparison
/// kernel in the deltas' own 32 bits, `Ok((operator, value - reference))`, or alike for every
/// row, `Err(answer)`, when `value - reference` is outside [0, 2^32) (clamped to [-1, 2^32]
/// it keeps every operator's answer).
fn delta_test(reference: i128, op: CmpOp, value: i128) -> std::result::Result<(u8, u32), bool> {
    let t = value - reference;
    match u32::try_from(t) {
        Ok(c) => Ok((op_code(op), c)),
        Err(_) => Err(op.holds(0i128, t.clamp(-1, 1 << 32))),
    }
}

/// A flag's values (0 or 1) at `rows`.
fn flag_values(words: &[u64], rows: &Rows) -> Vec<i64> {
    let bit = |r: usize| ((words[r / 64] >> (r % 64)) & 1) as i64;
    match *rows {
        Rows::Range(start, n) => (start..start + n).map(bit).collect(),
        Rows::Pick(p) => p.iter().map(|&r| bit(r as usize)).collect(),
    }
}

/// Mask words of `a op b` over two columns of one type (a null on either side fails).
fn columns_words(a: &ArrayRef, b: &ArrayRef, op: CmpOp, what: &str) -> Result<Vec<u64>> {
    fn words<T: arrow_array::ArrowPrimitiveType>(a: &ArrayRef, b: &ArrayRef, op: CmpOp) -> Vec<u64>
    where
        T::Native: PartialOrd,
    {
        let (x, y) = (
            a.as_primitive::<T>().values(),
            b.as_primitive::<T>().values(),
        );
        pack_bits(x.len(), |i| op.holds(x[i], y[i]))
    }
    // A decimal page read narrow (Int64) against one that is not: both as 128-bit integers.
    let wide = |x: &ArrayRef| -> Option<ArrayRef> {
        match x.data_type() {
            DataType::Int64 => Some(Arc::new(Decimal128Array::new(
                x.as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .map(|&v| v as i128)
                    .collect(),
                x.logical_nulls(),
            ))),
            DataType::Decimal128(..) => Some(Arc::new(Decimal128Array::new(
                x.as_primitive::<Decimal128Type>().values().clone(),
                x.logical_nulls(),
            ))),
            _ => None,
        }
    };
    if a.data_type() != b.data_type() {
        if let (Some(x), Some(y)) = (wide(a), wide(b)) {
            return columns_words(&x, &y, op, what);
        }
    }
    if a.data_type() != b.data_type() || a.len() != b.len() {
        return Err(Error::Offload {
            detail: format!(
                "{what}: compared with a column of another type or length ({} against {})",
                a.data_type(),
                b.data_type()
            ),
        });
    }
    let mut out = match a.data_type() {
        DataType::Int64 => words::<Int64Type>(a, b, op),
        DataType::Int32 => words::<Int32Type>(a, b, op),
        DataType::Date32 => words::<Date32Type>(a, b, op),
        DataType::Decimal128(..) => words::<Decimal128Type>(a, b, op),
        other => {
            return Err(Error::Offload {
                detail: format!("{what}: a column comparison on a {other} column"),
            })
        }
    };
    for nulls in [a.logical_nulls(), b.logical_nulls()].into_iter().flatten() {
        let valid = pack_bits(a.len(), |i| nulls.is_valid(i));
        for (w, v) in out.iter_mut().zip(valid) {
            *w &= v;
        }
    }
    Ok(out)
}

fn comparator_words(array: &ArrayRef, test: &Test, what: &str) -> Result<Vec<u64>> {
    let rows = array.len();
    let matcher = match test {
        Test::Like { pattern, .. } => Some(LikeMatcher::new(pattern)),
        _ => None,
    };
    let string_test = |s: &str| -> bool {
        match (test, &matcher) {
            (Test::StrIn { values, negated }, _) => values.iter().any(|v| v == s) != *negated,
            (Test::Like { negated, .. }, Some(m)) => m.matches(s) != *negated,
            _ => false,
        }
    };
    let mut words = match (test, array.data_type()) {
        (Test::Int { op, value }, dt) => {
            // On the column's own values, the operator chosen outside the loop, so that each
            // comparison loop vectorises.
            let value = *value;
            match dt {
                DataType::Int64 => cmp_words(
                    array.as_primitive::<Int64Type>().values(),
                    *op,
                    value,
                    arch::cmp_i64::run,
                ),
                DataType::Int32 => cmp_words(
                    array.as_primitive::<Int32Type>().values(),
                    *op,
                    value,
                    arch::cmp_i32::run,
                ),
                DataType::Date32 => cmp_words(
                    array.as_primitive::<Date32Type>().values(),
                    *op,
                    value,
                    arch::cmp_i32::run,
                ),
                DataType::Decimal128(..) => cmp_words(
                    array.as_primitive::<Decimal128Type>().values(),
                    *op,
                    value,
                    arch::cmp_generic,
                ),
                other => {
                    return Err(Error::Offload {
                        detail: format!("{what}: a {other} column is not an integer column"),
                    })
                }
            }
        }
        (_, DataType::Dictionary(..)) => {
            let dict = array
                .as_any()
                .downcast_ref::<DictionaryArray<Int32Type>>()
                .ok_or_else(|| Error::Offload {
                    detail: format!("{what}: a dictionary column without Int32 codes"),
                })?;
            let values = dict.values().as_string::<i32>();
            let pass: Vec<bool> = (0..values.len())
                .map(|i| !values.is_null(i) && string_test(values.value(i)))
                .collect();
            let codes = dict.keys().values();
            pack_bits(rows, |i| {
                pass.get(codes[i] as usize).copied().unwrap_or(false)
            })
        }
        (_, DataType::Utf8) => {
            let s: &StringArray = array.as_string::<i32>();
            pack_bits(rows, |i| string_test(s.value(i)))
        }
        (_, other) => {
            return Err(Error::Offload {
                detail: format!("{what}: a string test on a {other} column"),
            })
        }
    };
    if let Some(nulls) = array.logical_nulls() {
        let valid = pack_bits(rows, |i| nulls.is_valid(i));
        for (w, v) in words.iter_mut().zip(valid) {
            *w &= v;
        }
    }
    Ok(words)
}

/// One lane's state: its group table and its share of the memory budget.
struct Lane<'a> {
    plan: &'a Prepared,
    counters: &'a Counters,
    budget: u64,
    groups: Groups,
    /// Group-table bytes currently held against the device's memory.
    held: u64,
    /// The most groups there can be (dictionary keys), once a page has shown the dictionaries.
    group_cap: Option<usize>,
    /// A build (NOP) task's kept rows so far, in page order: per kept column its values (none
    /// for late columns), and per origin of late columns the rows' places.
    kept_ints: Vec<Ints>,
    kept_places: Vec<Vec<u64>>,
    /// Bytes of what the lane keeps, held against the device's memory.
    kept_bytes: u64,
    /// The task's flags over the page being read, as mask words.
    flag_words: Vec<Vec<u64>>,
    /// The page's columns kept bit-packed, by column.
    packed: HashMap<usize, Packed>,
    /// Delta buffers of earlier pages, for the next to unpack into (not held against the
    /// budget: at most a page of each packed column).
    spare_deltas: Vec<Vec<u32>>,
    /// Whether the lane has sent partial groups to the host early.
    spilled: bool,
    /// The selection of the block in hand when every row of the page goes through the
    /// transformer (bit i: row i of the block); none when only selected rows do.
    block_mask: Option<Vec<u64>>,
}

/// The group table of AGGREGATE (one group) or AGGREGATE_GROUPBY.
struct Groups {
    /// Per key: each group's key (a dictionary code or a register value).
    keys: Vec<Vec<i64>>,
    /// Per key that is a dictionary column: its values (to emit codes as a dictionary).
    dictionaries: Vec<Option<ArrayRef>>,
    /// Dense lookup by composite dictionary code (when every key is a small dictionary).
    dense: Option<(Vec<usize>, Vec<u32>)>,
    sparse: HashMap<Box<[i64]>, u32, BuildHasherDefault<MulHasher>>,
    packed: HashMap<u128, u32, BuildHasherDefault<MulHasher>>,
    /// Per aggregate: sums, minima or maxima, and counts, per group.
    acc: Vec<Vec<i128>>,
    count: Vec<Vec<i64>>,
    len: usize,
}

impl Groups {
    fn new(keys: usize, aggs: usize) -> Groups {
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

    /// Bytes one group holds (keys, accumulators, counts, and its share of the lookup).
    fn per_group(&self) -> usize {
        self.keys.len() * 8 + self.acc.len() * 24 + 32
    }

    fn bytes(&self) -> u64 {
        let dense = self.dense.as_ref().map_or(0, |(_, slots)| slots.len() * 4);
        (self.len * self.per_group() + dense) as u64
    }

    fn push_group(&mut self, key: &[i64]) -> u32 {
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

    fn clear(&mut self) {
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
    /// own final aggregate. The table is then only emitted (it has no lookups).
    fn merged(tables: Vec<Groups>, aggs: &[Agg]) -> Option<Groups> {
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
        let width = g.keys.len();
        Some(merge_by_values(g, aggs, width, |g, k, i| g.keys[k][i]))
    }

    /// The groups at `picks`, in that order.
    fn subset(&self, picks: &[u32]) -> Groups {
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
fn merge_groups<K: std::hash::Hash + Eq>(
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
fn merge_by_values(
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
fn merge_state(func: AggFunc, (c, v): (&mut i64, &mut i128), (count, value): (i64, i128)) {
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
struct MulHasher(u64);

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

/// Largest dense group table (composite dictionary codes).
const DENSE_SLOTS: usize = 1 << 22;

impl<'a> Lane<'a> {
    fn new(plan: &'a Prepared, counters: &'a Counters, budget: u64) -> Lane<'a> {
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
            flag_words: Vec::new(),
            packed: HashMap::new(),
            spare_deltas: Vec::new(),
            spilled: false,
            block_mask: None,
        }
    }

    /// The most groups a page of `rows` rows can add.
    fn new_groups(&self, rows: usize) -> usize {
        self.group_cap.map_or(rows, |c| c.min(rows))
    }

    fn release(&mut self) {
        self.counters.release(self.held + self.kept_bytes);
        self.held = 0;
        self.kept_bytes = 0;
    }

    fn account_groups(&mut self) {
        let now = self.groups.bytes();
        if now > self.held {
            self.counters.hold(now - self.held);
        } else {
            self.counters.release(self.held - now);
        }
        self.held = now;
    }

    fn run(
        &mut self,
        pages: &LanePages,
        cancel: &AtomicBool,
        emit: &mut dyn FnMut(RecordBatch) -> bool,
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
                && worst + self.groups.bytes() > self.budget
            {
                if self.plan.task.count_groups.is_some() || self.plan.hold_groups {
                    // Counted groups, and groups a later task joins, must all be on the
                    // device: nothing has been sent, so the host can still run the plan.
                    return Err(Error::DeviceDeclined {
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
            self.keep_first_rows();
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

    /// A NOP last task under TOPK: once the rows kept outnumber the limit by far, only those
    /// that can still be among the first stay (ties included), so a lane holds about the
    /// limit's rows, not every row it selected.
    fn keep_first_rows(&mut self) {
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
    fn page(&mut self, page: usize) -> Result<u64> {
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
                    let (take, build_rows) = match &join.residual {
                        None => plan.builds[j].probe(&keys, packs.as_deref(), join.kind),
                        Some(r) => {
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
    fn unpack_column(
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
    fn load_column(
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
    fn summarize_runs(
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
        let kept = &self.kept_ints;
        // Whether row `i`'s keys equal those of row `at` of this block, or (`None`) of the
        // lane's last kept row.
        let same = |i: usize, at: Option<usize>| {
            keys.iter().all(|&k| {
                let col = &columns[k].1;
                match at {
                    Some(j) => col[j] == col[i],
                    None => kept[columns[k].0].last() == Some(col[i]),
                }
            })
        };
        let mut out: Vec<(usize, Vec<i64>)> =
            columns.iter().map(|(c, _)| (*c, Vec::new())).collect();
        // The run in progress: where its keys are, its kept value as it started and now.
        let mut run: Option<(Option<usize>, i64, i64)> =
            kept[value].last().map(|enc| (None, enc, enc));
        let mut grown_kept: Option<i64> = None;
        let mut close = |run: Option<(Option<usize>, i64, i64)>,
                         out: &mut Vec<(usize, Vec<i64>)>| match run {
            Some((Some(j), _, enc)) => {
                for (k, (_, col)) in out.iter_mut().enumerate() {
                    col.push(if k == v { enc } else { columns[k].1[j] });
                }
            }
            Some((None, was, enc)) if was != enc => grown_kept = Some(enc),
            _ => {}
        };
        for (i, &x) in values.iter().enumerate() {
            match &mut run {
                Some((at, _, enc)) if same(i, *at) => {
                    if residual_first(*enc) != x {
                        *enc |= 1;
                    }
                }
                _ => {
                    close(run.take(), &mut out);
                    let enc = encode_residual(x).ok_or_else(|| Error::DeviceDeclined {
                        detail: format!(
                            "a residual join value {x} beyond what the device keeps (+-2^62)"
                        ),
                    })?;
                    run = Some((Some(i), enc, enc));
                }
            }
        }
        close(run, &mut out);
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
    fn keep(
        &mut self,
        page: usize,
        arrays: &HashMap<usize, ArrayRef>,
        rows: &Rows,
        matched: &[&[u32]],
    ) -> Result<()> {
        let plan = self.plan;
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
            let same_as = |i: usize, j: usize| columns.iter().all(|(_, v)| v[i] == v[j]);
            let same_as_kept = |i: usize| {
                columns
                    .iter()
                    .all(|(c, v)| self.kept_ints[*c].last() == Some(v[i]))
            };
            let keep: Vec<usize> = (0..n)
                .filter(|&i| {
                    if i == 0 {
                        !same_as_kept(0)
                    } else {
                        !same_as(i, i - 1)
                    }
                })
                .collect();
            if keep.len() < n {
                for (_, v) in &mut columns {
                    *v = keep.iter().map(|&i| v[i]).collect();
                }
            }
        }
        for (c, values) in columns {
            let before = self.kept_ints[c].bytes();
            self.kept_ints[c].extend(&values);
            bytes += (self.kept_ints[c].bytes() - before) as u64;
        }
        self.kept_bytes += bytes;
        self.counters.hold(bytes);
        if self.kept_bytes > self.budget {
            return Err(Error::DeviceDeclined {
                detail: format!(
                    "the rows table {} keeps for a join outgrow a lane's {} KiB of device memory",
                    plan.task.table,
                    self.budget >> 10
                ),
            });
        }
        Ok(())
    }

    /// `values` with a masked block's unselected rows zeroed, for arithmetic checked row by
    /// row (an unselected row must not fail a query); as they are otherwise.
    fn selected_only<'v>(&self, values: &'v [i64]) -> Cow<'v, [i64]> {
        match &self.block_mask {
            Some(mask) => {
                let mut owned = values.to_vec();
                arch::keep_selected::run(&mut owned, mask);
                Cow::Owned(owned)
            }
            None => Cow::Borrowed(values),
        }
    }

    /// Runs the Row Transformer over the selected rows, vector at a time.
    fn transform<'p>(
        &self,
        arrays: &'p HashMap<usize, ArrayRef>,
        rows: &Rows,
        matched: &[&[u32]],
        n: usize,
        column_name: &dyn Fn(usize) -> String,
    ) -> Result<Registers<'p>> {
        let overflow = |i: usize| Error::Offload {
            detail: format!(
                "transformer instruction {i} of table {} overflowed 64 bits; the query runs \
                 on the host without offload",
                self.plan.task.table
            ),
        };
        let ops = &self.plan.task.transformer.ops;
        let mut regs: Vec<Cow<'p, [i64]>> = Vec::with_capacity(ops.len());
        // Per register, a bound on its values' magnitudes: loads are scanned once, computed
        // registers bounded from their operands' bounds, so an operation that cannot
        // overflow runs as a plain vector loop without scanning its operands again.
        let mut bounds: Vec<u64> = Vec::with_capacity(ops.len());
        // Registers that hold one value on every row.
        let mut consts: Vec<Option<i64>> = Vec::with_capacity(ops.len());
        let fits = |b: u64| b <= i64::MAX as u64;
        for (i, op) in ops.iter().enumerate() {
            let (out, bound, constant): (Cow<'p, [i64]>, u64, Option<i64>) = match *op {
                Op::Load { column } if self.packed.contains_key(&column) => {
                    let (values, bound) =
                        self.packed[&column].load(rows, &|| column_name(column))?;
                    (Cow::Owned(values), bound, None)
                }
                Op::Load { column } => {
                    let array = &arrays[&column];
                    if array.null_count() > 0 {
                        return Err(Error::Offload {
                            detail: format!(
                                "{} holds nulls; the transformer takes only non-null columns",
                                column_name(column)
                            ),
                        });
                    }
                    // A run of 64-bit values is read where it lies. (Unselected rows of a
                    // masked block compute too: the bounds cover them, and an operation
                    // whose bound overflows zeroes them first.)
                    let values = match (array.data_type(), rows) {
                        (DataType::Int64, &Rows::Range(start, len)) => Cow::Borrowed(
                            &array.as_primitive::<Int64Type>().values()[start..start + len],
                        ),
                        _ => Cow::Owned(load(array, rows, &|| column_name(column))?),
                    };
                    let bound = arch::max_abs::run(&values);
                    (values, bound, None)
                }
                Op::Flag { flag } => (
                    Cow::Owned(flag_values(&self.flag_words[flag], rows)),
                    1,
                    None,
                ),
                Op::Fetch { join, column } => {
                    let values = self.plan.builds[join].ints(column)?.gather(matched[join]);
                    let bound = arch::max_abs::run(&values);
                    (Cow::Owned(values), bound, None)
                }
                // Constants are held as values, filled out only where the operator reads them.
                Op::Const { value } => (Cow::Owned(Vec::new()), value.unsigned_abs(), Some(value)),
                Op::Scale { src, pow } => {
                    let f = 10i64.checked_pow(pow).ok_or_else(|| overflow(i))?;
                    let bound = bounds[src].saturating_mul(f as u64);
                    match consts[src] {
                        Some(v) => {
                            let v = v.checked_mul(f).ok_or_else(|| overflow(i))?;
                            (Cow::Owned(Vec::new()), v.unsigned_abs(), Some(v))
                        }
                        None if fits(bound) => (
                            Cow::Owned(regs[src].iter().map(|p| p.wrapping_mul(f)).collect()),
                            bound,
                            None,
                        ),
                        None => {
                            let mut of = false;
                            let out: Vec<i64> = self
                                .selected_only(&regs[src])
                                .iter()
                                .map(|p| {
                                    let (r, o) = p.overflowing_mul(f);
                                    of |= o;
                                    r
                                })
                                .collect();
                            if of {
                                return Err(overflow(i));
                            }
                            let bound = arch::max_abs::run(&out);
                            (Cow::Owned(out), bound, None)
                        }
                    }
                }
                Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => {
                    let code = match op {
                        Op::Add(..) => 0,
                        Op::Sub(..) => 1,
                        _ => 2,
                    };
                    let bound = if code == 2 {
                        bounds[a].saturating_mul(bounds[b])
                    } else {
                        bounds[a].saturating_add(bounds[b])
                    };
                    if let (Some(x), Some(y)) = (consts[a], consts[b]) {
                        let v = match code {
                            0 => x.checked_add(y),
                            1 => x.checked_sub(y),
                            _ => x.checked_mul(y),
                        }
                        .ok_or_else(|| overflow(i))?;
                        (Cow::Owned(Vec::new()), v.unsigned_abs(), Some(v))
                    } else if fits(bound) {
                        // Operands within i32 multiply in one 32-bit instruction.
                        let within_i32 = |r: usize| bounds[r] <= i32::MAX as u64;
                        let code = if code == 2 && within_i32(a) && within_i32(b) {
                            arch::MUL_I32
                        } else {
                            code
                        };
                        let out = match (consts[a], consts[b]) {
                            // A constant operand is broadcast, never filled out.
                            (Some(x), _) => arch::const_op::run(code, x, &regs[b], true),
                            (_, Some(y)) => arch::const_op::run(code, y, &regs[a], false),
                            _ => arch::wrapping_op::run(code, &regs[a], &regs[b]),
                        };
                        (Cow::Owned(out), bound, None)
                    } else {
                        let (x, y) = (filled(&regs, &consts, a, n), filled(&regs, &consts, b, n));
                        let (x, y) = (self.selected_only(&x), self.selected_only(&y));
                        let out = if no_overflow(op, &x, &y) {
                            // The bounds were loose; the operands' own magnitudes are not.
                            arch::wrapping_op::run(code, &x, &y)
                        } else {
                            checked_op(code, &x, &y).ok_or_else(|| overflow(i))?
                        };
                        let bound = arch::max_abs::run(&out);
                        (Cow::Owned(out), bound, None)
                    }
                }
                Op::Year { src } => {
                    let out: Vec<i64> = filled(&regs, &consts, src, n)
                        .iter()
                        .map(|&d| year_of_days(d))
                        .collect();
                    let bound = arch::max_abs::run(&out);
                    (Cow::Owned(out), bound, None)
                }
                Op::Select {
                    test,
                    op,
                    value,
                    then,
                    otherwise,
                } => (
                    Cow::Owned(
                        filled(&regs, &consts, test, n)
                            .iter()
                            .zip(
                                filled(&regs, &consts, then, n)
                                    .iter()
                                    .zip(filled(&regs, &consts, otherwise, n).iter()),
                            )
                            .map(|(t, (a, b))| if op.holds(*t, value) { *a } else { *b })
                            .collect(),
                    ),
                    bounds[then].max(bounds[otherwise]),
                    None,
                ),
            };
            regs.push(out);
            bounds.push(bound);
            consts.push(constant);
        }
        // The constants the operator reads (an aggregate's argument, a group key, the
        // filter), filled out.
        let plan = self.plan;
        let read = plan
            .aggs()
            .iter()
            .filter_map(|a| a.arg)
            .chain(plan.keys().iter().filter_map(|k| match *k {
                GroupKey::Register(r) => Some(r),
                _ => None,
            }))
            .chain(plan.task.filter);
        for r in read {
            if let (Some(v), Some(reg)) = (consts.get(r).copied().flatten(), regs.get_mut(r)) {
                if reg.len() != n {
                    *reg = Cow::Owned(vec![v; n]);
                }
            }
        }
        Ok(Registers {
            values: regs,
            bounds,
        })
    }

    /// [`Lane::group_ids`] of a run of rows keyed by one or two dictionary columns whose
    /// slots in the dense table all have groups (every block after the first few): one kernel
    /// over the 32-bit codes. `None` where that does not hold; the general path then takes
    /// the block (and adds its groups).
    fn dense_dictionary_ids(
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
    fn group_ids(
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
                    sizes.push(None);
                }
                // Build rows are numbered densely: a key the dense table can take.
                Identity::BuildRow(j) => {
                    columns.push(matched[*j].iter().map(|&r| r as i64).collect());
                    sizes.push(Some(self.plan.builds[*j].len()));
                }
            }
        }
        let mut ids = Vec::with_capacity(n);
        // A dense table takes at most a quarter of the lane's budget.
        let budget_quarter = (self.budget / 4) as usize;
        let dense_strides = sizes
            .iter()
            .try_fold((Vec::new(), 1usize), |(mut st, p), s| {
                let s = (*s)?;
                st.push(p);
                let next = p.checked_mul(s.max(1))?;
                (next <= DENSE_SLOTS && next * 4 <= budget_quarter).then_some((st, next))
            });
        let mut key = vec![0i64; keys.len()];
        // Dictionaries are the column's own, shared by every page, so the dense table's shape
        // stays; should it change with groups held, they move to the sparse table.
        let keep = matches!((&self.groups.dense, &dense_strides),
            (Some((s, t)), Some((s2, n2))) if s == s2 && t.len() == *n2);
        if !keep {
            match dense_strides {
                Some((strides, slots)) if self.groups.len == 0 => {
                    self.groups.dense = Some((strides, vec![u32::MAX; slots]));
                }
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
        match self.groups.dense.take() {
            Some((strides, mut slots)) => {
                // Each row's slot; once every slot a block touches has its group (all but the
                // first blocks), the ids are one gather.
                let at: Vec<i64> = match columns.len() {
                    1 => columns[0].clone(),
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
                    let mut g = slots[at];
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

    fn aggregate(
        &mut self,
        arrays: &HashMap<usize, ArrayRef>,
        registers: &[Cow<'_, [i64]>],
        bounds: &[u64],
        rows: &Rows,
        matched: &[&[u32]],
        n: usize,
    ) -> Result<()> {
        let ids = self.group_ids(arrays, registers, rows, matched, n)?;
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
    fn emit_groups(&self) -> Result<RecordBatch> {
        self.plan.emit_groups(&self.groups)
    }
}

impl Prepared {
    /// Whether every group of the table is a group of the SQL, not a part of one: each build
    /// row the groups are told apart by is named by unique build keys that are among the
    /// group keys, or is found from such a row through unique keys (customer's row names its
    /// nation's). Then lanes' tables merged give every group whole, and TOPK may cut.
    fn groups_exact(&self) -> bool {
        let keys = self.keys();
        let mut exact: Vec<bool> = self
            .identities
            .iter()
            .map(|id| match *id {
                Identity::Dictionary(_) | Identity::Register(_) => true,
                Identity::BuildRow(j) => {
                    let join = &self.task.joins[j];
                    self.builds[j].unique_keys()
                        && join.build_keys.iter().all(|&bk| {
                            keys.contains(&GroupKey::Build {
                                join: j,
                                column: bk,
                            })
                        })
                }
            })
            .collect();
        // Rows found through another exact row's columns, to a fixpoint.
        loop {
            let mut changed = false;
            for (i, id) in self.identities.iter().enumerate() {
                let Identity::BuildRow(j) = *id else { continue };
                if exact[i] || !self.builds[j].unique_keys() {
                    continue;
                }
                let through_exact = self.task.joins[j].probe_keys.iter().all(|k| match *k {
                    Source::Build { join, .. } => self
                        .identities
                        .iter()
                        .position(|&x| x == Identity::BuildRow(join))
                        .is_some_and(|p| exact[p]),
                    _ => false,
                });
                if through_exact {
                    exact[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        exact.iter().all(|&e| e)
    }

    /// An output column's values per group as exact integers ordered as the emitted values
    /// are (a null where the emitted value is null), or none for columns the device does not
    /// order by (strings, averages, sums emitted as floats).
    fn sort_values(&self, g: &Groups, column: usize) -> Option<Vec<Option<i128>>> {
        let ty = self.schema.fields().get(column)?.data_type();
        match *self.emit.get(column)? {
            Emit::Key(k) => {
                let values = &g.keys[self.key_identity[k]];
                match self.keys()[k] {
                    GroupKey::Register(_) => {
                        Some(values.iter().map(|&v| Some(v as i128)).collect())
                    }
                    GroupKey::Build { join, column } => match &self.builds[join].columns[column] {
                        Kept::Int(v) => Some(
                            values
                                .iter()
                                .map(|&r| Some(v.get(r as usize) as i128))
                                .collect(),
                        ),
                        Kept::Late { .. } => None,
                    },
                    GroupKey::Dictionary { .. } => None,
                }
            }
            Emit::State(a, _) => {
                let agg = &self.aggs()[a];
                let (acc, count) = (&g.acc[a], &g.count[a]);
                match agg.func {
                    AggFunc::Count | AggFunc::CountAll => {
                        Some(count.iter().map(|&c| Some(c as i128)).collect())
                    }
                    AggFunc::Sum if *ty != DataType::Float64 => Some(
                        (0..g.len)
                            .map(|i| (count[i] > 0).then_some(acc[i]))
                            .collect(),
                    ),
                    AggFunc::Min | AggFunc::Max => Some(
                        (0..g.len)
                            .map(|i| (count[i] > 0).then_some(acc[i]))
                            .collect(),
                    ),
                    _ => None,
                }
            }
        }
    }

    /// SORT and TOPK over the lanes' merged table: the groups ordered by the leading sort
    /// keys the device can order by, and with a limit (when the groups are exact and none
    /// went to the host early) only those that can be among the first `limit`: every group
    /// tied with the last one on those keys stays, for the host's sort to decide.
    fn order_groups(&self, g: Groups, order: &Order, spilled: bool) -> Result<Groups> {
        // With a limit, only whole groups may be cut: those told apart by build rows are
        // merged by their values first (none may have gone to the host early).
        let cut = order.limit.is_some_and(|k| k < g.len) && !spilled;
        let g = if cut && !self.groups_exact() {
            self.regroup(g)?
        } else {
            g
        };
        let values: Vec<(Vec<Option<i128>>, SortKey)> = order
            .keys
            .iter()
            .map_while(|k| self.sort_values(&g, k.column).map(|v| (v, *k)))
            .collect();
        if values.is_empty() {
            return Ok(g);
        }
        let cmp = |a: &u32, b: &u32| -> std::cmp::Ordering {
            for (v, key) in &values {
                let (x, y) = (v[*a as usize], v[*b as usize]);
                let o = match (x, y) {
                    (None, None) => std::cmp::Ordering::Equal,
                    (None, Some(_)) if key.nulls_first => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (Some(_), None) if key.nulls_first => std::cmp::Ordering::Greater,
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (Some(x), Some(y)) if key.descending => y.cmp(&x),
                    (Some(x), Some(y)) => x.cmp(&y),
                };
                if o.is_ne() {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        };
        let mut picks: Vec<u32> = (0..g.len as u32).collect();
        match order.limit {
            Some(k) if k < g.len && cut => {
                picks.select_nth_unstable_by(k - 1, cmp);
                let last = picks[k - 1];
                picks.retain(|p| cmp(p, &last).is_le());
            }
            _ => {}
        }
        picks.sort_by(cmp);
        Ok(g.subset(&picks))
    }

    /// Group key `k`'s values per group, as the output column `field` holds them.
    fn key_array(&self, g: &Groups, k: usize, field: &Field) -> Result<ArrayRef> {
        let bad = |detail: String| Error::Offload { detail };
        let ty = field.data_type();
        let id = self.key_identity[k];
        let values = &g.keys[id];
        Ok(match (&self.keys()[k], ty) {
            (GroupKey::Dictionary { .. }, DataType::Dictionary(..)) => {
                let dict = g.dictionaries[id]
                    .clone()
                    .ok_or_else(|| bad("a dictionary key with no dictionary".into()))?;
                let codes = Int32Array::from_iter_values(values.iter().map(|&c| c as i32));
                Arc::new(
                    DictionaryArray::<Int32Type>::try_new(codes, dict)
                        .map_err(|e| bad(format!("group key {}: {e}", field.name())))?,
                )
            }
            (GroupKey::Dictionary { .. }, _) => {
                let dict = g.dictionaries[id]
                    .clone()
                    .ok_or_else(|| bad("a dictionary key with no dictionary".into()))?;
                let codes = Int32Array::from_iter_values(values.iter().map(|&c| c as i32));
                let taken = arrow_select_take(&dict, &codes)?;
                if taken.data_type() != ty {
                    return Err(bad(format!(
                        "group key {} is {}, declared {ty}",
                        field.name(),
                        taken.data_type()
                    )));
                }
                taken
            }
            (GroupKey::Register(_), _) => {
                int_array(values.iter().map(|&v| Some(v as i128)), ty, field.name())?
            }
            (GroupKey::Build { join, column }, _) => {
                let rows: Vec<u32> = values.iter().map(|&r| r as u32).collect();
                match &self.builds[*join].columns[*column] {
                    Kept::Int(v) => int_array(
                        rows.iter().map(|&r| Some(v.get(r as usize) as i128)),
                        ty,
                        field.name(),
                    )?,
                    &Kept::Late { column, places } => {
                        let p = &self.builds[*join].places[places];
                        let at: Vec<u64> = rows.iter().map(|&r| p.rows[r as usize]).collect();
                        let taken = read_places(&p.reader, column, &at)?;
                        if taken.data_type() == ty {
                            taken
                        } else {
                            arrow_cast::cast(&taken, ty)
                                .map_err(|e| bad(format!("group key {}: {e}", field.name())))?
                        }
                    }
                }
            }
        })
    }

    /// The table with groups that differ only in the build rows they were told apart by
    /// merged: one group per distinct tuple of key values, as the host's aggregate sees them
    /// (late strings read back). Then every group is a whole group of the SQL.
    fn regroup(&self, g: Groups) -> Result<Groups> {
        let keys = self.keys();
        // A key's value per group where the table holds it (a dictionary code, a register, a
        // build column kept by value), or the place of its row where the value is a late
        // string, never read here.
        let late = |k: usize| match keys[k] {
            GroupKey::Build { join, column } => match &self.builds[join].columns[column] {
                &Kept::Late { places, .. } => Some(&self.builds[join].places[places]),
                Kept::Int(_) => None,
            },
            _ => None,
        };
        let value = |g: &Groups, k: usize, i: usize| -> i64 {
            let v = g.keys[self.key_identity[k]][i];
            match (&keys[k], late(k)) {
                (_, Some(p)) => p.rows[v as usize] as i64,
                (&GroupKey::Build { join, column }, None) => {
                    match &self.builds[join].columns[column] {
                        Kept::Int(values) => values.get(v as usize),
                        Kept::Late { .. } => v,
                    }
                }
                _ => v,
            }
        };
        // Groups whose keys are the same values or the same rows are one group.
        let g = merge_by_values(g, self.aggs(), keys.len(), value);
        // Others may still share every value, where late strings at different rows are equal:
        // only groups that share all the other keys need their strings read back.
        let late_keys: Vec<usize> = (0..keys.len()).filter(|&k| late(k).is_some()).collect();
        if late_keys.is_empty() {
            return Ok(g);
        }
        let mut bucket: HashMap<Vec<i64>, u32, BuildHasherDefault<MulHasher>> = HashMap::default();
        let coarse = |i: usize| -> Vec<i64> {
            (0..keys.len())
                .filter(|k| !late_keys.contains(k))
                .map(|k| value(&g, k, i))
                .collect()
        };
        for i in 0..g.len {
            *bucket.entry(coarse(i)).or_insert(0) += 1;
        }
        let shared: Vec<u32> = (0..g.len as u32)
            .filter(|&i| bucket[&coarse(i as usize)] > 1)
            .collect();
        if shared.is_empty() {
            return Ok(g);
        }
        let bad = |e: arrow_schema::ArrowError| Error::Offload {
            detail: format!("regrouping the device's groups: {e}"),
        };
        let sub = g.subset(&shared);
        let fields = self.schema.fields();
        let arrays: Vec<ArrayRef> = (0..keys.len())
            .map(|k| self.key_array(&sub, k, &fields[k]))
            .collect::<Result<_>>()?;
        let converter = RowConverter::new(
            arrays
                .iter()
                .map(|a| SortField::new(a.data_type().clone()))
                .collect(),
        )
        .map_err(bad)?;
        let rows = converter.convert_columns(&arrays).map_err(bad)?;
        // Each group's first group with the same values.
        let mut canon: Vec<u32> = (0..g.len as u32).collect();
        let mut first: HashMap<Row<'_>, u32> = HashMap::with_capacity(shared.len());
        for (j, &i) in shared.iter().enumerate() {
            canon[i as usize] = *first.entry(rows.row(j)).or_insert(i);
        }
        Ok(merge_groups(g, self.aggs(), |_, i| canon[i]))
    }

    /// A NOP task's kept rows as a batch of its output schema (its kept columns), ordered by
    /// `order`'s leading keys kept by value and cut to its limit, rows tied with the last one
    /// kept included (a later key kept late is left to the host's sort); none without rows.
    fn emit_rows(
        &self,
        ints: &[Ints],
        places: &[Vec<u64>],
        order: Option<&Order>,
        counters: &Counters,
    ) -> Result<Option<RecordBatch>> {
        let n = ints
            .iter()
            .map(Ints::len)
            .chain(places.iter().map(Vec::len))
            .max()
            .unwrap_or(0);
        if n == 0 {
            return Ok(None);
        }
        let picks = match order {
            Some(order) => {
                let picks = first_rows(&self.order_keys(ints, order), n, order.limit);
                Counters::add(&counters.groups_cut, (n - picks.len()) as u64);
                picks
            }
            None => (0..n as u32).collect(),
        };
        let bad = |detail: String| Error::Offload { detail };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.keep_as.len());
        for (i, field) in self.schema.fields().iter().enumerate() {
            let ty = field.data_type();
            let array = match self.keep_as.get(i) {
                Some(KeepAs::Int(_)) => int_array(
                    picks.iter().map(|&r| Some(ints[i].get(r as usize) as i128)),
                    ty,
                    field.name(),
                )?,
                Some(&KeepAs::Late { origin, column }) => {
                    let at: Vec<u64> = picks.iter().map(|&r| places[origin][r as usize]).collect();
                    let reader = self.origin_reader(self.origins[origin]);
                    let taken = read_places(&reader, column, &at)?;
                    if taken.data_type() == ty {
                        taken
                    } else {
                        arrow_cast::cast(&taken, ty)
                            .map_err(|e| bad(format!("column {}: {e}", field.name())))?
                    }
                }
                None => return Err(bad(format!("output column {} is not kept", field.name()))),
            };
            columns.push(array);
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .map(Some)
            .map_err(|e| bad(format!("the rows sent do not fit the output schema: {e}")))
    }

    /// The leading sort keys of a NOP task's rows that it keeps by value, with whether each is
    /// descending (a key kept late ends them: the host's sort orders by it).
    fn order_keys<'i>(&self, ints: &'i [Ints], order: &Order) -> Vec<(&'i Ints, bool)> {
        order
            .keys
            .iter()
            .map_while(|k| match self.keep_as.get(k.column)? {
                KeepAs::Int(_) => Some((ints.get(k.column)?, k.descending)),
                KeepAs::Late { .. } => None,
            })
            .collect()
    }

    /// A group table as a batch of the task's output schema.
    fn emit_groups(&self, g: &Groups) -> Result<RecordBatch> {
        let schema = &self.schema;
        let aggs = self.aggs();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        let bad = |detail: String| Error::Offload { detail };
        for (field, emit) in schema.fields().iter().zip(&self.emit) {
            let ty = field.data_type();
            let array: ArrayRef = match *emit {
                Emit::Key(k) => self.key_array(g, k, field)?,
                Emit::State(a, f) => {
                    let agg = &aggs[a];
                    let (acc, count) = (&g.acc[a], &g.count[a]);
                    let seen = |i: usize| count[i] > 0;
                    match (agg.func, f) {
                        (AggFunc::Count | AggFunc::CountAll, _) => match ty {
                            DataType::Int64 => Arc::new(Int64Array::from(count.clone())),
                            DataType::UInt64 => Arc::new(UInt64Array::from_iter_values(
                                count.iter().map(|&c| c as u64),
                            )),
                            other => return Err(bad(format!("a count emitted as {other}"))),
                        },
                        (AggFunc::Avg, 0) => match ty {
                            DataType::UInt64 => Arc::new(UInt64Array::from_iter_values(
                                count.iter().map(|&c| c as u64),
                            )),
                            DataType::Int64 => Arc::new(Int64Array::from(count.clone())),
                            other => {
                                return Err(bad(format!("an average's count emitted as {other}")))
                            }
                        },
                        (AggFunc::Sum | AggFunc::Avg, _) => {
                            let values = (0..g.len).map(|i| seen(i).then_some(acc[i]));
                            match ty {
                                DataType::Float64 => {
                                    let div = 10f64.powi(agg.scale as i32);
                                    Arc::new(Float64Array::from_iter(
                                        values.map(|v| v.map(|v| v as f64 / div)),
                                    ))
                                }
                                _ => int_array(values, ty, field.name())?,
                            }
                        }
                        (AggFunc::Min | AggFunc::Max, _) => int_array(
                            (0..g.len).map(|i| seen(i).then_some(acc[i])),
                            ty,
                            field.name(),
                        )?,
                    }
                }
            };
            columns.push(array);
        }
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
            bad(format!(
                "the emitted rows do not fit the output schema: {e}"
            ))
        })
    }
}

/// The proleptic Gregorian year of a day number (days since 1970-01-01): the civil-from-days
/// calculation in 400-year eras, exact for every i64 date a Date32 can hold.
fn year_of_days(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let january_or_february = mp >= 10;
    yoe + era * 400 + i64::from(january_or_february)
}

/// Register `r` as `n` values: a constant filled out.
fn filled<'a>(
    regs: &'a [Cow<'_, [i64]>],
    consts: &[Option<i64>],
    r: usize,
    n: usize,
) -> Cow<'a, [i64]> {
    match consts[r] {
        Some(v) if regs[r].len() != n => Cow::Owned(vec![v; n]),
        _ => Cow::Borrowed(&regs[r]),
    }
}

/// `x op y` row by row (0 add, 1 subtract, 2 multiply), or none where a row overflows.
fn checked_op(code: u8, x: &[i64], y: &[i64]) -> Option<Vec<i64>> {
    x.iter()
        .zip(y)
        .map(|(&p, &q)| match code {
            0 => p.checked_add(q),
            1 => p.checked_sub(q),
            _ => p.checked_mul(q),
        })
        .collect()
}

/// A block's transformer registers, with a bound on each register's magnitudes.
struct Registers<'a> {
    values: Vec<Cow<'a, [i64]>>,
    bounds: Vec<u64>,
}

/// Whether `x op y` cannot overflow 64 bits on any row, by the operands' largest magnitudes.
fn no_overflow(op: &Op, x: &[i64], y: &[i64]) -> bool {
    let (a, b) = (arch::max_abs::run(x), arch::max_abs::run(y));
    match op {
        Op::Add(..) | Op::Sub(..) => a.checked_add(b).is_some_and(|t| t <= i64::MAX as u64),
        _ => a.checked_mul(b).is_some_and(|t| t <= i64::MAX as u64),
    }
}

/// Whether `values`, each of magnitude at most `bound`, sum in 64 bits without overflow,
/// whatever their order (every partial sum is bounded by n * bound).
fn sums_in_i64(values: &[i64], bound: u64) -> bool {
    bound
        .checked_mul(values.len() as u64)
        .is_some_and(|t| t <= i64::MAX as u64)
}

/// The exact sum of a block (values of magnitude at most `bound`): in 64 bits (vectorised)
/// when it cannot overflow, else 128.
fn exact_sum(values: &[i64], bound: u64) -> i128 {
    if sums_in_i64(values, bound) {
        arch::sum::run(values) as i128
    } else {
        values.iter().map(|&v| v as i128).sum()
    }
}

/// Groups few enough that a compare-and-add pass per group (vectorised) beats a scatter.
const FEW_GROUPS: usize = 8;

/// Adds a block's values into their groups' 128-bit sums. With few groups, four interleaved
/// 64-bit partial sums per group break the chain of dependent adds on a hot group (rows of a
/// block fall on the same few groups, as in TPC-H Q1's four).
fn sum_by_group(ids: &[u32], values: &[i64], bound: u64, acc: &mut [i128]) {
    let groups = acc.len();
    if groups <= FEW_GROUPS && sums_in_i64(values, bound) {
        let mut part = vec![0i64; groups];
        arch::group_sums::run(ids, values, &mut part);
        for (a, p) in acc.iter_mut().zip(part) {
            *a += p as i128;
        }
    } else if groups <= 1024 && groups <= ids.len() && sums_in_i64(values, bound) {
        let mut part = vec![0i64; groups * 4];
        let mut chunks = ids.chunks_exact(4).zip(values.chunks_exact(4));
        for (g, v) in &mut chunks {
            part[g[0] as usize * 4] += v[0];
            part[g[1] as usize * 4 + 1] += v[1];
            part[g[2] as usize * 4 + 2] += v[2];
            part[g[3] as usize * 4 + 3] += v[3];
        }
        let tail = ids.len() / 4 * 4;
        for (&g, &v) in ids[tail..].iter().zip(&values[tail..]) {
            part[g as usize * 4] += v;
        }
        for (a, p) in acc.iter_mut().zip(part.chunks_exact(4)) {
            *a += p.iter().map(|&x| x as i128).sum::<i128>();
        }
    } else {
        // Ids beyond the groups (rows a block's mask leaves out) add nothing.
        for (&g, &v) in ids.iter().zip(values) {
            if let Some(a) = acc.get_mut(g as usize) {
                *a += v as i128;
            }
        }
    }
}

fn arrow_select_take(values: &ArrayRef, codes: &Int32Array) -> Result<ArrayRef> {
    arrow_select::take::take(values.as_ref(), codes, None).map_err(|e| Error::Offload {
        detail: format!("cannot emit a dictionary key: {e}"),
    })
}

/// Exact integers as an array of an integer, date or decimal type; out of range is an error.
/// An integer-like array's values as 64-bit integers (decimals as their unscaled values);
/// none for other types, nulls, or a decimal beyond 64 bits.
fn integers(array: &ArrayRef) -> Option<Vec<i64>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, Decimal128Type, Int32Type as I32, Int64Type};
    if array.null_count() > 0 {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().values().to_vec(),
        DataType::Int32 => array
            .as_primitive::<I32>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::Date32 => array
            .as_primitive::<Date32Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::Decimal128(..) => array
            .as_primitive::<Decimal128Type>()
            .values()
            .iter()
            .map(|&v| i64::try_from(v).ok())
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    })
}

fn int_array(
    values: impl Iterator<Item = Option<i128>>,
    ty: &DataType,
    name: &str,
) -> Result<ArrayRef> {
    let range = |v: i128| Error::Offload {
        detail: format!("{name}: {v} does not fit {ty}"),
    };
    Ok(match ty {
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter(values)
                .with_precision_and_scale(*p, *s)
                .map_err(|e| Error::Offload {
                    detail: format!("{name}: {e}"),
                })?,
        ),
        DataType::Int64 => Arc::new(Int64Array::from(
            values
                .map(|v| {
                    v.map(|v| i64::try_from(v).map_err(|_| range(v)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?,
        )),
        DataType::Int32 => Arc::new(Int32Array::from(
            values
                .map(|v| {
                    v.map(|v| i32::try_from(v).map_err(|_| range(v)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?,
        )),
        DataType::Date32 => Arc::new(Date32Array::from(
            values
                .map(|v| {
                    v.map(|v| i32::try_from(v).map_err(|_| range(v)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?,
        )),
        DataType::Boolean => Arc::new(BooleanArray::from(
            values.map(|v| v.map(|v| v != 0)).collect::<Vec<_>>(),
        )),
        other => {
            return Err(Error::Offload {
                detail: format!("{name}: the device does not emit {other}"),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run is read in its order; lanes sharing a queue read every page exactly once between
    /// them, however the threads interleave.
    #[test]
    fn lane_pages_read_every_page_once() {
        let run = LanePages::Run(vec![7, 3, 9]);
        let mut taken = 0;
        let read: Vec<usize> = std::iter::from_fn(|| run.next(&mut taken)).collect();
        assert_eq!(read, [7, 3, 9]);
        assert_eq!(run.next(&mut taken), None);

        let pages: Vec<usize> = (0..10_000).map(|p| p * 3 + 1).collect();
        let queue = Arc::new((pages.clone(), AtomicUsize::new(0)));
        let mut read: Vec<usize> = std::thread::scope(|scope| {
            let lanes: Vec<_> = (0..4)
                .map(|_| {
                    let source = LanePages::Shared(queue.clone());
                    scope.spawn(move || {
                        let mut taken = 0;
                        let mut mine = Vec::new();
                        while let Some(page) = source.next(&mut taken) {
                            mine.push(page);
                        }
                        // Pages come in queue order within a lane.
                        assert!(mine.windows(2).all(|w| w[0] < w[1]));
                        mine
                    })
                })
                .collect();
            lanes.into_iter().flat_map(|l| l.join().unwrap()).collect()
        });
        read.sort_unstable();
        assert_eq!(read, pages);
    }

    /// Counted groups' rows ordered by every key as Arrow sorts them (strings by bytes,
    /// descending, nulls placed), and a limit keeping the rows tied with the last on every key.
    #[test]
    fn ordered_rows_sort_by_every_key_and_keep_ties_under_a_limit() {
        let names: ArrayRef = Arc::new(arrow_array::StringArray::from(vec![
            Some("b"),
            Some("a"),
            None,
            Some("c"),
            Some("a"),
        ]));
        let counts: ArrayRef = Arc::new(Int64Array::from(vec![3, 3, 1, 5, 2]));
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("count", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(schema, vec![names, counts]).unwrap();
        let key = |column, descending, nulls_first| SortKey {
            column,
            descending,
            nulls_first,
        };
        let text = |b: &RecordBatch| -> Vec<(Option<String>, i64)> {
            let n = b.column(0).as_string::<i32>();
            let c = b.column(1).as_primitive::<Int64Type>();
            (0..b.num_rows())
                .map(|i| (n.is_valid(i).then(|| n.value(i).to_string()), c.value(i)))
                .collect()
        };
        let s = |v: &str| Some(v.to_string());
        let by_count_then_name = Order {
            keys: vec![key(1, true, false), key(0, false, true)],
            limit: None,
        };
        assert_eq!(
            text(&ordered_rows(&batch, &by_count_then_name).unwrap()),
            vec![
                (s("c"), 5),
                (s("a"), 3),
                (s("b"), 3),
                (s("a"), 2),
                (None, 1)
            ]
        );
        let names_last_first = Order {
            keys: vec![key(0, true, false), key(1, false, false)],
            limit: None,
        };
        assert_eq!(
            text(&ordered_rows(&batch, &names_last_first).unwrap()),
            vec![
                (s("c"), 5),
                (s("b"), 3),
                (s("a"), 2),
                (s("a"), 3),
                (None, 1)
            ]
        );
        // TOPK 2 by count: the two counts of 3 tie for second place, both sent.
        let top_two = Order {
            keys: vec![key(1, true, false)],
            limit: Some(2),
        };
        let mut got = text(&ordered_rows(&batch, &top_two).unwrap());
        got[1..].sort();
        assert_eq!(got, vec![(s("c"), 5), (s("a"), 3), (s("b"), 3)]);
        // A limit beyond the rows keeps them all; a key beyond the columns is an error.
        let all = Order {
            keys: vec![key(1, false, false)],
            limit: Some(9),
        };
        assert_eq!(ordered_rows(&batch, &all).unwrap().num_rows(), 5);
        let beyond = Order {
            keys: vec![key(2, false, false)],
            limit: None,
        };
        assert!(ordered_rows(&batch, &beyond)
            .unwrap_err()
            .to_string()
            .contains("no column 2"));
    }

    #[test]
    fn years_of_days_equal_arrows_date_part() {
        use arrow_arith::temporal::{date_part, DatePart};
        let days: Vec<i32> = (-800_000..800_000)
            .step_by(7)
            .chain([-1, 0, 59, 60, 11_016, 11_017])
            .collect();
        let array = Date32Array::from(days.clone());
        let want = date_part(&array, DatePart::Year).unwrap();
        let want = want.as_primitive::<Int32Type>();
        for (i, &d) in days.iter().enumerate() {
            assert_eq!(year_of_days(d as i64), want.value(i) as i64, "day {d}");
        }
    }

    #[test]
    fn like_matches_sql_patterns() {
        for (text, pattern, want) in [
            ("PROMO BRUSHED TIN", "PROMO%", true),
            ("STANDARD BRASS", "%BRASS", true),
            ("forest green", "%green%", true),
            ("abc", "a_c", true),
            ("abc", "a_", false),
            ("", "%", true),
            ("", "_", false),
            ("aaa", "%a%a%a%", true),
            ("aa", "%a%a%a%", false),
            ("special requests", "%special%requests%", true),
            ("13-719-553-3346", "13%", true),
            ("1", "13%", false),
            ("", "", true),
            ("a", "", false),
            ("%", "%", true),
            ("ab", "%b", true),
            ("ab", "%a", false),
            ("crème brûlée", "crème%", true),
            ("crème brûlée", "cr_me%", true),
            ("crème brûlée", "%br_l%", true),
            ("crème", "cr_e", false),
        ] {
            assert_eq!(like(text, pattern), want, "{text:?} LIKE {pattern:?}");
            let m = LikeMatcher::new(pattern);
            assert_eq!(
                m.matches(text),
                want,
                "{text:?} LIKE {pattern:?} (read once)"
            );
        }
    }
}
