//! Handshakes from PEM files, and each refusal in words: another CA, an expired certificate,
//! a missing client certificate, a plain peer on either side, a key that is not the
//! certificate's, a key others can read.

use crate::common::{client_files, expired_pki, one_shot_server, ping, pki, server_files};
use inpath_net::stream::{peek_first, FirstBytes};
use inpath_net::{ClientCerts, MinVersion, NetError, ServerTlsFiles};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn scratch() -> tempfile::TempDir {
    inpath_testkit::dir::scratch("inpath-net-tls")
}

#[test]
fn a_client_that_trusts_the_ca_gets_through() {
    let d = scratch();
    let p = pki(&d.path().join("a"));
    let (addr, server) = one_shot_server(server_files(&p));
    assert_eq!(ping(&addr, &client_files(&p, None)).unwrap(), "pong\n");
    assert_eq!(server.join().unwrap(), Ok(false));
}

#[test]
fn a_server_certificate_from_another_ca_or_expired_is_refused_by_the_client() {
    let d = scratch();
    let p = pki(&d.path().join("a"));
    let other = pki(&d.path().join("b"));
    let (addr, server) = one_shot_server(server_files(&p));
    let err = ping(&addr, &client_files(&other, None)).unwrap_err();
    assert!(err.contains("not signed by a trusted CA"), "{err}");
    assert!(server.join().unwrap().is_err());

    let old = expired_pki(&d.path().join("old"));
    let (addr, server) = one_shot_server(server_files(&old));
    let err = ping(&addr, &client_files(&old, None)).unwrap_err();
    assert!(err.contains("server's certificate has expired"), "{err}");
    assert!(server.join().unwrap().is_err());
}

#[test]
fn mutual_tls_takes_a_signed_client_certificate_and_refuses_the_others() {
    let d = scratch();
    let p = pki(&d.path().join("a"));
    let other = pki(&d.path().join("b"));
    let old = expired_pki(&d.path().join("old"));
    let require = || server_files(&p).with_client_ca(&p.ca, ClientCerts::Require);

    let (addr, server) = one_shot_server(require());
    assert_eq!(ping(&addr, &client_files(&p, Some(&p))).unwrap(), "pong\n");
    assert_eq!(server.join().unwrap(), Ok(true));

    // No certificate: TLS 1.3 ends the client's handshake first; the refusal is its next read.
    let (addr, server) = one_shot_server(require());
    let err = ping(&addr, &client_files(&p, None)).unwrap_err();
    assert!(err.contains("requires a client certificate"), "{err}");
    let log = server.join().unwrap().unwrap_err();
    assert!(log.contains("client sent no certificate"), "{log}");

    let (addr, server) = one_shot_server(require());
    let err = ping(&addr, &client_files(&p, Some(&other))).unwrap_err();
    assert!(err.contains("refused this client's certificate"), "{err}");
    let log = server.join().unwrap().unwrap_err();
    assert!(
        log.contains("client's certificate is not signed by a trusted CA"),
        "{log}"
    );

    let (addr, server) = one_shot_server(require());
    let _ = ping(&addr, &client_files(&p, Some(&old))).unwrap_err();
    let log = server.join().unwrap().unwrap_err();
    assert!(log.contains("client's certificate"), "{log}");

    // Request: a client without a certificate passes, one with a bad certificate does not.
    let request = || server_files(&p).with_client_ca(&p.ca, ClientCerts::Request);
    let (addr, server) = one_shot_server(request());
    assert_eq!(ping(&addr, &client_files(&p, None)).unwrap(), "pong\n");
    assert_eq!(server.join().unwrap(), Ok(false));
    let (addr, server) = one_shot_server(request());
    assert!(ping(&addr, &client_files(&p, Some(&other))).is_err());
    assert!(server.join().unwrap().is_err());
}

