//! The planner side: one DataFusion physical optimizer rule that finds sub-trees the device
//! can run and replaces each with a [`DeviceExec`] running its Table Task graph.
//!
//! `AggregateExec(Partial) <- [Projection...] <- scan` becomes AGGREGATE or AGGREGATE_GROUPBY
//! emitting exactly the Partial schema, so the host's Final aggregate merges the device's
//! partial groups (spilled ones included) unchanged. A `SortExec` above that aggregate (through
//! the Final aggregate, column projections and repartitions) adds SORT, or with a fetch TOPK,
//! to the graph: the device then sends only the groups that can be in the result, and the
//! host's sort and limit stay, to order what arrives. Anything the device cannot run exactly
//! leaves the plan as it was, and the reason is kept for `explain --offload`.

use crate::sql::ColumnScanExec;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::JoinType;
use datafusion::common::NullEquality;
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator as SqlOp};
use datafusion::physical_expr::expressions::{
    BinaryExpr as PBinary, CaseExpr, CastExpr, Column as PColumn, InListExpr, LikeExpr, Literal,
    UnKnownColumn,
};
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_expr::scalar_subquery::ScalarSubqueryExpr;
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, ScalarFunctionExpr,
};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::PhysicalGroupBy;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    replace_children_if_necessary, DisplayAs, DisplayFormatType, ExecutionPlan,
    ExecutionPlanProperties, Partitioning, PlanProperties, SendableRecordBatchStream,
};
use inpath_offload::device::Device;
use inpath_offload::graph::{
    Agg, AggFunc, CmpOp, Comparator, CountGroups, GroupKey, Join, JoinKind, JoinMethod, MaskSource,
    Op, Operator, Order, Output, Program, Residual, Selector, SortKey, Source, TableTask,
    TaskGraph, Test,
};
use inpath_table::format::LogicalType;
use inpath_table::reader::TableReader;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

type DfResult<T> = datafusion::common::Result<T>;

/// The thesis's hardware limits (reference 001, part II), applied with `--fidelity thesis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Group buckets of the group-by aggregate.
    pub group_buckets: Option<usize>,
    /// Bytes of a group id.
    pub group_id_bytes: Option<usize>,
    /// Comparators of the Row Selector.
    pub comparators: Option<usize>,
    /// Processing elements x instructions of the Row Transformer.
    pub instructions: Option<usize>,
    /// Column read ports (columns read at once).
    pub read_ports: Option<usize>,
}

impl Limits {
    /// No limits: what the software device can do.
    pub const LIFTED: Limits = Limits {
        group_buckets: None,
        group_id_bytes: None,
        comparators: None,
        instructions: None,
        read_ports: None,
    };

    /// The thesis's: 1024 group buckets, 16-byte group ids, 4 comparators, 4 PEs x 8
    /// instructions, one read port.
    pub const THESIS: Limits = Limits {
        group_buckets: Some(1024),
        group_id_bytes: Some(16),
        comparators: Some(4),
        instructions: Some(32),
        read_ports: Some(1),
    };
}

/// What the rule decided about each aggregate it looked at, in plan order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What the device was asked to run: `aggregate`, or `rows` (a tree of joins whose rows
    /// go to the host under a sort with a limit).
    pub what: &'static str,
    /// The table the aggregate reads (when it reaches a scan).
    pub table: Option<String>,
    /// `None` when offloaded, else why not.
    pub declined: Option<String>,
    /// Thesis limits the task exceeds (reported; they decline it only under `--fidelity
    /// thesis`).
    pub limits_hit: Vec<String>,
}

/// The physical optimizer rule that offloads sub-trees to a device.
#[derive(Debug)]
pub struct OffloadRule {
    device: Arc<dyn Device>,
    limits: Limits,
    decisions: Arc<Mutex<Vec<Decision>>>,
    /// Whether a table's key column is unique ([`unique_key`]), by table and column: read
    /// once per session, not each time a statement is planned.
    unique_keys: Mutex<HashMap<(String, usize), bool>>,
}

impl OffloadRule {
    /// A rule handing work to `device`, within `limits`.
    pub fn new(device: Arc<dyn Device>, limits: Limits) -> OffloadRule {
        OffloadRule {
            device,
            limits,
            decisions: Arc::new(Mutex::new(Vec::new())),
            unique_keys: Mutex::new(HashMap::new()),
        }
    }

    /// The decisions since the last call (and forgets them).
    pub fn take_decisions(&self) -> Vec<Decision> {
        std::mem::take(&mut *self.decisions.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The device's memory budget in bytes.
    pub fn memory_budget(&self) -> u64 {
        self.device.memory_budget()
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The device running `partial` (a Partial aggregate), with what was decided about it;
    /// none when the device cannot run it.
    fn device_for(&self, partial: &Arc<AggregateExec>) -> (Decision, Option<DeviceExec>) {
        let (table, result) = aggregate_graph(partial, Orient::Planner);
        // Joins with the larger tables streaming: the graph run when the device cannot
        // hold the first one's builds.
        let alternate = match aggregate_graph(partial, Orient::LargestProbes).1 {
            Ok(g) if result.as_ref().is_ok_and(|first| *first != g) => Some(g),
            _ => None,
        };
        let limits_hit = match &result {
            Ok(graph) => thesis_limits_hit(graph),
            Err(_) => Vec::new(),
        };
        let result = result.and_then(|graph| {
            let over: Vec<String> = graph_exceeds(&graph, &self.limits)
                .into_iter()
                .filter(|(_, declines)| *declines)
                .map(|(what, _)| what)
                .collect();
            if over.is_empty() {
                Ok(graph)
            } else {
                Err(format!("over the thesis's limits: {}", over.join(", ")))
            }
        });
        match result {
            Ok(graph) => {
                let alternate =
                    alternate.filter(|g| graph_exceeds(g, &self.limits).iter().all(|h| !h.1));
                let host: Arc<dyn ExecutionPlan> = partial.clone();
                let exec = DeviceExec::new(
                    self.device.clone(),
                    graph,
                    alternate,
                    partial.schema(),
                    Some(host),
                );
                let decision = Decision {
                    what: "aggregate",
                    table,
                    declined: None,
                    limits_hit,
                };
                (decision, Some(exec))
            }
            Err(reason) => {
                let decision = Decision {
                    what: "aggregate",
                    table,
                    declined: Some(reason),
                    limits_hit,
                };
                (decision, None)
            }
        }
    }

    /// The rows of `input`, a tree of joins of scans (and of offloaded aggregates' groups)
    /// under a sort with a limit, sent by the device: a graph whose last task is NOP, its
    /// kept columns `input`'s, ordered by `keys` and cut to `limit` (TOPK, ties included; the
    /// host's sort still orders and cuts what arrives). None when the device cannot produce
    /// them: the plan stays as it is.
    fn rows_device(
        &self,
        input: &Arc<dyn ExecutionPlan>,
        keys: &[(usize, SortKey)],
        limit: usize,
    ) -> Option<DeviceExec> {
        // Rows of one table alone, unjoined, stay with the host's scan: a lane would keep
        // every selected row until its pages are done.
        let mut joins = 0;
        let _ = input.apply(|n| {
            joins += usize::from(n.is::<HashJoinExec>());
            Ok(TreeNodeRecursion::Continue)
        });
        if joins == 0 {
            return None;
        }
        let schema = input.schema();
        let graph = |orient: Orient| -> Result<TaskGraph, String> {
            let chain = chain_for(input, orient)?;
            if chain.grouped || !chain.filters.is_empty() {
                return Err("groups, or a filter on the rows sent".into());
            }
            let Chain {
                mut tasks, columns, ..
            } = chain;
            let fields = output_fields(&schema)?;
            let last = tasks.last_mut().ok_or("no task")?;
            last.keep = columns.iter().map(|c| c.src).collect();
            last.output = Output { fields };
            last.order = Some(Order {
                keys: keys.iter().map(|&(_, k)| k).collect(),
                limit: Some(limit),
            });
            let graph = TaskGraph {
                version: inpath_offload::GRAPH_VERSION,
                tasks,
            };
            graph.check().map_err(|e| e.to_string())?;
            if graph_exceeds(&graph, &self.limits).iter().any(|h| h.1) {
                return Err("over the thesis's limits".into());
            }
            Ok(graph)
        };
        let first = graph(Orient::Planner).ok()?;
        let alternate = graph(Orient::LargestProbes).ok().filter(|g| *g != first);
        self.decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Decision {
                what: "rows",
                table: first.tasks.last().map(|t| t.table.clone()),
                declined: None,
                limits_hit: thesis_limits_hit(&first),
            });
        Some(DeviceExec::new(
            self.device.clone(),
            first,
            alternate,
            schema,
            Some(input.clone()),
        ))
    }

    /// An inner join of a table's rows with an offloaded aggregate's groups (through
    /// filters and projections above its Final aggregate), on one of its group keys, where
    /// that table's key is unique: the join moved below the aggregate, so the device reads
    /// the table beside its pages too and groups by the joined columns as well (TPC-H Q15's
    /// supplier and `revenue0`). With a unique key each group meets at most one row of the
    /// table, so the groups are the same, less those without a match, as an inner join
    /// above them leaves; the filters above the aggregate read only its columns and commute
    /// with the join. `None` leaves the join as it is: when the device cannot run the
    /// moved aggregate, the host plan stays the one DataFusion chose.
    fn join_below_aggregate(
        &self,
        node: &Arc<dyn ExecutionPlan>,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(j) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(None);
        };
        if *j.join_type() != JoinType::Inner
            || j.filter().is_some()
            || j.null_aware
            || j.on().len() != 1
            || j.properties().output_ordering().is_some()
        {
            return Ok(None);
        }
        let column = |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<PColumn>().map(|c| c.index());
        let (Some(lk), Some(rk)) = (column(&j.on()[0].0), column(&j.on()[0].1)) else {
            return Ok(None);
        };
        for dim_left in [true, false] {
            let (dim, dk, gk) = if dim_left {
                (j.left(), lk, rk)
            } else {
                (j.right(), rk, lk)
            };
            let groups = if dim_left { j.right() } else { j.left() };
            if let Some(plan) = self.pushed_join(j, dim_left, dim, dk, groups, gk)? {
                return Ok(Some(plan));
            }
        }
        Ok(None)
    }

    /// [`Self::join_below_aggregate`] with the table's side (`dim`, its key column `dk`)
    /// and the groups' side (`groups`, its key column `gk`) named.
    fn pushed_join(
        &self,
        j: &HashJoinExec,
        dim_left: bool,
        dim: &Arc<dyn ExecutionPlan>,
        dk: usize,
        groups: &Arc<dyn ExecutionPlan>,
        gk: usize,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        // The table: a scan whose key column holds each value once.
        let below = under_pass_throughs(dim);
        let Some(scan) = below.downcast_ref::<ColumnScanExec>() else {
            return Ok(None);
        };
        let Some(&key_column) = scan.projection().get(dk) else {
            return Ok(None);
        };
        if scan.limit().is_some() || dim.schema().fields().len() != scan.projection().len() {
            return Ok(None);
        }
        // The groups: filters and projections over a Final aggregate over a device's Partial.
        let mut layers: Vec<Layer> = Vec::new();
        let mut node = groups.clone();
        let mut key = gk;
        let final_node = loop {
            if let Some(input) = passed_through(&node) {
                node = input.clone();
            } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
                let Some(c) = projected_column(p, key) else {
                    return Ok(None);
                };
                key = c;
                layers.push(Layer::Projection(p.expr().to_vec()));
                node = p.input().clone();
            } else if let Some(f) = node.downcast_ref::<FilterExec>() {
                let projection = f.projection().as_ref().map(|p| p.to_vec());
                if let Some(p) = &projection {
                    key = p[key];
                }
                layers.push(Layer::Filter(f.predicate().clone(), projection));
                node = f.input().clone();
            } else {
                break node;
            }
        };
        let Some(f) = final_node.downcast_ref::<AggregateExec>() else {
            return Ok(None);
        };
        let ng = f.group_expr().expr().len();
        if !matches!(
            f.mode(),
            AggregateMode::Final | AggregateMode::FinalPartitioned
        ) || f.group_expr().has_grouping_set()
            || key >= ng
        {
            return Ok(None);
        }
        let below = under_pass_throughs(f.input());
        let Some(device) = below.downcast_ref::<DeviceExec>() else {
            return Ok(None);
        };
        let Some(partial) = device
            .host
            .as_ref()
            .and_then(|h| h.downcast_ref::<AggregateExec>())
        else {
            return Ok(None);
        };
        if partial.group_expr().expr().len() != ng {
            return Ok(None);
        }
        // The group key down through the projections under the Partial aggregate, to the
        // rows the join will meet.
        let Some(mut key) = partial.group_expr().expr()[key]
            .0
            .downcast_ref::<PColumn>()
            .map(|c| c.index())
        else {
            return Ok(None);
        };
        let mut projections: Vec<Vec<ProjectionExpr>> = Vec::new();
        let mut rows = partial.input().clone();
        loop {
            if let Some(p) = rows.downcast_ref::<ProjectionExec>() {
                let Some(c) = projected_column(p, key) else {
                    return Ok(None);
                };
                key = c;
                projections.push(p.expr().to_vec());
                rows = p.input().clone();
            } else if let Some(input) = passed_through(&rows) {
                rows = input.clone();
            } else {
                break;
            }
        }
        let unique = *self
            .unique_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((scan.reader().table().to_string(), key_column))
            .or_insert_with(|| unique_key(scan.reader(), key_column));
        if !unique {
            return Ok(None);
        }
        // The table's columns the join's output reads, each a group key below.
        let ndim = dim.schema().fields().len();
        let nl = j.left().schema().fields().len();
        let width = nl + j.right().schema().fields().len();
        let out: Vec<usize> = match &j.projection {
            Some(p) => p.to_vec(),
            None => (0..width).collect(),
        };
        let side = |i: usize| -> (bool, usize) {
            match (dim_left, i < nl) {
                (true, true) => (true, i),
                (true, false) => (false, i - nl),
                (false, true) => (false, i),
                (false, false) => (true, i - nl),
            }
        };
        let mut needed: Vec<usize> = Vec::new();
        for &i in &out {
            if let (true, d) = side(i) {
                if !needed.contains(&d) {
                    needed.push(d);
                }
            }
        }
        let dim_name = |d: usize| dim.schema().field(d).name().clone();
        // The join, below the rows' projections: their columns, then the table's.
        let nr = rows.schema().fields().len();
        let on = vec![(
            Arc::new(PColumn::new(&dim_name(dk), dk)) as Arc<dyn PhysicalExpr>,
            Arc::new(PColumn::new(rows.schema().field(key).name(), key)) as Arc<dyn PhysicalExpr>,
        )];
        let joined: Arc<dyn ExecutionPlan> = Arc::new(HashJoinExec::try_new(
            dim.clone(),
            rows,
            on,
            None,
            &JoinType::Inner,
            Some((ndim..ndim + nr).chain(0..ndim).collect()),
            PartitionMode::CollectLeft,
            NullEquality::NullEqualsNothing,
            false,
        )?);
        let mut at: Vec<usize> = needed.iter().map(|&d| nr + d).collect();
        let mut input = joined.clone();
        for exprs in projections.iter().rev() {
            let mut exprs = exprs.clone();
            let first = exprs.len();
            for (k, &d) in needed.iter().enumerate() {
                let name = input.schema().field(at[k]).name().clone();
                let alias = fresh_name(&dim_name(d), exprs.iter().map(|e| e.alias.as_str()));
                exprs.push(ProjectionExpr {
                    expr: Arc::new(PColumn::new(&name, at[k])),
                    alias,
                });
                at[k] = first + k;
            }
            input = Arc::new(ProjectionExec::try_new(exprs, input)?);
        }
        // The Partial aggregate over the joined rows, grouped by the table's columns too.
        let mut group: Vec<(Arc<dyn PhysicalExpr>, String)> = partial.group_expr().expr().to_vec();
        for (k, &d) in needed.iter().enumerate() {
            let name = input.schema().field(at[k]).name().clone();
            let alias = fresh_name(&dim_name(d), group.iter().map(|(_, n)| n.as_str()));
            group.push((Arc::new(PColumn::new(&name, at[k])), alias));
        }
        let moved = Arc::new(AggregateExec::try_new(
            AggregateMode::Partial,
            PhysicalGroupBy::new_single(group),
            partial.aggr_expr().to_vec(),
            partial.filter_expr().to_vec(),
            input.clone(),
            input.schema(),
        )?);
        let (decision, Some(mut exec)) = self.device_for(&moved) else {
            return Ok(None);
        };
        exec.origin = Some(unsorted(device.origin.as_ref().unwrap_or(&device.graph)));
        self.decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(decision);
        let mut plan: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
            AggregateMode::Final,
            moved.group_expr().as_final(),
            moved.aggr_expr().to_vec(),
            moved.filter_expr().to_vec(),
            Arc::new(exec),
            input.schema(),
        )?);
        // The filters and projections again, the table's columns carried through them.
        let nd = needed.len();
        let mut map: Vec<usize> = (0..f.schema().fields().len())
            .map(|i| if i < ng { i } else { i + nd })
            .collect();
        let mut dims: Vec<usize> = (ng..ng + nd).collect();
        for layer in layers.iter().rev() {
            match layer {
                Layer::Filter(predicate, projection) => {
                    let mut filter = FilterExecBuilder::new(remap_columns(predicate, &map)?, plan);
                    if let Some(p) = projection {
                        let mut keep: Vec<usize> = p.iter().map(|&i| map[i]).collect();
                        keep.extend(&dims);
                        filter = filter.apply_projection(Some(keep))?;
                        map = (0..p.len()).collect();
                        dims = (p.len()..p.len() + nd).collect();
                    }
                    plan = Arc::new(filter.build()?);
                }
                Layer::Projection(exprs) => {
                    let mut moved_exprs = exprs
                        .iter()
                        .map(|e| {
                            Ok(ProjectionExpr {
                                expr: remap_columns(&e.expr, &map)?,
                                alias: e.alias.clone(),
                            })
                        })
                        .collect::<DfResult<Vec<_>>>()?;
                    let first = moved_exprs.len();
                    for &d in &dims {
                        let name = plan.schema().field(d).name().clone();
                        let alias = fresh_name(&name, moved_exprs.iter().map(|e| e.alias.as_str()));
                        moved_exprs.push(ProjectionExpr {
                            expr: Arc::new(PColumn::new(&name, d)),
                            alias,
                        });
                    }
                    map = (0..first).collect();
                    dims = (first..first + nd).collect();
                    plan = Arc::new(ProjectionExec::try_new(moved_exprs, plan)?);
                }
            }
        }
        // The join's output, named as it was.
        let schema = j.schema();
        let exprs = out
            .iter()
            .zip(schema.fields())
            .map(|(&i, field)| {
                let at = match side(i) {
                    (true, d) => dims[needed.iter().position(|&n| n == d).unwrap_or(0)],
                    (false, g) => map[g],
                };
                let name = plan.schema().field(at).name().clone();
                ProjectionExpr {
                    expr: Arc::new(PColumn::new(&name, at)),
                    alias: field.name().clone(),
                }
            })
            .collect::<Vec<_>>();
        plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        // As many partitions as the join gave the plan above it, hashed as they were.
        plan = match j.properties().output_partitioning() {
            // (A hash on a column the join's projection dropped is named by an unknown
            // column: no plan above can rely on it.)
            Partitioning::Hash(exprs, n) if *n > 1 && exprs.iter().all(known_columns) => Arc::new(
                RepartitionExec::try_new(plan, Partitioning::Hash(exprs.clone(), *n))?,
            ),
            p if p.partition_count() > 1 => Arc::new(RepartitionExec::try_new(
                plan,
                Partitioning::RoundRobinBatch(p.partition_count()),
            )?),
            _ => plan,
        };
        Ok(Some(plan))
    }
}

