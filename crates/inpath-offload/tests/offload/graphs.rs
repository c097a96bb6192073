//! Hand-built graphs: the Row Selector against direct evaluation, bad graphs and budgets, the
//! transformer's exactness, and packed pages at the edges of 64 bits.

use crate::pipe::t_tables;
use crate::table::{random_table, write_t};
use arrow_array::{Decimal128Array, Int64Array, RecordBatch, StringArray};
use inpath_offload::graph::{
    Agg, AggFunc, CmpOp, Comparator, MaskSource, Op, Operator, Output, Program, Selector,
    TableTask, Test,
};
use inpath_offload::{Device, LocalDevice, TaskGraph, GRAPH_VERSION};
use inpath_seal::KeyRing;
use inpath_table::TableReader;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;

/// An AGGREGATE task over every row of table `t`: `ops`, then `aggs` emitted as `fields`.
pub fn aggregate_over_t(ops: Vec<Op>, aggs: Vec<Agg>, fields: Vec<(String, String)>) -> TableTask {
    TableTask {
        table: "t".into(),
        mask: MaskSource::All,
        joins: Vec::new(),
        flags: Vec::new(),
        filter: None,
        keep: Vec::new(),
        selector: Selector::default(),
        transformer: Program { ops },
        operator: Operator::Aggregate { aggs },
        output: Output { fields },
        order: None,
        count_groups: None,
        whole_groups: false,
        having: Vec::new(),
    }
}

/// An AGGREGATE task over table `t`: `ops`, then the sum of register `arg` at `scale`.
pub fn sum_over_t(ops: Vec<Op>, arg: usize, scale: i8) -> TableTask {
    aggregate_over_t(
        ops,
        vec![Agg {
            func: AggFunc::Sum,
            arg: Some(arg),
            scale,
        }],
        vec![("s".into(), format!("Decimal128(38, {scale})"))],
    )
}

/// The first error `task` gives on `device`, as text.
pub fn first_error(device: &LocalDevice, task: TableTask) -> String {
    device
        .submit(&TaskGraph::single(task))
        .unwrap()
        .find_map(|r| r.err())
        .expect("an error")
        .to_string()
}

