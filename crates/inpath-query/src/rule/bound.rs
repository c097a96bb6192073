//! Comparators bound when the query runs: a filter comparing a column with an uncorrelated
//! scalar subquery's value (TPC-H Q22's `c_acctbal > (select avg(c_acctbal) ...)`).
//!
//! The graph is built when the statement is planned, before the subquery has a value. The
//! comparison goes into the transformer as a `Select` with a placeholder constant, and the
//! [`Bound`] beside it says how to fill it: when the device plan starts (after DataFusion's
//! `ScalarSubqueryExec` has run the subquery), the value is read, brought to the register's
//! decimal scale with the rounding that keeps the comparison exact for integers, and written
//! into a copy of the graph. A NULL value, or one beyond 64 bits at that scale, runs the host
//! plan instead.

use crate::reason::HostReason;
use crate::scan::cmp_op;
use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::physical_expr::expressions::{BinaryExpr as PBinary, CastExpr};
use datafusion::physical_expr::scalar_subquery::ScalarSubqueryExpr;
use datafusion::physical_expr::PhysicalExpr;
use inpath_offload::graph::{CmpOp, Op, TaskGraph};
use std::sync::Arc;

/// A `Select` whose constant is a subquery's value, filled in when the plan runs.
#[derive(Clone, Debug)]
pub(crate) struct Bound {
    /// The task, by its place in the graph.
    pub(crate) task: usize,
    /// The `Select`, by its place in the task's transformer.
    pub(crate) op: usize,
    /// The value: a subquery, perhaps under casts.
    pub(crate) value: Arc<dyn PhysicalExpr>,
    /// The decimal scale of the register it is compared with.
    pub(crate) scale: i8,
}

/// A comparison of the rows' side with a subquery's value.
pub(crate) struct Comparison {
    /// The side with the rows.
    pub(crate) rows: Arc<dyn PhysicalExpr>,
    /// The operator, as it reads with the rows' side first.
    pub(crate) op: CmpOp,
    /// The subquery's side.
    pub(crate) value: Arc<dyn PhysicalExpr>,
}

/// A comparison `column-side op subquery-side` (either way round): the side with the rows,
/// the operator as it reads with that side first, and the subquery's side. `None` when
/// neither side is a subquery's value; an error when one is but the comparison is not one
/// the device can bind exactly. `schema` is the one the filter reads.
pub(crate) fn subquery_comparison(
    e: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Option<Result<Comparison, HostReason>> {
    let b = e.downcast_ref::<PBinary>()?;
    let (rows, op, value) = if is_subquery_value(b.right()) {
        (b.left(), *b.op(), b.right())
    } else if is_subquery_value(b.left()) {
        (b.right(), b.op().swap()?, b.left())
    } else {
        return None;
    };
    let data_type = value.data_type(&Schema::empty()).ok();
    let numeric = matches!(
        data_type,
        Some(DataType::Decimal128(..) | DataType::Int64 | DataType::Int32)
    );
    let cmp = cmp_op(&op).filter(|c| !matches!(c, CmpOp::Eq | CmpOp::Ne));
    Some(match (cmp, numeric) {
        (Some(cmp), true) => Ok(Comparison {
            rows: widened(rows, schema).clone(),
            op: cmp,
            value: value.clone(),
        }),
        _ => Err(HostReason::SubqueryComparison {
            condition: e.to_string(),
            op: op.to_string(),
            data_type: data_type.map(|t| t.to_string()).unwrap_or_default(),
        }),
    })
}

/// Whether `e` is a scalar subquery's value, perhaps under casts.
fn is_subquery_value(e: &Arc<dyn PhysicalExpr>) -> bool {
    let mut e = e;
    while let Some(c) = e.downcast_ref::<CastExpr>() {
        e = c.expr();
    }
    e.downcast_ref::<ScalarSubqueryExpr>().is_some()
}

/// `e` without the casts on top that widen a decimal or integer exactly (to a decimal with
/// at least as many digits on both sides of the point): comparing the value before such a
/// cast with the subquery's value at its scale is the same comparison.
fn widened<'e>(e: &'e Arc<dyn PhysicalExpr>, schema: &Schema) -> &'e Arc<dyn PhysicalExpr> {
    let digits = |t: &DataType| -> Option<(i32, i32)> {
        match *t {
            DataType::Decimal128(p, s) => Some((i32::from(p) - i32::from(s), i32::from(s))),
            DataType::Int64 => Some((19, 0)),
            DataType::Int32 => Some((10, 0)),
            _ => None,
        }
    };
    let mut e = e;
    while let Some(c) = e.downcast_ref::<CastExpr>() {
        let exact = match (c.expr().data_type(schema).ok(), c.cast_type()) {
            (Some(from), to) => match (digits(&from), digits(to)) {
                (Some((fi, fs)), Some((ti, ts))) => ti >= fi && ts >= fs,
                _ => false,
            },
            (None, _) => false,
        };
        if !exact {
            break;
        }
        e = c.expr();
    }
    e
}

