//! The integration tests of inpath-cache, in one test binary (one link, one process; run one
//! part with `cargo test -p inpath-cache --test cache protocol::`).
//!
//! - [`common`]: a server on 127.0.0.1 port 0 with a temporary flash file, a raw client,
//!   self-checking values, and the open-file limit raised once for the whole binary.
//! - [`protocol`]: the memcached protocol through raw sockets: every command, pipelining, split
//!   segments, noreply, expiry, cas races, bad input, many connections.
//! - [`flash`]: the flash tier never serves a wrong value; index misses touch no flash; restarts
//!   (clean, damaged checkpoint, damaged log) keep what they can; sealed flash.
//! - [`faults`]: flash write errors (mid-chunk, full), read errors, a vanished file.
//! - [`dram_only`]: no flash file: eviction, evictions off (`-M`), CAS off (`-C`), `shutdown`.
//! - [`differential`]: the same script to a real memcached (when installed) and to inpath's
//!   cache gives identical replies.
//! - [`fuzz`]: seeded random and mutated command streams, pipelined and cut anywhere: valid
//!   ones answered exactly as a model says, mutated ones never panic, stall or wedge the server.
//! - [`memory`]: a server in a child process (this binary run again) stays within its DRAM
//!   budget plus a stated overhead under a load that fills it.
//! - [`conformance`]: issue 56's drop-in gaps as memcached's `t/` suite expects them (HTTP
//!   lines, delayed and CAS-less flush_all, `stats settings`, `-M -m 2`, `bytes`, `reclaimed`,
//!   `conn_yields`, `stats cachedump`) and the UDP protocol, against its documented framing and
//!   a real memcached.
//! - [`binary`]: memcached's binary protocol: every opcode, quiet variants, a pipeline split at
//!   every byte, malformed requests, `-B` detection, the same binary script to a real memcached
//!   `-B binary`, and libmemcached's tools (when installed).
//! - [`security`]: TLS with client certificates and a `notls:` listener, `-Y`, `-S`: every
//!   refusal, 1,000 wrong passwords slowed, and the same answers as memcached with the same
//!   options (its TLS, its `-Y`, its Cyrus SASL).
//!
//! Every server listens on a port the system picks and keeps its flash in its own temporary
//! directory, so the tests can share the process.

mod common;

mod binary;
mod conformance;
mod differential;
mod dram_only;
mod faults;
mod flash;
mod fuzz;
mod memory;
mod protocol;
mod security;
