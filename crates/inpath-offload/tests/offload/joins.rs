//! Joins: every `JoinKind` (inner, semi, anti; semi and anti with a residual `<>`), one and
//! two keys, builds sorted by their key (merge), unsorted (sort-merge) and unique and dense
//! (positional), with duplicate keys and keys missing on either side, selectors on both sides
//! and groups by a build row's column: equal to a nested-loop reference. A build that
//! outgrows the budget is declined (`Error::DeviceDeclined`), never answered wrongly.

use crate::common::*;
use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use inpath_offload::graph::{
    AggFunc, CmpOp, Comparator, GroupKey, Join, JoinKind, JoinMethod, Op, Operator, Residual,
    Selector, Source, TableTask, Test,
};
use inpath_offload::{Device, TaskGraph};
use inpath_table::Error;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;

/// A table of four Int64 columns k, k2, w, s.
pub fn kws(k: Vec<i64>, r: &mut StdRng) -> RecordBatch {
    let n = k.len();
    let col = |r: &mut StdRng, lo: i64, hi: i64| -> Vec<i64> {
        (0..n).map(|_| r.gen_range(lo..hi)).collect()
    };
    let (k2, w, s) = (col(r, 0, 3), col(r, -100, 100), col(r, 0, 4));
    let schema = Schema::new(
        ["k", "k2", "w", "s"]
            .iter()
            .map(|n| Field::new(*n, DataType::Int64, false))
            .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(
        Arc::new(schema),
        [k, k2, w, s]
            .into_iter()
            .map(|v| Arc::new(Int64Array::from(v)) as _)
            .collect(),
    )
    .unwrap()
}

/// Column `c` of `batch` as i64s.
pub fn col(batch: &RecordBatch, c: usize) -> Vec<i64> {
    ints(batch.column(c))
        .into_iter()
        .map(|v| v.unwrap() as i64)
        .collect()
}

/// The build task over `table`: its rows where `w > w_above` (when some), keeping k, w, k2, s.
pub fn build_task(table: &str, w_above: Option<i64>) -> TableTask {
    let mut t = task(
        table,
        Vec::new(),
        Operator::Nop,
        vec![
            ("k", "Int64"),
            ("w", "Int64"),
            ("k2", "Int64"),
            ("s", "Int64"),
        ],
    );
    t.keep = [0, 2, 1, 3].map(Source::Column).to_vec();
    if let Some(x) = w_above {
        t.selector = Selector {
            products: vec![vec![Comparator {
                column: 2,
                test: Test::Int {
                    op: CmpOp::Gt,
                    value: x as i128,
                },
            }]],
        };
    }
    t
}

/// The join of the probe task with build task 0: by k (and k2), of `kind`, a residual
/// `probe.s <> build.s` where asked.
pub fn join(kind: JoinKind, two_keys: bool, residual: bool, method: JoinMethod) -> Join {
    Join {
        build: 0,
        probe_keys: match two_keys {
            true => vec![Source::Column(0), Source::Column(1)],
            false => vec![Source::Column(0)],
        },
        build_keys: if two_keys { vec![0, 2] } else { vec![0] },
        kind,
        method,
        residual: residual.then_some(Residual {
            probe: Source::Column(3),
            build: 3,
        }),
        condition: None,
    }
}

/// What a case asks of the probe side: its aggregates, or groups by the build row's k2.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Shape {
    Aggregate,
    ByBuildK2,
}

/// The probe task over `p` for `join`: inner joins sum v, the matched w and v * w (and take
/// w's min and max), semi and anti joins count and sum v; `ByBuildK2` groups an inner join by
/// the matched row's k2.
pub(crate) fn probe_task(
    join: Join,
    shape: Shape,
    v_above: Option<i64>,
) -> (TableTask, Vec<AggFunc>, usize) {
    let inner = join.kind == JoinKind::Inner;
    let ops = match inner {
        true => vec![
            Op::Load { column: 2 },
            Op::Fetch { join: 0, column: 1 },
            Op::Mul(0, 1),
        ],
        false => vec![Op::Load { column: 2 }],
    };
    let mut funcs = vec![AggFunc::CountAll, AggFunc::Sum];
    let mut aggs = vec![agg(AggFunc::CountAll, None), agg(AggFunc::Sum, Some(0))];
    let mut fields = vec![("n", "Int64"), ("sv", "Decimal128(38, 0)")];
    if inner {
        for (f, r, n) in [
            (AggFunc::Sum, 1, "sw"),
            (AggFunc::Sum, 2, "svw"),
            (AggFunc::Min, 1, "lo"),
            (AggFunc::Max, 1, "hi"),
        ] {
            funcs.push(f);
            aggs.push(agg(f, Some(r)));
            fields.push((n, "Decimal128(38, 0)"));
        }
    }
    let (operator, keys) = match shape {
        Shape::Aggregate => (Operator::Aggregate { aggs }, 0),
        Shape::ByBuildK2 => {
            fields.insert(0, ("k2", "Int64"));
            (
                Operator::AggregateGroupBy {
                    keys: vec![GroupKey::Build { join: 0, column: 2 }],
                    aggs,
                },
                1,
            )
        }
    };
    let mut t = task("p", ops, operator, fields);
    t.joins = vec![join];
    if let Some(x) = v_above {
        t.selector = Selector {
            products: vec![vec![Comparator {
                column: 2,
                test: Test::Int {
                    op: CmpOp::Gt,
                    value: x as i128,
                },
            }]],
        };
    }
    (t, funcs, keys)
}