impl PhysicalOptimizerRule for OffloadRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let transformed = plan.transform_up(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            // A Single aggregate (one partition) is split as DataFusion splits it: the device
            // runs the Partial half, a host Final aggregate above it merges.
            let single = matches!(
                agg.mode(),
                AggregateMode::Single | AggregateMode::SinglePartitioned
            );
            let partial = if single {
                Arc::new(AggregateExec::try_new(
                    AggregateMode::Partial,
                    agg.group_expr().clone(),
                    agg.aggr_expr().to_vec(),
                    agg.filter_expr().to_vec(),
                    agg.input().clone(),
                    agg.input_schema(),
                )?)
            } else if *agg.mode() == AggregateMode::Partial {
                Arc::new(agg.clone())
            } else {
                // The Final half of a count the device finished (COUNT_GROUPS): its rows are
                // already one a group, so the device's stand in for it.
                return Ok(match finished_count(&node)? {
                    Some(exec) => Transformed::yes(exec),
                    None => Transformed::no(node),
                });
            };
            // The final host aggregate above a device's Partial, for a Single aggregate.
            let finish = |exec: Arc<dyn ExecutionPlan>| -> DfResult<Arc<dyn ExecutionPlan>> {
                Ok(if single {
                    Arc::new(AggregateExec::try_new(
                        AggregateMode::Final,
                        agg.group_expr().as_final(),
                        agg.aggr_expr().to_vec(),
                        agg.filter_expr().to_vec(),
                        exec,
                        agg.input_schema(),
                    )?)
                } else {
                    exec
                })
            };
            if let Some(exec) = counted_groups(&partial) {
                let mut decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
                decisions.push(Decision {
                    what: "aggregate",
                    table: exec.graph.tasks.last().map(|t| t.table.clone()),
                    declined: None,
                    limits_hit: Vec::new(),
                });
                let plan = finish(Arc::new(exec))?;
                let plan = finished_count(&plan)?.unwrap_or(plan);
                return Ok(Transformed::new(plan, true, TreeNodeRecursion::Continue));
            }
            let (decision, result) = self.device_for(&partial);
            self.decisions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(decision);
            match result {
                Some(exec) => Ok(Transformed::new(
                    finish(Arc::new(exec))?,
                    true,
                    TreeNodeRecursion::Continue,
                )),
                None => Ok(Transformed::no(node)),
            }
        })?;
        // Joins of a table's rows with an offloaded aggregate's groups, on a group key: moved
        // below the aggregate, into the device's graph.
        let transformed = transformed.data.transform_up(|node| {
            Ok(match self.join_below_aggregate(&node)? {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })?;
        // SORT and TOPK: a sort over an offloaded aggregate's groups.
        let sorted = transformed.data.transform_down(|node| {
            // The max or min of an offloaded aggregate's groups (Q15's `max(total_revenue)`):
            // the device sends the groups tied first by that column, TOPK 1.
            if let Some(key) = extreme_of_column(&node) {
                let input = node.children()[0].clone();
                return Ok(match ordered_device(&input, vec![key], Some(1))? {
                    Some(input) => Transformed::new(
                        replace_children_if_necessary(node.clone(), vec![input])?,
                        true,
                        TreeNodeRecursion::Jump,
                    ),
                    None => Transformed::no(node),
                });
            }
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            // The leading keys that are columns: ties on them are sent, so the host's sort
            // decides among them by the rest.
            let keys: Vec<(usize, SortKey)> = sort
                .expr()
                .iter()
                .map_while(|e| {
                    let c = e.expr.downcast_ref::<PColumn>()?;
                    let key = SortKey {
                        column: c.index(),
                        descending: e.options.descending,
                        nulls_first: e.options.nulls_first,
                    };
                    Some((c.index(), key))
                })
                .collect();
            let input = match ordered_device(sort.input(), keys.clone(), sort.fetch())? {
                Some(input) => Some(input),
                // TOPK over the rows of a tree of joins (Q2): the device sends the rows that
                // can be first.
                None => match sort.fetch() {
                    Some(limit) if !keys.is_empty() => self
                        .rows_device(sort.input(), &keys, limit)
                        .map(|d| Arc::new(d) as Arc<dyn ExecutionPlan>),
                    _ => None,
                },
            };
            match input {
                // A whole sort of a finished count's rows by their columns: the device's
                // order is the sort's, and the host has nothing left to do.
                Some(input)
                    if sort.fetch().is_none()
                        && keys.len() == sort.expr().len()
                        && is_finished_count(sort.input()) =>
                {
                    let Some(d) = input.downcast_ref::<DeviceExec>() else {
                        return Ok(Transformed::no(node));
                    };
                    let exec = d.ordered_as(sort.expr().clone());
                    Ok(Transformed::new(
                        Arc::new(exec),
                        true,
                        TreeNodeRecursion::Jump,
                    ))
                }
                Some(input) => {
                    let node = replace_children_if_necessary(node.clone(), vec![input])?;
                    Ok(Transformed::new(node, true, TreeNodeRecursion::Jump))
                }
                None => Ok(Transformed::no(node)),
            }
        })?;
        // `x = (select max(x) ...)` over the same aggregate's groups (Q15): the device sends
        // only the groups tied first by `x`.
        let cut = sorted.data.transform_down(|node| {
            let Some(s) = node.downcast_ref::<ScalarSubqueryExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match extreme_filters(s)? {
                Some(input) => {
                    let mut children: Vec<Arc<dyn ExecutionPlan>> = vec![input];
                    children.extend(s.subqueries().iter().map(|l| l.plan.clone()));
                    Transformed::yes(replace_children_if_necessary(node.clone(), children)?)
                }
                None => Transformed::no(node),
            })
        })?;
        // Last, once no pass looks for a Final aggregate over a device any more: a device's
        // plain groups sent whole, standing in for the Final aggregate over them.
        let whole = cut.data.transform_up(|node| {
            Ok(match whole_groups(&node)? {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })?;
        Ok(whole.data)
    }

    fn name(&self) -> &str {
        "inpath_offload"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// For an aggregate without groups whose one aggregate is `max(c)` or `min(c)` of an input
/// column: `c` as the sort key whose first row (ties included) holds the answer, nulls last.
fn extreme_of_column(node: &Arc<dyn ExecutionPlan>) -> Option<(usize, SortKey)> {
    let agg = node.downcast_ref::<AggregateExec>()?;
    let [a] = agg.aggr_expr() else {
        return None;
    };
    let descending = match a.fun().name() {
        "max" => true,
        "min" => false,
        _ => return None,
    };
    if !matches!(agg.mode(), AggregateMode::Partial | AggregateMode::Single)
        || !agg.group_expr().expr().is_empty()
        || agg.group_expr().has_grouping_set()
        || agg.filter_expr().iter().any(Option::is_some)
        || a.is_distinct()
    {
        return None;
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else {
        return None;
    };
    let column = arg.downcast_ref::<PColumn>()?.index();
    Some((
        column,
        SortKey {
            column,
            descending,
            nulls_first: false,
        },
    ))
}

/// A graph without its last task's SORT or TOPK: the groups it computes, however it sends
/// them.
fn unsorted(graph: &TaskGraph) -> TaskGraph {
    let mut graph = graph.clone();
    if let Some(task) = graph.tasks.last_mut() {
        task.order = None;
    }
    graph
}

/// The aggregate whose value column `x` of `node` is: through pass-through nodes, a Final
/// aggregate over a [`DeviceExec`]; (the graph its groups come from, unsorted; which of its
/// aggregates). None otherwise.
fn aggregate_value(node: &Arc<dyn ExecutionPlan>, x: usize) -> Option<(TaskGraph, usize)> {
    let node = under_pass_throughs(node);
    let f = node.downcast_ref::<AggregateExec>()?;
    if !matches!(
        f.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || f.group_expr().has_grouping_set()
    {
        return None;
    }
    let a = x.checked_sub(f.group_expr().expr().len())?;
    f.aggr_expr().get(a)?;
    let below = under_pass_throughs(f.input());
    let d = below.downcast_ref::<DeviceExec>()?;
    Some((unsorted(d.origin.as_ref().unwrap_or(&d.graph)), a))
}

/// `s`'s input with the device under each filter `x = (subquery)` cut to the groups tied
/// first by `x` (TOPK 1), where the subquery is `max(x)` (or `min`) of the same aggregate's
/// groups: a group whose `x` is not the first cannot pass the filter. The groups under the
/// filter may be fewer than the subquery's (a join moved below the aggregate drops some),
/// never others: their first `x` is the subquery's or below it, and the filter still decides.
/// None when nothing changes.
fn extreme_filters(s: &ScalarSubqueryExec) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    // Each subquery that is the max or min of an offloaded aggregate's value column.
    let mut extremes = Vec::new();
    for link in s.subqueries() {
        let top = under_pass_throughs(&link.plan);
        let Some(agg) = top.downcast_ref::<AggregateExec>() else {
            continue;
        };
        if !matches!(agg.mode(), AggregateMode::Final | AggregateMode::Single) {
            continue;
        }
        let partial = under_pass_throughs(agg.input());
        let partial = match agg.mode() {
            AggregateMode::Single => top,
            _ => partial,
        };
        let Some((column, key)) = extreme_of_column(partial) else {
            continue;
        };
        let Some(p) = partial.downcast_ref::<AggregateExec>() else {
            continue;
        };
        // Through column projections to the aggregate's value.
        let mut node = p.input();
        let mut x = column;
        while let Some(proj) = node.downcast_ref::<ProjectionExec>() {
            let Some(c) = projected_column(proj, x) else {
                break;
            };
            x = c;
            node = proj.input();
        }
        if let Some((graph, a)) = aggregate_value(node, x) {
            extremes.push((link.index, graph, a, key.descending));
        }
    }
    if extremes.is_empty() {
        return Ok(None);
    }
    // A nested subquery's expressions read another container: leave those plans alone.
    let mut nested = false;
    let _ = s.input().apply(|n| {
        nested |= n.is::<ScalarSubqueryExec>();
        Ok(TreeNodeRecursion::Continue)
    });
    if nested {
        return Ok(None);
    }
    let changed = s.input().clone().transform_down(|node| {
        let Some(f) = node.downcast_ref::<FilterExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(b) = f
            .predicate()
            .downcast_ref::<PBinary>()
            .filter(|b| *b.op() == SqlOp::Eq)
        else {
            return Ok(Transformed::no(node));
        };
        #[allow(deprecated)] // the only way to the subquery's slot in DataFusion 55
        let sides = [(b.left(), b.right()), (b.right(), b.left())]
            .into_iter()
            .find_map(|(c, q)| {
                let x = c.downcast_ref::<PColumn>()?.index();
                let index = q.downcast_ref::<ScalarSubqueryExpr>()?.index();
                Some((x, index))
            });
        let Some((x, index)) = sides else {
            return Ok(Transformed::no(node));
        };
        let Some((_, graph, a, descending)) = extremes.iter().find(|e| e.0 == index) else {
            return Ok(Transformed::no(node));
        };
        if aggregate_value(f.input(), x).as_ref() != Some(&(graph.clone(), *a)) {
            return Ok(Transformed::no(node));
        }
        let key = SortKey {
            column: x,
            descending: *descending,
            nulls_first: false,
        };
        Ok(match ordered_device(f.input(), vec![(x, key)], Some(1))? {
            Some(input) => Transformed::new(
                replace_children_if_necessary(node.clone(), vec![input])?,
                true,
                TreeNodeRecursion::Jump,
            ),
            None => Transformed::no(node),
        })
    })?;
    Ok(changed.transformed.then_some(changed.data))
}

/// COUNT_GROUPS: a Partial `count(x)` grouped by columns `0..k` over a Final aggregate
/// without aggregates grouped by columns `0..=k` (x the last: DataFusion's plan of
/// `count(DISTINCT x)`) over a [`DeviceExec`] whose groups are those distinct rows. The device
/// then merges its lanes' groups and counts them itself, emitting the Partial count's schema:
/// the distinct rows never cross to the host. The host plan stays as the fallback.
fn counted_groups(agg: &AggregateExec) -> Option<DeviceExec> {
    let is_column = |e: &Arc<dyn PhysicalExpr>, i: usize| {
        e.downcast_ref::<PColumn>().is_some_and(|c| c.index() == i)
    };
    let groups = agg.group_expr();
    let k = groups.expr().len();
    let [count] = agg.aggr_expr() else {
        return None;
    };
    let plain_count = count.fun().name() == "count"
        && !count.is_distinct()
        && count.order_bys().is_empty()
        && matches!(count.expressions().as_slice(), [x] if is_column(x, k));
    if k == 0
        || agg.filter_expr().iter().any(Option::is_some)
        || !plain_count
        || !by_leading_columns(groups)
    {
        return None;
    }
    let distinct = agg.input().downcast_ref::<AggregateExec>()?;
    let inner = distinct.group_expr();
    if !matches!(
        distinct.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || !distinct.aggr_expr().is_empty()
        || inner.expr().len() != k + 1
        || !by_leading_columns(inner)
    {
        return None;
    }
    let below = under_pass_throughs(distinct.input());
    let d = below.downcast_ref::<DeviceExec>()?;
    let counted = |graph: &TaskGraph| -> Option<TaskGraph> {
        let mut graph = graph.clone();
        let task = graph.tasks.last_mut()?;
        if task.order.is_some() || task.count_groups.is_some() {
            return None;
        }
        task.count_groups = Some(CountGroups { keys: k });
        graph.check().is_ok().then_some(graph)
    };
    let graph = counted(&d.graph)?;
    Some(DeviceExec::new(
        d.device.clone(),
        graph,
        d.alternate.as_ref().and_then(counted),
        agg.schema(),
        Some(Arc::new(agg.clone())),
    ))
}

/// The Final aggregate `node` of a count the device finished: grouped by the leading
/// columns of a [`DeviceExec`] doing COUNT_GROUPS (through nodes that pass rows on), its one
/// aggregate that count. The device sends one row a group, every group whole (counted groups
/// that outgrow a lane decline rather than spill), so its rows are the Final aggregate's: a
/// device under the Final's schema, the Final aggregate kept as the plan run if it declines.
/// The Final aggregate's partitions are kept ([`in_partitions_of`]).
fn finished_count(node: &Arc<dyn ExecutionPlan>) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let Some(exec) = counted_device(node) else {
        return Ok(None);
    };
    in_partitions_of(node, Arc::new(exec)).map(Some)
}

/// The Final aggregate `node` over a device's plain groups (through nodes that pass rows on),
/// where they can be sent whole: grouped by the device's leading columns, every aggregate a
/// sum, count, min or max (whose partial value is its final value, of the same type) without
/// DISTINCT or a filter. The device then merges its lanes' groups and sends them in one batch
/// (`whole_groups`) under the Final aggregate's schema, standing in for it; the Final aggregate
/// stays as the plan run if the device declines, and merges the device's rows if more than one
/// batch comes (groups spilled on the way). Partitions as in [`finished_count`].
fn whole_groups(node: &Arc<dyn ExecutionPlan>) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let Some(agg) = node.downcast_ref::<AggregateExec>() else {
        return Ok(None);
    };
    let final_value = |a: &Arc<datafusion::physical_expr::aggregate::AggregateFunctionExpr>| {
        !a.is_distinct() && matches!(a.fun().name(), "sum" | "count" | "min" | "max")
    };
    if !matches!(
        agg.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || agg.group_expr().expr().is_empty()
        || !by_leading_columns(agg.group_expr())
        || agg.filter_expr().iter().any(Option::is_some)
        || !agg.aggr_expr().iter().all(final_value)
    {
        return Ok(None);
    }
    let Some(d) = under_pass_throughs(agg.input()).downcast_ref::<DeviceExec>() else {
        return Ok(None);
    };
    let whole = |graph: &TaskGraph| -> Option<TaskGraph> {
        let mut graph = graph.clone();
        let task = graph.tasks.last_mut()?;
        if task.order.is_some() || task.count_groups.is_some() || task.whole_groups {
            return None;
        }
        task.whole_groups = true;
        graph.check().is_ok().then_some(graph)
    };
    let schema = agg.schema();
    let Some(graph) = whole(&d.graph) else {
        return Ok(None);
    };
    if !same_types(&schema, &d.schema) {
        return Ok(None);
    }
    let exec = d.like(
        graph,
        d.alternate.as_ref().and_then(whole),
        schema,
        Some(node.clone()),
    );
    in_partitions_of(node, Arc::new(exec)).map(Some)
}

/// Whether `a` and `b` have as many columns, of the same types, in order: a device's rows
/// under `b` can be relabelled as `a`'s.
fn same_types(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(f, g)| f.data_type() == g.data_type())
}

/// `exec` (one partition) standing in for `node`, in `node`'s partitions: a plan above may rely
/// on a Final aggregate's (a `FinalPartitioned` one hashes its groups over several; a
/// partitioned join above relies on that), so `exec`'s rows are hashed the same way.
fn in_partitions_of(
    node: &Arc<dyn ExecutionPlan>,
    exec: Arc<dyn ExecutionPlan>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let partitioning = node.output_partitioning();
    Ok(match partitioning.partition_count() {
        1 => exec,
        _ => Arc::new(RepartitionExec::try_new(exec, partitioning.clone())?),
    })
}

/// The device standing in for the Final aggregate `node` of a count it finished (see
/// [`finished_count`]), in one partition.
fn counted_device(node: &Arc<dyn ExecutionPlan>) -> Option<DeviceExec> {
    let agg = node.downcast_ref::<AggregateExec>()?;
    let groups = agg.group_expr();
    let k = groups.expr().len();
    let [count] = agg.aggr_expr() else {
        return None;
    };
    if !matches!(
        agg.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || !by_leading_columns(groups)
        || agg.filter_expr().iter().any(Option::is_some)
        || count.fun().name() != "count"
        || count.is_distinct()
    {
        return None;
    }
    let below = under_pass_throughs(agg.input());
    let d = below.downcast_ref::<DeviceExec>()?;
    let counted = d.graph.tasks.last()?.count_groups?;
    let schema = agg.schema();
    if counted.keys != k || schema.fields().len() != k + 1 || !same_types(&schema, &d.schema) {
        return None;
    }
    Some(d.like(
        d.graph.clone(),
        d.alternate.clone(),
        schema,
        Some(node.clone()),
    ))
}

/// Whether `node` is a device standing in for the Final aggregate of a count it finished
/// ([`finished_count`]): its rows are the SQL's groups, whole.
fn is_finished_count(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<DeviceExec>().is_some_and(|d| {
        d.graph
            .tasks
            .last()
            .is_some_and(|t| t.count_groups.is_some())
            && d.host
                .as_ref()
                .and_then(|h| h.downcast_ref::<AggregateExec>())
                .is_some_and(|a| {
                    matches!(
                        a.mode(),
                        AggregateMode::Final | AggregateMode::FinalPartitioned
                    )
                })
    })
}

/// `node` with the [`DeviceExec`] below it sorting its groups by `keys` (columns of `node`'s
/// output) and keeping the first `limit`, when every node between passes the groups on
/// unchanged (Final aggregates, column projections, repartitions); none otherwise. Keys
/// the device cannot follow down end the list there.
fn ordered_device(
    node: &Arc<dyn ExecutionPlan>,
    mut keys: Vec<(usize, SortKey)>,
    limit: Option<usize>,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    if keys.is_empty() {
        return Ok(None);
    }
    let below = |input: &Arc<dyn ExecutionPlan>, keys| -> DfResult<_> {
        Ok(match ordered_device(input, keys, limit)? {
            Some(child) => Some(replace_children_if_necessary(node.clone(), vec![child])?),
            None => None,
        })
    };
    if let Some(d) = node.downcast_ref::<DeviceExec>() {
        let order = Order {
            keys: keys
                .iter()
                .map(|&(c, k)| SortKey { column: c, ..k })
                .collect(),
            limit,
        };
        let ordered = |graph: &TaskGraph| -> Option<TaskGraph> {
            let mut graph = graph.clone();
            let task = graph.tasks.last_mut()?;
            if task.operator == Operator::Nop || task.order.is_some() {
                return None;
            }
            task.order = Some(order.clone());
            graph.check().is_ok().then_some(graph)
        };
        let Some(graph) = ordered(&d.graph) else {
            return Ok(None);
        };
        let exec = d.like(
            graph,
            d.alternate.as_ref().and_then(ordered),
            d.schema.clone(),
            d.host.clone(),
        );
        return Ok(Some(Arc::new(exec)));
    }
    if let Some(input) = passed_through(node) {
        return below(input, keys);
    }
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        let exprs = p.expr();
        let mapped: Vec<(usize, SortKey)> = keys
            .iter()
            .map_while(|&(c, k)| {
                let col = exprs.get(c)?.expr.downcast_ref::<PColumn>()?;
                Some((col.index(), k))
            })
            .collect();
        return below(p.input(), mapped);
    }
    if let Some(agg) = node.downcast_ref::<AggregateExec>() {
        if !matches!(
            agg.mode(),
            AggregateMode::Final | AggregateMode::FinalPartitioned
        ) || agg.group_expr().has_grouping_set()
        {
            return Ok(None);
        }
        // Output: the group columns, then one value per aggregate; the input (the partial
        // schema): the group columns, then each aggregate's state fields.
        let groups = agg.group_expr().expr().len();
        let mut state_at = Vec::new();
        let mut at = groups;
        for a in agg.aggr_expr() {
            let fields = a.state_fields()?.len();
            let plain = fields == 1
                && !a.is_distinct()
                && matches!(a.fun().name(), "sum" | "count" | "min" | "max");
            state_at.push(plain.then_some(at));
            at += fields;
        }
        keys = keys
            .iter()
            .map_while(|&(c, k)| {
                if c < groups {
                    Some((c, k))
                } else {
                    state_at.get(c - groups).copied().flatten().map(|s| (s, k))
                }
            })
            .collect();
        return below(agg.input(), keys);
    }
    Ok(None)
}

/// Which thesis limits a graph's tasks exceed.
pub fn thesis_limits_hit(graph: &TaskGraph) -> Vec<String> {
    graph_exceeds(graph, &Limits::THESIS)
        .into_iter()
        .map(|(what, _)| what)
        .collect()
}

/// The limits any task of a graph exceeds (once each).
fn graph_exceeds(graph: &TaskGraph, limits: &Limits) -> Vec<(String, bool)> {
    let mut hit: Vec<(String, bool)> = Vec::new();
    for (t, task) in graph.tasks.iter().enumerate() {
        for (what, declines) in exceeds(task, limits) {
            let what = if graph.tasks.len() > 1 {
                format!("task {t} ({}): {what}", task.table)
            } else {
                what
            };
            hit.push((what, declines));
        }
    }
    hit
}

/// Comparators as the thesis's Row Selector counts them: a range on one column (the two
/// single-comparator products BETWEEN gives) is one comparator.
fn range_comparators(selector: &Selector) -> usize {
    let mut ranged: Vec<usize> = Vec::new();
    let mut n = 0;
    for product in &selector.products {
        match product.as_slice() {
            [Comparator {
                column,
                test: Test::Int { op, .. },
            }] if !matches!(op, CmpOp::Eq | CmpOp::Ne) => {
                if !ranged.contains(column) {
                    ranged.push(*column);
                    n += 1;
                }
            }
            other => n += other.len(),
        }
    }
    n
}

/// The limits a task exceeds: (what, whether it keeps the task off the device). One read port
/// only serialises column reads, so it is reported, never a reason to stay on the host; group
/// buckets are known before running only for dictionary keys.
fn exceeds(task: &TableTask, limits: &Limits) -> Vec<(String, bool)> {
    let mut hit = Vec::new();
    let comparators = range_comparators(&task.selector);
    if let Some(l) = limits.comparators.filter(|l| comparators > *l) {
        hit.push((format!("{comparators} comparators (limit {l})"), true));
    }
    let instructions = task.transformer.arithmetic();
    if let Some(l) = limits.instructions.filter(|l| instructions > *l) {
        hit.push((
            format!("{instructions} transformer instructions (limit {l})"),
            true,
        ));
    }
    let mut columns = task.selector.columns();
    columns.extend(task.transformer.columns());
    if let Operator::AggregateGroupBy { keys, .. } = &task.operator {
        columns.extend(keys.iter().filter_map(|k| match k {
            GroupKey::Dictionary { column } => Some(*column),
            GroupKey::Register(_) | GroupKey::Build { .. } => None,
        }));
        // A dictionary code or a build row is 4 bytes of the group id, a register value 8.
        let mut rows_seen: Vec<usize> = Vec::new();
        let id_bytes: usize = keys
            .iter()
            .map(|k| match k {
                GroupKey::Dictionary { .. } => 4,
                GroupKey::Register(_) => 8,
                GroupKey::Build { join, .. } if !rows_seen.contains(join) => {
                    rows_seen.push(*join);
                    4
                }
                GroupKey::Build { .. } => 0,
            })
            .sum();
        if let Some(l) = limits.group_id_bytes.filter(|l| id_bytes > *l) {
            hit.push((format!("{id_bytes}-byte group ids (limit {l})"), true));
        }
        if let Some(l) = limits.group_buckets {
            if keys
                .iter()
                .any(|k| !matches!(k, GroupKey::Dictionary { .. }))
            {
                hit.push((
                    format!("groups by value, not bounded by a dictionary ({l} buckets: spills)"),
                    false,
                ));
            }
        }
    }
    columns.sort_unstable();
    columns.dedup();
    if let Some(l) = limits.read_ports.filter(|l| columns.len() > *l) {
        hit.push((
            format!("{} columns through {l} read port", columns.len()),
            false,
        ));
    }
    hit
}

/// The Table Task graph for a Partial aggregate over projections over a scan or a tree of
/// joins of scans, or why not.
fn aggregate_graph(
    agg: &AggregateExec,
    orient: Orient,
) -> (Option<String>, Result<TaskGraph, String>) {
    // Walk down to the rows, keeping the projections on the way.
    let mut layers: Vec<(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)> = Vec::new();
    let mut node: Arc<dyn ExecutionPlan> = agg.input().clone();
    loop {
        if let Some(r) = node.downcast_ref::<RepartitionExec>() {
            if !matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) {
                return (None, Err("a hash repartition below the aggregate".into()));
            }
            node = r.input().clone();
        } else if let Some(c) = node.downcast_ref::<CooperativeExec>() {
            // Yields to the runtime between batches; the device's stream runs on its own lanes.
            node = c.input().clone();
        } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            layers.push((
                p.expr().iter().map(|e| e.expr.clone()).collect(),
                p.input().schema(),
            ));
            node = p.input().clone();
        } else {
            break;
        }
    }
    let rows = match chain_for(&node, orient) {
        Ok(rows) if rows.grouped => {
            return (
                None,
                Err(
                    "its input is an aggregate's groups (the device joins them, but does not \
                     aggregate them again)"
                        .into(),
                ),
            )
        }
        Ok(rows) => rows,
        Err(why) => return (None, Err(why)),
    };
    let table = rows.tasks.last().map(|t| t.table.clone());
    (table, build_graph(agg, &layers, rows))
}

/// Which side of an inner join the device keeps (builds) and which it streams (probes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Orient {
    /// DataFusion's sides: its build side is the smaller after filters by its estimates.
    Planner,
    /// The side whose table has more rows streams. The planner's left-deep order may put a
    /// large table's filtered rows (lineitem in Q7 and Q9) on a build side, where they must
    /// fit in the device's memory; the rows of the smaller tables then fit instead.
    LargestProbes,
}

