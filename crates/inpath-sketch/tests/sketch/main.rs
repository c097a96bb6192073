//! The integration tests of inpath-sketch, in one test binary (one link, one process; run one
//! part with `cargo test -p inpath-sketch --test sketch parts::`).
//!
//! - [`common`]: the simple model of the sketch written from the slicing rules, data generators.
//! - [`compat`]: the sketch equals the model, register for register and counter for counter, in
//!   both hash modes, for u32 and u64 items and byte values, through every kernel level the CPU
//!   supports (compared in process: no `INPATH_ISA` rerun needed).
//! - [`parts`]: keeping only some sketches, at every kernel level and layout.
//! - [`properties`]: merge equals union, any chunking and lane count give identical state,
//!   counters stay exact across tier folds.
//! - [`hash`]: known answers for MurmurHash3 and XXH3, and the inlined small-item hashes.
//! - [`format`]: the sketch file's round trips and damage reports.
//! - [`fuzz`]: a bounded, seeded fuzz pass over the file reader with the committed corpus
//!   (`tests/corpus`).
//! - [`accuracy`]: HyperLogLog, Fast-AGMS and Count-Min accuracy on up to 10^8 items, once, at
//!   the process-wide kernel level.

mod common;

mod accuracy;
mod compat;
mod format;
mod fuzz;
mod hash;
mod parts;
mod properties;
