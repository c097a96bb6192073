//! Joins on the device (issue 14), through SQL: inner, semi and anti joins (residual `<>`
//! included) equal the host's for any lanes and memory budget and fall back when builds outgrow
//! it; a join above an offloaded aggregate moves below it only on a unique key; groups kept for
//! joins and top-k rows; refusals name their typed reason and answer as the host.

use crate::common::*;
use crate::offload::*;
use inpath_offload::graph::Operator;
use inpath_offload::GRAPH_VERSION;
use inpath_query::tpch_queries::query;
use inpath_query::SqlSession;
use inpath_seal::KeyRing;

#[test]
fn joins_on_the_device_equal_the_host_for_any_lanes_and_run_in_passes_when_builds_outgrow_memory() {
    let dir = tempfile::tempdir().unwrap();
    let plain = plain();
    gen(dir.path(), 0.01, plain, 4096);
    let off = SqlSession::open(dir.path(), &KeyRing::new(), 2).unwrap();
    // Inner joins with duplicate keys on the probe side (lineitem per order), a build that is
    // not sorted by its key (sort-merge), semi and anti joins, string group keys from build
    // rows.
    let statements = [
        "SELECT sum(CASE WHEN n_name = 'GERMANY' OR n_name = 'FRANCE' THEN o_totalprice ELSE 0 \
         END) AS a, sum(CASE WHEN o_totalprice > 100000.5 THEN 1 WHEN c_mktsegment LIKE 'AUTO%' \
         THEN 2 ELSE 0 END) AS b, count(*) AS n FROM orders JOIN customer ON o_custkey = \
         c_custkey JOIN nation ON c_nationkey = n_nationkey",
        "SELECT o_orderpriority, count(*) AS n, sum(l_quantity) AS q FROM orders JOIN lineitem \
         ON l_orderkey = o_orderkey WHERE o_orderdate < DATE '1994-01-01' GROUP BY \
         o_orderpriority",
        "SELECT c_name, n_name, sum(o_totalprice) AS t FROM customer JOIN orders ON c_custkey = \
         o_custkey JOIN nation ON c_nationkey = n_nationkey WHERE c_acctbal > 0 GROUP BY c_name, \
         n_name",
        "SELECT o_custkey, count(*) AS n FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM \
         lineitem WHERE l_quantity > 45) GROUP BY o_custkey",
        "SELECT count(*) AS n, sum(c_acctbal) AS s FROM customer WHERE c_custkey NOT IN (SELECT \
         o_custkey FROM orders)",
        "SELECT sum(l_extendedprice) AS s, count(*) AS n FROM lineitem JOIN orders ON \
         l_orderkey = o_orderkey JOIN (SELECT * FROM customer ORDER BY c_phone) c ON c_custkey = \
         o_custkey",
        // TOPK over groups of build rows: the device groups by the orders rows it matched
        // (finer than the SQL's customers), merges them by their values (late strings read
        // back) and cuts.
        "SELECT c_custkey, c_name, n_name, sum(l_extendedprice) AS s FROM customer, orders, \
         lineitem, nation WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND \
         c_nationkey = n_nationkey GROUP BY c_custkey, c_name, n_name ORDER BY s DESC LIMIT 5",
        // Groups of customers' segments and nations' names: one per customer row on the
        // device, merged into the SQL's five segments and 25 nations before the cut.
        "SELECT c_mktsegment, count(*) AS n FROM orders JOIN customer ON o_custkey = c_custkey \
         GROUP BY c_mktsegment ORDER BY n DESC LIMIT 2",
        "SELECT n_name, sum(o_totalprice) AS t FROM orders JOIN customer ON o_custkey = \
         c_custkey JOIN nation ON c_nationkey = n_nationkey GROUP BY n_name ORDER BY t DESC \
         LIMIT 3",
    ];
    for text in statements {
        let want = off.sql(text).unwrap();
        for lanes in [1, 3] {
            let on =
                SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, Some(lanes)))
                    .unwrap();
            let class = on.explain_offload(text).unwrap().class;
            let got = on.sql(text).unwrap();
            let (mut g, mut w) = (rows_text(&got.batches), rows_text(&want.batches));
            g.sort();
            w.sort();
            same_rows(&g, &w, &format!("{text}, lanes {lanes} ({class})"));
        }
    }
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, Some(2))).unwrap();
    for text in &statements[..3] {
        assert_eq!(on.explain_offload(text).unwrap().class, "full", "{text}");
    }
    on.sql(statements[2]).unwrap();
    let s = on.device_stats().unwrap();
    assert!(s.joins_positional >= 2 && s.rows_kept > 0, "{s:?}");
    // The groups are cut to the top k (and their ties) once merged by value: orders rows to
    // about 1,000 customers, customer rows to 5 segments and 25 nations.
    for (text, least) in statements[6..].iter().zip([100, 3, 22]) {
        on.reset_stats();
        on.sql(text).unwrap();
        let cut = on.device_stats().unwrap().groups_cut;
        assert!(cut >= least, "{cut}: {text}");
    }

    // Orders' keys kept for a join outgrow 200 KiB of device memory: the device runs the
    // graph again in key-range passes (each keeps the orders of one range of keys), with the
    // host's answer and nothing refused.
    let text = "SELECT sum(l_quantity) AS q, count(*) AS n FROM lineitem JOIN orders ON \
                l_orderkey = o_orderkey";
    let want = off.sql(text).unwrap();
    let small = SqlSession::open_with(
        dir.path(),
        &KeyRing::new(),
        2,
        offload(Some(200 << 10), Some(1)),
    )
    .unwrap();
    assert_eq!(small.explain_offload(text).unwrap().class, "full");
    let got = small.sql(text).unwrap();
    same_rows(
        &rows_text(&got.batches),
        &rows_text(&want.batches),
        "passes",
    );
    let s = small.device_stats().unwrap();
    assert_eq!(s.graphs_refused, 0, "{s:?}");
    assert_eq!(s.graphs_partitioned, 1, "{s:?}");
    assert!(s.passes >= 2, "{s:?}");
}

