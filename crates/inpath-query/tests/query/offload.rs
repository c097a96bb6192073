//! Offload (issue 14): the 22 TPC-H queries give the same answers with the device on and off,
//! the aggregates the device takes run there (class, graphs, counters), a group-by that spills
//! gives the reference result, and results do not depend on lanes or the memory budget. The
//! device's tests that need no SQL (Row Selector, transformer, bad graphs and budgets, the
//! pipe) are inpath-offload's own.

use crate::common::*;
use arrow_array::RecordBatch;
use datafusion::datasource::MemTable;
use inpath_offload::graph::{
    Agg, AggFunc, CountGroups, JoinKind, MaskSource, Op, Operator, Output, Program, Selector,
    TableTask,
};
use inpath_offload::{Device, LocalDevice, TaskGraph};
use inpath_query::sql::OffloadOptions;
use inpath_query::tpch_queries::query;
use inpath_query::SqlSession;
use inpath_seal::KeyRing;
use inpath_table::TableReader;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

pub(crate) fn offload(memory: Option<u64>, lanes: Option<usize>) -> Option<OffloadOptions> {
    Some(OffloadOptions {
        memory,
        lanes,
        ..OffloadOptions::default()
    })
}

/// TPC-H SF 0.01 as plain pages in a temporary directory, and a session over it without
/// offload.
pub(crate) fn sf001_plain() -> (tempfile::TempDir, SqlSession) {
    let dir = tempfile::tempdir().unwrap();
    gen(dir.path(), 0.01, plain(), 4096);
    let off = SqlSession::open(dir.path(), &KeyRing::new(), 2).unwrap();
    (dir, off)
}

/// A session over `dir` with offload on: `memory` bytes (the default when none), `lanes`.
pub(crate) fn offloaded(dir: &Path, memory: Option<u64>, lanes: usize) -> SqlSession {
    SqlSession::open_with(dir, &KeyRing::new(), 2, offload(memory, Some(lanes))).unwrap()
}

/// Rows as sorted text, for comparing results whose row order the query leaves open.
pub(crate) fn rows_text(batches: &[RecordBatch]) -> Vec<String> {
    let options = arrow_cast_options();
    let mut rows = Vec::new();
    for b in batches {
        let f: Vec<_> = b
            .columns()
            .iter()
            .map(|c| {
                datafusion::arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &options)
                    .unwrap()
            })
            .collect();
        for i in 0..b.num_rows() {
            rows.push(
                f.iter()
                    .map(|f| f.value(i).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    rows
}

/// Equal rows: every field the same text, except doubles, which may differ by 1e-12 relative
/// (the device averages exact sums; the host adds doubles in its own order).
pub(crate) fn same_rows(got: &[String], want: &[String], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        let ok = g.split('|').zip(w.split('|')).all(|(a, b)| {
            a == b
                || match (a.parse::<f64>(), b.parse::<f64>()) {
                    (Ok(x), Ok(y)) if a.contains('.') && b.contains('.') => {
                        (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
                    }
                    _ => false,
                }
        });
        assert!(ok, "{what}:\n  got  {g}\n  want {w}");
    }
}

pub(crate) fn arrow_cast_options() -> datafusion::arrow::util::display::FormatOptions<'static> {
    datafusion::arrow::util::display::FormatOptions::default().with_null("NULL")
}

/// The 22 queries with the device on against the pinned answers; each query's class.
pub(crate) fn all_22_offloaded(
    dir: &Path,
    keys: &KeyRing,
    threads: usize,
    sf: f64,
    what: &str,
) -> Vec<&'static str> {
    let on = SqlSession::open_with(dir, keys, threads, offload(None, None)).unwrap();
    all_22(&on, sf, what);
    (1..=22)
        .map(|n| on.explain_offload(query(n).unwrap()).unwrap().class)
        .collect()
}

#[test]
fn all_22_queries_answer_with_offload_and_q1_q6_run_on_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let plain = plain();
    let sealed = lz4_gcm();
    gen(&dir.path().join("plain"), 0.01, plain, 4096);
    gen(&dir.path().join("sealed"), 0.01, sealed, 8192);
    let classes = all_22_offloaded(
        &dir.path().join("plain"),
        &KeyRing::new(),
        1,
        0.01,
        "plain, 1 thread",
    );
    assert_eq!(classes[0], "full", "Q1");
    assert_eq!(classes[5], "full", "Q6");
    let sealed_classes = all_22_offloaded(
        &dir.path().join("sealed"),
        &ring(),
        2,
        0.01,
        "sealed, 2 threads",
    );
    assert_eq!(classes, sealed_classes);

    // Explain shows the graph the device runs: Q7's two nations restrict supplier and
    // customer where they are read (semi-join reductions), through build tasks the device
    // adds before the others.
    let on = SqlSession::open_with(
        &dir.path().join("plain"),
        &KeyRing::new(),
        2,
        offload(None, None),
    )
    .unwrap();
    let explained = on.explain_offload(query(7).unwrap()).unwrap();
    let mut reductions = explained.reductions.clone();
    reductions.sort();
    assert_eq!(
        reductions,
        [
            "nation restricts customer.c_nationkey",
            "nation restricts supplier.s_nationkey"
        ],
        "{:?}",
        explained.device_graphs
    );
    let (planned, run) = (&explained.graphs[0], &explained.device_graphs[0]);
    assert_eq!(run.tasks.len(), planned.tasks.len() + 2);
    assert_eq!(
        (&*run.tasks[0].table, &*run.tasks[1].table),
        ("nation", "nation")
    );
    run.check().unwrap();
    // Q1 reads one table: nothing to reduce, the graph runs as planned.
    let explained = on.explain_offload(query(1).unwrap()).unwrap();
    assert!(explained.reductions.is_empty());
    assert_eq!(explained.device_graphs, explained.graphs);

    // Offload on and off give the same rows for the offloaded queries, for any lanes and
    // budget that holds a page.
    let off = SqlSession::open(&dir.path().join("sealed"), &ring(), 2).unwrap();
    for n in [1, 6, 3, 10] {
        let want = off.sql(query(n).unwrap()).unwrap();
        for (memory, lanes) in [(None, Some(1)), (None, Some(3)), (Some(3 << 20), Some(2))] {
            let on = SqlSession::open_with(
                &dir.path().join("sealed"),
                &ring(),
                2,
                offload(memory, lanes),
            )
            .unwrap();
            let got = on.sql(query(n).unwrap()).unwrap();
            same_rows(
                &rows_text(&got.batches),
                &rows_text(&want.batches),
                &format!("Q{n}, memory {memory:?}, lanes {lanes:?}"),
            );
            let s = on.device_stats().unwrap();
            assert_eq!(s.graphs, 1, "Q{n}: {s:?}");
            assert_eq!(s.graphs_refused, 0, "Q{n}: {s:?}");
            if n == 3 {
                // customer by custkey: positional; orders (sorted by orderkey) with lineitem:
                // a streaming merge.
                assert_eq!((s.joins_positional, s.joins_merge), (1, 1), "{s:?}");
                assert!(s.rows_kept > 0, "{s:?}");
            }
            assert!(
                s.pages_read > 0 && s.bytes_read > 0 && s.bytes_sent > 0,
                "{s:?}"
            );
            // The host's scans read nothing: every page went to the device.
            assert_eq!(on.stats().records_read, 0, "Q{n}");
        }
    }
}

