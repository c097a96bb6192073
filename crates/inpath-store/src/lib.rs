//! # inpath-store: BlueDBM's in-store processing
//!
//! Kernels run beside the pages, and only results leave the store. After BlueDBM (Jun et al.,
//! ISCA 2015): flash pages, a Flash Server that turns `(handle, offset, length)` requests into
//! tagged out-of-order page reads reassembled into in-order ports, and search kernels next to
//! the flash. See docs/store.md.
//!
//! - [`store`]: a directory of pages (8 KiB by default, raw or sealed page by page with
//!   `inpath-seal`), a versioned [`catalog`] of handles with an extent map per handle.
//! - [`reader`]: the Flash Server read interface over a pool of `pread` workers.
//! - [`kernel`]: the kernel contract (lanes own page ranges, partials merge and serialise).
//! - [`remote`]: one request shape for local and served stores; `inpath store serve`'s
//!   protocol, server and client.
//! - [`search`]: literal (`memchr::memmem`) and line-oriented regex search;
//!   [`hamming`]: top-k Hamming nearest neighbours over fixed-size binary items (SIMD
//!   kernels picked in [`arch`]); [`lsh`]: approximate search by bit sampling.
//! - [`graph`]: a CSR graph format laid out in pages and breadth-first search over it;
//!   [`chase`]: the page chase (each page names the next).
//! - [`tap`]: the taps of `inpath-taps` (sketch, corr, crc) run over a handle in the store;
//!   `crc` as a page kernel whose lanes split the handle.
//!
//! ```
//! use inpath_store::{kernel, FlashReader, Literal, PutOptions, ReaderConfig, Store};
//! let dir = tempfile::tempdir()?;
//! let mut store = Store::create(dir.path())?;
//! let text = b"one needle\nhay\nneedle needle\n".repeat(1000);
//! let entry = store.put_reader(&text[..], "hay.txt", &PutOptions::default())?;
//!
//! let reader = FlashReader::new(ReaderConfig::default());
//! let handle = store.open_handle(entry.handle.into())?;
//! let hits = kernel::run(&reader, &handle, &Literal::new(b"needle", false)?, 2)?;
//! assert_eq!((hits.matches, hits.lines), (3000, 2000));
//! assert_eq!(store.read(entry.handle.into(), 4, 6)?, b"needle");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod arch;
pub mod catalog;
pub mod chase;
mod error;
pub mod graph;
pub mod guard;
pub mod hamming;
pub mod kernel;
pub mod live;
pub mod lsh;
pub mod reader;
pub mod remote;
pub mod search;
pub mod store;
pub mod tap;

pub use arch::HammingKernel;
pub use catalog::{Entry, Extent, HandleRef, Tier};
pub use chase::{chase, ChasePages, Chased, Stop};
pub use error::{Result, StoreError};
pub use graph::{csr_bytes, random_edges, read_edge_list, Bfs, CsrGraph, CsrHeader, GraphKind};
pub use hamming::{Hamming, Neighbour, Neighbours};
pub use kernel::{Flow, Kernel, Partial, RunStats, Scan};
pub use lsh::{LshIndex, LshParams, LshStats};
pub use reader::{Chunk, FlashReader, Jitter, Port, ReaderConfig, ReaderCounters, DEFAULT_SEGMENT};
pub use search::{Literal, LiteralHits, RegexHits, RegexSearch};
pub use store::{OpenHandle, PutOptions, RunBuffers, Store, DEFAULT_PAGE_SIZE, DIRECT_ALIGN};
pub use tap::{Crc, CrcPartial, HandleReader};
