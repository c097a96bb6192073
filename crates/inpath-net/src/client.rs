//! A client's side: what it proves (a CA to check the server, a certificate, a token) and the
//! connection that carries it, plain or TLS.

use crate::error::{NetError, Result};
use crate::stream::{self, HandshakeError, Stream};
use crate::tls::{server_name, ClientTlsFiles};
use rustls::ClientConfig;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The environment variable a client reads its token from when no token file is given.
pub const TOKEN_ENV: &str = "INPATH_TOKEN";

/// How a client connects: TLS (with the CA that signs the server's certificate, and the
/// client's own certificate if the server asks for one) and a token to send.
#[derive(Clone, Default)]
pub struct Credentials {
    /// TLS, when the server speaks it.
    pub tls: Option<Arc<ClientConfig>>,
    /// The name to check the server's certificate against (default: the host connected to).
    pub server_name: Option<String>,
    /// A token to send once the connection is up.
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("tls", &self.tls.is_some())
            .field("server_name", &self.server_name)
            .field("token", &self.token.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// The files and settings a client's options name (the CLI's `--tls-ca`, `--tls-cert`,
/// `--tls-key`, `--token-file`, `--tls-server-name`; the Python keywords).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialFiles {
    /// CA certificates the server's certificate must chain to: TLS on when given.
    pub ca: Option<PathBuf>,
    /// A client certificate (PEM).
    pub cert: Option<PathBuf>,
    /// Its key (PEM; default: in the certificate file).
    pub key: Option<PathBuf>,
    /// A file whose first line is the token.
    pub token_file: Option<PathBuf>,
    /// The token itself (from `INPATH_TOKEN` or a program); the file wins.
    pub token: Option<String>,
    /// The name the server's certificate must hold.
    pub server_name: Option<String>,
}

impl CredentialFiles {
    /// Reads the files.
    pub fn load(&self) -> Result<Credentials> {
        let tls = match &self.ca {
            Some(ca) => Some(
                ClientTlsFiles {
                    ca: ca.clone(),
                    cert: self.cert.clone(),
                    key: self.key.clone(),
                }
                .build()?,
            ),
            None if self.cert.is_some() || self.key.is_some() => {
                return Err(NetError::Setting {
                    name: "client certificate",
                    value: self
                        .cert
                        .as_ref()
                        .or(self.key.as_ref())
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    valid: "a client certificate is for TLS: give the CA that signs the \
                            server's certificate too (--tls-ca)"
                        .into(),
                })
            }
            None => None,
        };
        let token = match &self.token_file {
            Some(path) => Some(crate::tokens::read_token_file(path)?),
            None => self.token.clone().filter(|t| !t.trim().is_empty()),
        };
        Ok(Credentials {
            tls,
            server_name: self.server_name.clone(),
            token,
        })
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The address does not resolve.
    #[error("cannot resolve the address: {0}")]
    Resolve(#[source] std::io::Error),
    /// TCP failed.
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The server name is not one a certificate can hold.
    #[error("{0}")]
    Name(#[source] NetError),
    /// The TLS handshake failed.
    #[error("{0}{hint}", hint = handshake_hint(.0))]
    Handshake(#[source] HandshakeError),
}

fn handshake_hint(e: &HandshakeError) -> &'static str {
    match e {
        HandshakeError::Closed { .. } => {
            " (a plain server closes a TLS client so: connect without --tls-ca)"
        }
        _ => "",
    }
}

/// Connects to `addr` (`HOST:PORT`, each of its addresses in turn), waiting at most `timeout`
/// for TCP and as long again for the TLS handshake when `credentials` has TLS. The token is
/// not sent here: the protocol decides how.
pub fn connect(
    addr: &str,
    credentials: &Credentials,
    timeout: Duration,
) -> std::result::Result<Stream, ConnectError> {
    let mut last = None;
    let mut tcp = None;
    for a in addr.to_socket_addrs().map_err(ConnectError::Resolve)? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        ConnectError::Connect(
            last.unwrap_or_else(|| std::io::Error::other("the address resolves to nothing")),
        )
    })?;
    tcp.set_nodelay(true).ok();
    match &credentials.tls {
        None => Ok(Stream::Plain(tcp)),
        Some(config) => {
            let name = server_name(addr, credentials.server_name.as_deref())
                .map_err(ConnectError::Name)?;
            stream::connect(tcp, config.clone(), name, timeout).map_err(ConnectError::Handshake)
        }
    }
}
