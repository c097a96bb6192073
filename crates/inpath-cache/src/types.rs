//! The cache's shared vocabulary: configuration ([`StoreConfig`], [`Settings`]), sizes
//! ([`Geometry`]), what the store answers ([`ItemOut`], [`StoreRes`], [`DelRes`], [`ArithRes`]),
//! the at-rest seal hook and the recovery report, plus memcached's time rules.
//!
//! A leaf module: it imports nothing from the crate, so every layer (flash, recovery, store,
//! protocol, server) can use it without importing a layer above itself.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// What `version` answers: the memcached protocol level, then ours.
pub const VERSION: &str = concat!("1.6.18-inpath-cache-", env!("CARGO_PKG_VERSION"));

/// Longest key, as memcached.
pub const KEY_MAX: usize = 250;
/// Relative expiry times above this are absolute unix times (memcached's rule).
const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// What a [`RecordSeal`] reports when sealing fails: the seal engine's own error (any
/// `std::error::Error`; a `String` converts with `.into()`).
pub type SealError = Box<dyn std::error::Error + Send + Sync>;

/// At-rest protection of the flash records, implemented outside this crate (the CLI's
/// `--seal-key` plugs in the seal engine: compress, then AES-256-GCM). `seal` turns a payload
/// into an opaque blob; `unseal` returns `None` for anything it cannot authenticate.
pub trait RecordSeal: Send + Sync {
    fn seal(&self, plain: &[u8]) -> Result<Vec<u8>, SealError>;
    fn unseal(&self, sealed: &[u8]) -> Option<Vec<u8>>;
    /// What it does, for the log and `stats` (e.g. "lz4+aes256-gcm").
    fn describe(&self) -> String;
}

/// A [`RecordSeal`] in a configuration.
#[derive(Clone)]
pub struct SealHook(pub Arc<dyn RecordSeal>);

impl std::fmt::Debug for SealHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealHook({})", self.0.describe())
    }
}

/// Flash faults to inject, for tests of the failure paths (a full, failing or torn device).
/// Shared with the test that holds it, so it can change them while the store runs.
#[derive(Debug)]
pub struct FlashFaults {
    /// Writes fail with "no space left" once this many bytes were written to the flash file;
    /// the write that crosses the limit writes its aligned part before it, then fails (a
    /// chunk torn in the middle). `u64::MAX`: no write fails.
    pub write_limit: AtomicU64,
    /// Every read fails with an I/O error while set.
    pub fail_reads: AtomicBool,
    /// Bytes written so far.
    pub written: AtomicU64,
}

impl Default for FlashFaults {
    fn default() -> FlashFaults {
        FlashFaults {
            write_limit: AtomicU64::new(u64::MAX),
            fail_reads: AtomicBool::new(false),
            written: AtomicU64::new(0),
        }
    }
}

impl FlashFaults {
    /// Writes fail once `bytes` more bytes were written.
    pub fn fail_writes_after(&self, bytes: u64) {
        let at = self.written.load(Relaxed).saturating_add(bytes);
        self.write_limit.store(at, Relaxed);
    }
    /// No more faults.
    pub fn heal(&self) {
        self.write_limit.store(u64::MAX, Relaxed);
        self.fail_reads.store(false, Relaxed);
    }
}

/// Sizes and paths of a store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// DRAM budget in bytes: index + log buffers + hot values.
    pub memory: u64,
    /// The flash file; `None` runs from DRAM alone (memcached's model: the same index, values
    /// evicted instead of moved to flash, nothing kept across restarts).
    pub flash_path: Option<PathBuf>,
    pub flash_size: u64,
    /// Largest value in bytes (`-I`).
    pub item_max: usize,
    /// Expected average item size; the index gets `flash_size / avg_item_size` entries.
    pub avg_item_size: usize,
    /// Log messages on standard error.
    pub verbose: bool,
    /// Seal every record written to flash (key and value together).
    pub seal: Option<SealHook>,
    /// Whether `flush_all` is served (memcached's `-F` turns it off).
    pub flush_all: bool,
    /// Whether a full cache makes room by evicting (memcached's `-M` turns it off: a store that
    /// does not fit gets `SERVER_ERROR out of memory`). Only without a flash file: the flash
    /// log always reclaims its oldest chunk.
    pub evictions: bool,
    /// Whether items get CAS values (memcached's `-C` turns it off: every cas is 0 and a `cas`
    /// request is not checked against it).
    pub cas: bool,
    /// Faults injected into the flash file's I/O (tests only; `None` in use).
    pub faults: Option<Arc<FlashFaults>>,
}

