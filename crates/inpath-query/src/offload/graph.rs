//! The Table Task graph: what the host hands a [`Device`](super::Device), as a versioned,
//! serialisable value (JSON; the layout is in `docs/FORMATS.md`, "Table Task graphs").
//!
//! A graph is a list of [`TableTask`]s. Each task reads one table beside its pages, keeps the
//! rows its [`Selector`] (a sum-of-products of comparators, AQUOMAN's Row Selector) lets
//! through, computes new columns with its [`Program`] (the Row Transformer: a straight-line
//! program over exact scaled integers) and hands the rows to its [`Operator`] (the Swissknife).
//! The last task's output goes to the host.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The graph format this build writes and the newest it reads.
pub const GRAPH_VERSION: u32 = 1;

/// A Table Task graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskGraph {
    /// Format version ([`GRAPH_VERSION`]); a newer graph is refused, not guessed at.
    pub version: u32,
    /// The tasks; the last one's output goes to the host.
    pub tasks: Vec<TableTask>,
}

impl TaskGraph {
    /// A one-task graph of the current version.
    pub fn single(task: TableTask) -> TaskGraph {
        TaskGraph {
            version: GRAPH_VERSION,
            tasks: vec![task],
        }
    }

    /// The graph as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a graph from JSON, refusing versions this build does not know.
    pub fn from_json(text: &str) -> Result<TaskGraph> {
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let bad = |detail: String| Error::Offload { detail };
        let v: Version =
            serde_json::from_str(text).map_err(|e| bad(format!("not a Table Task graph: {e}")))?;
        if v.version == 0 || v.version > GRAPH_VERSION {
            return Err(bad(format!(
                "Table Task graph version {} (this build reads versions 1 to {GRAPH_VERSION}; \
                 a newer inpath wrote it)",
                v.version
            )));
        }
        let graph: TaskGraph = serde_json::from_str(text)
            .map_err(|e| bad(format!("a damaged Table Task graph: {e}")))?;
        graph.check()?;
        Ok(graph)
    }

    /// Checks references inside the graph: registers defined before use, masks from earlier
    /// tasks, outputs of known width.
    pub fn check(&self) -> Result<()> {
        let bad = |detail: String| Error::Offload { detail };
        if self.tasks.is_empty() {
            return Err(bad("a Table Task graph with no task".into()));
        }
        for (t, task) in self.tasks.iter().enumerate() {
            if let MaskSource::Task(k) = task.mask {
                if k >= t {
                    return Err(bad(format!(
                        "task {t} takes its mask from task {k}, which does not run before it"
                    )));
                }
            }
            task.transformer.check()?;
            let registers = task.transformer.ops.len();
            let reg_ok = |r: usize| r < registers;
            match &task.operator {
                Operator::Nop => {}
                Operator::Aggregate { aggs } => {
                    check_aggs(aggs, registers)?;
                }
                Operator::AggregateGroupBy { keys, aggs } => {
                    if keys.is_empty() {
                        return Err(bad("AGGREGATE_GROUPBY with no group key".into()));
                    }
                    for k in keys {
                        if let GroupKey::Register(r) = k {
                            if !reg_ok(*r) {
                                return Err(bad(format!("group key register {r} is undefined")));
                            }
                        }
                    }
                    check_aggs(aggs, registers)?;
                }
            }
            if task.output.fields.is_empty() {
                return Err(bad(format!("task {t} outputs no column")));
            }
        }
        Ok(())
    }
}

fn check_aggs(aggs: &[Agg], registers: usize) -> Result<()> {
    for a in aggs {
        if let Some(r) = a.arg {
            if r >= registers {
                return Err(Error::Offload {
                    detail: format!("aggregate argument register {r} is undefined"),
                });
            }
        } else if a.func != AggFunc::CountAll {
            return Err(Error::Offload {
                detail: format!("{:?} needs an argument", a.func),
            });
        }
    }
    Ok(())
}

/// One Table Task: a table read beside its pages, a selector, a transformer and an operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableTask {
    /// The table (its name in the device's catalog).
    pub table: String,
    /// Which rows the task starts from.
    pub mask: MaskSource,
    /// The Row Selector.
    pub selector: Selector,
    /// The Row Transformer.
    pub transformer: Program,
    /// The Swissknife operator.
    pub operator: Operator,
    /// What the task emits.
    pub output: Output,
}

/// Where a task's starting row mask comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MaskSource {
    /// Every row of the table.
    All,
    /// The row mask an earlier task of the graph produced.
    Task(usize),
}

/// The Row Selector: a conjunction (product) of disjunctions (sums) of comparators, evaluated
/// as 64-bit mask words. No product selects every row.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Selector {
    /// The products: a row is kept when every product holds, a product holds when any of its
    /// comparators does.
    pub products: Vec<Vec<Comparator>>,
}

impl Selector {
    /// Comparators in all products.
    pub fn comparators(&self) -> usize {
        self.products.iter().map(Vec::len).sum()
    }

