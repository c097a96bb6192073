//! The integration tests of inpath-query, in one test binary (one link of DataFusion, one
//! process; run one part with `cargo test -p inpath-query --test query sql::`).
//!
//! - [`common`]: inpath-table's test helpers (tables written alike) and the 22 queries
//!   against DuckDB's pinned answers.
//! - [`sql`]: the 22 TPC-H queries on plain and sealed pages, pushdown equal to no pushdown,
//!   limit, import, and bad input.
//! - [`joins`]: joins on the device equal the host's for any lanes and budget; refusals name
//!   their typed reason.
//! - [`offload`]: the 22 queries with the device on and off, the device's aggregates, joins
//!   and top-k equal the host's for any lanes and memory budget. (The device's tests that need
//!   no SQL are inpath-offload's own, `crates/inpath-offload/tests/offload`.)
//! - [`passes`]: the 22 queries under a device memory far below their joins' and groups':
//!   key-range passes, groups merged across them and spilled, sealed, nothing left behind.
//!
//! Every test writes its tables in its own temporary directory and opens its own sessions, so
//! the tests can share the process.

mod common;

mod joins;
mod offload;
mod passes;
mod sql;
