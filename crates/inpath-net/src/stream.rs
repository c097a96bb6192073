//! A blocking connection that is plain TCP or TLS (rustls' `StreamOwned`), for the servers and
//! clients that run a thread per connection (the store, the HTTP pages); and the handshakes
//! that make one, finished eagerly so a failure is reported where it happens.

use crate::tls::{describe, describe_io, looks_like_tls};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection: plain, or the server or client side of TLS.
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Plain(TcpStream),
    /// The server side of a TLS connection (handshake done).
    Server(Box<StreamOwned<ServerConnection, TcpStream>>),
    /// The client side of a TLS connection (handshake done).
    Client(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    /// The socket underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Server(s) => &s.sock,
            Stream::Client(s) => &s.sock,
        }
    }

    /// Whether the connection is TLS.
    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    /// On the server side: whether the client presented a certificate (the verifier already
    /// checked it against the client CA; an unverified one fails the handshake).
    pub fn client_certified(&self) -> bool {
        match self {
            Stream::Server(s) => s.conn.peer_certificates().is_some_and(|c| !c.is_empty()),
            _ => false,
        }
    }

    /// The negotiated TLS version (`TLSv1_3`), if TLS.
    pub fn tls_version(&self) -> Option<String> {
        let v = match self {
            Stream::Plain(_) => None,
            Stream::Server(s) => s.conn.protocol_version(),
            Stream::Client(s) => s.conn.protocol_version(),
        };
        v.map(|v| format!("{v:?}"))
    }

    /// Ends the connection politely: TLS' `close_notify`, then the socket's write side.
    pub fn close(&mut self) {
        match self {
            Stream::Plain(_) => {}
            Stream::Server(s) => {
                s.conn.send_close_notify();
                let _ = s.conn.complete_io(&mut s.sock);
            }
            Stream::Client(s) => {
                s.conn.send_close_notify();
                let _ = s.conn.complete_io(&mut s.sock);
            }
        }
        let _ = self.tcp().shutdown(std::net::Shutdown::Write);
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Server(s) => s.read(buf),
            Stream::Client(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Server(s) => s.write(buf),
            Stream::Client(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Server(s) => s.flush(),
            Stream::Client(s) => s.flush(),
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The peer closed the connection before the handshake ended.
    #[error("the {peer} closed the connection during the TLS handshake")]
    Closed {
        /// `client` or `server`.
        peer: &'static str,
    },
    /// The peer sent nothing within the time allowed.
    #[error("the {peer} did not finish the TLS handshake within {seconds} s")]
    Timeout {
        /// `client` or `server`.
        peer: &'static str,
        /// The time allowed.
        seconds: u64,
    },
    /// TLS refused the peer (its certificate, its versions) or the bytes were not TLS.
    #[error("{text}")]
    Refused {
        /// In words ([`crate::tls::describe`]).
        text: String,
        /// rustls' reason, when it has one.
        #[source]
        source: Option<rustls::Error>,
    },
    /// The socket failed.
    #[error("{0}")]
    Io(#[source] std::io::Error),
}

impl HandshakeError {
    fn from_io(e: std::io::Error, server: bool, timeout: Duration) -> HandshakeError {
        let peer = if server { "client" } else { "server" };
        if let Some(tls) = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return HandshakeError::Refused {
                text: describe(tls, server),
                source: Some(tls.clone()),
            };
        }
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                HandshakeError::Timeout {
                    peer,
                    seconds: timeout.as_secs().max(1),
                }
            }
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted => HandshakeError::Closed { peer },
            _ => HandshakeError::Io(e),
        }
    }
}

/// What the first bytes of a connection on a TLS port are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstBytes {
    /// A TLS handshake record.
    Tls,
    /// Something else: a plain client on a TLS port.
    Plain,
    /// The client closed (or sent nothing in time) before a byte.
    Nothing,
}

