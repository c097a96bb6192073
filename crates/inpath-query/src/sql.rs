//! SQL over column tables: Apache DataFusion as the host engine, with [`ColumnTable`] as its
//! `TableProvider`.
//!
//! - **Projection**: only the columns a query names are read; the others are never unsealed.
//! - **Filters** that reference only the table's own columns (comparisons, BETWEEN, IN lists,
//!   LIKE, IS NULL, AND/OR/NOT of these, casts and deterministic functions) are pushed down as
//!   *exact*: DataFusion drops its own filter and the scan evaluates the expression per page
//!   with DataFusion's physical expression, so the semantics are DataFusion's own.
//! - **Zone maps**: single-column comparisons, BETWEEN, IN lists and LIKE prefixes prune pages
//!   before anything is read ([`TableReader::prune`]).
//! - **Selection first**: per page, the filter's columns are read and the filter evaluated;
//!   when no row is selected the page's other columns are never read or unsealed.
//! - **Limit** (when DataFusion hands one down) stops the scan early.
//!
//! [`SqlSession`] registers every table of a directory under its directory name and runs
//! statements on its own thread pool; [`ScanStats`] counts pages pruned, unselected and read.
//!
//! One deliberate departure from DataFusion's defaults: `avg` over a decimal column returns a
//! double computed from the exact values (as DuckDB does), not a decimal truncated to four
//! more digits, so averages agree with DuckDB to ~1e-15 relative (see [`AvgDecimalAsDouble`]).

use crate::rule::{Decision, DeviceExec, Limits, OffloadRule};
use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{filter_record_batch, prep_null_mask_filter};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DataFusionError, ScalarValue, Statistics};
use datafusion::datasource::TableType;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::expr::{AggregateFunction, InList, Like};
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::registry::FunctionRegistry;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    cast, Between, BinaryExpr, Expr, ExprSchemable, Operator, TableProviderFilterPushDown,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream, StatisticsArgs,
};
use datafusion::prelude::{SessionConfig, SessionContext};
use inpath_offload::{Device, DeviceStats, LocalDevice, ProcessDevice, TaskGraph};
use inpath_seal::KeyRing;
use inpath_table::error::{Error, Result};
use inpath_table::format::{LogicalType, Scalar};
use inpath_table::reader::{open_table_dirs, TableReader};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type DfResult<T> = datafusion::common::Result<T>;

/// Counters of what scans did, shared by every table of a session.
#[derive(Debug, Default)]
pub struct ScanCounters {
    pages_total: AtomicU64,
    pages_pruned: AtomicU64,
    pages_unselected: AtomicU64,
    records_read: AtomicU64,
    bytes_read: AtomicU64,
    rows_scanned: AtomicU64,
    rows_out: AtomicU64,
    bytes_out: AtomicU64,
}