#[test]
fn the_row_selector_equals_direct_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let batch = random_table(dir.path(), 5_000, 11);
    let reader = Arc::new(TableReader::open(&dir.path().join("t"), &KeyRing::new()).unwrap());
    let device = LocalDevice::new(HashMap::from([("t".to_string(), reader)]), 2, 64 << 20).unwrap();
    let price = batch
        .column(0)
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .unwrap()
        .clone();
    let disc = batch
        .column(1)
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .unwrap()
        .clone();
    let qty = batch
        .column(3)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .clone();
    let flag = batch
        .column(4)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .clone();
    let mut r = rand::rngs::StdRng::seed_from_u64(5);
    let ops = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];
    for round in 0..60 {
        // Random products of random sums of comparators on price, qty and flag.
        let mut products = Vec::new();
        for _ in 0..r.gen_range(0..4) {
            let mut sum = Vec::new();
            for _ in 0..r.gen_range(1..4) {
                let op = ops[r.gen_range(0..6)];
                sum.push(match r.gen_range(0..4) {
                    3 => Comparator {
                        column: 0,
                        test: Test::Columns { op, other: 1 },
                    },
                    0 => Comparator {
                        column: 0,
                        test: Test::Int {
                            op,
                            value: r.gen_range(-100_000i128..1_000_000),
                        },
                    },
                    1 => Comparator {
                        column: 3,
                        test: Test::Int {
                            op,
                            value: r.gen_range(-60i128..60),
                        },
                    },
                    _ => Comparator {
                        column: 4,
                        test: if r.gen_bool(0.5) {
                            Test::StrIn {
                                values: vec!["A".into(), "X".into()],
                                negated: r.gen_bool(0.5),
                            }
                        } else {
                            Test::Like {
                                pattern: "%R".into(),
                                negated: r.gen_bool(0.5),
                            }
                        },
                    },
                });
            }
            products.push(sum);
        }
        let selector = Selector { products };
        let direct = (0..batch.num_rows())
            .filter(|&i| {
                selector.products.iter().all(|sum| {
                    sum.iter().any(|c| match (&c.test, c.column) {
                        (Test::Int { op, value }, 0) => op.holds(price.value(i), *value),
                        (Test::Int { op, value }, _) => op.holds(qty.value(i) as i128, *value),
                        (Test::StrIn { values, negated }, _) => {
                            values.iter().any(|v| v == flag.value(i)) != *negated
                        }
                        (Test::Like { negated, .. }, _) => flag.value(i).ends_with('R') != *negated,
                        (Test::Columns { op, .. }, _) => op.holds(price.value(i), disc.value(i)),
                    })
                })
            })
            .count() as i64;
        let task = TableTask {
            table: "t".into(),
            mask: MaskSource::All,
            joins: Vec::new(),
            flags: Vec::new(),
            filter: None,
            keep: Vec::new(),
            selector,
            transformer: Program::default(),
            operator: Operator::Aggregate {
                aggs: vec![Agg {
                    func: AggFunc::CountAll,
                    arg: None,
                    scale: 0,
                }],
            },
            output: Output {
                fields: vec![("n".into(), "Int64".into())],
            },
            order: None,
            count_groups: None,
            whole_groups: false,
            having: Vec::new(),
        };
        let graph = TaskGraph::single(task);
        // The graph survives its JSON form.
        let graph = TaskGraph::from_json(&graph.to_json()).unwrap();
        let total: i64 = device
            .submit(&graph)
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                let n = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                n.iter().map(|v| v.unwrap()).sum::<i64>()
            })
            .sum();
        assert_eq!(
            total, direct,
            "round {round}: {:?}",
            graph.tasks[0].selector
        );
    }
}

#[test]
fn bad_graphs_and_budgets_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tables = t_tables(dir.path(), 3);
    let device = LocalDevice::new(tables.clone(), 2, 64 << 20).unwrap();
    let task = TableTask {
        table: "t".into(),
        mask: MaskSource::All,
        joins: Vec::new(),
        flags: Vec::new(),
        filter: None,
        keep: Vec::new(),
        selector: Selector::default(),
        transformer: Program {
            ops: vec![inpath_offload::graph::Op::Load { column: 0 }],
        },
        operator: Operator::Aggregate {
            aggs: vec![Agg {
                func: AggFunc::Sum,
                arg: Some(0),
                scale: 2,
            }],
        },
        output: Output {
            fields: vec![("s".into(), "Decimal128(25, 2)".into())],
        },
        order: None,
        count_groups: None,
        whole_groups: false,
        having: Vec::new(),
    };
    let graph = TaskGraph::single(task.clone());

    // A graph from a newer version is refused by name.
    let newer = graph.to_json().replacen(
        &format!("\"version\": {GRAPH_VERSION}"),
        &format!("\"version\": {}", GRAPH_VERSION + 1),
        1,
    );
    let e = TaskGraph::from_json(&newer).unwrap_err().to_string();
    assert!(
        e.contains(&format!("version {}", GRAPH_VERSION + 1)) && e.contains("newer"),
        "{e}"
    );
    let e = TaskGraph::from_json("{\"version\": 1, \"tasks\": 3}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("damaged"), "{e}");
    // A register read before it is defined; a table the device does not hold; a column
    // beyond the table.
    let mut bad = graph.clone();
    bad.tasks[0]
        .transformer
        .ops
        .push(inpath_offload::graph::Op::Add(0, 5));
    assert!(device
        .submit(&bad)
        .err()
        .unwrap()
        .to_string()
        .contains("register 5"));
    let mut bad = graph.clone();
    bad.tasks[0].table = "nope".into();
    assert!(device
        .submit(&bad)
        .err()
        .unwrap()
        .to_string()
        .contains("no table \"nope\""));
    let mut bad = graph.clone();
    bad.tasks[0].transformer.ops[0] = inpath_offload::graph::Op::Load { column: 40 };
    assert!(device
        .submit(&bad)
        .err()
        .unwrap()
        .to_string()
        .contains("column 40"));

    // A budget below one page (8 KiB a lane; a page of 1,000 decimals read as 64-bit
    // integers and its register take 16 KiB): a clear error, never a wrong answer.
    let small = LocalDevice::new(tables.clone(), 8, 64 << 10).unwrap();
    let results: Vec<_> = small.submit(&graph).unwrap().collect();
    let e = results
        .iter()
        .find_map(|r| r.as_ref().err())
        .unwrap()
        .to_string();
    assert!(
        e.contains("memory budget") && e.contains("cannot hold one page"),
        "{e}"
    );
    assert!(LocalDevice::new(tables.clone(), 0, 64 << 20).is_err());
    assert!(LocalDevice::new(tables, 1, 1000).is_err());

    // A cancelled graph stops: dropping the stream early leaves no lane behind to hang on.
    let mut stream = device.submit(&graph).unwrap();
    stream.cancel();
    let rest: Vec<_> = stream.by_ref().collect();
    assert!(rest.len() <= 2);
    drop(stream);
    // The device still runs graphs afterwards.
    let ok: Vec<_> = device.submit(&graph).unwrap().collect();
    assert!(ok.iter().all(|r| r.is_ok()));
}

