//! Which filters the scan takes, and the zone-map ranges they bound (constants rounded to
//! the column's stored type).

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result as DfResult;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use inpath_table::format::{LogicalType, Scalar};
use inpath_table::reader::TableReader;

/// Whether `expr` can be evaluated by the scan alone: it references only this table's columns,
/// at least one of them, and holds nothing volatile, no subquery, no aggregate.
pub(super) fn pushable(expr: &Expr, reader: &TableReader) -> bool {
    let mut ok = true;
    let mut columns = 0;
    let _ = expr.apply(|e| {
        match e {
            Expr::Column(c) => {
                columns += 1;
                ok &= reader.column_index(&c.name).is_some();
            }
            Expr::Literal(..)
            | Expr::BinaryExpr(_)
            | Expr::Like(_)
            | Expr::SimilarTo(_)
            | Expr::Not(_)
            | Expr::IsNotNull(_)
            | Expr::IsNull(_)
            | Expr::IsTrue(_)
            | Expr::IsFalse(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotTrue(_)
            | Expr::IsNotFalse(_)
            | Expr::IsNotUnknown(_)
            | Expr::Negative(_)
            | Expr::Between(_)
            | Expr::Case(_)
            | Expr::Cast(_)
            | Expr::TryCast(_)
            | Expr::InList(_) => {}
            Expr::ScalarFunction(_) => ok &= !e.is_volatile_node(),
            _ => ok = false,
        }
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok && columns > 0
}

/// Drops table qualifiers so that the expression binds to the table's own schema.
pub(super) fn unqualified(expr: &Expr) -> DfResult<Expr> {
    expr.clone()
        .transform(|e| {
            Ok(match e {
                Expr::Column(c) if c.relation.is_some() => {
                    Transformed::yes(Expr::Column(Column::new_unqualified(c.name)))
                }
                other => Transformed::no(other),
            })
        })
        .map(|t| t.data)
}

/// How a literal bound is rounded when it must be rescaled to the column's decimal scale.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Round {
    Down,
    Up,
    Exact,
}

/// The zone-map bound a literal gives for a column of type `logical`, if any.
pub(crate) fn bound(value: &ScalarValue, logical: LogicalType, round: Round) -> Option<Scalar> {
    // A literal compared with a dictionary column is coerced to a dictionary scalar.
    if let ScalarValue::Dictionary(_, inner) = value {
        return bound(inner, logical, round);
    }
    let int = |v: &ScalarValue| -> Option<i128> {
        Some(match v {
            ScalarValue::Int8(Some(x)) => *x as i128,
            ScalarValue::Int16(Some(x)) => *x as i128,
            ScalarValue::Int32(Some(x)) => *x as i128,
            ScalarValue::Int64(Some(x)) => *x as i128,
            ScalarValue::UInt8(Some(x)) => *x as i128,
            ScalarValue::UInt16(Some(x)) => *x as i128,
            ScalarValue::UInt32(Some(x)) => *x as i128,
            ScalarValue::UInt64(Some(x)) => *x as i128,
            _ => return None,
        })
    };
    match logical {
        LogicalType::Int32 | LogicalType::Int64 => int(value).map(Scalar::Int),
        LogicalType::Date32 => match value {
            ScalarValue::Date32(Some(d)) => Some(Scalar::Int(*d as i128)),
            _ => None,
        },
        LogicalType::Decimal128 { scale, .. } => {
            let (v, s) = match value {
                ScalarValue::Decimal128(Some(v), _, s) => (*v, *s),
                other => (int(other)?, 0),
            };
            let diff = scale as i32 - s as i32;
            if diff >= 0 {
                let f = 10i128.checked_pow(diff as u32)?;
                v.checked_mul(f).map(Scalar::Int)
            } else {
                let f = 10i128.checked_pow((-diff) as u32)?;
                let (q, r) = (v.div_euclid(f), v.rem_euclid(f));
                match (round, r) {
                    (_, 0) => Some(Scalar::Int(q)),
                    (Round::Down, _) => Some(Scalar::Int(q)),
                    (Round::Up, _) => Some(Scalar::Int(q + 1)),
                    (Round::Exact, _) => None,
                }
            }
        }
        LogicalType::Float64 => match value {
            ScalarValue::Float64(Some(f)) => Some(Scalar::float(*f)),
            ScalarValue::Float32(Some(f)) => Some(Scalar::float(*f as f64)),
            other => int(other).map(|i| Scalar::float(i as f64)),
        },
        LogicalType::Utf8 => match value {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => Some(Scalar::Str(s.clone())),
            _ => None,
        },
        LogicalType::Boolean => match value {
            ScalarValue::Boolean(Some(b)) => Some(Scalar::Bool(*b)),
            _ => None,
        },
    }
}

/// A column's range from one conjunct: (column, low, high), both inclusive.
pub(super) type Range = (usize, Option<Scalar>, Option<Scalar>);

/// The range a single-column conjunct confines its column to, if it is of a kind zone maps
/// can use.
pub(super) fn conjunct_range(expr: &Expr, reader: &TableReader) -> Option<Range> {
    let column = |e: &Expr| -> Option<(usize, LogicalType)> {
        let Expr::Column(c) = e else { return None };
        let i = reader.column_index(&c.name)?;
        Some((i, reader.manifest().columns[i].logical))
    };
    let literal = |e: &Expr| -> Option<ScalarValue> {
        match e {
            Expr::Literal(v, _) => Some(v.clone()),
            _ => None,
        }
    };
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (col, value, op) = match (column(left), literal(right)) {
                (Some(c), Some(v)) => (c, v, *op),
                _ => (column(right)?, literal(left)?, op.swap()?),
            };
            let (i, logical) = col;
            match op {
                Operator::Eq => {
                    let b = bound(&value, logical, Round::Exact)?;
                    Some((i, Some(b.clone()), Some(b)))
                }
                Operator::Lt | Operator::LtEq => {
                    Some((i, None, Some(bound(&value, logical, Round::Up)?)))
                }
                Operator::Gt | Operator::GtEq => {
                    Some((i, Some(bound(&value, logical, Round::Down)?), None))
                }
                _ => None,
            }
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let (i, logical) = column(expr)?;
            let lo = bound(&literal(low)?, logical, Round::Down);
            let hi = bound(&literal(high)?, logical, Round::Up);
            (lo.is_some() || hi.is_some()).then_some((i, lo, hi))
        }
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let (i, logical) = column(expr)?;
            let mut lo: Option<Scalar> = None;
            let mut hi: Option<Scalar> = None;
            for item in list {
                let v = bound(&literal(item)?, logical, Round::Exact)?;
                if lo
                    .as_ref()
                    .is_none_or(|l| v.partial_cmp_to(l) == Some(std::cmp::Ordering::Less))
                {
                    lo = Some(v.clone());
                }
                if hi
                    .as_ref()
                    .is_none_or(|h| v.partial_cmp_to(h) == Some(std::cmp::Ordering::Greater))
                {
                    hi = Some(v);
                }
            }
            Some((i, lo, hi))
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let (i, logical) = column(expr)?;
            if logical != LogicalType::Utf8 {
                return None;
            }
            let pattern = match literal(pattern)? {
                ScalarValue::Dictionary(_, inner) => match *inner {
                    ScalarValue::Utf8(Some(s)) => s,
                    _ => return None,
                },
                ScalarValue::Utf8(Some(s))
                | ScalarValue::LargeUtf8(Some(s))
                | ScalarValue::Utf8View(Some(s)) => s,
                _ => return None,
            };
            let prefix: String = pattern
                .chars()
                .take_while(|c| *c != '%' && *c != '_')
                .collect();
            (!prefix.is_empty()).then_some((i, Some(Scalar::Str(prefix)), None))
        }
        _ => None,
    }
}