impl ScanCounters {
    /// The counts so far.
    pub fn snapshot(&self) -> ScanStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ScanStats {
            pages_total: get(&self.pages_total),
            pages_pruned: get(&self.pages_pruned),
            pages_unselected: get(&self.pages_unselected),
            records_read: get(&self.records_read),
            bytes_read: get(&self.bytes_read),
            rows_scanned: get(&self.rows_scanned),
            rows_out: get(&self.rows_out),
            bytes_out: get(&self.bytes_out),
        }
    }

    /// Sets every count to zero.
    pub fn reset(&self) {
        for c in [
            &self.pages_total,
            &self.pages_pruned,
            &self.pages_unselected,
            &self.records_read,
            &self.bytes_read,
            &self.rows_scanned,
            &self.rows_out,
            &self.bytes_out,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// What the scans of a statement (or a session) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    /// Pages (row ranges) of the scanned tables.
    pub pages_total: u64,
    /// Pages skipped by zone maps: nothing read.
    pub pages_pruned: u64,
    /// Pages whose filter columns were read and selected no row: their other columns were
    /// never read or unsealed.
    pub pages_unselected: u64,
    /// Column page records read and unsealed.
    pub records_read: u64,
    /// Bytes of those records (what a storage device would have sent).
    pub bytes_read: u64,
    /// Rows in the pages that were read.
    pub rows_scanned: u64,
    /// Rows the scans handed to DataFusion.
    pub rows_out: u64,
    /// Bytes of the Arrow batches the scans handed to DataFusion (what crossed to the host).
    pub bytes_out: u64,
}

/// A column table as a DataFusion table.
#[derive(Debug)]
pub struct ColumnTable {
    reader: Arc<TableReader>,
    counters: Arc<ScanCounters>,
}

impl ColumnTable {
    /// Opens the table in `dir` (keys open sealed manifests and pages); scans add to
    /// `counters`.
    pub fn open(dir: &Path, keys: &KeyRing, counters: Arc<ScanCounters>) -> Result<ColumnTable> {
        Ok(ColumnTable::new(TableReader::open(dir, keys)?, counters))
    }

    /// The table `reader` reads; scans add to `counters`.
    pub fn new(reader: TableReader, counters: Arc<ScanCounters>) -> ColumnTable {
        ColumnTable {
            reader: Arc::new(reader.with_dictionary_arrays()),
            counters,
        }
    }

    /// The reader underneath.
    pub fn reader(&self) -> &TableReader {
        &self.reader
    }
}

/// Whether `expr` can be evaluated by the scan alone: it references only this table's columns,
/// at least one of them, and holds nothing volatile, no subquery, no aggregate.
fn pushable(expr: &Expr, reader: &TableReader) -> bool {
    let mut ok = true;
    let mut columns = 0;
    let _ = expr.apply(|e| {
        match e {
            Expr::Column(c) => {
                columns += 1;
                ok &= reader.column_index(&c.name).is_some();
            }
            Expr::Literal(..)
            | Expr::BinaryExpr(_)
            | Expr::Like(_)
            | Expr::SimilarTo(_)
            | Expr::Not(_)
            | Expr::IsNotNull(_)
            | Expr::IsNull(_)
            | Expr::IsTrue(_)
            | Expr::IsFalse(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotTrue(_)
            | Expr::IsNotFalse(_)
            | Expr::IsNotUnknown(_)
            | Expr::Negative(_)
            | Expr::Between(_)
            | Expr::Case(_)
            | Expr::Cast(_)
            | Expr::TryCast(_)
            | Expr::InList(_) => {}
            Expr::ScalarFunction(_) => ok &= !e.is_volatile_node(),
            _ => ok = false,
        }
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok && columns > 0
}

/// Drops table qualifiers so that the expression binds to the table's own schema.
fn unqualified(expr: &Expr) -> DfResult<Expr> {
    expr.clone()
        .transform(|e| {
            Ok(match e {
                Expr::Column(c) if c.relation.is_some() => {
                    Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))
                }
                other => Transformed::no(other),
            })
        })
        .map(|t| t.data)
}

/// How a literal bound is rounded when it must be rescaled to the column's decimal scale.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Round {
    Down,
    Up,
    Exact,
}

/// The zone-map bound a literal gives for a column of type `logical`, if any.
pub(crate) fn bound(value: &ScalarValue, logical: LogicalType, round: Round) -> Option<Scalar> {
    // A literal compared with a dictionary column is coerced to a dictionary scalar.
    if let ScalarValue::Dictionary(_, inner) = value {
        return bound(inner, logical, round);
    }
    let int = |v: &ScalarValue| -> Option<i128> {
        Some(match v {
            ScalarValue::Int8(Some(x)) => *x as i128,
            ScalarValue::Int16(Some(x)) => *x as i128,
            ScalarValue::Int32(Some(x)) => *x as i128,
            ScalarValue::Int64(Some(x)) => *x as i128,
            ScalarValue::UInt8(Some(x)) => *x as i128,
            ScalarValue::UInt16(Some(x)) => *x as i128,
            ScalarValue::UInt32(Some(x)) => *x as i128,
            ScalarValue::UInt64(Some(x)) => *x as i128,
            _ => return None,
        })
    };
    match logical {
        LogicalType::Int32 | LogicalType::Int64 => int(value).map(Scalar::Int),
        LogicalType::Date32 => match value {
            ScalarValue::Date32(Some(d)) => Some(Scalar::Int(*d as i128)),
            _ => None,
        },
        LogicalType::Decimal128 { scale, .. } => {
            let (v, s) = match value {
                ScalarValue::Decimal128(Some(v), _, s) => (*v, *s),
                other => (int(other)?, 0),
            };
            let diff = scale as i32 - s as i32;
            if diff >= 0 {
                let f = 10i128.checked_pow(diff as u32)?;
                v.checked_mul(f).map(Scalar::Int)
            } else {
                let f = 10i128.checked_pow((-diff) as u32)?;
                let (q, r) = (v.div_euclid(f), v.rem_euclid(f));
                match (round, r) {
                    (_, 0) => Some(Scalar::Int(q)),
                    (Round::Down, _) => Some(Scalar::Int(q)),
                    (Round::Up, _) => Some(Scalar::Int(q + 1)),
                    (Round::Exact, _) => None,
                }
            }
        }
        LogicalType::Float64 => match value {
            ScalarValue::Float64(Some(f)) => Some(Scalar::float(*f)),
            ScalarValue::Float32(Some(f)) => Some(Scalar::float(*f as f64)),
            other => int(other).map(|i| Scalar::float(i as f64)),
        },
        LogicalType::Utf8 => match value {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => Some(Scalar::Str(s.clone())),
            _ => None,
        },
        LogicalType::Boolean => match value {
            ScalarValue::Boolean(Some(b)) => Some(Scalar::Bool(*b)),
            _ => None,
        },
    }
}

/// A column's range from one conjunct: (column, low, high), both inclusive.
type Range = (usize, Option<Scalar>, Option<Scalar>);

/// The range a single-column conjunct confines its column to, if it is of a kind zone maps
/// can use.
fn conjunct_range(expr: &Expr, reader: &TableReader) -> Option<Range> {
    let column = |e: &Expr| -> Option<(usize, LogicalType)> {
        let Expr::Column(c) = e else { return None };
        let i = reader.column_index(&c.name)?;
        Some((i, reader.manifest().columns[i].logical))
    };
    let literal = |e: &Expr| -> Option<ScalarValue> {
        match e {
            Expr::Literal(v, _) => Some(v.clone()),
            _ => None,
        }
    };
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (col, value, op) = match (column(left), literal(right)) {
                (Some(c), Some(v)) => (c, v, *op),
                _ => (column(right)?, literal(left)?, op.swap()?),
            };
            let (i, logical) = col;
            match op {
                Operator::Eq => {
                    let b = bound(&value, logical, Round::Exact)?;
                    Some((i, Some(b.clone()), Some(b)))
                }
                Operator::Lt | Operator::LtEq => {
                    Some((i, None, Some(bound(&value, logical, Round::Up)?)))
                }
                Operator::Gt | Operator::GtEq => {
                    Some((i, Some(bound(&value, logical, Round::Down)?), None))
                }
                _ => None,
            }
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let (i, logical) = column(expr)?;
            let lo = bound(&literal(low)?, logical, Round::Down);
            let hi = bound(&literal(high)?, logical, Round::Up);
            (lo.is_some() || hi.is_some()).then_some((i, lo, hi))
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let (i, logical) = column(expr)?;
            let mut lo: Option<Scalar> = None;
            let mut hi: Option<Scalar> = None;
            for item in list {
                let v = bound(&literal(item)?, logical, Round::Exact)?;
                if lo
                    .as_ref()
                    .is_none_or(|l| v.partial_cmp_to(l) == Some(std::cmp::Ordering::Less))
                {
                    lo = Some(v.clone());
                }
                if hi
                    .as_ref()
                    .is_none_or(|h| v.partial_cmp_to(h) == Some(std::cmp::Ordering::Greater))
                {
                    hi = Some(v);
                }
            }
            Some((i, lo, hi))
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let (i, logical) = column(expr)?;
            if logical != LogicalType::Utf8 {
                return None;
            }
            let pattern = match literal(pattern)? {
                ScalarValue::Dictionary(_, inner) => match *inner {
                    ScalarValue::Utf8(Some(s)) => s,
                    _ => return None,
                },
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s)) => s,
                _ => return None,
            };
            let prefix: String = pattern
                .chars()
                .take_while(|c| *c != '%' && *c != '_')
                .collect();
            (!prefix.is_empty()).then_some((i, Some(Scalar::Str(prefix)), None))
        }
        _ => None,
    }
}

