//! A HAVING on a build's groups (graph version 9): the groups a later task joins are those
//! whose sums and counts pass, whatever the lanes; over a table whose pages hold disjoint
//! ranges of the key, the lanes finish each page's inner groups as they go and hold only
//! those that pass, so a budget far below every group's size still answers, while the same
//! rows shuffled (every group held until the end) are declined under it.

use crate::common::*;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use inpath_offload::graph::{AggFunc, CmpOp, GroupKey, Having, JoinKind, Op, Operator};
use inpath_offload::Device;
use inpath_offload::TaskGraph;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

fn kv(keys: &[i64], values: &[i64]) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(keys.to_vec())),
        Arc::new(Int64Array::from(values.to_vec())),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

/// Task 0 groups `table` by `k` (sum of `v`, count) with `having`; task 1 counts the rows of
/// `p` by `k` whose key is among those groups (a semi join).
fn graph(table: &str, having: Vec<Having>) -> TaskGraph {
    let mut groups = task(
        table,
        vec![Op::Load { column: 0 }, Op::Load { column: 1 }],
        Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: vec![agg(AggFunc::Sum, Some(1)), agg(AggFunc::CountAll, None)],
        },
        vec![("k", "Int64"), ("s", "Decimal128(38, 0)"), ("n", "Int64")],
    );
    groups.having = having;
    let probe = counted_by("p", Op::Load { column: 0 }, JoinKind::Semi);
    TaskGraph {
        version: inpath_offload::GRAPH_VERSION,
        tasks: vec![groups, probe],
    }
}

/// The probe task's partial counts (one per lane) added up by key.
fn counted(batches: &[RecordBatch]) -> BTreeMap<i64, i128> {
    let mut counts = BTreeMap::new();
    for row in rows(batches) {
        *counts.entry(row[0].int().unwrap() as i64).or_default() += row[1].int().unwrap();
    }
    counts
}

#[test]
fn having_keeps_the_passing_groups_and_disjoint_pages_need_little_memory() {
    let mut r = StdRng::seed_from_u64(91);
    // Keys in runs of 1 to 8 rows, ascending: runs cross the 100-row pages' ends.
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let mut k = -500i64;
    while keys.len() < 60_000 {
        for _ in 0..r.gen_range(1..=8) {
            keys.push(k);
            values.push(r.gen_range(-40..100));
        }
        k += r.gen_range(1..4);
    }
    let sorted = kv(&keys, &values);
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.shuffle(&mut r);
    let shuffled = kv(
        &order.iter().map(|&i| keys[i]).collect::<Vec<_>>(),
        &order.iter().map(|&i| values[i]).collect::<Vec<_>>(),
    );
    // The probe: every key once or twice, and keys no group has.
    let probe_keys: Vec<i64> = (-600..k + 50).flat_map(|k| [k, k + (k & 1)]).collect();
    let probe = kv(&probe_keys, &vec![0; probe_keys.len()]);
    let dir = tempfile::tempdir().unwrap();
    let g = write_table(dir.path(), "g", &sorted, 100);
    let gs = write_table(dir.path(), "gs", &shuffled, 100);
    let p = write_table(dir.path(), "p", &probe, 1000);

    // The reference: each key's sum and count, the keys passing, the probe rows counted.
    let mut groups: BTreeMap<i64, (i128, i64)> = BTreeMap::new();
    for (&k, &v) in keys.iter().zip(&values) {
        let e = groups.entry(k).or_default();
        e.0 += v as i128;
        e.1 += 1;
    }
    let cases = [
        vec![Having {
            agg: 0,
            op: CmpOp::Gt,
            value: 250,
        }],
        vec![
            Having {
                agg: 0,
                op: CmpOp::Le,
                value: 100,
            },
            Having {
                agg: 1,
                op: CmpOp::Ge,
                value: 4,
            },
        ],
        vec![Having {
            agg: 1,
            op: CmpOp::Eq,
            value: 8,
        }],
        vec![Having {
            agg: 0,
            op: CmpOp::Lt,
            value: -1000,
        }],
    ];
    for having in cases {
        let passing: BTreeSet<i64> = groups
            .iter()
            .filter(|(_, &(s, n))| {
                having.iter().all(|h| {
                    let v = if h.agg == 0 { s } else { n as i128 };
                    let c = h.value as i128;
                    match h.op {
                        CmpOp::Gt => v > c,
                        CmpOp::Ge => v >= c,
                        CmpOp::Lt => v < c,
                        CmpOp::Le => v <= c,
                        CmpOp::Eq => v == c,
                        CmpOp::Ne => v != c,
                    }
                })
            })
            .map(|(&k, _)| k)
            .collect();
        let mut want: BTreeMap<i64, i128> = BTreeMap::new();
        for &k in probe_keys.iter().filter(|k| passing.contains(k)) {
            *want.entry(k).or_default() += 1;
        }
        let what = format!("{having:?}: {} groups pass", passing.len());
        for table in ["g", "gs"] {
            for lanes in [1, 2, 3] {
                let device = device(&[("g", &g), ("gs", &gs), ("p", &p)], lanes, 64 << 20);
                let got = counted(&run(&device, &graph(table, having.clone())).unwrap());
                assert!(got == want, "{what}, {table}, {lanes} lanes");
            }
        }
        // 1 MiB: the 25,000 groups take 1.6 MB, and a lane's share of a page's reads and its
        // groups (two lanes) about 1 MB. The table in key order holds one page's groups and
        // those that passed; shuffled, every group until the end: it runs in key-range passes
        // (the groups of one range of the probe's key at a time).
        let small = device(&[("g", &g), ("gs", &gs), ("p", &p)], 2, 1 << 20);
        let got = counted(&run(&small, &graph("g", having.clone())).unwrap());
        assert!(got == want, "{what}, in key order, 1 MiB");
        assert_eq!(small.stats().passes, 0, "{what}");
        let got = counted(&run(&small, &graph("gs", having.clone())).unwrap());
        assert!(got == want, "{what}, shuffled, 1 MiB");
        if passing.len() < 2_000 {
            assert!(small.stats().passes >= 2, "{what}: {:?}", small.stats());
        }
    }
}

/// A HAVING is refused where no later task joins the groups, on an aggregate it cannot
/// test (an average), and on a task that does not group.
#[test]
fn a_having_outside_a_joined_group_by_is_refused() {
    let last_only = {
        let mut g = graph("g", vec![]);
        g.tasks.truncate(1);
        g.tasks[0].having = vec![Having {
            agg: 0,
            op: CmpOp::Gt,
            value: 1,
        }];
        g
    };
    let mut avg = graph(
        "g",
        vec![Having {
            agg: 0,
            op: CmpOp::Gt,
            value: 1,
        }],
    );
    if let Operator::AggregateGroupBy { aggs, .. } = &mut avg.tasks[0].operator {
        aggs[0].func = AggFunc::Avg;
    }
    let beyond = graph(
        "g",
        vec![Having {
            agg: 2,
            op: CmpOp::Gt,
            value: 1,
        }],
    );
    for g in [last_only, avg, beyond] {
        let e = g.check().expect_err("refused").to_string();
        assert!(e.contains("has a HAVING"), "{e}");
        let e = TaskGraph::from_json(&g.to_json())
            .expect_err("refused")
            .to_string();
        assert!(e.contains("has a HAVING"), "{e}");
    }
}
