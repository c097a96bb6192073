//! The Row Transformer: a program run over the selected rows, a block at a time.

use super::compare::{flag_values, load};
use super::exact::{checked_op, no_overflow};
use super::lane::{Lane, Registers};
use super::prepare::Rows;
use crate::arch;
use crate::graph::{pack_prefix, GroupKey, JoinKind, Op, MAX_PREFIX_BYTES};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use inpath_table::error::{Error, Result};
use std::borrow::Cow;
use std::collections::HashMap;

impl<'a> Lane<'a> {
    /// Runs the Row Transformer over the selected rows, vector at a time.
    pub(super) fn transform<'p>(
        &self,
        arrays: &'p HashMap<usize, ArrayRef>,
        rows: &Rows,
        matched: &[&[u32]],
        n: usize,
        column_name: &dyn Fn(usize) -> String,
    ) -> Result<Registers<'p>> {
        let overflow = |i: usize| Error::Offload {
            detail: format!(
                "transformer instruction {i} of table {} overflowed 64 bits; the query runs \
                 on the host without offload",
                self.plan.task.table
            ),
        };
        let ops = &self.plan.task.transformer.ops;
        let mut regs: Vec<Cow<'p, [i64]>> = Vec::with_capacity(ops.len());
        // Per register, a bound on its values' magnitudes: loads are scanned once, computed
        // registers bounded from their operands' bounds, so an operation that cannot
        // overflow runs as a plain vector loop without scanning its operands again.
        let mut bounds: Vec<u64> = Vec::with_capacity(ops.len());
        // Registers that hold one value on every row.
        let mut consts: Vec<Option<i64>> = Vec::with_capacity(ops.len());
        let fits = |b: u64| b <= i64::MAX as u64;
        for (i, op) in ops.iter().enumerate() {
            let (out, bound, constant): (Cow<'p, [i64]>, u64, Option<i64>) = match *op {
                Op::Load { column } if self.packed.contains_key(&column) => {
                    let (values, bound) =
                        self.packed[&column].load(rows, &|| column_name(column))?;
                    (Cow::Owned(values), bound, None)
                }
                Op::Load { column } => {
                    let array = &arrays[&column];
                    if array.null_count() > 0 {
                        return Err(Error::Offload {
                            detail: format!(
                                "{} holds nulls; the transformer takes only non-null columns",
                                column_name(column)
                            ),
                        });
                    }
                    // A run of 64-bit values is read where it lies. (Unselected rows of a
                    // masked block compute too: the bounds cover them, and an operation
                    // whose bound overflows zeroes them first.)
                    let values = match (array.data_type(), rows) {
                        (DataType::Int64, &Rows::Range(start, len)) => Cow::Borrowed(
                            &array.as_primitive::<Int64Type>().values()[start..start + len],
                        ),
                        _ => Cow::Owned(load(array, rows, &|| column_name(column))?),
                    };
                    let bound = arch::max_abs::run(&values);
                    (values, bound, None)
                }
                Op::Prefix { column, chars } => {
                    // An integer column is held packed, not as an array.
                    let array = arrays.get(&column).ok_or_else(|| Error::Offload {
                        detail: format!(
                            "{}: a prefix of an integer column; strings only",
                            column_name(column)
                        ),
                    })?;
                    let values = prefixes(array, rows, chars, &|| column_name(column))?;
                    let bound = arch::max_abs::run(&values);
                    (Cow::Owned(values), bound, None)
                }
                Op::Flag { flag } => (
                    Cow::Owned(flag_values(&self.flag_words[flag], rows)),
                    1,
                    None,
                ),
                Op::Fetch { join, column } => {
                    let ints = self.plan.builds[join].ints(column)?;
                    let values = match self.plan.task.joins[join].kind {
                        // A left join's row without a match reads 0.
                        JoinKind::Left => ints.gather_or_zero(matched[join]),
                        _ => ints.gather(matched[join]),
                    };
                    let bound = arch::max_abs::run(&values);
                    (Cow::Owned(values), bound, None)
                }
                // Constants are held as values, filled out only where the operator reads them.
                Op::Const { value } => (Cow::Owned(Vec::new()), value.unsigned_abs(), Some(value)),
                Op::Scale { src, pow } => {
                    let f = 10i64.checked_pow(pow).ok_or_else(|| overflow(i))?;
                    let bound = bounds[src].saturating_mul(f as u64);
                    match consts[src] {
                        Some(v) => {
                            let v = v.checked_mul(f).ok_or_else(|| overflow(i))?;
                            (Cow::Owned(Vec::new()), v.unsigned_abs(), Some(v))
                        }
                        None if fits(bound) => (
                            Cow::Owned(regs[src].iter().map(|p| p.wrapping_mul(f)).collect()),
                            bound,
                            None,
                        ),
                        None => {
                            let mut of = false;
                            let out: Vec<i64> = self
                                .selected_only(&regs[src])
                                .iter()
                                .map(|p| {
                                    let (r, o) = p.overflowing_mul(f);
                                    of |= o;
                                    r
                                })
                                .collect();
                            if of {
                                return Err(overflow(i));
                            }
                            let bound = arch::max_abs::run(&out);
                            (Cow::Owned(out), bound, None)
                        }
                    }
                }
                Op::Add(a, b) | Op::Sub(a, b) | Op::Mul(a, b) => {
                    let code = match op {
                        Op::Add(..) => 0,
                        Op::Sub(..) => 1,
                        _ => 2,
                    };
                    let bound = if code == 2 {
                        bounds[a].saturating_mul(bounds[b])
                    } else {
                        bounds[a].saturating_add(bounds[b])
                    };
                    if let (Some(x), Some(y)) = (consts[a], consts[b]) {
                        let v = match code {
                            0 => x.checked_add(y),
                            1 => x.checked_sub(y),
                            _ => x.checked_mul(y),
                        }
                        .ok_or_else(|| overflow(i))?;
                        (Cow::Owned(Vec::new()), v.unsigned_abs(), Some(v))
                    } else if fits(bound) {
                        // Operands within i32 multiply in one 32-bit instruction.
                        let within_i32 = |r: usize| bounds[r] <= i32::MAX as u64;
                        let code = if code == 2 && within_i32(a) && within_i32(b) {
                            arch::MUL_I32
                        } else {
                            code
                        };
                        let out = match (consts[a], consts[b]) {
                            // A constant operand is broadcast, never filled out.
                            (Some(x), _) => arch::const_op::run(code, x, &regs[b], true),
                            (_, Some(y)) => arch::const_op::run(code, y, &regs[a], false),
                            _ => arch::wrapping_op::run(code, &regs[a], &regs[b]),
                        };
                        (Cow::Owned(out), bound, None)
                    } else {
                        let (x, y) = (filled(&regs, &consts, a, n), filled(&regs, &consts, b, n));
                        let (x, y) = (self.selected_only(&x), self.selected_only(&y));
                        let out = if no_overflow(op, &x, &y) {
                            // The bounds were loose; the operands' own magnitudes are not.
                            arch::wrapping_op::run(code, &x, &y)
                        } else {
                            checked_op(code, &x, &y).ok_or_else(|| overflow(i))?
                        };
                        let bound = arch::max_abs::run(&out);
                        (Cow::Owned(out), bound, None)
                    }
                }
                Op::Year { src } => {
                    let out: Vec<i64> = filled(&regs, &consts, src, n)
                        .iter()
                        .map(|&d| year_of_days(d))
                        .collect();
                    let bound = arch::max_abs::run(&out);
                    (Cow::Owned(out), bound, None)
                }
                Op::Select {
                    test,
                    op,
                    value,
                    then,
                    otherwise,
                } => (
                    Cow::Owned(
                        filled(&regs, &consts, test, n)
                            .iter()
                            .zip(
                                filled(&regs, &consts, then, n)
                                    .iter()
                                    .zip(filled(&regs, &consts, otherwise, n).iter()),
                            )
                            .map(|(t, (a, b))| if op.holds(*t, value) { *a } else { *b })
                            .collect(),
                    ),
                    bounds[then].max(bounds[otherwise]),
                    None,
                ),
            };
            regs.push(out);
            bounds.push(bound);
            consts.push(constant);
        }
        // The constants the operator reads (an aggregate's argument, a group key, the
        // filter), filled out.
        let plan = self.plan;
        let read = plan
            .aggs()
            .iter()
            .filter_map(|a| a.arg)
            .chain(plan.keys().iter().filter_map(|k| match *k {
                GroupKey::Register(r) => Some(r),
                _ => None,
            }))
            .chain(plan.task.filter);
        for r in read {
            if let (Some(v), Some(reg)) = (consts.get(r).copied().flatten(), regs.get_mut(r)) {
                if reg.len() != n {
                    *reg = Cow::Owned(vec![v; n]);
                }
            }
        }
        Ok(Registers {
            values: regs,
            bounds,
        })
    }
}