/// Semi and anti joins with a residual `<>` (Q21's shape): the device keeps one row per run of
/// equal keys with its first value and whether another followed, and answers as the host does,
/// for builds in key order (lineitem by orderkey) and not (orders by custkey), for any lanes,
/// and under a budget that cannot hold them (the host answers).
#[test]
fn residual_semi_and_anti_joins_equal_the_host_for_any_lanes_and_budget() {
    let (dir, off) = sf001_plain();
    let statements = [
        "SELECT count(*) AS n, sum(l1.l_quantity) AS q FROM lineitem l1 WHERE \
         l1.l_receiptdate > l1.l_commitdate AND EXISTS (SELECT * FROM lineitem l2 WHERE \
         l2.l_orderkey = l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey) AND NOT EXISTS \
         (SELECT * FROM lineitem l3 WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> \
         l1.l_suppkey AND l3.l_receiptdate > l3.l_commitdate)",
        "SELECT o_orderpriority, count(*) AS n FROM orders o WHERE EXISTS (SELECT * FROM orders \
         o2 WHERE o2.o_custkey = o.o_custkey AND o2.o_orderkey <> o.o_orderkey AND \
         o2.o_orderdate < DATE '1993-01-01') GROUP BY o_orderpriority",
        "SELECT count(*) AS n, sum(ps_availqty) AS a FROM partsupp ps WHERE NOT EXISTS (SELECT * \
         FROM partsupp p2 WHERE p2.ps_partkey = ps.ps_partkey AND p2.ps_suppkey <> \
         ps.ps_suppkey AND p2.ps_availqty > 9000)",
    ];
    for text in statements {
        let want = off.sql(text).unwrap();
        let w = rows_text(&want.batches);
        assert!(w.iter().all(|r| !r.starts_with("0|")), "{text}: {w:?}");
        for (memory, lanes) in [(None, 1), (None, 3), (Some(256 << 10), 2)] {
            let on = offloaded(dir.path(), memory, lanes);
            assert_eq!(on.explain_offload(text).unwrap().class, "full", "{text}");
            let got = on.sql(text).unwrap();
            let (mut g, mut w) = (rows_text(&got.batches), w.clone());
            g.sort();
            w.sort();
            same_rows(&g, &w, &format!("{text}, lanes {lanes}, memory {memory:?}"));
            let s = on.device_stats().unwrap();
            if memory.is_some() {
                assert!(s.graphs_refused >= 1, "{s:?}");
            } else {
                assert!(s.bytes_sent > 0 && s.rows_kept > 0, "{text}: {s:?}");
            }
        }
    }
    // Any other condition beyond the keys stays on the host, its reason named, with the
    // host's answer.
    let text = "SELECT count(*) AS n FROM orders o WHERE EXISTS (SELECT * FROM orders o2 WHERE \
                o2.o_custkey = o.o_custkey AND o2.o_orderdate < o.o_orderdate)";
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, None)).unwrap();
    let explained = on.explain_offload(text).unwrap();
    assert_ne!(explained.class, "full");
    let reasons: Vec<String> = explained
        .decisions
        .iter()
        .filter_map(|d| d.declined.as_ref().map(|r| r.to_string()))
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("other than `a <> b`")),
        "{reasons:?}"
    );
    // The reason is typed, with the join's type and its filter as values.
    assert!(
        explained.decisions.iter().any(|d| matches!(
            &d.declined,
            Some(inpath_query::HostReason::ResidualFilter { join_type, filter, keys: None })
                if join_type.contains("Semi") && filter.contains("o_orderdate")
        )),
        "{:?}",
        explained.decisions
    );
    same_rows(
        &rows_text(&on.sql(text).unwrap().batches),
        &rows_text(&off.sql(text).unwrap().batches),
        text,
    );

    // The residual's columns stay with the build rows, not the keys alone.
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, None)).unwrap();
    let graph = &on.explain_offload(statements[0]).unwrap().graphs[0];
    let residuals = graph
        .tasks
        .iter()
        .flat_map(|t| &t.joins)
        .filter(|j| j.residual.is_some())
        .count();
    assert_eq!(residuals, 2, "{}", graph.to_json());
    assert_eq!(graph.version, GRAPH_VERSION);
}

