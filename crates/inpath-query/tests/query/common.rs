//! The helpers of inpath-table's tests (the same file: tables written alike in every crate's
//! tests), and the 22 TPC-H queries against DuckDB's pinned answers.
#![allow(dead_code)]

#[path = "../../../inpath-table/tests/table/common.rs"]
mod table;
pub use table::*;

/// The 22 TPC-H queries against DuckDB's pinned answers at `sf`; every result's batches carry
/// its schema.
pub fn all_22(session: &inpath_query::SqlSession, sf: f64, what: &str) {
    use inpath_query::tpch_queries::{check_answer, pinned_answer, query};
    let mut failures = Vec::new();
    for n in 1..=22 {
        let result = session.sql(query(n).unwrap()).unwrap();
        // The result's schema is the batches' (Q1's averages are doubles in both).
        for b in &result.batches {
            assert_eq!(b.schema(), result.schema, "Q{n}");
        }
        if let Err(e) = check_answer(&result, pinned_answer(sf, n).unwrap()) {
            failures.push(format!("Q{n}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n"));
}