#[test]
fn the_transformer_computes_exactly_with_select_scale_and_min_max() {
    let dir = tempfile::tempdir().unwrap();
    let batch = random_table(dir.path(), 7_000, 23);
    let reader = Arc::new(TableReader::open(&dir.path().join("t"), &KeyRing::new()).unwrap());
    let device = LocalDevice::new(HashMap::from([("t".to_string(), reader)]), 3, 64 << 20).unwrap();
    let price = batch
        .column(0)
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .unwrap()
        .clone();
    let disc = batch
        .column(1)
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .unwrap()
        .clone();
    let qty = batch
        .column(3)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .clone();
    // r2 = qty * 10^2 (scale 2); r4 = CASE WHEN qty > 10 THEN price ELSE r2 END;
    // r5 = r4 * disc (scale 4); sum(r5), min(r4), max(r5), avg(r4).
    let ops = vec![
        Op::Load { column: 0 },
        Op::Load { column: 3 },
        Op::Scale { src: 1, pow: 2 },
        Op::Load { column: 1 },
        Op::Select {
            test: 1,
            op: CmpOp::Gt,
            value: 10,
            then: 0,
            otherwise: 2,
        },
        Op::Mul(4, 3),
    ];
    let task = aggregate_over_t(
        ops,
        vec![
            Agg {
                func: AggFunc::Sum,
                arg: Some(5),
                scale: 4,
            },
            Agg {
                func: AggFunc::Min,
                arg: Some(4),
                scale: 2,
            },
            Agg {
                func: AggFunc::Max,
                arg: Some(5),
                scale: 4,
            },
            Agg {
                func: AggFunc::Avg,
                arg: Some(4),
                scale: 2,
            },
        ],
        vec![
            ("sum".into(), "Decimal128(38, 4)".into()),
            ("min".into(), "Decimal128(15, 2)".into()),
            ("max".into(), "Decimal128(38, 4)".into()),
            ("avg_count".into(), "UInt64".into()),
            ("avg_sum".into(), "Float64".into()),
        ],
    );
    let (mut sum, mut min, mut max, mut count, mut total) =
        (0i128, i128::MAX, i128::MIN, 0u64, 0i128);
    for i in 0..batch.num_rows() {
        let r4 = if qty.value(i) > 10 {
            price.value(i)
        } else {
            qty.value(i) as i128 * 100
        };
        let r5 = r4 * disc.value(i);
        sum += r5;
        min = min.min(r4);
        max = max.max(r5);
        count += 1;
        total += r4;
    }
    let batches: Vec<RecordBatch> = device
        .submit(&TaskGraph::single(task))
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    // One partial row per lane; merged here as the host's Final aggregate would.
    let dec = |b: &RecordBatch, c: usize| {
        b.column(c)
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .unwrap()
            .iter()
            .flatten()
            .collect::<Vec<_>>()
    };
    let got_sum: i128 = batches.iter().flat_map(|b| dec(b, 0)).sum();
    let got_min = batches.iter().flat_map(|b| dec(b, 1)).min().unwrap();
    let got_max = batches.iter().flat_map(|b| dec(b, 2)).max().unwrap();
    let got_count: u64 = batches
        .iter()
        .map(|b| {
            b.column(3)
                .as_any()
                .downcast_ref::<arrow_array::UInt64Array>()
                .unwrap()
                .value(0)
        })
        .sum();
    let got_total: f64 = batches
        .iter()
        .map(|b| {
            b.column(4)
                .as_any()
                .downcast_ref::<arrow_array::Float64Array>()
                .unwrap()
                .value(0)
        })
        .sum();
    assert_eq!(
        (got_sum, got_min, got_max, got_count),
        (sum, min, max, count)
    );
    assert!((got_total - total as f64 / 100.0).abs() <= 1e-9 * (total as f64 / 100.0).abs());

    // An overflow is an error naming the instruction, never a wrapped value.
    let overflow = sum_over_t(
        vec![Op::Load { column: 0 }, Op::Scale { src: 0, pow: 17 }],
        1,
        19,
    );
    let e = first_error(&device, overflow);
    assert!(
        e.contains("instruction 1") && e.contains("overflowed"),
        "{e}"
    );

    // Constants folded and broadcast (never filled out unless summed), and bounds that are
    // loose (r4 = qty - qty is bounded by twice qty's largest magnitude but is 0): r5's bound
    // overflows, its values do not, and the answer is exact.
    let ops = vec![
        Op::Load { column: 3 },       // r0 qty
        Op::Const { value: 7 },       // r1
        Op::Const { value: 3 },       // r2
        Op::Scale { src: 1, pow: 1 }, // r3 = 70
        Op::Sub(0, 0),                // r4 = 0
        Op::Const {
            value: i64::MAX / 2,
        }, // r5
        Op::Mul(4, 5),                // r6 = 0, bound beyond 64 bits
        Op::Mul(3, 2),                // r7 = 210
        Op::Select {
            test: 0,
            op: CmpOp::Gt,
            value: 10,
            then: 7,
            otherwise: 0,
        }, // r8
        Op::Add(1, 0),                // r9 = 7 + qty
        Op::Sub(1, 0),                // r10 = 7 - qty
        Op::Mul(0, 2),                // r11 = qty * 3
    ];
    let sums = [7usize, 8, 9, 10, 11, 6];
    let task = aggregate_over_t(
        ops,
        sums.iter()
            .map(|&r| Agg {
                func: AggFunc::Sum,
                arg: Some(r),
                scale: 0,
            })
            .collect(),
        sums.iter()
            .map(|r| (format!("r{r}"), "Decimal128(38, 0)".to_string()))
            .collect(),
    );
    let mut want = [0i128; 6];
    for q in qty.iter().flatten() {
        let q = q as i128;
        let row = [210, if q > 10 { 210 } else { q }, 7 + q, 7 - q, q * 3, 0];
        for (w, v) in want.iter_mut().zip(row) {
            *w += v;
        }
    }
    let batches: Vec<RecordBatch> = device
        .submit(&TaskGraph::single(task))
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    let mut got = [0i128; 6];
    for b in &batches {
        for (c, g) in got.iter_mut().enumerate() {
            *g += b
                .column(c)
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .unwrap()
                .iter()
                .flatten()
                .sum::<i128>();
        }
    }
    assert_eq!(got, want);
}

