//! Key-range passes (issue 55): graphs whose builds or held groups outgrow the device's memory
//! run as restricted copies over ranges of a key, and answer as the whole graph does: every
//! join kind against the nested-loop reference, counted and ordered groups merged across the
//! passes (through spill files beyond a quarter of the memory), for any budget; a cancelled
//! graph stops its passes and leaves no spill file behind.

use crate::common::*;
use crate::joins::{build_task, join, kws, probe_task, reference, Shape};
use inpath_offload::graph::{
    CountGroups, GroupKey, JoinKind, JoinMethod, Op, Operator, Order, SortKey,
};
use inpath_offload::{Device, LocalDevice, TaskGraph};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every join kind (inner, semi, anti, with a residual, on one and two keys), its probe rows
/// aggregated or grouped by a build column, with 30,000 build rows under 512 KiB: in passes,
/// the same rows as the reference, at most 512 KiB held, and most cases in passes.
#[test]
fn every_join_kind_in_passes_equals_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = StdRng::seed_from_u64(91);
    let build = kws(
        (0..30_000).map(|_| r.gen_range(0..20_000)).collect(),
        &mut r,
    );
    let mut keys: Vec<i64> = (0..30_000).map(|_| r.gen_range(0..20_000)).collect();
    keys.sort_unstable();
    let sorted = kws(keys, &mut r);
    let probe = kws(
        (0..5_000).map(|_| r.gen_range(-100..21_000)).collect(),
        &mut r,
    );
    let b = write_table(dir.path(), "b", &build, 500);
    let s = write_table(dir.path(), "s", &sorted, 500);
    let p = write_table(dir.path(), "p", &probe, 250);
    let small = device(&[("b", &b), ("s", &s), ("p", &p)], 2, 512 << 10);
    let mut partitioned = 0;
    let mut cases = 0;
    for (name, table) in [("b", &build), ("s", &sorted)] {
        for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
            for (two_keys, residual) in [(false, false), (true, false), (false, true)] {
                if residual && kind == JoinKind::Inner {
                    continue;
                }
                for shape in [Shape::Aggregate, Shape::ByBuildK2] {
                    if shape == Shape::ByBuildK2 && kind != JoinKind::Inner {
                        continue;
                    }
                    let j = join(kind, two_keys, residual, JoinMethod::Auto);
                    let (probe_task, funcs, keys) = probe_task(j.clone(), shape, None);
                    let graph = TaskGraph {
                        version: inpath_offload::GRAPH_VERSION,
                        tasks: vec![build_task(name, None), probe_task],
                    };
                    let what = format!(
                        "{name}: {kind:?}, two keys {two_keys}, residual {residual}, {shape:?}"
                    );
                    small.reset_stats();
                    let got = merge_groups(
                        &rows(&run(&small, &graph).unwrap_or_else(|e| panic!("{what}: {e}"))),
                        keys,
                        &funcs,
                    );
                    let want = reference(table, &probe, &j, shape, None, None, &funcs);
                    assert_eq!(got, want, "{what}");
                    let st = small.stats();
                    assert!(st.peak_memory <= 512 << 10, "{what}: {st:?}");
                    partitioned += usize::from(st.passes >= 2);
                    cases += 1;
                }
            }
        }
    }
    assert!(
        partitioned * 4 >= cases * 3,
        "{partitioned} of {cases} cases ran in passes"
    );
    assert!(idle(&small));
}

/// A table of `n` rows in pages of 400: k (0..n/2, twice each, in order), then `kws`'s random
/// k2, w and s.
fn kv(
    dir: &std::path::Path,
    name: &str,
    n: i64,
    seed: u64,
) -> std::sync::Arc<inpath_table::TableReader> {
    let mut r = StdRng::seed_from_u64(seed);
    let batch = kws((0..n).map(|i| i / 2).collect(), &mut r);
    write_table(dir, name, &batch, 400)
}

/// COUNT_GROUPS (a `count(DISTINCT w)` by k) ordered by the count, descending, then k, cut to
/// 50 (TOPK with ties), and the same unordered: under budgets from 96 KiB (the groups through
/// spill files) to 64 MiB (whole), the same rows.
#[test]
fn counted_and_ordered_groups_merge_across_passes_and_spill() {
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    let t = kv(dir.path(), "t", 40_000, 93);
    let counted = |order: Option<Order>| {
        let mut task = task(
            "t",
            vec![Op::Load { column: 0 }, Op::Load { column: 2 }],
            Operator::AggregateGroupBy {
                keys: vec![GroupKey::Register(0), GroupKey::Register(1)],
                aggs: vec![],
            },
            vec![("k", "Int64"), ("w", "Int64")],
        );
        task.count_groups = Some(CountGroups { keys: 1 });
        task.order = order;
        TaskGraph::single(task)
    };
    let orders = [
        None,
        Some(Order {
            keys: vec![
                SortKey {
                    column: 1,
                    descending: true,
                    nulls_first: false,
                },
                SortKey {
                    column: 0,
                    descending: false,
                    nulls_first: false,
                },
            ],
            limit: Some(50),
        }),
    ];
    for order in orders {
        let graph = counted(order.clone());
        let ample = device(&[("t", &t)], 2, 64 << 20);
        let want = sorted_rows(&run(&ample, &graph).unwrap(), order.is_some());
        assert_eq!(ample.stats().passes, 0);
        for budget in [96 << 10, 256 << 10, 1 << 20] {
            let small = LocalDevice::clone(&device(&[("t", &t)], 2, budget))
                .with_spill_dir(Some(spill.path().to_path_buf()));
            let got = sorted_rows(&run(&small, &graph).unwrap(), order.is_some());
            assert_eq!(got, want, "budget {budget}, order {order:?}");
            let s = small.stats();
            assert!(s.passes >= 2, "budget {budget}: {s:?}");
            if budget == 96 << 10 {
                assert!(s.spill_bytes > 0, "budget {budget}: {s:?}");
            }
            assert!(idle(&small));
            assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0);
        }
    }
}

/// The rows, in the order sent when `ordered`, else sorted.
fn sorted_rows(batches: &[arrow_array::RecordBatch], ordered: bool) -> Vec<Vec<Cell>> {
    let mut r = rows(batches);
    if !ordered {
        r.sort();
    }
    r
}

/// A graph in passes whose stream is dropped at once: its passes stop, the device holds
/// nothing, and its spill directory is removed.
#[test]
fn a_cancelled_graph_stops_its_passes_and_leaves_no_spill_file() {
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    let t = kv(dir.path(), "t", 80_000, 97);
    let mut task = task(
        "t",
        vec![Op::Load { column: 0 }, Op::Load { column: 2 }],
        Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0), GroupKey::Register(1)],
            aggs: vec![],
        },
        vec![("k", "Int64"), ("w", "Int64")],
    );
    task.count_groups = Some(CountGroups { keys: 1 });
    let graph = TaskGraph::single(task);
    let small = device(&[("t", &t)], 2, 96 << 10).with_spill_dir(Some(spill.path().to_path_buf()));
    for wait_ms in [0, 5, 30] {
        let stream = small.submit(&graph).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        drop(stream);
        let mut clean = false;
        for _ in 0..250 {
            if idle(&small) && std::fs::read_dir(spill.path()).unwrap().count() == 0 {
                clean = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(clean, "after {wait_ms} ms: memory held or spill files left");
    }
}
