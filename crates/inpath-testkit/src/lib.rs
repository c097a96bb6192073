//! # inpath-testkit
//!
//! What the crates' test suites share and no user needs, kept out of the libraries' public
//! APIs. Not published: crates take it as a dev-dependency only.
//!
//! - [`fuzz`]: the seeded mutator and the corpus runner of the bounded fuzz passes that run in
//!   the normal suites (`crates/<crate>/tests/<name>/fuzz.rs`).
//! - [`run`]: the built binary as a child process, bounded in time, with assertions that show
//!   what it printed.
//! - [`diff`]: readable differences of texts and bytes (the first line or offset that parts).
//! - [`dir`]: temporary directories named after their test, files in them, snapshots.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod diff;
pub mod dir;
pub mod fuzz;
pub mod run;
