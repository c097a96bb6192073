//! What a device did: [`DeviceStats`], and the lanes' shared counters behind it.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Graphs whose held rows outgrew the memory and that ran in key-range passes instead
    /// of going to the host.
    #[serde(default)]
    pub graphs_partitioned: u64,
    /// Key-range passes run (each a restricted copy of its graph; a pass that outgrew the
    /// memory is split in two and counted again).
    #[serde(default)]
    pub passes: u64,
    /// Bytes the device wrote to its spill directory (groups merged across passes that
    /// outgrew its memory).
    #[serde(default)]
    pub spill_bytes: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) graphs: AtomicU64,
    pub(super) pages_read: AtomicU64,
    pub(super) pages_skipped: AtomicU64,
    pub(super) bytes_read: AtomicU64,
    pub(super) bytes_sent: AtomicU64,
    pub(super) rows_selected: AtomicU64,
    pub(super) cpu_micros: AtomicU64,
    pub(super) memory: AtomicU64,
    pub(super) peak_memory: AtomicU64,
    pub(super) groups_spilled: AtomicU64,
    pub(super) rows_kept: AtomicU64,
    pub(super) joins_positional: AtomicU64,
    pub(super) joins_merge: AtomicU64,
    pub(super) joins_sort_merge: AtomicU64,
    pub(super) graphs_refused: AtomicU64,
    pub(super) groups_cut: AtomicU64,
    pub(super) graphs_partitioned: AtomicU64,
    pub(super) passes: AtomicU64,
    pub(super) spill_bytes: AtomicU64,
    /// How many times its memory the last graph to outgrow it would have needed, in
    /// thousandths (the largest a lane or build noted since the driver last looked).
    pub(super) overflow_milli: AtomicU64,
}

impl Counters {
    pub(super) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn hold(&self, bytes: u64) {
        let now = self.memory.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_memory.fetch_max(now, Ordering::Relaxed);
    }

    pub(super) fn release(&self, bytes: u64) {
        self.memory.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Notes that a graph would need `ratio` times the memory it had.
    pub(super) fn note_overflow(&self, ratio: f64) {
        let milli = (ratio * 1000.0).clamp(0.0, u64::MAX as f64 / 2.0) as u64;
        self.overflow_milli.fetch_max(milli, Ordering::Relaxed);
    }

    /// The largest ratio noted since the last call (0 if none), and starts again.
    pub(super) fn take_overflow(&self) -> f64 {
        self.overflow_milli.swap(0, Ordering::Relaxed) as f64 / 1000.0
    }
}
