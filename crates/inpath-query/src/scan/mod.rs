//! The scan: a column table as DataFusion's `TableProvider` ([`ColumnTable`]) and its
//! execution node ([`ColumnScanExec`]).
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

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{filter_record_batch, prep_null_mask_filter};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DataFusionError, ScalarValue, Statistics};
use datafusion::datasource::TableType;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream, StatisticsArgs,
};
use inpath_seal::KeyRing;
use inpath_table::error::{Error, Result};
use inpath_table::format::{LogicalType, Scalar};
use inpath_table::reader::TableReader;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod bounds;
mod exec;
mod selector;

use bounds::*;
pub(crate) use bounds::{bound, Round};
pub use exec::ColumnScanExec;
pub(crate) use selector::{cmp_op, selector_for};

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
    pub(crate) reader: Arc<TableReader>,
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

        let selector = (!filters.is_empty()).then(|| selector_for(&filters, reader));
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
