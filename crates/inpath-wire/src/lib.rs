//! # inpath-wire
//!
//! The *wire* placement: inpath engines on a TCP path, after the SmartNIC deployments of the
//! reference systems (AMNES on an RDMA NIC, SKT on a 100G TCP NIC, reference 000 §3.5.5 and
//! §4.5.4), where "the endpoints should perceive the communication as if no other compute unit
//! is placed in between" (§1.2).
//!
//! - A **relay** ([`Mode::Relay`]) accepts connections, opens one to the destination for each,
//!   forwards the bytes unchanged in both directions and feeds one or both directions to
//!   **taps** (engines that observe, from `inpath-taps`: [`inpath_taps::Tap`]).
//! - A **sink** ([`Mode::Sink`]) receives and taps without forwarding (the SmartNIC receiving
//!   node).
//! - A **job** is a connection (its close is the hardware's `last` flag), or every N bytes, or
//!   one length-prefixed message ([`JobSplit`]). Each job's result is one JSON line; results
//!   merge into a combined view over all connections ([`hub::Hub`]), served over HTTP with
//!   Prometheus metrics ([`http`]).
//! - Taps never change, reorder or drop forwarded bytes. When they fall behind, by default
//!   ([`TapPolicy::Exact`]) the connection stops reading and TCP flow control slows the
//!   sender; nothing is skipped, and the waits are counted. With [`TapPolicy::Lossy`] the
//!   connection never waits: what the taps cannot reach is forwarded untapped, counted, and
//!   the job's result is marked partial.
//!
//! ```no_run
//! use inpath_wire::{Server, ServerConfig, Direction, LogTarget};
//!
//! # async fn example() -> Result<(), inpath_wire::WireError> {
//! let mut config = ServerConfig::relay("127.0.0.1:9000", "127.0.0.1:9001");
//! config.taps.push(inpath_taps::parse_tap("sketch:format=u32,cm=6x13")?);
//! config.directions = vec![Direction::C2s];
//! config.http = Some("127.0.0.1:9100".into());
//! config.log = LogTarget::File("results.jsonl".into());
//! let server = Server::bind(config).await?;
//! let stop = server.shutdown();
//! tokio::spawn(async move {
//!     tokio::time::sleep(std::time::Duration::from_secs(60)).await;
//!     stop.drain();
//! });
//! server.run().await; // returns after every open job's result is written
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod error;
mod gap;
pub mod http;
pub mod hub;
pub mod job;
mod metrics;
pub mod policy;
mod runner;
pub mod server;
pub mod transform;

pub use error::{Result, WireError};
pub use hub::{Hub, LogTarget, Outcome};
pub use job::JobSplit;
pub use policy::TapPolicy;
pub use server::{resolve, Mode, Server, ServerConfig, Shutdown};

pub use inpath_taps::Direction;