/// Pages kept bit-packed (issue 14, fifth part) load exactly at the edges of 64 bits: values
/// just below i64::MAX and just above i64::MIN (narrow deltas from extreme references, so
/// their bounds overflow and the arithmetic is checked), with a selector on the same column;
/// a decimal beyond 64 bits is an error, never a wrapped value.
#[test]
fn packed_pages_load_exactly_at_the_edges_of_64_bits() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 5_000usize;
    let mut r = rand::rngs::StdRng::seed_from_u64(77);
    let high: Vec<i64> = (0..rows).map(|_| i64::MAX - r.gen_range(0..1000)).collect();
    let low: Vec<i64> = (0..rows).map(|_| i64::MIN + r.gen_range(0..1000)).collect();
    let wide: Vec<i128> = (0..rows)
        .map(|_| (1i128 << 70) + r.gen_range(0..1000))
        .collect();
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("high", arrow_schema::DataType::Int64, false),
        arrow_schema::Field::new("low", arrow_schema::DataType::Int64, false),
        arrow_schema::Field::new("wide", arrow_schema::DataType::Decimal128(38, 0), false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(high.clone())),
            Arc::new(Int64Array::from(low.clone())),
            Arc::new(
                Decimal128Array::from_iter_values(wide.iter().copied())
                    .with_precision_and_scale(38, 0)
                    .unwrap(),
            ),
        ],
    )
    .unwrap();
    let table = write_t(dir.path(), &batch, 700);
    let reader = Arc::new(TableReader::open(&table, &KeyRing::new()).unwrap());
    let device = LocalDevice::new(HashMap::from([("t".to_string(), reader)]), 2, 64 << 20).unwrap();
    // sum(high - (MAX - 2000)) and sum(low - (MIN + 2000)) over rows with high > MAX - 500.
    let cut = i64::MAX - 500;
    let mut task = aggregate_over_t(
        vec![
            Op::Load { column: 0 },
            Op::Const {
                value: i64::MAX - 2000,
            },
            Op::Sub(0, 1),
            Op::Load { column: 1 },
            Op::Const {
                value: i64::MIN + 2000,
            },
            Op::Sub(3, 4),
        ],
        vec![
            Agg {
                func: AggFunc::Sum,
                arg: Some(2),
                scale: 0,
            },
            Agg {
                func: AggFunc::Sum,
                arg: Some(5),
                scale: 0,
            },
        ],
        vec![
            ("a".into(), "Decimal128(38, 0)".into()),
            ("b".into(), "Decimal128(38, 0)".into()),
        ],
    );
    task.selector = Selector {
        products: vec![vec![Comparator {
            column: 0,
            test: Test::Int {
                op: CmpOp::Gt,
                value: cut as i128,
            },
        }]],
    };
    let (mut a, mut b) = (0i128, 0i128);
    for i in 0..rows {
        if high[i] > cut {
            a += high[i] as i128 - (i64::MAX - 2000) as i128;
            b += low[i] as i128 - (i64::MIN + 2000) as i128;
        }
    }
    let batches: Vec<RecordBatch> = device
        .submit(&TaskGraph::single(task))
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    let sum = |c: usize| -> i128 {
        batches
            .iter()
            .flat_map(|b| {
                b.column(c)
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .unwrap()
                    .iter()
                    .flatten()
                    .collect::<Vec<_>>()
            })
            .sum()
    };
    assert_eq!((sum(0), sum(1)), (a, b));
    // The decimal beyond 64 bits: a clear error naming the range.
    let e = first_error(&device, sum_over_t(vec![Op::Load { column: 2 }], 0, 0));
    assert!(e.contains("64-bit range"), "{e}");
}
