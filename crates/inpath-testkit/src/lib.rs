//! # inpath-testkit
//!
//! What the crates' test suites share and no user needs, kept out of the libraries' public
//! APIs: [`fuzz`], the seeded mutator and the corpus runner of the bounded fuzz passes that run
//! in the normal suites (`crates/<crate>/tests/<name>/fuzz.rs`). Not published: crates take it
//! as a dev-dependency only.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod fuzz;
