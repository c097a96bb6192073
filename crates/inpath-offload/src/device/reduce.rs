//! Semi-join reductions: a small, filtered table that a graph joins late restricts the build
//! its key comes from, early.
//!
//! A task `P` whose selected rows inner-join a build on `P.c = B.k` keeps only build rows whose
//! key is among the values of `c` in `P`'s selected rows. Where `B.k` is a copy of a column of
//! an earlier task `X` (kept through inner joins only, each task on the way built for exactly
//! one join), `X`'s rows whose value is not among them can never reach the output: the device
//! drops them where `X` is read, with a semi join against a new build task that reads `P`'s
//! table with `P`'s selector and keeps `c`. TPC-H Q7 is the case: the nations named (2 of 25)
//! are joined last, above lineitem's 18 M rows at SF 10 (one fifth of the table kept by the
//! date) joined with every supplier; reduced, supplier keeps the suppliers of those two
//! nations and lineitem's build one row in twelve.
//!
//! The reduction is an optimisation only: every row it removes is one the graph's joins would
//! have removed later, so the answers are the same (the TPC-H suites run with it).

use crate::graph::{
    Join, JoinKind, JoinMethod, MaskSource, Operator, Output, Source, TableTask, TaskGraph,
};
use inpath_table::format::LogicalType;

/// A table's size and its columns' join kinds, as the device knows them.
pub(super) trait Tables {
    /// Rows of `table`.
    fn rows(&self, table: &str) -> Option<u64>;
    /// The name, Arrow type (as text) and join-key kind of column `column` of `table`; `None`
    /// for a column that cannot be a join key.
    fn key_column(&self, table: &str, column: usize) -> Option<(String, String, (u8, i8))>;
}

/// Which values of a column compare as the same key: integers of any width, dates, or
/// decimals of one scale.
pub(super) fn key_kind(t: LogicalType) -> Option<(u8, i8)> {
    match t {
        LogicalType::Int32 | LogicalType::Int64 => Some((0, 0)),
        LogicalType::Date32 => Some((1, 0)),
        LogicalType::Decimal128 { scale, .. } => Some((2, scale)),
        _ => None,
    }
}

/// How much larger the restricted table must be than the one that restricts it: the new task
/// reads the small table once more, which costs little only where it is small.
const SIZE_RATIO: u64 = 4;

impl super::LocalDevice {
    /// The graph this device runs for `graph`: with its semi-join reductions, where any
    /// applies (every path that runs or plans a graph goes through here).
    pub(super) fn reduced<'a>(&self, graph: &'a TaskGraph) -> std::borrow::Cow<'a, TaskGraph> {
        match reduced(graph, &self.tables) {
            Some(g) => std::borrow::Cow::Owned(g),
            None => std::borrow::Cow::Borrowed(graph),
        }
    }
}