/// Where a column of the rows a chain yields comes from.
#[derive(Clone)]
struct Col {
    /// Its source in the chain's last (pipeline) task.
    src: Source,
    /// The table and column it was read from (its type, scale and nullability).
    reader: Arc<TableReader>,
    column: usize,
    /// The build column an inner join matched it with (equal on every row): a group key here
    /// groups by the matched build row.
    equals: Option<Source>,
}

/// A plan sub-tree as tasks: build tasks first, the pipeline task that yields its rows last.
struct Chain {
    tasks: Vec<TableTask>,
    columns: Vec<Col>,
    /// Conditions on the pipeline's rows beyond the joins' keys (join filters, filters above
    /// joins): each over its own schema, whose columns are these.
    filters: Vec<(Arc<dyn PhysicalExpr>, SchemaRef, Vec<Col>)>,
    /// Rows of the pipeline task's table.
    rows: u64,
    /// The rows are an offloaded aggregate's groups: the last task aggregates, and each
    /// column's source is `Source::Column` of its output column.
    grouped: bool,
}

/// The input of a node that passes its input's rows on unchanged, only moved between
/// partitions or yielding between batches (repartition, coalesce, cooperative), or none.
fn passed_through(node: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    if let Some(r) = node.downcast_ref::<RepartitionExec>() {
        return Some(r.input());
    }
    if let Some(c) = node.downcast_ref::<CoalescePartitionsExec>() {
        return Some(c.input());
    }
    node.downcast_ref::<CooperativeExec>().map(|c| c.input())
}

