//! What the modules share: certificate directories and a one-shot TLS server.

use inpath_net::certs::{init, InitFiles, InitOptions, Validity};
use inpath_net::stream::{accept, HandshakeError, Stream};
use inpath_net::{ClientTlsFiles, ServerTlsFiles};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

/// A CA with a server certificate for localhost and 127.0.0.1 and a client certificate.
pub fn pki(dir: &Path) -> InitFiles {
    init(dir, &InitOptions::default()).unwrap()
}

/// The same, with every certificate expired.
pub fn expired_pki(dir: &Path) -> InitFiles {
    let options = InitOptions {
        validity: Validity::expired(),
        ..InitOptions::default()
    };
    init(dir, &options).unwrap()
}

pub fn server_files(p: &InitFiles) -> ServerTlsFiles {
    ServerTlsFiles::new(&p.server_cert, &p.server_key)
}

pub fn client_files(ca: &InitFiles, cert: Option<&InitFiles>) -> ClientTlsFiles {
    ClientTlsFiles {
        ca: ca.ca.clone(),
        cert: cert.map(|c| c.client_cert.clone()),
        key: cert.map(|c| c.client_key.clone()),
    }
}

/// Accepts one connection with `files`' TLS, answers `pong` to whatever line arrives, and
/// returns the handshake's outcome (or the stream's I/O error) in words.
pub fn one_shot_server(
    files: ServerTlsFiles,
) -> (String, std::thread::JoinHandle<Result<bool, String>>) {
    let config = files.build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let mut stream = accept(tcp, config, Duration::from_secs(5))
            .map_err(|e: HandshakeError| e.to_string())?;
        let certified = stream.client_certified();
        let mut buf = [0u8; 5];
        stream
            .read_exact(&mut buf)
            .map_err(|e| inpath_net::stream::io_text(&e, true))?;
        stream.write_all(b"pong\n").map_err(|e| e.to_string())?;
        stream.flush().map_err(|e| e.to_string())?;
        stream.close();
        Ok(certified)
    });
    (addr, handle)
}

/// Connects with `files`, sends `ping\n` and reads the answer: the answer or the error.
pub fn ping(addr: &str, files: &ClientTlsFiles) -> Result<String, String> {
    let config = files.build().map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).unwrap();
    let name = inpath_net::tls::server_name(addr, None).unwrap();
    let mut stream: Stream = inpath_net::stream::connect(tcp, config, name, Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"ping\n")
        .map_err(|e| inpath_net::stream::io_text(&e, false))?;
    stream
        .flush()
        .map_err(|e| inpath_net::stream::io_text(&e, false))?;
    let mut out = String::new();
    stream
        .read_to_string(&mut out)
        .map_err(|e| inpath_net::stream::io_text(&e, false))?;
    Ok(out)
}
