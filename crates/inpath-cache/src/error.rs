//! Errors of the cache engine.

pub type Result<T, E = CacheError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("flash file {path}: {source}")]
    Flash {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint {path}: {source}")]
    Checkpoint {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