/// The reference: the probe rows (v > v_above) against every build row (w > w_above), as the
/// probe task's rows (group key, then the aggregates' cells).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reference(
    build: &RecordBatch,
    probe: &RecordBatch,
    join: &Join,
    shape: Shape,
    w_above: Option<i64>,
    v_above: Option<i64>,
    funcs: &[AggFunc],
) -> HashMap<Vec<Cell>, Vec<Cell>> {
    let (bk, bk2, bw, bs) = (col(build, 0), col(build, 1), col(build, 2), col(build, 3));
    let (pk, pk2, pv, ps) = (col(probe, 0), col(probe, 1), col(probe, 2), col(probe, 3));
    let two = join.probe_keys.len() == 2;
    let mut index: HashMap<(i64, i64), Vec<usize>> = HashMap::new();
    for j in (0..bk.len()).filter(|&j| w_above.is_none_or(|x| bw[j] > x)) {
        let key = (bk[j], if two { bk2[j] } else { 0 });
        index.entry(key).or_default().push(j);
    }
    let mut groups: HashMap<Vec<Cell>, Vec<State>> = HashMap::new();
    // A task without keys emits its aggregate row even without rows.
    if shape == Shape::Aggregate {
        groups.insert(vec![], funcs.iter().map(|&f| State::empty(f)).collect());
    }
    let mut add = |key: Vec<Cell>, values: &[i128]| {
        let states = groups
            .entry(key)
            .or_insert_with(|| funcs.iter().map(|&f| State::empty(f)).collect());
        for (s, v) in states.iter_mut().zip(std::iter::once(&1).chain(values)) {
            s.add(*v);
        }
    };
    for i in (0..pk.len()).filter(|&i| v_above.is_none_or(|x| pv[i] > x)) {
        let key = (pk[i], if two { pk2[i] } else { 0 });
        let matches: Vec<usize> = index
            .get(&key)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&j| join.residual.is_none() || bs[j] != ps[i])
            .collect();
        let v = pv[i] as i128;
        match join.kind {
            JoinKind::Inner => {
                for j in matches {
                    let w = bw[j] as i128;
                    let k = match shape {
                        Shape::Aggregate => vec![],
                        Shape::ByBuildK2 => vec![Cell::Int(bk2[j] as i128)],
                    };
                    add(k, &[v, w, v * w, w, w]);
                }
            }
            JoinKind::Semi if !matches.is_empty() => add(vec![], &[v]),
            JoinKind::Anti if matches.is_empty() => add(vec![], &[v]),
            _ => {}
        }
    }
    groups
        .into_iter()
        .map(|(k, s)| (k, s.iter().map(State::cell).collect()))
        .collect()
}

