//! # inpath-sketch
//!
//! SKT (reference 000, chapter 4) in software: one pass over a stream computes a HyperLogLog
//! cardinality estimate, a Fast-AGMS estimate of the second frequency moment F2, Count-Min
//! point frequencies, and the exact min, max and count — all from **one 128-bit hash per item**,
//! sliced for the three sketches ([`params::Slicing`]).
//!
//! - [`Sketch`] is the mergeable state; [`SketchEngine`] feeds it from framed byte streams and
//!   implements inpath-core's `Engine` and `Lane`.
//! - [`HashMode::Compat`] is bit-exact with the SKT reference software (MurmurHash3_x64_128,
//!   seed `0xDEADF00D`); [`HashMode::Fast`] (default) uses XXH3-128.
//! - [`format`] reads and writes the versioned, checksummed sketch file.
//!
//! ```
//! use inpath_sketch::{Estimator, ItemKind, Params, Parts, Sketch};
//!
//! let mut sketch = Sketch::new(Params::default(), ItemKind::U32)?;
//! let items: Vec<u32> = (0..100_000).map(|i| i % 1000).collect();
//! sketch.update_u32(&items)?;
//! let summary = sketch.summary(Estimator::Ertl);
//! assert_eq!(summary.count, 100_000);
//! assert!((summary.cardinality.unwrap() - 1000.0).abs() < 10.0);
//! // Count-Min never underestimates: item 7 occurred 100 times.
//! assert!(sketch.frequency("7")? >= 100);
//! // Each item occurs 100 times, so F2 = 1000 * 100^2.
//! assert!((summary.f2.unwrap() / 1e7 - 1.0).abs() < 0.05);
//!
//! // Only the distinct count: HyperLogLog alone, the other sketches are not kept.
//! let mut ids = Sketch::new(Params::default().with_parts(Parts::HLL), ItemKind::U32)?;
//! ids.update_u32(&items)?;
//! assert_eq!(ids.cardinality(Estimator::Ertl), sketch.cardinality(Estimator::Ertl));
//! assert_eq!(ids.f2(), None);
//! # Ok::<(), inpath_core::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)] // allowed only in `arch`, for calling its CPU-specific versions

pub mod arch;
pub mod counters;
pub mod datasketches;
pub mod engine;
pub mod format;
pub mod hash;
pub mod hll;
pub mod params;
pub mod query;
pub mod report;
pub mod sketch;

/// The kernel dispatch under its former name: `inpath_sketch::kernel::kernel_name()` and the
/// other level functions still work.
pub use arch as kernel;
pub use engine::{SketchEngine, LANE_MIN_ITEMS};
pub use hash::HashMode;
pub use hll::Estimator;
pub use inpath_core::{Error, Result};
pub use params::{Params, Parts};
pub use query::{CountMinReport, Summary};
pub use sketch::{Extremes, ItemKind, Sketch, ValueBatcher};
