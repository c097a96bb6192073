//! The integration tests of inpath-core, in one test binary (one link, one process; run one
//! part with `cargo test -p inpath-core --test core lanes::`).
//!
//! - [`common`]: a mergeable test engine (the multiset of records as count, byte sum and hash
//!   sum) and a text generator.
//! - [`framing`]: record framing (fixed width, lines, CSV) gives the same records for any
//!   chunking; bad input gives the exact error.
//! - [`lanes`]: a job split across threads gives the same state as one lane, for any chunk size.
//! - [`source`]: a mapped file, the same file streamed, a FIFO and any lane count agree; a file
//!   truncated while it is mapped is an error, never a crash (the SIGBUS guard is process-wide;
//!   only these tests map files, as when they were a binary of their own).

mod common;

mod framing;
mod lanes;
mod source;
