//! A task prepared for the lanes: columns resolved against the tables, what is kept and
//! emitted, the pages that survive the zone maps.

use super::groups::{Groups, RANGE_SLOTS};
use crate::graph::{
    Agg, AggFunc, CmpOp, Comparator, GroupKey, Op, Operator, Source, TableTask, Test,
};
use crate::join::{Built, Kept};
use arrow_schema::{DataType, SchemaRef};
use inpath_table::error::{Error, Result};
use inpath_table::format::{LogicalType, Scalar};
use inpath_table::reader::TableReader;
use std::sync::Arc;

/// A task checked against its table, ready for lanes.
pub(super) struct Prepared {
    pub(super) reader: Arc<TableReader>,
    pub(super) task: TableTask,
    pub(super) schema: SchemaRef,
    /// Columns the selector reads, then those only the program reads.
    pub(super) selector_columns: Vec<usize>,
    /// Columns read only as integers: kept as their pages' bit-packed deltas where a page
    /// allows ([`Packed`]), never decoded whole.
    pub(super) packed_columns: Vec<usize>,
    /// Packed columns loaded beyond the selector (their deltas kept for the page).
    pub(super) packed_kept: Vec<usize>,
    pub(super) program_columns: Vec<usize>,
    /// Per output column, in order: what fills it.
    pub(super) emit: Vec<Emit>,
    /// Per join of the task: the build rows it matches.
    pub(super) builds: Vec<Arc<Built>>,
    /// What the group table keys on: group keys naming the same thing (two columns of one
    /// join's build row) share one identity.
    pub(super) identities: Vec<Identity>,
    /// Per identity that is a register loading a column: the column's least value and how
    /// many values its zone maps allow, when a dense table can hold them.
    pub(super) register_ranges: Vec<Option<(i64, usize)>>,
    /// Per group key: its identity.
    pub(super) key_identity: Vec<usize>,
    /// A build task: how each kept column is kept.
    pub(super) keep_as: Vec<KeepAs>,
    /// The tables late kept columns are read from.
    pub(super) origins: Vec<Origin>,
    /// A build for a semi or anti join: rows repeating the previous row's kept values are
    /// dropped.
    pub(super) distinct: bool,
    /// A presence build (a semi or anti join's one integer key, nothing else kept): the key's
    /// least value by its zone maps and how many values they span. Lanes then set the key's
    /// bit in a bitmap of that many bits instead of keeping rows.
    pub(super) presence: Option<(i64, usize)>,
    /// A build for a semi or anti join with a residual condition on kept column `c`: one row
    /// per run of equal keys (every other kept column), `c` holding the run's first value
    /// and whether another followed (see `join::encode_residual`).
    pub(super) summarize: Option<usize>,
    /// A build that aggregates: lanes hold their groups for the device to merge into build
    /// rows, and never spill them (partial groups are no join's rows).
    pub(super) hold_groups: bool,
    /// A build with a HAVING whose group keys are all register values, one of them a table
    /// column whose pages hold disjoint ranges (see [`Prepared::disjoint_key`]): (that key's
    /// identity, the column). Lanes then finish a page's inner groups as they go.
    pub(super) complete_key: Option<(usize, usize)>,
}

/// How a build task keeps a column.
#[derive(Clone, Copy, Debug)]
pub(super) enum KeepAs {
    /// By value.
    Int(Source),
    /// Late: the rows' places in `origins[origin]`'s table, whose column `column` it is.
    Late { origin: usize, column: usize },
}

/// Where late kept rows are: the task's own table, or a table a join's build kept late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    Own,
    Nested { join: usize, places: usize },
}

/// What a group is told apart by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Identity {
    /// A dictionary code of the task's table's column.
    Dictionary(usize),
    /// A register's value.
    Register(usize),
    /// The build row a join matched.
    BuildRow(usize),
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Emit {
    Key(usize),
    /// An aggregate's state field: (aggregate, which field of its state).
    State(usize, usize),
}

impl Prepared {
    pub(super) fn new(
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
        // A register key loaded from a column whose values span at most RANGE_SLOTS (by its
        // zone maps) is a dense table's key, as dictionary codes are: its value less the
        // column's least.
        let register_ranges = identities
            .iter()
            .map(|id| {
                let Identity::Register(r) = *id else {
                    return None;
                };
                let Some(&Op::Load { column }) = task.transformer.ops.get(r) else {
                    return None;
                };
                let (least, span) = column_range(&reader, column)?;
                let size = usize::try_from(span).ok()?;
                (size <= RANGE_SLOTS).then_some((least, size))
            })
            .collect();
        Ok(Prepared {
            reader,
            task,
            schema,
            register_ranges,
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
            presence: None,
            summarize: None,
            hold_groups: false,
            complete_key: None,
        })
    }

    pub(super) fn origin_reader(&self, o: Origin) -> Arc<TableReader> {
        match o {
            Origin::Own => self.reader.clone(),
            Origin::Nested { join, places } => self.builds[join].places[places].reader.clone(),
        }
    }

    pub(super) fn keys(&self) -> &[GroupKey] {
        match &self.task.operator {
            Operator::AggregateGroupBy { keys, .. } => keys,
            _ => &[],
        }
    }

