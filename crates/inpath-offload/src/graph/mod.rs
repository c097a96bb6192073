//! The Table Task graph: what the host hands a [`Device`](super::Device), as a versioned,
//! serialisable value (JSON; the layout is in `docs/FORMATS.md`, "Table Task graphs").
//!
//! A graph is a list of [`TableTask`]s. Each task reads one table beside its pages, keeps the
//! rows its [`Selector`] (a sum-of-products of comparators, AQUOMAN's Row Selector) lets
//! through, computes new columns with its [`Program`] (the Row Transformer: a straight-line
//! program over exact scaled integers) and hands the rows to its [`Operator`] (the Swissknife).
//! The last task's output goes to the host.

use inpath_table::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[cfg(test)]
mod tests;

mod condition;
pub use condition::{Condition, Num, Value};
pub(crate) mod partition;
pub use partition::Partitioning;

/// The graph format this build writes and the newest it reads.
/// Version 2 added joins (`Join`, `Op::Fetch`, `GroupKey::Build`) and the build tasks'
/// `keep` lists; version 3 added SORT and TOPK (`TableTask::order`); version 4 the count of
/// groups (`TableTask::count_groups`); version 5 semi and anti joins with a residual
/// condition (`Join::residual`); version 6 builds that aggregate (an AGGREGATE_GROUPBY task
/// whose merged groups are the rows a later task joins) and a last task that is NOP (its kept
/// rows go to the host, sorted and cut by TOPK); version 7 counted groups that are sorted
/// (`count_groups` with `order`: the counts' rows ordered by any of their columns, strings
/// included); version 8 groups sent whole (`TableTask::whole_groups`: merged across the
/// lanes, in one batch); version 9 a HAVING on a build's groups (`TableTask::having`) and a semi or anti
/// join's condition over them (`Join::condition`); version 10 a string column's prefix as a
/// register (`Op::Prefix`, a group key emitted as a string). Older graphs read unchanged.
pub const GRAPH_VERSION: u32 = 10;

/// A Table Task graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskGraph {
    /// Format version ([`GRAPH_VERSION`]); a newer graph is refused, not guessed at.
    pub version: u32,
    /// The tasks; the last one's output goes to the host.
    pub tasks: Vec<TableTask>,
}

impl TaskGraph {
    /// A one-task graph of the current version.
    pub fn single(task: TableTask) -> TaskGraph {
        TaskGraph {
            version: GRAPH_VERSION,
            tasks: vec![task],
        }
    }

    /// The graph as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a graph from JSON, refusing versions this build does not know.
    pub fn from_json(text: &str) -> Result<TaskGraph> {
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let bad = |detail: String| Error::Offload { detail };
        let v: Version =
            serde_json::from_str(text).map_err(|e| bad(format!("not a Table Task graph: {e}")))?;
        if v.version == 0 || v.version > GRAPH_VERSION {
            return Err(bad(format!(
                "Table Task graph version {} (this build reads versions 1 to {GRAPH_VERSION}; \
                 a newer inpath wrote it)",
                v.version
            )));
        }
        let graph: TaskGraph = serde_json::from_str(text)
            .map_err(|e| bad(format!("a damaged Table Task graph: {e}")))?;
        graph.check()?;
        Ok(graph)
    }

