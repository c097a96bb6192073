//! The planner side: one DataFusion physical optimizer rule that finds sub-trees the device
//! can run and replaces each with a [`DeviceExec`] running its Table Task graph.
//!
//! `AggregateExec(Partial) <- [Projection...] <- scan` becomes AGGREGATE or AGGREGATE_GROUPBY
//! emitting exactly the Partial schema, so the host's Final aggregate merges the device's
//! partial groups (spilled ones included) unchanged. A `SortExec` above that aggregate (through
//! the Final aggregate, column projections and repartitions) adds SORT, or with a fetch TOPK,
//! to the graph: the device then sends only the groups that can be in the result, and the
//! host's sort and limit stay, to order what arrives. Anything the device cannot run exactly
//! leaves the plan as it was, and the reason is kept for `explain --offload`.

use crate::reason::HostReason;
use chain::aggregate_graph;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::physical_expr::expressions::Column as PColumn;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};
use inpath_offload::device::Device;
use inpath_offload::graph::SortKey;
use limits::graph_exceeds;
use limits::thesis_limits_hit;
use plan::Orient;
use rewrite::counted_groups;
use rewrite::extreme_filters;
use rewrite::extreme_of_column;
use rewrite::finished_count;
use rewrite::is_finished_count;
use rewrite::ordered_device;
use rewrite::whole_groups;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod bound;
mod chain;
mod compile;
mod condition;
mod exec;
mod limits;
mod plan;
mod pushdown;
mod rewrite;

pub use exec::DeviceExec;
pub use limits::Limits;

/// What the rule decided about each aggregate it looked at, in plan order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What the device was asked to run: `aggregate`, or `rows` (a tree of joins whose rows
    /// go to the host under a sort with a limit).
    pub what: &'static str,
    /// The table the aggregate reads (when it reaches a scan).
    pub table: Option<String>,
    /// `None` when offloaded, else why not.
    pub declined: Option<HostReason>,
    /// Thesis limits the task exceeds (reported; they decline it only under `--fidelity
    /// thesis`).
    pub limits_hit: Vec<String>,
}

/// The physical optimizer rule that offloads sub-trees to a device.
#[derive(Debug)]
pub struct OffloadRule {
    device: Arc<dyn Device>,
    limits: Limits,
    decisions: Arc<Mutex<Vec<Decision>>>,
    /// Whether a table's key column is unique ([`unique_key`]), by table and column: read
    /// once per session, not each time a statement is planned.
    unique_keys: Mutex<HashMap<(String, usize), bool>>,
}

impl OffloadRule {
    /// A rule handing work to `device`, within `limits`.
    pub fn new(device: Arc<dyn Device>, limits: Limits) -> OffloadRule {
        OffloadRule {
            device,
            limits,
            decisions: Arc::new(Mutex::new(Vec::new())),
            unique_keys: Mutex::new(HashMap::new()),
        }
    }

