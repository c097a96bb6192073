//! Chains: a plan's scans, projections, filters and hash joins walked into the device's
//! Table Task graph.

use super::bound::{subquery_comparison, Bound, Comparison};
use super::compile::Compiler;
use super::condition::{column_kind, condition_of, output_kind, value_of};
use super::exec::DeviceExec;
use super::plan::passed_through;
use super::plan::under_pass_throughs;
use super::plan::Chain;
use super::plan::Col;
use super::plan::Orient;
use super::plan::{GroupColumn, Kind};
use crate::reason::HostReason;
use crate::scan::ColumnScanExec;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::JoinType;
use datafusion::logical_expr::Operator as SqlOp;
use datafusion::physical_expr::expressions::{BinaryExpr as PBinary, Column as PColumn, Literal};
use datafusion::physical_expr::{split_conjunction, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use inpath_offload::graph::{
    AggFunc, GroupKey, Having, Join, JoinKind, JoinMethod, MaskSource, Op, Operator, Output,
    Program, Residual, Selector, Source, TableTask, TaskGraph, Value,
};
use inpath_table::format::LogicalType;
use inpath_table::reader::TableReader;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

/// A graph and the comparators of it bound when it runs.
pub(super) type Bounded = (TaskGraph, Vec<Bound>);

/// The Table Task graph for a Partial aggregate over projections over a scan or a tree of
/// joins of scans, with the comparators bound when it runs, or why not.
pub(super) fn aggregate_graph(
    agg: &AggregateExec,
    orient: Orient,
) -> (Option<String>, Result<Bounded, HostReason>) {
    // Walk down to the rows, keeping the projections on the way.
    let mut layers: Vec<(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)> = Vec::new();
    let mut node: Arc<dyn ExecutionPlan> = agg.input().clone();
    loop {
        if let Some(r) = node.downcast_ref::<RepartitionExec>() {
            if !matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) {
                return (None, Err(HostReason::HashRepartitionBelowAggregate));
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
        Ok(rows) if rows.grouped => return (None, Err(HostReason::AggregatedGroups)),
        Ok(rows) => rows,
        Err(why) => return (None, Err(why)),
    };
    let table = rows.tasks.last().map(|t| t.table.clone());
    (table, build_graph(agg, &layers, rows))
}

/// A schema's columns as a task's output fields (name, Arrow type as text), or which one a
/// graph cannot name.
pub(super) fn output_fields(schema: &SchemaRef) -> Result<Vec<(String, String)>, HostReason> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let text = f.data_type().to_string();
            if DataType::from_str(&text).ok().as_ref() != Some(f.data_type()) {
                return Err(HostReason::OutputType {
                    column: f.name().clone(),
                });
            }
            Ok((f.name().clone(), text))
        })
        .collect()
}