    /// Checks references inside the graph: registers defined before use, masks from earlier
    /// tasks, outputs of known width.
    pub fn check(&self) -> Result<()> {
        let bad = |detail: String| Error::Offload { detail };
        if self.tasks.is_empty() {
            return Err(bad("a Table Task graph with no task".into()));
        }
        for (t, task) in self.tasks.iter().enumerate() {
            if let MaskSource::Task(k) = task.mask {
                if k >= t {
                    return Err(bad(format!(
                        "task {t} takes its mask from task {k}, which does not run before it"
                    )));
                }
            }
            task.transformer.check()?;
            let registers = task.transformer.ops.len();
            let reg_ok = |r: usize| r < registers;
            let joins = task.joins.len();
            for (j, join) in task.joins.iter().enumerate() {
                let Some(build) = self.tasks.get(join.build).filter(|_| join.build < t) else {
                    return Err(bad(format!(
                        "task {t}, join {j}: build task {} does not run before it",
                        join.build
                    )));
                };
                let grouped = matches!(build.operator, Operator::AggregateGroupBy { .. });
                if !(build.operator == Operator::Nop
                    || grouped
                        && build.keep.is_empty()
                        && build.order.is_none()
                        && build.count_groups.is_none())
                {
                    return Err(bad(format!(
                        "task {t}, join {j}: build task {} is neither NOP (keeping its rows) \
                         nor an unsorted AGGREGATE_GROUPBY keeping nothing but its groups",
                        join.build
                    )));
                }
                let n = join.probe_keys.len();
                if n == 0 || n > 2 || join.build_keys.len() != n {
                    return Err(bad(format!(
                        "task {t}, join {j}: {n} probe keys and {} build keys (one or two \
                         pairs)",
                        join.build_keys.len()
                    )));
                }
                for &key in &join.build_keys {
                    if key >= build.row_width() {
                        return Err(bad(format!(
                            "task {t}, join {j}: build key {key} beyond the {} columns task {} \
                             keeps",
                            build.row_width(),
                            join.build
                        )));
                    }
                }
                for key in join.probe_sources() {
                    if let Source::Build { join: k, .. } = *key {
                        if k >= j {
                            return Err(bad(format!(
                                "task {t}, join {j}: its key comes from join {k}, not before it"
                            )));
                        }
                    }
                }
                if join.kind == JoinKind::Left {
                    let keys = match &build.operator {
                        Operator::AggregateGroupBy { keys, .. } => keys.len(),
                        _ => 0,
                    };
                    let all_keys = keys > 0 && join.build_keys == (0..keys).collect::<Vec<_>>();
                    if !all_keys || join.residual.is_some() || join.condition.is_some() {
                        return Err(bad(format!(
                            "task {t}, join {j}: a left join only with an AGGREGATE_GROUPBY \
                             build on all its group keys, in order, without a residual or a \
                             condition"
                        )));
                    }
                }
                if let Some(c) = &join.condition {
                    let grouped_build = matches!(build.operator, Operator::AggregateGroupBy { .. });
                    let columns_ok = [&c.left, &c.right]
                        .iter()
                        .flat_map(|v| v.build_columns())
                        .all(|col| col < build.row_width());
                    if join.kind == JoinKind::Inner
                        || join.residual.is_some()
                        || !grouped_build
                        || !columns_ok
                        || !c.well_formed()
                    {
                        return Err(bad(format!(
                            "task {t}, join {j}: a condition only on a semi or anti join with an \
                             AGGREGATE_GROUPBY build and no residual, over that build's columns, \
                             comparing integers with integers or doubles with doubles"
                        )));
                    }
                }
                if let Some(r) = &join.residual {
                    if join.kind == JoinKind::Inner {
                        return Err(bad(format!(
                            "task {t}, join {j}: a residual condition on an inner join (semi \
                             and anti joins only)"
                        )));
                    }
                    if r.build >= build.row_width() || join.build_keys.contains(&r.build) {
                        return Err(bad(format!(
                            "task {t}, join {j}: residual build column {} is not a column task \
                             {} keeps beside its keys",
                            r.build, join.build
                        )));
                    }
                }
            }
            let build_columns = |k: usize| -> Option<usize> {
                let join = task.joins.get(k)?;
                (join.kind == JoinKind::Inner).then(|| self.tasks[join.build].row_width())
            };
            // A left join's build columns are read through `Fetch` alone (0 without a match).
            let fetch_columns = |k: usize| -> Option<usize> {
                let join = task.joins.get(k)?;
                matches!(join.kind, JoinKind::Inner | JoinKind::Left)
                    .then(|| self.tasks[join.build].row_width())
            };
            let source_ok = |s: &Source| match *s {
                Source::Column(_) => true,
                Source::Flag(f) => f < task.flags.len(),
                Source::Build { join, column } => build_columns(join).is_some_and(|n| column < n),
            };
            for op in &task.transformer.ops {
                if let Op::Flag { flag } = *op {
                    if flag >= task.flags.len() {
                        return Err(bad(format!(
                            "task {t} reads flag {flag} of its {}",
                            task.flags.len()
                        )));
                    }
                }
                if let Op::Fetch { join, column } = *op {
                    if fetch_columns(join).is_none_or(|n| column >= n) {
                        return Err(bad(format!(
                            "task {t} fetches column {column} of join {join}, which is not an \
                             inner join of {joins} with that column"
                        )));
                    }
                }
            }
            for (j, join) in task.joins.iter().enumerate() {
                for s in join.probe_sources() {
                    if !source_ok(s) {
                        return Err(bad(format!(
                            "task {t}, join {j} reads {s:?}, which no earlier inner join or flag \
                             gives"
                        )));
                    }
                }
            }
            for s in &task.keep {
                if !source_ok(s) {
                    return Err(bad(format!("task {t} keeps {s:?}, which no join gives")));
                }
            }
            if let Some(r) = task.filter {
                if !reg_ok(r) || task.operator == Operator::Nop {
                    return Err(bad(format!(
                        "task {t} filters on register {r}: not a register of an aggregating task"
                    )));
                }
            }
            match &task.operator {
                Operator::Nop => {
                    if task.keep.is_empty() {
                        return Err(bad(format!("NOP task {t} keeps no column")));
                    }
                    if t + 1 == self.tasks.len() && task.output.fields.len() != task.keep.len() {
                        return Err(bad(format!(
                            "the last task is NOP: it sends the {} columns it keeps, but \
                             declares {}",
                            task.keep.len(),
                            task.output.fields.len()
                        )));
                    }
                }
                Operator::Aggregate { aggs } => {
                    check_aggs(aggs, registers)?;
                }
                Operator::AggregateGroupBy { keys, aggs } => {
                    if keys.is_empty() {
                        return Err(bad("AGGREGATE_GROUPBY with no group key".into()));
                    }
                    for k in keys {
                        match *k {
                            GroupKey::Register(r) if !reg_ok(r) => {
                                return Err(bad(format!("group key register {r} is undefined")));
                            }
                            GroupKey::Build { join, column }
                                if !source_ok(&Source::Build { join, column }) =>
                            {
                                return Err(bad(format!(
                                    "group key: column {column} of join {join} is not an inner \
                                     join's column"
                                )));
                            }
                            _ => {}
                        }
                    }
                    check_aggs(aggs, registers)?;
                }
            }
            if task.output.fields.is_empty() {
                return Err(bad(format!("task {t} outputs no column")));
            }
            if let Some(c) = task.count_groups {
                let last = t + 1 == self.tasks.len();
                let fits = match &task.operator {
                    Operator::AggregateGroupBy { keys, aggs } => {
                        aggs.is_empty() && keys.len() == c.keys + 1
                    }
                    _ => false,
                };
                if !last || !fits {
                    return Err(bad(format!(
                        "task {t} counts groups by {} keys: only the last task's AGGREGATE_GROUPBY of {} keys and no aggregate counts its groups",
                        c.keys,
                        c.keys + 1
                    )));
                }
            }
            // Groups by a build row may be finer than the SQL's: they are never whole.
            let sql_groups = matches!(&task.operator, Operator::AggregateGroupBy { keys, .. }
                if !keys.is_empty() && !keys.iter().any(|k| matches!(k, GroupKey::Build { .. })));
            if task.whole_groups && (t + 1 != self.tasks.len() || !sql_groups) {
                return Err(bad(format!(
                    "task {t} sends its groups whole: only the last task's AGGREGATE_GROUPBY \
                     with keys, none a build row's column, has whole groups to send"
                )));
            }
            if !task.having.is_empty() {
                let aggs = match &task.operator {
                    Operator::AggregateGroupBy { aggs, .. } => aggs.as_slice(),
                    _ => &[],
                };
                let joined = self.tasks[t + 1..]
                    .iter()
                    .any(|later| later.joins.iter().any(|j| j.build == t));
                let plain = task.having.iter().all(|h| {
                    aggs.get(h.agg).is_some_and(|a| {
                        matches!(
                            a.func,
                            AggFunc::Sum
                                | AggFunc::Count
                                | AggFunc::CountAll
                                | AggFunc::Min
                                | AggFunc::Max
                        )
                    })
                });
                if !joined || !plain {
                    return Err(bad(format!(
                        "task {t} has a HAVING: only an AGGREGATE_GROUPBY whose groups a later \
                         task joins, testing its sums, counts, minima and maxima, has one"
                    )));
                }
            }
            if let Some(order) = &task.order {
                if t + 1 != self.tasks.len() {
                    return Err(bad(format!(
                        "task {t} sorts: only the last task's rows or groups are sorted"
                    )));
                }
                if order.keys.is_empty() || order.limit == Some(0) {
                    return Err(bad(format!(
                        "task {t} sorts by {} keys with limit {:?} (at least one key, a limit \
                         of at least 1)",
                        order.keys.len(),
                        order.limit
                    )));
                }
                let width = task.output.fields.len();
                if let Some(k) = order.keys.iter().find(|k| k.column >= width) {
                    return Err(bad(format!(
                        "task {t} sorts by output column {} of its {width}",
                        k.column
                    )));
                }
            }
        }
        Ok(())
    }
}

