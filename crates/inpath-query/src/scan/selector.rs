//! A pushed filter as the offload device's Row Selector: a sum of products of comparators
//! over one table's columns, or why it is not one.

use crate::reason::HostReason;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::expr::{InList, Like};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator as SqlOp};
use inpath_offload::graph::{CmpOp, Comparator, Selector, Test};
use inpath_table::error::Result;
use inpath_table::format::LogicalType;
use inpath_table::reader::TableReader;

/// A SQL comparison as the device's.
pub(crate) fn cmp_op(op: &SqlOp) -> Option<CmpOp> {
    Some(match op {
        SqlOp::Eq => CmpOp::Eq,
        SqlOp::NotEq => CmpOp::Ne,
        SqlOp::Lt => CmpOp::Lt,
        SqlOp::LtEq => CmpOp::Le,
        SqlOp::Gt => CmpOp::Gt,
        SqlOp::GtEq => CmpOp::Ge,
        _ => return None,
    })
}

/// The Row Selector for a scan's pushed filters (a sum of products of comparators), or why
/// they are not one.
pub(crate) fn selector_for(filters: &[Expr], reader: &TableReader) -> Result<Selector, HostReason> {
    let mut products = Vec::new();
    for f in filters {
        products.extend(cnf(f, reader)?);
    }
    Ok(Selector { products })
}

/// A condition as a product of sums of comparators (conjunctive normal form): ANDs joined,
/// ORs distributed over them (an OR of ANDs, as Q19's, becomes the product of every choice of
/// one term from each), up to 256 sums.
pub(super) fn cnf(expr: &Expr, reader: &TableReader) -> Result<Vec<Vec<Comparator>>, HostReason> {
    match expr {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: SqlOp::And,
            right,
        }) => {
            let mut a = cnf(left, reader)?;
            a.extend(cnf(right, reader)?);
            Ok(a)
        }
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: SqlOp::Or,
            right,
        }) => {
            let (a, b) = (cnf(left, reader)?, cnf(right, reader)?);
            if a.len() * b.len() > 256 {
                return Err(HostReason::TooManyProducts {
                    left: a.len(),
                    right: b.len(),
                });
            }
            let mut out = Vec::with_capacity(a.len() * b.len());
            for x in &a {
                for y in &b {
                    let mut sum = x.clone();
                    sum.extend(y.iter().cloned());
                    out.push(sum);
                }
            }
            Ok(out)
        }
        _ => conjunct_products(expr, reader),
    }
}

pub(super) fn conjunct_products(
    expr: &Expr,
    reader: &TableReader,
) -> Result<Vec<Vec<Comparator>>, HostReason> {
    match expr {
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let lo = comparator(expr, SqlOp::GtEq, low, reader)?;
            let hi = comparator(expr, SqlOp::LtEq, high, reader)?;
            Ok(vec![vec![lo], vec![hi]])
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            // `substr(c, 1, n) IN ('ab', ...)`: each item a LIKE 'ab%' (Q22's country codes).
            if let Some((column, n)) = prefix_of(expr, reader) {
                let items = list
                    .iter()
                    .map(|v| prefix_like(column, n, v, *negated))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(if *negated {
                    items.into_iter().map(|c| vec![c]).collect()
                } else {
                    vec![items]
                });
            }
            let column = column_of(expr, reader)?;
            if reader.manifest().columns[column].logical == LogicalType::Utf8 {
                let values = list
                    .iter()
                    .map(|v| {
                        string_literal(v).ok_or_else(|| HostReason::InItem {
                            item: v.to_string(),
                        })
                    })
                    .collect::<Result<_, _>>()?;
                return Ok(vec![vec![Comparator {
                    column,
                    test: Test::StrIn {
                        values,
                        negated: *negated,
                    },
                }]]);
            }
            let op = if *negated { SqlOp::NotEq } else { SqlOp::Eq };
            let items = list
                .iter()
                .map(|v| comparator(expr, op, v, reader))
                .collect::<Result<Vec<_>, _>>()?;
            // IN: one product, any item; NOT IN: every item excluded.
            Ok(if *negated {
                items.into_iter().map(|c| vec![c]).collect()
            } else {
                vec![items]
            })
        }
        _ => Ok(vec![disjuncts(expr, reader)?]),
    }
}

