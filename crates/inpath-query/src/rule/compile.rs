//! The expression compiler: DataFusion physical expressions into transformer programs,
//! flags and aggregates.

use super::plan::Col;
use crate::reason::HostReason;
use crate::scan::cmp_op;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as SqlOp;
use datafusion::physical_expr::expressions::{
    BinaryExpr as PBinary, CaseExpr, CastExpr, Column as PColumn, InListExpr, LikeExpr, Literal,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use inpath_offload::graph::{
    Agg, AggFunc, CmpOp, Comparator, GroupKey, JoinKind, Op, Program, Source, TableTask, Test,
    MAX_PREFIX_BYTES,
};
use inpath_table::format::LogicalType;
use inpath_table::reader::TableReader;
use std::collections::HashMap;
use std::sync::Arc;

/// Compiles DataFusion physical expressions into the Row Transformer's program, through the
/// projections between the aggregate and the scan; every register keeps its decimal scale.
pub(super) struct Compiler<'a> {
    pub(super) layers: &'a [(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)],
    /// The schema expressions at each level are evaluated against (level 0: the aggregate's
    /// input).
    pub(super) schemas: Vec<SchemaRef>,
    /// The columns of the rows below the projections.
    pub(super) rows: &'a [Col],
    /// The graph's tasks (the pipeline task last): CASE conditions on strings add flags to
    /// the task that reads the column.
    pub(super) tasks: &'a mut Vec<TableTask>,
    pub(super) program: Program,
    pub(super) scales: Vec<i8>,
    /// (level, column) already compiled: common subexpressions are computed once.
    pub(super) memo: HashMap<(usize, usize), usize>,
    pub(super) loads: HashMap<Source, usize>,
}

