//! # inpath-corr
//!
//! AMNES in software: the Pearson correlation of every pair of M parallel streams in one pass
//! (reference 000, chapter 3). The engine accumulates the *sufficient statistics* (the count N,
//! each stream's sum and sum of squares, each pair's sum of products) in integer accumulators
//! that no input can overflow, and every coefficient is computed from them at the end:
//! Pearson's r in the reference's order (upper triangle, row by row), covariance, means and
//! standard deviations, regression slope and intercept, cosine similarity.
//!
//! - **Exact** for 8, 16, 32 and 64-bit integers, signed or not: the statistics equal the
//!   big-integer sums bit for bit, and the centred numerators are formed exactly before one
//!   rounding, so coefficients are within a few ulps of the exact value.
//! - **Accurate** for f32/f64: products summed with fused multiply-adds in blocks of 64 rows,
//!   blocks summed in double-double. See `docs/corr.md` for the bounds.
//! - **Mergeable**: [`Statistics`] from different files, lanes or machines merge exactly, save
//!   to a checksummed file and turn into coefficients later.
//! - **Lanes**: [`Corr`] implements inpath-core's [`inpath_core::Lane`]; integer results are
//!   identical for any thread count and chunking.
//!
//! ```
//! use inpath_core::Engine;
//! use inpath_corr::{Corr, CorrConfig, DType, NanPolicy};
//!
//! // 16 u32 streams in the reference's 64-byte lines.
//! let mut corr = Corr::new(CorrConfig::rows(DType::U32, 16))?;
//! let mut data = Vec::new();
//! for t in 0..1000u32 {
//!     for s in 0..16u32 {
//!         // Stream s is t * (s + 1), except stream 15 which runs backwards.
//!         let v = if s == 15 { 5000 - t } else { t * (s + 1) };
//!         data.extend_from_slice(&v.to_le_bytes());
//!     }
//! }
//! corr.update(&data)?;
//! let stats = corr.finish()?;
//! let r = stats.pearson(NanPolicy::Nan);
//! assert_eq!(r.len(), 120);
//! assert_eq!(r[stats.pair_index(0, 1)], 1.0);
//! assert_eq!(r[stats.pair_index(0, 15)], -1.0);
//! # Ok::<(), inpath_core::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod accum;
mod arch;
mod coeff;
mod dtype;
mod engine;
mod lanes;
mod spearman;
mod stats;
mod wide;

pub use arch::Kernel;
pub use coeff::{Ddof, NanPolicy, Regression};
pub use dtype::{DType, Exactness};
pub use engine::{Corr, CorrConfig, Layout, Method};
pub use lanes::run_column_lanes;
pub use stats::{default_names, Kind, Stat, Statistics, MAGIC, MAX_STREAMS, VERSION};
pub use wide::{Dd, I256};
