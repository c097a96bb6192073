//! Groups from several passes merged by their values: each pass sends its groups as the
//! partial aggregate's rows (key values, then each aggregate's state), and rows with the same
//! key values are one group, their states merged by their aggregate's function.

use super::emit::int_array;
use crate::graph::{Agg, AggFunc};
use arrow_array::{
    Array, ArrayRef, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, UInt32Array, UInt64Array,
};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{DataType, SchemaRef};
use inpath_table::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// How a state column merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Merge {
    Add,
    Min,
    Max,
}

/// The merge of each state column after the `keys` key columns: one per aggregate, two for
/// an average (its count, then its sum).
fn state_merges(aggs: &[Agg]) -> Vec<Merge> {
    aggs.iter()
        .flat_map(|a| match a.func {
            AggFunc::Avg => vec![Merge::Add, Merge::Add],
            AggFunc::Min => vec![Merge::Min],
            AggFunc::Max => vec![Merge::Max],
            AggFunc::Sum | AggFunc::Count | AggFunc::CountAll => vec![Merge::Add],
        })
        .collect()
}

/// `batches` (each of `schema`: `keys` key columns, then the states of `aggs`) as one batch
/// holding each distinct tuple of key values once, its states merged: the groups of every
/// pass as the SQL's groups. Key values compare as Arrow's row format orders them (strings by
/// their bytes, nulls equal to nulls, as SQL's GROUP BY).
pub(super) fn merge_by_keys(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    keys: usize,
    aggs: &[Agg],
) -> Result<RecordBatch> {
    let bad = |detail: String| Error::Offload {
        detail: format!("merging the groups of several passes: {detail}"),
    };
    let all =
        arrow_select::concat::concat_batches(schema, batches).map_err(|e| bad(e.to_string()))?;
    let merges = state_merges(aggs);
    if all.num_columns() != keys + merges.len() {
        return Err(bad(format!(
            "{} columns for {keys} keys and {} aggregate states",
            all.num_columns(),
            merges.len()
        )));
    }
    let n = all.num_rows();
    // Each row's group, and each group's first row.
    let mut group_of = Vec::with_capacity(n);
    let mut firsts: Vec<u32> = Vec::new();
    if keys == 0 {
        group_of.resize(n, 0u32);
        if n > 0 {
            firsts.push(0);
        }
    } else {
        let columns = &all.columns()[..keys];
        let converter = RowConverter::new(
            columns
                .iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect(),
        )
        .map_err(|e| bad(e.to_string()))?;
        let rows = converter
            .convert_columns(columns)
            .map_err(|e| bad(e.to_string()))?;
        let mut seen: HashMap<arrow_row::Row<'_>, u32> = HashMap::with_capacity(n);
        for i in 0..n {
            let g = *seen.entry(rows.row(i)).or_insert_with(|| {
                firsts.push(i as u32);
                (firsts.len() - 1) as u32
            });
            group_of.push(g);
        }
    }
    let picks = UInt32Array::from(firsts.clone());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(all.num_columns());
    for c in &all.columns()[..keys] {
        columns.push(
            arrow_select::take::take(c.as_ref(), &picks, None).map_err(|e| bad(e.to_string()))?,
        );
    }
    for (c, merge) in all.columns()[keys..].iter().zip(merges) {
        let name = schema.field(columns.len()).name().clone();
        columns.push(merge_column(c, &group_of, firsts.len(), merge, &name)?);
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| bad(e.to_string()))
}