fn check_aggs(aggs: &[Agg], registers: usize) -> Result<()> {
    for a in aggs {
        if let Some(r) = a.arg {
            if r >= registers {
                return Err(Error::Offload {
                    detail: format!("aggregate argument register {r} is undefined"),
                });
            }
        } else if a.func != AggFunc::CountAll {
            return Err(Error::Offload {
                detail: format!("{:?} needs an argument", a.func),
            });
        }
    }
    Ok(())
}

/// One Table Task: a table read beside its pages, a selector, a transformer and an operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableTask {
    /// The table (its name in the device's catalog).
    pub table: String,
    /// Which rows the task starts from.
    pub mask: MaskSource,
    /// The Row Selector.
    pub selector: Selector,
    /// The Row Transformer.
    pub transformer: Program,
    /// Comparators evaluated on every row as 0 or 1 (`Op::Flag`, `Source::Flag`), not as
    /// filters: CASE conditions on strings, tested where the column is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Comparator>,
    /// Joins applied in order to the selected rows, before the transformer: each with the
    /// rows an earlier (build) task keeps on the device.
    #[serde(default)]
    pub joins: Vec<Join>,
    /// A register of the transformer: rows where it is 0 are dropped before the operator
    /// (join conditions beyond the keys, filters above joins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<usize>,
    /// The Swissknife operator.
    pub operator: Operator,
    /// A build (NOP) task: the columns its rows keep on the device for later tasks' joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<Source>,
    /// What the task emits (to the host, or for a build task, to later tasks).
    pub output: Output,
    /// The last task only: its groups merged across the device's lanes, then sorted (SORT)
    /// and cut to the first `limit` (TOPK) before they go to the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
    /// The last task only, an AGGREGATE_GROUPBY without aggregates (its groups are the
    /// distinct rows of its keys): its groups merged across the lanes into the SQL's groups,
    /// then counted by their first `keys` output columns. The rows sent are those columns and
    /// the count (`Int64`) of groups whose next column is not null: a `count(DISTINCT x)`
    /// grouped by the leading keys (TPC-H Q16's supplier count), whose distinct rows never
    /// cross to the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_groups: Option<CountGroups>,
    /// The last task only, an AGGREGATE_GROUPBY whose keys are the SQL's (no build row's
    /// column): its groups merged across the device's lanes (the device's own final aggregate)
    /// and sent in one batch at the end. Unless a lane
    /// spilled groups to the host on the way, that batch is the only one and holds each group
    /// once, whole, so the host has no partial groups to merge.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_groups: bool,
    /// A build task's AGGREGATE_GROUPBY only: the groups a later task joins are those whose
    /// aggregates pass every test here (a SQL `HAVING`, such as TPC-H Q18's
    /// `sum(l_quantity) > 300`), tested on the merged, final groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub having: Vec<Having>,
}