/// The first node at or below `node` that is not one [`passed_through`] steps over.
fn under_pass_throughs(mut node: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    while let Some(input) = passed_through(node) {
        node = input;
    }
    node
}

/// Whether `g` groups by its input's leading columns, in order, without grouping sets.
fn by_leading_columns(g: &PhysicalGroupBy) -> bool {
    !g.has_grouping_set()
        && g.expr()
            .iter()
            .enumerate()
            .all(|(i, (e, _))| e.downcast_ref::<PColumn>().is_some_and(|c| c.index() == i))
}

/// A schema's columns as a task's output fields (name, Arrow type as text), or which one a
/// graph cannot name.
fn output_fields(schema: &SchemaRef) -> Result<Vec<(String, String)>, String> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let text = f.data_type().to_string();
            if DataType::from_str(&text).ok().as_ref() != Some(f.data_type()) {
                return Err(format!(
                    "output column {} has a type the graph cannot name",
                    f.name()
                ));
            }
            Ok((f.name().clone(), text))
        })
        .collect()
}

/// The input column that output column `i` of a projection passes on unchanged, if it does.
fn projected_column(p: &ProjectionExec, i: usize) -> Option<usize> {
    Some(p.expr().get(i)?.expr.downcast_ref::<PColumn>()?.index())
}

/// A node between a join and the Final aggregate below it.
enum Layer {
    Projection(Vec<ProjectionExpr>),
    /// A filter's predicate and its projection.
    Filter(Arc<dyn PhysicalExpr>, Option<Vec<usize>>),
}

/// `expr` with its column `i` read from column `map[i]`.
fn remap_columns(expr: &Arc<dyn PhysicalExpr>, map: &[usize]) -> DfResult<Arc<dyn PhysicalExpr>> {
    expr.clone()
        .transform(|e| {
            Ok(match e.downcast_ref::<PColumn>() {
                Some(c) => match map.get(c.index()) {
                    Some(&to) => Transformed::yes(Arc::new(PColumn::new(c.name(), to)) as _),
                    None => {
                        return Err(DataFusionError::Internal(format!(
                            "column {c} beyond the {} columns moved",
                            map.len()
                        )))
                    }
                },
                None => Transformed::no(e),
            })
        })
        .map(|t| t.data)
}

/// Whether every column `expr` reads is one a plan has (not DataFusion's unknown column).
fn known_columns(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let mut known = true;
    let _ = expr.apply(|e| {
        known &= !e.is::<UnKnownColumn>();
        Ok(TreeNodeRecursion::Continue)
    });
    known
}

/// `name`, or with a suffix when `taken` holds it already.
fn fresh_name<'a>(name: &str, taken: impl Iterator<Item = &'a str> + Clone) -> String {
    let mut candidate = name.to_string();
    let mut n = 1;
    while taken.clone().any(|t| t == candidate) {
        candidate = format!("{name}#{n}");
        n += 1;
    }
    candidate
}

/// Whether an integer column holds each value at most once, read beside the plan (a table
/// of at most [`UNIQUE_CHECK_ROWS`] rows; a larger one, or any read error, counts as not
/// unique and leaves the plan alone).
fn unique_key(reader: &TableReader, column: usize) -> bool {
    let rows = reader.row_count();
    if rows > UNIQUE_CHECK_ROWS {
        return false;
    }
    let mut values: Vec<i64> = Vec::with_capacity(rows as usize);
    for page in 0..reader.page_count() {
        let Ok(array) = reader.read_page(column, page) else {
            return false;
        };
        let Ok(array) = datafusion::arrow::compute::cast(&array, &DataType::Int64) else {
            return false;
        };
        let Some(ints) = array
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
        else {
            return false;
        };
        if datafusion::arrow::array::Array::null_count(ints) > 0 {
            return false;
        }
        values.extend_from_slice(ints.values());
    }
    if values.windows(2).all(|w| w[0] < w[1]) {
        return true;
    }
    values.sort_unstable();
    values.windows(2).all(|w| w[0] < w[1])
}

/// The most rows [`unique_key`] reads at plan time (16 MiB of keys).
const UNIQUE_CHECK_ROWS: u64 = 1 << 21;

/// The tasks for a scan, or a tree of inner, semi and anti equi-joins of scans with column
/// projections between them, or why not.
fn chain_for(node: &Arc<dyn ExecutionPlan>, orient: Orient) -> Result<Chain, String> {
    if let Some(input) = passed_through(node) {
        return chain_for(input, orient);
    }
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        let mut chain = chain_for(p.input(), orient)?;
        let columns = p
            .expr()
            .iter()
            .map(|e| {
                e.expr
                    .downcast_ref::<PColumn>()
                    .map(|c| chain.columns[c.index()].clone())
                    .ok_or_else(|| format!("a computed column ({}) between joins", e.expr))
            })
            .collect::<Result<Vec<_>, _>>()?;
        chain.columns = columns;
        return Ok(chain);
    }
    if let Some(scan) = node.downcast_ref::<ColumnScanExec>() {
        if scan.limit().is_some() {
            return Err("the scan has a limit".into());
        }
        let selector = match scan.selector() {
            None => Selector::default(),
            Some(Ok(s)) => s.clone(),
            Some(Err(why)) => {
                return Err(format!(
                    "the filter on {} is not a sum of products: {why}",
                    scan.reader().table()
                ))
            }
        };
        let reader = scan.reader().clone();
        let columns = scan
            .projection()
            .iter()
            .map(|&c| Col {
                src: Source::Column(c),
                reader: reader.clone(),
                column: c,
                equals: None,
            })
            .collect();
        let task = TableTask {
            table: reader.table().to_string(),
            mask: MaskSource::All,
            selector,
            transformer: Program::default(),
            flags: Vec::new(),
            joins: Vec::new(),
            filter: None,
            operator: Operator::Nop,
            keep: Vec::new(),
            output: Output { fields: Vec::new() },
            order: None,
            count_groups: None,
            whole_groups: false,
        };
        return Ok(Chain {
            tasks: vec![task],
            columns,
            filters: Vec::new(),
            rows: reader.row_count(),
            grouped: false,
        });
    }
    if let Some(j) = node.downcast_ref::<HashJoinExec>() {
        return join_chain(j, orient);
    }
    if let Some(f) = node.downcast_ref::<FilterExec>() {
        let mut chain = chain_for(f.input(), orient)?;
        chain.filters.push((
            f.predicate().clone(),
            f.input().schema(),
            chain.columns.clone(),
        ));
        if let Some(p) = f.projection() {
            chain.columns = p
                .iter()
                .map(|&i| {
                    chain
                        .columns
                        .get(i)
                        .cloned()
                        .ok_or("a filter projection beyond")
                })
                .collect::<Result<Vec<_>, _>>()?;
        }
        return Ok(chain);
    }
    if let Some(agg) = node.downcast_ref::<AggregateExec>() {
        return groups_chain(agg);
    }
    Err(format!(
        "its input holds {}, which the device does not run yet",
        node.name()
    ))
}

