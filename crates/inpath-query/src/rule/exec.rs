//! The execution node that runs a Table Task graph on the device ([`DeviceExec`]).

use super::bound::{bind, Bound};
use super::plan::under_pass_throughs;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::DataFusionError;
use datafusion::common::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use inpath_offload::device::Device;
use inpath_offload::graph::{Operator, TaskGraph};
use std::sync::{Arc, Mutex};

/// A device's plan properties: `eq`, one partition, every row at the end, bounded.
pub(super) fn one_partition(eq: EquivalenceProperties) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        eq,
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// A sub-tree the device runs: its Table Task graph, submitted when the plan executes.
#[derive(Debug)]
pub struct DeviceExec {
    pub(super) device: Arc<dyn Device>,
    pub(super) graph: TaskGraph,
    /// The same rows with other join sides kept, run when the device declines `graph`.
    pub(super) alternate: Option<TaskGraph>,
    pub(super) schema: SchemaRef,
    pub(super) props: Arc<PlanProperties>,
    /// The host plan it replaced, run instead when the device cannot hold the graph's build
    /// rows (not a child: the plan above sees the device only).
    pub(super) host: Option<Arc<dyn ExecutionPlan>>,
    /// The graph this one was made from by moving a join below its aggregate (unsorted): its
    /// groups' values are among that graph's.
    pub(super) origin: Option<TaskGraph>,
    /// Comparators of `graph` filled from subqueries' values when the plan runs: `graph`
    /// holds placeholders until then. A device with any has a host plan and no alternate.
    pub(super) bounds: Vec<Bound>,
}

impl DeviceExec {
    pub(super) fn new(
        device: Arc<dyn Device>,
        graph: TaskGraph,
        alternate: Option<TaskGraph>,
        schema: SchemaRef,
        host: Option<Arc<dyn ExecutionPlan>>,
    ) -> DeviceExec {
        DeviceExec {
            device,
            graph,
            alternate,
            props: one_partition(EquivalenceProperties::new(schema.clone())),
            schema,
            host,
            origin: None,
            bounds: Vec::new(),
        }
    }

    /// The same device declaring its rows ordered by `ordering` (which its graph's order
    /// follows), standing in for a sort: the host plan it runs if the device declines is the
    /// sort over the one it had.
    pub(super) fn ordered_as(&self, ordering: LexOrdering) -> DeviceExec {
        let host = self.host.as_ref().map(|h| {
            let input = match h.output_partitioning().partition_count() {
                1 => h.clone(),
                _ => Arc::new(CoalescePartitionsExec::new(h.clone())) as Arc<dyn ExecutionPlan>,
            };
            Arc::new(SortExec::new(ordering.clone(), input)) as Arc<dyn ExecutionPlan>
        });
        let mut exec = self.like(
            self.graph.clone(),
            self.alternate.clone(),
            self.schema.clone(),
            host,
        );
        let mut eq = EquivalenceProperties::new(self.schema.clone());
        eq.add_ordering(ordering.iter().cloned());
        exec.props = one_partition(eq);
        exec
    }

    /// A device on the same device with the same origin, running `graph`.
    pub(super) fn like(
        &self,
        graph: TaskGraph,
        alternate: Option<TaskGraph>,
        schema: SchemaRef,
        host: Option<Arc<dyn ExecutionPlan>>,
    ) -> DeviceExec {
        let mut exec = DeviceExec::new(self.device.clone(), graph, alternate, schema, host);
        exec.origin = self.origin.clone();
        exec.bounds = self.bounds.clone();
        exec
    }

    /// The graph the device runs.
    pub fn graph(&self) -> &TaskGraph {
        &self.graph
    }

    /// The graph run instead when the device declines [`DeviceExec::graph`] for memory: the
    /// same rows with the larger tables' joins streaming, where that differs.
    pub fn alternate(&self) -> Option<&TaskGraph> {
        self.alternate.as_ref()
    }

