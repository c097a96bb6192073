//! The integration tests of inpath-store, in one test binary (one link, one process; run one
//! part with `cargo test --release -p inpath-store --test store lsh::`). Each test keeps its
//! files in its own temporary directory; the kernel level is the process's (`INPATH_ISA`).
//!
//! - [`common`]: a seeded SplitMix64 generator.
//! - [`graph`]: BFS over CSR pages against a naive reference, raw and sealed, every thread
//!   count; the page chase; damaged and inconsistent graphs.
//! - [`hamming`]: every Hamming kernel against the scalar reference and a brute-force top-k;
//!   two ignored speed probes (`hamming::kernel_speeds`, `hamming::harley_seal_speed`).
//! - [`kernels`]: search and nearest-neighbour kernels against naive references and grep,
//!   every lane count and chunk size, in memory and through the store's reader.
//! - [`lsh`]: LSH by bit sampling: recall on planted near-duplicates, the index file's checks.
//! - [`security`]: `store serve` with TLS, client certificates and tokens: every refusal in
//!   words with nothing changed, slowing of 1,000 wrong tokens.
//! - [`store`]: the page store and its reader: round trips in every seal tier, tags and ports,
//!   bad inputs with their exact errors.

mod common;

mod graph;
mod hamming;
mod kernels;
mod lsh;
mod security;
mod store;