#[test]
fn a_join_above_an_offloaded_aggregate_moves_below_it_only_where_the_key_is_unique() {
    let (dir, off) = sf001_plain();
    // Supplier's key is unique: the join with the groups moves onto the device, beside a
    // filter on the table, one above the aggregate (HAVING, a scalar subquery) and a
    // projection that computes.
    let moved = [
        query(15).unwrap(),
        "SELECT s_name, s_nationkey, r.total * 2 AS twice FROM (SELECT l_suppkey AS k, \
         sum(l_quantity) AS total, count(*) AS n FROM lineitem WHERE l_shipdate < DATE \
         '1995-01-01' GROUP BY l_suppkey) r, supplier WHERE s_suppkey = r.k AND r.n > 25 AND \
         s_acctbal > 0",
    ];
    for text in moved {
        let want = off.sql(text).unwrap();
        let mut w = rows_text(&want.batches);
        w.sort();
        assert!(!w.is_empty(), "{text}");
        for (memory, lanes) in [(None, 1), (None, 3), (Some(256 << 10), 2)] {
            let on = offloaded(dir.path(), memory, lanes);
            let explained = on.explain_offload(text).unwrap();
            assert_eq!(explained.class, "full", "{text}\n{}", explained.plan);
            // One graph reads supplier beside lineitem, grouped by its columns too.
            assert!(
                explained.graphs.iter().any(|g| {
                    g.tasks[0].table == "supplier"
                        && g.tasks.last().is_some_and(|t| {
                            t.table == "lineitem"
                                && t.joins.len() == 1
                                && matches!(&t.operator, Operator::AggregateGroupBy { keys, .. }
                                    if keys.len() > 1)
                        })
                }),
                "{}",
                explained.plan
            );
            let got = on.sql(text).unwrap();
            assert_eq!(got.schema.fields().len(), want.schema.fields().len());
            for (g, w) in got.schema.fields().iter().zip(want.schema.fields()) {
                assert_eq!(g.name(), w.name(), "{text}");
            }
            let mut g = rows_text(&got.batches);
            g.sort();
            same_rows(&g, &w, &format!("{text}, lanes {lanes}, memory {memory:?}"));
        }
    }
    // The max or min of the groups: the device sends the first groups by that column only
    // (TOPK 1, ties included), and the host's answer is the same.
    for (text, descending) in [
        (
            "SELECT max(t) AS m FROM (SELECT l_suppkey, sum(l_quantity) AS t FROM lineitem \
             GROUP BY l_suppkey)",
            true,
        ),
        (
            "SELECT min(t) AS m FROM (SELECT l_partkey, count(*) AS t FROM lineitem GROUP BY \
             l_partkey)",
            false,
        ),
    ] {
        let want = rows_text(&off.sql(text).unwrap().batches);
        for lanes in [1, 3] {
            let on =
                SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, Some(lanes)))
                    .unwrap();
            let explained = on.explain_offload(text).unwrap();
            let order = explained.graphs[0].tasks.last().unwrap().order.clone();
            let order = order.unwrap_or_else(|| panic!("{}", explained.plan));
            assert_eq!(order.limit, Some(1));
            assert_eq!(order.keys[0].descending, descending);
            same_rows(&rows_text(&on.sql(text).unwrap().batches), &want, text);
            let s = on.device_stats().unwrap();
            assert!(s.groups_cut > 0, "{text}: {s:?}");
        }
    }
    // Q15's filter `total_revenue = (select max(total_revenue) ...)` over the same aggregate:
    // both graphs send only the groups tied first (TOPK 1).
    let on = offloaded(dir.path(), None, 2);
    let explained = on.explain_offload(query(15).unwrap()).unwrap();
    for g in &explained.graphs {
        let order = g.tasks.last().unwrap().order.as_ref();
        assert_eq!(order.and_then(|o| o.limit), Some(1), "{}", explained.plan);
    }
    on.sql(query(15).unwrap()).unwrap();
    let s = on.device_stats().unwrap();
    // Both graphs cut their 100 suppliers' groups to the first.
    assert!(s.groups_cut > 100, "{s:?}");
    // A maximum of another aggregate's groups cuts nothing: a group below the filter's own
    // first may equal it.
    let text = "SELECT k, c FROM (SELECT l_suppkey AS k, count(*) AS c FROM lineitem GROUP BY \
                l_suppkey) WHERE c = (SELECT max(c2) FROM (SELECT l_suppkey AS k2, count(*) AS \
                c2 FROM lineitem WHERE l_quantity < 25 GROUP BY l_suppkey))";
    let explained = on.explain_offload(text).unwrap();
    let main = explained
        .graphs
        .iter()
        .find(|g| g.tasks[0].selector.products.is_empty())
        .unwrap_or_else(|| panic!("{}", explained.plan));
    assert!(main.tasks[0].order.is_none(), "{}", explained.plan);
    let (mut g, mut w) = (
        rows_text(&on.sql(text).unwrap().batches),
        rows_text(&off.sql(text).unwrap().batches),
    );
    g.sort();
    w.sort();
    same_rows(&g, &w, text);
    // Partsupp's suppkey repeats: the join stays above the aggregate, on the host, with the
    // host's answer (grouping by partsupp's columns below the join would merge equal rows).
    let text = "SELECT ps_suppkey, r.total FROM (SELECT l_suppkey AS k, sum(l_quantity) AS total \
                FROM lineitem GROUP BY l_suppkey) r, partsupp WHERE ps_suppkey = r.k AND \
                ps_partkey < 300";
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, None)).unwrap();
    let explained = on.explain_offload(text).unwrap();
    assert_eq!(explained.class, "partial", "{}", explained.plan);
    assert!(explained.graphs.iter().all(|g| g.tasks.len() == 1));
    let (mut g, mut w) = (
        rows_text(&on.sql(text).unwrap().batches),
        rows_text(&off.sql(text).unwrap().batches),
    );
    g.sort();
    w.sort();
    assert!(
        w.windows(2).any(|p| p[0] == p[1]),
        "duplicate rows expected"
    );
    same_rows(&g, &w, text);
}

