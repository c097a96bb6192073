//! The Row Selector: random sums of products of comparators (every `CmpOp`; integer, date,
//! decimal and string columns; constants at and beyond pages' zone-map edges and the types'
//! ranges; nulls) select exactly the rows a plain evaluation over the written arrays selects.

use crate::common::*;
use crate::table::{every_type, Nulls};
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{Field, Schema};
use inpath_offload::graph::{AggFunc, CmpOp, Comparator, Operator, Selector, Test};
use inpath_offload::{Device, TaskGraph};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// `v`, or null one time in three.
fn null<T>(r: &mut StdRng, v: T) -> Option<T> {
    (!r.gen_ratio(1, 3)).then_some(v)
}

pub const OPS: [CmpOp; 6] = [
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

/// A column as the reference sees it.
pub enum Col {
    Int(Vec<Option<i128>>),
    Str(Vec<Option<String>>),
}

/// The reference's columns of `batch`.
pub fn columns(batch: &RecordBatch) -> Vec<Col> {
    batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            arrow_schema::DataType::Utf8 => Col::Str(strings(c)),
            arrow_schema::DataType::Float64 | arrow_schema::DataType::Boolean => {
                Col::Int(Vec::new())
            }
            _ => Col::Int(ints(c)),
        })
        .collect()
}

/// Whether comparator `c` holds on row `i` (a null never passes).
pub fn holds(cols: &[Col], c: &Comparator, i: usize) -> bool {
    match (&cols[c.column], &c.test) {
        (Col::Int(v), Test::Int { op, value }) => v[i].is_some_and(|x| op.holds(x, *value)),
        (Col::Int(v), Test::Columns { op, other }) => {
            let Col::Int(w) = &cols[*other] else {
                unreachable!()
            };
            matches!((v[i], w[i]), (Some(x), Some(y)) if op.holds(x, y))
        }
        (Col::Str(v), Test::StrIn { values, negated }) => v[i]
            .as_ref()
            .is_some_and(|s| values.iter().any(|x| x == s) != *negated),
        (Col::Str(v), Test::Like { pattern, negated }) => {
            v[i].as_ref().is_some_and(|s| like(s, pattern) != *negated)
        }
        _ => unreachable!("a test of another type"),
    }
}

/// Whether `selector` keeps row `i`.
pub fn selects(cols: &[Col], selector: &Selector, i: usize) -> bool {
    selector
        .products
        .iter()
        .all(|sum| sum.iter().any(|c| holds(cols, c, i)))
}

/// Constants worth testing column `c` (of `rows_per_page` pages) against: a random page's
/// least and greatest values and their neighbours, the column's and its type's edges and
/// beyond, and a value of the column.
fn constant(r: &mut StdRng, values: &[Option<i128>], rows_per_page: usize, type_max: i128) -> i128 {
    let page = r.gen_range(0..values.len().div_ceil(rows_per_page));
    let in_page: Vec<i128> = values[page * rows_per_page..]
        .iter()
        .take(rows_per_page)
        .flatten()
        .copied()
        .collect();
    let all: Vec<i128> = values.iter().flatten().copied().collect();
    let (lo, hi) = match in_page.is_empty() {
        true => (0, 0),
        false => (
            *in_page.iter().min().unwrap(),
            *in_page.iter().max().unwrap(),
        ),
    };
    let (glo, ghi) = (
        all.iter().min().copied().unwrap_or(0),
        all.iter().max().copied().unwrap_or(0),
    );
    match r.gen_range(0..12) {
        0 => lo,
        1 => hi,
        2 => lo - 1,
        3 => hi + 1,
        4 => glo - 1,
        5 => ghi + 1,
        6 => glo,
        7 => ghi,
        8 => type_max + 1,
        9 => -type_max - 2,
        10 => r.gen_range(lo..=hi),
        _ => all
            .get(r.gen_range(0..all.len().max(1)))
            .copied()
            .unwrap_or(0),
    }
}