/// One test of [`TableTask::having`]: aggregate `agg`'s final value `op` `value`, both as
/// exact integers at the aggregate's scale (a sum of `decimal(15,2)` values in hundredths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Having {
    /// The aggregate, by its place in the operator's `aggs`: a sum, count, minimum or maximum.
    pub agg: usize,
    /// The comparison.
    pub op: CmpOp,
    /// The constant.
    pub value: i64,
}

impl Having {
    /// Whether a group whose aggregate holds `count` rows and the accumulator `acc` passes.
    pub fn passes(&self, func: AggFunc, count: i64, acc: i128) -> bool {
        let v = match func {
            AggFunc::Count | AggFunc::CountAll => count as i128,
            // A sum, minimum or maximum over no value is null, and null passes no test.
            AggFunc::Sum | AggFunc::Min | AggFunc::Max if count == 0 => return false,
            _ => acc,
        };
        self.op.holds(v, self.value as i128)
    }
}

impl TableTask {
    /// A NOP task over every row of `table` that selects, joins and keeps nothing yet: what
    /// a build task is made from.
    pub fn nop(table: impl Into<String>) -> TableTask {
        TableTask {
            table: table.into(),
            mask: MaskSource::All,
            selector: Selector::default(),
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
            having: Vec::new(),
        }
    }