#[test]
fn groups_kept_for_joins_and_topk_rows_equal_the_host_for_any_lanes_and_budget() {
    let (dir, off) = sf001_plain();
    // (statement, a build of groups on the device)
    let statements = [
        // Q2: parts whose supply cost is the region's minimum, a semi join with the groups of
        // a min on two keys (a part and a decimal cost); the first 100 by balance.
        (query(2).unwrap(), true),
        // An equi-join with a max per group, turned semi by the planner, ties on the
        // quantity cut.
        (
            "SELECT ps_partkey, ps_suppkey, ps_availqty FROM partsupp, (SELECT ps_partkey AS k, \
             max(ps_availqty) AS m FROM partsupp GROUP BY ps_partkey) x WHERE ps_partkey = k \
             AND ps_availqty = m ORDER BY ps_availqty DESC, ps_partkey, ps_suppkey LIMIT 20",
            true,
        ),
        // Rows of an inner join, TOPK on a date with ties, then a string the device leaves to
        // the host's sort.
        (
            "SELECT o_orderdate, o_orderkey, c_name FROM orders, customer WHERE o_custkey = \
             c_custkey AND c_mktsegment = 'BUILDING' ORDER BY o_orderdate DESC, c_name, \
             o_orderkey LIMIT 7",
            false,
        ),
    ];
    for (text, grouped) in statements {
        let want = rows_text(&off.sql(text).unwrap().batches);
        assert!(!want.is_empty(), "{text}");
        for (memory, lanes) in [(None, 1), (None, 3), (Some(256 << 10), 2)] {
            let on = offloaded(dir.path(), memory, lanes);
            let explained = on.explain_offload(text).unwrap();
            assert_eq!(explained.class, "full", "{text}\n{}", explained.plan);
            let graph = explained.graphs.last().unwrap();
            let last = graph.tasks.last().unwrap();
            assert_eq!(last.operator, Operator::Nop, "{}", graph.to_json());
            assert!(last.order.as_ref().is_some_and(|o| o.limit.is_some()));
            let builds_groups = graph.tasks.iter().any(|t| {
                matches!(t.operator, Operator::AggregateGroupBy { .. }) && t.keep.is_empty()
            });
            assert_eq!(builds_groups, grouped, "{}", graph.to_json());
            // Ordered rows: the same rows in the same order.
            let got = rows_text(&on.sql(text).unwrap().batches);
            same_rows(
                &got,
                &want,
                &format!("{text}, lanes {lanes}, memory {memory:?}"),
            );
            let s = on.device_stats().unwrap();
            if memory.is_none() {
                assert_eq!(s.graphs_refused, 0, "{text}: {s:?}");
                // (Q2 at SF 0.01 has fewer rows than its limit: nothing to cut.)
                assert!(s.bytes_sent > 0, "{text}: {s:?}");
                assert!(s.groups_cut > 0 || want.len() < 100, "{text}: {s:?}");
            }
        }
    }
    // Groups with a string column cannot be kept for a join: the device declines and the
    // host answers.
    let text = "SELECT s_suppkey, s_name, g.nn FROM supplier, (SELECT n_nationkey AS nk, n_name \
                AS nn, min(s_acctbal) AS lo FROM supplier, nation WHERE s_nationkey = \
                n_nationkey GROUP BY n_nationkey, n_name) g WHERE s_nationkey = g.nk AND \
                s_acctbal = g.lo ORDER BY s_suppkey LIMIT 5";
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, None)).unwrap();
    same_rows(
        &rows_text(&on.sql(text).unwrap().batches),
        &rows_text(&off.sql(text).unwrap().batches),
        text,
    );
    let s = on.device_stats().unwrap();
    assert!(s.graphs_refused >= 1, "{s:?}");
}