impl StoreConfig {
    /// A store with a flash tier in the file `flash_path`.
    pub fn new(flash_path: PathBuf) -> StoreConfig {
        StoreConfig {
            flash_path: Some(flash_path),
            ..StoreConfig::dram_only()
        }
    }

    /// A store without flash: values live in DRAM only and are evicted when it is full.
    pub fn dram_only() -> StoreConfig {
        StoreConfig {
            memory: 64 << 20,
            flash_path: None,
            flash_size: 1 << 30,
            item_max: 1 << 20,
            avg_item_size: 1024,
            verbose: false,
            seal: None,
            flush_all: true,
            evictions: true,
            cas: true,
            faults: None,
        }
    }
}

/// Which memcached protocol a server speaks (memcached's `-B`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// The text protocol (classic and meta commands) only; binary bytes are read as text.
    Ascii,
    /// The binary protocol only; a connection that starts otherwise is closed.
    Binary,
    /// Per connection, by its first byte: 0x80 (the binary request magic) is binary, anything
    /// else text. memcached's default.
    #[default]
    Auto,
}

/// Settings of the server a store runs under, reported by `stats` (`threads`) and
/// `stats settings` (`num_threads`, `maxconns`). Passed in when the store is opened
/// (`Store::open_with`); a store opened without a server reports zeros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Worker threads serving connections.
    pub threads: usize,
    /// Most simultaneous connections.
    pub max_conns: usize,
    /// Whether the `shutdown` command stops the server (memcached's `-A`).
    pub shutdown_command: bool,
    /// Seconds an idle connection is kept (`-o idle_timeout`; 0: forever).
    pub idle_timeout_secs: u64,
    /// Log level at start (memcached's `-v` count; `verbosity N` changes it while serving): 1
    /// errors and warnings, 2 also every connection and request line.
    pub verbosity: u8,
    /// The TCP port listened on (`stats settings` `tcpport`).
    pub tcp_port: u16,
    /// The UDP port served (memcached's `-U`; 0: UDP off).
    pub udp_port: u16,
    /// The listen backlog (memcached's `-b`, `tcp_backlog`).
    pub backlog: u32,
    /// The protocol served (memcached's `-B`, `binding_protocol`).
    pub protocol: Protocol,
    /// Requests a connection runs in one go before it gives way to the others (memcached's
    /// `-R`, 20 by default; 0 is taken as 20); each time counts in `conn_yields`.
    pub reqs_per_event: u32,
    /// `stats cachedump` refused (memcached's `-X`).
    pub dump_disabled: bool,
}

impl Settings {
    /// memcached's default `-R`.
    pub const REQS_PER_EVENT: u32 = 20;

    /// Requests a connection runs before it yields (`reqs_per_event`, 0 meaning the default).
    pub fn reqs_per_event(&self) -> u32 {
        if self.reqs_per_event == 0 {
            Settings::REQS_PER_EVENT
        } else {
            self.reqs_per_event
        }
    }
}

/// Sizes derived from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Bytes per log chunk (room for the largest record, sealed).
    pub chunk_size: u64,
    /// Chunks in the flash file.
    pub nchunks: u64,
    /// Index buckets (64 bytes: 5 entries of 12 bytes each).
    pub nbuckets: u64,
    /// DRAM left for hot values once the index and log buffers are paid for.
    pub dram_budget: usize,
}

/// A value as returned to the protocol layer.
#[derive(Clone, Debug)]
pub struct ItemOut {
    pub flags: u32,
    pub cas: u64,
    pub exptime: u32,
    pub value: Vec<u8>,
}

/// How a store request treats the current version of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// A set / add / replace / append / prepend / cas / ms request.
#[derive(Clone, Copy, Debug)]
pub struct StoreReq<'a> {
    pub mode: Mode,
    pub flags: u32,
    pub exptime: u32,
    pub value: &'a [u8],
    /// Compare-and-swap: store only when the current cas is this.
    pub cas: Option<u64>,
    /// Use this cas for the new item (meta E flag).
    pub new_cas: Option<u64>,
    /// Append/prepend on a miss creates the item with this expiry (meta N flag).
    pub vivify: Option<u32>,
    /// With `cas`: a cas older than the item's still stores, marking the value stale (ms I).
    pub invalidate: bool,
}