/// A random comparator on one of `targets` (column, kind): 'i' integers of `type_max`, 's'
/// strings drawn from `words`; 'c' pairs of columns of one type.
fn comparator(
    r: &mut StdRng,
    cols: &[Col],
    targets: &[(usize, char, i128)],
    pairs: &[(usize, usize)],
    words: &[&str],
    rows_per_page: usize,
) -> Comparator {
    let op = OPS[r.gen_range(0..6)];
    if !pairs.is_empty() && r.gen_ratio(1, 8) {
        let (a, b) = pairs[r.gen_range(0..pairs.len())];
        return Comparator {
            column: a,
            test: Test::Columns { op, other: b },
        };
    }
    let (column, kind, type_max) = targets[r.gen_range(0..targets.len())];
    let test = match (kind, &cols[column]) {
        ('i', Col::Int(values)) => Test::Int {
            op,
            value: constant(r, values, rows_per_page, type_max),
        },
        ('s', _) => {
            let pick = |r: &mut StdRng| words[r.gen_range(0..words.len())].to_string();
            match r.gen_range(0..3) {
                0 => Test::StrIn {
                    values: (0..r.gen_range(1..4)).map(|_| pick(r)).collect(),
                    negated: r.gen_bool(0.4),
                },
                _ => {
                    let w = pick(r);
                    let pattern = match r.gen_range(0..5) {
                        0 => format!("%{}", w.chars().skip(1).collect::<String>()),
                        1 => format!("{}%", w.chars().take(2).collect::<String>()),
                        2 => format!("%{}%", w.chars().skip(1).take(2).collect::<String>()),
                        3 => w.chars().map(|c| if c == 'A' { '_' } else { c }).collect(),
                        _ => w,
                    };
                    Test::Like {
                        pattern,
                        negated: r.gen_bool(0.4),
                    }
                }
            }
        }
        _ => unreachable!(),
    };
    Comparator { column, test }
}

/// `rounds` random selectors over `batch` (written in pages of `rows_per_page`), each the
/// device's count(*) and sum(v) (column `v`, no nulls) against the reference, and the
/// device's count of selected rows; returns how many selected neither none nor all rows.
#[allow(clippy::too_many_arguments)]
fn check_selectors(
    batch: &RecordBatch,
    rows_per_page: usize,
    targets: &[(usize, char, i128)],
    pairs: &[(usize, usize)],
    words: &[&str],
    v: usize,
    rounds: usize,
    seed: u64,
) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", batch, rows_per_page);
    let device = device(&[("t", &reader)], 3, 64 << 20);
    let cols = columns(batch);
    let Col::Int(values) = &cols[v] else {
        unreachable!()
    };
    let mut r = StdRng::seed_from_u64(seed);
    let mut between = 0;
    for round in 0..rounds {
        let products = (0..r.gen_range(0..4))
            .map(|_| {
                (0..r.gen_range(1..4))
                    .map(|_| comparator(&mut r, &cols, targets, pairs, words, rows_per_page))
                    .collect()
            })
            .collect();
        let selector = Selector { products };
        let picked: Vec<usize> = (0..batch.num_rows())
            .filter(|&i| selects(&cols, &selector, i))
            .collect();
        let want_sum: i128 = picked.iter().map(|&i| values[i].unwrap()).sum();
        let mut t = task(
            "t",
            vec![inpath_offload::graph::Op::Load { column: v }],
            Operator::Aggregate {
                aggs: vec![agg(AggFunc::CountAll, None), agg(AggFunc::Sum, Some(0))],
            },
            vec![("n", "Int64"), ("s", "Decimal128(38, 0)")],
        );
        t.selector = selector;
        // The graph survives its JSON form.
        let graph = TaskGraph::from_json(&TaskGraph::single(t).to_json()).unwrap();
        device.reset_stats();
        let got = rows(&run(&device, &graph).unwrap());
        let count: i128 = got.iter().map(|row| row[0].int().unwrap()).sum();
        let sum: i128 = got.iter().filter_map(|row| row[1].int()).sum();
        let what = format!("round {round}: {:?}", graph.tasks[0].selector);
        assert_eq!(count, picked.len() as i128, "{what}");
        assert_eq!(sum, want_sum, "{what}");
        assert_eq!(device.stats().rows_selected, picked.len() as u64, "{what}");
        if !picked.is_empty() && picked.len() < batch.num_rows() {
            between += 1;
        }
    }
    between
}

/// Every stored type with 30 % nulls (values at the types' extremes mixed in, dates and
/// words repeating), and a column `v` without nulls to sum.
#[test]
fn random_selectors_over_every_type_with_nulls_select_the_references_rows() {
    let base = every_type(3_000, Nulls::Random(3), 21);
    let mut r = StdRng::seed_from_u64(4);
    let v: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..base.num_rows()).map(|_| r.gen_range(-1_000_000..1_000_000)),
    ));
    let mut fields: Vec<Field> = base
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("v", arrow_schema::DataType::Int64, false));
    let mut arrays = base.columns().to_vec();
    arrays.push(v);
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap();
    // i32, i64, date, dec(15, 2), wide dec(38, 4); low and high strings.
    let targets = [
        (0, 'i', i32::MAX as i128),
        (1, 'i', i64::MAX as i128),
        (2, 'i', i32::MAX as i128),
        (3, 'i', i64::MAX as i128),
        (4, 'i', 10i128.pow(38)),
        (6, 's', 0),
        (7, 's', 0),
    ];
    let words = [
        "AIR",
        "MAIL",
        "RAIL",
        "SHIP",
        "TRUCK",
        "",
        "FOB",
        "REG AIR",
        "é ü",
        "comment 1",
    ];
    let between = check_selectors(&batch, 128, &targets, &[(0, 0), (3, 3)], &words, 9, 150, 5);
    assert!(
        between > 40,
        "{between} of 150 selectors selected some rows"
    );
}

