//! The Row Selector's comparators: loading page values, mask words of comparisons, LIKE.

use super::prepare::Rows;
use crate::arch;
use crate::graph::{CmpOp, Comparator, Test};
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, Decimal128Array, DictionaryArray, StringArray};
use arrow_schema::DataType;
use inpath_table::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Rows of this many at a time go through the transformer and the operator: registers stay
/// in cache and within the memory budget.
pub(super) const BLOCK: usize = 4096;

/// A page of an integer, date or decimal column kept as its bit-packed deltas, unpacked to 32
/// bits and never widened: the selector compares the deltas, and loads add the reference for
/// only the rows they read (a page's values at 64 bits would be twice the bytes, written for
/// every row, where Q6 reads 2 % of them).
pub(super) struct Packed {
    pub(super) deltas: Vec<u32>,
    pub(super) reference: i128,
    /// Every value is within `reference..=reference + span`.
    pub(super) span: u32,
}

impl Packed {
    pub(super) fn new(deltas: Vec<u32>, reference: i128, width: u8) -> Packed {
        let mut span = match width {
            0 => 0,
            w => u32::MAX >> (32 - u32::from(w.min(32))),
        };
        // The width's span can pass i64::MAX where the values do not: then the largest delta.
        if reference + i128::from(span) > i128::from(i64::MAX) {
            span = deltas.iter().copied().max().unwrap_or(0);
        }
        Packed {
            deltas,
            reference,
            span,
        }
    }

    /// The values at `rows` as i64, and a bound on every value's magnitude (from the page's
    /// reference and width, without scanning).
    pub(super) fn load(&self, rows: &Rows, what: &dyn Fn() -> String) -> Result<(Vec<i64>, u64)> {
        let top = self.reference + i128::from(self.span);
        let (Ok(reference), Ok(_)) = (i64::try_from(self.reference), i64::try_from(top)) else {
            return Err(Error::Offload {
                detail: format!("{}: a value is outside the device's 64-bit range", what()),
            });
        };
        let bound = self.reference.unsigned_abs().max(top.unsigned_abs()) as u64;
        let values = match *rows {
            Rows::Range(start, n) => {
                arch::offset_u32::run(&self.deltas[start..start + n], reference)
            }
            Rows::Pick(picks) => arch::gather_offset_u32::run(&self.deltas, picks, reference),
        };
        Ok((values, bound))
    }
}

/// An integer column's values at `rows` as i64 (dates as days, decimals as scaled integers).
pub(super) fn load(array: &ArrayRef, rows: &Rows, what: &dyn Fn() -> String) -> Result<Vec<i64>> {
    Ok(match array.data_type() {
        DataType::Int64 => match *rows {
            Rows::Pick(picks) => {
                arch::gather_i64::run(array.as_primitive::<Int64Type>().values(), picks)
            }
            Rows::Range(..) => rows.gather(array.as_primitive::<Int64Type>().values(), |v| v),
        },
        DataType::Int32 | DataType::Date32 => {
            let values: &[i32] = match array.data_type() {
                DataType::Int32 => array.as_primitive::<Int32Type>().values(),
                _ => array.as_primitive::<Date32Type>().values(),
            };
            match *rows {
                Rows::Pick(picks) => arch::gather_i32::run(values, picks),
                Rows::Range(..) => rows.gather(values, |v| v as i64),
            }
        }
        DataType::Decimal128(..) => {
            let values = array.as_primitive::<Decimal128Type>().values();
            // Narrowed with wrapping casts; one check over the block finds any value beyond
            // 64 bits.
            let out = rows.gather(values, |v| v as i64);
            let fits = match *rows {
                Rows::Range(start, n) => values[start..start + n]
                    .iter()
                    .zip(&out)
                    .all(|(&w, &v)| w == v as i128),
                Rows::Pick(_) => rows
                    .gather(values, |v| v)
                    .iter()
                    .zip(&out)
                    .all(|(&w, &v)| w == v as i128),
            };
            if !fits {
                return Err(Error::Offload {
                    detail: format!("{}: a decimal is outside the device's 64-bit range", what()),
                });
            }
            out
        }
        other => {
            return Err(Error::Offload {
                detail: format!("{}: a {other} column is not an integer column", what()),
            })
        }
    })
}

/// Mask words: bit i of word i/64 is row i.
pub(super) fn words_for(rows: usize) -> usize {
    rows.div_ceil(64)
}

