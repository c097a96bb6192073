//! A semi or anti join's condition over a build's groups (graph version 9): each value is
//! computed as Arrow's kernels compute it (casts between decimals and doubles, double
//! arithmetic, comparisons), checked against those kernels; and a device's semi and anti
//! joins with TPC-H Q17's condition (`q < 0.2 * avg(q)` of the key's rows, in the host's
//! types) keep exactly the reference's rows, for any lanes.

use crate::common::*;
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type};
use arrow_array::{Array, ArrayRef, Decimal128Array, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use inpath_offload::graph::{
    AggFunc, CmpOp, Condition, GroupKey, Join, JoinKind, Num, Op, Operator, Source, Value,
};
use inpath_offload::TaskGraph;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

fn no_probe(_: &Source) -> i64 {
    0
}

fn float(v: Option<Num>) -> Option<f64> {
    match v? {
        Num::Float(f) => Some(f),
        Num::Int(_) => panic!("an integer where a double was expected"),
    }
}

fn int(v: Option<Num>) -> Option<i128> {
    match v? {
        Num::Int(i) => Some(i),
        Num::Float(_) => panic!("a double where an integer was expected"),
    }
}

/// Values of random decimals and doubles against Arrow's casts and arithmetic, value by
/// value (the build row's column 0 holds the integer).
#[test]
fn values_are_computed_as_arrows_kernels_compute_them() {
    let mut r = StdRng::seed_from_u64(61);
    let ints: Vec<i64> = (0..20_000)
        .map(|i| match i % 4 {
            0 => r.gen_range(-1000..1000),
            1 => r.gen_range(-1 << 40..1 << 40),
            2 => r.gen_range(i64::MIN / 4..i64::MAX / 4),
            _ => r.gen_range(1..60) * 5,
        })
        .collect();
    let counts: Vec<i64> = (0..ints.len()).map(|_| r.gen_range(1..90)).collect();
    let cast = |a: &dyn Array, to: &DataType| arrow_cast::cast(a, to).unwrap();
    for scale in [0i8, 2, 4, 6] {
        let decimals = Decimal128Array::from(ints.iter().map(|&v| v as i128).collect::<Vec<_>>())
            .with_precision_and_scale(38, scale)
            .unwrap();
        // A decimal as a double.
        let want = cast(&decimals, &DataType::Float64);
        let want = want.as_primitive::<Float64Type>();
        let to_float = |column: usize| Value::ToFloat {
            of: Box::new(Value::Build(column)),
            scale,
        };
        for (i, &v) in ints.iter().enumerate() {
            let got = float(to_float(0).eval(&no_probe, &|_| v)).unwrap();
            assert_eq!(
                got.to_bits(),
                want.value(i).to_bits(),
                "{v} at scale {scale}"
            );
        }
        // The host's average of doubles, times 0.2, cast to Decimal128(30, 15); and the
        // decimal cast to that scale beside it (Q17's two sides), compared.
        let sums = want.clone();
        let counts_f = cast(&Int64Array::from(counts.clone()), &DataType::Float64);
        let avg = arrow_arith::numeric::div(&sums, &counts_f).unwrap();
        let fifth = Float64Array::from(vec![0.2; ints.len()]);
        let product = arrow_arith::numeric::mul(&fifth, &avg).unwrap();
        let rounded = cast(product.as_ref(), &DataType::Decimal128(30, 15));
        let rounded = rounded.as_primitive::<Decimal128Type>();
        let rescaled = cast(&decimals, &DataType::Decimal128(38, 15));
        let rescaled = rescaled.as_primitive::<Decimal128Type>();
        let widened = cast(rounded, &DataType::Decimal128(38, 15));
        let lt = arrow_ord::cmp::lt(rescaled, &widened.as_primitive::<Decimal128Type>()).unwrap();
        let right = Value::FromFloat {
            of: Box::new(Value::Mul(
                Box::new(Value::Float(0.2)),
                Box::new(Value::Div(
                    Box::new(to_float(0)),
                    Box::new(Value::ToFloat {
                        of: Box::new(Value::Build(1)),
                        scale: 0,
                    }),
                )),
            )),
            scale: 15,
            precision: 30,
        };
        let left = Value::Rescale {
            of: Box::new(Value::Build(0)),
            by: (15 - scale) as u8,
        };
        let condition = Condition {
            op: CmpOp::Lt,
            left: left.clone(),
            right: right.clone(),
        };
        assert!(condition.well_formed());
        for (i, (&v, &c)) in ints.iter().zip(&counts).enumerate() {
            let row = |col: usize| if col == 0 { v } else { c };
            let got = int(right.eval(&no_probe, &row));
            let want = rounded.is_valid(i).then(|| rounded.value(i));
            assert_eq!(got, want, "0.2 * {v} / {c} at scale {scale}");
            let got = int(left.eval(&no_probe, &row));
            let want = rescaled.is_valid(i).then(|| rescaled.value(i));
            assert_eq!(got, want, "{v} rescaled from {scale}");
            let want = lt.is_valid(i) && lt.value(i);
            assert_eq!(condition.holds(&no_probe, &row), want, "{v} / {c}");
        }
    }
    // Doubles compare as Arrow compares them: NaN above every number, -0 below 0.
    let values = [f64::NAN, 0.0, -0.0, 1.5, f64::INFINITY, -1e300];
    let arr = Float64Array::from(values.to_vec());
    for op in [
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        for (i, &a) in values.iter().enumerate() {
            let left = Float64Array::from(vec![a; values.len()]);
            let want = match op {
                CmpOp::Lt => arrow_ord::cmp::lt(&left, &arr),
                CmpOp::Le => arrow_ord::cmp::lt_eq(&left, &arr),
                CmpOp::Eq => arrow_ord::cmp::eq(&left, &arr),
                CmpOp::Ne => arrow_ord::cmp::neq(&left, &arr),
                CmpOp::Gt => arrow_ord::cmp::gt(&left, &arr),
                CmpOp::Ge => arrow_ord::cmp::gt_eq(&left, &arr),
            }
            .unwrap();
            for (j, &b) in values.iter().enumerate() {
                let c = Condition {
                    op,
                    left: Value::Float(a),
                    right: Value::Float(b),
                };
                assert_eq!(
                    c.holds(&no_probe, &|_| 0),
                    want.value(j),
                    "{a} {op:?} {b} ({i})"
                );
            }
        }
    }
    // Kinds that do not mix are refused.
    let mixed = Condition {
        op: CmpOp::Lt,
        left: Value::Build(0),
        right: Value::Float(1.0),
    };
    assert!(!mixed.well_formed());
    assert!(
        Value::Mul(Box::new(Value::Build(0)), Box::new(Value::Float(2.0)))
            .is_float()
            .is_none()
    );
}

fn table(columns: &[(&str, Vec<i64>)]) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, _)| Field::new(*n, DataType::Int64, false))
        .collect();
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .map(|(_, v)| Arc::new(Int64Array::from(v.clone())) as ArrayRef)
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

