//! # inpath-core
//!
//! The shape every inpath engine shares, after the FPGA systems it comes from: a job is a
//! stream fed in chunks of any size; [`Engine::finish`] (the hardware's `last` flag) emits the
//! result and resets; partial states from parallel [`lanes`] merge associatively.
//!
//! This crate also cuts byte streams into records ([`Framing`], [`Deframer`]), opens inputs
//! ([`Input`]), writes outputs all-or-nothing ([`output`]) and defines the typed [`Error`] all
//! engines return.
//!
//! ```
//! use inpath_core::{Deframer, Framing, RecordSink, Result};
//!
//! /// Sums little-endian u32 items.
//! struct Sum(u64);
//! impl RecordSink for Sum {
//!     fn fixed(&mut self, records: &[u8]) -> Result<()> {
//!         for item in records.chunks_exact(4) {
//!             self.0 += u32::from_le_bytes(item.try_into().unwrap()) as u64;
//!         }
//!         Ok(())
//!     }
//!     fn value(&mut self, _column: usize, _value: &[u8]) -> Result<()> { Ok(()) }
//! }
//!
//! let bytes: Vec<u8> = [1u32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let mut deframer = Deframer::new(Framing::Fixed { width: 4 })?;
//! let mut sum = Sum(0);
//! // Chunks may split items anywhere.
//! deframer.feed(&bytes[..5], &mut sum)?;
//! deframer.feed(&bytes[5..], &mut sum)?;
//! deframer.close(&mut sum)?;
//! assert_eq!(sum.0, 6);
//! # Ok::<(), inpath_core::Error>(())
//! ```
#![deny(missing_docs)]
// `unsafe` is allowed in one module only: `os` (memory maps, the SIGBUS guard, pipe sizes).
#![deny(unsafe_code)]

pub mod engine;
pub mod error;
pub mod framing;
pub mod http;
pub mod isa;
pub mod lanes;
pub(crate) mod os;
pub mod output;
pub mod source;

pub use engine::{Engine, Lane, Transform};
pub use error::{Error, Result};
pub use framing::{ColumnRef, CsvSpec, Deframer, Framing, RecordSink};
pub use lanes::{run_input, run_reader, run_slice, run_source, LaneOptions};
pub use os::{cpu_times, keep_large_buffers, thread_cpu_seconds};
pub use source::{Input, Source};