impl Compiler<'_> {
    pub(super) fn push(&mut self, op: Op, scale: i8) -> usize {
        self.program.ops.push(op);
        self.scales.push(scale);
        self.program.ops.len() - 1
    }

    /// The column of the rows that `(level, index)` names through plain column projections,
    /// if any.
    pub(super) fn row_column(&self, mut level: usize, mut index: usize) -> Option<&Col> {
        loop {
            if level == self.layers.len() {
                return self.rows.get(index);
            }
            let expr = self.layers[level].0.get(index)?;
            let col = expr.downcast_ref::<PColumn>()?;
            index = col.index();
            level += 1;
        }
    }

    pub(super) fn column(&mut self, level: usize, index: usize) -> Result<usize, HostReason> {
        if let Some(&r) = self.memo.get(&(level, index)) {
            return Ok(r);
        }
        let r = if level == self.layers.len() {
            let col = self
                .rows
                .get(index)
                .ok_or_else(|| HostReason::inconsistent("a column beyond the scan's projection"))?;
            if let Some(&r) = self.loads.get(&col.src) {
                r
            } else {
                let (reader, column): (&TableReader, usize) = (&col.reader, col.column);
                let meta = &reader.manifest().columns[column];
                let scale = match meta.logical {
                    LogicalType::Int32 | LogicalType::Int64 | LogicalType::Date32 => 0,
                    LogicalType::Decimal128 { scale, .. } => scale,
                    other => {
                        return Err(HostReason::ColumnType {
                            column: meta.name.clone(),
                            data_type: format!("{other:?}"),
                        })
                    }
                };
                if reader.schema().field(column).is_nullable() {
                    return Err(HostReason::NullableColumn {
                        column: meta.name.clone(),
                    });
                }
                let op = match col.src {
                    Source::Column(column) => Op::Load { column },
                    Source::Flag(flag) => Op::Flag { flag },
                    Source::Build { join, column } => Op::Fetch { join, column },
                };
                let src = col.src;
                let r = self.push(op, scale);
                self.loads.insert(src, r);
                r
            }
        } else {
            let expr = self.layers[level].0[index].clone();
            self.expr(&expr, level + 1)?
        };
        self.memo.insert((level, index), r);
        Ok(r)
    }

    /// The scale DataFusion gives `expr` at `level`, for integer-like results.
    pub(super) fn df_scale(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<i8, HostReason> {
        let ty = expr
            .data_type(&self.schemas[level])
            .map_err(|e| HostReason::Planning {
                detail: e.strip_backtrace(),
            })?;
        match ty {
            DataType::Decimal128(_, s) => Ok(s),
            DataType::Int64 | DataType::Int32 | DataType::Int16 | DataType::Int8 => Ok(0),
            DataType::Date32 => Ok(0),
            other => Err(HostReason::ExpressionType {
                expr: expr.to_string(),
                data_type: other.to_string(),
            }),
        }
    }

    pub(super) fn rescale(&mut self, r: usize, to: i8) -> Result<usize, HostReason> {
        let from = self.scales[r];
        match to - from {
            0 => Ok(r),
            d if d > 0 => Ok(self.push(
                Op::Scale {
                    src: r,
                    pow: d as u32,
                },
                to,
            )),
            _ => Err(HostReason::DecimalNarrowed { from, to }),
        }
    }

    pub(super) fn expr(
        &mut self,
        expr: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<usize, HostReason> {
        if let Some(col) = expr.downcast_ref::<PColumn>() {
            return self.column(level, col.index());
        }
        if let Some(r) = self.prefix(expr, level)? {
            return Ok(r);
        }
        let want = self.df_scale(expr, level)?;
        if let Some(lit) = expr.downcast_ref::<Literal>() {
            let (v, s) = scaled_literal(lit.value()).ok_or_else(|| HostReason::Literal {
                value: lit.value().to_string(),
            })?;
            let v = i64::try_from(v).map_err(|_| HostReason::LiteralBeyond64Bits {
                value: v.to_string(),
            })?;
            let r = self.push(Op::Const { value: v }, s);
            return self.rescale(r, want);
        }
        if let Some(cast) = expr.downcast_ref::<CastExpr>() {
            let inner = self.expr(cast.expr(), level)?;
            return self.rescale(inner, want);
        }
        if let Some(case) = expr.downcast_ref::<CaseExpr>() {
            // Branch-free: Selects from the last WHEN to the first, over the ELSE.
            if case.expr().is_some() {
                return Err(HostReason::CaseWithOperand);
            }
            let otherwise = case.else_expr().ok_or(HostReason::CaseWithoutElse)?;
            let r = self.expr(otherwise, level)?;
            let mut acc = self.rescale(r, want)?;
            for (when, then) in case.when_then_expr().iter().rev() {
                let t = self.expr(then, level)?;
                let t = self.rescale(t, want)?;
                let (test, op, value) = self.condition(when, level)?;
                acc = self.push(
                    Op::Select {
                        test,
                        op,
                        value,
                        then: t,
                        otherwise: acc,
                    },
                    want,
                );
            }
            return Ok(acc);
        }
        if let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() {
            // date_part('year', date): EXTRACT(YEAR FROM ...).
            if let ("date_part", [part, date]) = (f.name(), f.args()) {
                let is_year = part.downcast_ref::<Literal>().is_some_and(|l| {
                    matches!(l.value(), ScalarValue::Utf8(Some(p)) if p.eq_ignore_ascii_case("year"))
                });
                let is_date = date.data_type(&self.schemas[level]).ok() == Some(DataType::Date32);
                if is_year && is_date {
                    let d = self.expr(date, level)?;
                    return Ok(self.push(Op::Year { src: d }, 0));
                }
            }
        }
        if let Some(b) = expr.downcast_ref::<PBinary>() {
            let x = self.expr(b.left(), level)?;
            let y = self.expr(b.right(), level)?;
            let (sx, sy) = (self.scales[x], self.scales[y]);
            let r = match b.op() {
                SqlOp::Plus | SqlOp::Minus => {
                    let s = sx.max(sy);
                    let (x, y) = (self.rescale(x, s)?, self.rescale(y, s)?);
                    let op = if *b.op() == SqlOp::Plus {
                        Op::Add(x, y)
                    } else {
                        Op::Sub(x, y)
                    };
                    self.push(op, s)
                }
                SqlOp::Multiply => self.push(Op::Mul(x, y), sx + sy),
                other => {
                    return Err(HostReason::Operator {
                        op: other.to_string(),
                    })
                }
            };
            if self.scales[r] != want {
                return Err(HostReason::InexactScale {
                    expr: expr.to_string(),
                    planned: want,
                    exact: self.scales[r],
                });
            }
            return Ok(r);
        }
        Err(HostReason::Expression {
            expr: expr.to_string(),
        })
    }

    /// `substr(s, 1, n)` (SQL's `substring(s FROM 1 FOR n)`) of a string column of the task's
    /// table, without nulls, for `n` of 1 to 7: the prefix packed into a register
    /// ([`Op::Prefix`]). `None` when `expr` is not such a call.
    fn prefix(
        &mut self,
        expr: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<Option<usize>, HostReason> {
        let Some(f) = expr.downcast_ref::<ScalarFunctionExpr>() else {
            return Ok(None);
        };
        let ("substr", [text, start, count]) = (f.name(), f.args()) else {
            return Ok(None);
        };
        let int = |e: &Arc<dyn PhysicalExpr>| match e.downcast_ref::<Literal>()?.value() {
            ScalarValue::Int64(Some(v)) => Some(*v),
            _ => None,
        };
        let (Some(1), Some(n)) = (int(start), int(count)) else {
            return Err(HostReason::Expression {
                expr: expr.to_string(),
            });
        };
        let chars = u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_PREFIX_BYTES as u32).contains(n))
            .ok_or(HostReason::PrefixLength { chars: n })?;
        let not_a_column = || HostReason::Expression {
            expr: expr.to_string(),
        };
        let col = self.text_column(text, level).ok_or_else(not_a_column)?;
        let Source::Column(column) = col.src else {
            return Err(not_a_column());
        };
        let field = col.reader.schema().field(col.column).clone();
        if field.is_nullable() {
            return Err(HostReason::NullableColumn {
                column: field.name().clone(),
            });
        }
        Ok(Some(self.push(Op::Prefix { column, chars }, 0)))
    }

    /// A condition as a register that is 1 where it holds and 0 where not: ANDs as products,
    /// ORs and comparisons as Selects, string tests as flags.
    pub(super) fn predicate(
        &mut self,
        e: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<usize, HostReason> {
        if let Some(b) = e.downcast_ref::<PBinary>() {
            if matches!(b.op(), SqlOp::And | SqlOp::Or) && self.string_test(e, level).is_none() {
                let x = self.predicate(b.left(), level)?;
                let y = self.predicate(b.right(), level)?;
                return Ok(if *b.op() == SqlOp::And {
                    self.push(Op::Mul(x, y), 0)
                } else {
                    let one = self.push(Op::Const { value: 1 }, 0);
                    self.push(
                        Op::Select {
                            test: x,
                            op: CmpOp::Ne,
                            value: 0,
                            then: one,
                            otherwise: y,
                        },
                        0,
                    )
                });
            }
        }
        let (test, op, value) = self.condition(e, level)?;
        let one = self.push(Op::Const { value: 1 }, 0);
        let zero = self.push(Op::Const { value: 0 }, 0);
        Ok(self.push(
            Op::Select {
                test,
                op,
                value,
                then: one,
                otherwise: zero,
            },
            0,
        ))
    }

    /// A CASE condition as `register op value`: a numeric comparison with a constant, or a
    /// string test (=, <>, IN as ORs of =, LIKE) as a flag register that is not 0.
    pub(super) fn condition(
        &mut self,
        when: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<(usize, CmpOp, i64), HostReason> {
        if let Some((col, test)) = self.string_test(when, level) {
            let last = self.tasks.len() - 1;
            let src = flag_source(self.tasks, last, col.src, test)?;
            let op = match src {
                Source::Flag(flag) => Op::Flag { flag },
                Source::Build { join, column } => Op::Fetch { join, column },
                Source::Column(_) => return Err(HostReason::FlagIsColumn),
            };
            let r = self.push(op, 0);
            return Ok((r, CmpOp::Ne, 0));
        }
        let b = when
            .downcast_ref::<PBinary>()
            .ok_or_else(|| HostReason::Condition {
                condition: when.to_string(),
            })?;
        let op = cmp_op(b.op()).ok_or_else(|| HostReason::ConditionOperator {
            op: b.op().to_string(),
        })?;
        let lit = b.right().downcast_ref::<Literal>().ok_or_else(|| {
            HostReason::ConditionNotConstant {
                condition: when.to_string(),
            }
        })?;
        let (v, ls) = scaled_literal(lit.value()).ok_or_else(|| HostReason::ConditionConstant {
            value: lit.value().to_string(),
        })?;
        let r = self.expr(b.left(), level)?;
        let s = self.scales[r].max(ls);
        let r = self.rescale(r, s)?;
        let v = 10i128
            .checked_pow((s - ls) as u32)
            .and_then(|f| v.checked_mul(f))
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| HostReason::ConditionConstantBeyond64Bits {
                value: v.to_string(),
            })?;
        Ok((r, op, v))
    }

    /// The string column of the rows `e` names at `level`, under any casts (a dictionary's
    /// strings as Utf8); `None` when `e` is not a column or the column holds no strings.
    fn text_column(&self, e: &Arc<dyn PhysicalExpr>, level: usize) -> Option<Col> {
        let mut e = e.clone();
        while let Some(c) = e.downcast_ref::<CastExpr>() {
            e = c.expr().clone();
        }
        let c = e.downcast_ref::<PColumn>()?;
        let col = self.row_column(level, c.index())?.clone();
        let text = match col.reader.schema().field(col.column).data_type() {
            DataType::Dictionary(_, v) => matches!(**v, DataType::Utf8 | DataType::Utf8View),
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => true,
            _ => false,
        };
        text.then_some(col)
    }

    /// A string test on one column: `col = 'a'`, `col <> 'a'`, ORs of `=` on one column,
    /// `col [NOT] LIKE 'p'`.
    pub(super) fn string_test(
        &self,
        e: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Option<(Col, Test)> {
        let column = |e: &Arc<dyn PhysicalExpr>| self.text_column(e, level);
        let text = |e: &Arc<dyn PhysicalExpr>| -> Option<String> {
            let lit = e.downcast_ref::<Literal>()?;
            scalar_text(lit.value())
        };
        if let Some(list) = e.downcast_ref::<InListExpr>() {
            let col = column(list.expr())?;
            let values = list.list().iter().map(text).collect::<Option<Vec<_>>>()?;
            return Some((
                col,
                Test::StrIn {
                    values,
                    negated: list.negated(),
                },
            ));
        }
        if let Some(like) = e.downcast_ref::<LikeExpr>() {
            if like.case_insensitive() {
                return None;
            }
            let col = column(like.expr())?;
            let pattern = text(like.pattern())?;
            return Some((
                col,
                Test::Like {
                    pattern,
                    negated: like.negated(),
                },
            ));
        }
        let b = e.downcast_ref::<PBinary>()?;
        match b.op() {
            SqlOp::Eq | SqlOp::NotEq => {
                let col = column(b.left())?;
                let v = text(b.right())?;
                Some((
                    col,
                    Test::StrIn {
                        values: vec![v],
                        negated: *b.op() == SqlOp::NotEq,
                    },
                ))
            }
            // a = x OR a = y is a IN (x, y); a <> x AND a <> y is a NOT IN (x, y).
            SqlOp::Or | SqlOp::And => {
                let negated = *b.op() == SqlOp::And;
                let (c1, t1) = self.string_test(b.left(), level)?;
                let (c2, t2) = self.string_test(b.right(), level)?;
                match (t1, t2) {
                    (
                        Test::StrIn {
                            values: mut x,
                            negated: n1,
                        },
                        Test::StrIn {
                            values: y,
                            negated: n2,
                        },
                    ) if c1.src == c2.src && n1 == negated && n2 == negated => {
                        x.extend(y);
                        Some((c1, Test::StrIn { values: x, negated }))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    pub(super) fn group_key(
        &mut self,
        expr: &Arc<dyn PhysicalExpr>,
        level: usize,
    ) -> Result<GroupKey, HostReason> {
        if let Some(col) = expr.downcast_ref::<PColumn>() {
            if let Some(c) = self.row_column(level, col.index()) {
                // A column of build rows (or one an inner join made equal to one) groups by
                // the matched build row: dense, and any type. A left join's column groups by
                // its value (a row without a match has no build row).
                let left = |join: usize| {
                    let joins = self.tasks.last().map(|t| t.joins.as_slice()).unwrap_or(&[]);
                    joins.get(join).is_some_and(|j| j.kind == JoinKind::Left)
                };
                if let Some(Source::Build { join, column }) = c
                    .equals
                    .or(Some(c.src))
                    .filter(|s| matches!(s, Source::Build { join, .. } if !left(*join)))
                {
                    return Ok(GroupKey::Build { join, column });
                }
                let field = c.reader.schema().field(c.column).clone();
                if let (Source::Column(column), DataType::Dictionary(..)) =
                    (c.src, field.data_type())
                {
                    if field.is_nullable() {
                        return Err(HostReason::NullableDictionary);
                    }
                    return Ok(GroupKey::Dictionary { column });
                }
            }
        }
        Ok(GroupKey::Register(self.expr(expr, level)?))
    }

    pub(super) fn aggregate(
        &mut self,
        name: &str,
        args: &[Arc<dyn PhysicalExpr>],
    ) -> Result<Agg, HostReason> {
        let func = match name {
            "sum" => AggFunc::Sum,
            "count" => AggFunc::Count,
            "avg" => AggFunc::Avg,
            "min" => AggFunc::Min,
            "max" => AggFunc::Max,
            other => {
                return Err(HostReason::AggregateFunction {
                    function: other.to_string(),
                })
            }
        };
        let [arg] = args else {
            return Err(HostReason::AggregateArguments {
                arguments: args.len(),
            });
        };
        if func == AggFunc::Count {
            if let Some(lit) = arg.downcast_ref::<Literal>() {
                if lit.value().is_null() {
                    return Err(HostReason::CountOfNull);
                }
                return Ok(Agg {
                    func: AggFunc::CountAll,
                    arg: None,
                    scale: 0,
                });
            }
        }
        // avg (and sum) of a decimal cast to a double: the exact sum, emitted as a double.
        let mut arg = arg.clone();
        if matches!(func, AggFunc::Avg | AggFunc::Sum) {
            if let Some(cast) = arg.downcast_ref::<CastExpr>() {
                if *cast.cast_type() == DataType::Float64 {
                    arg = cast.expr().clone();
                }
            }
        }
        let r = self.expr(&arg, 0)?;
        Ok(Agg {
            func,
            arg: Some(r),
            scale: self.scales[r],
        })
    }
}

/// An integer, date or decimal constant as (scaled integer, scale).
pub(super) fn scaled_literal(v: &ScalarValue) -> Option<(i128, i8)> {
    Some(match v {
        ScalarValue::Int64(Some(v)) => (*v as i128, 0),
        ScalarValue::Int32(Some(v)) => (*v as i128, 0),
        ScalarValue::Date32(Some(v)) => (*v as i128, 0),
        ScalarValue::Decimal128(Some(v), _, s) => (*v, *s),
        _ => return None,
    })
}

/// A string constant's text (dictionary-typed constants included).
pub(super) fn scalar_text(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.clone()),
        ScalarValue::Dictionary(_, inner) => scalar_text(inner),
        _ => None,
    }
}

/// Where task `t` can read `test` over its value `src` as a flag: a flag of the task when the
/// column is its table's, else (through the join) a flag the build task computes and keeps.
pub(super) fn flag_source(
    tasks: &mut [TableTask],
    t: usize,
    src: Source,
    test: Test,
) -> Result<Source, HostReason> {
    match src {
        Source::Column(column) => {
            tasks[t].flags.push(Comparator { column, test });
            Ok(Source::Flag(tasks[t].flags.len() - 1))
        }
        Source::Build { join, .. } if tasks[t].joins.get(join).is_none() => {
            Err(HostReason::Inconsistent {
                detail: format!("join {join} of task {t} does not exist"),
            })
        }
        Source::Build { join, column } => {
            let b = tasks[t].joins[join].build;
            let inner = *tasks[b]
                .keep
                .get(column)
                .ok_or_else(|| HostReason::inconsistent("a kept column beyond the build's"))?;
            let kept = flag_source(tasks, b, inner, test)?;
            tasks[b].keep.push(kept);
            let name = format!("flag{}", tasks[b].keep.len() - 1);
            tasks[b].output.fields.push((name, "Int64".into()));
            Ok(Source::Build {
                join,
                column: tasks[b].keep.len() - 1,
            })
        }
        Source::Flag(_) => Err(HostReason::TestOnFlag),
    }
}