    /// The rows of a device sending whole groups, under the Final aggregate's schema: as they
    /// come when they come in one batch (each group once), else through `finish` (the Final
    /// aggregate over a device, the device replaced by these rows, streamed as they come).
    pub(super) fn whole_or_finished(
        &self,
        mut stream: impl Iterator<Item = inpath_table::error::Result<RecordBatch>> + Send + 'static,
        finish: &Arc<dyn ExecutionPlan>,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let external = |e: inpath_table::error::Error| DataFusionError::External(Box::new(e));
        let first = stream.next().transpose().map_err(external)?;
        let second = match first {
            Some(_) => stream.next().transpose().map_err(external)?,
            None => None,
        };
        let Some(second) = second else {
            let rows = first
                .map(|b| RecordBatch::try_new(self.schema.clone(), b.columns().to_vec()))
                .transpose()?;
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                futures::stream::iter(rows.into_iter().map(Ok)),
            )));
        };
        let Some(parts) = finish
            .children()
            .first()
            .and_then(|c| under_pass_throughs(c).downcast_ref::<DeviceExec>())
        else {
            return Err(DataFusionError::Internal(
                "whole groups: no device under the Final aggregate".into(),
            ));
        };
        let partial = parts.schema.clone();
        let relabel = partial.clone();
        let rows = first
            .into_iter()
            .chain([second])
            .map(Ok)
            .chain(stream)
            .map(move |b| {
                let b = b.map_err(external)?;
                Ok(RecordBatch::try_new(relabel.clone(), b.columns().to_vec())?)
            });
        let sent = SentRows {
            schema: partial.clone(),
            rows: Mutex::new(Some(Box::pin(RecordBatchStreamAdapter::new(
                partial.clone(),
                futures::stream::iter(rows),
            )))),
        };
        let source: Arc<dyn ExecutionPlan> = Arc::new(StreamingTableExec::try_new(
            partial,
            vec![Arc::new(sent)],
            None,
            [],
            false,
            None,
        )?);
        let plan = finish
            .clone()
            .transform_up(|node| {
                Ok(match node.downcast_ref::<DeviceExec>() {
                    Some(_) => Transformed::yes(source.clone()),
                    None => Transformed::no(node),
                })
            })?
            .data;
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            all_partitions(plan, context)?,
        )))
    }
}

/// Every partition of `plan` merged into one stream, each partition driven by a task of its
/// own (as `CoalescePartitionsExec` drives them). Polled together inside this one stream they
/// all ran on one thread: TPC-H Q20's Final aggregate over 0.8 M groups a device sent in parts
/// took ~75 ms on one core, with the other idle.
fn all_partitions(
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> DfResult<SendableRecordBatchStream> {
    if plan.output_partitioning().partition_count() == 1 {
        return plan.execute(0, context);
    }
    let merged: Arc<dyn ExecutionPlan> =
        Arc::new(datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec::new(plan));
    merged.execute(0, context)
}

/// A device's rows, already coming, as the one partition of a plan's leaf: read once.
pub(super) struct SentRows {
    pub(super) schema: SchemaRef,
    pub(super) rows: Mutex<Option<SendableRecordBatchStream>>,
}

impl std::fmt::Debug for SentRows {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "SentRows")
    }
}

impl PartitionStream for SentRows {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let taken = self.rows.lock().ok().and_then(|mut rows| rows.take());
        taken.unwrap_or_else(|| {
            Box::pin(RecordBatchStreamAdapter::new(
                self.schema.clone(),
                futures::stream::once(async {
                    Err(DataFusionError::Internal(
                        "a device's rows are read once".into(),
                    ))
                }),
            ))
        })
    }
}

impl DisplayAs for DeviceExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let Some(task) = self.graph.tasks.last() else {
            return write!(f, "DeviceExec: no task");
        };
        let (op, keys, aggs) = match &task.operator {
            Operator::Nop => ("NOP", 0, 0),
            Operator::Aggregate { aggs } => ("AGGREGATE", 0, aggs.len()),
            Operator::AggregateGroupBy { keys, aggs } => {
                ("AGGREGATE_GROUPBY", keys.len(), aggs.len())
            }
        };
        write!(
            f,
            "DeviceExec: {op} table={}, comparators={}, instructions={}, keys={keys}, aggregates={aggs}",
            task.table,
            task.selector.comparators(),
            task.transformer.ops.len()
        )?;
        if !task.joins.is_empty() {
            let joined: Vec<String> = task
                .joins
                .iter()
                .map(|j| format!("{} {:?}", self.graph.tasks[j.build].table, j.kind))
                .collect();
            write!(f, ", joins=[{}]", joined.join(", "))?;
        }
        if let Some(order) = &task.order {
            let keys: Vec<String> = order
                .keys
                .iter()
                .map(|k| {
                    // Counted groups' rows hold the count where the counted column was.
                    let counted = task.count_groups.is_some_and(|c| c.keys == k.column);
                    let name = match counted {
                        true => "count",
                        false => task
                            .output
                            .fields
                            .get(k.column)
                            .map_or("?", |f| f.0.as_str()),
                    };
                    format!("{name}{}", if k.descending { " DESC" } else { "" })
                })
                .collect();
            match order.limit {
                Some(k) => write!(f, ", TOPK {k} by [{}]", keys.join(", "))?,
                None => write!(f, ", SORT by [{}]", keys.join(", "))?,
            }
        }
        if let Some(c) = task.count_groups {
            write!(f, ", COUNT_GROUPS by the first {} keys", c.keys)?;
        }
        if task.whole_groups {
            write!(f, ", groups whole")?;
        }
        if !self.bounds.is_empty() {
            write!(f, ", {} comparators bound to subqueries", self.bounds.len())?;
        }
        if let Some(alt) = self.alternate.as_ref().and_then(|g| g.tasks.last()) {
            let joined: Vec<String> = alt
                .joins
                .iter()
                .filter_map(|j| self.alternate.as_ref()?.tasks.get(j.build))
                .map(|t| t.table.clone())
                .collect();
            write!(
                f,
                ", else (builds beyond memory) table={} joins=[{}]",
                alt.table,
                joined.join(", ")
            )?;
        }
        Ok(())
    }
}