/// `graph` with its semi-join reductions (see the module docs), or `None` when none applies.
pub(super) fn reduced(graph: &TaskGraph, tables: &dyn Tables) -> Option<TaskGraph> {
    // How many joins read each task's rows: a build read by two joins is not reduced.
    let mut readers = vec![0usize; graph.tasks.len()];
    for t in &graph.tasks {
        for j in &t.joins {
            if let Some(r) = readers.get_mut(j.build) {
                *r += 1;
            }
        }
    }
    // (origin task, its column, the table, selector and column that restrict it)
    let mut found: Vec<(usize, usize, &TableTask, usize)> = Vec::new();
    for p in &graph.tasks {
        for j in &p.joins {
            if j.kind != JoinKind::Inner
                || j.probe_keys.len() != 1
                || j.residual.is_some()
                || j.condition.is_some()
            {
                continue;
            }
            let [k] = j.build_keys.as_slice() else {
                continue;
            };
            match j.probe_keys[0] {
                // This task's own selected rows restrict the build's key.
                Source::Column(c)
                    if p.mask == MaskSource::All && !p.selector.products.is_empty() =>
                {
                    if let Some((x, cx)) = origin(graph, &readers, j.build, *k) {
                        found.push((x, cx, p, c));
                    }
                }
                // A filtered build restricts the value an earlier join of this task brought.
                Source::Build { join, column } => {
                    let Some(n) = graph.tasks.get(j.build) else {
                        continue;
                    };
                    let Some(&Source::Column(cn)) = n.keep.get(*k) else {
                        continue;
                    };
                    if n.mask != MaskSource::All
                        || n.selector.products.is_empty()
                        || n.operator != Operator::Nop
                    {
                        continue;
                    }
                    let Some(brought) = p.joins.get(join) else {
                        continue;
                    };
                    if let Some((x, cx)) = origin(graph, &readers, brought.build, column) {
                        found.push((x, cx, n, cn));
                    }
                }
                _ => {}
            }
        }
    }
    let mut adds: Vec<(usize, TableTask, usize)> = Vec::new();
    for (x, cx, by, c) in found {
        let x_task = &graph.tasks[x];
        let (Some(by_rows), Some(x_rows)) = (tables.rows(&by.table), tables.rows(&x_task.table))
        else {
            continue;
        };
        let (Some((name, ty, kind)), Some((_, _, x_kind))) = (
            tables.key_column(&by.table, c),
            tables.key_column(&x_task.table, cx),
        ) else {
            continue;
        };
        if kind != x_kind || by_rows.saturating_mul(SIZE_RATIO) > x_rows {
            continue;
        }
        let restrict = TableTask {
            selector: by.selector.clone(),
            keep: vec![Source::Column(c)],
            output: Output {
                fields: vec![(name, ty)],
            },
            ..TableTask::nop(by.table.clone())
        };
        // Already restricted so (a graph reduced before): nothing more to add.
        let done = x_task.joins.iter().any(|j| {
            j.kind == JoinKind::Semi
                && j.probe_keys == [Source::Column(cx)]
                && j.build_keys == [0]
                && graph.tasks.get(j.build) == Some(&restrict)
        });
        if !done
            && !adds
                .iter()
                .any(|(t, r, col)| *t == x && *col == cx && *r == restrict)
        {
            adds.push((x, restrict, cx));
        }
    }
    if adds.is_empty() {
        return None;
    }
    // The new build tasks go first; every task after them moves by as many places.
    let shift = adds.len();
    let mut tasks: Vec<TableTask> = adds.iter().map(|(_, r, _)| r.clone()).collect();
    for t in &graph.tasks {
        let mut t = t.clone();
        for j in &mut t.joins {
            j.build += shift;
        }
        if let MaskSource::Task(m) = &mut t.mask {
            *m += shift;
        }
        tasks.push(t);
    }
    for (i, (x, _, cx)) in adds.iter().enumerate() {
        // Last among the task's joins, so that no `Source::Build` place moves.
        tasks[x + shift].joins.push(Join {
            build: i,
            probe_keys: vec![Source::Column(*cx)],
            build_keys: vec![0],
            kind: JoinKind::Semi,
            method: JoinMethod::Auto,
            residual: None,
            condition: None,
        });
    }
    Some(TaskGraph {
        version: graph.version,
        tasks,
    })
}

/// The reductions `run` (what [`reduced`] made of `graph`) holds, each as `nation restricts
/// supplier.s_nationkey`: the tasks it added come first, each the build of a semi join
/// appended to the task it restricts.
pub(super) fn described(graph: &TaskGraph, run: &TaskGraph, tables: &dyn Tables) -> Vec<String> {
    let added = run.tasks.len().saturating_sub(graph.tasks.len());
    let mut out = Vec::new();
    for task in run.tasks.iter().skip(added) {
        for j in task
            .joins
            .iter()
            .filter(|j| j.build < added && j.kind == JoinKind::Semi)
        {
            let (Some(by), [Source::Column(c)]) = (run.tasks.get(j.build), j.probe_keys.as_slice())
            else {
                continue;
            };
            let column = tables
                .key_column(&task.table, *c)
                .map_or_else(|| format!("column {c}"), |(name, _, _)| name);
            out.push(format!("{} restricts {}.{column}", by.table, task.table));
        }
    }
    out
}