#[test]
fn string_prefixes_select_on_the_device_as_the_host_does() {
    let (dir, off) = sf001_plain();
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, None)).unwrap();
    let sum = "SELECT count(*) AS n, sum(c_acctbal) AS b FROM customer WHERE ";
    // (condition, on the device)
    for (condition, device) in [
        ("substr(c_phone, 1, 2) IN ('13', '31', '23')", true),
        ("substring(c_phone from 1 for 2) NOT IN ('13', '31')", true),
        ("substr(c_phone, 1, 3) = '13-'", true),
        ("substr(c_phone, 1, 2) <> '25'", true),
        // A wildcard or a value of another length is no prefix test: the host's.
        ("substr(c_phone, 1, 2) IN ('1_', '31')", false),
        ("substr(c_phone, 1, 2) <> '1'", false),
        ("substr(c_phone, 2, 2) = '3-'", false),
    ] {
        let text = format!("{sum}{condition}");
        let want = rows_text(&off.sql(&text).unwrap().batches);
        assert!(!want[0].starts_with("0|"), "{text}: {want:?}");
        same_rows(&rows_text(&on.sql(&text).unwrap().batches), &want, &text);
        let class = on.explain_offload(&text).unwrap().class;
        assert_eq!(class == "full", device, "{text}: {class}");
    }
}

/// A table with random decimals, dates, integers and two dictionary strings, written in small
/// pages; the same rows in DataFusion's memory table.
pub(crate) fn random_table(dir: &Path, rows: usize, seed: u64) -> (RecordBatch, SqlSession) {
    let batch = crate::common::random_table(dir, rows, seed);
    let session = SqlSession::open(dir, &KeyRing::new(), 2).unwrap();
    (batch, session)
}

/// The rows (as text, in order) of a statement run by DataFusion over `batch` as table `t` in
/// memory: the reference, which evaluates every expression itself.
pub(crate) fn in_memory(batch: &RecordBatch) -> impl Fn(&str) -> Vec<String> {
    let reference = datafusion::prelude::SessionContext::new();
    reference
        .register_table(
            "t",
            Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch.clone()]]).unwrap()),
        )
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    move |sql: &str| rows_text(&inpath_query::sql::collect_sql(&reference, &runtime, sql).unwrap())
}

