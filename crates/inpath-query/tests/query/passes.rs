//! Key-range passes and spilling under SQL (issue 55): with a device memory far below what the
//! joins and groups of the 22 TPC-H queries hold, every query still runs on the device, in
//! passes, and answers as DuckDB does; groups merged across passes beyond a quarter of the
//! memory go to spill files, sealed when the tables are, and nothing is left behind.

use crate::common::*;
use crate::offload::rows_text;
use inpath_query::sql::OffloadOptions;
use inpath_query::tpch_queries::query;
use inpath_query::SqlSession;
use inpath_seal::KeyRing;
use std::path::Path;

fn session(dir: &Path, keys: &KeyRing, memory: u64, spill: &Path) -> SqlSession {
    SqlSession::open_with(
        dir,
        keys,
        2,
        Some(OffloadOptions {
            memory: Some(memory),
            lanes: Some(2),
            spill_dir: Some(spill.to_path_buf()),
            ..OffloadOptions::default()
        }),
    )
    .unwrap()
}

/// TPC-H SF 0.01 in pages of 1,024 rows, under 1 MiB of device memory (the default would be
/// 40 MiB; the joins of Q7, Q9 and Q21 hold several MiB): all 22 answers equal DuckDB's,
/// plain and sealed; the queries whose joins outgrow the memory ran in passes, on the device
/// (none was refused to the host); groups spilled where the passes' groups outgrew a quarter
/// of it; the spill directory is empty afterwards.
#[test]
fn all_22_queries_answer_in_passes_under_a_small_memory() {
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    for (name, options, keys) in [
        ("plain", plain(), KeyRing::new()),
        ("sealed", lz4_gcm(), ring()),
    ] {
        let tables = dir.path().join(name);
        gen(&tables, 0.01, options, 1024);
        let on = session(&tables, &keys, 1 << 20, spill.path());
        all_22(&on, 0.01, name);
        let mut partitioned = Vec::new();
        let mut refused = Vec::new();
        for n in 1..=22 {
            on.reset_stats();
            on.sql(query(n).unwrap()).unwrap();
            let s = on.device_stats().unwrap();
            if s.graphs_partitioned > 0 {
                partitioned.push(n);
            }
            if s.graphs_refused > 0 && s.graphs_partitioned == 0 {
                refused.push(n);
            }
            assert!(s.peak_memory <= 1 << 20, "{name} Q{n}: {s:?}");
        }
        for n in [9, 21] {
            assert!(
                partitioned.contains(&n),
                "{name}: Q{n} not in passes: {partitioned:?}"
            );
        }
        assert_eq!(
            std::fs::read_dir(spill.path()).unwrap().count(),
            0,
            "{name}: spill files left behind"
        );
        eprintln!("{name}: in passes {partitioned:?}; to the host {refused:?}");
    }
}

/// Groups the device must hold whole (here a `count(DISTINCT ...)`: the distinct pairs of
/// order and part, 60,000 of them, far beyond a lane's share of 1 MiB) run in passes over
/// ranges of the orderkey, are merged across the passes through spill files (they outgrow a
/// quarter of the memory), sealed under a sealed table, and give the host's rows.
#[test]
fn groups_merged_across_passes_spill_and_equal_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    gen(dir.path(), 0.01, lz4_gcm(), 1024);
    let keys = ring();
    let off = SqlSession::open(dir.path(), &keys, 2).unwrap();
    let statement = "SELECT l_orderkey, count(DISTINCT l_partkey) AS parts \
                     FROM lineitem GROUP BY l_orderkey ORDER BY l_orderkey";
    let want = rows_text(&off.sql(statement).unwrap().batches);
    let on = session(dir.path(), &keys, 1 << 20, spill.path());
    let got = rows_text(&on.sql(statement).unwrap().batches);
    assert_eq!(got, want);
    let s = on.device_stats().unwrap();
    assert!(s.graphs_partitioned > 0 && s.passes >= 2, "{s:?}");
    assert!(s.spill_bytes > 0, "no spill: {s:?}");
    assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0);
}

/// The host alone under a memory limit: with sort-merge joins (what it plans when a table is
/// larger than a quarter of the limit) all 22 answers equal DuckDB's, with the spill directory
/// empty once the session is gone; under 1 MiB a query stops with DataFusion's error naming the operators
/// that hold the memory, never beyond the limit; a limit below 1 MiB is refused, naming it.
#[test]
fn the_host_alone_answers_within_a_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let spill = tempfile::tempdir().unwrap();
    gen(dir.path(), 0.01, plain(), 4096);
    let open = |limit: u64, sort_merge: Option<bool>| {
        let host = inpath_query::sql::HostOptions {
            memory_limit: Some(limit),
            spill_dir: Some(spill.path().to_path_buf()),
            sort_merge,
        };
        SqlSession::open_host(dir.path(), &KeyRing::new(), 2, None, &host)
    };
    // A table beyond a quarter of the limit: sort-merge joins.
    let plan = open(8 << 20, None)
        .unwrap()
        .explain(query(21).unwrap())
        .unwrap();
    assert!(plan.contains("SortMergeJoin"), "{plan}");
    let session = open(64 << 20, Some(true)).unwrap();
    assert!(session
        .explain(query(21).unwrap())
        .unwrap()
        .contains("SortMergeJoin"));
    all_22(&session, 0.01, "host, sort-merge joins");
    // DataFusion's directory in it lives as long as the session.
    drop(session);
    assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0);
    let e = open(1 << 20, None)
        .unwrap()
        .sql(query(21).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Resources exhausted") && e.contains("consumed"),
        "{e}"
    );
    let e = open(1000, None).err().unwrap().to_string();
    assert!(e.contains("1000") && e.contains("at least 1 MiB"), "{e}");
}
