//! The integration tests of inpath-offload, in one test binary (run one part with
//! `cargo test -p inpath-offload --test offload joins::`). No SQL engine is linked: every
//! graph is built by hand, and every answer is checked against a plain Rust reference
//! computed over the Arrow arrays that were written (never the device, never DataFusion).
//! Random cases come from fixed seeds.
//!
//! - [`table`]: inpath-table's test helpers (tables written alike).
//! - [`common`]: tables written in small pages and opened as the device opens them, graphs
//!   by hand, the device's batches as plain cells, partial aggregates merged.
//! - [`selector`]: the Row Selector selects the reference's rows.
//! - [`transformer`]: random programs aggregate exactly as an i128 reference.
//! - [`groups`]: group-bys of one and two keys merge into the reference's groups under any
//!   budget, spilling when it is small.
//! - [`joins`]: every join kind equals a nested-loop reference; a build that outgrows the
//!   budget runs in key-range passes, or is declined where no range can be split off.
//! - [`passes`]: graphs in key-range passes answer as whole ones: every join kind, counted
//!   and ordered groups merged across passes and spilled; a cancelled one leaves no file.
//! - [`condition`]: a semi or anti join's condition on a build's groups computes each value as
//!   Arrow's kernels do and keeps the reference's rows; a left join with groups reads 0 where
//!   a key has none.
//! - [`having`]: a HAVING on a build's groups keeps the passing groups; over pages in key
//!   order the lanes hold only those.
//! - [`order`]: SORT and TOPK over rows and groups keep every tie of the last row sent.
//! - [`lanes`]: lanes and budgets do not change answers; a dropped or cancelled stream stops
//!   its graph and the device goes on.
//! - [`graphs`]: hand-built graphs: the Row Selector against direct evaluation, bad graphs and
//!   budgets, the transformer's exactness, packed pages at the edges of 64 bits.
//! - [`prefix`]: a string's prefix as a group key gives the reference's groups, in the
//!   strings' byte order; one beyond 7 bytes is declined.
//! - [`pipe`]: a device served over a pipe answers as the local one, declines and cancels
//!   alike; a pipe that is not a device is refused.
//!
//! Every test writes its tables in its own temporary directory and makes its own devices, so
//! the tests can share the process.

#[path = "../../../inpath-table/tests/table/common.rs"]
mod table;

mod common;

mod condition;
mod graphs;
mod groups;
mod having;
mod joins;
mod lanes;
mod order;
mod passes;
mod pipe;
mod prefix;
mod selector;
mod transformer;