#[test]
fn plain_peers_are_named_on_both_sides() {
    let d = scratch();
    let p = pki(&d.path().join("a"));
    // A plain client on a TLS port: the server sees it before any TLS.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    c.write_all(b"get k\r\n").unwrap();
    let (s, _) = listener.accept().unwrap();
    assert_eq!(peek_first(&s, Duration::from_secs(2)), FirstBytes::Plain);
    drop(c);
    let mut c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    c.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let (s, _) = listener.accept().unwrap();
    assert_eq!(peek_first(&s, Duration::from_secs(2)), FirstBytes::Tls);
    drop(c);
    let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (s, _) = listener.accept().unwrap();
    drop(c);
    assert_eq!(peek_first(&s, Duration::from_secs(2)), FirstBytes::Nothing);

    // A TLS client on a plain port: the plain server answers in its own protocol.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let plain = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.write_all(b"ERROR\r\n");
        std::thread::sleep(Duration::from_millis(100));
    });
    let err = ping(&addr, &client_files(&p, None)).unwrap_err();
    assert!(err.contains("does not speak TLS"), "{err}");
    plain.join().unwrap();
}

#[test]
fn tls13_only_refuses_a_tls12_client() {
    let d = scratch();
    let p = pki(&d.path().join("a"));
    let mut files = server_files(&p);
    files.min_version = MinVersion::Tls13;
    let config = files.build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        inpath_net::stream::accept(tcp, config, Duration::from_secs(5)).map(|_| ())
    });
    let roots = inpath_net::tls::load_roots(&p.ca, "CA").unwrap();
    let client = rustls::ClientConfig::builder_with_provider(inpath_net::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).unwrap();
    let name = inpath_net::tls::server_name(&addr.to_string(), None).unwrap();
    let err = inpath_net::stream::connect(tcp, client.into(), name, Duration::from_secs(5))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no TLS version or cipher in common"), "{err}");
    assert!(server.join().unwrap().is_err());
}

#[test]
fn bad_files_are_refused_naming_the_file() {
    let d = scratch();
    let p = pki(&d.path().join("a"));
    let other = pki(&d.path().join("b"));
    // The key of another certificate.
    let err = ServerTlsFiles::new(&p.server_cert, &other.server_key)
        .build()
        .unwrap_err();
    assert!(matches!(err, NetError::Tls { .. }), "{err}");
    assert!(err.to_string().contains("server.pem"), "{err}");
    // A missing file, a file without certificates, a key in place of a certificate.
    let missing = d.path().join("nope.pem");
    let err = ServerTlsFiles::new(&missing, &p.server_key)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("nope.pem"), "{err}");
    let empty = inpath_testkit::dir::write(d.path(), "empty.pem", b"hello\n");
    let err = ServerTlsFiles::new(&empty, &p.server_key)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("holds no certificate"), "{err}");
    let err = ServerTlsFiles::new(&p.server_key, &p.server_key)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("holds no certificate"), "{err}");
    let err = ServerTlsFiles::new(&p.server_cert, &p.server_cert)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("holds no private key"), "{err}");
    // A key every user can read.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p.server_key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = ServerTlsFiles::new(&p.server_cert, &p.server_key)
            .build()
            .unwrap_err();
        assert!(matches!(err, NetError::Mode { mode: 0o644, .. }), "{err}");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&p.server_key, std::fs::Permissions::from_mode(0o640)).unwrap();
        ServerTlsFiles::new(&p.server_cert, &p.server_key)
            .build()
            .unwrap();
    }
    // Client certificates checked without a CA file.
    let mut files = server_files(&p);
    files.client_certs = ClientCerts::Require;
    let err = files.build().unwrap_err();
    assert!(err.to_string().contains("needs the CA file"), "{err}");
}

#[test]
fn init_writes_private_files_and_refuses_to_replace_them() {
    let d = scratch();
    let dir = d.path().join("pki");
    let p = pki(&dir);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for f in [
            &p.ca,
            &p.ca_key,
            &p.server_cert,
            &p.server_key,
            &p.client_cert,
            &p.client_key,
        ] {
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }
    let before = std::fs::read(&p.ca).unwrap();
    let err = inpath_net::certs::init(&dir, &Default::default()).unwrap_err();
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(std::fs::read(&p.ca).unwrap(), before);
    let opts = inpath_net::certs::InitOptions {
        replace: true,
        ..Default::default()
    };
    inpath_net::certs::init(&dir, &opts).unwrap();
    assert_ne!(std::fs::read(&p.ca).unwrap(), before);
}
