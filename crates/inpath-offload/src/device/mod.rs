//! The device: where Table Tasks run, beside the pages. [`LocalDevice`] runs them on its own
//! threads (lanes) within its own memory budget and counts what it did, so that the host's
//! share of a query's work can be told apart from the device's.

use crate::graph::TaskGraph;
use inpath_table::error::{Error, Result};
use inpath_table::reader::TableReader;
use std::collections::HashMap;
use std::sync::Arc;

mod aggregate;
mod combine;
mod compare;
mod emit;
mod exact;
mod finish;
mod groups;
mod lane;
mod passes;
mod prepare;
mod reduce;
mod run;
mod spill;
mod stats;
mod stream;
#[cfg(test)]
mod tests;
mod transform;

pub use spill::SpillTo;
use stats::Counters;
pub use stats::DeviceStats;
pub use stream::{output_schema, DeviceStream};

/// Device memory per TPC-H scale factor 1 by default, as bytes: AQUOMAN's 16 GB of device
/// DRAM per TB of TPC-H data (reference 001, part II: SF 1000 with 16 GB), above
/// [`DEFAULT_MEMORY_FLOOR`]. Joins and groups beyond it run in key-range passes.
pub const DEFAULT_MEMORY_PER_SF: u64 = 16 << 20;

/// The least device memory by default (small tables): the thesis's 40 MiB of its SF 1 runs.
pub const DEFAULT_MEMORY_FLOOR: u64 = 40 << 20;

/// A place Table Task graphs run.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Starts a graph; its last task's rows come back through the stream.
    fn submit(&self, graph: &TaskGraph) -> Result<DeviceStream>;
    /// Starts a graph only as a whole: where its rows would outgrow the memory it declines
    /// rather than running in key-range passes (a caller with a cheaper alternate graph tries
    /// that next). A device without passes runs it as [`Device::submit`] does.
    fn submit_whole(&self, graph: &TaskGraph) -> Result<DeviceStream> {
        self.submit(graph)
    }
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
    /// How the device would run `graph` if the rows it holds outgrew its memory (none: it
    /// would decline, and the host would run the plan), for `explain`.
    fn passes_plan(&self, _graph: &TaskGraph) -> Option<PassesPlan> {
        None
    }
    /// The graph the device runs for `graph`, with its own rewrites (semi-join reductions)
    /// applied and named, for `explain`; a device that rewrites nothing runs `graph` as it is.
    fn device_graph(&self, graph: &TaskGraph) -> DeviceGraph {
        DeviceGraph {
            graph: graph.clone(),
            reductions: Vec::new(),
        }
    }
}

/// What [`Device::device_graph`] tells: the graph as the device runs it and the rewrites that
/// made it from the one submitted.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceGraph {
    /// The graph the device runs.
    pub graph: TaskGraph,
    /// Its semi-join reductions, each as `nation restricts supplier.s_nationkey`: the small
    /// table whose filtered keys restrict the named column where that table is read.
    pub reductions: Vec<String>,
}

/// What [`Device::passes_plan`] tells: the key the passes would split, the columns they would
/// restrict, and a bound on what the graph's builds hold against the memory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PassesPlan {
    /// `table.column` of the last task whose value ranges the passes split.
    pub key: String,
    /// `table.column` of each build task restricted to the same range.
    pub restricts: Vec<String>,
    /// An upper bound on the bytes the builds keep (rows their zone maps leave, at 4 bytes a
    /// kept value and 8 for the index; their filters keep fewer).
    pub held_at_most: u64,
    /// The device's memory.
    pub memory: u64,
    /// The passes that bound would need (1: it fits).
    pub passes_at_most: usize,
}

/// The device built into inpath: lanes on threads of their own, a memory budget, counters.
/// A clone is the same device (its counters and what it remembers are shared).
#[derive(Clone, Debug)]
pub struct LocalDevice {
    tables: HashMap<String, Arc<TableReader>>,
    lanes: usize,
    memory_budget: u64,
    counters: Arc<Counters>,
    /// Graphs this device declined for memory (as JSON): declined again at once, before any
    /// build runs, so a repeated query pays for the attempt only once.
    declined: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Graphs that ran in key-range passes (as JSON), with the number of passes that fit:
    /// run in that many at once the next time, without trying them whole.
    passes_known: Arc<std::sync::Mutex<HashMap<String, usize>>>,
    /// Graphs (by their JSON) whose whole attempt, made alone ([`Device::submit_whole`]),
    /// declined for memory: the passes to start with and how many times its memory the whole
    /// graph needed, so that running it in passes later skips the whole attempt.
    whole_declined: Arc<std::sync::Mutex<HashMap<String, (usize, f64)>>>,
    /// Where groups merged across passes go when they outgrow the memory (none: the system's
    /// temporary directory), and the sealing tier of what is written there.
    spill: Arc<SpillTo>,
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
            passes_known: Default::default(),
            whole_declined: Default::default(),
            spill: Default::default(),
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
