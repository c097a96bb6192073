//! The thesis's hardware limits (reference 001) a graph must fit, and what exceeds them.

use inpath_offload::graph::{
    CmpOp, Comparator, GroupKey, Operator, Selector, TableTask, TaskGraph, Test,
};

/// Which thesis limits a graph's tasks exceed.
pub fn thesis_limits_hit(graph: &TaskGraph) -> Vec<String> {
    graph_exceeds(graph, &Limits::THESIS)
        .into_iter()
        .map(|(what, _)| what)
        .collect()
}

/// The limits any task of a graph exceeds (once each).
pub(super) fn graph_exceeds(graph: &TaskGraph, limits: &Limits) -> Vec<(String, bool)> {
    let mut hit: Vec<(String, bool)> = Vec::new();
    for (t, task) in graph.tasks.iter().enumerate() {
        for (what, declines) in exceeds(task, limits) {
            let what = if graph.tasks.len() > 1 {
                format!("task {t} ({}): {what}", task.table)
            } else {
                what
            };
            hit.push((what, declines));
        }
    }
    hit
}

/// Comparators as the thesis's Row Selector counts them: a range on one column (the two
/// single-comparator products BETWEEN gives) is one comparator.
pub(super) fn range_comparators(selector: &Selector) -> usize {
    let mut ranged: Vec<usize> = Vec::new();
    let mut n = 0;
    for product in &selector.products {
        match product.as_slice() {
            [Comparator {
                column,
                test: Test::Int { op, .. },
            }] if !matches!(op, CmpOp::Eq | CmpOp::Ne) => {
                if !ranged.contains(column) {
                    ranged.push(*column);
                    n += 1;
                }
            }
            other => n += other.len(),
        }
    }
    n
}

/// The limits a task exceeds: (what, whether it keeps the task off the device). One read port
/// only serialises column reads, so it is reported, never a reason to stay on the host; group
/// buckets are known before running only for dictionary keys.
pub(super) fn exceeds(task: &TableTask, limits: &Limits) -> Vec<(String, bool)> {
    let mut hit = Vec::new();
    let comparators = range_comparators(&task.selector);
    if let Some(l) = limits.comparators.filter(|l| comparators > *l) {
        hit.push((format!("{comparators} comparators (limit {l})"), true));
    }
    let instructions = task.transformer.arithmetic();
    if let Some(l) = limits.instructions.filter(|l| instructions > *l) {
        hit.push((
            format!("{instructions} transformer instructions (limit {l})"),
            true,
        ));
    }
    let mut columns = task.selector.columns();
    columns.extend(task.transformer.columns());
    if let Operator::AggregateGroupBy { keys, .. } = &task.operator {
        columns.extend(keys.iter().filter_map(|k| match k {
            GroupKey::Dictionary { column } => Some(*column),
            GroupKey::Register(_) | GroupKey::Build { .. } => None,
        }));
        // A dictionary code or a build row is 4 bytes of the group id, a register value 8.
        let mut rows_seen: Vec<usize> = Vec::new();
        let id_bytes: usize = keys
            .iter()
            .map(|k| match k {
                GroupKey::Dictionary { .. } => 4,
                GroupKey::Register(_) => 8,
                GroupKey::Build { join, .. } if !rows_seen.contains(join) => {
                    rows_seen.push(*join);
                    4
                }
                GroupKey::Build { .. } => 0,
            })
            .sum();
        if let Some(l) = limits.group_id_bytes.filter(|l| id_bytes > *l) {
            hit.push((format!("{id_bytes}-byte group ids (limit {l})"), true));
        }
        if let Some(l) = limits.group_buckets {
            if keys
                .iter()
                .any(|k| !matches!(k, GroupKey::Dictionary { .. }))
            {
                hit.push((
                    format!("groups by value, not bounded by a dictionary ({l} buckets: spills)"),
                    false,
                ));
            }
        }
    }
    columns.sort_unstable();
    columns.dedup();
    if let Some(l) = limits.read_ports.filter(|l| columns.len() > *l) {
        hit.push((
            format!("{} columns through {l} read port", columns.len()),
            false,
        ));
    }
    hit
}

/// The thesis's hardware limits (reference 001, part II), applied with `--fidelity thesis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Group buckets of the group-by aggregate.
    pub group_buckets: Option<usize>,
    /// Bytes of a group id.
    pub group_id_bytes: Option<usize>,
    /// Comparators of the Row Selector.
    pub comparators: Option<usize>,
    /// Processing elements x instructions of the Row Transformer.
    pub instructions: Option<usize>,
    /// Column read ports (columns read at once).
    pub read_ports: Option<usize>,
}

impl Limits {
    /// No limits: what the software device can do.
    pub const LIFTED: Limits = Limits {
        group_buckets: None,
        group_id_bytes: None,
        comparators: None,
        instructions: None,
        read_ports: None,
    };

    /// The thesis's: 1024 group buckets, 16-byte group ids, 4 comparators, 4 PEs x 8
    /// instructions, one read port.
    pub const THESIS: Limits = Limits {
        group_buckets: Some(1024),
        group_id_bytes: Some(16),
        comparators: Some(4),
        instructions: Some(32),
        read_ports: Some(1),
    };
}
