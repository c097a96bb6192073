//! # inpath-query
//!
//! The SQL host of AQUOMAN (reference 001, part II): Apache DataFusion over the column tables
//! of `inpath-table`, with the offload device of `inpath-offload` planned in by a physical
//! optimizer rule.
//!
//! - [`scan`]: a column table as DataFusion's table provider, and the scan node that prunes
//!   pages by zone map, pushes filters down and reads only the selected rows.
//! - [`sql`]: [`SqlSession`] over a directory of tables (or Parquet files), and what offload
//!   made of a plan.
//! - [`rule`]: the physical optimizer rule that replaces offloadable sub-trees with a
//!   [`DeviceExec`](rule::DeviceExec), and the translation of DataFusion expressions into
//!   selectors and transformer programs.
//! - [`tpch_queries`]: the 22 TPC-H query texts and DuckDB's pinned answers.
//!
//! The format and the device are their own crates; this one re-exports their error type
//! ([`Error`]) and nothing else of them.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod output;
pub mod reason;
pub mod rule;
pub mod scan;
pub mod sql;
pub mod tpch_queries;

pub use inpath_table::{Error, Result};
pub use output::ResultFormat;
pub use reason::HostReason;
pub use scan::{ColumnTable, ScanStats};
pub use sql::{QueryResult, SqlSession};