/// The pushed-down filter, bound to the schema of the columns it reads.
#[derive(Debug, Clone)]
struct PushedFilter {
    /// Table column indices the filter reads, ascending.
    columns: Vec<usize>,
    /// Their schema (the batch the expression is evaluated on).
    schema: SchemaRef,
    expr: Arc<dyn PhysicalExpr>,
    /// The logical expression, for `EXPLAIN`.
    text: String,
}

fn external(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[async_trait]
impl TableProvider for ColumnTable {
    fn schema(&self) -> SchemaRef {
        self.reader.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if pushable(f, &self.reader) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    fn statistics(&self) -> Option<Statistics> {
        let schema = self.reader.schema();
        Some(
            Statistics::new_unknown(&schema)
                .with_num_rows(Precision::Exact(self.reader.row_count() as usize)),
        )
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let reader = &self.reader;
        let table_schema = reader.schema();
        let projection: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..table_schema.fields().len()).collect());
        let schema = Arc::new(table_schema.project(&projection)?);
        let filters: Vec<Expr> = filters.iter().map(unqualified).collect::<DfResult<_>>()?;

        // Zone maps first: pages no conjunct can match are never read.
        let mut pages: Vec<usize> = (0..reader.page_count()).collect();
        for f in &filters {
            for conjunct in split_conjunction(f) {
                if let Some((column, lo, hi)) = conjunct_range(conjunct, reader) {
                    let keep = reader
                        .prune(column, lo.as_ref(), hi.as_ref())
                        .map_err(external)?;
                    pages.retain(|p| keep.binary_search(p).is_ok());
                }
            }
        }

        let selector = (!filters.is_empty()).then(|| crate::rule::selector_for(&filters, reader));
        let filter = match conjunction(filters) {
            Some(expr) => {
                let mut columns: Vec<usize> = expr
                    .column_refs()
                    .into_iter()
                    .filter_map(|c| reader.column_index(&c.name))
                    .collect();
                columns.sort_unstable();
                columns.dedup();
                let filter_schema = Arc::new(table_schema.project(&columns)?);
                let df_schema = DFSchema::try_from(filter_schema.as_ref().clone())?;
                let text = expr.to_string();
                let physical = state.create_physical_expr(expr, &df_schema)?;
                Some(PushedFilter {
                    columns,
                    schema: filter_schema,
                    expr: physical,
                    text,
                })
            }
            None => None,
        };
        let partitions = state.config().target_partitions().max(1);
        Ok(Arc::new(
            ColumnScanExec::new(
                reader.clone(),
                self.counters.clone(),
                projection,
                schema,
                filter,
                pages,
                partitions,
                limit,
            )
            .with_selector(selector),
        ))
    }
}

