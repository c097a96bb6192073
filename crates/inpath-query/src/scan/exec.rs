//! The scan's execution node: pages pruned by zone map, the pushed filter evaluated per page
//! first, only the selected rows' other columns read.

use super::stats::ScanCounters;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{filter_record_batch, prep_null_mask_filter};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result as DfResult;
use datafusion::common::{DataFusionError, Statistics};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream, StatisticsArgs,
};
use inpath_table::error::Error;
use inpath_table::reader::TableReader;
use std::sync::Arc;

/// The scan: pages split into contiguous runs, one run per output partition.
#[derive(Debug)]
pub struct ColumnScanExec {
    pub(super) reader: Arc<TableReader>,
    pub(super) counters: Arc<ScanCounters>,
    pub(super) projection: Vec<usize>,
    pub(super) schema: SchemaRef,
    pub(super) filter: Option<PushedFilter>,
    /// The pages each partition reads, in row order.
    pub(super) runs: Vec<Vec<usize>>,
    pub(super) pages_total: usize,
    pub(super) limit: Option<usize>,
    /// The pushed filter as an offload Row Selector, or why it is not one.
    pub(super) selector:
        Option<std::result::Result<inpath_offload::graph::Selector, crate::reason::HostReason>>,
    pub(super) props: Arc<PlanProperties>,
}

impl ColumnScanExec {
    pub(super) fn with_selector(
        mut self,
        selector: Option<
            std::result::Result<inpath_offload::graph::Selector, crate::reason::HostReason>,
        >,
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
    ) -> Option<&std::result::Result<inpath_offload::graph::Selector, crate::reason::HostReason>>
    {
        self.selector.as_ref()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
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

    pub(super) fn rows_in(&self, pages: &[usize]) -> usize {
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
pub(super) struct PageRun {
    pub(super) reader: Arc<TableReader>,
    pub(super) counters: Arc<ScanCounters>,
    pub(super) projection: Vec<usize>,
    pub(super) schema: SchemaRef,
    pub(super) filter: Option<PushedFilter>,
    pub(super) pages: std::vec::IntoIter<usize>,
    pub(super) remaining: Option<usize>,
}

impl PageRun {
    pub(super) fn read(&self, column: usize, page: usize) -> DfResult<ArrayRef> {
        let meta = self.reader.zone_map(column, page).map_err(external)?;
        ScanCounters::add(&self.counters.records_read, 1);
        ScanCounters::add(&self.counters.bytes_read, meta.len);
        self.reader.read_page(column, page).map_err(external)
    }

    /// The page's selected rows of the projection, or `None` when it selects none.
    pub(super) fn page(&self, page: usize) -> DfResult<Option<RecordBatch>> {
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

/// The pushed-down filter, bound to the schema of the columns it reads.
#[derive(Debug, Clone)]
pub(super) struct PushedFilter {
    /// Table column indices the filter reads, ascending.
    pub(super) columns: Vec<usize>,
    /// Their schema (the batch the expression is evaluated on).
    pub(super) schema: SchemaRef,
    pub(super) expr: Arc<dyn PhysicalExpr>,
    /// The logical expression, for `EXPLAIN`.
    pub(super) text: String,
}

pub(super) fn external(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
