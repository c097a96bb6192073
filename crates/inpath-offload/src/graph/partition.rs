//! Key-range passes: a graph whose rows held for joins (or groups) outgrow the device's memory
//! runs as several graphs, each restricted to one range of a key, whose outputs together are
//! the whole graph's (issue 55). AQUOMAN's tables are clustered by their keys (lineitem and
//! orders by orderkey), so a range of the key is a run of pages: zone maps leave each pass
//! only its own pages, and the data is read about once in all.
//!
//! Which tasks a range may restrict follows from the joins' equalities. The passes split the
//! last task's rows by the value of one of its columns, `K`; every output row belongs to
//! exactly one pass. A build task's rows may be restricted to the same range on one of its
//! columns when every row it contributes to the output carries that column equal to `K`:
//!
//! - an inner join makes its probe key and its build key equal in every row it produces (in
//!   both directions: either side's column stands for the other);
//! - a kept column is its source (the table column, or the build column it copied through an
//!   inner join), and a build's group key is the column its register loads;
//! - a semi, anti or left join only asks whether build rows with the probe row's key exist:
//!   once the probe key equals `K`, only build rows whose key lies in the pass's range can
//!   answer for the probe rows of that pass, so the build side may be restricted on its key
//!   (one direction only: the build's rows never reach the output).
//!
//! A task with no column equal to `K` runs whole in every pass (it is only restricted through
//! the joins: Q9's partsupp keeps only the parts that meet the pass's lineitem rows).

use super::{CmpOp, Comparator, GroupKey, JoinKind, Op, Operator, Source, TaskGraph, Test};
use std::collections::{HashMap, HashSet};

/// How a graph splits into key-range passes: the last task's column `key` is split into
/// ranges, and each task with a column in `restrict` is restricted to the same range on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partitioning {
    /// The last task's table column whose values the passes divide.
    pub key: usize,
    /// Per task: the table column restricted to each pass's range (`None`: the task reads
    /// every page in every pass). The last task's is `Some(key)`.
    pub restrict: Vec<Option<usize>>,
}

/// A value of some task's rows: a column of its table, or a column it keeps (a build task's
/// `keep`, or a group-by build's output column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Node {
    Col(usize, usize),
    Kept(usize, usize),
}

impl Partitioning {
    /// Whether `key` is a group key of `graph`'s last task (a register loading that column):
    /// passes over its ranges then hold disjoint groups.
    pub fn groups_by_key(&self, graph: &TaskGraph) -> bool {
        let Some(task) = graph.tasks.last() else {
            return false;
        };
        match &task.operator {
            Operator::AggregateGroupBy { keys, .. } => keys.iter().any(|k| {
                matches!(k, GroupKey::Register(r)
                    if task.transformer.ops.get(*r) == Some(&Op::Load { column: self.key }))
            }),
            _ => false,
        }
    }

    /// Every way `graph` can be split: one per column of the last task that is a join's probe
    /// key or a group key its register loads, each with the tasks it restricts. The order is
    /// the columns'.
    pub fn candidates(graph: &TaskGraph) -> Vec<Partitioning> {
        let Some(last) = graph.tasks.len().checked_sub(1) else {
            return Vec::new();
        };
        let task = &graph.tasks[last];
        let mut keys: Vec<usize> = task
            .joins
            .iter()
            .flat_map(|j| j.probe_keys.iter())
            .filter_map(|s| match s {
                Source::Column(c) => Some(*c),
                _ => None,
            })
            .collect();
        if let Operator::AggregateGroupBy { keys: group, .. } = &task.operator {
            keys.extend(group.iter().filter_map(|k| match k {
                GroupKey::Register(r) => match task.transformer.ops.get(*r) {
                    Some(Op::Load { column }) => Some(*column),
                    _ => None,
                },
                _ => None,
            }));
        }
        keys.sort_unstable();
        keys.dedup();
        let edges = edges(graph);
        keys.into_iter()
            .map(|key| {
                let reached = reach(&edges, Node::Col(last, key));
                let mut restrict: Vec<Option<usize>> = (0..graph.tasks.len())
                    .map(|t| {
                        reached
                            .iter()
                            .filter_map(|n| match *n {
                                Node::Col(task, c) if task == t => Some(c),
                                _ => None,
                            })
                            .min()
                    })
                    .collect();
                restrict[last] = Some(key);
                Partitioning { key, restrict }
            })
            .collect()
    }

