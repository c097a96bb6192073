//! The integration tests of inpath-cli, in one test binary (one link, one process; run one part
//! with `cargo test --release -p inpath-cli --test cli sweep::`). Every test runs the built
//! `inpath` (`CARGO_BIN_EXE_inpath`) as a child process in its own temporary directory, with any
//! environment or limit set on the child, never on this process.
//!
//! - [`common`]: running `inpath` in a directory, a `store serve` on loopback stopped on drop.
//! - [`cache_cli`]: `inpath cache serve`: kill -9 mid-write, SIGTERM, a taken port, options.
//! - [`corr`]: `inpath corr` end to end on files in a temporary directory.
//! - [`demo_cli`]: `inpath demo` runs every section and its self-checks say "equal".
//! - [`input_paths`]: mapped, streamed, pipe, `/dev/stdin`, FIFO and any thread count agree.
//! - [`query_cli`]: `inpath query gen|import|sql|tpch|inspect`.
//! - [`security_cli`]: `inpath tls init|token`, `store serve` with TLS, certificates and
//!   tokens, the listener policy.
//! - [`sketch_cli`]: `inpath sketch` end to end.
//! - [`store_cli`]: `inpath store` put, ls, read, rm, grep (against grep), nn and bad inputs.
//! - [`store_graph_cli`]: `inpath store put-graph | bfs | put-chase | chase`.
//! - [`store_nn_cli`]: `inpath store index` and `nn --lsh`, locally and through `store serve`.
//! - [`sweep`]: the bad-input sweep over every command: exit, message, directory unchanged.
//! - [`wire_cli`]: `inpath wire` on loopback, stopped with SIGTERM.

mod common;

mod cache_cli;
mod corr;
mod demo_cli;
mod input_paths;
mod query_cli;
mod security_cli;
mod sketch_cli;
mod store_cli;
mod store_graph_cli;
mod store_nn_cli;
mod sweep;
mod wire_cli;
