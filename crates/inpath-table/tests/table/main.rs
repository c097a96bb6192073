//! The integration tests of inpath-table, in one test binary (run one part with
//! `cargo test -p inpath-table --test table roundtrip::`). No SQL engine is linked.
//!
//! - [`common`]: a batch of every stored type with a chosen null pattern, the seal tiers,
//!   writing and reading tables back, TPC-H generation.
//! - [`roundtrip`]: every type, null pattern, page size and seal tier round-trips; chunking
//!   never matters.
//! - [`tpch`]: TPC-H at SF 0.01 holds exactly what tpchgen-arrow generates.
//! - [`import`]: Parquet and CSV import (the parquet and arrow-csv crates): every type
//!   round-trips, narrow types widen, CSV types are inferred, bad files leave nothing.
//! - [`errors`]: bad input gives its typed error naming the table (and column and page), never
//!   a panic or a wrong answer.
//!
//! Every test writes its tables in its own temporary directory, so the tests can share the
//! process.

mod common;

mod errors;
mod import;
mod roundtrip;
mod tpch;
