//! The engine shape every inpath engine follows, and the rules for calling it.
//!
//! A *job* is a finite stream whose end comes at an unknown time: a file, a TCP connection, a
//! page. The hardware reference systems mark its end with a `last` flag; here that is
//! [`Engine::finish`].
//!
//! # Calling rules
//! - [`Engine::update`] may be called any number of times with chunks of **any** size, including
//!   empty ones. Chunks may split a record anywhere; the engine carries the partial record over.
//!   The state after feeding a byte stream never depends on how it was cut into chunks.
//! - [`Engine::finish`] ends the job: it closes the input (a final unterminated text line is
//!   taken as a record, a partial fixed-width record is an error), returns the result and resets
//!   the engine to the empty state with the same configuration, ready for the next job.
//! - An error from `update` means the input was bad (for example an unparsable CSV cell). The
//!   state then holds everything fed before the bad record; the job should be abandoned or
//!   finished by the caller, which decides whether a partial result is useful.
//! - An error from `finish` leaves the engine reset, as after a successful `finish`.
//!
//! # Lanes
//! Engines whose partial states merge associatively implement [`Lane`]. A job is then split
//! across threads: each thread gets a [`Lane::fork`] of the engine and whole records only (see
//! [`crate::Framing::split_point`]); at the end the lanes [`Lane::merge`] into one. Merging is
//! exact, so results never depend on the number of lanes or on which lane saw which records.
//! This is DuckDB's Sink / Combine / Finalize: `update` sinks, `merge` combines, `finish`
//! finalizes.

use crate::{Framing, Result};

/// A streaming engine fed a job in chunks.
pub trait Engine: Send {
    /// What the engine emits at the end of a job.
    type Output;

    /// Feeds the next chunk of the current job.
    fn update(&mut self, chunk: &[u8]) -> Result<()>;

    /// Ends the job: emits the result and resets the engine.
    fn finish(&mut self) -> Result<Self::Output>;
}

/// An engine whose partial state can be split across lanes and merged back.
pub trait Lane: Engine + Sized {
    /// How this engine cuts its input into records; lanes only receive whole records.
    fn framing(&self) -> &Framing;

    /// A fresh engine with the same configuration and stream context (such as a resolved CSV
    /// header) and an empty state.
    fn fork(&self) -> Self;

    /// Ends this lane's input without emitting anything: a final unterminated line is taken as a
    /// record and a partial fixed-width record is reported as [`crate::Error::TrailingBytes`].
    /// Afterwards the engine holds only mergeable state and may take more input.
    fn close_input(&mut self) -> Result<()>;

    /// Folds `other`'s state into this one. Both must have been configured alike and must hold
    /// no partial record (call [`Lane::close_input`] first); otherwise
    /// [`crate::Error::Incompatible`] or [`crate::Error::State`].
    fn merge(&mut self, other: &Self) -> Result<()>;
}

/// A streaming transform: bytes in, bytes out (a compressor, a decompressor, a cipher mode).
///
/// Where a tap ([`Engine`]) only observes a job, a transform produces output as the job streams
/// through. The hardware analog is a kernel between a read FIFO and a write FIFO, with `last`
/// marking the end of a payload.
///
/// # Calling rules
/// - [`Transform::push`] may be called any number of times with chunks of **any** size, including
///   empty ones. It appends whatever output is ready to `out` (possibly nothing: a compressor
///   buffers until it has a block). The concatenated output never depends on how the input was
///   cut into chunks.
/// - [`Transform::finish`] ends the job: it flushes what is buffered (trailers, padding, the last
///   block), checks that the input ended where the format allows (a decompressor reports a
///   truncated stream), appends the final output and resets the transform for the next job.
/// - An error from `push` means the input is bad (a damaged stream, a checksum mismatch). Output
///   appended before the error is what the valid prefix produced; the job should be abandoned.
///   An error from `finish` leaves the transform reset, as after a successful `finish`.
pub trait Transform: Send {
    /// Feeds the next chunk of the current job and appends the output that is ready to `out`.
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()>;

    /// Ends the job: appends the remaining output to `out` and resets.
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<()>;
}