/// The groups of a Final aggregate over a [`DeviceExec`]'s Partial, as rows a join can keep
/// on the device: the device's graph, its aggregate task last (a build whose merged groups
/// are its rows). Each column is a group key that is a column of the aggregated rows, or
/// the min or max of one, so it has that column's type, and no nulls where it has none.
fn groups_chain(f: &AggregateExec) -> Result<Chain, String> {
    let refuse = |why: &str| Err(format!("an aggregate's groups joined: {why}"));
    if !matches!(
        f.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || f.group_expr().has_grouping_set()
        || f.group_expr().expr().is_empty()
    {
        return refuse("not the Final aggregate of a group-by");
    }
    let below = under_pass_throughs(f.input());
    let Some(d) = below.downcast_ref::<DeviceExec>() else {
        return refuse("its Partial aggregate is not on the device");
    };
    let Some(partial) = d
        .host
        .as_ref()
        .and_then(|h| h.downcast_ref::<AggregateExec>())
    else {
        return refuse("no Partial aggregate under the device");
    };
    let Some(task) = d.graph.tasks.last() else {
        return refuse("an empty graph");
    };
    if !matches!(task.operator, Operator::AggregateGroupBy { .. })
        || task.order.is_some()
        || task.count_groups.is_some()
        || d.graph.tasks.iter().any(|t| t.mask != MaskSource::All)
    {
        return refuse("the device's task is not a plain group-by");
    }
    // The rows under the Partial aggregate, through its projections.
    let mut layers: Vec<Vec<Arc<dyn PhysicalExpr>>> = Vec::new();
    let mut node = partial.input().clone();
    loop {
        if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            layers.push(p.expr().iter().map(|e| e.expr.clone()).collect());
            node = p.input().clone();
        } else if let Some(input) = passed_through(&node) {
            node = input.clone();
        } else {
            break;
        }
    }
    let rows = chain_for(&node, Orient::Planner)?;
    let row_column = |e: &Arc<dyn PhysicalExpr>| -> Option<Col> {
        let mut at = e.downcast_ref::<PColumn>()?.index();
        for layer in &layers {
            at = layer.get(at)?.downcast_ref::<PColumn>()?.index();
        }
        rows.columns.get(at).cloned()
    };
    let mut columns = Vec::new();
    for (e, name) in partial.group_expr().expr() {
        let Some(c) = row_column(e) else {
            return refuse(&format!("group key {name} is not a column"));
        };
        columns.push(c);
    }
    for a in partial.aggr_expr() {
        let args = a.expressions();
        let plain = matches!(a.fun().name(), "min" | "max")
            && !a.is_distinct()
            && a.state_fields().map(|f| f.len()).unwrap_or(0) == 1;
        let c = match args.as_slice() {
            [arg] if plain => row_column(arg),
            _ => None,
        };
        let Some(c) = c else {
            return refuse(&format!("{} is not the min or max of a column", a.name()));
        };
        columns.push(c);
    }
    if columns.len() != task.output.fields.len() || columns.len() != f.schema().fields().len() {
        return refuse("its output is not its keys and one value per aggregate");
    }
    let columns = columns
        .into_iter()
        .enumerate()
        .map(|(i, c)| Col {
            src: Source::Column(i),
            equals: None,
            ..c
        })
        .collect();
    Ok(Chain {
        tasks: d.graph.tasks.clone(),
        columns,
        filters: Vec::new(),
        // Never the larger side: groups are kept, never streamed.
        rows: 0,
        grouped: true,
    })
}

/// A join key: an integer or decimal column without nulls; its scale (keys are compared as
/// scaled integers, so both sides of a pair must have the same).
fn join_key(col: &Col) -> Result<i8, String> {
    let field = col.reader.schema().field(col.column).clone();
    let meta = &col.reader.manifest().columns[col.column];
    if field.is_nullable() {
        return Err(format!("join key {} may hold nulls", meta.name));
    }
    match meta.logical {
        LogicalType::Int32 | LogicalType::Int64 | LogicalType::Date32 => Ok(0),
        LogicalType::Decimal128 { scale, .. } => Ok(scale),
        other => Err(format!("join key {} is {other:?}", meta.name)),
    }
}

/// Two join keys compared as scaled integers: both without nulls, at the same scale.
fn join_keys(probe: &Col, build: &Col) -> Result<(), String> {
    let (p, b) = (join_key(probe)?, join_key(build)?);
    if p != b {
        return Err(format!(
            "join keys {} and {} at scales {p} and {b}",
            probe.reader.manifest().columns[probe.column].name,
            build.reader.manifest().columns[build.column].name
        ));
    }
    Ok(())
}

fn join_chain(j: &HashJoinExec, orient: Orient) -> Result<Chain, String> {
    if j.null_aware {
        return Err("a null-aware anti join (NOT IN)".into());
    }
    // The probe side streams through the pipeline task; the build side's rows are kept.
    let (kind, probe_left) = match j.join_type() {
        JoinType::Inner => (JoinKind::Inner, false),
        JoinType::RightSemi => (JoinKind::Semi, false),
        JoinType::RightAnti => (JoinKind::Anti, false),
        JoinType::LeftSemi => (JoinKind::Semi, true),
        JoinType::LeftAnti => (JoinKind::Anti, true),
        other => return Err(format!("a {other} join")),
    };
    if j.on().is_empty() || j.on().len() > 2 {
        return Err(format!("a join on {} keys", j.on().len()));
    }
    let key = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<PColumn>()
            .map(|c| c.index())
            .ok_or_else(|| format!("a join key that is an expression ({e})"))
    };
    let mut lk = Vec::new();
    let mut rk = Vec::new();
    for (l, r) in j.on() {
        lk.push(key(l)?);
        rk.push(key(r)?);
    }
    let left = chain_for(j.left(), orient)?;
    let right = chain_for(j.right(), orient)?;
    let probe_left = probe_left
        || (orient == Orient::LargestProbes && kind == JoinKind::Inner && left.rows > right.rows);
    let (probe, build, pkey, bkey) = if probe_left {
        (left, right, lk, rk)
    } else {
        (right, left, rk, lk)
    };
    if probe.grouped {
        return Err(
            "an aggregate's groups on a join's streaming side (the device holds groups \
                    as a build only)"
                .into(),
        );
    }
    for (&p, &b) in pkey.iter().zip(&bkey) {
        join_keys(&probe.columns[p], &build.columns[b])?;
    }
    if !build.filters.is_empty() {
        return Err("a filter inside a join's build side".into());
    }
    // A semi or anti join's condition beyond the keys: `probe <> build` on integer columns
    // without nulls (Q21), as (probe column, build column).
    let residual = match j.filter() {
        Some(f) if kind != JoinKind::Inner => {
            let refuse = || {
                format!(
                    "a {} join with a residual filter other than `a <> b` on integer columns \
                     ({})",
                    j.join_type(),
                    f.expression()
                )
            };
            let b = f
                .expression()
                .downcast_ref::<PBinary>()
                .filter(|b| *b.op() == SqlOp::NotEq)
                .ok_or_else(refuse)?;
            let side_of = |e: &Arc<dyn PhysicalExpr>| {
                let c = e.downcast_ref::<PColumn>()?;
                let ci = f.column_indices().get(c.index())?;
                let left = matches!(ci.side, datafusion::common::JoinSide::Left);
                Some((left == probe_left, ci.index))
            };
            let (x, y) = (side_of(b.left()), side_of(b.right()));
            let ((_, p), (_, q)) = match (x, y) {
                (Some(x @ (true, _)), Some(y @ (false, _))) => (x, y),
                (Some(y @ (false, _)), Some(x @ (true, _))) => (x, y),
                _ => return Err(refuse()),
            };
            let (pc, bc) = (probe.columns.get(p), build.columns.get(q));
            let (Some(pc), Some(bc)) = (pc, bc) else {
                return Err(refuse());
            };
            join_keys(pc, bc).map_err(|e| format!("{}: {e}", refuse()))?;
            Some((pc.src, q))
        }
        _ => None,
    };
    // The build chain's last task keeps every column its rows carry; the probe chain's tasks
    // follow the build's, their references to earlier tasks moved along.
    let mut tasks = build.tasks;
    let b = tasks.len() - 1;
    // A semi or anti join reads nothing of the build rows but their keys (and the column of
    // its residual condition, kept after them).
    // An aggregate's groups: its output columns are its rows' columns, named by place.
    let output_column = |c: &Col| match c.src {
        Source::Column(i) => i,
        _ => usize::MAX,
    };
    if build.grouped && residual.is_some() {
        return Err("a residual condition on an aggregate's groups".into());
    }
    let (build_columns_kept, bkey): (Vec<Col>, Vec<usize>) = if build.grouped {
        let keys = bkey
            .iter()
            .map(|&k| output_column(&build.columns[k]))
            .collect();
        (build.columns.clone(), keys)
    } else if kind == JoinKind::Inner {
        (build.columns.clone(), bkey)
    } else {
        let mut kept: Vec<Col> = bkey.iter().map(|&k| build.columns[k].clone()).collect();
        kept.extend(residual.map(|(_, q)| build.columns[q].clone()));
        (kept, (0..bkey.len()).collect())
    };
    let residual = residual.map(|(probe, _)| Residual {
        probe,
        build: bkey.len(),
    });
    let grouped = build.grouped;
    let build = Chain {
        tasks: Vec::new(),
        columns: build_columns_kept,
        filters: Vec::new(),
        rows: build.rows,
        grouped,
    };
    if !grouped {
        tasks[b].keep = build.columns.iter().map(|c| c.src).collect();
        tasks[b].output = Output {
            fields: build
                .columns
                .iter()
                .map(|c| {
                    let f = c.reader.schema().field(c.column).clone();
                    (f.name().clone(), f.data_type().to_string())
                })
                .collect(),
        };
    }
    let shift = tasks.len();
    for mut t in probe.tasks {
        for join in &mut t.joins {
            join.build += shift;
        }
        tasks.push(t);
    }
    let pipeline = tasks.last_mut().ok_or("a join without tasks")?;
    let at = pipeline.joins.len();
    let probe_keys: Vec<Source> = pkey.iter().map(|&p| probe.columns[p].src).collect();
    pipeline.joins.push(Join {
        build: b,
        probe_keys: probe_keys.clone(),
        build_keys: bkey.clone(),
        kind,
        method: JoinMethod::Auto,
        residual,
    });
    let build_columns: Vec<Col> = build
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| Col {
            src: Source::Build {
                join: at,
                column: if grouped { output_column(c) } else { i },
            },
            reader: c.reader.clone(),
            column: c.column,
            equals: None,
        })
        .collect();
    let mut probe_columns = probe.columns;
    if kind == JoinKind::Inner {
        for c in &mut probe_columns {
            if let Some(k) = probe_keys.iter().position(|&s| s == c.src) {
                if c.equals.is_none() {
                    c.equals = Some(Source::Build {
                        join: at,
                        column: bkey[k],
                    });
                }
            }
        }
    }
    let mut filters = probe.filters;
    if let Some(f) = j.filter().filter(|_| kind == JoinKind::Inner) {
        // Inner joins: the residual condition filters the joined rows (it commutes with the
        // joins after it).
        let (left, right) = if probe_left {
            (&probe_columns, &build_columns)
        } else {
            (&build_columns, &probe_columns)
        };
        let cols = f
            .column_indices()
            .iter()
            .map(|ci| {
                let side = match ci.side {
                    datafusion::common::JoinSide::Left => left,
                    _ => right,
                };
                side.get(ci.index)
                    .cloned()
                    .ok_or("a join filter column beyond its side")
            })
            .collect::<Result<Vec<_>, _>>()?;
        filters.push((f.expression().clone(), f.schema().clone(), cols));
    }
    // The join's columns: left then right for an inner join, the kept side's alone for semi
    // and anti joins.
    let mut columns = match (kind, probe_left) {
        (JoinKind::Inner, false) => {
            let mut c = build_columns;
            c.extend(probe_columns);
            c
        }
        (JoinKind::Inner, true) => {
            let mut c = probe_columns;
            c.extend(build_columns);
            c
        }
        _ => probe_columns,
    };
    if let Some(p) = &j.projection {
        columns = p
            .iter()
            .map(|&i| {
                columns
                    .get(i)
                    .cloned()
                    .ok_or("a join projection beyond its columns")
            })
            .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(Chain {
        tasks,
        columns,
        filters,
        rows: probe.rows,
        grouped: false,
    })
}