/// A string column's prefixes of `chars` characters at `rows`, packed ([`pack_prefix`]).
/// The device declines a prefix it cannot pack; a null is an error, as for loads.
fn prefixes(
    array: &ArrayRef,
    rows: &Rows,
    chars: u32,
    what: &dyn Fn() -> String,
) -> Result<Vec<i64>> {
    if array.null_count() > 0 {
        return Err(Error::Offload {
            detail: format!(
                "{} holds nulls; the transformer takes only non-null columns",
                what()
            ),
        });
    }
    let pack = |s: &str| {
        pack_prefix(s, chars).ok_or_else(|| Error::DeviceDeclined {
            memory: false,
            detail: format!(
                "{}: the first {chars} characters of {s:?} take more than {MAX_PREFIX_BYTES} bytes",
                what()
            ),
        })
    };
    let at = rows.indices();
    match array.data_type() {
        DataType::Utf8 => at
            .iter()
            .map(|&i| pack(array.as_string::<i32>().value(i as usize)))
            .collect(),
        DataType::LargeUtf8 => at
            .iter()
            .map(|&i| pack(array.as_string::<i64>().value(i as usize)))
            .collect(),
        DataType::Utf8View => at
            .iter()
            .map(|&i| pack(array.as_string_view().value(i as usize)))
            .collect(),
        // A dictionary's strings packed once each, read by code.
        DataType::Dictionary(..) => {
            let d = array.as_any_dictionary();
            let values = d.values();
            let packed = prefixes(values, &Rows::Range(0, values.len()), chars, what)?;
            let codes = d.normalized_keys();
            Ok(at.iter().map(|&i| packed[codes[i as usize]]).collect())
        }
        other => Err(Error::Offload {
            detail: format!("{}: a prefix of a {other} column; strings only", what()),
        }),
    }
}

/// The proleptic Gregorian year of a day number (days since 1970-01-01): the civil-from-days
/// calculation in 400-year eras, exact for every i64 date a Date32 can hold.
pub(super) fn year_of_days(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let january_or_february = mp >= 10;
    yoe + era * 400 + i64::from(january_or_february)
}

/// Register `r` as `n` values: a constant filled out.
pub(super) fn filled<'a>(
    regs: &'a [Cow<'_, [i64]>],
    consts: &[Option<i64>],
    r: usize,
    n: usize,
) -> Cow<'a, [i64]> {
    match consts[r] {
        Some(v) if regs[r].len() != n => Cow::Owned(vec![v; n]),
        _ => Cow::Borrowed(&regs[r]),
    }
}