pub(super) fn pack_bits(rows: usize, mut test: impl FnMut(usize) -> bool) -> Vec<u64> {
    let mut words = vec![0u64; words_for(rows)];
    for (w, word) in words.iter_mut().enumerate() {
        let base = w * 64;
        let n = (rows - base).min(64);
        let mut bits = 0u64;
        for j in 0..n {
            bits |= (test(base + j) as u64) << j;
        }
        *word = bits;
    }
    words
}

/// The kernels' number for an operator.
pub(super) fn op_code(op: CmpOp) -> u8 {
    match op {
        CmpOp::Eq => arch::EQ,
        CmpOp::Ne => arch::NE,
        CmpOp::Lt => arch::LT,
        CmpOp::Le => arch::LE,
        CmpOp::Gt => arch::GT,
        CmpOp::Ge => arch::GE,
    }
}

/// Mask words of `values[i] op value` by `kernel` (an `arch` comparison). A constant outside
/// the type's range answers every row alike.
pub(super) fn cmp_words<T>(
    values: &[T],
    op: CmpOp,
    value: i128,
    kernel: fn(&[T], u8, T) -> Vec<u64>,
) -> Vec<u64>
where
    T: Copy + TryFrom<i128> + Into<i128>,
{
    match T::try_from(value) {
        Ok(c) => kernel(values, op_code(op), c),
        // Every row compares the same way with a constant beyond the type's range.
        Err(_) => {
            let all = match values.first() {
                Some(&v) => op.holds(v.into(), value),
                None => false,
            };
            pack_bits(values.len(), |_| all)
        }
    }
}

/// A SQL LIKE match (`%` any run, `_` one character; no escape).
pub(super) fn like(text: &str, pattern: &str) -> bool {
    if text.is_ascii() && pattern.is_ascii() {
        return like_units(text.as_bytes(), pattern.as_bytes(), b'%', b'_');
    }
    let t: Vec<char> = text.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    like_units(&t, &p, '%', '_')
}