/// The scan: pages split into contiguous runs, one run per output partition.
#[derive(Debug)]
pub struct ColumnScanExec {
    reader: Arc<TableReader>,
    counters: Arc<ScanCounters>,
    projection: Vec<usize>,
    schema: SchemaRef,
    filter: Option<PushedFilter>,
    /// The pages each partition reads, in row order.
    runs: Vec<Vec<usize>>,
    pages_total: usize,
    limit: Option<usize>,
    /// The pushed filter as an offload Row Selector, or why it is not one.
    selector: Option<std::result::Result<inpath_offload::graph::Selector, String>>,
    props: Arc<PlanProperties>,
}

impl ColumnScanExec {
    fn with_selector(
        mut self,
        selector: Option<std::result::Result<inpath_offload::graph::Selector, String>>,
    ) -> ColumnScanExec {
        self.selector = selector;
        self
    }

    /// The table read.
    pub fn reader(&self) -> &Arc<TableReader> {
        &self.reader
    }

    /// The table columns the scan outputs, in output order.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }

    /// The limit handed down, if any.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// The pushed filter as a Row Selector (`None` without a filter; an error names why the
    /// filter is not a sum of products of comparators).
    pub fn selector(
        &self,
    ) -> Option<&std::result::Result<inpath_offload::graph::Selector, String>> {
        self.selector.as_ref()
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        reader: Arc<TableReader>,
        counters: Arc<ScanCounters>,
        projection: Vec<usize>,
        schema: SchemaRef,
        filter: Option<PushedFilter>,
        pages: Vec<usize>,
        partitions: usize,
        limit: Option<usize>,
    ) -> ColumnScanExec {
        let pages_total = reader.page_count();
        ScanCounters::add(&counters.pages_total, pages_total as u64);
        ScanCounters::add(&counters.pages_pruned, (pages_total - pages.len()) as u64);
        // With a limit and no filter a single run reads only as many pages as it needs.
        let n = if limit.is_some() && filter.is_none() {
            1
        } else {
            partitions.min(pages.len()).max(1)
        };
        let mut runs = Vec::with_capacity(n);
        let (per, extra) = (pages.len() / n, pages.len() % n);
        let mut start = 0;
        for k in 0..n {
            let len = per + usize::from(k < extra);
            runs.push(pages[start..start + len].to_vec());
            start += len;
        }
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(n),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        ColumnScanExec {
            reader,
            counters,
            projection,
            schema,
            filter,
            runs,
            pages_total,
            limit,
            selector: None,
            props: Arc::new(props),
        }
    }

    fn rows_in(&self, pages: &[usize]) -> usize {
        pages
            .iter()
            .map(|&p| self.reader.manifest().page_rows(p))
            .sum()
    }
}