/// The task and table column that build `b`'s kept column `k` copies, through inner joins,
/// where every task on the way is read by exactly one join (so rows dropped at the origin are
/// dropped nowhere else).
fn origin(
    graph: &TaskGraph,
    readers: &[usize],
    mut b: usize,
    mut k: usize,
) -> Option<(usize, usize)> {
    loop {
        let task = graph.tasks.get(b)?;
        if readers.get(b) != Some(&1)
            || task.operator != Operator::Nop
            || task.mask != MaskSource::All
        {
            return None;
        }
        match *task.keep.get(k)? {
            Source::Column(c) => return Some((b, c)),
            Source::Build { join, column } => {
                let j = task.joins.get(join)?;
                if j.kind != JoinKind::Inner {
                    return None;
                }
                b = j.build;
                k = column;
            }
            Source::Flag(_) => return None,
        }
    }
}

impl Tables
    for std::collections::HashMap<String, std::sync::Arc<inpath_table::reader::TableReader>>
{
    fn rows(&self, table: &str) -> Option<u64> {
        Some(self.get(table)?.row_count())
    }

    fn key_column(&self, table: &str, column: usize) -> Option<(String, String, (u8, i8))> {
        let reader = self.get(table)?;
        let kind = key_kind(reader.manifest().columns.get(column)?.logical)?;
        let schema = reader.schema();
        let field = schema.fields().get(column)?;
        Some((field.name().clone(), field.data_type().to_string(), kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Agg, AggFunc, Comparator, Selector, Test};
    use std::collections::HashMap;

    /// Per column of a fake table: its name and whether it is an integer key.
    type Columns = Vec<(&'static str, bool)>;

    /// Tables by name: rows and columns.
    struct Fake(HashMap<&'static str, (u64, Columns)>);

    impl Tables for Fake {
        fn rows(&self, table: &str) -> Option<u64> {
            self.0.get(table).map(|t| t.0)
        }
        fn key_column(&self, table: &str, column: usize) -> Option<(String, String, (u8, i8))> {
            let (name, int) = *self.0.get(table)?.1.get(column)?;
            int.then(|| (name.to_string(), "Int64".to_string(), (0, 0)))
        }
    }

    fn fake() -> Fake {
        Fake(HashMap::from([
            (
                "nation",
                (25, vec![("n_nationkey", true), ("n_name", false)]),
            ),
            (
                "supplier",
                (10_000, vec![("s_suppkey", true), ("s_nationkey", true)]),
            ),
            (
                "lineitem",
                (6_000_000, vec![("l_orderkey", true), ("l_suppkey", true)]),
            ),
        ]))
    }

    fn task(table: &str) -> TableTask {
        TableTask::nop(table)
    }

    fn named() -> Selector {
        Selector {
            products: vec![vec![Comparator {
                column: 1,
                test: Test::StrIn {
                    values: vec!["FRANCE".into(), "GERMANY".into()],
                    negated: false,
                },
            }]],
        }
    }

    fn keeps(t: &mut TableTask, keep: Vec<Source>) {
        t.output.fields = (0..keep.len())
            .map(|i| (format!("k{i}"), "Int64".into()))
            .collect();
        t.keep = keep;
    }

    fn inner(build: usize, probe: Source, key: usize) -> Join {
        Join {
            build,
            probe_keys: vec![probe],
            build_keys: vec![key],
            kind: JoinKind::Inner,
            method: JoinMethod::Auto,
            residual: None,
            condition: None,
        }
    }

    fn count(graph_last: &mut TableTask) {
        graph_last.operator = Operator::Aggregate {
            aggs: vec![Agg {
                func: AggFunc::CountAll,
                arg: None,
                scale: 0,
            }],
        };
        graph_last.output = Output {
            fields: vec![("n".into(), "Int64".into())],
        };
    }

    /// A filtered nation, supplier, and lineitem last joining both (nation through the
    /// supplier's s_nationkey), counted.
    fn lineitem_last() -> TaskGraph {
        let mut nation = task("nation");
        nation.selector = named();
        keeps(&mut nation, vec![Source::Column(0)]);
        let mut supplier = task("supplier");
        keeps(&mut supplier, vec![Source::Column(0), Source::Column(1)]);
        let mut lineitem = task("lineitem");
        lineitem.joins = vec![
            inner(1, Source::Column(1), 0),
            inner(0, Source::Build { join: 0, column: 1 }, 0),
        ];
        count(&mut lineitem);
        TaskGraph {
            version: crate::GRAPH_VERSION,
            tasks: vec![nation, supplier, lineitem],
        }
    }

    /// TPC-H Q7's shape with lineitem last: a filtered nation joined through the supplier
    /// lineitem brought restricts the supplier build.
    #[test]
    fn a_filtered_build_restricts_the_build_its_key_came_from() {
        let graph = lineitem_last();
        graph.check().unwrap();
        let nation = &graph.tasks[0];
        let r = reduced(&graph, &fake()).expect("a reduction");
        r.check().unwrap();
        assert_eq!(r.tasks.len(), 4);
        // The new task: nation's selected rows, keeping the key.
        assert_eq!(r.tasks[0].table, "nation");
        assert_eq!(r.tasks[0].selector, nation.selector);
        assert_eq!(r.tasks[0].keep, vec![Source::Column(0)]);
        assert_eq!(
            r.tasks[0].output.fields,
            vec![("n_nationkey".into(), "Int64".into())]
        );
        // Supplier semi-joins it on s_nationkey; every other reference moved by one.
        let semi = r.tasks[2].joins.last().unwrap();
        assert_eq!(
            (semi.build, semi.kind, &semi.probe_keys, &semi.build_keys),
            (0, JoinKind::Semi, &vec![Source::Column(1)], &vec![0])
        );
        assert_eq!(r.tasks[3].joins[0].build, 2);
        assert_eq!(r.tasks[3].joins[1].build, 1);
        // A reduced graph is reduced no further: the restriction is there already.
        assert!(reduced(&r, &fake()).is_none());
    }

    /// The last task's own selector restricts a build its join key reaches through an inner
    /// join (Q7 with nation last).
    #[test]
    fn a_filtered_probe_restricts_the_origin_of_its_build_key() {
        let mut supplier = task("supplier");
        keeps(&mut supplier, vec![Source::Column(0), Source::Column(1)]);
        let mut lineitem = task("lineitem");
        lineitem.joins = vec![inner(0, Source::Column(1), 0)];
        keeps(&mut lineitem, vec![Source::Build { join: 0, column: 1 }]);
        let mut nation = task("nation");
        nation.selector = named();
        nation.joins = vec![inner(1, Source::Column(0), 0)];
        count(&mut nation);
        let graph = TaskGraph {
            version: crate::GRAPH_VERSION,
            tasks: vec![supplier, lineitem, nation],
        };
        graph.check().unwrap();
        let r = reduced(&graph, &fake()).expect("a reduction");
        r.check().unwrap();
        assert_eq!(r.tasks[0].table, "nation");
        let semi = r.tasks[1].joins.last().unwrap();
        assert_eq!((semi.build, semi.kind), (0, JoinKind::Semi));
        assert_eq!(semi.probe_keys, vec![Source::Column(1)]);
    }

    /// No reduction where it could change an answer or would not pay: a semi join in place
    /// of the inner one, a build read twice, a restricting table not much smaller, a string
    /// key, no selector.
    #[test]
    fn no_reduction_where_it_could_change_an_answer_or_would_not_pay() {
        let base = lineitem_last();
        assert!(reduced(&base, &fake()).is_some());

        // The restricting table is not a quarter of the restricted one's size.
        let mut tables = fake();
        tables.0.get_mut("supplier").unwrap().0 = 99;
        assert!(reduced(&base, &tables).is_none());

        // The key is not an integer column.
        let mut tables = fake();
        tables.0.get_mut("supplier").unwrap().1[1].1 = false;
        assert!(reduced(&base, &tables).is_none());

        // No selector on nation: nothing restricts.
        let mut g = base.clone();
        g.tasks[0].selector = Selector::default();
        assert!(reduced(&g, &fake()).is_none());

        // A residual or semi join in place of the inner one.
        let mut g = base.clone();
        g.tasks[2].joins[1].kind = JoinKind::Semi;
        assert!(reduced(&g, &fake()).is_none());

        // A restricting task whose rows come from another task's mask.
        let mut g = base.clone();
        g.tasks[0].mask = MaskSource::Task(0);
        assert!(reduced(&g, &fake()).is_none());

        // The supplier build read by a second join: rows it would drop matter elsewhere.
        let mut g = base.clone();
        let mut other = g.tasks[2].clone();
        other.joins.truncate(1);
        g.tasks.push(other);
        assert!(reduced(&g, &fake()).is_none());
    }
}