/// Where [`crate::Store::get_resident`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resident {
    /// Every key answered.
    Done,
    /// The key at this index has its value on flash: fetch it the slow way, then go on.
    Flash(usize),
    /// The callback asked to stop; the next key to answer is at this index.
    Paused(usize),
}

/// The item-changing flags of a meta get (mg).
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaGet {
    /// T: a new absolute expiry.
    pub touch: Option<u32>,
    /// N: on a miss, create an empty item with this absolute expiry (the client wins).
    pub vivify: Option<u32>,
    /// R: win the recache right when the item expires before this absolute time.
    pub recache: Option<u32>,
    /// u: no LRU bump, not marked fetched, access time unchanged.
    pub no_bump: bool,
    /// E: the cas of an item this request creates.
    pub new_cas: Option<u64>,
}

/// A meta get's hit: the item and what the flags report.
#[derive(Clone, Debug)]
pub struct MetaItem {
    pub item: ItemOut,
    /// h: fetched before this request (since it entered DRAM).
    pub fetched: bool,
    /// l: seconds since the last access before this request.
    pub idle: u32,
    /// X: the item is stale.
    pub stale: bool,
    /// Z: a client was already handed the recache right.
    pub token_sent: bool,
    /// W: this client wins the right to recache.
    pub won: bool,
}

/// What `me` (meta debug) shows of an item.
#[derive(Clone, Copy, Debug)]
pub struct ItemDebug {
    pub exptime: u32,
    pub idle: u32,
    pub cas: u64,
    pub fetched: bool,
    /// Bytes the item takes in DRAM (key, value and per-item overhead).
    pub size: usize,
}

/// The flags of a meta delete (md).
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaDelete {
    /// C: delete only when the item's cas is this.
    pub cas: Option<u64>,
    /// I: mark stale (new cas) instead of removing.
    pub invalidate: bool,
    /// T: with I (or x), the new absolute expiry.
    pub new_ttl: Option<u32>,
    /// x: replace the value with an empty one, keeping the item.
    pub remove_value: bool,
    /// F: client flags of the emptied item (with x).
    pub flags: u32,
    /// E: the cas the changed item gets.
    pub new_cas: Option<u64>,
}

impl<'a> StoreReq<'a> {
    /// A store of `value` in `mode`, checked against `cas` when given, without the meta
    /// commands' extras (new cas, vivify, invalidate).
    pub fn new(
        mode: Mode,
        flags: u32,
        exptime: u32,
        value: &'a [u8],
        cas: Option<u64>,
    ) -> StoreReq<'a> {
        StoreReq {
            mode,
            flags,
            exptime,
            value,
            cas,
            new_cas: None,
            vivify: None,
            invalidate: false,
        }
    }
}

/// The outcome of a store request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreRes {
    Stored {
        cas: u64,
        size: usize,
    },
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    /// Evictions are off (`StoreConfig::evictions`) and the value does not fit; the key's old
    /// value is gone, as in memcached (no stale value survives a failed store).
    OutOfMemory,
}

/// The outcome of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelRes {
    Deleted,
    NotFound,
    Exists,
}

/// The outcome of incr / decr / ma.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithRes {
    Value {
        value: u64,
        cas: u64,
        exptime: u32,
    },
    NotFound,
    NonNumeric,
    Exists,
    /// Evictions are off and the new value does not fit.
    OutOfMemory,
}

/// What recovery found at start.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub checkpoint_loaded: bool,
    pub checkpoint_note: String,
    pub chunks_replayed: u64,
    pub records_replayed: u64,
    pub items: u64,
}

/// Seconds since the unix epoch (saturating into u32).
pub fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
        .unwrap_or(0)
}

/// Converts a protocol expiry (0 = never, <= 30 days relative, else absolute, negative = already
/// expired) into an absolute unix time (0 = never).
pub fn abs_exptime(exptime: i64) -> u32 {
    if exptime < 0 {
        1
    } else if exptime == 0 {
        0
    } else if exptime <= REALTIME_MAXDELTA {
        (now_unix() as i64 + exptime).min(u32::MAX as i64) as u32
    } else {
        exptime.min(u32::MAX as i64) as u32
    }
}