#[test]
fn random_aggregates_equal_the_host_and_a_spilling_group_by_gives_the_reference_result() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, _) = random_table(dir.path(), 20_000, 7);
    // The reference: DataFusion over the same rows in memory.
    let reference = in_memory(&batch);
    let expect = |sql: &str| -> Vec<String> {
        let mut rows = reference(sql);
        rows.sort();
        rows
    };
    let statements = [
        "SELECT sum(price), count(*), min(day), max(qty) FROM t WHERE disc BETWEEN 0.02 AND 0.05",
        "SELECT flag, sum(price * (1 - disc)), sum(price * (1 - disc) * (1 + disc)), count(*) FROM t WHERE day < date '1995-01-01' GROUP BY flag",
        "SELECT name, flag, sum(qty), max(price), count(*) FROM t WHERE flag IN ('A', 'R') OR qty > 40 GROUP BY name, flag",
        "SELECT qty, sum(price) FROM t WHERE name LIKE 'name 1%' AND disc <> 0.03 GROUP BY qty",
        "SELECT sum(price) FROM t WHERE price < 0.005 AND price >= -0.005",
        "SELECT count(*) FROM t WHERE qty > 1000",
        // Most rows selected, three dictionary groups, sums and counts: every row goes through
        // the transformer with the unselected ones zeroed and skipped (no gather).
        "SELECT flag, sum(price), sum(price * (1 - disc) * (1 + disc)), avg(qty), count(*) FROM \
         t WHERE qty > -45 GROUP BY flag",
        "SELECT flag, count(*), sum(qty) FROM t WHERE qty <> 7 AND day > date '1991-12-01' GROUP \
         BY flag",
    ];
    // Budgets: the default, and one so small the name groups spill many times.
    for (memory, lanes) in [
        (None, None),
        (Some(256 << 10), Some(1)),
        (Some(900 << 10), Some(3)),
    ] {
        let on =
            SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(memory, lanes)).unwrap();
        for sql in statements {
            let explain = on.explain_offload(sql).unwrap();
            assert_eq!(explain.class, "full", "{sql}: {:?}", explain.decisions);
            let mut got = rows_text(&on.sql(sql).unwrap().batches);
            got.sort();
            assert_eq!(
                got,
                expect(sql),
                "{sql}, memory {memory:?}, lanes {lanes:?}"
            );
        }
        if let Some(budget) = memory {
            let s = on.device_stats().unwrap();
            assert!(s.groups_spilled > 0, "{s:?}");
            assert!(s.peak_memory <= budget, "{s:?}");
        }
    }
}

/// TOPK equals sort + limit, and SORT a sort: group-bys ordered and cut on the device against
/// DataFusion over the same rows in memory, row for row in order, for any lanes, with ties on
/// the keys the device orders by (every tied group is sent), and with a budget so small the
/// groups spill (then the device cuts nothing).
#[test]
fn topk_equals_sort_and_limit_for_any_lanes_budget_and_ties() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, _) = random_table(dir.path(), 20_000, 11);
    let expect = in_memory(&batch);
    let statements = [
        // Counts tie often: the ties with the tenth group are all sent, the host picks by name.
        "SELECT name, count(*) AS n, sum(qty) AS q FROM t GROUP BY name ORDER BY n DESC, name \
         LIMIT 10",
        "SELECT qty, sum(price) AS s FROM t GROUP BY qty ORDER BY s, qty LIMIT 5",
        "SELECT name, flag, max(price) AS m, min(day) AS d FROM t WHERE qty > 0 GROUP BY name, \
         flag ORDER BY m DESC, d, name, flag LIMIT 25",
        "SELECT day, sum(price * (1 - disc)) AS s FROM t GROUP BY day ORDER BY s DESC, day LIMIT 1",
        // SORT: strings the device does not order by, and integers it does.
        "SELECT flag, sum(price) AS s FROM t GROUP BY flag ORDER BY flag",
        "SELECT qty, count(*) AS n FROM t GROUP BY qty ORDER BY qty DESC",
    ];
    for (memory, lanes) in [(None, Some(1)), (None, Some(3)), (Some(256 << 10), Some(1))] {
        let on =
            SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(memory, lanes)).unwrap();
        for sql in statements {
            let explain = on.explain_offload(sql).unwrap();
            assert_eq!(explain.class, "full", "{sql}: {:?}", explain.decisions);
            assert!(
                explain.plan.contains("TOPK") || explain.plan.contains("SORT by"),
                "{sql}: {}",
                explain.plan
            );
            let got = rows_text(&on.sql(sql).unwrap().batches);
            assert_eq!(
                got,
                expect(sql),
                "{sql}, memory {memory:?}, lanes {lanes:?}"
            );
        }
        let s = on.device_stats().unwrap();
        if memory.is_none() {
            assert!(s.groups_cut > 1000, "{s:?}");
        } else {
            assert!(s.groups_spilled > 0, "{s:?}");
        }
    }
}