/// Joins the device refuses with an aggregate's groups (groups on the streaming side) name
/// that reason in `explain`, leave the join to the host, and answer as the host does. (A
/// condition on them beyond the keys runs on the device:
/// `offload::a_correlated_aggregate_compared_with_rows_runs_on_the_device`.)
#[test]
fn joins_the_device_refuses_on_groups_name_the_reason_and_answer_as_the_host() {
    let (dir, off) = sf001_plain();
    let on = SqlSession::open_with(dir.path(), &KeyRing::new(), 2, offload(None, None)).unwrap();
    for (sql, reason) in [
        (
            "SELECT count(*) AS n, sum(m) AS s FROM (SELECT l_orderkey k, max(l_quantity) m \
             FROM lineitem GROUP BY l_orderkey) g WHERE k IN (SELECT o_orderkey FROM orders \
             WHERE o_totalprice > 100000)",
            "an aggregate's groups on a join's streaming side",
        ),
        (
            "SELECT count(*) AS n, sum(m) AS s FROM (SELECT l_suppkey k, max(l_quantity) m \
             FROM lineitem GROUP BY l_suppkey) g JOIN partsupp ON ps_suppkey = k",
            "an aggregate's groups on a join's streaming side",
        ),
    ] {
        let explain = on.explain_offload(sql).unwrap();
        assert!(
            explain.decisions.iter().any(|d| d
                .declined
                .as_ref()
                .is_some_and(|r| r.to_string().starts_with(reason))),
            "{sql}: {:?}",
            explain.decisions
        );
        assert_eq!(explain.class, "partial", "{sql}");
        let want = rows_text(&off.sql(sql).unwrap().batches);
        assert!(!want[0].starts_with("0|"), "{sql}: {want:?}");
        same_rows(&rows_text(&on.sql(sql).unwrap().batches), &want, sql);
    }
}
