//! # inpath-cache: BlueCache for an SSD
//!
//! A memcached-compatible key-value cache (text, meta and binary protocol) whose DRAM holds a compact
//! set-associative index (12-byte entries, ~13.5 bytes per item with the flash full) and the hot
//! values, and whose flash tier is an append-only log of checksummed records in a file,
//! reclaimed oldest chunk first. The index is checkpointed and the log replayed at start, so a
//! restart (clean or after a crash) keeps the cache. Design after BlueCache (Xu, MIT 2021, part I); see docs/cache.md.
//!
//! ```no_run
//! use inpath_cache::{Server, ServerConfig, StoreConfig};
//! let store = StoreConfig::new("/var/cache/inpath.flash".into());
//! let server = Server::start(ServerConfig::new("127.0.0.1:11211", store))?;
//! println!("listening on {}", server.local_addr());
//! server.stop()?;
//! # Ok::<(), inpath_cache::CacheError>(())
//! ```
//!
//! ## Layers
//!
//! Each module imports only modules of the layers below it; no two files import each other.
//!
//! 1. Leaves: `error` ([`CacheError`]), `types` (configuration, [`Settings`], [`Geometry`], the
//!    store's request and result types, the seal hook, the recovery report, [`VERSION`]),
//!    [`conns`] (the open connections, for `stats conns`), [`access`] (TLS, listeners and
//!    users: memcached's `-Z`, `-l`, `-Y`, `-S`; the counters `stats` shows) and `aligned`
//!    (the O_DIRECT buffer and the allocator's settings: the only module allowed `unsafe`
//!    code).
//! 2. [`flash`] (the file, chunk headers, checksummed records) and [`index`] (the DRAM index).
//! 3. `recover`: checkpoint writing and loading, log replay into a fresh index.
//! 4. [`store`]: DRAM values, the log writer, eviction and reclaim, checkpoints, `stats`.
//! 5. `proto`: the memcached text protocol (`proto::text`), meta commands (`proto::meta`) and
//!    binary protocol (`proto::binary`), which share only the `proto::types` leaf.
//! 6. `gate`: authentication in front of the protocol (`-Y`, `-S`) and `refresh_certs`;
//!    [`live`]: `stats` as JSON and metrics over HTTP.
//! 7. `udp`: memcached's UDP frames around the same protocol steps (`-U`).
//! 8. [`server`]: the accept loop, workers, UDP, periodic flushes and checkpoints.
//!
//! There are no process-wide settings: a server passes its [`Settings`] to the store it opens
//! ([`Store::open_with`]), and the protocol reads them from there.

#![deny(unsafe_code)]

pub mod access;
// The aligned O_DIRECT buffer needs raw allocation, the allocator's settings a C call; every
// other module is safe code.
#[allow(unsafe_code)]
mod aligned;
pub mod conns;
mod error;
pub mod flash;
mod gate;
pub mod index;
pub mod live;
mod proto;
mod recover;
pub mod server;
pub mod store;
mod types;
mod udp;

pub use access::{Listener, Security, Users};
pub use error::{CacheError, Result};
pub use server::{Server, ServerConfig};
pub use store::{ClassSummary, MemLimitTooSmall, Store};
pub use types::{FlashFaults, Geometry, Protocol, Settings, StoreConfig, VERSION};
