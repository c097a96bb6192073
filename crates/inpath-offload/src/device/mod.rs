//! The device: where Table Tasks run, beside the pages. [`LocalDevice`] runs them on its own
//! threads (lanes) within its own memory budget and counts what it did, so that the host's
//! share of a query's work can be told apart from the device's.

use crate::arch;
use crate::graph::{
    Agg, AggFunc, CmpOp, Comparator, GroupKey, MaskSource, Op, Operator, Order, SortKey, Source,
    TableTask, TaskGraph, Test,
};
use crate::join::{
    encode_residual, pack_keys, read_places, residual_first, Built, Ints, Kept, Places,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int32Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array,
    Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use arrow_row::{Row, RowConverter, SortField};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use inpath_table::error::{Error, Result};
use inpath_table::format::LogicalType;
use inpath_table::reader::TableReader;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

mod aggregate;
mod compare;
mod emit;
mod exact;
mod finish;
mod groups;
mod lane;
mod prepare;
mod run;
mod stream;
#[cfg(test)]
mod tests;
mod transform;

use compare::*;
use emit::*;
use exact::*;
use finish::*;
use groups::*;
use lane::*;
use prepare::*;
use run::*;
use stream::PlanHold;
pub use stream::{output_schema, DeviceStream};
use transform::*;

/// Device memory per TPC-H scale factor 1 by default: the thesis's 40 MiB per SF 1 ratio
/// (reference 001, part II), as bytes.
pub const DEFAULT_MEMORY_PER_SF: u64 = 40 << 20;

/// A place Table Task graphs run.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Starts a graph; its last task's rows come back through the stream.
    fn submit(&self, graph: &TaskGraph) -> Result<DeviceStream>;
    /// What the device did since it was made or last reset.
    fn stats(&self) -> DeviceStats;
    /// Sets the counts to zero.
    fn reset_stats(&self);
    /// The memory the device may hold, in bytes.
    fn memory_budget(&self) -> u64;
    /// Whether the device's lanes run in the host's process (their CPU time is then part of
    /// the process's own, and the host's share is the process's less the lanes').
    fn in_host_process(&self) -> bool {
        true
    }
}

/// What a device did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Graphs run.
    pub graphs: u64,
    /// Pages whose columns were read.
    pub pages_read: u64,
    /// Pages skipped: pruned by zone maps, or read only as far as the selector and holding no
    /// selected row.
    pub pages_skipped: u64,
    /// Bytes of the page records read (what flash would have sent to the device).
    pub bytes_read: u64,
    /// Bytes handed to the host (Arrow buffers of the emitted batches).
    pub bytes_sent: u64,
    /// Rows the selectors kept.
    pub rows_selected: u64,
    /// CPU seconds the device's lanes used.
    pub cpu_seconds: f64,
    /// The most memory the device held at once (pages, registers, group tables).
    pub peak_memory: u64,
    /// Groups emitted early because the group table reached the memory budget.
    pub groups_spilled: u64,
    /// Rows build tasks kept on the device for joins.
    pub rows_kept: u64,
    /// Joins run, by method: positional lookup, streaming merge of sorted inputs, and merge
    /// after a radix sort.
    pub joins_positional: u64,
    /// See `joins_positional`.
    pub joins_merge: u64,
    /// See `joins_positional`.
    pub joins_sort_merge: u64,
    /// Graphs refused because their build rows outgrew the memory budget (the host ran them).
    pub graphs_refused: u64,
    /// Groups TOPK left on the device (they could not be among the first k).
    pub groups_cut: u64,
    /// A device in a process of its own ([`ProcessDevice`](super::ProcessDevice)): that
    /// process's peak resident set in bytes (its VmHWM). 0 for a device in the host's process,
    /// whose memory is the host's.
    #[serde(default)]
    pub process_peak_rss: u64,
}

#[derive(Debug, Default)]
struct Counters {
    graphs: AtomicU64,
    pages_read: AtomicU64,
    pages_skipped: AtomicU64,
    bytes_read: AtomicU64,
    bytes_sent: AtomicU64,
    rows_selected: AtomicU64,
    cpu_micros: AtomicU64,
    memory: AtomicU64,
    peak_memory: AtomicU64,
    groups_spilled: AtomicU64,
    rows_kept: AtomicU64,
    joins_positional: AtomicU64,
    joins_merge: AtomicU64,
    joins_sort_merge: AtomicU64,
    graphs_refused: AtomicU64,
    groups_cut: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn hold(&self, bytes: u64) {
        let now = self.memory.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_memory.fetch_max(now, Ordering::Relaxed);
    }

    fn release(&self, bytes: u64) {
        self.memory.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The device built into inpath: lanes on threads of their own, a memory budget, counters.
#[derive(Debug)]
pub struct LocalDevice {
    tables: HashMap<String, Arc<TableReader>>,
    lanes: usize,
    memory_budget: u64,
    counters: Arc<Counters>,
    /// Graphs this device declined for memory (as JSON): declined again at once, before any
    /// build runs, so a repeated query pays for the attempt only once.
    declined: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl LocalDevice {
    /// A device over every table under `dir` (named as a SQL session over `dir` names them,
    /// see [`inpath_table::table_dirs`]), with `lanes` lanes and `memory_budget` bytes: what
    /// `inpath query serve-device` serves.
    pub fn open(
        dir: &std::path::Path,
        keys: &inpath_seal::KeyRing,
        lanes: usize,
        memory_budget: u64,
    ) -> Result<LocalDevice> {
        let tables = inpath_table::open_table_dirs(dir, keys)?
            .into_iter()
            .map(|(name, reader)| (name, Arc::new(reader.with_dictionary_arrays())))
            .collect();
        LocalDevice::new(tables, lanes, memory_budget)
    }

    /// A device over `tables` (by name) with `lanes` threads and `memory_budget` bytes.
    pub fn new(
        tables: HashMap<String, Arc<TableReader>>,
        lanes: usize,
        memory_budget: u64,
    ) -> Result<LocalDevice> {
        if lanes == 0 || lanes > 1024 {
            return Err(Error::parameter("device lanes", lanes, "1 to 1024"));
        }
        if memory_budget < (64 << 10) {
            return Err(Error::parameter(
                "device memory",
                memory_budget,
                "at least 65536 bytes",
            ));
        }
        Ok(LocalDevice {
            tables,
            lanes,
            memory_budget,
            counters: Arc::new(Counters::default()),
            declined: Default::default(),
        })
    }

    /// The lanes.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// The table registered under `name`.
    pub fn table(&self, name: &str) -> Option<&Arc<TableReader>> {
        self.tables.get(name)
    }

    fn reader(&self, name: &str) -> Result<Arc<TableReader>> {
        self.tables
            .get(name)
            .cloned()
            .ok_or_else(|| Error::Offload {
                detail: format!("the device holds no table {name:?}"),
            })
    }
}
