//! # inpath-cache: BlueCache for an SSD
//!
//! A memcached-compatible key-value cache (text and meta protocol) whose DRAM holds a compact
//! set-associative index (16 bytes per item) and the hot values, and whose flash tier is an
//! append-only log of checksummed records in a file, reclaimed oldest chunk first. The index is
//! checkpointed and the log replayed at start, so a restart (clean or after a crash) keeps the
//! cache. Design after BlueCache (Xu, MIT 2021, part I); see docs/cache.md.
//!
//! ```no_run
//! use inpath_cache::{Server, ServerConfig, StoreConfig};
//! let store = StoreConfig::new("/var/cache/inpath.flash".into());
//! let server = Server::start(ServerConfig::new("127.0.0.1:11211", store))?;
//! println!("listening on {}", server.local_addr());
//! server.stop()?;
//! # Ok::<(), inpath_cache::CacheError>(())
//! ```

#![deny(unsafe_code)]

// The aligned O_DIRECT buffer needs raw allocation; every other module is safe code.
#[allow(unsafe_code)]
mod aligned;
mod error;
pub mod flash;
pub mod index;
pub mod live;
mod proto;
mod recover;
pub mod server;
pub mod store;
mod types;

pub use error::{CacheError, Result};
pub use server::{Server, ServerConfig};
pub use store::Store;
pub use types::{Geometry, Settings, StoreConfig, VERSION};
