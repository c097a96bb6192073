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
use bounds::conjunct_range;
use bounds::pushable;
use bounds::unqualified;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::stats::Precision;
use datafusion::common::Result as DfResult;
use datafusion::common::{DFSchema, Statistics};
use datafusion::datasource::TableType;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use inpath_seal::KeyRing;
use inpath_table::error::Result;
use inpath_table::reader::TableReader;
use std::path::Path;
use std::sync::Arc;

mod bounds;
mod exec;
mod selector;
mod stats;

pub(crate) use bounds::{bound, Round};
pub use exec::ColumnScanExec;
use exec::{external, PushedFilter};
pub(crate) use selector::{cmp_op, selector_for};
pub use stats::{ScanCounters, ScanStats};

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