/// The constant a `Select` comparing a register of scale `scale` by `op` holds for `value`
/// (an integer at decimal scale `value_scale`), so that the integer comparison equals the
/// exact one: rounded down for `>` and `<=`, up for `>=` and `<`. `None` beyond 64 bits.
pub(crate) fn bound_constant(value: i128, value_scale: i8, scale: i8, op: CmpOp) -> Option<i64> {
    let v = if value_scale >= scale {
        let d = 10i128.checked_pow(u32::try_from(value_scale - scale).ok()?)?;
        match op {
            CmpOp::Gt | CmpOp::Le => value.div_euclid(d),
            _ => {
                let q = value.div_euclid(d);
                if value.rem_euclid(d) == 0 {
                    q
                } else {
                    q + 1
                }
            }
        }
    } else {
        value.checked_mul(10i128.checked_pow(u32::try_from(scale - value_scale).ok()?)?)?
    };
    i64::try_from(v).ok()
}

/// `graph` with each bound's constant filled from its subquery's value, or `None` when a
/// value is NULL or beyond the register's 64 bits (the host runs the plan).
pub(crate) fn bind(graph: &TaskGraph, bounds: &[Bound]) -> DfResult<Option<TaskGraph>> {
    let mut graph = graph.clone();
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    for b in bounds {
        let array = b.value.evaluate(&one_row)?.into_array(1)?;
        let (value, scale) = match ScalarValue::try_from_array(&array, 0)? {
            ScalarValue::Decimal128(Some(v), _, s) => (v, s),
            ScalarValue::Int64(Some(v)) => (i128::from(v), 0),
            ScalarValue::Int32(Some(v)) => (i128::from(v), 0),
            v if v.is_null() => return Ok(None),
            v => {
                return Err(DataFusionError::Internal(format!(
                    "a bound comparator's value {v} is not an integer or decimal"
                )))
            }
        };
        let Some(Op::Select {
            op, value: slot, ..
        }) = graph
            .tasks
            .get_mut(b.task)
            .and_then(|t| t.transformer.ops.get_mut(b.op))
        else {
            return Err(DataFusionError::Internal(format!(
                "a bound comparator names instruction {} of task {}, not a Select",
                b.op, b.task
            )));
        };
        match bound_constant(value, scale, b.scale, *op) {
            Some(v) => *slot = v,
            None => return Ok(None),
        }
    }
    Ok(Some(graph))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bound agrees with the exact comparison of the register's integers with the
    /// value, over values at finer, equal and coarser scales and both signs.
    #[test]
    fn bounds_keep_the_comparison_exact() {
        let ops = [CmpOp::Gt, CmpOp::Ge, CmpOp::Lt, CmpOp::Le];
        for value in -2_050i128..=2_050 {
            for (value_scale, scale) in [(3i8, 1i8), (2, 2), (0, 2), (15, 2)] {
                for op in ops {
                    let Some(c) = bound_constant(value, value_scale, scale, op) else {
                        panic!("{value} at {value_scale} has no bound at {scale}");
                    };
                    for r in -300i64..=300 {
                        // r / 10^scale op value / 10^value_scale, in integers.
                        let (x, y) = (
                            i128::from(r)
                                * 10i128.pow(value_scale.max(scale) as u32 - scale as u32),
                            value * 10i128.pow(value_scale.max(scale) as u32 - value_scale as u32),
                        );
                        let exact = match op {
                            CmpOp::Gt => x > y,
                            CmpOp::Ge => x >= y,
                            CmpOp::Lt => x < y,
                            _ => x <= y,
                        };
                        assert_eq!(
                            op.holds(r, c),
                            exact,
                            "{r}@{scale} {op:?} {value}@{value_scale}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bounds_beyond_64_bits_are_none() {
        assert_eq!(
            bound_constant(i128::from(i64::MAX) + 1, 0, 0, CmpOp::Gt),
            None
        );
        assert_eq!(bound_constant(i64::MAX.into(), 0, 2, CmpOp::Gt), None);
        assert_eq!(bound_constant(-7, 1, 0, CmpOp::Gt), Some(-1));
        assert_eq!(bound_constant(-7, 1, 0, CmpOp::Ge), Some(0));
    }
}