/// Looks at (without taking) the first bytes of a connection, waiting up to `timeout` for
/// three of them: is it a TLS handshake? A server answers a plain client in its own
/// protocol ("this port speaks TLS") instead of a TLS alert it could not read.
pub fn peek_first(tcp: &TcpStream, timeout: Duration) -> FirstBytes {
    let start = Instant::now();
    let mut buf = [0u8; 3];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() || tcp.set_read_timeout(Some(left)).is_err() {
            return FirstBytes::Nothing;
        }
        match tcp.peek(&mut buf) {
            Ok(0) => return FirstBytes::Nothing,
            Ok(n) if !looks_like_tls(&buf[..n]) => return FirstBytes::Plain,
            Ok(n) if n >= 3 => return FirstBytes::Tls,
            // One or two bytes so far, all TLS-like: wait for the rest.
            Ok(_) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return FirstBytes::Nothing,
        }
    }
}

/// The server side of a TLS handshake on `tcp`, finished within `timeout` (the socket's read
/// and write timeouts are set to it, and left so).
pub fn accept(
    mut tcp: TcpStream,
    config: Arc<ServerConfig>,
    timeout: Duration,
) -> Result<Stream, HandshakeError> {
    let _ = tcp.set_read_timeout(Some(timeout));
    let _ = tcp.set_write_timeout(Some(timeout));
    let mut conn = ServerConnection::new(config).map_err(|e| HandshakeError::Refused {
        text: describe(&e, true),
        source: Some(e),
    })?;
    while conn.is_handshaking() {
        match conn.complete_io(&mut tcp) {
            Ok((0, 0)) if conn.is_handshaking() => {
                return Err(HandshakeError::Closed { peer: "client" })
            }
            Ok(_) => {}
            Err(e) => {
                // Hand the alert to the client, then let it arrive: see `linger`.
                let _ = conn.write_tls(&mut tcp);
                linger(&mut tcp);
                return Err(HandshakeError::from_io(e, true, timeout));
            }
        }
    }
    Ok(Stream::Server(Box::new(StreamOwned::new(conn, tcp))))
}

/// Before closing a refused connection: a FIN after what was written (the alert), then what
/// the peer still sends is read and dropped (at most 1 MiB, for at most 1 s). Closing with
/// unread bytes (a TLS 1.3 client sends its first request right after its certificate)
/// makes the kernel send a reset, and a reset discards the alert before the peer reads it.
pub fn linger(tcp: &mut TcpStream) {
    let _ = tcp.shutdown(std::net::Shutdown::Write);
    let _ = tcp.set_read_timeout(Some(Duration::from_millis(100)));
    let start = Instant::now();
    let mut left = 1usize << 20;
    let mut buf = [0u8; 16 << 10];
    while left > 0 && start.elapsed() < Duration::from_secs(1) {
        match tcp.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => left = left.saturating_sub(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// The client side of a TLS handshake on `tcp` with the server `name`, finished within
/// `timeout`.
pub fn connect(
    mut tcp: TcpStream,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    timeout: Duration,
) -> Result<Stream, HandshakeError> {
    let _ = tcp.set_read_timeout(Some(timeout));
    let _ = tcp.set_write_timeout(Some(timeout));
    let mut conn = ClientConnection::new(config, name).map_err(|e| HandshakeError::Refused {
        text: describe(&e, false),
        source: Some(e),
    })?;
    while conn.is_handshaking() {
        match conn.complete_io(&mut tcp) {
            Ok((0, 0)) if conn.is_handshaking() => {
                return Err(HandshakeError::Closed { peer: "server" })
            }
            Ok(_) => {}
            Err(e) => {
                let _ = conn.write_tls(&mut tcp);
                return Err(HandshakeError::from_io(e, false, timeout));
            }
        }
    }
    // Whatever the handshake left unsent (a client certificate's Finished in TLS 1.3).
    while conn.wants_write() {
        if let Err(e) = conn.write_tls(&mut tcp) {
            return Err(HandshakeError::from_io(e, false, timeout));
        }
    }
    let _ = tcp.set_read_timeout(None);
    let _ = tcp.set_write_timeout(None);
    Ok(Stream::Client(Box::new(StreamOwned::new(conn, tcp))))
}

/// An I/O error of a TLS stream in words (the rustls reason when it has one): a client
/// refused after its handshake (TLS 1.3 checks the client's certificate then) reads it here.
pub fn io_text(e: &std::io::Error, server: bool) -> String {
    describe_io(e, server)
}