    /// The columns of the rows a build task holds for later joins: what a NOP task keeps, or
    /// an aggregating task's output columns (its groups' keys and values).
    pub fn row_width(&self) -> usize {
        match self.operator {
            Operator::Nop => self.keep.len(),
            _ => self.output.fields.len(),
        }
    }
}

/// COUNT_GROUPS: see [`TableTask::count_groups`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountGroups {
    /// The leading output columns the groups are counted by; the column after them is the
    /// one counted.
    pub keys: usize,
}

/// SORT (no limit) or TOPK (a limit) over the last task's output rows. The host still sorts
/// and limits what it receives: the device sends every row that can be among the first
/// `limit` (rows tied with the last one included), in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The sort keys, most significant first.
    pub keys: Vec<SortKey>,
    /// TOPK's k; none for a whole SORT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// One sort key: an output column of the task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SortKey {
    /// The output column.
    pub column: usize,
    /// Largest first.
    pub descending: bool,
    /// Nulls before every value.
    pub nulls_first: bool,
}

/// A value of a task's rows: its own table's column, or a column of the build rows a join
/// matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Source {
    /// A column of the task's table.
    Column(usize),
    /// Flag `flag` of the task (1 where its comparator holds, else 0).
    Flag(usize),
    /// Column `column` (of the build task's `keep`) of the rows join `join` matched.
    Build {
        /// The join, by its place in the task's `joins`.
        join: usize,
        /// The build task's kept column.
        column: usize,
    },
}

/// An equi-join of a task's rows with the rows a build task kept (AQUOMAN's MERGE and
/// SORT_MERGE: the device uses what the data gives, see [`JoinMethod`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Join {
    /// The build task (an earlier NOP task of the graph).
    pub build: usize,
    /// This task's keys (integers; one, or two packed as 32-bit halves).
    pub probe_keys: Vec<Source>,
    /// The build task's kept columns holding its keys, pair by pair with `probe_keys`.
    pub build_keys: Vec<usize>,
    /// Inner, semi or anti.
    pub kind: JoinKind,
    /// How the rows are matched.
    #[serde(default)]
    pub method: JoinMethod,
    /// Semi and anti joins only: a build row matches only where its kept column differs
    /// from this task's value as well (TPC-H Q21's `l2.l_suppkey <> l1.l_suppkey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residual: Option<Residual>,
    /// Semi and anti joins with a build that aggregates, version 9: a build row matches only
    /// where the condition holds for the pair as well (TPC-H Q17's `l_quantity < 0.2 *
    /// avg(l_quantity)` of the part's lineitems).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<Condition>,
}