impl DisplayAs for ColumnScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let names: Vec<&str> = self
            .projection
            .iter()
            .map(|&c| self.reader.manifest().columns[c].name.as_str())
            .collect();
        let read: usize = self.runs.iter().map(Vec::len).sum();
        write!(
            f,
            "ColumnScanExec: table={}, columns=[{}], pages={read}/{}",
            self.reader.table(),
            names.join(", "),
            self.pages_total
        )?;
        if let Some(filter) = &self.filter {
            write!(f, ", filter={}", filter.text)?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for ColumnScanExec {
    fn name(&self) -> &str {
        "ColumnScanExec"
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
        // The filter is bound to the scan's own filter-column schema, not to an input's.
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
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
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let pages = self.runs.get(partition).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!(
                "ColumnScanExec: partition {partition} of {}",
                self.runs.len()
            ))
        })?;
        let run = PageRun {
            reader: self.reader.clone(),
            counters: self.counters.clone(),
            projection: self.projection.clone(),
            schema: self.schema.clone(),
            filter: self.filter.clone(),
            pages: pages.into_iter(),
            remaining: self.limit,
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(run),
        )))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> DfResult<Arc<Statistics>> {
        let rows = match args.partition() {
            Some(p) => self.runs.get(p).map_or(0, |r| self.rows_in(r)),
            None => self.runs.iter().map(|r| self.rows_in(r)).sum(),
        };
        let rows = match (&self.filter, self.limit) {
            (None, None) => Precision::Exact(rows),
            (None, Some(l)) => Precision::Exact(rows.min(l)),
            // DataFusion's own default selectivity for a filter it cannot analyse.
            (Some(_), _) => Precision::Inexact(rows / 5),
        };
        Ok(Arc::new(
            Statistics::new_unknown(&self.schema).with_num_rows(rows),
        ))
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// One partition's pages, read lazily: one batch per page that selects a row.
struct PageRun {
    reader: Arc<TableReader>,
    counters: Arc<ScanCounters>,
    projection: Vec<usize>,
    schema: SchemaRef,
    filter: Option<PushedFilter>,
    pages: std::vec::IntoIter<usize>,
    remaining: Option<usize>,
}

impl PageRun {
    fn read(&self, column: usize, page: usize) -> DfResult<ArrayRef> {
        let meta = self.reader.zone_map(column, page).map_err(external)?;
        ScanCounters::add(&self.counters.records_read, 1);
        ScanCounters::add(&self.counters.bytes_read, meta.len);
        self.reader.read_page(column, page).map_err(external)
    }

    /// The page's selected rows of the projection, or `None` when it selects none.
    fn page(&self, page: usize) -> DfResult<Option<RecordBatch>> {
        let rows = self.reader.manifest().page_rows(page);
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        ScanCounters::add(&self.counters.rows_scanned, rows as u64);
        let mut have: Vec<(usize, ArrayRef)> = Vec::new();
        let mut mask = None;
        if let Some(filter) = &self.filter {
            for &c in &filter.columns {
                have.push((c, self.read(c, page)?));
            }
            let batch = RecordBatch::try_new_with_options(
                filter.schema.clone(),
                have.iter().map(|(_, a)| a.clone()).collect(),
                &options,
            )?;
            let value = filter.expr.evaluate(&batch)?.into_array(rows)?;
            let mut selection = value
                .as_boolean_opt()
                .ok_or_else(|| {
                    DataFusionError::Internal(format!(
                        "the filter {} gave {} values, not booleans",
                        filter.text,
                        value.data_type()
                    ))
                })?
                .clone();
            if selection.null_count() > 0 {
                selection = prep_null_mask_filter(&selection);
            }
            let selected = selection.true_count();
            if selected == 0 {
                ScanCounters::add(&self.counters.pages_unselected, 1);
                return Ok(None);
            }
            if selected < rows {
                mask = Some(selection);
            }
        }
        let mut columns = Vec::with_capacity(self.projection.len());
        for &c in &self.projection {
            match have.iter().find(|(h, _)| *h == c) {
                Some((_, a)) => columns.push(a.clone()),
                None => columns.push(self.read(c, page)?),
            }
        }
        let batch = RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)?;
        Ok(Some(match mask {
            Some(mask) => filter_record_batch(&batch, &mask)?,
            None => batch,
        }))
    }
}

