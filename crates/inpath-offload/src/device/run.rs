//! Running a graph: its builds and tasks on the device's lanes, page runs per lane, and the
//! finisher that merges what the lanes produced.

use super::compare::BLOCK;
use super::emit::integers;
use super::finish::{finish_groups, finish_rows, LaneRows};
use super::groups::Groups;
use super::lane::{Lane, LanePages};
use super::prepare::{KeepAs, Prepared};
use super::stats::{Counters, DeviceStats};
use super::stream::{output_schema, DeviceStream, PlanHold};
use super::{Device, LocalDevice};
use crate::graph::{
    AggFunc, Comparator, JoinMethod, MaskSource, Operator, Source, TableTask, TaskGraph,
};
use crate::join::{Built, Ints, Kept, Places};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema};
use inpath_table::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;

impl LocalDevice {
    /// Runs a build (NOP) task on every lane and indexes its kept rows by `key`.
    pub(super) fn build(
        &self,
        task: &TableTask,
        built: &[Option<Arc<Built>>],
        join: &crate::graph::Join,
        reserve: u64,
    ) -> Result<Built> {
        let (keys, method) = (&join.build_keys, join.method);
        // A residual condition reads the build rows' values: no presence bitmap then.
        let presence_only = matches!(
            join.kind,
            crate::graph::JoinKind::Semi | crate::graph::JoinKind::Anti
        ) && join.residual.is_none()
            && join.condition.is_none();
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
                    memory: false,
                    detail: format!(
                        "a residual join condition on columns of {} not kept by value",
                        task.table
                    ),
                });
            }
            plan.summarize = Some(r.build);
        }
        let budget = self.memory_budget.saturating_sub(held + reserve);
        // A semi or anti join on one integer column, nothing else kept: each lane sets the
        // keys' bits in a bitmap over the column's zone-map range, instead of keeping every
        // row's key for a bitmap made afterwards (TPC-H Q22's 15 M order keys per customer
        // at SF 10: 60 MB kept, copied and faulted in, for a 190 KB bitmap), where the lanes'
        // bitmaps take at most an eighth of the memory left.
        if presence_only && method == JoinMethod::Auto && keys.len() == 1 && keys[0] == 0 {
            if let [Source::Column(column)] = task.keep[..] {
                let by_value = matches!(plan.keep_as[..], [KeepAs::Int(_)]);
                let integer = matches!(
                    plan.reader.schema().field(column).data_type(),
                    DataType::Int64 | DataType::Int32 | DataType::Date32
                );
                let lanes = self.lanes as u64;
                plan.presence = plan
                    .column_range(column)
                    .filter(|&(_, span)| {
                        by_value && integer && span.div_ceil(64) * 8 * lanes <= budget / 8
                    })
                    .and_then(|(least, span)| Some((least, usize::try_from(span).ok()?)));
            }
        }
        type Part = (Vec<Ints>, Vec<Vec<u64>>, Vec<u64>, u64);
        let parts: Vec<Result<Part>> = self.on_lanes(&plan, budget, |lane| {
            (
                std::mem::take(&mut lane.kept_ints),
                std::mem::take(&mut lane.kept_places),
                std::mem::take(&mut lane.present),
                lane.present_rows,
            )
        })?;
        if let Some((least, span)) = plan.presence {
            let mut bits = vec![0u64; span.div_ceil(64)];
            let mut rows = 0u64;
            for lane in parts {
                let (_, _, present, n) = lane?;
                for (all, part) in bits.iter_mut().zip(&present) {
                    *all |= part;
                }
                rows += n;
            }
            let b = Built::presence(least, bits, task.keep.len(), rows as usize);
            Counters::add(&self.counters.rows_kept, rows);
            return self.within_budget(b, budget, || format!("the key bitmap of {}", task.table));
        }
        // The lanes' rows in lane order: pages in table order.
        let mut ints: Vec<Ints> = vec![Ints::default(); task.keep.len()];
        let mut places: Vec<Vec<u64>> = vec![Vec::new(); plan.origins.len()];
        for lane in parts {
            let (i, p, _, _) = lane?;
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
        let rows = b.len();
        self.within_budget(b, budget, || {
            format!(
                "the {rows} rows table {} keeps for a join ({} KiB kept for the last task's \
                 pages)",
                task.table,
                reserve >> 10
            )
        })
    }

    /// `b`, or (when it takes more than the `budget` bytes left) a decline for memory naming
    /// `what` it is, with the overflow noted for the passes.
    fn within_budget(&self, b: Built, budget: u64, what: impl Fn() -> String) -> Result<Built> {
        if b.bytes() <= budget {
            return Ok(b);
        }
        self.counters
            .note_overflow(b.bytes() as f64 / self.memory_budget.max(1) as f64);
        Err(Error::DeviceDeclined {
            memory: true,
            detail: format!(
                "{} take {} KiB; the device has {} KiB left of {} KiB",
                what(),
                b.bytes().div_ceil(1024),
                budget >> 10,
                self.memory_budget >> 10
            ),
        })
    }

    /// Runs a build task's plan on every lane over its pages (after zone maps), `budget`
    /// bytes shared among the lanes; `take` collects what each lane holds at its end, in lane
    /// order (pages in table order).
    pub(super) fn on_lanes<T: Send>(
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
                        lane.whole_share = self.memory_budget / lanes as u64;
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
    pub(super) fn build_groups(
        &self,
        task: &TableTask,
        built: &[Option<Arc<Built>>],
        join: &crate::graph::Join,
        reserve: u64,
    ) -> Result<Built> {
        let declined = |detail: String| Error::DeviceDeclined {
            detail,
            memory: false,
        };
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
        plan.complete_key = plan.disjoint_key();
        let budget = self.memory_budget.saturating_sub(held + reserve);
        let parts = self.on_lanes(&plan, budget, |lane| {
            let groups = std::mem::replace(&mut lane.groups, Groups::new(0, 0));
            let finished = std::mem::replace(&mut lane.finished, Groups::new(0, 0));
            let g =
                Groups::concatenated(vec![groups, finished]).unwrap_or_else(|| Groups::new(0, 0));
            (g, lane.avg_exact.clone())
        })?;
        let mut tables = Vec::new();
        let mut avg_exact = vec![(true, 0u64); plan.aggs().len()];
        for part in parts {
            let (g, exact) = part?;
            tables.push(g);
            for (all, lane) in avg_exact.iter_mut().zip(exact) {
                *all = (all.0 && lane.0, all.1.max(lane.1));
            }
        }
        let group_bytes: u64 = tables.iter().map(Groups::bytes).sum();
        self.counters.hold(group_bytes);
        let rows = (|| {
            let Some(groups) = Groups::merged(tables, plan.aggs()) else {
                return Ok(None);
            };
            let groups = plan.having(plan.regroup(groups)?);
            // An average a later join compares is the host's: its sum of doubles, added in
            // any order. That is the exact sum only while every value is whole at its scale
            // and no sum reaches 2^53; otherwise the host decides (TPC-H Q17's quantities
            // are whole; an average of prices is not).
            for (a, agg) in plan.aggs().iter().enumerate() {
                if agg.func != AggFunc::Avg {
                    continue;
                }
                let (whole, bound) = avg_exact[a];
                let unit = 10u128.pow(agg.scale.max(0) as u32);
                let most = groups.count[a].iter().copied().max().unwrap_or(0).max(0) as u128;
                if !whole || most * u128::from(bound) / unit >= 1 << 53 {
                    return Err(declined(format!(
                        "an average over {} compared by a join: its values are not whole at \
                         scale {}, or its sums reach 2^53, so the host's sum of doubles may \
                         round where the device's exact sum does not",
                        task.table, agg.scale
                    )));
                }
            }
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
            matches!(
                join.kind,
                crate::graph::JoinKind::Semi | crate::graph::JoinKind::Anti
            ) && join.condition.is_none(),
            budget,
        )?;
        Counters::add(&self.counters.rows_kept, b.len() as u64);
        let groups = b.len();
        self.within_budget(b, budget, || {
            format!("the {groups} groups of {} kept for a join", task.table)
        })
    }
}

/// Runs `body`; if it panics, the stream gets an error naming `what` instead of ending as if
/// complete (a lane that dies must never look like a lane that found nothing).
pub(super) fn failing_loudly(
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
pub(super) fn spawn_finisher(
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
pub(super) fn lane_runs(pages: &[usize], lanes: usize) -> Vec<&[usize]> {
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

/// The builds of a task's joins, in join order.
pub(super) fn join_builds(
    task: &TableTask,
    built: &[Option<Arc<Built>>],
) -> Result<Vec<Arc<Built>>> {
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

impl LocalDevice {
    /// Runs `graph` as it is: its builds, then its last task's lanes. A graph whose held rows
    /// outgrow the memory declines (`memory: true`); with `remember_as`, that graph (as its
    /// JSON) is counted as refused and declined at once from then on, before any build runs.
    pub(super) fn start(
        &self,
        graph: &TaskGraph,
        remember_as: Option<&Arc<String>>,
    ) -> Result<DeviceStream> {
        let shared_text = remember_as.cloned();
        let remember = || {
            if let (Some(text), Ok(mut d)) = (remember_as, self.declined.lock()) {
                Counters::add(&self.counters.graphs_refused, 1);
                d.insert(text.as_ref().clone());
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
        let whole_share = self.memory_budget / self.lanes as u64;
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
                        lane.whole_share = whole_share;
                        let result = lane.run(&run, &cancel, &mut |batch| {
                            Counters::add(
                                &counters.bytes_sent,
                                batch.get_array_memory_size() as u64,
                            );
                            tx.send(Ok(batch)).is_ok()
                        });
                        if let (Ok(()), Some(finisher)) = (&result, finisher) {
                            // The table passes to the finisher with the bytes held for it:
                            // counted once, by the lane until here and by the finisher after
                            // (it releases them), never twice.
                            lane.account_groups();
                            let groups = std::mem::replace(&mut lane.groups, Groups::new(0, 0));
                            let bytes = std::mem::take(&mut lane.held);
                            if finisher.send((groups, lane.spilled)).is_err() {
                                counters.release(bytes);
                            }
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
                            if let (Error::DeviceDeclined { .. }, Some(text)) = (&e, &text) {
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
}

impl LocalDevice {
    /// The checks every submitted graph passes, then whether it declined before under the
    /// name `text` (counted as refused again).
    fn admit(&self, graph: &TaskGraph, text: &str) -> Result<()> {
        graph.check()?;
        if graph.version > crate::GRAPH_VERSION {
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
        let declined = self
            .declined
            .lock()
            .map(|g| g.contains(text))
            .unwrap_or(false);
        if declined {
            Counters::add(&self.counters.graphs_refused, 1);
            return Err(Error::DeviceDeclined {
                detail: "this graph outgrew the device's memory before".into(),
                memory: true,
            });
        }
        Ok(())
    }
}

impl Device for LocalDevice {
    fn submit(&self, graph: &TaskGraph) -> Result<DeviceStream> {
        let text = Arc::new(graph.to_json());
        self.admit(graph, &text)?;
        let graph = &*self.reduced(graph);
        // A graph the device can split into key-range passes runs through a driver that
        // tries it whole first (or goes straight to the passes that worked before); any other
        // runs as it is, and is remembered when it declines.
        match self.partitioning(graph) {
            Some(parting) => Ok(self.passes(graph.clone(), parting, text, None)),
            None => self.start(graph, Some(&text)),
        }
    }

    fn submit_whole(&self, graph: &TaskGraph) -> Result<DeviceStream> {
        // Remembered apart from the graph's own name: declining whole says nothing of passes.
        let own = Arc::new(graph.to_json());
        let text = Arc::new(format!("whole {own}"));
        self.admit(graph, &text)?;
        let graph = &*self.reduced(graph);
        match self.partitioning(graph) {
            // Its whole attempt through the passes' driver, which notes what the passes would
            // start from when it declines, so that a later run in passes skips it.
            Some(parting) => Ok(self.passes(graph.clone(), parting, own, Some(text))),
            None => self.start(graph, Some(&text)),
        }
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
            graphs_partitioned: get(&c.graphs_partitioned),
            passes: get(&c.passes),
            spill_bytes: get(&c.spill_bytes),
        }
    }

    fn memory_budget(&self) -> u64 {
        self.memory_budget
    }

    fn passes_plan(&self, graph: &TaskGraph) -> Option<super::PassesPlan> {
        self.plan_passes(&self.reduced(graph))
    }

    fn device_graph(&self, graph: &TaskGraph) -> super::DeviceGraph {
        let run = self.reduced(graph).into_owned();
        super::DeviceGraph {
            reductions: super::reduce::described(graph, &run, &self.tables),
            graph: run,
        }
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
            &c.graphs_partitioned,
            &c.passes,
            &c.spill_bytes,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        c.peak_memory
            .store(c.memory.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}
