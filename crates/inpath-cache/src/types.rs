//! The cache's shared vocabulary: configuration ([`StoreConfig`], [`Settings`]), sizes
//! ([`Geometry`]), what the store answers ([`ItemOut`], [`StoreRes`], [`DelRes`], [`ArithRes`]),
//! the at-rest seal hook and the recovery report, plus memcached's time rules.
//!
//! A leaf module: it imports nothing from the crate, so every layer (flash, recovery, store,
//! protocol, server) can use it without importing a layer above itself.

use std::path::PathBuf;
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

/// Sizes and paths of a store.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// DRAM budget in bytes: index + log buffers + hot values.
    pub memory: u64,
    pub flash_path: PathBuf,
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
}

impl StoreConfig {
    pub fn new(flash_path: PathBuf) -> StoreConfig {
        StoreConfig {
            memory: 64 << 20,
            flash_path,
            flash_size: 1 << 30,
            item_max: 1 << 20,
            avg_item_size: 1024,
            verbose: false,
            seal: None,
            flush_all: true,
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
}

/// Sizes derived from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Bytes per log chunk (room for the largest record, sealed).
    pub chunk_size: u64,
    /// Chunks in the flash file.
    pub nchunks: u64,
    /// Index buckets (4 entries of 16 bytes each).
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
}

/// The outcome of a store request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreRes {
    Stored { cas: u64, size: usize },
    NotStored,
    Exists,
    NotFound,
    TooLarge,
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
    Value { value: u64, cas: u64, exptime: u32 },
    NotFound,
    NonNumeric,
    Exists,
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
