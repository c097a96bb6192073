//! The Row Transformer: random straight-line programs (loads, constants, flags, add, sub,
//! mul, scale, year, select) under random selectors and filter registers, aggregated by sum,
//! min, max, count, count(*) and avg, equal an i128 evaluation of the same program over the
//! written arrays; a program whose values leave 64 bits on a selected row is an error naming
//! an instruction that overflows, never a wrapped value.

use crate::common::*;
use crate::selector::{columns, selects, Col, OPS};
use arrow_array::{ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use inpath_offload::graph::{AggFunc, CmpOp, Comparator, Op, Operator, Selector, Test};
use inpath_offload::TaskGraph;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const WORDS: [&str; 5] = ["AIR", "MAIL", "RAIL", "SHIP", "TRUCK"];

/// a: Int64, b: Int32, d: Date32 (before and after 1970), p and q: Decimal128(15, 2), mode: a
/// dictionary string of 5 values, big: Int64 of about 2^40 now and then (products of two
/// overflow), name: a dictionary string of 300 values.
pub fn numbers(n: usize, seed: u64) -> RecordBatch {
    let mut r = StdRng::seed_from_u64(seed);
    let dec = |v: Vec<i128>| -> ArrayRef {
        Arc::new(
            Decimal128Array::from_iter_values(v)
                .with_precision_and_scale(15, 2)
                .unwrap(),
        )
    };
    let a: Vec<i64> = (0..n).map(|_| r.gen_range(-1000..1000)).collect();
    let b: Vec<i32> = (0..n).map(|_| r.gen_range(-50_000..50_000)).collect();
    let d: Vec<i32> = (0..n).map(|_| r.gen_range(-3000..20_000)).collect();
    let p: Vec<i128> = (0..n)
        .map(|_| r.gen_range(-1_000_000..10_000_000))
        .collect();
    let q: Vec<i128> = (0..n).map(|_| r.gen_range(0..=10)).collect();
    let mode: Vec<&str> = (0..n).map(|_| WORDS[r.gen_range(0..5)]).collect();
    let name: Vec<String> = (0..n)
        .map(|_| format!("name {:03}", r.gen_range(0..300)))
        .collect();
    let big: Vec<i64> = (0..n)
        .map(|i| match i % 500 {
            0 => r.gen_range(1i64 << 40..1 << 41),
            _ => r.gen_range(-1000..1000),
        })
        .collect();
    let schema = Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("b", DataType::Int32, false),
        Field::new("d", DataType::Date32, false),
        Field::new("p", DataType::Decimal128(15, 2), false),
        Field::new("q", DataType::Decimal128(15, 2), false),
        Field::new("mode", DataType::Utf8, false),
        Field::new("big", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(a)),
            Arc::new(Int32Array::from(b)),
            Arc::new(Date32Array::from(d)),
            dec(p),
            dec(q),
            Arc::new(arrow_array::StringArray::from(mode)),
            Arc::new(Int64Array::from(big)),
            Arc::new(arrow_array::StringArray::from(name)),
        ],
    )
    .unwrap()
}

/// The integer columns of `numbers` a program loads.
const LOADS: [usize; 6] = [0, 1, 2, 3, 4, 6];