/// A state column's values merged per group (`group_of[i]`: row i's group): sums add (a
/// group whose every value is null stays null), minima and maxima keep theirs.
fn merge_column(
    column: &ArrayRef,
    group_of: &[u32],
    groups: usize,
    merge: Merge,
    name: &str,
) -> Result<ArrayRef> {
    let fold = |acc: &mut Option<i128>, v: i128| {
        *acc = Some(match (*acc, merge) {
            (None, _) => v,
            (Some(a), Merge::Add) => a.checked_add(v).unwrap_or(i128::MAX),
            (Some(a), Merge::Min) => a.min(v),
            (Some(a), Merge::Max) => a.max(v),
        })
    };
    let ty = column.data_type();
    let ints = |values: &mut dyn Iterator<Item = Option<i128>>| -> Vec<Option<i128>> {
        let mut acc = vec![None; groups];
        for (v, &g) in values.zip(group_of) {
            if let Some(v) = v {
                fold(&mut acc[g as usize], v);
            }
        }
        acc
    };
    let typed = |what: &str| Error::Offload {
        detail: format!("state column {name}: not a {what}"),
    };
    let out: ArrayRef = match ty {
        DataType::Float64 => {
            let a = column
                .as_any()
                .downcast_ref::<Float64Array>()
                .ok_or_else(|| typed("Float64"))?;
            let mut acc: Vec<Option<f64>> = vec![None; groups];
            for (v, &g) in a.iter().zip(group_of) {
                if let Some(v) = v {
                    let slot = &mut acc[g as usize];
                    *slot = Some(match (*slot, merge) {
                        (None, _) => v,
                        (Some(x), Merge::Add) => x + v,
                        (Some(x), Merge::Min) => x.min(v),
                        (Some(x), Merge::Max) => x.max(v),
                    });
                }
            }
            Arc::new(Float64Array::from(acc))
        }
        DataType::UInt64 => {
            let a = column
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| typed("UInt64"))?;
            let acc = ints(&mut a.iter().map(|v| v.map(i128::from)));
            Arc::new(UInt64Array::from_iter(
                acc.into_iter()
                    .map(|v| v.map(|v| v.clamp(0, u64::MAX as i128) as u64)),
            ))
        }
        DataType::Int64 => {
            let a = column
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| typed("Int64"))?;
            int_array(
                ints(&mut a.iter().map(|v| v.map(i128::from))).into_iter(),
                ty,
                name,
            )?
        }
        DataType::Int32 => {
            let a = column
                .as_any()
                .downcast_ref::<Int32Array>()
                .ok_or_else(|| typed("Int32"))?;
            int_array(
                ints(&mut a.iter().map(|v| v.map(i128::from))).into_iter(),
                ty,
                name,
            )?
        }
        DataType::Date32 => {
            let a = column
                .as_any()
                .downcast_ref::<Date32Array>()
                .ok_or_else(|| typed("Date32"))?;
            int_array(
                ints(&mut a.iter().map(|v| v.map(i128::from))).into_iter(),
                ty,
                name,
            )?
        }
        DataType::Decimal128(..) => {
            let a = column
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .ok_or_else(|| typed("Decimal128"))?;
            int_array(ints(&mut a.iter()).into_iter(), ty, name)?
        }
        other => {
            return Err(Error::Offload {
                detail: format!(
                    "state column {name} of type {other}: the device merges no such state"
                ),
            })
        }
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::StringArray;
    use arrow_schema::{Field, Schema};

    /// Groups split over three batches merge into one row per key value: sums and counts
    /// add, minima and maxima keep theirs, an average's count and sum add, a sum of nulls
    /// stays null, and a null key is a group of its own.
    #[test]
    fn groups_from_several_batches_merge_by_their_values() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("sum", DataType::Decimal128(15, 2), true),
            Field::new("n", DataType::Int64, true),
            Field::new("min", DataType::Int32, true),
            Field::new("avg_n", DataType::UInt64, true),
            Field::new("avg_sum", DataType::Float64, true),
        ]));
        let batch = |k: Vec<Option<&str>>,
                     s: Vec<Option<i128>>,
                     n: Vec<i64>,
                     m: Vec<i32>,
                     an: Vec<u64>,
                     asum: Vec<f64>| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(k)),
                    Arc::new(
                        Decimal128Array::from(s)
                            .with_precision_and_scale(15, 2)
                            .unwrap(),
                    ),
                    Arc::new(Int64Array::from(n)),
                    Arc::new(Int32Array::from(m)),
                    Arc::new(UInt64Array::from(an)),
                    Arc::new(Float64Array::from(asum)),
                ],
            )
            .unwrap()
        };
        let batches = [
            batch(
                vec![Some("a"), Some("b")],
                vec![Some(100), None],
                vec![1, 2],
                vec![5, 7],
                vec![1, 1],
                vec![1.5, 2.0],
            ),
            batch(
                vec![Some("b"), None],
                vec![None, Some(7)],
                vec![3, 4],
                vec![6, 1],
                vec![2, 3],
                vec![0.5, 1.0],
            ),
            batch(
                vec![Some("a")],
                vec![Some(-1)],
                vec![10],
                vec![9],
                vec![4],
                vec![2.0],
            ),
        ];
        let aggs = [
            Agg {
                func: AggFunc::Sum,
                arg: Some(0),
                scale: 2,
            },
            Agg {
                func: AggFunc::CountAll,
                arg: None,
                scale: 0,
            },
            Agg {
                func: AggFunc::Min,
                arg: Some(0),
                scale: 0,
            },
            Agg {
                func: AggFunc::Avg,
                arg: Some(0),
                scale: 0,
            },
        ];
        let merged = merge_by_keys(&batches, &schema, 1, &aggs).unwrap();
        assert_eq!(merged.num_rows(), 3);
        let col = |c: usize| merged.column(c).clone();
        let keys = col(0);
        let keys = keys.as_any().downcast_ref::<StringArray>().unwrap();
        let at = |k: Option<&str>| {
            (0..3)
                .find(|&i| keys.is_valid(i).then(|| keys.value(i)) == k)
                .unwrap()
        };
        let sums = col(1);
        let sums = sums.as_any().downcast_ref::<Decimal128Array>().unwrap();
        let ns = col(2);
        let ns = ns.as_any().downcast_ref::<Int64Array>().unwrap();
        let mins = col(3);
        let mins = mins.as_any().downcast_ref::<Int32Array>().unwrap();
        let avg_n = col(4);
        let avg_n = avg_n.as_any().downcast_ref::<UInt64Array>().unwrap();
        let avg_s = col(5);
        let avg_s = avg_s.as_any().downcast_ref::<Float64Array>().unwrap();
        let (a, b, null) = (at(Some("a")), at(Some("b")), at(None));
        assert_eq!(
            (
                sums.value(a),
                ns.value(a),
                mins.value(a),
                avg_n.value(a),
                avg_s.value(a)
            ),
            (99, 11, 5, 5, 3.5)
        );
        assert!(sums.is_null(b));
        assert_eq!(
            (ns.value(b), mins.value(b), avg_n.value(b), avg_s.value(b)),
            (5, 6, 3, 2.5)
        );
        assert_eq!(
            (sums.value(null), ns.value(null), mins.value(null)),
            (7, 4, 1)
        );
        // No key: one row, everything merged.
        let one = merge_by_keys(&batches[..1], &schema, 0, &[]);
        assert!(one.is_err(), "six columns are not zero keys and no states");
    }
}
