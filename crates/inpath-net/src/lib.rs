//! # inpath-net
//!
//! What every inpath server shares to be put on a network: TLS, who may connect, and where it
//! may listen. The servers (`store serve`, `cache serve`, the `--http` pages of the store,
//! the cache and the wire) take these from here and never keep a copy of their own.
//!
//! - [`tls`]: rustls configurations from PEM files (certificate chain and key; a client CA
//!   file for mutual TLS, the client certificate optional or required; the lowest version),
//!   reloadable while serving; the words for a failed handshake.
//! - [`client`]: a client's credentials (CA, certificate, token) and its connection.
//! - [`stream`]: a blocking connection that is plain or TLS, and the handshakes, for servers
//!   with a thread per connection. Servers on tokio use `tokio_rustls` (feature `tokio`).
//! - [`tokens`]: token files (a name, a role `read` or `write`, and the SHA-256 of the token;
//!   the tokens themselves are never stored), new tokens.
//! - [`limit`]: failed attempts counted and slowed per source address.
//! - [`policy`]: no open port beyond loopback without TLS and authentication, unless the user
//!   says so.
//! - [`certs`]: a small CA for quickstarts and tests (`inpath tls init`).
//! - [`http`]: the HTTP port of the live pages, plain or HTTPS, with an optional token.
//!
//! ```
//! use inpath_net::{certs::{Ca, Validity}, tokens::{self, Role, Tokens}};
//!
//! let ca = Ca::new("inpath test CA", Validity::days(1))?;
//! let server = ca.server(&["localhost".into(), "127.0.0.1".into()], Validity::days(1))?;
//! assert!(server.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
//!
//! let token = tokens::generate()?;
//! let file = tokens::with_entry("", "ci", Role::Read, &token);
//! let tokens = Tokens::parse(&file, "tokens".as_ref())?;
//! assert_eq!(tokens.check(&token).map(|g| g.role), Some(Role::Read));
//! assert!(tokens.check("inpath_guess").is_none());
//! # Ok::<(), inpath_net::NetError>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod certs;
pub mod client;
pub mod error;
pub mod files;
pub mod http;
pub mod limit;
pub mod policy;
pub mod stream;
pub mod tls;
pub mod tokens;

pub use client::{CredentialFiles, Credentials};
pub use error::{NetError, Result};
pub use http::{HttpGuard, HttpServer};
pub use limit::{Limiter, Slowing};
pub use policy::Protection;
pub use stream::Stream;
pub use tls::{ClientCerts, ClientTlsFiles, MinVersion, ServerTls, ServerTlsFiles};
pub use tokens::{Grant, Role, Tokens};

/// rustls itself, for the types the configurations are made of.
pub use rustls;
/// TLS on tokio sockets (`TlsAcceptor`, `TlsConnector`), for servers that run on tokio.
#[cfg(feature = "tokio")]
pub use tokio_rustls;
