//! Errors of the cache engine: [`CacheError`] for what the library returns, [`CheckpointError`]
//! for why recovery did not use a checkpoint (it then replays the log instead).
//!
//! A leaf module: it imports nothing from the crate.

/// The crate's result type: [`CacheError`] unless told otherwise.
pub type Result<T, E = CacheError> = std::result::Result<T, E>;

/// What can go wrong opening, running or stopping a cache (store or server).
///
/// Non-exhaustive: new failure kinds may be added without a major version.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The flash file could not be opened, sized, read, written or synced.
    #[error("flash file {path}: {source}")]
    Flash {
        /// The flash file.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The index checkpoint could not be written.
    #[error("checkpoint {path}: {source}")]
    Checkpoint {
        /// The checkpoint file (the flash file's path with `.ckpt` added).
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The server could not bind its memcached or HTTP address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address as configured.
        addr: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A size, count or limit in the configuration is out of range; the text says which.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The background thread writing the flash log has stopped (the store is closed or the
    /// thread died), so the log cannot be synced.
    #[error("flash writer stopped")]
    WriterStopped,
    /// Any other I/O error (starting threads or runtimes, socket setup).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Why recovery did not load the index checkpoint. Every case is recovered from: recovery
/// replays the whole log instead ([`CheckpointError::GeometryChanged`]: starts empty), and the
/// reason shows in the recovery report's note.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// There is no checkpoint file (first start, or it was removed).
    #[error("none")]
    Missing,
    /// The checkpoint file exists but cannot be read.
    #[error("unreadable ({0})")]
    Unreadable(#[source] std::io::Error),
    /// The file is too short or does not start with the checkpoint magic.
    #[error("not a checkpoint (bad magic or too short)")]
    NotACheckpoint,
    /// The file is a checkpoint of a format version this build does not know.
    #[error("unknown checkpoint version")]
    UnknownVersion,
    /// The end marker or the checksum does not match: a damaged or torn checkpoint.
    #[error("checksum mismatch (damaged checkpoint)")]
    Damaged,
    /// Chunk size, chunk count or bucket count differ from the configured sizes: the old log
    /// cannot be addressed with the new sizes.
    #[error("sizes changed since the checkpoint")]
    GeometryChanged,
    /// The length does not match the bucket count in the header.
    #[error("length does not match its bucket count")]
    BadLength,
    /// An index entry points into DRAM (a checkpoint points only at flash).
    #[error("entry points into DRAM")]
    DramEntry,
}