/// Q17's shape: task 0 averages `g.v` by `g.k`; task 1 sums `p.w` over the rows of `p` whose
/// key has a group where `p.q < 0.2 * avg` (semi) or none (anti), in the host's types.
fn q17_graph(kind: JoinKind) -> TaskGraph {
    let groups = task(
        "g",
        vec![Op::Load { column: 0 }, Op::Load { column: 1 }],
        Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: vec![agg(AggFunc::Avg, Some(1))],
        },
        vec![("k", "Int64"), ("n", "Int64"), ("s", "Decimal128(38, 0)")],
    );
    let mut probe = task(
        "p",
        vec![Op::Load { column: 2 }],
        Operator::Aggregate {
            aggs: vec![agg(AggFunc::Sum, Some(0)), agg(AggFunc::CountAll, None)],
        },
        vec![("w", "Decimal128(38, 0)"), ("rows", "Int64")],
    );
    let avg = Value::Div(
        Box::new(Value::ToFloat {
            of: Box::new(Value::Build(2)),
            scale: 0,
        }),
        Box::new(Value::ToFloat {
            of: Box::new(Value::Build(1)),
            scale: 0,
        }),
    );
    probe.joins.push(Join {
        condition: Some(Condition {
            op: CmpOp::Lt,
            left: Value::Rescale {
                of: Box::new(Value::Probe(Source::Column(1))),
                by: 15,
            },
            right: Value::FromFloat {
                of: Box::new(Value::Mul(Box::new(Value::Float(0.2)), Box::new(avg))),
                scale: 15,
                precision: 30,
            },
        }),
        ..join_first(kind)
    });
    TaskGraph {
        version: inpath_offload::GRAPH_VERSION,
        tasks: vec![groups, probe],
    }
}