    /// For a build whose groups have a HAVING: a group key that is a table column's value
    /// (every key a register, none a dictionary code or build row) whose pages hold disjoint
    /// ranges, meeting at most at their ends (a table in that column's order: lineitem by
    /// orderkey). A key value strictly inside one page's range is then in no other page, so
    /// that page ends its groups: the lane tests them and keeps only those that pass (TPC-H
    /// Q18 keeps 57 orders of 1.5 million), never holding every group.
    pub(super) fn disjoint_key(&self) -> Option<(usize, usize)> {
        if self.task.having.is_empty() {
            return None;
        }
        let registers: Option<Vec<usize>> = self
            .identities
            .iter()
            .map(|i| match *i {
                Identity::Register(r) => Some(r),
                _ => None,
            })
            .collect();
        for (id, r) in registers?.into_iter().enumerate() {
            let Some(&Op::Load { column }) = self.task.transformer.ops.get(r) else {
                continue;
            };
            let ranges: Option<Vec<(i128, i128)>> = (0..self.reader.page_count())
                .map(|p| self.page_range(column, p))
                .collect();
            let Some(mut ranges) = ranges else {
                continue;
            };
            ranges.sort_unstable();
            if ranges.windows(2).all(|w| w[0].1 <= w[1].0) {
                return Some((id, column));
            }
        }
        None
    }

    /// See [`column_range`].
    pub(super) fn column_range(&self, column: usize) -> Option<(i64, u64)> {
        column_range(&self.reader, column)
    }

    /// A page's smallest and largest value of an integer column without nulls, from its zone
    /// map.
    pub(super) fn page_range(&self, column: usize, page: usize) -> Option<(i128, i128)> {
        page_range(&self.reader, column, page)
    }

    /// Whether group `i` of `g` passes the task's HAVING (every group does without one).
    pub(super) fn passes_having(&self, g: &Groups, i: usize) -> bool {
        let aggs = self.aggs();
        self.task
            .having
            .iter()
            .all(|h| h.passes(aggs[h.agg].func, g.count[h.agg][i], g.acc[h.agg][i]))
    }

    /// The groups of `g` that pass the task's HAVING.
    pub(super) fn having(&self, g: Groups) -> Groups {
        if self.task.having.is_empty() {
            return g;
        }
        let picks: Vec<u32> = (0..g.len)
            .filter(|&i| self.passes_having(&g, i))
            .map(|i| i as u32)
            .collect();
        g.subset(&picks)
    }

    pub(super) fn aggs(&self) -> &[Agg] {
        match &self.task.operator {
            Operator::Aggregate { aggs } | Operator::AggregateGroupBy { aggs, .. } => aggs,
            Operator::Nop => &[],
        }
    }

    /// The pages left after zone maps ([`pruned_pages`]).
    pub(super) fn pruned_pages(&self) -> Result<Vec<usize>> {
        pruned_pages(&self.task, &self.reader)
    }
}

/// The pages of `reader` left to `task` after zone maps: products of one integer comparator
/// confine the column to a range.
pub(super) fn pruned_pages(task: &TableTask, reader: &TableReader) -> Result<Vec<usize>> {
    let mut pages: Vec<usize> = (0..reader.page_count()).collect();
    for product in &task.selector.products {
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
        let keep = reader.prune(*column, lo.as_ref(), hi.as_ref())?;
        pages.retain(|p| keep.binary_search(p).is_ok());
    }
    Ok(pages)
}

/// Rows of a page the transformer works on: a run, or picked rows (ascending).
pub(super) enum Rows<'a> {
    Range(usize, usize),
    Pick(&'a [u32]),
}

impl Rows<'_> {
    /// The rows' places in the page.
    pub(super) fn indices(&self) -> Vec<u32> {
        match *self {
            Rows::Range(start, n) => (start as u32..(start + n) as u32).collect(),
            Rows::Pick(rows) => rows.to_vec(),
        }
    }

    pub(super) fn gather<T: Copy, U>(&self, values: &[T], f: impl Fn(T) -> U) -> Vec<U> {
        match *self {
            Rows::Range(start, n) => values[start..start + n].iter().map(|&v| f(v)).collect(),
            Rows::Pick(rows) => rows.iter().map(|&r| f(values[r as usize])).collect(),
        }
    }
}

/// A page's smallest and largest value of an integer column without nulls, from its zone map.
/// The least value of table column `column` and how many values its zone maps span over every
/// page, where every page has one (integers without nulls).
fn column_range(reader: &TableReader, column: usize) -> Option<(i64, u64)> {
    let (mut lo, mut hi) = (i128::MAX, i128::MIN);
    for page in 0..reader.page_count() {
        let (a, b) = page_range(reader, column, page)?;
        (lo, hi) = (lo.min(a), hi.max(b));
    }
    let span = u64::try_from(hi.checked_sub(lo)?.checked_add(1)?).ok()?;
    Some((i64::try_from(lo).ok()?, span))
}

fn page_range(reader: &TableReader, column: usize, page: usize) -> Option<(i128, i128)> {
    let z = reader.zone_map(column, page).ok()?;
    match (&z.min, &z.max) {
        (Some(Scalar::Int(lo)), Some(Scalar::Int(hi))) if z.null_count == 0 => Some((*lo, *hi)),
        _ => None,
    }
}