impl Join {
    /// The values of this task's rows the join reads: its keys, then its residual's value or
    /// its condition's.
    pub fn probe_sources(&self) -> impl Iterator<Item = &Source> {
        self.probe_keys
            .iter()
            .chain(self.residual.as_ref().map(|r| &r.probe))
            .chain(
                self.condition
                    .iter()
                    .flat_map(|c| c.left.sources().into_iter().chain(c.right.sources())),
            )
    }
}

/// The condition beyond the keys of a semi or anti join: `probe <> build` on integers without
/// nulls. The build then keeps one row per run of equal keys (a table in key order: one per
/// key), with its first value and whether another value followed, so "some build row of this
/// key holds another value" is answered exactly from at most one row per run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Residual {
    /// This task's value.
    pub probe: Source,
    /// The build task's kept column compared with it (not one of its keys).
    pub build: usize,
}

/// Which rows a join keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinKind {
    /// A row per matching pair (build duplicates repeat the probe row).
    Inner,
    /// Probe rows with a match, once each.
    Semi,
    /// Probe rows without a match.
    Anti,
    /// Every probe row once (version 9): with the build row of its key where there is one,
    /// and reading 0 from every build column where there is none. Only over a build that
    /// aggregates, on all its group keys (one row a key), and read only through the
    /// transformer's `Fetch`: TPC-H Q13's orders counted by customer, a customer without
    /// orders counting 0.
    Left,
}

/// How a join matches keys. `Auto` lets the device choose from the data, as AQUOMAN does:
/// positional lookup when the build keys are unique and dense (custkey, partkey, suppkey,
/// nation, region: the thesis's oid shortcut); otherwise a merge against the build's
/// (key, row) pairs sorted by key, which are already sorted when the build table is (orders
/// by orderkey: a streaming MERGE with lineitem) and radix-sorted otherwise (SORT_MERGE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinMethod {
    /// The device chooses.
    #[default]
    Auto,
    /// Positional lookup (unique dense keys only).
    Positional,
    /// Merge with the sorted build (the build is radix-sorted first when it is not sorted).
    Merge,
}

/// Where a task's starting row mask comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MaskSource {
    /// Every row of the table.
    All,
    /// The row mask an earlier task of the graph produced.
    Task(usize),
}

/// The Row Selector: a conjunction (product) of disjunctions (sums) of comparators, evaluated
/// as 64-bit mask words. No product selects every row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Selector {
    /// The products: a row is kept when every product holds, a product holds when any of its
    /// comparators does.
    pub products: Vec<Vec<Comparator>>,
}

impl Selector {
    /// Comparators in all products.
    pub fn comparators(&self) -> usize {
        self.products.iter().map(Vec::len).sum()
    }

