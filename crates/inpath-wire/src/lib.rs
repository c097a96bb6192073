//! # inpath-wire
//!
//! The *wire* placement: inpath engines on a TCP path, after the SmartNIC deployments of the
//! reference systems (AMNES on an RDMA NIC, SKT on a 100G TCP NIC, reference 000 §3.5.5 and
//! §4.5.4), where "the endpoints should perceive the communication as if no other compute unit
//! is placed in between" (§1.2).
//!
//! - A **relay** ([`Mode::Relay`]) accepts connections, opens one to the destination for each,
//!   forwards the bytes unchanged in both directions and feeds one or both directions to
//!   **taps** (engines that observe: [`tap::Tap`]).
//! - A **sink** ([`Mode::Sink`]) receives and taps without forwarding (the SmartNIC receiving
//!   node).
//! - A **job** is a connection (its close is the hardware's `last` flag), or every N bytes, or
//!   one length-prefixed message ([`JobSplit`]). Each job's result is one JSON line; results
//!   merge into a combined view over all connections ([`hub::Hub`]), served over HTTP with
//!   Prometheus metrics ([`http`]).
//! - Taps never change, reorder or drop forwarded bytes. When they fall behind, the connection
//!   stops reading and TCP flow control slows the sender; nothing is skipped, and the waits
//!   are counted.
//!
//! ```no_run
//! use inpath_wire::{tap, Server, ServerConfig, Direction, LogTarget};
//!
//! # async fn example() -> Result<(), inpath_wire::WireError> {
//! let mut config = ServerConfig::relay("127.0.0.1:9000", "127.0.0.1:9001");
//! config.taps.push(tap::parse_tap("sketch:format=u32,cm=6x13")?);
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

mod corr_tap;
pub mod error;
pub mod http;
pub mod hub;
pub mod job;
mod runner;
pub mod server;
pub mod tap;
pub mod top;
pub mod transform;

pub use error::{Result, WireError};
pub use hub::{Hub, LogTarget, Outcome};
pub use job::JobSplit;
pub use server::{resolve, Mode, Server, ServerConfig, Shutdown};

/// A direction of a relayed connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Client to server: the bytes the relay (or sink) receives on its accepted connections.
    C2s,
    /// Server to client: the destination's answers (relay only).
    S2c,
}

impl Direction {
    /// Both directions.
    pub const ALL: [Direction; 2] = [Direction::C2s, Direction::S2c];

    /// `c2s` or `s2c`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::C2s => "c2s",
            Direction::S2c => "s2c",
        }
    }

    /// 0 for c2s, 1 for s2c.
    pub fn index(self) -> usize {
        match self {
            Direction::C2s => 0,
            Direction::S2c => 1,
        }
    }
}