/// Integers, dates and decimals that trend page by page (so zone maps prune pages, and a
/// constant at a page's edge splits it), without nulls and with a third of them null, a
/// low-cardinality string column (dictionary-coded) with nulls, and columns compared with
/// each other.
#[test]
fn random_selectors_over_trending_pages_select_the_references_rows() {
    let n = 4_000;
    let mut r = StdRng::seed_from_u64(8);
    let qty: Vec<i64> = (0..n)
        .map(|i| (i as i64 / 97) * 5 + r.gen_range(-20..20))
        .collect();
    let day: Vec<Option<i32>> = (0..n)
        .map(|i| {
            let v = 9000 + i as i32 / 3 + r.gen_range(0..30);
            null(&mut r, v)
        })
        .collect();
    let ship: Vec<i32> = (0..n).map(|i| 9000 + i as i32 / 3).collect();
    let price: Vec<Option<i128>> = (0..n)
        .map(|i| {
            let v = (i as i128) * 250 + r.gen_range(-5000..5000);
            null(&mut r, v)
        })
        .collect();
    let cost: Vec<i128> = (0..n).map(|i| (i as i128) * 250).collect();
    let words = ["AIR", "MAIL", "RAIL", "SHIP", "TRUCK", "REG AIR"];
    let mode: Vec<Option<&str>> = (0..n)
        .map(|i| {
            let v = words[(i / 300 + r.gen_range(0..2)) % words.len()];
            null(&mut r, v)
        })
        .collect();
    let v: Vec<i64> = (0..n).map(|_| r.gen_range(0..1000)).collect();
    let dec = |v: arrow_array::Decimal128Array| -> ArrayRef {
        Arc::new(v.with_precision_and_scale(15, 2).unwrap())
    };
    let schema = Schema::new(vec![
        Field::new("qty", arrow_schema::DataType::Int64, false),
        Field::new("day", arrow_schema::DataType::Date32, true),
        Field::new("ship", arrow_schema::DataType::Date32, false),
        Field::new("price", arrow_schema::DataType::Decimal128(15, 2), true),
        Field::new("cost", arrow_schema::DataType::Decimal128(15, 2), false),
        Field::new("mode", arrow_schema::DataType::Utf8, true),
        Field::new("v", arrow_schema::DataType::Int64, false),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(qty)),
            Arc::new(arrow_array::Date32Array::from(day)),
            Arc::new(arrow_array::Date32Array::from(ship)),
            dec(arrow_array::Decimal128Array::from(price)),
            dec(arrow_array::Decimal128Array::from(cost)),
            Arc::new(arrow_array::StringArray::from(mode)),
            Arc::new(Int64Array::from(v)),
        ],
    )
    .unwrap();
    let targets = [
        (0, 'i', i64::MAX as i128),
        (1, 'i', i32::MAX as i128),
        (2, 'i', i32::MAX as i128),
        (3, 'i', i64::MAX as i128),
        (4, 'i', i64::MAX as i128),
        (5, 's', 0),
    ];
    let between = check_selectors(
        &batch,
        100,
        &targets,
        &[(1, 2), (2, 1), (3, 4), (4, 3)],
        &words,
        6,
        200,
        9,
    );
    assert!(
        between > 60,
        "{between} of 200 selectors selected some rows"
    );

    // A one-comparator product on a trending column prunes pages by their zone maps.
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", &batch, 100);
    let device = device(&[("t", &reader)], 2, 64 << 20);
    let mut t = task(
        "t",
        Vec::new(),
        Operator::Aggregate {
            aggs: vec![agg(AggFunc::CountAll, None)],
        },
        vec![("n", "Int64")],
    );
    t.selector = Selector {
        products: vec![vec![Comparator {
            column: 2,
            test: Test::Int {
                op: CmpOp::Lt,
                value: 9100,
            },
        }]],
    };
    let got: i128 = rows(&run(&device, &TaskGraph::single(t)).unwrap())
        .iter()
        .map(|row| row[0].int().unwrap())
        .sum();
    assert_eq!(got, 300);
    let s = device.stats();
    assert!(s.pages_skipped >= 36 && s.pages_read <= 4, "{s:?}");
}
