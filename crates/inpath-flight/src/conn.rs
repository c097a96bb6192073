//! Accepted connections, plain or TLS, as tonic's server takes them: the TLS handshake runs
//! in a task of its own per connection (a slow client never holds up the others), with the
//! configuration of [`ServerTls`] as it is at that moment (reloadable) and ALPN `h2`, which
//! gRPC clients insist on.

use inpath_net::tokio_rustls::server::TlsStream;
use inpath_net::tokio_rustls::TlsAcceptor;
use inpath_net::ServerTls;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Who is on the other end of a connection: what the authentication reads from each call.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The peer's address.
    pub peer: SocketAddr,
    /// Whether the peer presented a certificate that the client CA signed (rustls checked
    /// it during the handshake).
    pub client_cert: bool,
}

/// A plain or TLS connection.
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream, ConnInfo),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>, ConnInfo),
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            Conn::Plain(_, i) | Conn::Tls(_, i) => i.clone(),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s, _) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s, _) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s, _) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s, _) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Accepts connections on `listener` (TLS handshakes with `tls`), each handed to the
/// returned channel when ready; a failed handshake is reported on standard error with its
/// reason and the peer, and dropped.
pub fn accept(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
) -> mpsc::Receiver<std::io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    eprintln!("query serve: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let info = ConnInfo {
                peer,
                client_cert: false,
            };
            let Some(tls) = &tls else {
                if tx.send(Ok(Conn::Plain(stream, info))).await.is_err() {
                    return;
                }
                continue;
            };
            let mut config = (*tls.config()).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let acceptor = TlsAcceptor::from(Arc::new(config));
            let tx = tx.clone();
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    acceptor.accept(stream),
                )
                .await;
                match handshake {
                    Ok(Ok(s)) => {
                        let client_cert = s.get_ref().1.peer_certificates().is_some();
                        let info = ConnInfo { peer, client_cert };
                        let _ = tx.send(Ok(Conn::Tls(Box::new(s), info))).await;
                    }
                    Ok(Err(e)) => eprintln!(
                        "query serve: TLS handshake with {peer} failed: {}",
                        inpath_net::tls::describe_io(&e, true)
                    ),
                    Err(_) => {
                        eprintln!("query serve: TLS handshake with {peer} took over 10 s; dropped")
                    }
                }
            });
        }
    });
    rx
}
