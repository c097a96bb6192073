//! Joins moved onto the device: rows sent for a join above, and a join above an aggregate
//! moved below it where its key is unique.

use super::chain::{chain_for, output_fields, unique_key};
use super::exec::DeviceExec;
use super::limits::{graph_exceeds, thesis_limits_hit};
use super::plan::{
    fresh_name, known_columns, passed_through, projected_column, remap_columns,
    under_pass_throughs, Chain, Layer, Orient,
};
use super::rewrite::unsorted;
use super::{Decision, OffloadRule};
use crate::reason::HostReason;
use crate::scan::ColumnScanExec;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::JoinType;
use datafusion::common::NullEquality;
use datafusion::common::Result as DfResult;
use datafusion::physical_expr::expressions::Column as PColumn;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::PhysicalGroupBy;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use inpath_offload::graph::{Order, Output, SortKey, TaskGraph};
use std::sync::Arc;

impl OffloadRule {
    /// The rows of `input`, a tree of joins of scans (and of offloaded aggregates' groups)
    /// under a sort, sent by the device: a graph whose last task is NOP, its kept columns
    /// `input`'s, ordered by `keys` and, with a limit, cut to it (TOPK, ties included; the
    /// host's sort still orders and cuts what arrives). Without a limit the lanes hold every
    /// row until the end, within the device's memory or declined (TPC-H Q20 sends 186
    /// suppliers). None when the device cannot produce them: the plan stays as it is.
    pub(super) fn rows_device(
        &self,
        input: &Arc<dyn ExecutionPlan>,
        keys: &[(usize, SortKey)],
        limit: Option<usize>,
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
        let graph = |orient: Orient| -> Result<TaskGraph, HostReason> {
            let chain = chain_for(input, orient)?;
            if chain.grouped || !chain.filters.is_empty() {
                return Err(HostReason::RowsWithGroupsOrFilter);
            }
            let Chain {
                mut tasks, columns, ..
            } = chain;
            let fields = output_fields(&schema)?;
            let last = tasks
                .last_mut()
                .ok_or_else(|| HostReason::inconsistent("no task"))?;
            last.keep = columns.iter().map(|c| c.src).collect();
            last.output = Output { fields };
            last.order = Some(Order {
                keys: keys.iter().map(|&(_, k)| k).collect(),
                limit,
            });
            let graph = TaskGraph {
                version: inpath_offload::GRAPH_VERSION,
                tasks,
            };
            graph.check().map_err(|e| HostReason::Inconsistent {
                detail: e.to_string(),
            })?;
            if graph_exceeds(&graph, &self.limits).iter().any(|h| h.1) {
                return Err(HostReason::OverLimits { limits: Vec::new() });
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
    pub(super) fn join_below_aggregate(
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
    pub(super) fn pushed_join(
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
