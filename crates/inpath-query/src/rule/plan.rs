//! What walking a plan yields and the small steps of the walk: the orientation of joins, a
//! chain's columns and tasks, and the nodes a walk passes through (repartitions, coalescing,
//! cooperative yields, column projections).

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::DataFusionError;
use datafusion::common::Result as DfResult;
use datafusion::physical_expr::expressions::{Column as PColumn, UnKnownColumn};
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::PhysicalGroupBy;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlan;
use inpath_offload::graph::{Source, TableTask, Value};
use inpath_table::reader::TableReader;
use std::sync::Arc;

/// Which side of an inner join the device keeps (builds) and which it streams (probes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Orient {
    /// DataFusion's sides: its build side is the smaller after filters by its estimates.
    Planner,
    /// The side whose table has more rows streams. The planner's left-deep order may put a
    /// large table's filtered rows (lineitem in Q7 and Q9) on a build side, where they must
    /// fit in the device's memory; the rows of the smaller tables then fit instead.
    LargestProbes,
}

/// Where a column of the rows a chain yields comes from.
#[derive(Clone)]
pub(super) struct Col {
    /// Its source in the chain's last (pipeline) task.
    pub(super) src: Source,
    /// The table and column it was read from (its type, scale and nullability).
    pub(super) reader: Arc<TableReader>,
    pub(super) column: usize,
    /// The build column an inner join matched it with (equal on every row): a group key here
    /// groups by the matched build row.
    pub(super) equals: Option<Source>,
}

/// A plan sub-tree as tasks: build tasks first, the pipeline task that yields its rows last.
pub(super) struct Chain {
    pub(super) tasks: Vec<TableTask>,
    pub(super) columns: Vec<Col>,
    /// Conditions on the pipeline's rows beyond the joins' keys (join filters, filters above
    /// joins): each over its own schema, whose columns are these.
    pub(super) filters: Vec<(Arc<dyn PhysicalExpr>, SchemaRef, Vec<Col>)>,
    /// Rows of the pipeline task's table.
    pub(super) rows: u64,
    /// The rows are an offloaded aggregate's groups: the last task aggregates, and each
    /// column's source is `Source::Column` of its output column.
    pub(super) grouped: bool,
    /// A grouped chain's columns as the values the host computes from a group (one per
    /// column; empty otherwise).
    pub(super) groups: Vec<GroupColumn>,
}

/// The input of a node that passes its input's rows on unchanged, only moved between
/// partitions or yielding between batches (repartition, coalesce, cooperative), or none.
pub(super) fn passed_through(node: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    if let Some(r) = node.downcast_ref::<RepartitionExec>() {
        return Some(r.input());
    }
    if let Some(c) = node.downcast_ref::<CoalescePartitionsExec>() {
        return Some(c.input());
    }
    node.downcast_ref::<CooperativeExec>().map(|c| c.input())
}

/// The first node at or below `node` that is not one [`passed_through`] steps over.
pub(super) fn under_pass_throughs(mut node: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    while let Some(input) = passed_through(node) {
        node = input;
    }
    node
}

/// Whether `g` groups by its input's leading columns, in order, without grouping sets.
pub(super) fn by_leading_columns(g: &PhysicalGroupBy) -> bool {
    !g.has_grouping_set()
        && g.expr()
            .iter()
            .enumerate()
            .all(|(i, (e, _))| e.downcast_ref::<PColumn>().is_some_and(|c| c.index() == i))
}

/// The input column that output column `i` of a projection passes on unchanged, if it does.
pub(super) fn projected_column(p: &ProjectionExec, i: usize) -> Option<usize> {
    Some(p.expr().get(i)?.expr.downcast_ref::<PColumn>()?.index())
}

/// A node between a join and the Final aggregate below it.
pub(super) enum Layer {
    Projection(Vec<ProjectionExpr>),
    /// A filter's predicate and its projection.
    Filter(Arc<dyn PhysicalExpr>, Option<Vec<usize>>),
}

/// `expr` with its column `i` read from column `map[i]`.
pub(super) fn remap_columns(
    expr: &Arc<dyn PhysicalExpr>,
    map: &[usize],
) -> DfResult<Arc<dyn PhysicalExpr>> {
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
pub(super) fn known_columns(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let mut known = true;
    let _ = expr.apply(|e| {
        known &= !e.is::<UnKnownColumn>();
        Ok(TreeNodeRecursion::Continue)
    });
    known
}

/// `name`, or with a suffix when `taken` holds it already.
pub(super) fn fresh_name<'a>(name: &str, taken: impl Iterator<Item = &'a str> + Clone) -> String {
    let mut candidate = name.to_string();
    let mut n = 1;
    while taken.clone().any(|t| t == candidate) {
        candidate = format!("{name}#{n}");
        n += 1;
    }
    candidate
}

/// What a value is: an integer with `scale` decimal digits of at most `precision` digits in
/// all, or a double.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Int { scale: i8, precision: u8 },
    Float,
}

/// A column of an aggregate's groups kept for a join: the value the host computes for it from
/// a group (from the build row's output columns), its kind (none for strings), and whether it
/// is a column of the aggregated rows (a key, a min or max), which a join may key on or keep.
#[derive(Clone, Debug)]
pub(super) struct GroupColumn {
    pub(super) value: Value,
    pub(super) kind: Option<Kind>,
    pub(super) row: bool,
    /// The aggregate or expression, for reasons.
    pub(super) name: String,
}