fn build_graph(
    agg: &AggregateExec,
    layers: &[(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)],
    rows: Chain,
) -> Result<TaskGraph, String> {
    let group = agg.group_expr();
    if group.has_grouping_set() {
        return Err("grouping sets".into());
    }
    if agg.filter_expr().iter().any(Option::is_some) {
        return Err("an aggregate with a FILTER clause".into());
    }
    let mut schemas = vec![agg.input().schema()];
    schemas.extend(layers.iter().map(|(_, s)| s.clone()));
    let Chain {
        mut tasks,
        columns,
        filters,
        ..
    } = rows;
    let mut c = Compiler {
        layers,
        schemas,
        rows: &columns,
        tasks: &mut tasks,
        program: Program::default(),
        scales: Vec::new(),
        memo: HashMap::new(),
        loads: HashMap::new(),
    };
    let mut keys = Vec::new();
    for (expr, name) in group.expr() {
        keys.push(
            c.group_key(expr, 0)
                .map_err(|e| format!("group key {name}: {e}"))?,
        );
    }
    let mut aggs = Vec::new();
    for a in agg.aggr_expr() {
        if a.is_distinct() || !a.order_bys().is_empty() {
            return Err(format!(
                "{}: DISTINCT or ORDER BY inside an aggregate",
                a.name()
            ));
        }
        aggs.push(
            c.aggregate(a.fun().name(), &a.expressions())
                .map_err(|e| format!("{}: {e}", a.name()))?,
        );
    }
    let fields = output_fields(&agg.schema())?;
    let operator = if keys.is_empty() {
        Operator::Aggregate { aggs }
    } else {
        Operator::AggregateGroupBy { keys, aggs }
    };
    // Each filter compiled against its own schema and columns, into the same program.
    let mut filter: Option<usize> = None;
    for (expr, schema, cols) in &filters {
        let mut f = Compiler {
            layers: &[],
            schemas: vec![schema.clone()],
            rows: cols,
            tasks: &mut *c.tasks,
            program: std::mem::take(&mut c.program),
            scales: std::mem::take(&mut c.scales),
            memo: HashMap::new(),
            loads: std::mem::take(&mut c.loads),
        };
        let r = f.predicate(expr, 0);
        c.program = f.program;
        c.scales = f.scales;
        c.loads = f.loads;
        let r = r.map_err(|e| format!("the filter {expr}: {e}"))?;
        filter = Some(match filter {
            None => r,
            Some(acc) => c.push(Op::Mul(acc, r), 0),
        });
    }
    let program = std::mem::take(&mut c.program);
    drop(c);
    let pipeline = tasks.last_mut().ok_or("no task")?;
    pipeline.transformer = program;
    pipeline.filter = filter;
    pipeline.operator = operator;
    pipeline.output = Output { fields };
    Ok(TaskGraph {
        version: inpath_offload::GRAPH_VERSION,
        tasks,
    })
}

/// Compiles DataFusion physical expressions into the Row Transformer's program, through the
/// projections between the aggregate and the scan; every register keeps its decimal scale.
struct Compiler<'a> {
    layers: &'a [(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)],
    /// The schema expressions at each level are evaluated against (level 0: the aggregate's
    /// input).
    schemas: Vec<SchemaRef>,
    /// The columns of the rows below the projections.
    rows: &'a [Col],
    /// The graph's tasks (the pipeline task last): CASE conditions on strings add flags to
    /// the task that reads the column.
    tasks: &'a mut Vec<TableTask>,
    program: Program,
    scales: Vec<i8>,
    /// (level, column) already compiled: common subexpressions are computed once.
    memo: HashMap<(usize, usize), usize>,
    loads: HashMap<Source, usize>,
}

impl Compiler<'_> {
    fn push(&mut self, op: Op, scale: i8) -> usize {
        self.program.ops.push(op);
        self.scales.push(scale);
        self.program.ops.len() - 1
    }

    /// The column of the rows that `(level, index)` names through plain column projections,
    /// if any.
    fn row_column(&self, mut level: usize, mut index: usize) -> Option<&Col> {
        loop {
            if level == self.layers.len() {
                return self.rows.get(index);
            }
            let expr = self.layers[level].0.get(index)?;
            let col = expr.downcast_ref::<PColumn>()?;
            index = col.index();
            level += 1;
        }
    }

    fn column(&mut self, level: usize, index: usize) -> Result<usize, String> {
        if let Some(&r) = self.memo.get(&(level, index)) {
            return Ok(r);
        }
        let r = if level == self.layers.len() {
            let col = self
                .rows
                .get(index)
                .ok_or("a column beyond the scan's projection")?;
            if let Some(&r) = self.loads.get(&col.src) {
                r
            } else {
                let (reader, column): (&TableReader, usize) = (&col.reader, col.column);
                let meta = &reader.manifest().columns[column];
                let scale = match meta.logical {
                    LogicalType::Int32 | LogicalType::Int64 | LogicalType::Date32 => 0,
                    LogicalType::Decimal128 { scale, .. } => scale,
                    other => return Err(format!("column {} is {other:?}", meta.name)),
                };
                if reader.schema().field(column).is_nullable() {
                    return Err(format!("column {} may hold nulls", meta.name));
                }
                let op = match col.src {
                    Source::Column(column) => Op::Load { column },
                    Source::Flag(flag) => Op::Flag { flag },
                    Source::Build { join, column } => Op::Fetch { join, column },
                };
                let src = col.src;
                let r = self.push(op, scale);
                self.loads.insert(src, r);
                r
            }
        } else {
            let expr = self.layers[level].0[index].clone();
            self.expr(&expr, level + 1)?
        };
        self.memo.insert((level, index), r);
        Ok(r)
    }

    /// The scale DataFusion gives `expr` at `level`, for integer-like results.
    fn df_scale(&self, expr: &Arc<dyn PhysicalExpr>, level: usize) -> Result<i8, String> {
        let ty = expr
            .data_type(&self.schemas[level])
            .map_err(|e| e.strip_backtrace())?;
        match ty {
            DataType::Decimal128(_, s) => Ok(s),
            DataType::Int64 | DataType::Int32 | DataType::Int16 | DataType::Int8 => Ok(0),
            DataType::Date32 => Ok(0),
            other => Err(format!("{expr} is {other}")),
        }
    }

    fn rescale(&mut self, r: usize, to: i8) -> Result<usize, String> {
        let from = self.scales[r];
        match to - from {
            0 => Ok(r),
            d if d > 0 => Ok(self.push(
                Op::Scale {
                    src: r,
                    pow: d as u32,
                },
                to,
            )),
            _ => Err(format!(
                "a decimal scale {from} narrowed to {to} (rounding)"
            )),
        }
    }

    fn expr(&mut self, expr: &Arc<dyn PhysicalExpr>, level: usize) -> Result<usize, String> {
        if let Some(col) = expr.downcast_ref::<PColumn>() {
            return self.column(level, col.index());
        }
        let want = self.df_scale(expr, level)?;
        if let Some(lit) = expr.downcast_ref::<Literal>() {
            let (v, s) = scaled_literal(lit.value())
                .ok_or_else(|| format!("the literal {}", lit.value()))?;
            let v = i64::try_from(v).map_err(|_| format!("the literal {v} beyond 64 bits"))?;
            let r = self.push(Op::Const { value: v }, s);
            return self.rescale(r, want);
        }
        if let Some(cast) = expr.downcast_ref::<CastExpr>() {
            let inner = self.expr(cast.expr(), level)?;
            return self.rescale(inner, want);
        }
        if let Some(case) = expr.downcast_ref::<CaseExpr>() {
            // Branch-free: Selects from the last WHEN to the first, over the ELSE.
            if case.expr().is_some() {
                return Err("CASE with an operand".into());
            }
            let otherwise = case
                .else_expr()
                .ok_or("CASE without ELSE (a NULL result)")?;
            let r = self.expr(otherwise, level)?;
            let mut acc = self.rescale(r, want)?;
            for (when, then) in case.when_then_expr().iter().rev() {
                let t = self.expr(then, level)?;
                let t = self.rescale(t, want)?;
                let (test, op, value) = self.condition(when, level)?;
                acc = self.push(
                    Op::Select {
                        test,
                        op,
                        value,
                        then: t,
                        otherwise: acc,
                    },
                    want,
                );
            }
            return Ok(acc);
        }
        if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() {
            // date_part('year', date): EXTRACT(YEAR FROM ...).
            if let ("date_part", [part, date]) = (f.name(), f.args()) {
                let is_year = part.downcast_ref::<Literal>().is_some_and(|l| {
                    matches!(l.value(), ScalarValue::Utf8(Some(p)) if p.eq_ignore_ascii_case("year"))
                });
                let is_date = date.data_type(&self.schemas[level]).ok() == Some(DataType::Date32);
                if is_year && is_date {
                    let d = self.expr(date, level)?;
                    return Ok(self.push(Op::Year { src: d }, 0));
                }
            }
        }
        if let Some(b) = expr.downcast_ref::<PBinary>() {
            let x = self.expr(b.left(), level)?;
            let y = self.expr(b.right(), level)?;
            let (sx, sy) = (self.scales[x], self.scales[y]);
            let r = match b.op() {
                SqlOp::Plus | SqlOp::Minus => {
                    let s = sx.max(sy);
                    let (x, y) = (self.rescale(x, s)?, self.rescale(y, s)?);
                    let op = if *b.op() == SqlOp::Plus {
                        Op::Add(x, y)
                    } else {
                        Op::Sub(x, y)
                    };
                    self.push(op, s)
                }
                SqlOp::Multiply => self.push(Op::Mul(x, y), sx + sy),
                other => return Err(format!("the operator {other}")),
            };
            if self.scales[r] != want {
                return Err(format!(
                    "{expr}: DataFusion's result scale {want} is not the exact scale {}",
                    self.scales[r]
                ));
            }
            return Ok(r);
        }
        Err(format!("the expression {expr}"))
    }

    /// A condition as a register that is 1 where it holds and 0 where not: ANDs as products,
    /// ORs and comparisons as Selects, string tests as flags.
    fn predicate(&mut self, e: &Arc<dyn PhysicalExpr>, level: usize) -> Result<usize, String> {
        if let Some(b) = e.downcast_ref::<PBinary>() {
            if matches!(b.op(), SqlOp::And | SqlOp::Or) && self.string_test(e, level).is_none() {
                let x = self.predicate(b.left(), level)?;
                let y = self.predicate(b.right(), level)?;
                return Ok(if *b.op() == SqlOp::And {
                    self.push(Op::Mul(x, y), 0)
                } else {
                    let one = self.push(Op::Const { value: 1 }, 0);
                    self.push(
                        Op::Select {
                            test: x,
                            op: CmpOp::Ne,
                            value: 0,
                            then: one,
                            otherwise: y,
                        },
                        0,
                    )
                });
            }
        }
        let (test, op, value) = self.condition(e, level)?;
        let one = self.push(Op::Const { value: 1 }, 0);
        let zero = self.push(Op::Const { value: 0 }, 0);
        Ok(self.push(
            Op::Select {
                test,
                op,
                value,
                then: one,
                otherwise: zero,
            },
            0,
        ))
    }

    /// A CASE condition as `register op value`: a numeric comparison with a constant, or a
    /// string test (=, <>, IN as ORs of =, LIKE) as a flag register that is not 0.
    fn condition(
        &mut self,
        when: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<(usize, CmpOp, i64), String> {
        if let Some((col, test)) = self.string_test(when, level) {
            let last = self.tasks.len() - 1;
            let src = flag_source(self.tasks, last, col.src, test)?;
            let op = match src {
                Source::Flag(flag) => Op::Flag { flag },
                Source::Build { join, column } => Op::Fetch { join, column },
                Source::Column(_) => return Err("a flag that is a column".into()),
            };
            let r = self.push(op, 0);
            return Ok((r, CmpOp::Ne, 0));
        }
        let b = when
            .downcast_ref::<PBinary>()
            .ok_or_else(|| format!("the condition {when}"))?;
        let op = cmp_op(b.op()).ok_or_else(|| format!("the condition operator {}", b.op()))?;
        let lit = b
            .right()
            .downcast_ref::<Literal>()
            .ok_or_else(|| format!("the condition {when}: not against a constant"))?;
        let (v, ls) = scaled_literal(lit.value())
            .ok_or_else(|| format!("the condition constant {}", lit.value()))?;
        let r = self.expr(b.left(), level)?;
        let s = self.scales[r].max(ls);
        let r = self.rescale(r, s)?;
        let v = 10i128
            .checked_pow((s - ls) as u32)
            .and_then(|f| v.checked_mul(f))
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| format!("the condition constant {v} beyond 64 bits"))?;
        Ok((r, op, v))
    }

    /// A string test on one column: `col = 'a'`, `col <> 'a'`, ORs of `=` on one column,
    /// `col [NOT] LIKE 'p'`.
    fn string_test(&self, e: &Arc<dyn PhysicalExpr>, level: usize) -> Option<(Col, Test)> {
        let column = |e: &Arc<dyn PhysicalExpr>| -> Option<Col> {
            let mut e = e.clone();
            while let Some(c) = e.downcast_ref::<CastExpr>() {
                e = c.expr().clone();
            }
            let c = e.downcast_ref::<PColumn>()?;
            let col = self.row_column(level, c.index())?.clone();
            let ty = col.reader.schema().field(col.column).data_type().clone();
            let text = match ty {
                DataType::Dictionary(_, v) => matches!(*v, DataType::Utf8 | DataType::Utf8View),
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => true,
                _ => false,
            };
            text.then_some(col)
        };
        let text = |e: &Arc<dyn PhysicalExpr>| -> Option<String> {
            let lit = e.downcast_ref::<Literal>()?;
            scalar_text(lit.value())
        };
        if let Some(list) = e.downcast_ref::<InListExpr>() {
            let col = column(list.expr())?;
            let values = list.list().iter().map(text).collect::<Option<Vec<_>>>()?;
            return Some((
                col,
                Test::StrIn {
                    values,
                    negated: list.negated(),
                },
            ));
        }
        if let Some(like) = e.downcast_ref::<LikeExpr>() {
            if like.case_insensitive() {
                return None;
            }
            let col = column(like.expr())?;
            let pattern = text(like.pattern())?;
            return Some((
                col,
                Test::Like {
                    pattern,
                    negated: like.negated(),
                },
            ));
        }
        let b = e.downcast_ref::<PBinary>()?;
        match b.op() {
            SqlOp::Eq | SqlOp::NotEq => {
                let col = column(b.left())?;
                let v = text(b.right())?;
                Some((
                    col,
                    Test::StrIn {
                        values: vec![v],
                        negated: *b.op() == SqlOp::NotEq,
                    },
                ))
            }
            // a = x OR a = y is a IN (x, y); a <> x AND a <> y is a NOT IN (x, y).
            SqlOp::Or | SqlOp::And => {
                let negated = *b.op() == SqlOp::And;
                let (c1, t1) = self.string_test(b.left(), level)?;
                let (c2, t2) = self.string_test(b.right(), level)?;
                match (t1, t2) {
                    (
                        Test::StrIn {
                            values: mut x,
                            negated: n1,
                        },
                        Test::StrIn {
                            values: y,
                            negated: n2,
                        },
                    ) if c1.src == c2.src && n1 == negated && n2 == negated => {
                        x.extend(y);
                        Some((c1, Test::StrIn { values: x, negated }))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn group_key(
        &mut self,
        expr: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<GroupKey, String> {
        if let Some(col) = expr.downcast_ref::<PColumn>() {
            if let Some(c) = self.row_column(level, col.index()) {
                // A column of build rows (or one an inner join made equal to one) groups by
                // the matched build row: dense, and any type.
                if let Some(Source::Build { join, column }) = c
                    .equals
                    .or(Some(c.src))
                    .filter(|s| matches!(s, Source::Build { .. }))
                {
                    return Ok(GroupKey::Build { join, column });
                }
                let field = c.reader.schema().field(c.column).clone();
                if let (Source::Column(column), DataType::Dictionary(..)) =
                    (c.src, field.data_type())
                {
                    if field.is_nullable() {
                        return Err("a nullable dictionary column".into());
                    }
                    return Ok(GroupKey::Dictionary { column });
                }
            }
        }
        Ok(GroupKey::Register(self.expr(expr, level)?))
    }

    fn aggregate(&mut self, name: &str, args: &[Arc<dyn PhysicalExpr>]) -> Result<Agg, String> {
        let func = match name {
            "sum" => AggFunc::Sum,
            "count" => AggFunc::Count,
            "avg" => AggFunc::Avg,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            other => return Err(format!("the aggregate function {other}")),
        };
        let [arg] = args else {
            return Err(format!("{} arguments", args.len()));
        };
        if func == AggFunc::Count {
            if let Some(lit) = arg.downcast_ref::<Literal>() {
                if lit.value().is_null() {
                    return Err("count of NULL".into());
                }
                return Ok(Agg {
                    func: AggFunc::CountAll,
                    arg: None,
                    scale: 0,
                });
            }
        }
        // avg (and sum) of a decimal cast to a double: the exact sum, emitted as a double.
        let mut arg = arg.clone();
        if matches!(func, AggFunc::Avg | AggFunc::Sum) {
            if let Some(cast) = arg.downcast_ref::<CastExpr>() {
                if *cast.cast_type() == DataType::Float64 {
                    arg = cast.expr().clone();
                }
            }
        }
        let r = self.expr(&arg, 0)?;
        Ok(Agg {
            func,
            arg: Some(r),
            scale: self.scales[r],
        })
    }
}

/// An integer, date or decimal constant as (scaled integer, scale).
fn scaled_literal(v: &ScalarValue) -> Option<(i128, i8)> {
    Some(match v {
        ScalarValue::Int64(Some(v)) => (*v as i128, 0),
        ScalarValue::Int32(Some(v)) => (*v as i128, 0),
        ScalarValue::Date32(Some(v)) => (*v as i128, 0),
        ScalarValue::Decimal128(Some(v), _, s) => (*v, *s),
        _ => return None,
    })
}

/// A SQL comparison as the device's.
fn cmp_op(op: &SqlOp) -> Option<CmpOp> {
    Some(match op {
        SqlOp::Eq => CmpOp::Eq,
        SqlOp::NotEq => CmpOp::Ne,
        SqlOp::Lt => CmpOp::Lt,
        SqlOp::LtEq => CmpOp::Le,
        SqlOp::Gt => CmpOp::Gt,
        SqlOp::GtEq => CmpOp::Ge,
        _ => return None,
    })
}

/// A string constant's text (dictionary-typed constants included).
fn scalar_text(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.clone()),
        ScalarValue::Dictionary(_, inner) => scalar_text(inner),
        _ => None,
    }
}

/// Where task `t` can read `test` over its value `src` as a flag: a flag of the task when the
/// column is its table's, else (through the join) a flag the build task computes and keeps.
fn flag_source(
    tasks: &mut [TableTask],
    t: usize,
    src: Source,
    test: Test,
) -> Result<Source, String> {
    match src {
        Source::Column(column) => {
            tasks[t].flags.push(Comparator { column, test });
            Ok(Source::Flag(tasks[t].flags.len() - 1))
        }
        Source::Build { join, .. } if tasks[t].joins.get(join).is_none() => {
            Err(format!("join {join} of task {t} does not exist"))
        }
        Source::Build { join, column } => {
            let b = tasks[t].joins[join].build;
            let inner = *tasks[b]
                .keep
                .get(column)
                .ok_or("a kept column beyond the build's")?;
            let kept = flag_source(tasks, b, inner, test)?;
            tasks[b].keep.push(kept);
            let name = format!("flag{}", tasks[b].keep.len() - 1);
            tasks[b].output.fields.push((name, "Int64".into()));
            Ok(Source::Build {
                join,
                column: tasks[b].keep.len() - 1,
            })
        }
        Source::Flag(_) => Err("a test on a flag".into()),
    }
}

/// The Row Selector for a scan's pushed filters (a sum of products of comparators), or why
/// they are not one.
pub(crate) fn selector_for(filters: &[Expr], reader: &TableReader) -> Result<Selector, String> {
    let mut products = Vec::new();
    for f in filters {
        products.extend(cnf(f, reader)?);
    }
    Ok(Selector { products })
}

/// A condition as a product of sums of comparators (conjunctive normal form): ANDs joined,
/// ORs distributed over them (an OR of ANDs, as Q19's, becomes the product of every choice of
/// one term from each), up to 256 sums.
fn cnf(expr: &Expr, reader: &TableReader) -> Result<Vec<Vec<Comparator>>, String> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: SqlOp::And,
            right,
        }) => {
            let mut a = cnf(left, reader)?;
            a.extend(cnf(right, reader)?);
            Ok(a)
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: SqlOp::Or,
            right,
        }) => {
            let (a, b) = (cnf(left, reader)?, cnf(right, reader)?);
            if a.len() * b.len() > 256 {
                return Err(format!(
                    "an OR of ANDs of over 256 sums of comparators ({} x {})",
                    a.len(),
                    b.len()
                ));
            }
            let mut out = Vec::with_capacity(a.len() * b.len());
            for x in &a {
                for y in &b {
                    let mut sum = x.clone();
                    sum.extend(y.iter().cloned());
                    out.push(sum);
                }
            }
            Ok(out)
        }
        _ => conjunct_products(expr, reader),
    }
}

