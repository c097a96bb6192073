//! The integration tests of inpath-query, in one test binary (one link of DataFusion, one
//! process; run one part with `cargo test -p inpath-query --test query sql::`).
//!
//! - [`common`]: a batch of every stored type with a chosen null pattern, the seal tiers,
//!   writing and reading tables back, TPC-H generation and the 22 queries against DuckDB's
//!   pinned answers.
//! - [`roundtrip`]: every type, null pattern, page size and seal tier round-trips; chunking
//!   never matters.
//! - [`tpch`]: TPC-H at SF 0.01 holds exactly what tpchgen-arrow generates.
//! - [`sql`]: the 22 TPC-H queries on plain and sealed pages, pushdown equal to no pushdown,
//!   limit, import, and bad input.
//! - [`offload`]: the 22 queries with the device on and off, the device's aggregates, joins,
//!   Row Selector and top-k equal the host's for any lanes and memory budget, and a device
//!   served over a pipe.
//! - [`errors`]: bad input gives its typed error naming the table (and column and page), never
//!   a panic or a wrong answer.
//!
//! Every test writes its tables in its own temporary directory and opens its own sessions, so
//! the tests can share the process.

mod common;

mod errors;
mod offload;
mod roundtrip;
mod sql;
mod tpch;