/// Build tables: `sorted` (k ascending, duplicates, gaps), `unsorted` (the same keys
/// shuffled) and `dense` (k = 0..800 once each, shuffled); the probe table `p` with keys
/// beyond the builds'.
fn tables(dir: &std::path::Path) -> (Vec<(&'static str, RecordBatch)>, RecordBatch) {
    let mut r = StdRng::seed_from_u64(51);
    let mut keys: Vec<i64> = (0..1500)
        .map(|_| r.gen_range(0..1000))
        .filter(|k| k % 7 != 3)
        .collect();
    keys.sort_unstable();
    let sorted = kws(keys.clone(), &mut r);
    keys.shuffle(&mut r);
    let unsorted = kws(keys, &mut r);
    let mut dense: Vec<i64> = (0..800).collect();
    dense.shuffle(&mut r);
    let dense = kws(dense, &mut r);
    let probe = kws((0..3000).map(|_| r.gen_range(-20..1200)).collect(), &mut r);
    let builds = vec![("sorted", sorted), ("unsorted", unsorted), ("dense", dense)];
    for (name, b) in &builds {
        write_table(dir, name, b, 128);
    }
    write_table(dir, "p", &probe, 100);
    (builds, probe)
}

fn open_all(
    dir: &std::path::Path,
    names: &[&str],
) -> Vec<(String, Arc<inpath_table::TableReader>)> {
    names
        .iter()
        .map(|n| {
            let reader =
                inpath_table::TableReader::open(&dir.join(n), &inpath_seal::KeyRing::new())
                    .unwrap();
            (n.to_string(), Arc::new(reader.with_dictionary_arrays()))
        })
        .collect()
}

#[test]
fn every_join_kind_equals_a_nested_loop_reference() {
    let dir = tempfile::tempdir().unwrap();
    let (builds, probe) = tables(dir.path());
    let readers = open_all(dir.path(), &["sorted", "unsorted", "dense", "p"]);
    let refs: Vec<(&str, &Arc<inpath_table::TableReader>)> =
        readers.iter().map(|(n, r)| (n.as_str(), r)).collect();
    let device = device(&refs, 3, 64 << 20);
    let mut r = StdRng::seed_from_u64(52);
    let mut cases = 0;
    let mut nonempty = 0;
    for (name, build) in &builds {
        for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
            for (two_keys, residual) in [(false, false), (true, false), (false, true)] {
                if residual && kind == JoinKind::Inner {
                    continue;
                }
                for round in 0..4 {
                    let shape = match kind == JoinKind::Inner && round % 2 == 1 {
                        true => Shape::ByBuildK2,
                        false => Shape::Aggregate,
                    };
                    let method = match (round, *name) {
                        (2, "dense") if !two_keys => JoinMethod::Positional,
                        (2, _) => JoinMethod::Merge,
                        _ => JoinMethod::Auto,
                    };
                    let w_above = (round >= 2).then(|| r.gen_range(-100..50));
                    let v_above = r.gen_bool(0.5).then(|| r.gen_range(-100..50));
                    let j = join(kind, two_keys, residual, method);
                    let (probe_task, funcs, keys) = probe_task(j.clone(), shape, v_above);
                    let graph = TaskGraph {
                        version: inpath_offload::GRAPH_VERSION,
                        tasks: vec![build_task(name, w_above), probe_task],
                    };
                    let what = format!("{name}: {:?}", graph.tasks[1]);
                    device.reset_stats();
                    let got = rows(&run(&device, &graph).unwrap_or_else(|e| panic!("{what}: {e}")));
                    let want = reference(build, &probe, &j, shape, w_above, v_above, &funcs);
                    let merged = merge_groups(&got, keys, &funcs);
                    assert_eq!(merged, want, "{what}");
                    let s = device.stats();
                    assert_eq!(
                        s.joins_positional + s.joins_merge + s.joins_sort_merge,
                        1,
                        "{what}: {s:?}"
                    );
                    assert!(s.rows_kept > 0, "{what}: {s:?}");
                    if want.values().any(|v| v[0] != Cell::Int(0)) {
                        nonempty += 1;
                    }
                    cases += 1;
                }
            }
        }
    }
    assert!(
        nonempty > cases * 3 / 4,
        "{nonempty} of {cases} cases matched rows"
    );
}

