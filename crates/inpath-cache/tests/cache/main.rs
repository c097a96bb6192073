//! The integration tests of inpath-cache, in one test binary (one link, one process; run one
//! part with `cargo test -p inpath-cache --test cache protocol::`).
//!
//! - [`common`]: a server on 127.0.0.1 port 0 with a temporary flash file, a raw client,
//!   self-checking values, and the open-file limit raised once for the whole binary.
//! - [`protocol`]: the memcached protocol through raw sockets: every command, pipelining, split
//!   segments, noreply, expiry, cas races, bad input, many connections.
//! - [`flash`]: the flash tier never serves a wrong value; index misses touch no flash; restarts
//!   (clean, damaged checkpoint, damaged log) keep what they can; sealed flash.
//! - [`differential`]: the same script to a real memcached (when installed) and to inpath's
//!   cache gives identical replies.
//! - [`binary`]: memcached's binary protocol: every opcode, quiet variants, a pipeline split at
//!   every byte, malformed requests, `-B` detection, the same binary script to a real memcached
//!   `-B binary`, and libmemcached's tools (when installed).
//!
//! Every server listens on a port the system picks and keeps its flash in its own temporary
//! directory, so the tests can share the process.

mod common;

mod binary;
mod differential;
mod flash;
mod protocol;