    /// `graph` with each restricted task's rows limited to `lo <= column < hi` (a missing bound
    /// is open), as two single-comparator products: the zone maps prune pages by them.
    pub fn restricted(&self, graph: &TaskGraph, lo: Option<i128>, hi: Option<i128>) -> TaskGraph {
        let mut graph = graph.clone();
        for (task, column) in graph.tasks.iter_mut().zip(&self.restrict) {
            let Some(column) = *column else { continue };
            for (op, value) in [(CmpOp::Ge, lo), (CmpOp::Lt, hi)] {
                if let Some(value) = value {
                    task.selector.products.push(vec![Comparator {
                        column,
                        test: Test::Int { op, value },
                    }]);
                }
            }
        }
        graph
    }
}

/// The equalities among the graph's values: both directions for inner joins and kept
/// columns, probe to build for semi, anti and left joins.
fn edges(graph: &TaskGraph) -> HashMap<Node, Vec<Node>> {
    let mut edges: HashMap<Node, Vec<Node>> = HashMap::new();
    let both = |a: Node, b: Node, edges: &mut HashMap<Node, Vec<Node>>| {
        edges.entry(a).or_default().push(b);
        edges.entry(b).or_default().push(a);
    };
    for (t, task) in graph.tasks.iter().enumerate() {
        // A value of task t's rows: its own column, or a column of the build row an inner
        // join matched (a semi, anti or left join matches no one row).
        let value = |s: &Source| -> Option<Node> {
            match *s {
                Source::Column(c) => Some(Node::Col(t, c)),
                Source::Build { join, column } => {
                    let j = task.joins.get(join)?;
                    (j.kind == JoinKind::Inner).then_some(Node::Kept(j.build, column))
                }
                Source::Flag(_) => None,
            }
        };
        for (k, src) in task.keep.iter().enumerate() {
            if let Some(v) = value(src) {
                both(Node::Kept(t, k), v, &mut edges);
            }
        }
        if let Operator::AggregateGroupBy { keys, .. } = &task.operator {
            for (k, key) in keys.iter().enumerate() {
                let v = match key {
                    GroupKey::Register(r) => match task.transformer.ops.get(*r) {
                        Some(Op::Load { column }) => Some(Node::Col(t, *column)),
                        _ => None,
                    },
                    GroupKey::Build { join, column } => value(&Source::Build {
                        join: *join,
                        column: *column,
                    }),
                    GroupKey::Dictionary { .. } => None,
                };
                if let Some(v) = v {
                    both(Node::Kept(t, k), v, &mut edges);
                }
            }
        }
        for join in &task.joins {
            for (probe, &build) in join.probe_keys.iter().zip(&join.build_keys) {
                let Some(p) = value(probe) else { continue };
                let b = Node::Kept(join.build, build);
                match join.kind {
                    JoinKind::Inner => both(p, b, &mut edges),
                    JoinKind::Semi | JoinKind::Anti | JoinKind::Left => {
                        edges.entry(p).or_default().push(b)
                    }
                }
            }
        }
    }
    edges
}

/// Every value `from` reaches.
fn reach(edges: &HashMap<Node, Vec<Node>>, from: Node) -> HashSet<Node> {
    let mut seen = HashSet::from([from]);
    let mut todo = vec![from];
    while let Some(n) = todo.pop() {
        for &m in edges.get(&n).into_iter().flatten() {
            if seen.insert(m) {
                todo.push(m);
            }
        }
    }
    seen
}

/// Values that split `lo <= key < hi` (open where `None`) into up to `parts` non-empty
/// ranges, increasing: least values of the pages starting inside it, spread as evenly as the
/// pages allow, or else the middle of the values the pages allow there; none when the range
/// holds a single value.
pub(crate) fn split(
    zones: &[(i128, i128)],
    lo: Option<i128>,
    hi: Option<i128>,
    parts: usize,
) -> Vec<i128> {
    let (Some(least), Some(most)) = (
        zones.iter().map(|z| z.0).min(),
        zones.iter().map(|z| z.1).max(),
    ) else {
        return Vec::new();
    };
    let a = lo.unwrap_or(least).max(least);
    let b = hi
        .unwrap_or(most.saturating_add(1))
        .min(most.saturating_add(1));
    let mut inside: Vec<i128> = zones
        .iter()
        .map(|z| z.0)
        .filter(|&m| m > a && m < b)
        .collect();
    inside.sort_unstable();
    inside.dedup();
    if inside.is_empty() {
        return match b - a >= 2 {
            true => vec![a + (b - a) / 2],
            false => Vec::new(),
        };
    }
    let parts = parts.max(2);
    let mut cuts: Vec<i128> = (1..parts)
        .map(|i| inside[(i * inside.len() / parts).min(inside.len() - 1)])
        .collect();
    cuts.dedup();
    cuts
}
