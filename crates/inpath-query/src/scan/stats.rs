//! What the scans did: pages pruned, unselected and read, bytes read and handed to the host.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of what scans did, shared by every table of a session.
#[derive(Debug, Default)]
pub struct ScanCounters {
    pub(super) pages_total: AtomicU64,
    pub(super) pages_pruned: AtomicU64,
    pub(super) pages_unselected: AtomicU64,
    pub(super) records_read: AtomicU64,
    pub(super) bytes_read: AtomicU64,
    pub(super) rows_scanned: AtomicU64,
    pub(super) rows_out: AtomicU64,
    pub(super) bytes_out: AtomicU64,
}

impl ScanCounters {
    /// The counts so far.
    pub fn snapshot(&self) -> ScanStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ScanStats {
            pages_total: get(&self.pages_total),
            pages_pruned: get(&self.pages_pruned),
            pages_unselected: get(&self.pages_unselected),
            records_read: get(&self.records_read),
            bytes_read: get(&self.bytes_read),
            rows_scanned: get(&self.rows_scanned),
            rows_out: get(&self.rows_out),
            bytes_out: get(&self.bytes_out),
        }
    }

    /// Sets every count to zero.
    pub fn reset(&self) {
        for c in [
            &self.pages_total,
            &self.pages_pruned,
            &self.pages_unselected,
            &self.records_read,
            &self.bytes_read,
            &self.rows_scanned,
            &self.rows_out,
            &self.bytes_out,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// What the scans of a statement (or a session) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    /// Pages (row ranges) of the scanned tables.
    pub pages_total: u64,
    /// Pages skipped by zone maps: nothing read.
    pub pages_pruned: u64,
    /// Pages whose filter columns were read and selected no row: their other columns were
    /// never read or unsealed.
    pub pages_unselected: u64,
    /// Column page records read and unsealed.
    pub records_read: u64,
    /// Bytes of those records (what a storage device would have sent).
    pub bytes_read: u64,
    /// Rows in the pages that were read.
    pub rows_scanned: u64,
    /// Rows the scans handed to DataFusion.
    pub rows_out: u64,
    /// Bytes of the Arrow batches the scans handed to DataFusion (what crossed to the host).
    pub bytes_out: u64,
}
