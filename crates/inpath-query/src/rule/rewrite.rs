//! Plan rewrites around an offloaded aggregate: scalar subqueries of extremes, counted
//! groups, whole groups standing in for the final aggregate, sort and top-k on the device.

use super::exec::DeviceExec;
use super::plan::{by_leading_columns, passed_through, projected_column, under_pass_throughs};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::Operator as SqlOp;
use datafusion::physical_expr::expressions::{BinaryExpr as PBinary, Column as PColumn};
use datafusion::physical_expr::scalar_subquery::ScalarSubqueryExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::{
    replace_children_if_necessary, ExecutionPlan, ExecutionPlanProperties,
};
use inpath_offload::graph::{CountGroups, Operator, Order, SortKey, TaskGraph};
use std::sync::Arc;

/// For an aggregate without groups whose one aggregate is `max(c)` or `min(c)` of an input
/// column: `c` as the sort key whose first row (ties included) holds the answer, nulls last.
pub(super) fn extreme_of_column(node: &Arc<dyn ExecutionPlan>) -> Option<(usize, SortKey)> {
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
pub(super) fn unsorted(graph: &TaskGraph) -> TaskGraph {
    let mut graph = graph.clone();
    if let Some(task) = graph.tasks.last_mut() {
        task.order = None;
    }
    graph
}

/// The aggregate whose value column `x` of `node` is: through pass-through nodes, a Final
/// aggregate over a [`DeviceExec`]; (the graph its groups come from, unsorted; which of its
/// aggregates). None otherwise.
pub(super) fn aggregate_value(
    node: &Arc<dyn ExecutionPlan>,
    x: usize,
) -> Option<(TaskGraph, usize)> {
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
    let d = below
        .downcast_ref::<DeviceExec>()
        .filter(|d| d.bounds.is_empty())?;
    Some((unsorted(d.origin.as_ref().unwrap_or(&d.graph)), a))
}

/// `s`'s input with the device under each filter `x = (subquery)` cut to the groups tied
/// first by `x` (TOPK 1), where the subquery is `max(x)` (or `min`) of the same aggregate's
/// groups: a group whose `x` is not the first cannot pass the filter. The groups under the
/// filter may be fewer than the subquery's (a join moved below the aggregate drops some),
/// never others: their first `x` is the subquery's or below it, and the filter still decides.
/// None when nothing changes.
pub(super) fn extreme_filters(s: &ScalarSubqueryExec) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
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
pub(super) fn counted_groups(agg: &AggregateExec) -> Option<DeviceExec> {
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
    let mut exec = DeviceExec::new(
        d.device.clone(),
        graph,
        d.alternate.as_ref().and_then(counted),
        agg.schema(),
        Some(Arc::new(agg.clone())),
    );
    // The same transformer: the same comparators to bind.
    exec.bounds = d.bounds.clone();
    Some(exec)
}

/// The Final aggregate `node` of a count the device finished: grouped by the leading
/// columns of a [`DeviceExec`] doing COUNT_GROUPS (through nodes that pass rows on), its one
/// aggregate that count. The device sends one row a group, every group whole (counted groups
/// that outgrow a lane decline rather than spill), so its rows are the Final aggregate's: a
/// device under the Final's schema, the Final aggregate kept as the plan run if it declines.
/// The Final aggregate's partitions are kept ([`in_partitions_of`]).
pub(super) fn finished_count(
    node: &Arc<dyn ExecutionPlan>,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
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
pub(super) fn whole_groups(
    node: &Arc<dyn ExecutionPlan>,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
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
pub(super) fn same_types(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(f, g)| f.data_type() == g.data_type())
}

/// `exec` (one partition) standing in for `node`, in `node`'s partitions: a plan above may rely
/// on a Final aggregate's (a `FinalPartitioned` one hashes its groups over several; a
/// partitioned join above relies on that), so `exec`'s rows are hashed the same way.
pub(super) fn in_partitions_of(
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
pub(super) fn counted_device(node: &Arc<dyn ExecutionPlan>) -> Option<DeviceExec> {
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
pub(super) fn is_finished_count(node: &Arc<dyn ExecutionPlan>) -> bool {
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
pub(super) fn ordered_device(
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