impl Iterator for PageRun {
    type Item = DfResult<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.remaining == Some(0) {
                return None;
            }
            let page = self.pages.next()?;
            match self.page(page) {
                Err(e) => {
                    self.pages = Vec::new().into_iter();
                    return Some(Err(e));
                }
                Ok(None) => continue,
                Ok(Some(mut batch)) => {
                    if let Some(left) = &mut self.remaining {
                        if batch.num_rows() > *left {
                            batch = batch.slice(0, *left);
                        }
                        *left -= batch.num_rows();
                    }
                    if batch.num_rows() == 0 {
                        continue;
                    }
                    ScanCounters::add(&self.counters.rows_out, batch.num_rows() as u64);
                    ScanCounters::add(
                        &self.counters.bytes_out,
                        batch.get_array_memory_size() as u64,
                    );
                    return Some(Ok(batch));
                }
            }
        }
    }
}

/// `avg(x)` over a decimal `x` becomes `avg(CAST(x AS DOUBLE))`: DuckDB's result type, and
/// within ~1e-15 relative of the exact mean, where DataFusion's decimal average truncates to
/// the input's scale + 4 (an error near 1e-8 relative on TPC-H Q1).
#[derive(Debug)]
pub struct AvgDecimalAsDouble;

impl FunctionRewrite for AvgDecimalAsDouble {
    fn name(&self) -> &str {
        "avg_decimal_as_double"
    }

    fn rewrite(
        &self,
        expr: Expr,
        schema: &DFSchema,
        _config: &ConfigOptions,
    ) -> DfResult<Transformed<Expr>> {
        let Expr::AggregateFunction(AggregateFunction { func, mut params }) = expr else {
            return Ok(Transformed::no(expr));
        };
        let decimal = func.name() == "avg"
            && params.args.len() == 1
            && matches!(
                params.args[0].get_type(schema),
                Ok(DataType::Decimal128(..) | DataType::Decimal256(..))
            );
        if !decimal {
            return Ok(Transformed::no(Expr::AggregateFunction(
                AggregateFunction { func, params },
            )));
        }
        let arg = params.args.remove(0);
        params.args.push(cast(arg, DataType::Float64));
        Ok(Transformed::yes(Expr::AggregateFunction(
            AggregateFunction { func, params },
        )))
    }
}

/// A SQL session over the column tables of a directory, with its own thread pool.
pub struct SqlSession {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    counters: Arc<ScanCounters>,
    tables: Vec<String>,
    offload: Option<Arc<OffloadRule>>,
}

/// How a session offloads work to a device (see [`crate::rule`] and `inpath-offload`).
#[derive(Clone, Debug, PartialEq)]
pub struct OffloadOptions {
    /// Device memory in bytes; `None`: 40 MiB per TPC-H SF 1 worth of rows (8.66 M rows over
    /// all tables), at least 128 bytes per row of a page and 1 MiB more per lane (one decoded
    /// page and its registers).
    pub memory: Option<u64>,
    /// Device lanes; `None`: the session's threads.
    pub lanes: Option<usize>,
    /// Hardware limits the tasks must fit ([`Limits::LIFTED`] by default).
    pub limits: Limits,
    /// Run the device in a process of its own ([`ProcessDevice`]): the program and arguments
    /// that serve the same tables over a pipe (`inpath query serve-device DIR`), to which
    /// `--lanes N --memory BYTES` are added. `None`: the device runs in this process.
    pub device_command: Option<Vec<std::ffi::OsString>>,
}

impl Default for OffloadOptions {
    fn default() -> Self {
        OffloadOptions {
            memory: None,
            lanes: None,
            limits: Limits::LIFTED,
            device_command: None,
        }
    }
}

/// Opens every table under `dir` (see [`inpath_table::table_dirs`]), each under its
/// directory's name.
fn open_tables(
    dir: &Path,
    keys: &KeyRing,
    counters: &Arc<ScanCounters>,
) -> Result<Vec<(String, ColumnTable)>> {
    Ok(open_table_dirs(dir, keys)?
        .into_iter()
        .map(|(name, reader)| (name, ColumnTable::new(reader, counters.clone())))
        .collect())
}

/// Rows of all eight TPC-H tables at SF 1.
const SF1_ROWS: u64 = 8_661_245;

/// What offload did to one statement's plan.
#[derive(Clone, Debug)]
pub struct OffloadExplain {
    /// The physical plan, with `DeviceExec` where the device runs a task.
    pub plan: String,
    /// `full` (every table read runs on the device), `partial` or `host`.
    pub class: &'static str,
    /// The task graphs the device runs.
    pub graphs: Vec<TaskGraph>,
    /// Per aggregate the rule looked at: offloaded or why not.
    pub decisions: Vec<Decision>,
    /// Scans left on the host.
    pub host_scans: usize,
}