fn conjunct_products(expr: &Expr, reader: &TableReader) -> Result<Vec<Vec<Comparator>>, String> {
    match expr {
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let lo = comparator(expr, SqlOp::GtEq, low, reader)?;
            let hi = comparator(expr, SqlOp::LtEq, high, reader)?;
            Ok(vec![vec![lo], vec![hi]])
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            // `substr(c, 1, n) IN ('ab', ...)`: each item a LIKE 'ab%' (Q22's country codes).
            if let Some((column, n)) = prefix_of(expr, reader) {
                let items = list
                    .iter()
                    .map(|v| prefix_like(column, n, v, *negated))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(if *negated {
                    items.into_iter().map(|c| vec![c]).collect()
                } else {
                    vec![items]
                });
            }
            let column = column_of(expr, reader)?;
            if reader.manifest().columns[column].logical == LogicalType::Utf8 {
                let values = list
                    .iter()
                    .map(|v| string_literal(v).ok_or_else(|| format!("IN item {v}")))
                    .collect::<Result<_, _>>()?;
                return Ok(vec![vec![Comparator {
                    column,
                    test: Test::StrIn {
                        values,
                        negated: *negated,
                    },
                }]]);
            }
            let op = if *negated { SqlOp::NotEq } else { SqlOp::Eq };
            let items = list
                .iter()
                .map(|v| comparator(expr, op, v, reader))
                .collect::<Result<Vec<_>, _>>()?;
            // IN: one product, any item; NOT IN: every item excluded.
            Ok(if *negated {
                items.into_iter().map(|c| vec![c]).collect()
            } else {
                vec![items]
            })
        }
        _ => Ok(vec![disjuncts(expr, reader)?]),
    }
}

/// One comparison, LIKE, IN or BETWEEN as one sum of comparators (ORs and ANDs around them are
/// `cnf`'s).
fn disjuncts(expr: &Expr, reader: &TableReader) -> Result<Vec<Comparator>, String> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if matches!(left.as_ref(), Expr::Literal(..)) {
                let swapped = op.swap().ok_or_else(|| format!("{expr}"))?;
                Ok(vec![comparator(right, swapped, left, reader)?])
            } else if let (Some((column, n)), SqlOp::Eq | SqlOp::NotEq) =
                (prefix_of(left, reader), op)
            {
                Ok(vec![prefix_like(column, n, right, *op == SqlOp::NotEq)?])
            } else {
                Ok(vec![comparator(left, *op, right, reader)?])
            }
        }
        Expr::Like(Like {
            negated,
            expr: inner,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let column = column_of(inner, reader)?;
            let pattern = string_literal(pattern).ok_or("a LIKE pattern that is not a string")?;
            Ok(vec![Comparator {
                column,
                test: Test::Like {
                    pattern,
                    negated: *negated,
                },
            }])
        }
        Expr::InList(_) | Expr::Between(_) => {
            let products = conjunct_products(expr, reader)?;
            match <[Vec<Comparator>; 1]>::try_from(products) {
                Ok([one]) => Ok(one),
                Err(_) => Err(format!("{expr} inside an OR")),
            }
        }
        other => Err(format!("{other}")),
    }
}

/// `substr(c, 1, n)` (or `substring(c from 1 for n)`) of a string column without nulls: the
/// column and `n`.
fn prefix_of(expr: &Expr, reader: &TableReader) -> Option<(usize, i64)> {
    let Expr::ScalarFunction(f) = expr else {
        return None;
    };
    if !matches!(f.func.name(), "substr" | "substring") {
        return None;
    }
    let [column, start, len] = f.args.as_slice() else {
        return None;
    };
    // A dictionary column is cast to plain strings first: the same values.
    let c = match column {
        Expr::Column(c) => c,
        Expr::Cast(datafusion::logical_expr::Cast { expr, field })
            if matches!(field.data_type(), DataType::Utf8 | DataType::Utf8View) =>
        {
            match expr.as_ref() {
                Expr::Column(c) => c,
                _ => return None,
            }
        }
        _ => return None,
    };
    let int = |e: &Expr| match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v),
        Expr::Literal(ScalarValue::Int32(Some(v)), _) => Some(*v as i64),
        _ => None,
    };
    let column = reader.column_index(&c.name)?;
    let meta = &reader.manifest().columns[column];
    (int(start)? == 1 && meta.logical == LogicalType::Utf8 && !meta.nullable)
        .then_some((column, int(len)?))
        .filter(|&(_, n)| n > 0)
}

/// `substr(c, 1, n) = v` as `c LIKE 'v%'`: exact where `v` has `n` characters and no LIKE
/// wildcard (a shorter value of `c` is its own prefix, and equals no such `v`).
fn prefix_like(column: usize, n: i64, v: &Expr, negated: bool) -> Result<Comparator, String> {
    let text = string_literal(v).ok_or_else(|| format!("a prefix compared with {v}"))?;
    if text.chars().count() as i64 != n || text.contains(['%', '_', '\\']) {
        return Err(format!(
            "a prefix of {n} characters compared with {text:?} (not {n} plain characters)"
        ));
    }
    Ok(Comparator {
        column,
        test: Test::Like {
            pattern: format!("{text}%"),
            negated,
        },
    })
}

fn column_of(expr: &Expr, reader: &TableReader) -> Result<usize, String> {
    match expr {
        Expr::Column(c) => reader
            .column_index(&c.name)
            .ok_or_else(|| format!("no column {}", c.name)),
        // A cast that widens exactly keeps the order: compare the column itself, with the
        // constant brought to the column's scale (rounded to keep the comparison's meaning).
        Expr::Cast(datafusion::logical_expr::Cast { expr: inner, field }) => {
            let data_type = field.data_type();
            let c = column_of(inner, reader)?;
            let logical = reader.manifest().columns[c].logical;
            let exact = match (logical, data_type) {
                (LogicalType::Decimal128 { scale, .. }, DataType::Decimal128(_, s)) => *s >= scale,
                (LogicalType::Int32 | LogicalType::Int64, DataType::Decimal128(_, s)) => *s >= 0,
                (LogicalType::Int32, DataType::Int64) => true,
                _ => false,
            };
            if exact {
                Ok(c)
            } else {
                Err(format!("{expr} changes the column's values"))
            }
        }
        other => Err(format!("{other} is not a plain column")),
    }
}

