//! The HTTP port: plain and HTTPS, a token on every path but /health (Bearer or a browser's
//! Basic password), wrong tokens counted, a plain request to an HTTPS port answered in words.

use crate::common::{client_files, expired_pki, pki, server_files};
use inpath_core::http::{Request, Response};
use inpath_net::tokens::{self, with_entry, Role, Tokens};
use inpath_net::{HttpGuard, HttpServer, Limiter, ServerTls, Slowing};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn handler() -> Arc<inpath_core::http::Handler> {
    Arc::new(|r: &Request| match r.path.as_str() {
        "/stats" => Response::json(200, "{\"n\": 1}".into()),
        _ => inpath_core::http::answer(r, || serde_json::json!({"service": "t"}), |_| None),
    })
}

fn get(addr: SocketAddr, head: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_token_is_asked_for_every_path_but_health() {
    let token = tokens::generate().unwrap();
    let t = Tokens::parse(&with_entry("", "web", Role::Read, &token), Path::new("t")).unwrap();
    let guard = HttpGuard {
        tokens: Some(Arc::new(t)),
        ..HttpGuard::default()
    };
    let limiter = guard.limiter.clone();
    let server =
        HttpServer::start(TcpListener::bind("127.0.0.1:0").unwrap(), handler(), guard).unwrap();
    let addr = server.local_addr();
    let none = get(addr, "GET /stats HTTP/1.1\r\n\r\n");
    assert!(
        none.starts_with("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic"),
        "{none}"
    );
    assert!(none.contains("a token is required"), "{none}");
    let wrong = get(
        addr,
        "GET /stats HTTP/1.1\r\nAuthorization: Bearer inpath_nope\r\n\r\n",
    );
    assert!(
        wrong.starts_with("HTTP/1.1 401") && wrong.contains("not valid"),
        "{wrong}"
    );
    let ok = get(
        addr,
        &format!("GET /stats HTTP/1.1\r\nauthorization: bearer {token}\r\n\r\n"),
    );
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.ends_with("{\"n\": 1}\n"),
        "{ok}"
    );
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("anyone:{token}"));
    let ok = get(
        addr,
        &format!("GET / HTTP/1.1\r\nAuthorization: Basic {basic}\r\n\r\n"),
    );
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.contains("\"service\""),
        "{ok}"
    );
    let health = get(addr, "GET /health HTTP/1.1\r\n\r\n");
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
        "{health}"
    );
    assert_eq!(limiter.failures(), 1);
    let c = server.counters();
    assert_eq!(c.unauthenticated.load(Ordering::Relaxed), 1);
    assert_eq!(c.bad_tokens.load(Ordering::Relaxed), 1);
    server.stop();
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
}

#[test]
fn https_answers_tls_clients_and_tells_plain_ones() {
    let d = inpath_testkit::dir::scratch("inpath-net-http");
    let p = pki(d.path());
    let guard = HttpGuard {
        tls: Some(Arc::new(ServerTls::load(server_files(&p)).unwrap())),
        ..HttpGuard::default()
    };
    let server =
        HttpServer::start(TcpListener::bind("127.0.0.1:0").unwrap(), handler(), guard).unwrap();
    assert_eq!(server.scheme(), "https");
    let addr = server.local_addr();
    let plain = get(addr, "GET /stats HTTP/1.1\r\n\r\n");
    assert!(
        plain.starts_with("HTTP/1.1 400") && plain.contains("speaks HTTPS"),
        "{plain}"
    );
    let config = client_files(&p, None).build().unwrap();
    let name = inpath_net::tls::server_name(&addr.to_string(), None).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    let mut s = inpath_net::stream::connect(tcp, config, name, Duration::from_secs(5)).unwrap();
    s.write_all(b"GET /stats HTTP/1.1\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 200") && out.ends_with("{\"n\": 1}\n"),
        "{out}"
    );
    assert_eq!(server.counters().tls_errors.load(Ordering::Relaxed), 1);
}