/// Whether an integer column holds each value at most once, read beside the plan (a table
/// of at most [`UNIQUE_CHECK_ROWS`] rows; a larger one, or any read error, counts as not
/// unique and leaves the plan alone).
pub(super) fn unique_key(reader: &TableReader, column: usize) -> bool {
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
pub(super) const UNIQUE_CHECK_ROWS: u64 = 1 << 21;

/// The tasks for a scan, or a tree of inner, semi and anti equi-joins of scans with column
/// projections between them, or why not.
pub(super) fn chain_for(
    node: &Arc<dyn ExecutionPlan>,
    orient: Orient,
) -> Result<Chain, HostReason> {
    if let Some(input) = passed_through(node) {
        return chain_for(input, orient);
    }
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        let mut chain = chain_for(p.input(), orient)?;
        if chain.grouped {
            // Over an aggregate's groups: columns, and values computed from them (Q17's
            // `CAST(0.2 * avg(l_quantity) AS Decimal128(30, 15))`), for a join's condition.
            let leaf = |i: usize| {
                let g = chain.groups.get(i)?;
                Some((g.value.clone(), g.kind?))
            };
            let mut columns = Vec::new();
            let mut groups = Vec::new();
            for e in p.expr() {
                if let Some(c) = e.expr.downcast_ref::<PColumn>() {
                    let (Some(col), Some(g)) =
                        (chain.columns.get(c.index()), chain.groups.get(c.index()))
                    else {
                        return Err(HostReason::inconsistent("a projection beyond the groups"));
                    };
                    columns.push(col.clone());
                    groups.push(g.clone());
                    continue;
                }
                let Some((value, kind)) = value_of(&e.expr, &leaf) else {
                    return Err(HostReason::ComputedColumnBetweenJoins {
                        expr: e.expr.to_string(),
                    });
                };
                columns.push(chain.columns[0].clone());
                groups.push(GroupColumn {
                    value,
                    kind: Some(kind),
                    row: false,
                    name: e.expr.to_string(),
                });
            }
            chain.columns = columns;
            chain.groups = groups;
            return Ok(chain);
        }
        let columns = p
            .expr()
            .iter()
            .map(|e| {
                e.expr
                    .downcast_ref::<PColumn>()
                    .map(|c| chain.columns[c.index()].clone())
                    .ok_or_else(|| HostReason::ComputedColumnBetweenJoins {
                        expr: e.expr.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        chain.columns = columns;
        return Ok(chain);
    }
    if let Some(scan) = node.downcast_ref::<ColumnScanExec>() {
        if scan.limit().is_some() {
            return Err(HostReason::ScanLimit);
        }
        let selector = match scan.selector() {
            None => Selector::default(),
            Some(Ok(s)) => s.clone(),
            Some(Err(why)) => {
                return Err(HostReason::FilterNotSelector {
                    table: scan.reader().table().to_string(),
                    why: Box::new(why.clone()),
                })
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
            selector,
            ..TableTask::nop(reader.table())
        };
        return Ok(Chain {
            tasks: vec![task],
            columns,
            filters: Vec::new(),
            rows: reader.row_count(),
            grouped: false,
            groups: Vec::new(),
        });
    }
    if let Some(j) = node.downcast_ref::<HashJoinExec>() {
        return join_chain(j, orient);
    }
    if let Some(f) = node.downcast_ref::<FilterExec>() {
        if let Some(agg) = under_pass_throughs(f.input()).downcast_ref::<AggregateExec>() {
            return groups_chain(agg, Some(f));
        }
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
                        .ok_or_else(|| HostReason::inconsistent("a filter projection beyond"))
                })
                .collect::<Result<Vec<_>, _>>()?;
        }
        return Ok(chain);
    }
    if let Some(agg) = node.downcast_ref::<AggregateExec>() {
        // Counts over a left join: a Single aggregate over it, or a Final one over its
        // Partial half.
        let over_join = match agg.mode() {
            AggregateMode::Single | AggregateMode::SinglePartitioned => Some(agg),
            AggregateMode::Final | AggregateMode::FinalPartitioned => {
                under_pass_throughs(agg.input())
                    .downcast_ref::<AggregateExec>()
                    .filter(|p| *p.mode() == AggregateMode::Partial)
            }
            _ => None,
        };
        if let Some(a) = over_join {
            if let Some(j) = under_pass_throughs(a.input()).downcast_ref::<HashJoinExec>() {
                if matches!(j.join_type(), JoinType::Left | JoinType::Right) {
                    return left_counts_chain(a, j);
                }
            }
        }
        return groups_chain(agg, None);
    }
    Err(HostReason::UnsupportedOperator {
        operator: node.name().to_string(),
    })
}

/// The groups of a Final aggregate over a [`DeviceExec`]'s Partial, as rows a join can keep
/// on the device: the device's graph, its aggregate task last (a build whose merged groups
/// are its rows). Each column is a group key that is a column of the aggregated rows, or
/// the min or max of one, so it has that column's type, and no nulls where it has none.
///
/// Under a filter on the groups (a SQL `HAVING`, TPC-H Q18's `sum(l_quantity) > 300`), the
/// filter goes into the graph as the task's HAVING ([`having_tests`]), and the columns are
/// those it projects: a sum or count the filter reads may be among the groups' values as
/// long as no join keeps it.
pub(super) fn groups_chain(
    f: &AggregateExec,
    filter: Option<&FilterExec>,
) -> Result<Chain, HostReason> {
    if !matches!(
        f.mode(),
        AggregateMode::Final | AggregateMode::FinalPartitioned
    ) || f.group_expr().has_grouping_set()
        || f.group_expr().expr().is_empty()
    {
        return Err(HostReason::GroupsNotFinal);
    }
    let below = under_pass_throughs(f.input());
    let Some(d) = below.downcast_ref::<DeviceExec>() else {
        return Err(HostReason::GroupsPartialOnHost);
    };
    let Some(partial) = d
        .host
        .as_ref()
        .and_then(|h| h.downcast_ref::<AggregateExec>())
    else {
        return Err(HostReason::GroupsNoPartial);
    };
    let Some(task) = d.graph.tasks.last() else {
        return Err(HostReason::GroupsEmptyGraph);
    };
    if !d.bounds.is_empty() {
        return Err(HostReason::BoundAtStart);
    }
    if !matches!(task.operator, Operator::AggregateGroupBy { .. })
        || task.order.is_some()
        || task.count_groups.is_some()
        || d.graph.tasks.iter().any(|t| t.mask != MaskSource::All)
    {
        return Err(HostReason::GroupsNotPlain);
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
    // Per Final output column: the rows' column it is (a key, a min or max, with its place
    // among the device's output columns), and the value the host computes for it from a
    // group's output columns. An average's state is a count and a sum: kept for a join as an
    // Int64 and an exact decimal, divided as the host divides them.
    let Operator::AggregateGroupBy { aggs, .. } = &task.operator else {
        return Err(HostReason::GroupsNotPlain);
    };
    if aggs.len() != partial.aggr_expr().len() {
        return Err(HostReason::GroupsOutputShape);
    }
    let mut tasks = d.graph.tasks.clone();
    let out_fields = &mut tasks
        .last_mut()
        .ok_or(HostReason::GroupsEmptyGraph)?
        .output
        .fields;
    let mut columns: Vec<Col> = Vec::new();
    let mut groups: Vec<GroupColumn> = Vec::new();
    let mut out = 0usize;
    let row = |c: Col, out: usize, name: String| {
        let kind = column_kind(&c);
        let col = Col {
            src: Source::Column(out),
            equals: None,
            ..c
        };
        let g = GroupColumn {
            value: Value::Build(out),
            kind,
            row: true,
            name,
        };
        (col, g)
    };
    for (e, name) in partial.group_expr().expr() {
        let Some(c) = row_column(e) else {
            return Err(HostReason::GroupKeyNotColumn {
                key: name.to_string(),
            });
        };
        let (c, g) = row(c, out, name.to_string());
        columns.push(c);
        groups.push(g);
        out += 1;
    }
    let placeholder = columns
        .first()
        .cloned()
        .ok_or(HostReason::GroupsOutputShape)?;
    for (a, device) in partial.aggr_expr().iter().zip(aggs) {
        let args = a.expressions();
        let states = a.state_fields().map(|f| f.len()).unwrap_or(0);
        let plain = matches!(a.fun().name(), "min" | "max") && !a.is_distinct() && states == 1;
        let final_type = f.schema().field(columns.len()).data_type().clone();
        let c = match args.as_slice() {
            [arg] if plain => row_column(arg),
            _ => None,
        };
        if let Some(c) = c {
            let (c, g) = row(c, out, a.name().to_string());
            columns.push(c);
            groups.push(g);
            out += 1;
            continue;
        }
        let computed = |value: Value, kind: Option<Kind>| GroupColumn {
            value,
            kind,
            row: false,
            name: a.name().to_string(),
        };
        let g = match (device.func, states, a.is_distinct()) {
            (AggFunc::Sum | AggFunc::Count | AggFunc::CountAll, 1, false) => {
                out += 1;
                computed(
                    Value::Build(out - 1),
                    output_kind(&final_type, device.scale),
                )
            }
            // The host's average of doubles: its sum divided by its count.
            (AggFunc::Avg, 2, false) if final_type == DataType::Float64 => {
                let (count, sum) = (out, out + 1);
                if let Some(f) = out_fields.get_mut(count) {
                    f.1 = "Int64".into();
                }
                if let Some(f) = out_fields.get_mut(sum) {
                    f.1 = format!("Decimal128(38, {})", device.scale);
                }
                out += 2;
                let float = |column: usize, scale: i8| Value::ToFloat {
                    of: Box::new(Value::Build(column)),
                    scale,
                };
                computed(
                    Value::Div(
                        Box::new(float(sum, device.scale)),
                        Box::new(float(count, 0)),
                    ),
                    Some(Kind::Float),
                )
            }
            _ => {
                return Err(HostReason::GroupValueNotMinMax {
                    aggregate: a.name().to_string(),
                })
            }
        };
        columns.push(placeholder.clone());
        groups.push(g);
    }
    if out != out_fields.len() || columns.len() != f.schema().fields().len() {
        return Err(HostReason::GroupsOutputShape);
    }
    if let Some(filter) = filter {
        let keys = partial.group_expr().expr().len();
        let having = having_tests(filter.predicate(), f, task, keys).ok_or_else(|| {
            HostReason::HavingNotTest {
                filter: filter.predicate().to_string(),
            }
        })?;
        if let Some(last) = tasks.last_mut() {
            last.having = having;
        }
        if let Some(p) = filter.projection() {
            let pick = |i: usize| match (columns.get(i), groups.get(i)) {
                (Some(c), Some(g)) => Ok((c.clone(), g.clone())),
                _ => Err(HostReason::inconsistent("a filter projection beyond")),
            };
            let picked = p.iter().map(|&i| pick(i)).collect::<Result<Vec<_>, _>>()?;
            (columns, groups) = picked.into_iter().unzip();
        }
    }
    Ok(Chain {
        tasks,
        columns,
        filters: Vec::new(),
        // Never the larger side: groups are kept, never streamed.
        rows: 0,
        grouped: true,
        groups,
    })
}

/// Where a semi or anti join of the last task can filter rows sooner: when every probe key is
/// a column an earlier (NOP) build task keeps of its own table, matched by an inner join of
/// the last task, that task can drop its rows without a match before it keeps them (the rows
/// the inner join then meets are the same). TPC-H Q18's orders keep 57 rows, those of the
/// orders whose lineitems pass the HAVING, instead of 1.5 million. The task and its keys.
fn semi_below(tasks: &[TableTask], join: &Join) -> Option<(usize, Vec<Source>)> {
    if join.kind == JoinKind::Inner || join.residual.is_some() || join.condition.is_some() {
        return None;
    }
    let last = tasks.last()?;
    let mut target = None;
    let mut keys = Vec::new();
    for key in &join.probe_keys {
        let Source::Build { join: j, column } = *key else {
            return None;
        };
        let inner = last.joins.get(j).filter(|j| j.kind == JoinKind::Inner)?;
        let t = inner.build;
        let kept = tasks.get(t).filter(|b| b.operator == Operator::Nop)?;
        let Some(&Source::Column(c)) = kept.keep.get(column) else {
            return None;
        };
        if *target.get_or_insert(t) != t {
            return None;
        }
        keys.push(Source::Column(c));
    }
    let t = target?;
    (join.build < t).then_some((t, keys))
}

/// The rows of `count(x), ... GROUP BY k` over `l LEFT JOIN r ON k = rk` where `k` is the
/// left table's unique key and every `x` a column of `r` without nulls (TPC-H Q13's orders
/// counted by customer): one row per left row, its key and its counts. On the device, `r`'s
/// rows are counted by `rk` (a build that aggregates), and `l` streams through a left join
/// with those groups, reading 0 where a key has none: the SQL's count of no value.
pub(super) fn left_counts_chain(
    agg: &AggregateExec,
    j: &HashJoinExec,
) -> Result<Chain, HostReason> {
    let refuse = |detail: &str| HostReason::LeftJoinCounts {
        detail: detail.to_string(),
    };
    if j.null_aware || j.filter().is_some() || j.on().len() != 1 {
        return Err(refuse("a condition beyond one pair of keys"));
    }
    // DataFusion may swap the sides (a right join with the preserved table on the right).
    let kept_left = *j.join_type() == JoinType::Left;
    let (first, second) = (
        chain_for(j.left(), Orient::Planner)?,
        chain_for(j.right(), Orient::Planner)?,
    );
    let (left, right) = if kept_left {
        (first, second)
    } else {
        (second, first)
    };
    if left.tasks.len() != 1 || left.grouped || !left.filters.is_empty() {
        return Err(refuse("the preserved side is not one table's rows"));
    }
    if right.grouped || !right.filters.is_empty() {
        return Err(refuse("the counted side's rows carry filters above joins"));
    }
    let column = |e: &Arc<dyn PhysicalExpr>| e.downcast_ref::<PColumn>().map(|c| c.index());
    let (Some(a), Some(b)) = (column(&j.on()[0].0), column(&j.on()[0].1)) else {
        return Err(refuse("a computed join key"));
    };
    let (lk, rk) = if kept_left { (a, b) } else { (b, a) };
    let (lcol, rcol) = (left.columns[lk].clone(), right.columns[rk].clone());
    join_keys(&lcol, &rcol)?;
    if join_key(&rcol)? != 0 {
        return Err(refuse("decimal join keys"));
    }
    let Source::Column(lc) = lcol.src else {
        return Err(refuse("a left key from another table"));
    };
    let Source::Column(rc) = rcol.src else {
        return Err(refuse("a right key from another table"));
    };
    if !unique_key(&lcol.reader, lcol.column) {
        return Err(refuse("the left key is not unique"));
    }
    // The join's output columns: its left input's then its right input's, through its
    // projection; `true` marks the preserved side's.
    let kept: Vec<(bool, Col)> = left.columns.iter().map(|c| (true, c.clone())).collect();
    let counted: Vec<(bool, Col)> = right.columns.iter().map(|c| (false, c.clone())).collect();
    let mut joined = match kept_left {
        true => [kept, counted].concat(),
        false => [counted, kept].concat(),
    };
    if let Some(p) = &j.projection {
        joined = p
            .iter()
            .map(|&i| joined.get(i).cloned())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| HostReason::inconsistent("a join projection beyond its columns"))?;
    }
    let at = |e: &Arc<dyn PhysicalExpr>| column(e).and_then(|i| joined.get(i));
    // Grouped by the left key alone: one group per left row.
    let group = agg.group_expr();
    let [(key, _)] = group.expr() else {
        return Err(refuse("not grouped by the left key alone"));
    };
    match at(key) {
        Some((true, c)) if c.src == lcol.src => {}
        _ => return Err(refuse("not grouped by the left key alone")),
    }
    if group.has_grouping_set() || agg.filter_expr().iter().any(Option::is_some) {
        return Err(refuse("grouping sets or aggregate filters"));
    }
    // Every aggregate a count of a right column without nulls: the matching rows.
    for a in agg.aggr_expr() {
        let args = a.expressions();
        let counted = match args.as_slice() {
            [arg] => at(arg)
                .filter(|(left, c)| !left && !c.reader.schema().field(c.column).is_nullable()),
            _ => None,
        };
        if a.fun().name() != "count" || a.is_distinct() || counted.is_none() {
            return Err(refuse(&format!(
                "{} is not a count of a right column without nulls",
                a.name()
            )));
        }
    }
    let counts = agg.aggr_expr().len();
    // The right side's last task counts its rows by its key.
    let mut tasks = right.tasks;
    let g = tasks.len() - 1;
    let key_type = rcol
        .reader
        .schema()
        .field(rcol.column)
        .data_type()
        .to_string();
    {
        let t = &mut tasks[g];
        t.transformer = Program {
            ops: vec![Op::Load { column: rc }],
        };
        t.operator = Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: (0..counts)
                .map(|_| inpath_offload::graph::Agg {
                    func: AggFunc::CountAll,
                    arg: None,
                    scale: 0,
                })
                .collect(),
        };
        t.keep = Vec::new();
        let mut fields = vec![("key".to_string(), key_type)];
        fields.extend((0..counts).map(|i| (format!("count{i}"), "Int64".to_string())));
        t.output = Output { fields };
    }
    let mut probe = left
        .tasks
        .into_iter()
        .next()
        .ok_or(HostReason::GroupsEmptyGraph)?;
    probe.joins.push(Join {
        build: g,
        probe_keys: vec![Source::Column(lc)],
        build_keys: vec![0],
        kind: JoinKind::Left,
        method: JoinMethod::Auto,
        residual: None,
        condition: None,
    });
    let join = probe.joins.len() - 1;
    tasks.push(probe);
    // The aggregate's rows: the left key, then each count (0 without a match), typed as the
    // right key (an integer without nulls, scale 0) for the compiler.
    let mut columns = vec![lcol.clone()];
    columns.extend((0..counts).map(|i| Col {
        src: Source::Build {
            join,
            column: 1 + i,
        },
        equals: None,
        ..rcol.clone()
    }));
    Ok(Chain {
        tasks,
        columns,
        filters: Vec::new(),
        rows: left.rows,
        grouped: false,
        groups: Vec::new(),
    })
}

/// Groups that a semi or anti join (the last task's last join) can meet, and no others: when
/// some of its probe keys are columns of one NOP table kept on the device (with no joins of
/// its own) that the last task joins on them, inner or semi, and the groups' keys are columns
/// of their table, the groups task first drops the rows whose keys that table does not hold,
/// through a semi join with a copy of it keeping only those columns, placed before it. A group
/// no probe row's key can equal changes neither join's answer. TPC-H Q17 averages the
/// lineitems of the 204 parts it selects, not of all 200,000; Q20 sums those of the parts
/// named `forest%`.
fn reduce_groups(tasks: &mut Vec<TableTask>) {
    let Some(last) = tasks.len().checked_sub(1) else {
        return;
    };
    let Some(join) = tasks[last]
        .joins
        .last()
        .filter(|j| j.kind != JoinKind::Inner)
    else {
        return;
    };
    let g = join.build;
    let Operator::AggregateGroupBy { keys, .. } = &tasks[g].operator else {
        return;
    };
    let joins = &tasks[last].joins[..tasks[last].joins.len() - 1];
    // Per probe key: the kept table and its column that hold every value the key can take.
    let held_by = |key: &Source| -> Option<(usize, Source)> {
        match *key {
            Source::Build { join: via, column } => {
                let inner = joins.get(via).filter(|j| j.kind == JoinKind::Inner)?;
                Some((inner.build, *tasks[inner.build].keep.get(column)?))
            }
            Source::Column(_) => joins.iter().find_map(|j| {
                let one = j.probe_keys.len() == 1 && j.probe_keys[0] == *key;
                let filters = matches!(j.kind, JoinKind::Inner | JoinKind::Semi);
                (one && filters && j.residual.is_none() && j.condition.is_none())
                    .then(|| Some((j.build, *tasks[j.build].keep.get(j.build_keys[0])?)))?
            }),
            Source::Flag(_) => None,
        }
    };
    let mut target = None;
    let mut kept = Vec::new();
    let mut probe = Vec::new();
    for (key, &out) in join.probe_keys.iter().zip(&join.build_keys) {
        let Some((t, src @ Source::Column(_))) = held_by(key) else {
            continue;
        };
        if *target.get_or_insert(t) != t
            || tasks[t].operator != Operator::Nop
            || !tasks[t].joins.is_empty()
        {
            continue;
        }
        let Some(field) = tasks[t]
            .keep
            .iter()
            .position(|s| *s == src)
            .and_then(|i| tasks[t].output.fields.get(i))
        else {
            continue;
        };
        let Some(&GroupKey::Register(r)) = keys.get(out) else {
            continue;
        };
        let Some(&Op::Load { column: c }) = tasks[g].transformer.ops.get(r) else {
            continue;
        };
        kept.push((src, field.clone()));
        probe.push(Source::Column(c));
    }
    let Some(t) = target.filter(|_| !probe.is_empty()) else {
        return;
    };
    let mut copy = tasks[t].clone();
    copy.keep = kept.iter().map(|(s, _)| *s).collect();
    copy.output.fields = kept.into_iter().map(|(_, f)| f).collect();
    copy.order = None;
    tasks.insert(g, copy);
    for task in tasks.iter_mut() {
        for j in &mut task.joins {
            if j.build >= g {
                j.build += 1;
            }
        }
    }
    let n = probe.len();
    tasks[g + 1].joins.push(Join {
        build: g,
        probe_keys: probe,
        build_keys: (0..n).collect(),
        kind: JoinKind::Semi,
        method: JoinMethod::Auto,
        residual: None,
        condition: None,
    });
}

/// A filter over a Final aggregate `f`'s groups as the HAVING of the device's aggregate
/// `task`: a conjunction of an aggregate's output column (a sum, count, minimum or maximum,
/// `keys` group keys before them) compared with a constant, the constant taken to the
/// aggregate's scale exactly (or none).
fn having_tests(
    predicate: &Arc<dyn PhysicalExpr>,
    f: &AggregateExec,
    task: &TableTask,
    keys: usize,
) -> Option<Vec<Having>> {
    let Operator::AggregateGroupBy { aggs, .. } = &task.operator else {
        return None;
    };
    let b = predicate.downcast_ref::<PBinary>()?;
    if *b.op() == SqlOp::And {
        let mut tests = having_tests(b.left(), f, task, keys)?;
        tests.extend(having_tests(b.right(), f, task, keys)?);
        return Some(tests);
    }
    let op = crate::scan::cmp_op;
    let (column, literal, op) = match (
        b.left().downcast_ref::<PColumn>(),
        b.right().downcast_ref::<Literal>(),
        b.right().downcast_ref::<PColumn>(),
        b.left().downcast_ref::<Literal>(),
    ) {
        (Some(c), Some(l), _, _) => (c, l, op(b.op())?),
        (_, _, Some(c), Some(l)) => (c, l, op(&b.op().swap()?)?),
        _ => return None,
    };
    let agg = column.index().checked_sub(keys)?;
    let a = aggs.get(agg)?;
    // The aggregate's value as the host would have it, at the scale the device sums at.
    let scale = match (a.func, f.schema().field(column.index()).data_type()) {
        (AggFunc::Count | AggFunc::CountAll, DataType::Int64) => 0,
        (AggFunc::Sum | AggFunc::Min | AggFunc::Max, DataType::Decimal128(_, s))
            if *s == a.scale =>
        {
            *s
        }
        (AggFunc::Sum | AggFunc::Min | AggFunc::Max, DataType::Int64 | DataType::Int32)
            if a.scale == 0 =>
        {
            0
        }
        _ => return None,
    };
    let (v, s) = super::compile::scaled_literal(literal.value())?;
    let value = if s <= scale {
        v.checked_mul(10i128.checked_pow((scale - s) as u32)?)?
    } else {
        let div = 10i128.checked_pow((s - scale) as u32)?;
        (v % div == 0).then_some(v / div)?
    };
    Some(vec![Having {
        agg,
        op,
        value: i64::try_from(value).ok()?,
    }])
}

/// A join key: an integer or decimal column without nulls; its scale (keys are compared as
/// scaled integers, so both sides of a pair must have the same).
pub(super) fn join_key(col: &Col) -> Result<i8, HostReason> {
    let field = col.reader.schema().field(col.column).clone();
    let meta = &col.reader.manifest().columns[col.column];
    if field.is_nullable() {
        return Err(HostReason::NullableJoinKey {
            column: meta.name.clone(),
        });
    }
    match meta.logical {
        LogicalType::Int32 | LogicalType::Int64 | LogicalType::Date32 => Ok(0),
        LogicalType::Decimal128 { scale, .. } => Ok(scale),
        other => Err(HostReason::JoinKeyType {
            column: meta.name.clone(),
            data_type: format!("{other:?}"),
        }),
    }
}

/// Two join keys compared as scaled integers: both without nulls, at the same scale.
pub(super) fn join_keys(probe: &Col, build: &Col) -> Result<(), HostReason> {
    let (p, b) = (join_key(probe)?, join_key(build)?);
    if p != b {
        return Err(HostReason::JoinKeyScales {
            probe: probe.reader.manifest().columns[probe.column].name.clone(),
            build: build.reader.manifest().columns[build.column].name.clone(),
            probe_scale: p,
            build_scale: b,
        });
    }
    Ok(())
}

pub(super) fn join_chain(j: &HashJoinExec, orient: Orient) -> Result<Chain, HostReason> {
    if j.null_aware {
        return Err(HostReason::NullAwareAntiJoin);
    }
    // The probe side streams through the pipeline task; the build side's rows are kept.
    let (kind, probe_left) = match j.join_type() {
        JoinType::Inner => (JoinKind::Inner, false),
        JoinType::RightSemi => (JoinKind::Semi, false),
        JoinType::RightAnti => (JoinKind::Anti, false),
        JoinType::LeftSemi => (JoinKind::Semi, true),
        JoinType::LeftAnti => (JoinKind::Anti, true),
        other => {
            return Err(HostReason::JoinType {
                join_type: other.to_string(),
            })
        }
    };
    if j.on().is_empty() || j.on().len() > 2 {
        return Err(HostReason::JoinKeyCount { keys: j.on().len() });
    }
    let key = |e: &Arc<dyn PhysicalExpr>| {
        e.downcast_ref::<PColumn>()
            .map(|c| c.index())
            .ok_or_else(|| HostReason::JoinKeyExpression {
                expr: e.to_string(),
            })
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
        return Err(HostReason::GroupsStreamed);
    }
    // An aggregate's groups: keys, and for an inner join every column (they become the
    // rows' columns), must be the aggregated rows' own (a key, a min or max).
    if build.grouped {
        let used: Vec<usize> = match kind {
            JoinKind::Inner => (0..build.groups.len()).collect(),
            _ => bkey.clone(),
        };
        if let Some(g) = used
            .iter()
            .filter_map(|&i| build.groups.get(i))
            .find(|g| !g.row)
        {
            return Err(HostReason::GroupValueNotMinMax {
                aggregate: g.name.clone(),
            });
        }
    }
    for (&p, &b) in pkey.iter().zip(&bkey) {
        join_keys(&probe.columns[p], &build.columns[b])?;
    }
    if !build.filters.is_empty() {
        return Err(HostReason::BuildSideFilter);
    }
    // A semi or anti join's condition over an aggregate's groups (Q17's `l_quantity < 0.2 *
    // avg(l_quantity)`): each side computed as the host computes it.
    let condition = match j.filter() {
        Some(f) if kind != JoinKind::Inner && build.grouped => {
            let leaf = |i: usize| -> Option<(Value, Kind)> {
                let ci = f.column_indices().get(i)?;
                let left = matches!(ci.side, datafusion::common::JoinSide::Left);
                if left == probe_left {
                    let c = probe.columns.get(ci.index)?;
                    if c.reader.schema().field(c.column).is_nullable() {
                        return None;
                    }
                    Some((Value::Probe(c.src), column_kind(c)?))
                } else {
                    let g = build.groups.get(ci.index)?;
                    Some((g.value.clone(), g.kind?))
                }
            };
            Some(
                condition_of(f.expression(), &leaf).ok_or_else(|| HostReason::ResidualFilter {
                    join_type: j.join_type().to_string(),
                    filter: f.expression().to_string(),
                    keys: None,
                })?,
            )
        }
        _ => None,
    };
    // A semi or anti join's condition beyond the keys: `probe <> build` on integer columns
    // without nulls (Q21), as (probe column, build column).
    let residual = match j.filter() {
        Some(_) if condition.is_some() => None,
        Some(f) if kind != JoinKind::Inner => {
            let refuse = || HostReason::ResidualFilter {
                join_type: j.join_type().to_string(),
                filter: f.expression().to_string(),
                keys: None,
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
            join_keys(pc, bc).map_err(|e| HostReason::ResidualFilter {
                join_type: j.join_type().to_string(),
                filter: f.expression().to_string(),
                keys: Some(Box::new(e)),
            })?;
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
        return Err(HostReason::ResidualOnGroups);
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
        groups: Vec::new(),
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
    let at = tasks
        .last()
        .ok_or_else(|| HostReason::inconsistent("a join without tasks"))?
        .joins
        .len();
    let probe_keys: Vec<Source> = pkey.iter().map(|&p| probe.columns[p].src).collect();
    let join = Join {
        build: b,
        probe_keys: probe_keys.clone(),
        build_keys: bkey.clone(),
        kind,
        method: JoinMethod::Auto,
        residual,
        condition,
    };
    match semi_below(&tasks, &join) {
        Some((t, keys)) => tasks[t].joins.push(Join {
            probe_keys: keys,
            ..join
        }),
        None => {
            tasks
                .last_mut()
                .ok_or_else(|| HostReason::inconsistent("a join without tasks"))?
                .joins
                .push(join);
            if grouped {
                reduce_groups(&mut tasks);
            }
        }
    }
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
                    .ok_or_else(|| HostReason::inconsistent("a join filter column beyond its side"))
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
        columns =
            p.iter()
                .map(|&i| {
                    columns.get(i).cloned().ok_or_else(|| {
                        HostReason::inconsistent("a join projection beyond its columns")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(Chain {
        tasks,
        columns,
        filters,
        rows: probe.rows,
        grouped: false,
        groups: Vec::new(),
    })
}

pub(super) fn build_graph(
    agg: &AggregateExec,
    layers: &[(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)],
    rows: Chain,
) -> Result<Bounded, HostReason> {
    let group = agg.group_expr();
    if group.has_grouping_set() {
        return Err(HostReason::GroupingSets);
    }
    if agg.filter_expr().iter().any(Option::is_some) {
        return Err(HostReason::AggregateFilter);
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
        keys.push(c.group_key(expr, 0).map_err(|e| HostReason::InGroupKey {
            key: name.to_string(),
            why: Box::new(e),
        })?);
    }
    let mut aggs = Vec::new();
    for a in agg.aggr_expr() {
        if a.is_distinct() || !a.order_bys().is_empty() {
            return Err(HostReason::DistinctOrOrderedAggregate {
                aggregate: a.name().to_string(),
            });
        }
        aggs.push(c.aggregate(a.fun().name(), &a.expressions()).map_err(|e| {
            HostReason::InAggregate {
                aggregate: a.name().to_string(),
                why: Box::new(e),
            }
        })?);
    }
    let fields = output_fields(&agg.schema())?;
    let operator = if keys.is_empty() {
        Operator::Aggregate { aggs }
    } else {
        Operator::AggregateGroupBy { keys, aggs }
    };
    // Each filter compiled against its own schema and columns, into the same program. A
    // comparison with a subquery's value is a Select whose constant is bound when the plan
    // runs ([`Bound`]).
    let task = c.tasks.len() - 1;
    let mut bounds: Vec<Bound> = Vec::new();
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
        let r = split_conjunction(expr)
            .into_iter()
            .try_fold(None, |acc, e| {
                let r = match subquery_comparison(e, schema) {
                    None => f.predicate(e, 0)?,
                    Some(c) => {
                        let Comparison { rows, op, value } = c?;
                        let test = f.expr(&rows, 0)?;
                        let scale = f.scales[test];
                        let one = f.push(Op::Const { value: 1 }, 0);
                        let zero = f.push(Op::Const { value: 0 }, 0);
                        let select = Op::Select {
                            test,
                            op,
                            value: 0,
                            then: one,
                            otherwise: zero,
                        };
                        let op = f.push(select, 0);
                        bounds.push(Bound {
                            task,
                            op,
                            value,
                            scale,
                        });
                        op
                    }
                };
                Ok(Some(match acc {
                    None => r,
                    Some(acc) => f.push(Op::Mul(acc, r), 0),
                }))
            });
        let r = r.and_then(|r| r.ok_or_else(|| HostReason::inconsistent("an empty filter")));
        c.program = f.program;
        c.scales = f.scales;
        c.loads = f.loads;
        let r = r.map_err(|e| HostReason::InFilter {
            filter: expr.to_string(),
            why: Box::new(e),
        })?;
        filter = Some(match filter {
            None => r,
            Some(acc) => c.push(Op::Mul(acc, r), 0),
        });
    }
    let program = std::mem::take(&mut c.program);
    drop(c);
    let pipeline = tasks
        .last_mut()
        .ok_or_else(|| HostReason::inconsistent("no task"))?;
    pipeline.transformer = program;
    pipeline.filter = filter;
    pipeline.operator = operator;
    pipeline.output = Output { fields };
    let graph = TaskGraph {
        version: inpath_offload::GRAPH_VERSION,
        tasks,
    };
    Ok((graph, bounds))
}