fn string_literal(expr: &Expr) -> Option<String> {
    let Expr::Literal(v, _) = expr else {
        return None;
    };
    let v = match v {
        ScalarValue::Dictionary(_, inner) => inner.as_ref(),
        v => v,
    };
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        _ => None,
    }
}

fn comparator(
    column: &Expr,
    op: SqlOp,
    literal: &Expr,
    reader: &TableReader,
) -> Result<Comparator, String> {
    let c = column_of(column, reader)?;
    let logical = reader.manifest().columns[c].logical;
    let op = cmp_op(&op).ok_or_else(|| format!("the operator {op}"))?;
    // Two columns of the table, of one type and scale: compared row by row.
    if let Ok(other) = column_of(literal, reader) {
        let numeric = matches!(
            logical,
            LogicalType::Int32
                | LogicalType::Int64
                | LogicalType::Date32
                | LogicalType::Decimal128 { .. }
        );
        if numeric && reader.manifest().columns[other].logical == logical {
            return Ok(Comparator {
                column: c,
                test: Test::Columns { op, other },
            });
        }
        return Err(format!(
            "{column} against {literal}, a column of another type"
        ));
    }
    if logical == LogicalType::Utf8 {
        let s = string_literal(literal).ok_or_else(|| format!("{literal} against a string"))?;
        return match op {
            CmpOp::Eq | CmpOp::Ne => Ok(Comparator {
                column: c,
                test: Test::StrIn {
                    values: vec![s],
                    negated: op == CmpOp::Ne,
                },
            }),
            _ => Err("an ordering comparison of strings".into()),
        };
    }
    if !matches!(
        logical,
        LogicalType::Int32
            | LogicalType::Int64
            | LogicalType::Date32
            | LogicalType::Decimal128 { .. }
    ) {
        return Err(format!("a comparison on a {logical:?} column"));
    }
    let Expr::Literal(value, _) = literal else {
        return Err(format!("{literal} is not a constant"));
    };
    // A constant between two representable values: the comparison is rewritten to the
    // neighbour that keeps its meaning (x < 5.5 is x < 6 at scale 0, x <= 5.5 is x <= 5).
    let round = match op {
        CmpOp::Lt | CmpOp::Ge => crate::sql::Round::Up,
        CmpOp::Le | CmpOp::Gt => crate::sql::Round::Down,
        CmpOp::Eq | CmpOp::Ne => crate::sql::Round::Exact,
    };
    match crate::sql::bound(value, logical, round) {
        Some(inpath_table::format::Scalar::Int(v)) => Ok(Comparator {
            column: c,
            test: Test::Int { op, value: v },
        }),
        _ => Err(format!("the constant {value} against a {logical:?} column")),
    }
}

/// A device's plan properties: `eq`, one partition, every row at the end, bounded.
fn one_partition(eq: EquivalenceProperties) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        eq,
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// A sub-tree the device runs: its Table Task graph, submitted when the plan executes.
#[derive(Debug)]
pub struct DeviceExec {
    device: Arc<dyn Device>,
    graph: TaskGraph,
    /// The same rows with other join sides kept, run when the device declines `graph`.
    alternate: Option<TaskGraph>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// The host plan it replaced, run instead when the device cannot hold the graph's build
    /// rows (not a child: the plan above sees the device only).
    host: Option<Arc<dyn ExecutionPlan>>,
    /// The graph this one was made from by moving a join below its aggregate (unsorted): its
    /// groups' values are among that graph's.
    origin: Option<TaskGraph>,
}

impl DeviceExec {
    fn new(
        device: Arc<dyn Device>,
        graph: TaskGraph,
        alternate: Option<TaskGraph>,
        schema: SchemaRef,
        host: Option<Arc<dyn ExecutionPlan>>,
    ) -> DeviceExec {
        DeviceExec {
            device,
            graph,
            alternate,
            props: one_partition(EquivalenceProperties::new(schema.clone())),
            schema,
            host,
            origin: None,
        }
    }

    /// The same device declaring its rows ordered by `ordering` (which its graph's order
    /// follows), standing in for a sort: the host plan it runs if the device declines is the
    /// sort over the one it had.
    fn ordered_as(&self, ordering: LexOrdering) -> DeviceExec {
        let host = self.host.as_ref().map(|h| {
            let input = match h.output_partitioning().partition_count() {
                1 => h.clone(),
                _ => Arc::new(CoalescePartitionsExec::new(h.clone())) as Arc<dyn ExecutionPlan>,
            };
            Arc::new(SortExec::new(ordering.clone(), input)) as Arc<dyn ExecutionPlan>
        });
        let mut exec = self.like(
            self.graph.clone(),
            self.alternate.clone(),
            self.schema.clone(),
            host,
        );
        let mut eq = EquivalenceProperties::new(self.schema.clone());
        eq.add_ordering(ordering.iter().cloned());
        exec.props = one_partition(eq);
        exec
    }

    /// A device on the same device with the same origin, running `graph`.
    fn like(
        &self,
        graph: TaskGraph,
        alternate: Option<TaskGraph>,
        schema: SchemaRef,
        host: Option<Arc<dyn ExecutionPlan>>,
    ) -> DeviceExec {
        let mut exec = DeviceExec::new(self.device.clone(), graph, alternate, schema, host);
        exec.origin = self.origin.clone();
        exec
    }

    /// The graph the device runs.
    pub fn graph(&self) -> &TaskGraph {
        &self.graph
    }

    /// The graph run instead when the device declines [`DeviceExec::graph`] for memory: the
    /// same rows with the larger tables' joins streaming, where that differs.
    pub fn alternate(&self) -> Option<&TaskGraph> {
        self.alternate.as_ref()
    }

    /// The rows of a device sending whole groups, under the Final aggregate's schema: as they
    /// come when they come in one batch (each group once), else through `finish` (the Final
    /// aggregate over a device, the device replaced by these rows, streamed as they come).
    fn whole_or_finished(
        &self,
        mut stream: impl Iterator<Item = inpath_table::error::Result<RecordBatch>> + Send + 'static,
        finish: &Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let external = |e: inpath_table::error::Error| DataFusionError::External(Box::new(e));
        let first = stream.next().transpose().map_err(external)?;
        let second = match first {
            Some(_) => stream.next().transpose().map_err(external)?,
            None => None,
        };
        let Some(second) = second else {
            let rows = first
                .map(|b| RecordBatch::try_new(self.schema.clone(), b.columns().to_vec()))
                .transpose()?;
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                futures::stream::iter(rows.into_iter().map(Ok)),
            )));
        };
        let Some(parts) = finish
            .children()
            .first()
            .and_then(|c| under_pass_throughs(c).downcast_ref::<DeviceExec>())
        else {
            return Err(DataFusionError::Internal(
                "whole groups: no device under the Final aggregate".into(),
            ));
        };
        let partial = parts.schema.clone();
        let relabel = partial.clone();
        let rows = first
            .into_iter()
            .chain([second])
            .map(Ok)
            .chain(stream)
            .map(move |b| {
                let b = b.map_err(external)?;
                Ok(RecordBatch::try_new(relabel.clone(), b.columns().to_vec())?)
            });
        let sent = SentRows {
            schema: partial.clone(),
            rows: Mutex::new(Some(Box::pin(RecordBatchStreamAdapter::new(
                partial.clone(),
                futures::stream::iter(rows),
            )))),
        };
        let source: Arc<dyn ExecutionPlan> = Arc::new(StreamingTableExec::try_new(
            partial,
            vec![Arc::new(sent)],
            None,
            [],
            false,
            None,
        )?);
        let plan = finish
            .clone()
            .transform_up(|node| {
                Ok(match node.downcast_ref::<DeviceExec>() {
                    Some(_) => Transformed::yes(source.clone()),
                    None => Transformed::no(node),
                })
            })?
            .data;
        let streams = (0..plan.output_partitioning().partition_count())
            .map(|p| plan.execute(p, context.clone()))
            .collect::<DfResult<Vec<_>>>()?;
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::select_all(streams),
        )))
    }
}

/// A device's rows, already coming, as the one partition of a plan's leaf: read once.
struct SentRows {
    schema: SchemaRef,
    rows: Mutex<Option<SendableRecordBatchStream>>,
}

impl std::fmt::Debug for SentRows {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "SentRows")
    }
}

impl PartitionStream for SentRows {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.rows.lock().ok().and_then(|mut rows| rows.take());
        taken.unwrap_or_else(|| {
            Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                futures::stream::once(async {
                    Err(DataFusionError::Internal(
                        "a device's rows are read once".into(),
                    ))
                }),
            ))
        })
    }
}

impl DisplayAs for DeviceExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let Some(task) = self.graph.tasks.last() else {
            return write!(f, "DeviceExec: no task");
        };
        let (op, keys, aggs) = match &task.operator {
            Operator::Nop => ("NOP", 0, 0),
            Operator::Aggregate { aggs } => ("AGGREGATE", 0, aggs.len()),
            Operator::AggregateGroupBy { keys, aggs } => {
                ("AGGREGATE_GROUPBY", keys.len(), aggs.len())
            }
        };
        write!(
            f,
            "DeviceExec: {op} table={}, comparators={}, instructions={}, keys={keys}, aggregates={aggs}",
            task.table,
            task.selector.comparators(),
            task.transformer.ops.len()
        )?;
        if !task.joins.is_empty() {
            let joined: Vec<String> = task
                .joins
                .iter()
                .map(|j| format!("{} {:?}", self.graph.tasks[j.build].table, j.kind))
                .collect();
            write!(f, ", joins=[{}]", joined.join(", "))?;
        }
        if let Some(order) = &task.order {
            let keys: Vec<String> = order
                .keys
                .iter()
                .map(|k| {
                    // Counted groups' rows hold the count where the counted column was.
                    let counted = task.count_groups.is_some_and(|c| c.keys == k.column);
                    let name = match counted {
                        true => "count",
                        false => task
                            .output
                            .fields
                            .get(k.column)
                            .map_or("?", |f| f.0.as_str()),
                    };
                    format!("{name}{}", if k.descending { " DESC" } else { "" })
                })
                .collect();
            match order.limit {
                Some(k) => write!(f, ", TOPK {k} by [{}]", keys.join(", "))?,
                None => write!(f, ", SORT by [{}]", keys.join(", "))?,
            }
        }
        if let Some(c) = task.count_groups {
            write!(f, ", COUNT_GROUPS by the first {} keys", c.keys)?;
        }
        if task.whole_groups {
            write!(f, ", groups whole")?;
        }
        if let Some(alt) = self.alternate.as_ref().and_then(|g| g.tasks.last()) {
            let joined: Vec<String> = alt
                .joins
                .iter()
                .filter_map(|j| self.alternate.as_ref()?.tasks.get(j.build))
                .map(|t| t.table.clone())
                .collect();
            write!(
                f,
                ", else (builds beyond memory) table={} joins=[{}]",
                alt.table,
                joined.join(", ")
            )?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DeviceExec {
    fn name(&self) -> &str {
        "DeviceExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: datafusion::physical_plan::ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "DeviceExec has one partition, not {partition}"
            )));
        }
        // The device declines before sending anything (builds or a page beyond its memory):
        // the host runs the plan the device replaced, every partition of it, merged. Aggregates
        // send their groups at the end, so the first item tells.
        let declined = |e: &inpath_table::error::Error| {
            matches!(e, inpath_table::error::Error::DeviceDeclined { .. })
        };
        let start = |graph: &TaskGraph, fallback: bool| match self.device.submit(graph) {
            Ok(mut s) => match s.next() {
                Some(Err(e)) if declined(&e) && fallback => Err(e),
                first => Ok((first, s)),
            },
            Err(e) => Err(e),
        };
        let fallback = self.host.is_some() || self.alternate.is_some();
        let first = match (start(&self.graph, fallback), &self.alternate) {
            (Err(e), Some(alternate)) if declined(&e) => start(alternate, self.host.is_some()),
            (first, _) => first,
        };
        let (first, stream) = match (first, &self.host) {
            (Ok(started), _) => started,
            (Err(e), Some(host)) if declined(&e) => {
                let streams = (0..host.output_partitioning().partition_count())
                    .map(|p| host.execute(p, context.clone()))
                    .collect::<DfResult<Vec<_>>>()?;
                return Ok(Box::pin(RecordBatchStreamAdapter::new(
                    self.schema.clone(),
                    futures::stream::select_all(streams),
                )));
            }
            (Err(e), _) => return Err(DataFusionError::External(Box::new(e))),
        };
        let stream = first.into_iter().chain(stream);
        // Groups sent whole ([`TableTask::whole_groups`]): the plan the device replaced is the
        // Final aggregate over the same groups in parts, which merges them if they come in parts.
        let whole = self.graph.tasks.last().is_some_and(|t| t.whole_groups);
        if let (true, Some(finish)) = (whole, &self.host) {
            return self.whole_or_finished(stream, finish, context);
        }
        let schema = self.schema.clone();
        let rows = stream.map(move |batch| {
            let batch = batch.map_err(|e| DataFusionError::External(Box::new(e)))?;
            Ok(datafusion::arrow::array::RecordBatch::try_new(
                schema.clone(),
                batch.columns().to_vec(),
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(rows),
        )))
    }
}
