//! SORT and TOPK (`Order`): a NOP last task's rows and a group-by's groups, by one to three
//! keys with many ties, ascending and descending, with and without a limit. The device sends
//! the rows ordered by the leading keys it holds by value and, with a limit, exactly those
//! whose leading keys are not after the limit-th row's (ties at the boundary included, as
//! graph.rs documents); the host's sort and limit over them give the reference's rows.

use crate::common::*;
use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use inpath_offload::graph::{AggFunc, GroupKey, Op, Operator, Order, SortKey, Source};
use inpath_offload::{Device, TaskGraph};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cmp::Ordering;
use std::sync::Arc;

/// a in 0..8, b in 0..40, c in -10^6..10^6, and a unique string per row.
fn ties(n: usize, seed: u64) -> RecordBatch {
    let mut r = StdRng::seed_from_u64(seed);
    let mut int = |hi: i64| -> Arc<Int64Array> {
        Arc::new(Int64Array::from_iter_values(
            (0..n).map(|_| r.gen_range(-hi..hi) / 2 + hi / 2),
        ))
    };
    let (a, b, c) = (int(8), int(40), int(1_000_000));
    let name = Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("row {i:05}")),
    ));
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Int64, false),
        Field::new("c", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![a, b, c, name]).unwrap()
}

/// Rows compared by `keys` (cells of the keys' columns, descending where asked).
fn by(keys: &[SortKey]) -> impl Fn(&Vec<Cell>, &Vec<Cell>) -> Ordering + '_ {
    move |x, y| {
        keys.iter()
            .map(|k| {
                let o = x[k.column].cmp(&y[k.column]);
                if k.descending {
                    o.reverse()
                } else {
                    o
                }
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

/// Checks the rows `got` a device sent for `order` over the reference rows `all`, where the
/// device orders by the leading `ordered` keys: every row not after the limit-th on those
/// keys is sent, in their order, and the host's sort and limit give the reference's keys.
fn check(got: &[Vec<Cell>], all: &[Vec<Cell>], order: &Order, ordered: usize, what: &str) {
    let prefix = &order.keys[..ordered];
    let mut sorted = all.to_vec();
    sorted.sort_by(by(&order.keys));
    let mut want: Vec<Vec<Cell>> = match order.limit {
        Some(k) if k < all.len() && ordered > 0 => {
            let last = sorted[k - 1].clone();
            all.iter()
                .filter(|r| by(prefix)(r, &last).is_le())
                .cloned()
                .collect()
        }
        _ => all.to_vec(),
    };
    assert!(
        got.windows(2).all(|w| by(prefix)(&w[0], &w[1]).is_le()),
        "{what}: not in order"
    );
    let mut g = got.to_vec();
    g.sort();
    want.sort();
    assert_eq!(g.len(), want.len(), "{what}: rows sent");
    assert_eq!(g, want, "{what}");
    // The host's sort and limit.
    let mut host = got.to_vec();
    host.sort_by(by(&order.keys));
    let k = order.limit.unwrap_or(usize::MAX);
    let keys = |rows: &[Vec<Cell>]| -> Vec<Vec<Cell>> {
        rows.iter()
            .take(k)
            .map(|r| order.keys.iter().map(|s| r[s.column].clone()).collect())
            .collect()
    };
    assert_eq!(keys(&host), keys(&sorted), "{what}: after the host's sort");
}

fn random_order(r: &mut StdRng, columns: &[usize], rows: usize) -> Order {
    let mut cols = columns.to_vec();
    let n = r.gen_range(1..=cols.len().min(3));
    let keys = (0..n)
        .map(|_| SortKey {
            column: cols.remove(r.gen_range(0..cols.len())),
            descending: r.gen_bool(0.5),
            nulls_first: r.gen_bool(0.5),
        })
        .collect();
    let limit = match r.gen_range(0..4) {
        0 => None,
        1 => Some(rows + r.gen_range(0..3)),
        _ => Some(r.gen_range(1..60)),
    };
    Order { keys, limit }
}

#[test]
fn rows_sorted_and_cut_on_the_device_keep_every_tie_of_the_last() {
    let batch = ties(3_000, 61);
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", &batch, 100);
    let device = device(&[("t", &reader)], 3, 64 << 20);
    let all = rows(std::slice::from_ref(&batch));
    let mut r = StdRng::seed_from_u64(62);
    let mut cut = 0;
    for round in 0..60 {
        // Integer keys kept by value; the string (kept late) may end the keys.
        let mut order = random_order(&mut r, &[0, 1, 2], all.len());
        if r.gen_ratio(1, 4) {
            order.keys.insert(
                r.gen_range(0..=order.keys.len()),
                SortKey {
                    column: 3,
                    descending: r.gen_bool(0.5),
                    nulls_first: false,
                },
            );
        }
        let ordered = order.keys.iter().take_while(|k| k.column != 3).count();
        let mut t = task(
            "t",
            Vec::new(),
            Operator::Nop,
            vec![
                ("a", "Int64"),
                ("b", "Int64"),
                ("c", "Int64"),
                ("name", "Utf8"),
            ],
        );
        t.keep = (0..4).map(Source::Column).collect();
        t.order = Some(order.clone());
        device.reset_stats();
        let got = rows(&run(&device, &TaskGraph::single(t)).unwrap());
        check(
            &got,
            &all,
            &order,
            ordered,
            &format!("round {round}: {order:?}"),
        );
        if got.len() < all.len() {
            cut += 1;
            assert_eq!(
                device.stats().groups_cut,
                (all.len() - got.len()) as u64,
                "round {round}"
            );
        }
    }
    assert!(cut > 20, "{cut} of 60 cut");
}

#[test]
fn groups_sorted_and_cut_on_the_device_keep_every_tie_of_the_last() {
    let batch = ties(3_000, 63);
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", &batch, 100);
    let all = rows(std::slice::from_ref(&batch));
    let mut r = StdRng::seed_from_u64(64);
    for lanes in [1, 3] {
        let device = device(&[("t", &reader)], lanes, 64 << 20);
        for round in 0..30 {
            // Groups by b (40) or by a and b (320): count(*), sum(c), min(c).
            let keys: Vec<usize> = if round % 2 == 0 { vec![1] } else { vec![0, 1] };
            let mut reference: std::collections::HashMap<Vec<Cell>, Vec<State>> =
                Default::default();
            for row in &all {
                let s = reference
                    .entry(keys.iter().map(|&k| row[k].clone()).collect())
                    .or_insert_with(|| {
                        vec![
                            State::empty(AggFunc::CountAll),
                            State::empty(AggFunc::Sum),
                            State::empty(AggFunc::Min),
                        ]
                    });
                let c = row[2].int().unwrap();
                s[0].add(1);
                s[1].add(c);
                s[2].add(c);
            }
            let groups: Vec<Vec<Cell>> = reference
                .into_iter()
                .map(|(k, s)| k.into_iter().chain(s.iter().map(State::cell)).collect())
                .collect();
            let width = keys.len() + 3;
            // By the count (ties) first, then any other columns.
            let mut order = random_order(&mut r, &(0..width).collect::<Vec<_>>(), groups.len());
            if !order.keys.iter().any(|k| k.column == keys.len()) {
                order.keys.insert(
                    0,
                    SortKey {
                        column: keys.len(),
                        descending: r.gen_bool(0.5),
                        nulls_first: false,
                    },
                );
            }
            let mut fields: Vec<(&str, &str)> =
                [("a", "Int64"), ("b", "Int64")][2 - keys.len()..].to_vec();
            fields.extend([("n", "Int64"), ("s", "Decimal128(38, 0)"), ("m", "Int64")]);
            let mut t = task(
                "t",
                vec![
                    Op::Load { column: 0 },
                    Op::Load { column: 1 },
                    Op::Load { column: 2 },
                ],
                Operator::AggregateGroupBy {
                    keys: keys.iter().map(|&k| GroupKey::Register(k)).collect(),
                    aggs: vec![
                        agg(AggFunc::CountAll, None),
                        agg(AggFunc::Sum, Some(2)),
                        agg(AggFunc::Min, Some(2)),
                    ],
                },
                fields,
            );
            t.order = Some(order.clone());
            t.whole_groups = r.gen_bool(0.5);
            device.reset_stats();
            let got = rows(&run(&device, &TaskGraph::single(t)).unwrap());
            let what = format!("lanes {lanes}, round {round}: keys {keys:?}, {order:?}");
            check(&got, &groups, &order, order.keys.len(), &what);
            let s = device.stats();
            assert_eq!(s.groups_spilled, 0, "{what}");
            assert_eq!(s.groups_cut, (groups.len() - got.len()) as u64, "{what}");
        }
    }
}