    /// The table columns the selector reads, ascending.
    pub fn columns(&self) -> Vec<usize> {
        let mut c: Vec<usize> = self
            .products
            .iter()
            .flatten()
            .flat_map(Comparator::columns)
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

/// One comparator: a table column tested against constants. A null never passes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparator {
    /// The table column.
    pub column: usize,
    /// The test.
    pub test: Test,
}

impl Comparator {
    /// The table columns it reads (two for `Test::Columns`).
    pub fn columns(&self) -> Vec<usize> {
        match self.test {
            Test::Columns { other, .. } => vec![self.column, other],
            _ => vec![self.column],
        }
    }
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Whether `a op b` holds.
    #[inline]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// What a comparator tests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Test {
    /// An integer, date (days) or decimal column (as its scaled integer) against a constant
    /// at the column's scale.
    Int {
        /// The operator.
        op: CmpOp,
        /// The constant.
        value: i128,
    },
    /// Two integer, date or decimal columns of the same type and scale compared
    /// (`l_commitdate < l_receiptdate`).
    Columns {
        /// The operator.
        op: CmpOp,
        /// The column on the right.
        other: usize,
    },
    /// A string column equal to one of the strings (`negated`: equal to none of them).
    StrIn {
        /// The strings.
        values: Vec<String>,
        /// NOT IN / `<>`.
        negated: bool,
    },
    /// A string column matching a SQL LIKE pattern (`%` and `_`; no escape character).
    Like {
        /// The pattern.
        pattern: String,
        /// NOT LIKE.
        negated: bool,
    },
}

/// The Row Transformer: a straight-line program in static single assignment. Register `i` is
/// the result of `ops[i]`; every value is an exact scaled integer (i64 at run time, an
/// overflow is an error, never a wrapped value).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The instructions.
    pub ops: Vec<Op>,
}