/// A semi or anti join whose build keeps only its integer key: the lanes set the keys' bits in
/// a bitmap over the key column's zone-map range instead of keeping its rows. 60,000 build
/// rows over 2,000 keys (unsorted, repeated) would hold 240 KB kept as 32-bit values, beyond a
/// 128 KiB device, and run in key-range passes; their bitmap (256 bytes a lane) fits, so the
/// graph runs whole, with or without a filter on the build, and answers as the reference does,
/// under an ample budget too. A build keeping more than its key keeps its rows (the test
/// above).
#[test]
fn a_semi_or_anti_build_of_one_key_is_a_bitmap_the_lanes_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = StdRng::seed_from_u64(54);
    let build = kws(
        (0..60_000).map(|_| r.gen_range(-500..1500)).collect(),
        &mut r,
    );
    let probe = kws((0..3000).map(|_| r.gen_range(-700..1700)).collect(), &mut r);
    let b = write_table(dir.path(), "b", &build, 1000);
    let p = write_table(dir.path(), "p", &probe, 100);
    let mut cases = 0;
    for kind in [JoinKind::Semi, JoinKind::Anti] {
        let j = join(kind, false, false, JoinMethod::Auto);
        for w_above in [None, Some(0)] {
            let (probe_task, funcs, _) = probe_task(j.clone(), Shape::Aggregate, None);
            let mut keys_only = build_task("b", w_above);
            keys_only.keep = vec![Source::Column(0)];
            keys_only.output.fields.truncate(1);
            let graph = TaskGraph {
                version: inpath_offload::GRAPH_VERSION,
                tasks: vec![keys_only, probe_task],
            };
            let want = reference(&build, &probe, &j, Shape::Aggregate, w_above, None, &funcs);
            for (lanes, budget) in [(3, 128 << 10), (2, 64 << 20)] {
                let what = format!("{kind:?}, w above {w_above:?}, {lanes} lanes, {budget} bytes");
                let d = device(&[("b", &b), ("p", &p)], lanes, budget);
                let got = run(&d, &graph).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(merge_groups(&rows(&got), 0, &funcs), want, "{what}");
                let s = d.stats();
                assert_eq!(
                    (s.graphs_partitioned, s.passes, s.graphs_refused),
                    (0, 0, 0),
                    "{what}: {s:?}"
                );
                assert!(s.rows_kept > 0 && s.peak_memory <= budget, "{what}: {s:?}");
                assert!(idle(&d), "{what}: the bitmap is released");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 8);
}

/// 40,000 build rows kept (four columns) outgrow 512 KiB: the device runs the graph in
/// key-range passes instead (the build restricted to each range of the probe's key) and
/// answers as the reference does, holding nothing afterwards; the second time it goes
/// straight to the passes. Where every row has one key, no range can be split off: the device
/// declines, counts the refusal, and declines the same graph again at once.
#[test]
fn a_build_that_outgrows_the_budget_runs_in_passes_or_is_declined() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = StdRng::seed_from_u64(53);
    let big = kws(
        (0..40_000).map(|_| r.gen_range(0..30_000)).collect(),
        &mut r,
    );
    let probe = kws((0..3000).map(|_| r.gen_range(0..35_000)).collect(), &mut r);
    let one = kws(vec![7; 40_000], &mut r);
    let probe_one = kws(vec![7; 3000], &mut r);
    let b = write_table(dir.path(), "big", &big, 1000);
    let p = write_table(dir.path(), "p", &probe, 100);
    let o = write_table(dir.path(), "one", &one, 1000);
    let po = write_table(dir.path(), "p1", &probe_one, 100);
    let j = join(JoinKind::Inner, false, false, JoinMethod::Auto);
    let (probe_task, funcs, _) = probe_task(j.clone(), Shape::Aggregate, None);
    let graph = TaskGraph {
        version: inpath_offload::GRAPH_VERSION,
        tasks: vec![build_task("big", None), probe_task.clone()],
    };
    let want = reference(&big, &probe, &j, Shape::Aggregate, None, None, &funcs);
    for lanes in [1, 2] {
        let small = device(&[("big", &b), ("p", &p)], lanes, 512 << 10);
        for attempt in 1..=2 {
            let got = merge_groups(&rows(&run(&small, &graph).unwrap()), 0, &funcs);
            assert_eq!(got, want, "{lanes} lanes, attempt {attempt}");
            let s = small.stats();
            assert_eq!(
                (s.graphs_partitioned, s.graphs_refused),
                (attempt, 0),
                "{s:?}"
            );
            assert!(s.passes >= 2 * attempt, "{s:?}");
            assert!(s.peak_memory <= 512 << 10, "{s:?}");
        }
        assert!(idle(&small), "the passes hold nothing once done");
    }
    let ample = device(&[("big", &b), ("p", &p)], 2, 64 << 20);
    let got = merge_groups(&rows(&run(&ample, &graph).unwrap()), 0, &funcs);
    assert_eq!(got, want);
    assert_eq!(
        (ample.stats().graphs_partitioned, ample.stats().passes),
        (0, 0)
    );
    assert!(ample.stats().rows_kept >= 40_000);

    let mut single = graph.clone();
    single.tasks[0].table = "one".into();
    single.tasks[1].table = "p1".into();
    for lanes in [1, 2] {
        let small = device(&[("one", &o), ("p1", &po)], lanes, 512 << 10);
        for attempt in 1..=2 {
            let e = run(&small, &single).expect_err("declined");
            assert!(
                matches!(e, Error::DeviceDeclined { memory: true, .. }),
                "{e}"
            );
            assert_eq!(small.stats().graphs_refused, attempt, "{e}");
        }
        assert!(idle(&small), "the declined graph holds nothing");
    }
}
