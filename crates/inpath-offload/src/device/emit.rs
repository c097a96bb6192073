//! Emitting results: the group table and kept rows as Arrow batches of the task's schema.

use super::finish::first_rows;
use super::groups::{merge_by_values, merge_groups, Groups, MulHasher};
use super::prepare::{Emit, Identity, KeepAs, Prepared};
use super::stats::Counters;
use crate::graph::{unpack_prefix, AggFunc, GroupKey, Op, Order, SortKey, Source};
use crate::join::{read_places, Ints, Kept};
use arrow_array::types::Int32Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array,
    Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use arrow_row::{Row, RowConverter, SortField};
use arrow_schema::{DataType, Field};
use inpath_table::error::{Error, Result};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

impl Prepared {
    /// Whether every group of the table is a group of the SQL, not a part of one: each build
    /// row the groups are told apart by is named by unique build keys that are among the
    /// group keys, or is found from such a row through unique keys (customer's row names its
    /// nation's). Then lanes' tables merged give every group whole, and TOPK may cut.
    pub(super) fn groups_exact(&self) -> bool {
        let keys = self.keys();
        let mut exact: Vec<bool> = self
            .identities
            .iter()
            .map(|id| match *id {
                Identity::Dictionary(_) | Identity::Register(_) => true,
                Identity::BuildRow(j) => {
                    let join = &self.task.joins[j];
                    self.builds[j].unique_keys()
                        && join.build_keys.iter().all(|&bk| {
                            keys.contains(&GroupKey::Build {
                                join: j,
                                column: bk,
                            })
                        })
                }
            })
            .collect();
        // Rows found through another exact row's columns, to a fixpoint.
        loop {
            let mut changed = false;
            for (i, id) in self.identities.iter().enumerate() {
                let Identity::BuildRow(j) = *id else { continue };
                if exact[i] || !self.builds[j].unique_keys() {
                    continue;
                }
                let through_exact = self.task.joins[j].probe_keys.iter().all(|k| match *k {
                    Source::Build { join, .. } => self
                        .identities
                        .iter()
                        .position(|&x| x == Identity::BuildRow(join))
                        .is_some_and(|p| exact[p]),
                    _ => false,
                });
                if through_exact {
                    exact[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        exact.iter().all(|&e| e)
    }

    /// An output column's values per group as exact integers ordered as the emitted values
    /// are (a null where the emitted value is null), or none for columns the device does not
    /// order by (strings, averages, sums emitted as floats).
    pub(super) fn sort_values(&self, g: &Groups, column: usize) -> Option<Vec<Option<i128>>> {
        let ty = self.schema.fields().get(column)?.data_type();
        match *self.emit.get(column)? {
            Emit::Key(k) => {
                let values = &g.keys[self.key_identity[k]];
                match self.keys()[k] {
                    GroupKey::Register(_) => {
                        Some(values.iter().map(|&v| Some(v as i128)).collect())
                    }
                    GroupKey::Build { join, column } => match &self.builds[join].columns[column] {
                        Kept::Int(v) => Some(
                            values
                                .iter()
                                .map(|&r| Some(v.get(r as usize) as i128))
                                .collect(),
                        ),
                        Kept::Late { .. } => None,
                    },
                    GroupKey::Dictionary { .. } => None,
                }
            }
            Emit::State(a, _) => {
                let agg = &self.aggs()[a];
                let (acc, count) = (&g.acc[a], &g.count[a]);
                match agg.func {
                    AggFunc::Count | AggFunc::CountAll => {
                        Some(count.iter().map(|&c| Some(c as i128)).collect())
                    }
                    AggFunc::Sum if *ty != DataType::Float64 => Some(
                        (0..g.len)
                            .map(|i| (count[i] > 0).then_some(acc[i]))
                            .collect(),
                    ),
                    AggFunc::Min | AggFunc::Max => Some(
                        (0..g.len)
                            .map(|i| (count[i] > 0).then_some(acc[i]))
                            .collect(),
                    ),
                    _ => None,
                }
            }
        }
    }

    /// SORT and TOPK over the lanes' merged table: the groups ordered by the leading sort
    /// keys the device can order by, and with a limit (when the groups are exact and none
    /// went to the host early) only those that can be among the first `limit`: every group
    /// tied with the last one on those keys stays, for the host's sort to decide.
    pub(super) fn order_groups(&self, g: Groups, order: &Order, spilled: bool) -> Result<Groups> {
        // With a limit, only whole groups may be cut: those told apart by build rows are
        // merged by their values first (none may have gone to the host early).
        let cut = order.limit.is_some_and(|k| k < g.len) && !spilled;
        let g = if cut && !self.groups_exact() {
            self.regroup(g)?
        } else {
            g
        };
        let values: Vec<(Vec<Option<i128>>, SortKey)> = order
            .keys
            .iter()
            .map_while(|k| self.sort_values(&g, k.column).map(|v| (v, *k)))
            .collect();
        if values.is_empty() {
            return Ok(g);
        }
        let cmp = |a: &u32, b: &u32| -> std::cmp::Ordering {
            for (v, key) in &values {
                let (x, y) = (v[*a as usize], v[*b as usize]);
                let o = match (x, y) {
                    (None, None) => std::cmp::Ordering::Equal,
                    (None, Some(_)) if key.nulls_first => std::cmp::Ordering::Less,
                    (None, Some(_)) => std::cmp::Ordering::Greater,
                    (Some(_), None) if key.nulls_first => std::cmp::Ordering::Greater,
                    (Some(_), None) => std::cmp::Ordering::Less,
                    (Some(x), Some(y)) if key.descending => y.cmp(&x),
                    (Some(x), Some(y)) => x.cmp(&y),
                };
                if o.is_ne() {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        };
        let mut picks: Vec<u32> = (0..g.len as u32).collect();
        match order.limit {
            Some(k) if k < g.len && cut => {
                picks.select_nth_unstable_by(k - 1, cmp);
                let last = picks[k - 1];
                picks.retain(|p| cmp(p, &last).is_le());
            }
            _ => {}
        }
        picks.sort_by(cmp);
        Ok(g.subset(&picks))
    }

    /// Group key `k`'s values per group, as the output column `field` holds them.
    pub(super) fn key_array(&self, g: &Groups, k: usize, field: &Field) -> Result<ArrayRef> {
        let bad = |detail: String| Error::Offload { detail };
        let ty = field.data_type();
        let id = self.key_identity[k];
        let values = &g.keys[id];
        Ok(match (&self.keys()[k], ty) {
            (GroupKey::Dictionary { .. }, DataType::Dictionary(..)) => {
                let dict = g.dictionaries[id]
                    .clone()
                    .ok_or_else(|| bad("a dictionary key with no dictionary".into()))?;
                let codes = Int32Array::from_iter_values(values.iter().map(|&c| c as i32));
                Arc::new(
                    DictionaryArray::<Int32Type>::try_new(codes, dict)
                        .map_err(|e| bad(format!("group key {}: {e}", field.name())))?,
                )
            }
            (GroupKey::Dictionary { .. }, _) => {
                let dict = g.dictionaries[id]
                    .clone()
                    .ok_or_else(|| bad("a dictionary key with no dictionary".into()))?;
                let codes = Int32Array::from_iter_values(values.iter().map(|&c| c as i32));
                let taken = arrow_select_take(&dict, &codes)?;
                if taken.data_type() != ty {
                    return Err(bad(format!(
                        "group key {} is {}, declared {ty}",
                        field.name(),
                        taken.data_type()
                    )));
                }
                taken
            }
            // A string's packed prefix, unpacked.
            (&GroupKey::Register(r), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => {
                if !matches!(self.task.transformer.ops.get(r), Some(Op::Prefix { .. })) {
                    return Err(bad(format!(
                        "group key {} is {ty} but register {r} is not a string's prefix",
                        field.name()
                    )));
                }
                let strings = values
                    .iter()
                    .map(|&v| {
                        unpack_prefix(v).ok_or_else(|| {
                            bad(format!(
                                "group key {}: {v} is not a packed prefix",
                                field.name()
                            ))
                        })
                    })
                    .collect::<Result<Vec<String>>>()?;
                let utf8: ArrayRef = Arc::new(StringArray::from(strings));
                arrow_cast::cast(&utf8, ty)
                    .map_err(|e| bad(format!("group key {}: {e}", field.name())))?
            }
            (GroupKey::Register(_), _) => {
                int_array(values.iter().map(|&v| Some(v as i128)), ty, field.name())?
            }
            (GroupKey::Build { join, column }, _) => {
                let rows: Vec<u32> = values.iter().map(|&r| r as u32).collect();
                match &self.builds[*join].columns[*column] {
                    Kept::Int(v) => int_array(
                        rows.iter().map(|&r| Some(v.get(r as usize) as i128)),
                        ty,
                        field.name(),
                    )?,
                    &Kept::Late { column, places } => {
                        let p = &self.builds[*join].places[places];
                        let at: Vec<u64> = rows.iter().map(|&r| p.rows[r as usize]).collect();
                        let taken = read_places(&p.reader, column, &at)?;
                        if taken.data_type() == ty {
                            taken
                        } else {
                            arrow_cast::cast(&taken, ty)
                                .map_err(|e| bad(format!("group key {}: {e}", field.name())))?
                        }
                    }
                }
            }
        })
    }

    /// The table with groups that differ only in the build rows they were told apart by
    /// merged: one group per distinct tuple of key values, as the host's aggregate sees them
    /// (late strings read back). Then every group is a whole group of the SQL.
    pub(super) fn regroup(&self, g: Groups) -> Result<Groups> {
        let keys = self.keys();
        // A key's value per group where the table holds it (a dictionary code, a register, a
        // build column kept by value), or the place of its row where the value is a late
        // string, never read here.
        let late = |k: usize| match keys[k] {
            GroupKey::Build { join, column } => match &self.builds[join].columns[column] {
                &Kept::Late { places, .. } => Some(&self.builds[join].places[places]),
                Kept::Int(_) => None,
            },
            _ => None,
        };
        let value = |g: &Groups, k: usize, i: usize| -> i64 {
            let v = g.keys[self.key_identity[k]][i];
            match (&keys[k], late(k)) {
                (_, Some(p)) => p.rows[v as usize] as i64,
                (&GroupKey::Build { join, column }, None) => {
                    match &self.builds[join].columns[column] {
                        Kept::Int(values) => values.get(v as usize),
                        Kept::Late { .. } => v,
                    }
                }
                _ => v,
            }
        };
        // Groups whose keys are the same values or the same rows are one group.
        let g = merge_by_values(g, self.aggs(), keys.len(), value);
        // Others may still share every value, where late strings at different rows are equal:
        // only groups that share all the other keys need their strings read back.
        let late_keys: Vec<usize> = (0..keys.len()).filter(|&k| late(k).is_some()).collect();
        if late_keys.is_empty() {
            return Ok(g);
        }
        let mut bucket: HashMap<Vec<i64>, u32, BuildHasherDefault<MulHasher>> = HashMap::default();
        let coarse = |i: usize| -> Vec<i64> {
            (0..keys.len())
                .filter(|k| !late_keys.contains(k))
                .map(|k| value(&g, k, i))
                .collect()
        };
        for i in 0..g.len {
            *bucket.entry(coarse(i)).or_insert(0) += 1;
        }
        let shared: Vec<u32> = (0..g.len as u32)
            .filter(|&i| bucket[&coarse(i as usize)] > 1)
            .collect();
        if shared.is_empty() {
            return Ok(g);
        }
        let bad = |e: arrow_schema::ArrowError| Error::Offload {
            detail: format!("regrouping the device's groups: {e}"),
        };
        let sub = g.subset(&shared);
        let fields = self.schema.fields();
        let arrays: Vec<ArrayRef> = (0..keys.len())
            .map(|k| self.key_array(&sub, k, &fields[k]))
            .collect::<Result<_>>()?;
        let converter = RowConverter::new(
            arrays
                .iter()
                .map(|a| SortField::new(a.data_type().clone()))
                .collect(),
        )
        .map_err(bad)?;
        let rows = converter.convert_columns(&arrays).map_err(bad)?;
        // Each group's first group with the same values.
        let mut canon: Vec<u32> = (0..g.len as u32).collect();
        let mut first: HashMap<Row<'_>, u32> = HashMap::with_capacity(shared.len());
        for (j, &i) in shared.iter().enumerate() {
            canon[i as usize] = *first.entry(rows.row(j)).or_insert(i);
        }
        Ok(merge_groups(g, self.aggs(), |_, i| canon[i]))
    }

    /// A NOP task's kept rows as a batch of its output schema (its kept columns), ordered by
    /// `order`'s leading keys kept by value and cut to its limit, rows tied with the last one
    /// kept included (a later key kept late is left to the host's sort); none without rows.
    pub(super) fn emit_rows(
        &self,
        ints: &[Ints],
        places: &[Vec<u64>],
        order: Option<&Order>,
        counters: &Counters,
    ) -> Result<Option<RecordBatch>> {
        let n = ints
            .iter()
            .map(Ints::len)
            .chain(places.iter().map(Vec::len))
            .max()
            .unwrap_or(0);
        if n == 0 {
            return Ok(None);
        }
        let picks = match order {
            Some(order) => {
                let picks = first_rows(&self.order_keys(ints, order), n, order.limit);
                Counters::add(&counters.groups_cut, (n - picks.len()) as u64);
                picks
            }
            None => (0..n as u32).collect(),
        };
        let bad = |detail: String| Error::Offload { detail };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.keep_as.len());
        for (i, field) in self.schema.fields().iter().enumerate() {
            let ty = field.data_type();
            let array = match self.keep_as.get(i) {
                Some(KeepAs::Int(_)) => int_array(
                    picks.iter().map(|&r| Some(ints[i].get(r as usize) as i128)),
                    ty,
                    field.name(),
                )?,
                Some(&KeepAs::Late { origin, column }) => {
                    let at: Vec<u64> = picks.iter().map(|&r| places[origin][r as usize]).collect();
                    let reader = self.origin_reader(self.origins[origin]);
                    let taken = read_places(&reader, column, &at)?;
                    if taken.data_type() == ty {
                        taken
                    } else {
                        arrow_cast::cast(&taken, ty)
                            .map_err(|e| bad(format!("column {}: {e}", field.name())))?
                    }
                }
                None => return Err(bad(format!("output column {} is not kept", field.name()))),
            };
            columns.push(array);
        }
        RecordBatch::try_new(self.schema.clone(), columns)
            .map(Some)
            .map_err(|e| bad(format!("the rows sent do not fit the output schema: {e}")))
    }

    /// The leading sort keys of a NOP task's rows that it keeps by value, with whether each is
    /// descending (a key kept late ends them: the host's sort orders by it).
    pub(super) fn order_keys<'i>(&self, ints: &'i [Ints], order: &Order) -> Vec<(&'i Ints, bool)> {
        order
            .keys
            .iter()
            .map_while(|k| match self.keep_as.get(k.column)? {
                KeepAs::Int(_) => Some((ints.get(k.column)?, k.descending)),
                KeepAs::Late { .. } => None,
            })
            .collect()
    }

    /// A group table as a batch of the task's output schema.
    pub(super) fn emit_groups(&self, g: &Groups) -> Result<RecordBatch> {
        let schema = &self.schema;
        let aggs = self.aggs();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        let bad = |detail: String| Error::Offload { detail };
        for (field, emit) in schema.fields().iter().zip(&self.emit) {
            let ty = field.data_type();
            let array: ArrayRef = match *emit {
                Emit::Key(k) => self.key_array(g, k, field)?,
                Emit::State(a, f) => {
                    let agg = &aggs[a];
                    let (acc, count) = (&g.acc[a], &g.count[a]);
                    let seen = |i: usize| count[i] > 0;
                    match (agg.func, f) {
                        (AggFunc::Count | AggFunc::CountAll, _) => match ty {
                            DataType::Int64 => Arc::new(Int64Array::from(count.clone())),
                            DataType::UInt64 => Arc::new(UInt64Array::from_iter_values(
                                count.iter().map(|&c| c as u64),
                            )),
                            other => return Err(bad(format!("a count emitted as {other}"))),
                        },
                        (AggFunc::Avg, 0) => match ty {
                            DataType::UInt64 => Arc::new(UInt64Array::from_iter_values(
                                count.iter().map(|&c| c as u64),
                            )),
                            DataType::Int64 => Arc::new(Int64Array::from(count.clone())),
                            other => {
                                return Err(bad(format!("an average's count emitted as {other}")))
                            }
                        },
                        (AggFunc::Sum | AggFunc::Avg, _) => {
                            let values = (0..g.len).map(|i| seen(i).then_some(acc[i]));
                            match ty {
                                DataType::Float64 => {
                                    let div = 10f64.powi(agg.scale as i32);
                                    Arc::new(Float64Array::from_iter(
                                        values.map(|v| v.map(|v| v as f64 / div)),
                                    ))
                                }
                                _ => int_array(values, ty, field.name())?,
                            }
                        }
                        (AggFunc::Min | AggFunc::Max, _) => int_array(
                            (0..g.len).map(|i| seen(i).then_some(acc[i])),
                            ty,
                            field.name(),
                        )?,
                    }
                }
            };
            columns.push(array);
        }
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| {
            bad(format!(
                "the emitted rows do not fit the output schema: {e}"
            ))
        })
    }
}

pub(super) fn arrow_select_take(values: &ArrayRef, codes: &Int32Array) -> Result<ArrayRef> {
    arrow_select::take::take(values.as_ref(), codes, None).map_err(|e| Error::Offload {
        detail: format!("cannot emit a dictionary key: {e}"),
    })
}

/// Exact integers as an array of an integer, date or decimal type; out of range is an error.
/// An integer-like array's values as 64-bit integers (decimals as their unscaled values);
/// none for other types, nulls, or a decimal beyond 64 bits.
pub(super) fn integers(array: &ArrayRef) -> Option<Vec<i64>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, Decimal128Type, Int32Type as I32, Int64Type};
    if array.null_count() > 0 {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int64 => array.as_primitive::<Int64Type>().values().to_vec(),
        DataType::Int32 => array
            .as_primitive::<I32>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::Date32 => array
            .as_primitive::<Date32Type>()
            .values()
            .iter()
            .map(|&v| v as i64)
            .collect(),
        DataType::Decimal128(..) => array
            .as_primitive::<Decimal128Type>()
            .values()
            .iter()
            .map(|&v| i64::try_from(v).ok())
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    })
}

pub(super) fn int_array(
    values: impl Iterator<Item = Option<i128>>,
    ty: &DataType,
    name: &str,
) -> Result<ArrayRef> {
    let range = |v: i128| Error::Offload {
        detail: format!("{name}: {v} does not fit {ty}"),
    };
    Ok(match ty {
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter(values)
                .with_precision_and_scale(*p, *s)
                .map_err(|e| Error::Offload {
                    detail: format!("{name}: {e}"),
                })?,
        ),
        DataType::Int64 => Arc::new(Int64Array::from(
            values
                .map(|v| {
                    v.map(|v| i64::try_from(v).map_err(|_| range(v)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?,
        )),
        DataType::Int32 => Arc::new(Int32Array::from(
            values
                .map(|v| {
                    v.map(|v| i32::try_from(v).map_err(|_| range(v)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?,
        )),
        DataType::Date32 => Arc::new(Date32Array::from(
            values
                .map(|v| {
                    v.map(|v| i32::try_from(v).map_err(|_| range(v)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?,
        )),
        DataType::Boolean => Arc::new(BooleanArray::from(
            values.map(|v| v.map(|v| v != 0)).collect::<Vec<_>>(),
        )),
        other => {
            return Err(Error::Offload {
                detail: format!("{name}: the device does not emit {other}"),
            })
        }
    })
}
