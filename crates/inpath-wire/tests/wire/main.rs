//! The integration tests of inpath-wire, in one test binary (one link, one process; run one part
//! with `cargo test --release -p inpath-wire --test wire faults::`). Servers bind port 0 on
//! loopback and log into their own temporary directories, so the tests share the process.
//!
//! - [`common`]: servers on loopback, echo and dead ports, random streams, log reading, and the
//!   process's open-file limit (raised once for the whole binary).
//! - [`data`]: forwarded bytes identical, taps equal the in-memory engines, framing, job
//!   splitting, the transform hook and the HTTP API.
//! - [`faults`]: refused and resetting peers, half-close, slow readers, idle timeouts, a thousand
//!   connections, shutdown, bad settings.
//! - [`lossy`]: the lossy tap policy: every byte forwarded while a held tap skips, records kept
//!   whole and aligned around gaps, gaps counted in the right jobs, bad policies refused.
//! - [`fuzz`]: a bounded, seeded fuzz pass over the message splitter and the unseal transform
//!   from the committed corpus (`tests/corpus`).

mod common;

mod data;
mod faults;
mod fuzz;
mod lossy;
