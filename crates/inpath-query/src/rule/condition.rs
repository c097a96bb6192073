//! Values computed from an aggregate's groups and a join's rows, as the host computes them:
//! the columns a projection computes over a Final aggregate that a join keeps (TPC-H Q17's
//! `CAST(0.2 * avg(l_quantity) AS Decimal128(30, 15))`, Q20's `0.5 * CAST(sum(l_quantity) AS
//! Float64)`), and a semi or anti join's condition comparing them with the probe rows'
//! columns ([`Condition`]).

use super::plan::{Col, Kind};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as SqlOp;
use datafusion::physical_expr::expressions::{
    BinaryExpr as PBinary, CastExpr, Column as PColumn, Literal,
};
use datafusion::physical_expr::PhysicalExpr;
use inpath_offload::graph::{Condition, Value};
use inpath_table::format::LogicalType;
use std::sync::Arc;

/// The kind of a table column's values as the device reads them (integers, dates and
/// decimals as scaled integers), or none (strings, doubles, booleans).
pub(super) fn column_kind(col: &Col) -> Option<Kind> {
    Some(match col.reader.manifest().columns[col.column].logical {
        LogicalType::Int32 | LogicalType::Date32 => Kind::Int {
            scale: 0,
            precision: 10,
        },
        LogicalType::Int64 => Kind::Int {
            scale: 0,
            precision: 19,
        },
        LogicalType::Decimal128 { precision, scale } => Kind::Int { scale, precision },
        _ => return None,
    })
}

/// The kind of an aggregate's Final output of `data_type` whose device sums at `scale`.
pub(super) fn output_kind(data_type: &DataType, scale: i8) -> Option<Kind> {
    match data_type {
        DataType::Int64 if scale == 0 => Some(Kind::Int {
            scale: 0,
            precision: 19,
        }),
        DataType::Decimal128(p, s) if *s == scale => Some(Kind::Int {
            scale,
            precision: *p,
        }),
        DataType::Float64 => Some(Kind::Float),
        _ => None,
    }
}

/// `expr` as a value, its columns given by `leaf`; none where the device would not compute
/// what the host does (decimal arithmetic, casts that narrow, other functions).
pub(super) fn value_of(
    expr: &Arc<dyn PhysicalExpr>,
    leaf: &dyn Fn(usize) -> Option<(Value, Kind)>,
) -> Option<(Value, Kind)> {
    if let Some(c) = expr.downcast_ref::<PColumn>() {
        return leaf(c.index());
    }
    if let Some(l) = expr.downcast_ref::<Literal>() {
        return match l.value() {
            ScalarValue::Float64(Some(f)) => Some((Value::Float(*f), Kind::Float)),
            _ => None,
        };
    }
    if let Some(c) = expr.downcast_ref::<CastExpr>() {
        let (of, kind) = value_of(c.expr(), leaf)?;
        return match (kind, c.cast_type()) {
            (Kind::Float, DataType::Float64) => Some((of, Kind::Float)),
            (Kind::Int { scale, .. }, DataType::Float64) => Some((
                Value::ToFloat {
                    of: Box::new(of),
                    scale,
                },
                Kind::Float,
            )),
            (Kind::Float, DataType::Decimal128(p, s)) => Some((
                Value::FromFloat {
                    of: Box::new(of),
                    scale: *s,
                    precision: *p,
                },
                Kind::Int {
                    scale: *s,
                    precision: *p,
                },
            )),
            // A decimal to more digits after the point, never past its precision.
            (Kind::Int { scale, precision }, DataType::Decimal128(p, s))
                if *s >= scale && *p as i16 - *s as i16 >= precision as i16 - scale as i16 =>
            {
                let by = (*s - scale) as u8;
                let value = match by {
                    0 => of,
                    _ => Value::Rescale {
                        of: Box::new(of),
                        by,
                    },
                };
                Some((
                    value,
                    Kind::Int {
                        scale: *s,
                        precision: *p,
                    },
                ))
            }
            _ => None,
        };
    }
    if let Some(b) = expr.downcast_ref::<PBinary>() {
        let (l, lk) = value_of(b.left(), leaf)?;
        let (r, rk) = value_of(b.right(), leaf)?;
        if (lk, rk) != (Kind::Float, Kind::Float) {
            return None;
        }
        let (l, r) = (Box::new(l), Box::new(r));
        let v = match b.op() {
            SqlOp::Plus => Value::Add(l, r),
            SqlOp::Minus => Value::Sub(l, r),
            SqlOp::Multiply => Value::Mul(l, r),
            SqlOp::Divide => Value::Div(l, r),
            _ => return None,
        };
        return Some((v, Kind::Float));
    }
    None
}

/// A comparison of two values as a join's condition: integers at the same scale, or
/// doubles.
pub(super) fn condition_of(
    expr: &Arc<dyn PhysicalExpr>,
    leaf: &dyn Fn(usize) -> Option<(Value, Kind)>,
) -> Option<Condition> {
    let b = expr.downcast_ref::<PBinary>()?;
    let op = crate::scan::cmp_op(b.op())?;
    let (left, lk) = value_of(b.left(), leaf)?;
    let (right, rk) = value_of(b.right(), leaf)?;
    let same = match (lk, rk) {
        (Kind::Float, Kind::Float) => true,
        (Kind::Int { scale: a, .. }, Kind::Int { scale: b, .. }) => a == b,
        _ => false,
    };
    let c = Condition { op, left, right };
    (same && c.well_formed()).then_some(c)
}
