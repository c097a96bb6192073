//! # inpath-offload
//!
//! AQUOMAN's device (reference 001, part II): Table Task graphs run beside the column pages of
//! `inpath-table`, on the device's own lanes and within its own memory budget. Arrow only: the
//! SQL host that plans queries and hands the device its graphs is `inpath-query` (DataFusion);
//! a device serving a host over a pipe (`inpath query serve-device`) needs only this crate.
//!
//! - [`graph`]: the serialisable, versioned Table Task graph (Row Selector, Row Transformer,
//!   Swissknife operator).
//! - [`device`]: the [`Device`] trait and [`LocalDevice`], which runs graphs on its own lanes
//!   within its own memory budget and counts pages, bytes, CPU time and memory.
//! - [`process`]: [`ProcessDevice`], the same device in a process of its own over a pipe
//!   (its pages, builds and groups held in that process's memory, not the host's).
//!
//! What is offloaded today: a Partial aggregate (with or without GROUP BY) over projections
//! over one table's scan or over a tree of inner, semi and anti equi-joins of scans, with
//! filters that are sums of products of comparators, CASE, join conditions beyond the keys and
//! arithmetic that is exact on scaled integers, and a sort or top-k above that aggregate (the
//! device merges its lanes' groups, orders them and sends only those that can be in the
//! result); see `docs/query.md` ("Offload").

// Unsafe code only in `arch`: calls of kernels compiled for CPU features it detected.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod arch;
pub mod device;
pub mod graph;
mod join;
pub mod process;

pub use device::{
    Device, DeviceGraph, DeviceStats, DeviceStream, LocalDevice, PassesPlan, SpillTo,
    DEFAULT_MEMORY_FLOOR, DEFAULT_MEMORY_PER_SF,
};
pub use graph::{TableTask, TaskGraph, GRAPH_VERSION};
pub use process::{serve, ProcessDevice};

pub use inpath_table::{Error, Result};