#[test]
fn semi_and_anti_joins_with_a_condition_on_groups_keep_the_reference_rows() {
    let mut r = StdRng::seed_from_u64(62);
    let n = 30_000;
    let gk: Vec<i64> = (0..n).map(|_| r.gen_range(0..2_000)).collect();
    let gv: Vec<i64> = (0..n).map(|_| r.gen_range(1..=50)).collect();
    let pk: Vec<i64> = (0..8_000).map(|_| r.gen_range(-100..2_100)).collect();
    let pq: Vec<i64> = (0..pk.len()).map(|_| r.gen_range(1..=12)).collect();
    let pw: Vec<i64> = (0..pk.len()).map(|_| r.gen_range(0..1_000)).collect();
    let dir = tempfile::tempdir().unwrap();
    let g = write_table(
        dir.path(),
        "g",
        &table(&[("k", gk.clone()), ("v", gv.clone())]),
        700,
    );
    let p = write_table(
        dir.path(),
        "p",
        &table(&[("k", pk.clone()), ("q", pq.clone()), ("w", pw.clone())]),
        500,
    );
    // The reference: each key's average as a double (its exact sum over its count), then
    // Q17's comparison in decimals of 15 digits after the point.
    let mut groups: HashMap<i64, (i64, i64)> = HashMap::new();
    for (&k, &v) in gk.iter().zip(&gv) {
        let e = groups.entry(k).or_default();
        e.0 += v;
        e.1 += 1;
    }
    let passes = |k: i64, q: i64| -> Option<bool> {
        let &(s, c) = groups.get(&k)?;
        let limit = ((0.2 * (s as f64 / c as f64)) * 1e15).round() as i128;
        Some((q as i128) * 1_000_000_000_000_000 < limit)
    };
    for kind in [JoinKind::Semi, JoinKind::Anti] {
        let mut want: BTreeMap<&str, i128> = BTreeMap::new();
        for i in 0..pk.len() {
            let keep = matches!(
                (kind, passes(pk[i], pq[i])),
                (JoinKind::Semi, Some(true)) | (JoinKind::Anti, None | Some(false))
            );
            if keep {
                *want.entry("w").or_default() += pw[i] as i128;
                *want.entry("rows").or_default() += 1;
            }
        }
        assert!(want["rows"] > 100, "{kind:?}: {want:?}");
        for lanes in [1, 2, 3] {
            let device = device(&[("g", &g), ("p", &p)], lanes, 64 << 20);
            let batches = run(&device, &q17_graph(kind)).unwrap();
            let mut got: BTreeMap<&str, i128> = BTreeMap::new();
            for row in rows(&batches) {
                *got.entry("w").or_default() += row[0].int().unwrap_or(0);
                *got.entry("rows").or_default() += row[1].int().unwrap();
            }
            assert_eq!(got, want, "{kind:?}, {lanes} lanes");
        }
    }
    // A condition on an inner join, or comparing a double with an integer, is refused.
    let mut inner = q17_graph(JoinKind::Semi);
    inner.tasks[1].joins[0].kind = JoinKind::Inner;
    let mut mixed = q17_graph(JoinKind::Semi);
    if let Some(c) = &mut mixed.tasks[1].joins[0].condition {
        c.left = Value::Probe(Source::Column(1));
        c.right = Value::Float(3.0);
    }
    for g in [inner, mixed] {
        let e = g.check().expect_err("refused").to_string();
        assert!(e.contains("a condition only on"), "{e}");
    }
}

/// TPC-H Q13's shape: task 0 counts `g`'s rows by `k`; task 1 reads every row of `p` through
/// a left join with those groups (0 where its key has none) and counts `p`'s rows by that
/// count.
fn q13_graph() -> TaskGraph {
    let groups = task(
        "g",
        vec![Op::Load { column: 0 }],
        Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: vec![agg(AggFunc::CountAll, None)],
        },
        vec![("k", "Int64"), ("n", "Int64")],
    );
    let probe = counted_by("p", Op::Fetch { join: 0, column: 1 }, JoinKind::Left);
    TaskGraph {
        version: inpath_offload::GRAPH_VERSION,
        tasks: vec![groups, probe],
    }
}

#[test]
fn a_left_join_with_groups_reads_zero_where_a_key_has_none() {
    let mut r = StdRng::seed_from_u64(63);
    // Keys from a negative least value: the groups' dense table is offset by it.
    let gk: Vec<i64> = (0..20_000).map(|_| r.gen_range(-1_500..1_500)).collect();
    let pk: Vec<i64> = (-2_000..2_500).collect();
    let dir = tempfile::tempdir().unwrap();
    let g = write_table(dir.path(), "g", &table(&[("k", gk.clone())]), 700);
    let p = write_table(dir.path(), "p", &table(&[("k", pk.clone())]), 300);
    let mut per_key: HashMap<i64, i128> = HashMap::new();
    for &k in &gk {
        *per_key.entry(k).or_default() += 1;
    }
    let mut want: BTreeMap<i128, i128> = BTreeMap::new();
    for k in &pk {
        *want
            .entry(per_key.get(k).copied().unwrap_or(0))
            .or_default() += 1;
    }
    assert!(want[&0] > 1_000, "{want:?}");
    for lanes in [1, 2, 3] {
        let device = device(&[("g", &g), ("p", &p)], lanes, 64 << 20);
        let mut got: BTreeMap<i128, i128> = BTreeMap::new();
        for row in rows(&run(&device, &q13_graph()).unwrap()) {
            *got.entry(row[0].int().unwrap()).or_default() += row[1].int().unwrap();
        }
        assert_eq!(got, want, "{lanes} lanes");
    }
    // A left join over rows that are not groups, on some of the keys only, or whose build
    // columns are read other than by Fetch, is refused.
    let mut nop = q13_graph();
    nop.tasks[0].operator = Operator::Nop;
    nop.tasks[0].keep = vec![Source::Column(0), Source::Column(0)];
    let mut grouped_by_row = q13_graph();
    grouped_by_row.tasks[1].operator = Operator::AggregateGroupBy {
        keys: vec![GroupKey::Build { join: 0, column: 1 }],
        aggs: vec![agg(AggFunc::CountAll, None)],
    };
    for (g, what) in [(nop, "a left join only"), (grouped_by_row, "group key")] {
        let e = g.check().expect_err("refused").to_string();
        assert!(e.contains(what), "{e}");
    }
}
