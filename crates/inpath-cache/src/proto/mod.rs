//! The memcached protocol layer, above the store: [`step`] turns a connection's unread bytes
//! into one request and its reply.
//!
//! - `types`: [`Step`] and `MAX_LINE`, shared by the modules below (a leaf).
//! - `text`: the classic text commands and the dispatch (`step`).
//! - `meta`: the meta commands mg, ms, md, ma.
//! - `stats`: the `stats` groups both protocols list (a leaf over the store).
//! - `binary`: memcached's binary protocol (`binary::step`, the same contract as `step`); it
//!   needs nothing from `text` or `meta`.
//!
//! This file only declares the modules and re-exports; no module imports it for its own items.

pub mod binary;
mod meta;
mod stats;
mod text;
mod types;

pub use text::step;
pub use types::{Step, OUT_CHUNK};