impl std::fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSession")
            .field("tables", &self.tables)
            .finish()
    }
}

/// A statement's result: its schema (also when no row came back) and its batches.
#[derive(Clone, Debug)]
pub struct QueryResult {
    /// The columns.
    pub schema: SchemaRef,
    /// The rows.
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    /// Rows in the result.
    pub fn row_count(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

impl SqlSession {
    fn new_context(threads: usize, rule: Option<Arc<OffloadRule>>) -> Result<SessionContext> {
        if threads == 0 || threads > 1024 {
            return Err(Error::parameter("threads", threads, "1 to 1024"));
        }
        let config = SessionConfig::new()
            .with_target_partitions(threads)
            .with_information_schema(true);
        let mut ctx = SessionContext::new_with_config(config);
        if let Some(rule) = rule {
            let state = SessionStateBuilder::new_from_existing(ctx.state())
                .with_physical_optimizer_rule(rule)
                .build();
            ctx = SessionContext::new_with_state(state);
        }
        ctx.register_function_rewrite(Arc::new(AvgDecimalAsDouble))
            .map_err(sql_error)?;
        Ok(ctx)
    }

    fn runtime(threads: usize, dir: &Path) -> Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("inpath-query")
            .enable_all()
            .build()
            .map_err(|e| Error::io(dir, e))
    }

    /// A session over the Parquet files in `dir` (each `NAME.parquet` as table NAME), with
    /// the same settings as [`open`](Self::open): DataFusion-on-Parquet, the benchmark's peer.
    /// Its [`stats`](Self::stats) stay zero.
    pub fn open_parquet(dir: &Path, threads: usize) -> Result<SqlSession> {
        let ctx = SqlSession::new_context(threads, None)?;
        let runtime = SqlSession::runtime(threads, dir)?;
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::NoTables {
                path: dir.to_path_buf(),
            });
        }
        let mut tables = Vec::new();
        for file in files {
            let name = file
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let path = file.to_string_lossy().into_owned();
            runtime
                .block_on(ctx.register_parquet(
                    &name,
                    &path,
                    datafusion::prelude::ParquetReadOptions::default(),
                ))
                .map_err(sql_error)?;
            tables.push(name);
        }
        Ok(SqlSession {
            ctx,
            runtime,
            counters: Arc::new(ScanCounters::default()),
            tables,
            offload: None,
        })
    }

    /// Opens every table under `dir` (see [`inpath_table::table_dirs`]), each registered under its
    /// directory's name, with `threads` worker threads and as many scan partitions.
    pub fn open(dir: &Path, keys: &KeyRing, threads: usize) -> Result<SqlSession> {
        SqlSession::open_with(dir, keys, threads, None)
    }

    /// As [`open`](Self::open); with `offload`, sub-plans the device can run are handed to a
    /// [`LocalDevice`] over the same tables.
    pub fn open_with(
        dir: &Path,
        keys: &KeyRing,
        threads: usize,
        offload: Option<OffloadOptions>,
    ) -> Result<SqlSession> {
        let counters = Arc::new(ScanCounters::default());
        let opened = open_tables(dir, keys, &counters)?;
        let tables = opened.iter().map(|(name, _)| name.clone()).collect();
        let rule = match offload {
            None => None,
            Some(o) => {
                let rows: u64 = opened.iter().map(|(_, t)| t.reader().row_count()).sum();
                let lanes = o.lanes.unwrap_or(threads);
                let memory = o.memory.unwrap_or_else(|| {
                    let per_sf = inpath_offload::DEFAULT_MEMORY_PER_SF as f64;
                    // Each lane holds a decoded page of the task's columns (16 bytes per
                    // decimal) and its registers: 128 bytes a row and 1 MiB more.
                    let page_rows = opened
                        .iter()
                        .map(|(_, t)| t.reader().rows_per_page() as u64)
                        .max()
                        .unwrap_or(0);
                    let floor = (lanes as u64).saturating_mul(page_rows * 128 + (1 << 20));
                    (((rows as f64 / SF1_ROWS as f64) * per_sf) as u64).max(floor)
                });
                let device: Arc<dyn Device> = match o.device_command {
                    None => {
                        let readers = opened
                            .iter()
                            .map(|(name, t)| (name.clone(), t.reader.clone()))
                            .collect();
                        Arc::new(LocalDevice::new(readers, lanes, memory)?)
                    }
                    Some(argv) => {
                        let (program, args) = argv.split_first().ok_or_else(|| {
                            Error::parameter("device command", "empty", "a program to run")
                        })?;
                        let mut command = std::process::Command::new(program);
                        command.args(args);
                        command.arg("--lanes").arg(lanes.to_string());
                        command.arg("--memory").arg(memory.to_string());
                        Arc::new(ProcessDevice::spawn(command)?)
                    }
                };
                Some(Arc::new(OffloadRule::new(device, o.limits)))
            }
        };
        let ctx = SqlSession::new_context(threads, rule.clone())?;
        for (name, table) in opened {
            ctx.register_table(
                datafusion::common::TableReference::bare(name),
                Arc::new(table),
            )
            .map_err(sql_error)?;
        }
        let runtime = SqlSession::runtime(threads, dir)?;
        Ok(SqlSession {
            ctx,
            runtime,
            counters,
            tables,
            offload: rule,
        })
    }

    /// What the offload device did since the session opened or the last
    /// [`reset_stats`](Self::reset_stats) (`None` without offload).
    pub fn device_stats(&self) -> Option<DeviceStats> {
        self.offload.as_ref().map(|r| r.device().stats())
    }

    /// Whether the device's lanes run in this process, their CPU time counted in its own
    /// (`None` without offload).
    pub fn device_in_host_process(&self) -> Option<bool> {
        self.offload.as_ref().map(|r| r.device().in_host_process())
    }

    /// The device's memory budget in bytes (`None` without offload).
    pub fn device_memory(&self) -> Option<u64> {
        self.offload.as_ref().map(|r| r.memory_budget())
    }

    /// Plans a statement and says what offload made of it: its class, the task graphs, and
    /// why each aggregate that stayed on the host did.
    pub fn explain_offload(&self, text: &str) -> Result<OffloadExplain> {
        let rule = self.offload.as_ref().ok_or_else(|| Error::Offload {
            detail: "the session was opened without offload".into(),
        })?;
        rule.take_decisions();
        let plan = self.runtime.block_on(async {
            let frame = self.ctx.sql(text).await.map_err(sql_error)?;
            frame.create_physical_plan().await.map_err(sql_error)
        })?;
        let decisions = rule.take_decisions();
        let mut graphs = Vec::new();
        let mut host_scans = 0;
        let _ = plan.apply(|node| {
            if let Some(d) = node.downcast_ref::<DeviceExec>() {
                graphs.push(d.graph().clone());
            }
            if node.is::<ColumnScanExec>() {
                host_scans += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let class = match (graphs.is_empty(), host_scans) {
            (true, _) => "host",
            (false, 0) => "full",
            (false, _) => "partial",
        };
        let text = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        Ok(OffloadExplain {
            plan: text,
            class,
            graphs,
            decisions,
            host_scans,
        })
    }

    /// The registered table names.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The DataFusion context (to register more tables or functions).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs one statement to completion.
    pub fn sql(&self, text: &str) -> Result<QueryResult> {
        self.runtime.block_on(async {
            let frame = self.ctx.sql(text).await.map_err(sql_error)?;
            // The physical plan's schema, not the DataFrame's: analyzer rewrites (avg of a
            // decimal as a double) change result types after the statement is parsed.
            let plan = frame.create_physical_plan().await.map_err(sql_error)?;
            let schema = plan.schema();
            let batches = datafusion::physical_plan::collect(plan, self.ctx.task_ctx())
                .await
                .map_err(sql_error)?;
            Ok(QueryResult { schema, batches })
        })
    }

    /// The physical plan of a statement, as text (`EXPLAIN`'s).
    pub fn explain(&self, text: &str) -> Result<String> {
        self.runtime.block_on(async {
            let frame = self.ctx.sql(text).await.map_err(sql_error)?;
            let plan = frame.create_physical_plan().await.map_err(sql_error)?;
            let text = datafusion::physical_plan::displayable(plan.as_ref())
                .indent(true)
                .to_string();
            Ok(text)
        })
    }

    /// What the scans did since the session opened or the last [`reset_stats`](Self::reset_stats).
    pub fn stats(&self) -> ScanStats {
        self.counters.snapshot()
    }

    /// Sets the scan counters to zero.
    pub fn reset_stats(&self) {
        self.counters.reset();
        if let Some(rule) = &self.offload {
            rule.device().reset_stats();
        }
    }
}

/// A DataFusion error as ours; errors from our own pages come back with their table, column
/// and page.
pub fn sql_error(e: DataFusionError) -> Error {
    match e.find_root() {
        DataFusionError::External(inner) => Error::Sql {
            detail: inner.to_string(),
        },
        _ => Error::Sql {
            detail: e.strip_backtrace(),
        },
    }
}
