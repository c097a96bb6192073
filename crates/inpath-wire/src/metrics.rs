//! The counters behind `/metrics`: what every connection adds to, read by the HTTP API. A leaf:
//! the hub owns them, the tap runners and the server add to them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Per-tap throughput counters.
#[derive(Default)]
pub struct TapCounters {
    /// Bytes fed to the tap.
    pub bytes: AtomicU64,
    /// Nanoseconds spent in the tap's `update`.
    pub nanos: AtomicU64,
    /// Lossy tap policy: whole fixed-width records that were not fed to the tap, because a
    /// gap held all or part of them.
    pub skipped_records: AtomicU64,
    /// Lossy tap policy: bytes that reached the tap's side but were dropped because a gap cut
    /// their record (the part of a record before or after a gap).
    pub cut_bytes: AtomicU64,
}

/// Counters behind `/metrics`.
#[derive(Default)]
pub struct Metrics {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Bytes read, per direction (`c2s`: from clients; `s2c`: from destinations).
    pub bytes_read: [AtomicU64; 2],
    /// Bytes written onward, per direction (relay only).
    pub bytes_forwarded: [AtomicU64; 2],
    /// Per tap (in `--tap` order).
    pub taps: Vec<TapCounters>,
    /// Bytes read but not yet processed by the taps.
    pub backlog: AtomicU64,
    /// Bytes read but never fed to the taps, per direction (the lossy tap policy's gaps).
    pub skipped_bytes: [AtomicU64; 2],
    /// Times a connection stopped reading because its taps were behind (back-pressure).
    pub backpressure_waits: AtomicU64,
    /// Nanoseconds connections spent stopped for their taps.
    pub backpressure_nanos: AtomicU64,
    /// Jobs finished.
    pub jobs: AtomicU64,
    /// Bytes left over at job ends (partial records, cut message headers).
    pub leftover: AtomicU64,
    /// Tap input errors (for example a bad CSV cell).
    pub tap_errors: AtomicU64,
    /// Result lines that could not be written.
    pub log_errors: AtomicU64,
    /// Accept calls that failed (for example out of file descriptors).
    pub accept_errors: AtomicU64,
    /// Closed connections by outcome.
    pub(crate) outcomes: Mutex<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    /// Bytes fed to tap `tap` (in `--tap` order) so far.
    pub fn tap_bytes_total(&self, tap: usize) -> u64 {
        self.taps
            .get(tap)
            .map_or(0, |c| c.bytes.load(Ordering::Relaxed))
    }
}