/// A random program of `numbers` columns and flags on `mode`: its instructions, its flags,
/// and which registers hold dates.
pub fn program(r: &mut StdRng) -> (Vec<Op>, Vec<Comparator>) {
    let flags: Vec<Comparator> = (0..r.gen_range(0..3))
        .map(|_| Comparator {
            column: 5,
            test: match r.gen_bool(0.5) {
                true => Test::StrIn {
                    values: vec![WORDS[r.gen_range(0..5)].into()],
                    negated: r.gen_bool(0.3),
                },
                false => Test::Like {
                    pattern: "%AI%".into(),
                    negated: r.gen_bool(0.3),
                },
            },
        })
        .collect();
    let mut ops: Vec<Op> = Vec::new();
    let mut dates: Vec<usize> = Vec::new();
    for _ in 0..r.gen_range(1..4) {
        let column = LOADS[r.gen_range(0..LOADS.len())];
        if column == 2 {
            dates.push(ops.len());
        }
        ops.push(Op::Load { column });
    }
    for _ in 0..r.gen_range(1..9) {
        let n = ops.len();
        let any = |r: &mut StdRng| r.gen_range(0..n);
        let op = match r.gen_range(0..12) {
            0..=1 => Op::Add(any(r), any(r)),
            2..=3 => Op::Sub(any(r), any(r)),
            4..=5 => Op::Mul(any(r), any(r)),
            6 => Op::Scale {
                src: any(r),
                pow: r.gen_range(0..4),
            },
            7 => Op::Const {
                value: r.gen_range(-100..100),
            },
            8 if !flags.is_empty() => Op::Flag {
                flag: r.gen_range(0..flags.len()),
            },
            9 if !dates.is_empty() => Op::Year {
                src: dates[r.gen_range(0..dates.len())],
            },
            10 => {
                let column = LOADS[r.gen_range(0..LOADS.len())];
                if column == 2 {
                    dates.push(n);
                }
                Op::Load { column }
            }
            _ => Op::Select {
                test: any(r),
                op: OPS[r.gen_range(0..6)],
                value: r.gen_range(-500..500),
                then: any(r),
                otherwise: any(r),
            },
        };
        ops.push(op);
    }
    (ops, flags)
}

/// The registers of `ops` on row `i` as exact integers, or the first instruction whose value
/// leaves 64 bits.
pub fn evaluate(
    ops: &[Op],
    flags: &[Comparator],
    cols: &[Col],
    i: usize,
) -> Result<Vec<i128>, usize> {
    let mut regs: Vec<i128> = Vec::with_capacity(ops.len());
    for (k, op) in ops.iter().enumerate() {
        let v = match *op {
            Op::Load { column } => match &cols[column] {
                Col::Int(v) => v[i].unwrap(),
                Col::Str(_) => unreachable!(),
            },
            Op::Flag { flag } => crate::selector::holds(cols, &flags[flag], i) as i128,
            Op::Const { value } => value as i128,
            Op::Add(a, b) => regs[a] + regs[b],
            Op::Sub(a, b) => regs[a] - regs[b],
            Op::Mul(a, b) => regs[a].checked_mul(regs[b]).unwrap_or(i128::MAX),
            Op::Scale { src, pow } => regs[src].checked_mul(10i128.pow(pow)).unwrap_or(i128::MAX),
            Op::Year { src } => year_of(regs[src] as i64) as i128,
            Op::Select {
                test,
                op,
                value,
                then,
                otherwise,
            } => match op.holds(regs[test], value as i128) {
                true => regs[then],
                false => regs[otherwise],
            },
            Op::Fetch { .. } => unreachable!("no joins here"),
            Op::Prefix { .. } => unreachable!("no strings in the random programs"),
        };
        if i64::try_from(v).is_err() {
            return Err(k);
        }
        regs.push(v);
    }
    Ok(regs)
}

/// Aggregates over registers (`Avg` as its count and sum), the reference's and the output
/// fields' way.
pub fn aggs_fields(aggs: &[(AggFunc, Option<usize>)]) -> Vec<(&'static str, &'static str)> {
    const NAMES: [&str; 12] = [
        "c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11",
    ];
    let mut types = Vec::new();
    for (f, _) in aggs {
        match f {
            AggFunc::Count | AggFunc::CountAll => types.push("Int64"),
            AggFunc::Avg => {
                types.push("UInt64");
                types.push("Decimal128(38, 0)");
            }
            _ => types.push("Decimal128(38, 0)"),
        }
    }
    NAMES.iter().copied().zip(types).collect()
}

/// The partial-state functions of `aggs`' output columns (an average is a count and a sum).
pub fn state_funcs(aggs: &[(AggFunc, Option<usize>)]) -> Vec<AggFunc> {
    aggs.iter()
        .flat_map(|&(f, _)| match f {
            AggFunc::Avg => vec![AggFunc::Count, AggFunc::Sum],
            f => vec![f],
        })
        .collect()
}

