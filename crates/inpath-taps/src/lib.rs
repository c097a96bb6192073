//! # inpath-taps
//!
//! Taps: engines that observe the bytes of a stream as they pass, without touching them. The
//! wire relay runs them on a connection (`inpath wire --tap`), the store over a handle's bytes
//! beside its pages (`inpath store sketch|corr`); both take the same specification
//! ([`parse_tap`]) and give the same results.
//!
//! # The extension point
//! A tap is three small objects:
//! - a [`TapFactory`], parsed once from a `--tap name:key=value,...` specification
//!   ([`parse_tap`]); it makes one [`Tap`] per connection direction, lazily, when the first
//!   byte arrives (so idle connections hold no tap state);
//! - the [`Tap`] itself, fed the direction's bytes in chunks of any size ([`Tap::update`]) and
//!   asked for its result when a job ends ([`Tap::finish`], which also resets it);
//! - a [`Partial`]: the mergeable part of a result, folded into the combined view of all
//!   connections and cloned for live snapshots of open ones.
//!
//! Adding an engine means: a file here implementing these three for it (like [`corr`], exact
//! correlation statistics, whose partial states merge like sketches do), one arm in
//! [`parse_tap`] and one name in [`TAP_NAMES`]. Nothing in the relay or the store changes.
//!
//! # Layout
//! [`contract`] (the traits, [`JobId`], [`Direction`]) and [`error`] are leaves; each tap is a
//! file over them ([`sketch`] with [`top`], [`corr`], [`crc`]); [`spec`] parses a
//! specification into one of them. No two files import each other.
//!
//! # Calling rules
//! - `update` gets the bytes in stream order, in chunks of any size, after (or while) they are
//!   forwarded; a tap cannot change, reorder or drop forwarded bytes (it only sees `&[u8]`).
//! - A feeder may skip bytes it cannot tap in time (the wire relay's lossy tap policy). It then
//!   drops the records a gap cuts (found by [`TapFactory::record_width`] or
//!   [`TapFactory::record_delimiter`]), so a tap never gets a record glued together from both
//!   sides of a gap and needs no code of its own for gaps.
//! - An error from `update` means the bytes were not valid input for this tap (for example a
//!   bad CSV cell): the tap is not fed again until its job ends, and the job's result reports
//!   the error. Forwarding is never affected.
//! - `finish` ends the job (a connection closing, or `--job-bytes` / message boundaries), must
//!   not fail (problems go into the output) and leaves the tap ready for the next job.
//!
//! Three taps exist: `sketch` (the SKT engine: HyperLogLog + Fast-AGMS + Count-Min +
//! min/max/count, and the top items with `top=K`), `corr` (AMNES: exact correlation
//! statistics) and `crc` (bytes and CRC-32 of each job; a check that the tap saw exactly what
//! was forwarded).
//!
//! ```
//! let factory = inpath_taps::parse_tap("sketch:format=u32,sketches=hll").unwrap();
//! let bytes: Vec<u8> = (0u32..1000).flat_map(|v| v.to_le_bytes()).collect();
//! let result = factory.run_input(&mut &bytes[..], 2).unwrap();
//! assert_eq!(result["records"], 1000);
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod contract;
pub mod corr;
pub mod crc;
pub mod error;
pub mod sketch;
pub mod spec;
pub mod top;

pub use contract::{close_job, run_lanes, Direction, JobId, Partial, Tap, TapFactory, TapOutput};
pub use corr::{CorrPartial, CorrTapFactory};
pub use crc::{CrcPartial, CrcTap, CrcTapFactory};
pub use error::{Result, TapError};
pub use sketch::{sketch_json, SketchPartial, SketchTapFactory};
pub use spec::{parse_tap, tap_name, TAP_NAMES};
