//! The memcached protocol layer, above the store: [`step`] turns a connection's unread bytes
//! into one request and its reply.
//!
//! - `types`: [`Step`] and `MAX_LINE`, shared by the two below (a leaf).
//! - `text`: the classic text commands and the dispatch (`step`).
//! - `meta`: the meta commands mg, ms, md, ma.
//!
//! This file only declares the modules and re-exports; no module imports it for its own items.

mod meta;
mod text;
mod types;

pub use text::step;
pub use types::{Step, OUT_CHUNK};
