//! The inpath-corr integration tests, in one test binary (`cargo test -p inpath-corr --test
//! corr`):
//!
//! - `exact`: the engine against an independent big-integer reference (statistics bit for bit,
//!   coefficients within rounding), and every kernel level the CPU supports (AVX-512, AVX2,
//!   portable, capped by `INPATH_ISA`) against the portable kernels in this one process, through
//!   `Corr::with_isa_cap`;
//! - `errors`: named malformed inputs and the exact errors they give;
//! - `lanes`: `run_column_lanes` at any lane count against one engine, and its errors;
//! - `fuzz`: a bounded, seeded fuzz pass over the statistics file reader, from the corpus in
//!   `tests/corpus`;
//! - `common`: the helpers (random data of every type, the big-integer reference).
//!
//! No test changes process-wide state (environment, working directory, limits), so they run
//! side by side on the harness's threads.

mod common;
mod errors;
mod exact;
mod fuzz;
mod lanes;