/// One comparison, LIKE, IN or BETWEEN as one sum of comparators (ORs and ANDs around them are
/// `cnf`'s).
pub(super) fn disjuncts(expr: &Expr, reader: &TableReader) -> Result<Vec<Comparator>, HostReason> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if matches!(left.as_ref(), Expr::Literal(..)) {
                let swapped = op.swap().ok_or_else(|| HostReason::NotSwappable {
                    expr: expr.to_string(),
                })?;
                Ok(vec![comparator(right, swapped, left, reader)?])
            } else if let (Some((column, n)), SqlOp::Eq | SqlOp::NotEq) =
                (prefix_of(left, reader), op)
            {
                Ok(vec![prefix_like(column, n, right, *op == SqlOp::NotEq)?])
            } else {
                Ok(vec![comparator(left, *op, right, reader)?])
            }
        }
        Expr::Like(Like {
            negated,
            expr: inner,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let column = column_of(inner, reader)?;
            let pattern = string_literal(pattern).ok_or(HostReason::LikePattern)?;
            Ok(vec![Comparator {
                column,
                test: Test::Like {
                    pattern,
                    negated: *negated,
                },
            }])
        }
        Expr::InList(_) | Expr::Between(_) => {
            let products = conjunct_products(expr, reader)?;
            match <[Vec<Comparator>; 1]>::try_from(products) {
                Ok([one]) => Ok(one),
                Err(_) => Err(HostReason::InsideOr {
                    expr: expr.to_string(),
                }),
            }
        }
        other => Err(HostReason::FilterExpression {
            expr: other.to_string(),
        }),
    }
}

/// `substr(c, 1, n)` (or `substring(c from 1 for n)`) of a string column without nulls: the
/// column and `n`.
pub(super) fn prefix_of(expr: &Expr, reader: &TableReader) -> Option<(usize, i64)> {
    let Expr::ScalarFunction(f) = expr else {
        return None;
    };
    if !matches!(f.func.name(), "substr" | "substring") {
        return None;
    }
    let [column, start, len] = f.args.as_slice() else {
        return None;
    };
    // A dictionary column is cast to plain strings first: the same values.
    let c = match column {
        Expr::Column(c) => c,
        Expr::Cast(datafusion::logical_expr::Cast { expr, field })
            if matches!(field.data_type(), DataType::Utf8 | DataType::Utf8View) =>
        {
            match expr.as_ref() {
                Expr::Column(c) => c,
                _ => return None,
            }
        }
        _ => return None,
    };
    let int = |e: &Expr| match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v),
        Expr::Literal(ScalarValue::Int32(Some(v)), _) => Some(*v as i64),
        _ => None,
    };
    let column = reader.column_index(&c.name)?;
    let meta = &reader.manifest().columns[column];
    (int(start)? == 1 && meta.logical == LogicalType::Utf8 && !meta.nullable)
        .then_some((column, int(len)?))
        .filter(|&(_, n)| n > 0)
}

/// `substr(c, 1, n) = v` as `c LIKE 'v%'`: exact where `v` has `n` characters and no LIKE
/// wildcard (a shorter value of `c` is its own prefix, and equals no such `v`).
pub(super) fn prefix_like(
    column: usize,
    n: i64,
    v: &Expr,
    negated: bool,
) -> Result<Comparator, HostReason> {
    let text = string_literal(v).ok_or_else(|| HostReason::PrefixValue {
        value: v.to_string(),
    })?;
    if text.chars().count() as i64 != n || text.contains(['%', '_', '\\']) {
        return Err(HostReason::PrefixText { length: n, text });
    }
    Ok(Comparator {
        column,
        test: Test::Like {
            pattern: format!("{text}%"),
            negated,
        },
    })
}