/// An AGGREGATE task over every row of table `t`: `ops`, then `aggs` emitted as `fields`.
fn aggregate_over_t(ops: Vec<Op>, aggs: Vec<Agg>, fields: Vec<(String, String)>) -> TableTask {
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
fn sum_over_t(ops: Vec<Op>, arg: usize, scale: i8) -> TableTask {
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

/// COUNT_GROUPS: `count(DISTINCT x)` grouped by leading keys is counted on the device (the
/// distinct rows never reach the host) with the host's answers, for any lanes; under a
/// budget too small for the groups the device declines and the host counts.
/// `sql`'s offload plan, fully offloaded with no host aggregate (the device stands in for the
/// Final one), and its last graph's last task.
pub(crate) fn device_finishes(
    on: &SqlSession,
    sql: &str,
) -> (inpath_query::sql::OffloadExplain, TableTask) {
    let explain = on.explain_offload(sql).unwrap();
    assert_eq!(explain.class, "full", "{sql}: {:?}", explain.decisions);
    assert!(
        !explain.plan.contains("AggregateExec"),
        "{sql}: {}",
        explain.plan
    );
    let last = explain.graphs.last().unwrap().tasks.last().unwrap().clone();
    (explain, last)
}

/// `got` and `want` equal as sets of rows.
pub(crate) fn same_row_set(mut got: Vec<String>, mut want: Vec<String>, what: &str) {
    got.sort();
    want.sort();
    assert_eq!(got, want, "{what}");
}

/// Why a local device over table `t` under `dir` (2 lanes, 64 MiB) refuses a one-task graph.
fn refused_over_t(dir: &Path, task: TableTask) -> String {
    let reader = Arc::new(TableReader::open(&dir.join("t"), &KeyRing::new()).unwrap());
    let device = LocalDevice::new(HashMap::from([("t".to_string(), reader)]), 2, 64 << 20).unwrap();
    match device.submit(&TaskGraph::single(task)) {
        Ok(_) => panic!("the graph was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn count_distinct_is_counted_on_the_device_as_the_host_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, _) = random_table(dir.path(), 20_000, 13);
    let reference = in_memory(&batch);
    let statements = [
        "SELECT flag, count(DISTINCT qty) FROM t GROUP BY flag",
        "SELECT flag, count(DISTINCT name) AS c FROM t WHERE qty > 0 GROUP BY flag ORDER BY c \
         DESC, flag",
        "SELECT flag, qty, count(DISTINCT day) FROM t WHERE disc < 0.05 GROUP BY flag, qty",
        "SELECT name, count(DISTINCT flag) FROM t GROUP BY name",
        // Sorted whole by every column: the device sorts the counts' rows (strings too) and
        // stands in for the host's Final aggregate and its sort.
        "SELECT name, count(DISTINCT flag) AS c FROM t GROUP BY name ORDER BY c DESC, name",
        "SELECT flag, qty, count(DISTINCT day) AS c FROM t GROUP BY flag, qty ORDER BY qty \
         DESC, c, flag",
        // TOPK: the device cuts to the first rows and their ties; the host still sorts.
        "SELECT name, count(DISTINCT qty) AS c FROM t GROUP BY name ORDER BY c DESC, name \
         LIMIT 3",
    ];
    // One thread plans Single aggregates (split around the device), two Partial ones.
    for (memory, lanes, threads) in [
        (None, None, 2),
        (None, Some(1), 1),
        (Some(2 << 20), Some(3), 2),
        (Some(256 << 10), Some(2), 2),
    ] {
        let on =
            SqlSession::open_with(dir.path(), &KeyRing::new(), threads, offload(memory, lanes))
                .unwrap();
        for sql in statements {
            // The device's rows are the Final aggregate's: the host neither merges nor, for
            // a whole sort, sorts them.
            let (explain, last) = device_finishes(&on, sql);
            assert!(last.count_groups.is_some(), "{sql}: {}", explain.plan);
            // (One partition: over several, the device's rows are hashed to the Final
            // aggregate's partitions and the host sorts each.)
            if threads == 1 {
                assert_eq!(
                    explain.plan.contains("SortExec"),
                    sql.contains("LIMIT"),
                    "{sql}: {}",
                    explain.plan
                );
            }
            assert_eq!(last.order.is_some(), sql.contains("ORDER BY"), "{sql}");
            let mut got = rows_text(&on.sql(sql).unwrap().batches);
            let mut want = reference(sql);
            if !sql.contains("ORDER BY") {
                got.sort();
                want.sort();
            }
            assert_eq!(got, want, "{sql}, memory {memory:?}, lanes {lanes:?}");
        }
        let s = on.device_stats().unwrap();
        if memory == Some(256 << 10) {
            // The name and day groups outgrow 128 KiB a lane: declined, and the host counts
            // the distinct rows of the plan it replaced (whose device group-by spills).
            assert!(s.graphs_refused > 0, "{s:?}");
        } else {
            assert_eq!((s.graphs_refused, s.groups_spilled), (0, 0), "{s:?}");
        }
    }

    // A partitioned join over a finished count: the device's rows keep the Final aggregate's
    // hash partitions the join relies on.
    let on = offloaded(dir.path(), None, 2);
    for setting in [
        "hash_join_single_partition_threshold",
        "hash_join_single_partition_threshold_rows",
    ] {
        on.sql(&format!("SET datafusion.optimizer.{setting} = 0"))
            .unwrap();
    }
    let sql = "SELECT g.name, g.c, h.n FROM (SELECT name, count(DISTINCT flag) AS c FROM t \
               GROUP BY name) g JOIN (SELECT name, count(*) AS n FROM t GROUP BY name) h ON \
               g.name = h.name";
    let explain = on.explain_offload(sql).unwrap();
    assert!(
        explain.plan.contains("mode=Partitioned"),
        "{}",
        explain.plan
    );
    // Neither Final aggregate is the host's: the plain count's groups are sent whole.
    assert!(!explain.plan.contains("AggregateExec"), "{}", explain.plan);
    assert_eq!(
        explain
            .plan
            .matches("RepartitionExec: partitioning=Hash")
            .count(),
        2,
        "{}",
        explain.plan
    );
    same_row_set(
        rows_text(&on.sql(sql).unwrap().batches),
        reference(sql),
        sql,
    );

    // Only the last task's group-by without aggregates, of one key more, counts groups.
    let mut task = sum_over_t(vec![Op::Load { column: 0 }], 0, 2);
    task.count_groups = Some(CountGroups { keys: 0 });
    let e = refused_over_t(dir.path(), task);
    assert!(e.contains("counts groups"), "{e}");
}

/// A device's plain groups (sums, counts, minima, maxima) are sent whole and stand in for the
/// host's Final aggregate. Rows equal DataFusion's over the same rows in memory for 1-3 lanes:
/// whole (one batch) under the default budget; spilled under a small one, when the Final
/// aggregate merges them as they come. An average keeps the host's Final aggregate (its partial
/// is a sum and a count), and whole groups from a task without groups are refused.
#[test]
fn plain_groups_sent_whole_stand_in_for_the_final_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let (batch, _) = random_table(dir.path(), 20_000, 17);
    let reference = in_memory(&batch);
    let statements = [
        "SELECT name, sum(price), count(*), min(day), max(qty) FROM t GROUP BY name",
        "SELECT flag, qty, sum(price * (1 - disc)) FROM t WHERE disc < 0.05 GROUP BY flag, qty",
        "SELECT name, sum(qty) AS s FROM t GROUP BY name HAVING sum(qty) > 10",
    ];
    // One thread plans Single aggregates (split around the device), two Partial ones.
    for (memory, lanes, threads) in [
        (None, Some(1), 1),
        (None, None, 2),
        (None, Some(3), 2),
        (Some(256 << 10), Some(1), 1),
        (Some(256 << 10), Some(2), 2),
    ] {
        let on =
            SqlSession::open_with(dir.path(), &KeyRing::new(), threads, offload(memory, lanes))
                .unwrap();
        for sql in statements {
            let (explain, last) = device_finishes(&on, sql);
            assert!(last.whole_groups, "{sql}: {}", explain.plan);
            same_row_set(
                rows_text(&on.sql(sql).unwrap().batches),
                reference(sql),
                &format!("{sql}, memory {memory:?}, lanes {lanes:?}"),
            );
        }
        let s = on.device_stats().unwrap();
        match memory {
            Some(_) => assert!(s.groups_spilled > 0, "{s:?}"),
            None => assert_eq!(s.groups_spilled, 0, "{s:?}"),
        }
    }

    let on = offloaded(dir.path(), None, 2);
    let sql = "SELECT flag, avg(qty), sum(qty) FROM t GROUP BY flag";
    let explain = on.explain_offload(sql).unwrap();
    let last = explain.graphs.last().unwrap().tasks.last().unwrap();
    assert!(!last.whole_groups, "{}", explain.plan);
    assert!(
        explain.plan.contains("AggregateExec: mode=Final"),
        "{}",
        explain.plan
    );
    same_row_set(
        rows_text(&on.sql(sql).unwrap().batches),
        reference(sql),
        sql,
    );

    let mut task = sum_over_t(vec![Op::Load { column: 0 }], 0, 2);
    task.whole_groups = true;
    let e = refused_over_t(dir.path(), task);
    assert!(e.contains("sends its groups whole"), "{e}");
}

/// A filter on an aggregate's groups that a join keeps (TPC-H Q18's
/// `HAVING sum(l_quantity) > 300` under `o_orderkey IN (...)`) runs on the device as the groups' HAVING, and the semi
/// join filters orders where they are kept: Q18 and variations are `full` and give the host's
/// rows for any lanes and budget. A filter that is not a HAVING the device tests (an average,
/// a key, an inexact constant) leaves the host its plan.
#[test]
fn having_on_joined_groups_runs_on_the_device_as_the_host_filters() {
    let (dir, off) = sf001_plain();
    let statements = [
        query(18).unwrap().replace("> 300", "> 250"),
        "SELECT o_orderpriority, count(*), sum(o_totalprice) FROM orders WHERE o_orderkey IN \
         (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING sum(l_quantity) > 150 AND \
         count(*) >= 5) GROUP BY o_orderpriority"
            .to_string(),
        "SELECT count(*), sum(o_totalprice) FROM orders WHERE o_orderkey IN (SELECT l_orderkey \
         FROM lineitem GROUP BY l_orderkey HAVING max(l_quantity) <= 30 AND min(l_quantity) > 2)"
            .to_string(),
        "SELECT p_brand, count(*), max(p_retailprice) FROM part WHERE p_partkey IN (SELECT \
         l_partkey FROM lineitem GROUP BY l_partkey HAVING sum(l_quantity) >= 200.5) GROUP BY \
         p_brand"
            .to_string(),
    ];
    for sql in &statements {
        let having = |graphs: &[TaskGraph]| tasks(graphs).any(|t| !t.having.is_empty());
        offloaded_as_the_host(dir.path(), &off, sql, &having, 0);
    }
    let on = offloaded(dir.path(), None, 2);
    for sql in [
        "SELECT count(*) FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP \
         BY l_orderkey HAVING avg(l_quantity) > 30)",
        "SELECT count(*) FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP \
         BY l_orderkey HAVING sum(l_quantity) > 100.005)",
    ] {
        let explain = on.explain_offload(sql).unwrap();
        assert_ne!(explain.class, "full", "{sql}: {}", explain.plan);
        let want = rows_text(&off.sql(sql).unwrap().batches);
        assert_eq!(rows_text(&on.sql(sql).unwrap().batches), want, "{sql}");
    }
}

/// A correlated aggregate compared with each row (TPC-H Q17's `l_quantity < (SELECT 0.2 *
/// avg(l_quantity) ... WHERE l_partkey = p_partkey)`) runs on the device: the aggregate's
/// groups are a build, and the semi join's condition computes the host's doubles and casts
/// for each pair. Q17 and variations are `full` and give the host's rows for any lanes and
/// budget; so is Q20 (a sum in doubles, and the rows of joins under a sort without a limit).
/// An average of prices (not whole at their scale: the host's sum of doubles rounds in its
/// own order) is declined at run time, and the host answers.
#[test]
fn a_correlated_aggregate_compared_with_rows_runs_on_the_device() {
    let (dir, off) = sf001_plain();
    let statements = [
        query(17).unwrap().to_string(),
        "SELECT sum(l_extendedprice), count(*) FROM lineitem, part WHERE p_partkey = l_partkey \
         AND p_size < 20 AND l_quantity < (SELECT 0.5 * avg(l_quantity) FROM lineitem WHERE \
         l_partkey = p_partkey)"
            .to_string(),
        "SELECT p_brand, count(*) FROM lineitem, part WHERE p_partkey = l_partkey AND \
         l_extendedprice >= (SELECT 1.37 * avg(l_extendedprice) FROM lineitem WHERE l_partkey = \
         p_partkey) GROUP BY p_brand"
            .to_string(),
        // Q20: the rows of a tree of joins under a sort without a limit, whose partsupp rows
        // meet groups of lineitem by part and supplier through `0.5 * sum` in doubles; the
        // groups reduced to the parts the query names.
        query(20).unwrap().to_string(),
        query(20)
            .unwrap()
            .replace("0.5 * sum(l_quantity)", "0.2 * sum(l_quantity)")
            .replace("'forest%'", "'a%'"),
        // An integer condition: some other supplier's line in the order.
        "SELECT count(*) AS n FROM lineitem l1 WHERE EXISTS (SELECT 1 FROM (SELECT l_orderkey \
         k, max(l_suppkey) m FROM lineitem GROUP BY l_orderkey) g WHERE g.k = l1.l_orderkey AND \
         g.m <> l1.l_suppkey)"
            .to_string(),
    ];
    for sql in &statements {
        let condition = |graphs: &[TaskGraph]| {
            // Q17's groups are only those of the parts it selects: the groups task first
            // semi-joins a copy of the part build (not where the key is lineitem's own).
            let reduced = tasks(graphs).any(|t| {
                matches!(t.operator, Operator::AggregateGroupBy { .. })
                    && t.joins.iter().any(|j| j.kind == JoinKind::Semi)
            });
            tasks(graphs)
                .flat_map(|t| &t.joins)
                .any(|j| j.condition.is_some())
                && reduced != sql.contains("EXISTS")
        };
        let refused = u64::from(sql.contains("avg(l_extendedprice)"));
        offloaded_as_the_host(dir.path(), &off, sql, &condition, refused);
    }
}

/// `sql` with offload under several lanes and budgets: planned `full`, its graphs passing
/// `check`, the host's rows (in any order), and `refused` graphs declined at run time.
fn offloaded_as_the_host(
    dir: &Path,
    off: &SqlSession,
    sql: &str,
    check: &dyn Fn(&[TaskGraph]) -> bool,
    refused: u64,
) {
    let mut want = rows_text(&off.sql(sql).unwrap().batches);
    want.sort();
    assert!(!want.is_empty(), "{sql}");
    for (memory, lanes) in [(None, 1), (None, 3), (Some(4 << 20), 2)] {
        let on = offloaded(dir, memory, lanes);
        let explain = on.explain_offload(sql).unwrap();
        assert_eq!(explain.class, "full", "{sql}: {:?}", explain.decisions);
        assert!(check(&explain.graphs), "{sql}: {}", explain.plan);
        let mut got = rows_text(&on.sql(sql).unwrap().batches);
        got.sort();
        same_rows(
            &got,
            &want,
            &format!("{sql}, memory {memory:?}, lanes {lanes}"),
        );
        let s = on.device_stats().unwrap();
        assert_eq!(s.graphs_refused, refused, "{sql}: {s:?}");
    }
}

/// Counts of a left join's right rows grouped by the left table's unique key (TPC-H Q13's
/// orders per customer, a customer without orders counting 0), grouped again, run on the
/// device: the right rows counted by key, the left table streaming through a left join with
/// those groups. A count of every row (`count(*)` counts a customer without orders as 1) or a
/// sum leaves the join to the host.
#[test]
fn counts_over_a_left_join_run_on_the_device_as_the_host_counts() {
    let (dir, off) = sf001_plain();
    let statements = [
        query(13).unwrap().to_string(),
        "SELECT c_count, count(*) AS n FROM (SELECT p_partkey, count(ps_suppkey) AS c_count, \
         count(ps_availqty) AS c2 FROM part LEFT OUTER JOIN partsupp ON p_partkey = ps_partkey \
         AND ps_availqty > 9000 GROUP BY p_partkey) t GROUP BY c_count"
            .to_string(),
        "SELECT sum(c_count), count(*) FROM (SELECT c_custkey, count(o_orderkey) AS c_count FROM \
         customer LEFT JOIN orders ON c_custkey = o_custkey AND o_orderstatus = 'F' WHERE \
         c_acctbal > 0 GROUP BY c_custkey) t"
            .to_string(),
    ];
    for sql in &statements {
        let left = |graphs: &[TaskGraph]| {
            tasks(graphs)
                .flat_map(|t| &t.joins)
                .any(|j| j.kind == JoinKind::Left)
        };
        offloaded_as_the_host(dir.path(), &off, sql, &left, 0);
    }
    let on = offloaded(dir.path(), None, 2);
    for sql in [
        "SELECT c_count, count(*) FROM (SELECT c_custkey, count(*) AS c_count FROM customer LEFT \
         JOIN orders ON c_custkey = o_custkey GROUP BY c_custkey) t GROUP BY c_count",
        "SELECT c_count, count(*) FROM (SELECT c_custkey, sum(o_totalprice) AS c_count FROM \
         customer LEFT JOIN orders ON c_custkey = o_custkey GROUP BY c_custkey) t GROUP BY c_count",
    ] {
        not_full_as_the_host(&off, &on, sql);
    }
}

/// Every task of `graphs`.
fn tasks(graphs: &[TaskGraph]) -> impl Iterator<Item = &TableTask> {
    graphs.iter().flat_map(|g| &g.tasks)
}

/// `sql` planned not `full` on `on` (why, in its decisions), with the rows of `off` in any
/// order.
fn not_full_as_the_host(off: &SqlSession, on: &SqlSession, sql: &str) -> String {
    let explain = on.explain_offload(sql).unwrap();
    assert_ne!(explain.class, "full", "{sql}: {}", explain.plan);
    let mut want = rows_text(&off.sql(sql).unwrap().batches);
    let mut got = rows_text(&on.sql(sql).unwrap().batches);
    want.sort();
    got.sort();
    assert_eq!(got, want, "{sql}");
    format!("{:?}", explain.decisions)
}

/// A string's prefix as a group key (TPC-H Q22's `substring(c_phone FROM 1 FOR 2)`), on plain
/// and dictionary-coded strings, grouped, sorted and cut; and filters comparing a column with
/// an uncorrelated subquery's value (Q22's `c_acctbal > (select avg(c_acctbal) ...)`), the
/// value on either side, bound when the plan runs. All run on the device as the host computes
/// them. A subquery whose value is NULL leaves the plan to the host at run time, with the
/// host's answer; `=`, and a value that is a double, leave it to the host when planned.
#[test]
fn prefixes_and_subquery_comparisons_run_on_the_device_as_the_host_computes() {
    let (dir, off) = sf001_plain();
    let ops = |graphs: &[TaskGraph], f: &dyn Fn(&Op) -> bool| {
        tasks(graphs).flat_map(|t| &t.transformer.ops).any(f)
    };
    let prefix = |g: &[TaskGraph]| ops(g, &|o| matches!(o, Op::Prefix { .. }));
    let select = |g: &[TaskGraph]| ops(g, &|o| matches!(o, Op::Select { .. }));
    let q22 = query(22).unwrap().to_string();
    type Check<'a> = &'a dyn Fn(&[TaskGraph]) -> bool;
    let statements: [(&str, Check); 8] = [
        (&q22, &|g| prefix(g) && select(g)),
        (
            "SELECT substring(c_phone FROM 1 FOR 1) AS k, count(*), sum(c_acctbal) FROM customer \
             GROUP BY k",
            &prefix,
        ),
        (
            "SELECT substring(p_type FROM 1 FOR 7) AS k, count(*), min(p_retailprice) FROM part \
             GROUP BY k ORDER BY k DESC LIMIT 3",
            &prefix,
        ),
        (
            "SELECT count(*), sum(l_quantity) FROM lineitem WHERE l_extendedprice >= (SELECT \
             avg(l_extendedprice) FROM lineitem)",
            &select,
        ),
        (
            "SELECT l_returnflag, count(*) FROM lineitem WHERE (SELECT avg(l_discount) FROM \
             lineitem) > l_discount AND l_quantity <= (SELECT max(l_quantity) / 2 FROM lineitem) \
             GROUP BY l_returnflag",
            &select,
        ),
        (
            "SELECT count(*) FROM orders WHERE o_totalprice < (SELECT min(o_totalprice) * 2 FROM \
             orders)",
            &select,
        ),
        (
            "SELECT l_shipmode, count(*) FROM lineitem WHERE l_linenumber > (SELECT \
             min(l_linenumber) + 3 FROM lineitem) GROUP BY l_shipmode",
            &select,
        ),
        // NULL: no customer has that balance; the host runs the plan.
        (
            "SELECT count(*), sum(c_acctbal) FROM customer WHERE c_acctbal > (SELECT \
             avg(c_acctbal) FROM customer WHERE c_acctbal > 100000)",
            &select,
        ),
    ];
    for (sql, check) in statements {
        offloaded_as_the_host(dir.path(), &off, sql, check, 0);
    }
    let on = offloaded(dir.path(), None, 2);
    for sql in [
        "SELECT count(*) FROM lineitem WHERE l_quantity = (SELECT max(l_quantity) FROM lineitem)",
        "SELECT count(*) FROM lineitem WHERE l_linenumber > (SELECT avg(l_linenumber) FROM \
         lineitem)",
    ] {
        let why = not_full_as_the_host(&off, &on, sql);
        assert!(why.contains("subquery"), "{sql}: {why}");
    }
}

/// A prefix of a number cast to a string stays with the host (the device packs strings only).
#[test]
fn a_prefix_of_a_number_stays_with_the_host() {
    let (dir, off) = sf001_plain();
    let on = offloaded(dir.path(), None, 2);
    let sql = "SELECT substring(CAST(c_custkey AS VARCHAR) FROM 1 FOR 2) AS k, count(*) FROM \
               customer GROUP BY k";
    let why = not_full_as_the_host(&off, &on, sql);
    assert!(why.contains("c_custkey"), "{why}");
}

/// Two declines, each with its reason and the host's rows: a prefix of 8 characters (a
/// register packs at most 7), and the groups of an aggregate whose rows compare with a
/// subquery's value, joined on (their comparator is bound only in their own device plan, so a
/// join cannot read them from the device).
#[test]
fn long_prefixes_and_bound_groups_under_a_join_stay_with_the_host() {
    let (dir, off) = sf001_plain();
    let on = offloaded(dir.path(), None, 2);
    let why = not_full_as_the_host(
        &off,
        &on,
        "SELECT substring(c_phone FROM 1 FOR 8) AS k, count(*) FROM customer GROUP BY k",
    );
    assert!(why.contains("PrefixLength"), "{why}");
    let why = not_full_as_the_host(
        &off,
        &on,
        "SELECT p_brand, count(*) FROM part WHERE p_partkey IN (SELECT l_partkey FROM lineitem \
         WHERE l_quantity > (SELECT avg(l_quantity) FROM lineitem) GROUP BY l_partkey HAVING \
         sum(l_quantity) > 100) GROUP BY p_brand",
    );
    assert!(why.contains("BoundAtStart"), "{why}");
}