impl ExecutionPlan for DeviceExec {
    fn name(&self) -> &str {
        "DeviceExec"
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
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: datafusion::physical_plan::ReplaceChildrenOptions,
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
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "DeviceExec has one partition, not {partition}"
            )));
        }
        // The device declines before sending anything (builds or a page beyond its memory):
        // the host runs the plan the device replaced, every partition of it, merged. Aggregates
        // send their groups at the end, so the first item tells.
        let declined = |e: &inpath_table::error::Error| {
            matches!(e, inpath_table::error::Error::DeviceDeclined { .. })
        };
        let begin = |submitted: inpath_table::error::Result<inpath_offload::DeviceStream>,
                     fallback: bool| {
            match submitted {
                Ok(mut s) => match s.next() {
                    Some(Err(e)) if declined(&e) && fallback => Err(e),
                    first => Ok((first, s)),
                },
                Err(e) => Err(e),
            }
        };
        // Comparators bound to subqueries' values, now that they have run; a value the
        // device cannot compare with exactly (NULL, beyond 64 bits) leaves the plan to the
        // host.
        let bound = match (self.bounds.is_empty(), &self.host) {
            (true, _) => None,
            (false, Some(host)) => match bind(&self.graph, &self.bounds)? {
                Some(g) => Some(g),
                None => {
                    return Ok(Box::pin(RecordBatchStreamAdapter::new(
                        self.schema.clone(),
                        all_partitions(host.clone(), context)?,
                    )))
                }
            },
            (false, None) => {
                return Err(DataFusionError::Internal(
                    "a device with bound comparators and no host plan".into(),
                ))
            }
        };
        let graph = bound.as_ref().unwrap_or(&self.graph);
        // With an alternate graph, each order is tried whole before either runs in key-range
        // passes: the alternate (the larger table of each join streaming) holding its builds
        // whole is cheaper than the planner's order in passes (Q21 at SF 1: 0.08 against
        // 0.18 s). Then the planner's in passes (its whole attempt is not made again), the
        // alternate's in passes, and last the host. (whole only, graph)
        let attempts: Vec<(bool, &TaskGraph)> = match &self.alternate {
            None => vec![(false, graph)],
            Some(alternate) => vec![
                (true, graph),
                (true, alternate),
                (false, graph),
                (false, alternate),
            ],
        };
        let last = attempts.len() - 1;
        let mut first = None;
        for (i, (whole_only, g)) in attempts.into_iter().enumerate() {
            let submitted = match whole_only {
                true => self.device.submit_whole(g),
                false => self.device.submit(g),
            };
            match begin(submitted, i < last || self.host.is_some()) {
                Err(e) if declined(&e) && i < last => continue,
                started => {
                    first = Some(started);
                    break;
                }
            }
        }
        let first = first.expect("the last attempt ends the loop");
        let (first, stream) = match (first, &self.host) {
            (Ok(started), _) => started,
            (Err(e), Some(host)) if declined(&e) => {
                return Ok(Box::pin(RecordBatchStreamAdapter::new(
                    self.schema.clone(),
                    all_partitions(host.clone(), context)?,
                )));
            }
            (Err(e), _) => return Err(DataFusionError::External(Box::new(e))),
        };
        let stream = first.into_iter().chain(stream);
        // Groups sent whole ([`TableTask::whole_groups`]): the plan the device replaced is the
        // Final aggregate over the same groups in parts, which merges them if they come in parts.
        let whole = self.graph.tasks.last().is_some_and(|t| t.whole_groups);
        if let (true, Some(finish)) = (whole, &self.host) {
            return self.whole_or_finished(stream, finish, context);
        }
        let schema = self.schema.clone();
        let rows = stream.map(move |batch| {
            let batch = batch.map_err(|e| DataFusionError::External(Box::new(e)))?;
            Ok(datafusion::arrow::array::RecordBatch::try_new(
                schema.clone(),
                batch.columns().to_vec(),
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(rows),
        )))
    }
}