/// An HTTPS GET with `ca`'s trust: the answer, or the client's error in words.
fn https_get(
    addr: SocketAddr,
    ca: &inpath_net::certs::InitFiles,
    head: &str,
) -> Result<String, String> {
    let config = client_files(ca, None).build().unwrap();
    let name = inpath_net::tls::server_name(&addr.to_string(), None).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    let mut s = inpath_net::stream::connect(tcp, config, name, Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    s.write_all(head.as_bytes())
        .map_err(|e| inpath_net::stream::io_text(&e, false))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .map_err(|e| inpath_net::stream::io_text(&e, false))?;
    Ok(out)
}

#[test]
fn a_thousand_wrong_tokens_are_slowed_and_counted_and_the_right_one_works_after() {
    let token = tokens::generate().unwrap();
    let t = Tokens::parse(&with_entry("", "web", Role::Read, &token), Path::new("t")).unwrap();
    let guard = HttpGuard {
        tokens: Some(Arc::new(t)),
        limiter: Arc::new(Limiter::new(Slowing {
            free_per_second: 5,
            delay: Duration::from_millis(1),
        })),
        ..HttpGuard::default()
    };
    let limiter = guard.limiter.clone();
    let server =
        HttpServer::start(TcpListener::bind("127.0.0.1:0").unwrap(), handler(), guard).unwrap();
    let addr = server.local_addr();
    for i in 0..1000 {
        let wrong = get(
            addr,
            &format!("GET /stats HTTP/1.1\r\nAuthorization: Bearer inpath_{i:064x}\r\n\r\n"),
        );
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    }
    assert_eq!(limiter.failures(), 1000);
    assert_eq!(server.counters().bad_tokens.load(Ordering::Relaxed), 1000);
    // Past the first few free failures, every attempt took a slot (spaced by the delay).
    assert!(limiter.slowed() >= 990, "slowed {}", limiter.slowed());
    let ok = get(
        addr,
        &format!("GET /stats HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n"),
    );
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    server.stop();
}

#[test]
fn a_tls_client_on_the_plain_port_and_an_expired_certificate_are_refused() {
    let d = inpath_testkit::dir::scratch("inpath-net-http-mismatch");
    let p = pki(&d.path().join("good"));
    // A TLS client on a plain port: its handshake fails, the server keeps answering.
    let plain = HttpServer::start(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        handler(),
        HttpGuard::default(),
    )
    .unwrap();
    let e = https_get(plain.local_addr(), &p, "GET /stats HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(!e.is_empty(), "a TLS client on a plain port fails");
    let ok = get(plain.local_addr(), "GET /stats HTTP/1.1\r\n\r\n");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    plain.stop();
    // An HTTPS port whose certificate expired: the client says so.
    let old = expired_pki(&d.path().join("old"));
    let guard = HttpGuard {
        tls: Some(Arc::new(ServerTls::load(server_files(&old)).unwrap())),
        ..HttpGuard::default()
    };
    let server =
        HttpServer::start(TcpListener::bind("127.0.0.1:0").unwrap(), handler(), guard).unwrap();
    let e = https_get(server.local_addr(), &old, "GET /stats HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(e.contains("expired"), "{e}");
    // A client that trusts another CA refuses the server.
    let good = HttpGuard {
        tls: Some(Arc::new(ServerTls::load(server_files(&p)).unwrap())),
        ..HttpGuard::default()
    };
    let other =
        HttpServer::start(TcpListener::bind("127.0.0.1:0").unwrap(), handler(), good).unwrap();
    let e = https_get(other.local_addr(), &old, "GET /stats HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(!e.is_empty());
    let ok = https_get(other.local_addr(), &p, "GET /stats HTTP/1.1\r\n\r\n").unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    // The refused handshake is counted (by the server's thread, maybe just after).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.counters().tls_errors.load(Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "no TLS error counted");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.stop();
    other.stop();
}

#[test]
fn authorization_headers_parse() {
    use inpath_net::http::authorization;
    assert_eq!(
        authorization(b"GET / HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n").as_deref(),
        Some("abc")
    );
    // "u:p" and "tok" (a user name alone) in base64.
    assert_eq!(
        authorization(b"GET / HTTP/1.1\r\nAUTHORIZATION: Basic dTpw\r\n\r\n").as_deref(),
        Some("p")
    );
    assert_eq!(
        authorization(b"GET / HTTP/1.1\r\nAuthorization: Basic dG9r\r\n\r\n").as_deref(),
        Some("tok")
    );
    assert_eq!(
        authorization(b"GET / HTTP/1.1\r\nAuthorization: Digest x\r\n\r\n"),
        None
    );
    assert_eq!(
        authorization(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
        None
    );
}