/// SQL LIKE over units (bytes of ASCII text, or chars): `any` matches any run, `one` one unit;
/// backtracking to the last `any` only, linear for patterns of one `any`.
pub(super) fn like_units<T: PartialEq + Copy>(t: &[T], p: &[T], any: T, one: T) -> bool {
    let (mut ti, mut pi) = (0usize, 0usize);
    let (mut star, mut mark) = (None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == one || (p[pi] != any && p[pi] == t[ti])) {
            ti += 1;
            pi += 1;
        } else if pi < p.len() && p[pi] == any {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == any {
        pi += 1;
    }
    pi == p.len()
}

/// A LIKE pattern read once for a page: the common shapes (`ab%`, `%ab`, `%ab%`, `ab`, no `_`)
/// as plain string tests, any other by the general matcher.
pub(super) enum LikeMatcher<'p> {
    Exact(&'p str),
    Prefix(&'p str),
    Suffix(&'p str),
    Contains(&'p str),
    /// Literal parts between `%`s, found in order (TPC-H Q13's `%special%requests%`): an
    /// anchored prefix and suffix (empty where the pattern starts or ends with `%`) and the
    /// parts between, each searched for after the one before.
    Parts {
        prefix: &'p str,
        middle: Vec<memchr::memmem::Finder<'p>>,
        suffix: &'p str,
    },
    General(&'p str),
}

impl<'p> LikeMatcher<'p> {
    pub(super) fn new(pattern: &'p str) -> LikeMatcher<'p> {
        if pattern.contains('_') {
            return LikeMatcher::General(pattern);
        }
        let inner = pattern.trim_matches('%');
        if inner.contains('%') {
            if pattern.contains('\\') {
                return LikeMatcher::General(pattern);
            }
            let parts: Vec<&str> = pattern.split('%').collect();
            let last = parts.len() - 1;
            return LikeMatcher::Parts {
                prefix: parts[0],
                middle: parts[1..last]
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| memchr::memmem::Finder::new(p.as_bytes()))
                    .collect(),
                suffix: parts[last],
            };
        }
        match (pattern.starts_with('%'), pattern.ends_with('%')) {
            (false, false) => LikeMatcher::Exact(inner),
            (false, true) => LikeMatcher::Prefix(inner),
            (true, false) => LikeMatcher::Suffix(inner),
            (true, true) => LikeMatcher::Contains(inner),
        }
    }

    pub(super) fn matches(&self, s: &str) -> bool {
        match *self {
            LikeMatcher::Exact(v) => s == v,
            LikeMatcher::Prefix(v) => s.starts_with(v),
            LikeMatcher::Suffix(v) => s.ends_with(v),
            LikeMatcher::Contains(v) => s.contains(v),
            LikeMatcher::Parts {
                prefix,
                ref middle,
                suffix,
            } => {
                let b = s.as_bytes();
                let Some(end) = b.len().checked_sub(suffix.len()) else {
                    return false;
                };
                let mut at = prefix.len();
                if at > end || !b.starts_with(prefix.as_bytes()) || !b.ends_with(suffix.as_bytes())
                {
                    return false;
                }
                for f in middle {
                    match f.find(&b[at..end]) {
                        Some(i) => at += i + f.needle().len(),
                        None => return false,
                    }
                }
                true
            }
            LikeMatcher::General(p) => like(s, p),
        }
    }
}

/// The mask words of one comparator over a page column.
/// Mask words of a comparator over a page's columns.
pub(super) fn comparator_or_columns(
    arrays: &HashMap<usize, ArrayRef>,
    cmp: &Comparator,
    what: &str,
) -> Result<Vec<u64>> {
    match cmp.test {
        Test::Columns { op, other } => {
            columns_words(&arrays[&cmp.column], &arrays[&other], op, what)
        }
        _ => comparator_words(&arrays[&cmp.column], &cmp.test, what),
    }
}

/// How `reference + delta op value` is answered over deltas in [0, 2^32): by the comparison
/// kernel in the deltas' own 32 bits, `Ok((operator, value - reference))`, or alike for every
/// row, `Err(answer)`, when `value - reference` is outside [0, 2^32) (clamped to [-1, 2^32]
/// it keeps every operator's answer).
pub(super) fn delta_test(
    reference: i128,
    op: CmpOp,
    value: i128,
) -> std::result::Result<(u8, u32), bool> {
    let t = value - reference;
    match u32::try_from(t) {
        Ok(c) => Ok((op_code(op), c)),
        Err(_) => Err(op.holds(0i128, t.clamp(-1, 1 << 32))),
    }
}

/// A flag's values (0 or 1) at `rows`.
pub(super) fn flag_values(words: &[u64], rows: &Rows) -> Vec<i64> {
    let bit = |r: usize| ((words[r / 64] >> (r % 64)) & 1) as i64;
    match *rows {
        Rows::Range(start, n) => (start..start + n).map(bit).collect(),
        Rows::Pick(p) => p.iter().map(|&r| bit(r as usize)).collect(),
    }
}

/// Mask words of `a op b` over two columns of one type (a null on either side fails).
pub(super) fn columns_words(a: &ArrayRef, b: &ArrayRef, op: CmpOp, what: &str) -> Result<Vec<u64>> {
    fn words<T: arrow_array::ArrowPrimitiveType>(a: &ArrayRef, b: &ArrayRef, op: CmpOp) -> Vec<u64>
    where
        T::Native: PartialOrd,
    {
        let (x, y) = (
            a.as_primitive::<T>().values(),
            b.as_primitive::<T>().values(),
        );
        // One loop per operator, 64 pairs to a word: no operator chosen per row.
        fn pairs<V: Copy>(x: &[V], y: &[V], holds: impl Fn(V, V) -> bool) -> Vec<u64> {
            x.chunks(64)
                .zip(y.chunks(64))
                .map(|(xs, ys)| {
                    xs.iter()
                        .zip(ys)
                        .enumerate()
                        .fold(0u64, |w, (j, (&a, &b))| w | (u64::from(holds(a, b)) << j))
                })
                .collect()
        }
        match op {
            CmpOp::Eq => pairs(x, y, |a, b| a == b),
            CmpOp::Ne => pairs(x, y, |a, b| a != b),
            CmpOp::Lt => pairs(x, y, |a, b| a < b),
            CmpOp::Le => pairs(x, y, |a, b| a <= b),
            CmpOp::Gt => pairs(x, y, |a, b| a > b),
            CmpOp::Ge => pairs(x, y, |a, b| a >= b),
        }
    }
    // A decimal page read narrow (Int64) against one that is not: both as 128-bit integers.
    let wide = |x: &ArrayRef| -> Option<ArrayRef> {
        match x.data_type() {
            DataType::Int64 => Some(Arc::new(Decimal128Array::new(
                x.as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .map(|&v| v as i128)
                    .collect(),
                x.logical_nulls(),
            ))),
            DataType::Decimal128(..) => Some(Arc::new(Decimal128Array::new(
                x.as_primitive::<Decimal128Type>().values().clone(),
                x.logical_nulls(),
            ))),
            _ => None,
        }
    };
    if a.data_type() != b.data_type() {
        if let (Some(x), Some(y)) = (wide(a), wide(b)) {
            return columns_words(&x, &y, op, what);
        }
    }
    if a.data_type() != b.data_type() || a.len() != b.len() {
        return Err(Error::Offload {
            detail: format!(
                "{what}: compared with a column of another type or length ({} against {})",
                a.data_type(),
                b.data_type()
            ),
        });
    }
    let mut out = match a.data_type() {
        DataType::Int64 => words::<Int64Type>(a, b, op),
        DataType::Int32 => words::<Int32Type>(a, b, op),
        DataType::Date32 => words::<Date32Type>(a, b, op),
        DataType::Decimal128(..) => words::<Decimal128Type>(a, b, op),
        other => {
            return Err(Error::Offload {
                detail: format!("{what}: a column comparison on a {other} column"),
            })
        }
    };
    for nulls in [a.logical_nulls(), b.logical_nulls()].into_iter().flatten() {
        let valid = pack_bits(a.len(), |i| nulls.is_valid(i));
        for (w, v) in out.iter_mut().zip(valid) {
            *w &= v;
        }
    }
    Ok(out)
}

pub(super) fn comparator_words(array: &ArrayRef, test: &Test, what: &str) -> Result<Vec<u64>> {
    let rows = array.len();
    let matcher = match test {
        Test::Like { pattern, .. } => Some(LikeMatcher::new(pattern)),
        _ => None,
    };
    let string_test = |s: &str| -> bool {
        match (test, &matcher) {
            (Test::StrIn { values, negated }, _) => values.iter().any(|v| v == s) != *negated,
            (Test::Like { negated, .. }, Some(m)) => m.matches(s) != *negated,
            _ => false,
        }
    };
    let mut words = match (test, array.data_type()) {
        (Test::Int { op, value }, dt) => {
            // On the column's own values, the operator chosen outside the loop, so that each
            // comparison loop vectorises.
            let value = *value;
            match dt {
                DataType::Int64 => cmp_words(
                    array.as_primitive::<Int64Type>().values(),
                    *op,
                    value,
                    arch::cmp_i64::run,
                ),
                DataType::Int32 => cmp_words(
                    array.as_primitive::<Int32Type>().values(),
                    *op,
                    value,
                    arch::cmp_i32::run,
                ),
                DataType::Date32 => cmp_words(
                    array.as_primitive::<Date32Type>().values(),
                    *op,
                    value,
                    arch::cmp_i32::run,
                ),
                DataType::Decimal128(..) => cmp_words(
                    array.as_primitive::<Decimal128Type>().values(),
                    *op,
                    value,
                    arch::cmp_generic,
                ),
                other => {
                    return Err(Error::Offload {
                        detail: format!("{what}: a {other} column is not an integer column"),
                    })
                }
            }
        }
        (_, DataType::Dictionary(..)) => {
            let dict = array
                .as_any()
                .downcast_ref::<DictionaryArray<Int32Type>>()
                .ok_or_else(|| Error::Offload {
                    detail: format!("{what}: a dictionary column without Int32 codes"),
                })?;
            let values = dict.values().as_string::<i32>();
            let pass: Vec<bool> = (0..values.len())
                .map(|i| !values.is_null(i) && string_test(values.value(i)))
                .collect();
            let codes = dict.keys().values();
            pack_bits(rows, |i| {
                pass.get(codes[i] as usize).copied().unwrap_or(false)
            })
        }
        (_, DataType::Utf8) => {
            let s: &StringArray = array.as_string::<i32>();
            pack_bits(rows, |i| string_test(s.value(i)))
        }
        (_, other) => {
            return Err(Error::Offload {
                detail: format!("{what}: a string test on a {other} column"),
            })
        }
    };
    if let Some(nulls) = array.logical_nulls() {
        let valid = pack_bits(rows, |i| nulls.is_valid(i));
        for (w, v) in words.iter_mut().zip(valid) {
            *w &= v;
        }
    }
    Ok(words)
}