impl Program {
    /// Checks that every operand names an earlier register, and each prefix's length.
    pub fn check(&self) -> Result<()> {
        for (i, op) in self.ops.iter().enumerate() {
            if let Op::Prefix { chars, .. } = *op {
                if !(1..=MAX_PREFIX_BYTES as u32).contains(&chars) {
                    return Err(Error::Offload {
                        detail: format!(
                            "transformer instruction {i} takes a prefix of {chars} characters; \
                             1 to {MAX_PREFIX_BYTES} are valid"
                        ),
                    });
                }
            }
            for r in op.operands() {
                if r >= i {
                    return Err(Error::Offload {
                        detail: format!(
                            "transformer instruction {i} reads register {r}, not defined before it"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Instructions that compute (loads and constants are the read port's and the
    /// instruction's immediate in the thesis, not processing-element instructions).
    pub fn arithmetic(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| {
                !matches!(
                    o,
                    Op::Load { .. } | Op::Prefix { .. } | Op::Fetch { .. } | Op::Const { .. }
                )
            })
            .count()
    }

    /// Table columns the program loads (flags' columns are the task's), ascending.
    pub fn columns(&self) -> Vec<usize> {
        let mut c: Vec<usize> = self
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Load { column } | Op::Prefix { column, .. } => Some(*column),
                _ => None,
            })
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

/// The most bytes a packed prefix ([`Op::Prefix`]) holds.
pub const MAX_PREFIX_BYTES: usize = 7;

/// The first `chars` characters of `s` as one integer, or `None` when they take more than
/// [`MAX_PREFIX_BYTES`] bytes. The bytes fill the integer from its top byte down, the lowest
/// byte holds their count, and the top bit is flipped: two prefixes compare as integers as
/// their strings compare byte by byte (a shorter one first where one begins the other).
pub fn pack_prefix(s: &str, chars: u32) -> Option<i64> {
    let end = s
        .char_indices()
        .nth(chars as usize)
        .map_or(s.len(), |(at, _)| at);
    let bytes = &s.as_bytes()[..end];
    if bytes.len() > MAX_PREFIX_BYTES {
        return None;
    }
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    word[7] = bytes.len() as u8;
    Some((u64::from_be_bytes(word) ^ (1 << 63)) as i64)
}

/// The string [`pack_prefix`] packed into `v` (`None` for a value it cannot have made).
pub fn unpack_prefix(v: i64) -> Option<String> {
    let word = ((v as u64) ^ (1 << 63)).to_be_bytes();
    let len = word[7] as usize;
    if len > MAX_PREFIX_BYTES || word[len..7].iter().any(|&b| b != 0) {
        return None;
    }
    String::from_utf8(word[..len].to_vec()).ok()
}

/// One transformer instruction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// A table column's values (integers, dates as days, decimals as scaled integers).
    Load {
        /// The table column.
        column: usize,
    },
    /// Flag `flag` of the task: 1 where its comparator holds, 0 where it does not (or the
    /// column is null).
    Flag {
        /// The flag, by its place in the task's `flags`.
        flag: usize,
    },
    /// An integer column of the build rows join `join` matched.
    Fetch {
        /// The join, by its place in the task's `joins`.
        join: usize,
        /// The build task's kept column.
        column: usize,
    },
    /// A constant.
    Const {
        /// The value.
        value: i64,
    },
    /// `a + b`
    Add(usize, usize),
    /// `a - b`
    Sub(usize, usize),
    /// `a * b`
    Mul(usize, usize),
    /// The calendar year of a date register (days since 1970-01-01), proleptic Gregorian.
    Year {
        /// The register.
        src: usize,
    },
    /// `a * 10^pow` (aligns decimal scales exactly).
    Scale {
        /// The register.
        src: usize,
        /// The power of ten.
        pow: u32,
    },
    /// The first `chars` characters of a string column, packed into an integer whose order is
    /// the strings' byte order ([`pack_prefix`]): a group key the host receives as the string
    /// (SQL's `substring(s FROM 1 FOR chars)`). A prefix longer than 7 bytes (characters
    /// beyond ASCII) makes the device decline, and the host runs the plan.
    Prefix {
        /// The table column (a string column without nulls).
        column: usize,
        /// Characters, 1 to 7.
        chars: u32,
    },
    /// `if cond then a else b`, branch-free (an addition to the thesis's ISA, for CASE):
    /// `cond` is the comparator `register op value`.
    Select {
        /// The register tested.
        test: usize,
        /// The operator.
        op: CmpOp,
        /// The constant it is compared with.
        value: i64,
        /// Taken when the test holds.
        then: usize,
        /// Taken otherwise.
        otherwise: usize,
    },
}

impl Op {
    /// The registers the instruction reads.
    pub fn operands(&self) -> Vec<usize> {
        match *self {
            Op::Load { .. }
            | Op::Prefix { .. }
            | Op::Fetch { .. }
            | Op::Flag { .. }
            | Op::Const { .. } => vec![],
            Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => vec![a, b],
            Op::Scale { src, .. } | Op::Year { src } => vec![src],
            Op::Select {
                test,
                then,
                otherwise,
                ..
            } => vec![test, then, otherwise],
        }
    }
}

/// The Swissknife operator of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Operator {
    /// Hands the selected rows' registers on as they are.
    Nop,
    /// Aggregates every selected row into one row.
    Aggregate {
        /// The aggregates.
        aggs: Vec<Agg>,
    },
    /// Aggregates per group of the keys; under memory pressure it emits partial groups early
    /// (spills them to the host, whose final aggregate merges them).
    AggregateGroupBy {
        /// The group keys.
        keys: Vec<GroupKey>,
        /// The aggregates.
        aggs: Vec<Agg>,
    },
}

/// A group key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum GroupKey {
    /// A dictionary-coded string column, grouped by code.
    Dictionary {
        /// The table column.
        column: usize,
    },
    /// A register's value.
    Register(usize),
    /// A column of the build rows an inner join matched (any type: strings too), grouped by
    /// the matched build row. Groups may then be finer than the SQL's (two build rows with
    /// the same value); the host's final aggregate merges them.
    Build {
        /// The join, by its place in the task's `joins`.
        join: usize,
        /// The build task's kept column.
        column: usize,
    },
}

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggFunc {
    /// Exact sum.
    Sum,
    /// Count of non-null values.
    Count,
    /// Count of rows.
    CountAll,
    /// Average: a count and an exact sum, emitted as the host's partial state.
    Avg,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

/// One aggregate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agg {
    /// The function.
    pub func: AggFunc,
    /// The register aggregated (none for `CountAll`).
    pub arg: Option<usize>,
    /// The decimal scale of the argument (for sums emitted as floats).
    pub scale: i8,
}

/// What a task emits: its columns, named and typed (Arrow type names, as
/// `arrow_schema::DataType` displays them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// (name, type) per column.
    pub fields: Vec<(String, String)>,
}