pub(super) fn column_of(expr: &Expr, reader: &TableReader) -> Result<usize, HostReason> {
    match expr {
        Expr::Column(c) => reader
            .column_index(&c.name)
            .ok_or_else(|| HostReason::NoColumn {
                column: c.name.clone(),
            }),
        // A cast that widens exactly keeps the order: compare the column itself, with the
        // constant brought to the column's scale (rounded to keep the comparison's meaning).
        Expr::Cast(datafusion::logical_expr::Cast { expr: inner, field }) => {
            let data_type = field.data_type();
            let c = column_of(inner, reader)?;
            let logical = reader.manifest().columns[c].logical;
            let exact = match (logical, data_type) {
                (LogicalType::Decimal128 { scale, .. }, DataType::Decimal128(_, s)) => *s >= scale,
                (LogicalType::Int32 | LogicalType::Int64, DataType::Decimal128(_, s)) => *s >= 0,
                (LogicalType::Int32, DataType::Int64) => true,
                _ => false,
            };
            if exact {
                Ok(c)
            } else {
                Err(HostReason::ChangingCast {
                    expr: expr.to_string(),
                })
            }
        }
        other => Err(HostReason::NotAColumn {
            expr: other.to_string(),
        }),
    }
}

pub(super) fn string_literal(expr: &Expr) -> Option<String> {
    let Expr::Literal(v, _) = expr else {
        return None;
    };
    let v = match v {
        ScalarValue::Dictionary(_, inner) => inner.as_ref(),
        v => v,
    };
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        _ => None,
    }
}

pub(super) fn comparator(
    column: &Expr,
    op: SqlOp,
    literal: &Expr,
    reader: &TableReader,
) -> Result<Comparator, HostReason> {
    let c = column_of(column, reader)?;
    let logical = reader.manifest().columns[c].logical;
    let op = cmp_op(&op).ok_or_else(|| HostReason::Operator { op: op.to_string() })?;
    // Two columns of the table, of one type and scale: compared row by row.
    if let Ok(other) = column_of(literal, reader) {
        let numeric = matches!(
            logical,
            LogicalType::Int32
                | LogicalType::Int64
                | LogicalType::Date32
                | LogicalType::Decimal128 { .. }
        );
        if numeric && reader.manifest().columns[other].logical == logical {
            return Ok(Comparator {
                column: c,
                test: Test::Columns { op, other },
            });
        }
        return Err(HostReason::ColumnsOfOtherTypes {
            column: column.to_string(),
            other: literal.to_string(),
        });
    }
    if logical == LogicalType::Utf8 {
        let s = string_literal(literal).ok_or_else(|| HostReason::NotAString {
            value: literal.to_string(),
        })?;
        return match op {
            CmpOp::Eq | CmpOp::Ne => Ok(Comparator {
                column: c,
                test: Test::StrIn {
                    values: vec![s],
                    negated: op == CmpOp::Ne,
                },
            }),
            _ => Err(HostReason::StringOrdering),
        };
    }
    if !matches!(
        logical,
        LogicalType::Int32
            | LogicalType::Int64
            | LogicalType::Date32
            | LogicalType::Decimal128 { .. }
    ) {
        return Err(HostReason::ComparisonType {
            data_type: format!("{logical:?}"),
        });
    }
    let Expr::Literal(value, _) = literal else {
        return Err(HostReason::NotAConstant {
            value: literal.to_string(),
        });
    };
    // A constant between two representable values: the comparison is rewritten to the
    // neighbour that keeps its meaning (x < 5.5 is x < 6 at scale 0, x <= 5.5 is x <= 5).
    let round = match op {
        CmpOp::Lt | CmpOp::Ge => crate::scan::Round::Up,
        CmpOp::Le | CmpOp::Gt => crate::scan::Round::Down,
        CmpOp::Eq | CmpOp::Ne => crate::scan::Round::Exact,
    };
    match crate::scan::bound(value, logical, round) {
        Some(inpath_table::format::Scalar::Int(v)) => Ok(Comparator {
            column: c,
            test: Test::Int { op, value: v },
        }),
        _ => Err(HostReason::ConstantType {
            value: value.to_string(),
            data_type: format!("{logical:?}"),
        }),
    }
}