/// The states of `aggs` with a row's registers added.
pub fn add_row(states: &mut [State], aggs: &[(AggFunc, Option<usize>)], regs: &[i128]) {
    let mut s = states.iter_mut();
    for &(f, arg) in aggs {
        let v = arg.map_or(1, |r| regs[r]);
        if f == AggFunc::Avg {
            s.next().unwrap().add(v);
        }
        s.next().unwrap().add(v);
    }
}

/// A random list of aggregates over `registers` registers (the later ones likelier).
pub fn random_aggs(r: &mut StdRng, registers: usize) -> Vec<(AggFunc, Option<usize>)> {
    let funcs = [
        AggFunc::Sum,
        AggFunc::Min,
        AggFunc::Max,
        AggFunc::Count,
        AggFunc::CountAll,
        AggFunc::Avg,
    ];
    (0..r.gen_range(1..5))
        .map(|_| {
            let f = funcs[r.gen_range(0..funcs.len())];
            let reg = registers - 1 - r.gen_range(0..registers).min(r.gen_range(0..registers));
            (f, (f != AggFunc::CountAll).then_some(reg))
        })
        .collect()
}

#[test]
fn random_programs_aggregate_exactly_as_an_i128_reference() {
    let batch = numbers(3_000, 31);
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", &batch, 100);
    let device = device(&[("t", &reader)], 3, 64 << 20);
    let cols = columns(&batch);
    let mut r = StdRng::seed_from_u64(32);
    let (mut answered, mut overflowed) = (0, 0);
    for round in 0..300 {
        let (ops, flags) = program(&mut r);
        let aggs = random_aggs(&mut r, ops.len());
        let mut t = task(
            "t",
            ops.clone(),
            Operator::Aggregate {
                aggs: aggs.iter().map(|&(f, a)| agg(f, a)).collect(),
            },
            aggs_fields(&aggs),
        );
        t.flags = flags.clone();
        if r.gen_bool(0.5) {
            t.selector = Selector {
                products: vec![vec![Comparator {
                    column: [0, 5][r.gen_range(0..2)],
                    test: Test::Int {
                        op: CmpOp::Gt,
                        value: r.gen_range(-1000..1000),
                    },
                }]],
            };
            if t.selector.products[0][0].column == 5 {
                t.selector.products[0][0].test = Test::StrIn {
                    values: vec!["SHIP".into(), "AIR".into()],
                    negated: r.gen_bool(0.5),
                };
            }
        }
        if r.gen_ratio(1, 4) {
            t.filter = Some(r.gen_range(0..ops.len()));
        }
        let funcs = state_funcs(&aggs);
        let mut states: Vec<State> = funcs.iter().map(|&f| State::empty(f)).collect();
        let mut overflow: Vec<usize> = Vec::new();
        for i in (0..batch.num_rows()).filter(|&i| selects(&cols, &t.selector, i)) {
            match evaluate(&ops, &flags, &cols, i) {
                Err(k) => overflow.push(k),
                Ok(regs) if t.filter.is_some_and(|f| regs[f] == 0) => {}
                Ok(regs) => add_row(&mut states, &aggs, &regs),
            }
        }
        let what = format!("round {round}: {:?} {:?} {aggs:?}", t.selector, ops);
        let got = run(&device, &TaskGraph::single(t));
        if !overflow.is_empty() {
            let e = got.expect_err(&what).to_string();
            assert!(e.contains("overflowed"), "{what}: {e}");
            assert!(
                overflow
                    .iter()
                    .any(|k| e.contains(&format!("instruction {k} "))),
                "{what}: {e}, overflowing at {overflow:?}"
            );
            overflowed += 1;
            continue;
        }
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        let merged = merge_groups(&rows(&got), 0, &funcs);
        let want: Vec<Cell> = states.iter().map(State::cell).collect();
        assert_eq!(merged.len(), 1, "{what}");
        assert_eq!(merged[&Vec::new()], want, "{what}");
        answered += 1;
    }
    assert!(
        answered > 150 && overflowed > 5,
        "{answered} answered, {overflowed} overflowed"
    );
}