    /// The table columns the selector reads, ascending.
    pub fn columns(&self) -> Vec<usize> {
        let mut c: Vec<usize> = self.products.iter().flatten().map(|c| c.column).collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

/// One comparator: a table column tested against constants. A null never passes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparator {
    /// The table column.
    pub column: usize,
    /// The test.
    pub test: Test,
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// Whether `a op b` holds.
    #[inline]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// What a comparator tests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Test {
    /// An integer, date (days) or decimal column (as its scaled integer) against a constant
    /// at the column's scale.
    Int {
        /// The operator.
        op: CmpOp,
        /// The constant.
        value: i128,
    },
    /// A string column equal to one of the strings (`negated`: equal to none of them).
    StrIn {
        /// The strings.
        values: Vec<String>,
        /// NOT IN / `<>`.
        negated: bool,
    },
    /// A string column matching a SQL LIKE pattern (`%` and `_`; no escape character).
    Like {
        /// The pattern.
        pattern: String,
        /// NOT LIKE.
        negated: bool,
    },
}

/// The Row Transformer: a straight-line program in static single assignment. Register `i` is
/// the result of `ops[i]`; every value is an exact scaled integer (i64 at run time, an
/// overflow is an error, never a wrapped value).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// The instructions.
    pub ops: Vec<Op>,
}

impl Program {
    /// Checks that every operand names an earlier register.
    pub fn check(&self) -> Result<()> {
        for (i, op) in self.ops.iter().enumerate() {
            for r in op.operands() {
                if r >= i {
                    return Err(Error::Offload {
                        detail: format!(
                            "transformer instruction {i} reads register {r}, not defined before it"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Instructions that compute (loads and constants are the read port's and the
    /// instruction's immediate in the thesis, not processing-element instructions).
    pub fn arithmetic(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| !matches!(o, Op::Load { .. } | Op::Const { .. }))
            .count()
    }

    /// Table columns the program loads, ascending.
    pub fn columns(&self) -> Vec<usize> {
        let mut c: Vec<usize> = self
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Load { column } => Some(*column),
                _ => None,
            })
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

/// One transformer instruction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// A table column's values (integers, dates as days, decimals as scaled integers).
    Load {
        /// The table column.
        column: usize,
    },
    /// A constant.
    Const {
        /// The value.
        value: i64,
    },
    /// `a + b`
    Add(usize, usize),
    /// `a - b`
    Sub(usize, usize),
    /// `a * b`
    Mul(usize, usize),
    /// `a * 10^pow` (aligns decimal scales exactly).
    Scale {
        /// The register.
        src: usize,
        /// The power of ten.
        pow: u32,
    },
    /// `if cond then a else b`, branch-free (an addition to the thesis's ISA, for CASE):
    /// `cond` is the comparator `register op value`.
    Select {
        /// The register tested.
        test: usize,
        /// The operator.
        op: CmpOp,
        /// The constant it is compared with.
        value: i64,
        /// Taken when the test holds.
        then: usize,
        /// Taken otherwise.
        otherwise: usize,
    },
}

impl Op {
    /// The registers the instruction reads.
    pub fn operands(&self) -> Vec<usize> {
        match *self {
            Op::Load { .. } | Op::Const { .. } => vec![],
            Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => vec![a, b],
            Op::Scale { src, .. } => vec![src],
            Op::Select {
                test,
                then,
                otherwise,
                ..
            } => vec![test, then, otherwise],
        }
    }
}

/// The Swissknife operator of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Operator {
    /// Hands the selected rows' registers on as they are.
    Nop,
    /// Aggregates every selected row into one row.
    Aggregate {
        /// The aggregates.
        aggs: Vec<Agg>,
    },
    /// Aggregates per group of the keys; under memory pressure it emits partial groups early
    /// (spills them to the host, whose final aggregate merges them).
    AggregateGroupBy {
        /// The group keys.
        keys: Vec<GroupKey>,
        /// The aggregates.
        aggs: Vec<Agg>,
    },
}

/// A group key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum GroupKey {
    /// A dictionary-coded string column, grouped by code.
    Dictionary {
        /// The table column.
        column: usize,
    },
    /// A register's value.
    Register(usize),
}

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AggFunc {
    /// Exact sum.
    Sum,
    /// Count of non-null values.
    Count,
    /// Count of rows.
    CountAll,
    /// Average: a count and an exact sum, emitted as the host's partial state.
    Avg,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

/// One aggregate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agg {
    /// The function.
    pub func: AggFunc,
    /// The register aggregated (none for `CountAll`).
    pub arg: Option<usize>,
    /// The decimal scale of the argument (for sums emitted as floats).
    pub scale: i8,
}

/// What a task emits: its columns, named and typed (Arrow type names, as
/// `arrow_schema::DataType` displays them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// (name, type) per column.
    pub fields: Vec<(String, String)>,
}