    /// The decisions since the last call (and forgets them).
    pub fn take_decisions(&self) -> Vec<Decision> {
        std::mem::take(&mut *self.decisions.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The device's memory budget in bytes.
    pub fn memory_budget(&self) -> u64 {
        self.device.memory_budget()
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The device running `partial` (a Partial aggregate), with what was decided about it;
    /// none when the device cannot run it.
    fn device_for(&self, partial: &Arc<AggregateExec>) -> (Decision, Option<DeviceExec>) {
        let (table, result) = aggregate_graph(partial, Orient::Planner);
        let (result, bounds) = match result {
            Ok((graph, bounds)) => (Ok(graph), bounds),
            Err(e) => (Err(e), Vec::new()),
        };
        // Joins with the larger tables streaming: the graph run when the device cannot
        // hold the first one's builds (none with comparators bound at the start: the host
        // plan is the fallback then).
        let alternate = match aggregate_graph(partial, Orient::LargestProbes).1 {
            Ok((g, b)) if b.is_empty() && result.as_ref().is_ok_and(|first| *first != g) => Some(g),
            _ => None,
        };
        let limits_hit = match &result {
            Ok(graph) => thesis_limits_hit(graph),
            Err(_) => Vec::new(),
        };
        let result = result.and_then(|graph| {
            let over: Vec<String> = graph_exceeds(&graph, &self.limits)
                .into_iter()
                .filter(|(_, declines)| *declines)
                .map(|(what, _)| what)
                .collect();
            if over.is_empty() {
                Ok(graph)
            } else {
                Err(HostReason::OverLimits { limits: over })
            }
        });
        match result {
            Ok(graph) => {
                let alternate =
                    alternate.filter(|g| graph_exceeds(g, &self.limits).iter().all(|h| !h.1));
                let host: Arc<dyn ExecutionPlan> = partial.clone();
                let mut exec = DeviceExec::new(
                    self.device.clone(),
                    graph,
                    alternate,
                    partial.schema(),
                    Some(host),
                );
                exec.bounds = bounds;
                let decision = Decision {
                    what: "aggregate",
                    table,
                    declined: None,
                    limits_hit,
                };
                (decision, Some(exec))
            }
            Err(reason) => {
                let decision = Decision {
                    what: "aggregate",
                    table,
                    declined: Some(reason),
                    limits_hit,
                };
                (decision, None)
            }
        }
    }
}

impl PhysicalOptimizerRule for OffloadRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let transformed = plan.transform_up(|node| {
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            // A Single aggregate (one partition) is split as DataFusion splits it: the device
            // runs the Partial half, a host Final aggregate above it merges.
            let single = matches!(
                agg.mode(),
                AggregateMode::Single | AggregateMode::SinglePartitioned
            );
            let partial = if single {
                Arc::new(AggregateExec::try_new(
                    AggregateMode::Partial,
                    agg.group_expr().clone(),
                    agg.aggr_expr().to_vec(),
                    agg.filter_expr().to_vec(),
                    agg.input().clone(),
                    agg.input_schema(),
                )?)
            } else if *agg.mode() == AggregateMode::Partial {
                Arc::new(agg.clone())
            } else {
                // The Final half of a count the device finished (COUNT_GROUPS): its rows are
                // already one a group, so the device's stand in for it.
                return Ok(match finished_count(&node)? {
                    Some(exec) => Transformed::yes(exec),
                    None => Transformed::no(node),
                });
            };
            // The final host aggregate above a device's Partial, for a Single aggregate.
            let finish = |exec: Arc<dyn ExecutionPlan>| -> DfResult<Arc<dyn ExecutionPlan>> {
                Ok(if single {
                    Arc::new(AggregateExec::try_new(
                        AggregateMode::Final,
                        agg.group_expr().as_final(),
                        agg.aggr_expr().to_vec(),
                        agg.filter_expr().to_vec(),
                        exec,
                        agg.input_schema(),
                    )?)
                } else {
                    exec
                })
            };
            if let Some(exec) = counted_groups(&partial) {
                let mut decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
                decisions.push(Decision {
                    what: "aggregate",
                    table: exec.graph.tasks.last().map(|t| t.table.clone()),
                    declined: None,
                    limits_hit: Vec::new(),
                });
                let plan = finish(Arc::new(exec))?;
                let plan = finished_count(&plan)?.unwrap_or(plan);
                return Ok(Transformed::new(plan, true, TreeNodeRecursion::Continue));
            }
            let (decision, result) = self.device_for(&partial);
            self.decisions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(decision);
            match result {
                Some(exec) => Ok(Transformed::new(
                    finish(Arc::new(exec))?,
                    true,
                    TreeNodeRecursion::Continue,
                )),
                None => Ok(Transformed::no(node)),
            }
        })?;
        // Joins of a table's rows with an offloaded aggregate's groups, on a group key: moved
        // below the aggregate, into the device's graph.
        let transformed = transformed.data.transform_up(|node| {
            Ok(match self.join_below_aggregate(&node)? {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })?;
        // SORT and TOPK: a sort over an offloaded aggregate's groups.
        let sorted = transformed.data.transform_down(|node| {
            // The max or min of an offloaded aggregate's groups (Q15's `max(total_revenue)`):
            // the device sends the groups tied first by that column, TOPK 1.
            if let Some(key) = extreme_of_column(&node) {
                let input = node.children()[0].clone();
                return Ok(match ordered_device(&input, vec![key], Some(1))? {
                    Some(input) => Transformed::new(
                        replace_children_if_necessary(node.clone(), vec![input])?,
                        true,
                        TreeNodeRecursion::Jump,
                    ),
                    None => Transformed::no(node),
                });
            }
            let Some(sort) = node.downcast_ref::<SortExec>() else {
                return Ok(Transformed::no(node));
            };
            // The leading keys that are columns: ties on them are sent, so the host's sort
            // decides among them by the rest.
            let keys: Vec<(usize, SortKey)> = sort
                .expr()
                .iter()
                .map_while(|e| {
                    let c = e.expr.downcast_ref::<PColumn>()?;
                    let key = SortKey {
                        column: c.index(),
                        descending: e.options.descending,
                        nulls_first: e.options.nulls_first,
                    };
                    Some((c.index(), key))
                })
                .collect();
            let input = match ordered_device(sort.input(), keys.clone(), sort.fetch())? {
                Some(input) => Some(input),
                // The rows of a tree of joins under a sort (Q20), cut to the rows that can be
                // first under a limit (Q2's TOPK).
                None if !keys.is_empty() => self
                    .rows_device(sort.input(), &keys, sort.fetch())
                    .map(|d| Arc::new(d) as Arc<dyn ExecutionPlan>),
                None => None,
            };
            match input {
                // A whole sort of a finished count's rows by their columns: the device's
                // order is the sort's, and the host has nothing left to do.
                Some(input)
                    if sort.fetch().is_none()
                        && keys.len() == sort.expr().len()
                        && is_finished_count(sort.input()) =>
                {
                    let Some(d) = input.downcast_ref::<DeviceExec>() else {
                        return Ok(Transformed::no(node));
                    };
                    let exec = d.ordered_as(sort.expr().clone());
                    Ok(Transformed::new(
                        Arc::new(exec),
                        true,
                        TreeNodeRecursion::Jump,
                    ))
                }
                Some(input) => {
                    let node = replace_children_if_necessary(node.clone(), vec![input])?;
                    Ok(Transformed::new(node, true, TreeNodeRecursion::Jump))
                }
                None => Ok(Transformed::no(node)),
            }
        })?;
        // `x = (select max(x) ...)` over the same aggregate's groups (Q15): the device sends
        // only the groups tied first by `x`.
        let cut = sorted.data.transform_down(|node| {
            let Some(s) = node.downcast_ref::<ScalarSubqueryExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match extreme_filters(s)? {
                Some(input) => {
                    let mut children: Vec<Arc<dyn ExecutionPlan>> = vec![input];
                    children.extend(s.subqueries().iter().map(|l| l.plan.clone()));
                    Transformed::yes(replace_children_if_necessary(node.clone(), children)?)
                }
                None => Transformed::no(node),
            })
        })?;
        // Last, once no pass looks for a Final aggregate over a device any more: a device's
        // plain groups sent whole, standing in for the Final aggregate over them.
        let whole = cut.data.transform_up(|node| {
            Ok(match whole_groups(&node)? {
                Some(plan) => Transformed::yes(plan),
                None => Transformed::no(node),
            })
        })?;
        Ok(whole.data)
    }

    fn name(&self) -> &str {
        "inpath_offload"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
