//! `cache serve` with memcached's security options (issue 57): TLS with client certificates
//! and a `notls:` listener, ASCII authentication (`-Y`), SASL PLAIN (`-S`). Each refusal
//! leaves the cache as it was and the server serving the others; 1,000 wrong passwords are
//! slowed and counted; and the same scripts give memcached's own answers when memcached 1.6.18
//! runs with the same options (its TLS, its `-Y`, its Cyrus SASL over a sasldb that
//! `saslpasswd2` writes). Certificates are made here; everything is on loopback.

use crate::differential::{is_root, memcached_binary, Memcached};
use inpath_cache::{Listener, Security, Server, StoreConfig, Users};
use inpath_net::certs::{write_private, Ca, Validity};
use inpath_net::{
    ClientCerts, ClientTlsFiles, Credentials, Limiter, ServerTls, ServerTlsFiles, Slowing, Stream,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA, a server certificate, a client certificate and an expired one; another CA's client
/// certificate; an expired server certificate.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let ca = Ca::new("cache CA", Validity::days(1)).unwrap();
        let other = Ca::new("cache CA", Validity::days(1)).unwrap();
        let s = ca.server(&hosts, Validity::days(1)).unwrap();
        let old_s = ca.server(&hosts, Validity::expired()).unwrap();
        let c = ca.client("c", Validity::days(1)).unwrap();
        let old_c = ca.client("old", Validity::expired()).unwrap();
        let x = other.client("x", Validity::days(1)).unwrap();
        write_private(
            dir,
            &[
                ("ca.pem", ca.cert_pem()),
                ("server.pem", &s.cert_pem),
                ("server.key", &s.key_pem),
                ("old-server.pem", &old_s.cert_pem),
                ("old-server.key", &old_s.key_pem),
                ("client.pem", &c.cert_pem),
                ("client.key", &c.key_pem),
                ("old.pem", &old_c.cert_pem),
                ("old.key", &old_c.key_pem),
                ("stranger.pem", &x.cert_pem),
                ("stranger.key", &x.key_pem),
            ],
            false,
        )
        .unwrap();
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn server_tls(&self, cert: &str, verify: ClientCerts) -> Arc<ServerTls> {
        let mut f = ServerTlsFiles::new(
            self.path(&format!("{cert}.pem")),
            self.path(&format!("{cert}.key")),
        );
        if verify != ClientCerts::Ignore {
            f = f.with_client_ca(self.path("ca.pem"), verify);
        }
        f.session_cache = false;
        Arc::new(ServerTls::load(f).unwrap())
    }

    /// A client's credentials: TLS with this CA and, if named, a client certificate.
    fn client(&self, cert: Option<&str>) -> Credentials {
        let files = ClientTlsFiles {
            ca: self.path("ca.pem"),
            cert: cert.map(|c| self.path(&format!("{c}.pem"))),
            key: cert.map(|c| self.path(&format!("{c}.key"))),
        };
        Credentials {
            tls: Some(files.build().unwrap()),
            ..Credentials::default()
        }
    }
}

/// A text connection over plain TCP or TLS.
struct Text(BufReader<Stream>);

impl Text {
    fn connect(addr: &str, c: &Credentials) -> Result<Text, String> {
        let s = inpath_net::client::connect(addr, c, Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        s.tcp()
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Ok(Text(BufReader::new(s)))
    }

    fn send(&mut self, b: &[u8]) -> Result<(), String> {
        let s = self.0.get_mut();
        s.write_all(b)
            .and_then(|_| s.flush())
            .map_err(|e| inpath_net::stream::io_text(&e, false))
    }

    /// One reply line without its `\r\n`; an error (or `Err("closed")`) when none comes.
    fn line(&mut self) -> Result<String, String> {
        let mut l = Vec::new();
        match self.0.read_until(b'\n', &mut l) {
            Ok(0) => Err("closed".into()),
            Ok(_) => {
                Ok(String::from_utf8_lossy(l.strip_suffix(b"\r\n").unwrap_or(&l)).into_owned())
            }
            Err(e) => Err(inpath_net::stream::io_text(&e, false)),
        }
    }

    fn ask(&mut self, req: &str) -> Result<String, String> {
        self.send(req.as_bytes())?;
        self.line()
    }
}

fn dram_config(security: Security) -> inpath_cache::ServerConfig {
    let mut store = StoreConfig::dram_only();
    store.memory = 16 << 20;
    let mut cfg = inpath_cache::ServerConfig::new("127.0.0.1:0", store);
    cfg.threads = 2;
    cfg.security = security;
    cfg
}

fn stat(server: &Server, name: &str) -> u64 {
    server
        .store()
        .stats()
        .into_iter()
        .find(|(k, _)| *k == name)
        .map_or(0, |(_, v)| v.parse().unwrap())
}

fn users(dir: &Path, text: &str) -> Arc<Users> {
    let p = dir.join("users");
    std::fs::write(&p, text).unwrap();
    Arc::new(Users::load(&p).unwrap())
}

fn fast_limiter() -> Arc<Limiter> {
    Arc::new(Limiter::new(Slowing {
        free_per_second: 5,
        delay: Duration::from_millis(2),
    }))
}

#[test]
fn tls_with_client_certificates_and_a_notls_listener_refuses_the_rest_in_words() {
    let d = tempfile::tempdir().unwrap();
    let pki = Pki::new(&d.path().join("pki"));
    let security = Security {
        tls: Some(pki.server_tls("server", ClientCerts::Require)),
        main_tls: true,
        also_listen: vec![Listener {
            addr: "127.0.0.1:0".into(),
            tls: false,
        }],
        ..Security::default()
    };
    let server = Server::start(dram_config(security)).unwrap();
    let on = server.listening_on().to_vec();
    assert_eq!((on[0].1, on[1].1), (true, false));
    let (tls_addr, plain_addr) = (on[0].0.to_string(), on[1].0.to_string());

    let mut good = Text::connect(&tls_addr, &pki.client(Some("client"))).unwrap();
    assert_eq!(good.ask("set k 0 0 2\r\nv1\r\n").unwrap(), "STORED");
    // A client without a certificate, with one of another CA, with an expired one.
    for (cert, needle) in [
        (None, "requires a client certificate"),
        (Some("stranger"), "refused this client's certificate"),
        (Some("old"), "client's certificate"),
    ] {
        let e = Text::connect(&tls_addr, &pki.client(cert))
            .and_then(|mut c| c.ask("set k 0 0 2\r\nxx\r\n"))
            .unwrap_err();
        assert!(e.contains(needle), "{cert:?}: {e}");
    }
    // A plain client on the TLS port gets no reply: the handshake fails and the server closes.
    let mut plain = Text::connect(&tls_addr, &Credentials::default()).unwrap();
    let _ = plain.send(b"set k 0 0 2\r\nxx\r\n");
    assert!(plain.line().is_err());
    // A TLS client on the plain listener is told the server does not speak TLS there.
    let e = Text::connect(&plain_addr, &pki.client(Some("client")))
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("connect without --tls-ca"), "{e}");
    // The plain listener serves plain clients (the same cache), and nothing changed.
    let mut local = Text::connect(&plain_addr, &Credentials::default()).unwrap();
    assert_eq!(local.ask("get k\r\n").unwrap(), "VALUE k 0 2");
    assert_eq!(local.line().unwrap(), "v1");
    assert_eq!(
        good.ask("version\r\n").unwrap(),
        format!("VERSION {}", inpath_cache::VERSION)
    );
    assert!(
        stat(&server, "ssl_handshake_errors") >= 5,
        "{:?}",
        server.store().stats()
    );
    server.stop().unwrap();

    // A server whose certificate expired.
    let security = Security {
        tls: Some(pki.server_tls("old-server", ClientCerts::Ignore)),
        main_tls: true,
        ..Security::default()
    };
    let server = Server::start(dram_config(security)).unwrap();
    let e = Text::connect(&server.local_addr().to_string(), &pki.client(None))
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("server's certificate has expired"), "{e}");
}

#[test]
fn ascii_authentication_refuses_counts_and_slows_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let security = Security {
        ascii: Some(users(d.path(), "alice:secret\nbob:pass word\n")),
        limiter: fast_limiter(),
        ..Security::default()
    };
    let mut cfg = dram_config(security);
    cfg.protocol = inpath_cache::Protocol::Ascii;
    let server = Server::start(cfg).unwrap();
    let addr = server.local_addr().to_string();
    let mut admin = Text::connect(&addr, &Credentials::default()).unwrap();
    assert_eq!(
        admin.ask("set a 0 0 12\r\nalice secret\r\n").unwrap(),
        "STORED"
    );
    assert_eq!(admin.ask("set k 0 0 2\r\nv1\r\n").unwrap(), "STORED");

    let mut c = Text::connect(&addr, &Credentials::default()).unwrap();
    for (req, reply) in [
        ("get k\r\n", "CLIENT_ERROR unauthenticated"),
        ("delete k\r\n", "CLIENT_ERROR unauthenticated"),
        ("flush_all\r\n", "CLIENT_ERROR unauthenticated"),
        (
            "set k 0 0 1\r\nx\r\n",
            "CLIENT_ERROR bad authentication token format",
        ),
        (
            "set k 0 0 11\r\nalice wrong\r\n",
            "CLIENT_ERROR authentication failure",
        ),
        (
            "set k 0 0 3\r\nabcde\r\n",
            "CLIENT_ERROR bad command line termination",
        ),
        ("", "CLIENT_ERROR unauthenticated"),
        // A password with a space: only its first word counts, as memcached.
        (
            "set k 0 0 13\r\nbob pass word\r\n",
            "CLIENT_ERROR authentication failure",
        ),
    ] {
        assert_eq!(c.ask(req).unwrap(), reply, "{req:?}");
    }
    assert_eq!(
        admin.ask("get k\r\n").unwrap(),
        "VALUE k 0 2",
        "the value changed"
    );
    assert_eq!(admin.line().unwrap(), "v1");

    // 1,000 wrong passwords on one connection: counted, slowed, and the right one works after.
    let before = stat(&server, "auth_errors");
    let start = Instant::now();
    let mut batch = Vec::new();
    for i in 0..1000 {
        let value = format!("alice guess{i:04}");
        batch.extend_from_slice(format!("set x 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
    }
    c.send(&batch).unwrap();
    for _ in 0..1000 {
        assert_eq!(c.line().unwrap(), "CLIENT_ERROR authentication failure");
    }
    let took = start.elapsed();
    assert_eq!(stat(&server, "auth_errors") - before, 1000);
    let slowed = stat(&server, "auth_slowed");
    assert!(slowed >= 990, "slowed {slowed}");
    assert!(
        took >= Duration::from_millis(2) * (slowed as u32 - 1),
        "took {took:?}"
    );
    assert_eq!(c.ask("set a 0 0 12\r\nalice secret\r\n").unwrap(), "STORED");
    assert_eq!(c.ask("get k\r\n").unwrap(), "VALUE k 0 2");
    eprintln!("1000 wrong passwords: {took:?}, {slowed} slowed");
    server.stop().unwrap();
}

/// A binary request: header and body.
fn bin(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80, opcode];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

/// One binary response (status, body) with its cas masked; `None` when the server closed.
fn bin_reply(s: &mut impl Read) -> Option<(u16, Vec<u8>)> {
    let mut h = [0u8; 24];
    s.read_exact(&mut h).ok()?;
    let len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some((u16::from_be_bytes([h[6], h[7]]), body))
}

/// The SASL script: each exchange's replies, a `None` where the server closed.
fn sasl_script(addr: &str) -> Vec<Option<(u16, Vec<u8>)>> {
    let open = || {
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let set = |k: &[u8], v: &[u8]| bin(0x01, k, &[0, 0, 0, 0, 0, 0, 0, 0], v);
    let mut out = Vec::new();
    let mut s = open();
    for req in [
        bin(0x20, b"", b"", b""),
        bin(0x0b, b"", b"", b""),
        bin(0x21, b"PLAIN", b"", b"\0alice\0wrong"),
        bin(0x21, b"CRAM-MD5", b"", b"alice"),
        bin(0x22, b"PLAIN", b"", b"\0alice\0secret"),
        bin(0x21, b"PLAIN", b"", b"\0alice\0secret"),
        set(b"k", b"v1"),
        bin(0x00, b"k", b"", b""),
    ] {
        s.write_all(&req).unwrap();
        let mut r = bin_reply(&mut s);
        if let Some((_, body)) = &mut r {
            if req[1] == 0x0b {
                body.clear(); // The version strings differ by design.
            }
        }
        out.push(r);
    }
    // Before authenticating, a get is refused and the connection closed.
    let mut s = open();
    s.write_all(&bin(0x00, b"k", b"", b"")).unwrap();
    out.push(bin_reply(&mut s));
    out.push(bin_reply(&mut s));
    out
}

#[test]
fn sasl_plain_authenticates_binary_clients_and_refuses_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let security = Security {
        sasl: Some(users(d.path(), "alice:secret\n")),
        ..Security::default()
    };
    let mut cfg = dram_config(security);
    cfg.protocol = inpath_cache::Protocol::Binary;
    let server = Server::start(cfg).unwrap();
    let r = sasl_script(&server.local_addr().to_string());
    let ok = |b: &[u8]| Some((0u16, b.to_vec()));
    let fail = Some((0x20u16, b"Auth failure.".to_vec()));
    assert_eq!(r[0], ok(b"PLAIN"));
    assert_eq!(r[1], ok(b""));
    assert_eq!(
        (r[2].clone(), r[3].clone(), r[4].clone()),
        (fail.clone(), fail.clone(), fail.clone())
    );
    assert_eq!(r[5], ok(b"Authenticated"));
    assert_eq!(r[6].as_ref().map(|x| x.0), Some(0));
    assert_eq!(
        r[7].as_ref().map(|x| (x.0, x.1[4..].to_vec())),
        Some((0, b"v1".to_vec()))
    );
    assert_eq!(r[8], fail);
    assert_eq!(
        r[9], None,
        "the connection should close after an unauthenticated request"
    );
    assert_eq!(stat(&server, "auth_cmds"), 4);
    assert_eq!(stat(&server, "auth_errors"), 3);
    // libmemcached's own tools (SASL over the binary protocol), when installed.
    if std::path::Path::new("/usr/bin/memccat").exists() {
        let addr = server.local_addr();
        let servers = format!("--servers=127.0.0.1:{}", addr.port());
        let file = d.path().join("sasl-file");
        std::fs::write(&file, b"hello\n").unwrap();
        let run = |tool: &str, user: &str, pass: &str, arg: &str| {
            std::process::Command::new(tool)
                .current_dir(d.path())
                .args([servers.as_str(), "--binary", "-u", user, "-p", pass, arg])
                .output()
                .unwrap()
        };
        assert!(run("memccp", "alice", "secret", file.to_str().unwrap())
            .status
            .success());
        let got = run("memccat", "alice", "secret", "sasl-file");
        assert!(
            got.stdout.starts_with(b"hello\n"),
            "{}",
            String::from_utf8_lossy(&got.stderr)
        );
        assert!(!run("memccat", "alice", "nope", "sasl-file")
            .status
            .success());
    }
    server.stop().unwrap();
}

/// memcached with `args` and, for SASL, the environment; the port found as the differential
/// suite finds it (a free one, retried if something took it first).
fn memcached(
    bin: &str,
    args: &[String],
    env: &[(&str, &Path)],
    probe: impl Fn(u16) -> bool,
) -> (Memcached, u16) {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["-p", &port.to_string(), "-U", "0", "-t", "2", "-m", "64"])
            .args(args);
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut m = Memcached(
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        for _ in 0..100 {
            if !matches!(m.0.try_wait(), Ok(None)) {
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                if probe(port) {
                    return (m, port);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        m.0.kill().ok();
    }
    panic!("memcached did not start");
}

/// The text script of the ASCII authentication, one reply line each.
fn ascii_script(addr: &str) -> Vec<Result<String, String>> {
    let mut c = Text::connect(addr, &Credentials::default()).unwrap();
    [
        "get k\r\n",
        "set k 0 0 1\r\nx\r\n",
        "set k 0 0 11\r\nalice wrong\r\n",
        // Not here: a bad termination ("set k 0 0 3\r\nabcde\r\n"), which memcached 1.6.18
        // answers and then overwrites with its answer to the leftover "\r\n" (one reply for
        // two); inpath answers both (`ascii_authentication_refuses...`).
        "set a 0 0 12\r\nalice secret\r\n",
        "set k 0 0 2\r\nv1\r\n",
        "get k\r\n",
    ]
    .iter()
    .map(|req| c.ask(req))
    .collect()
}

/// The TLS script: (refused or the reply) for a good client, no certificate, another CA's
/// certificate, an expired one, a plain client, and the good client again.
fn tls_script(addr: &str, pki: &Pki) -> Vec<Result<String, ()>> {
    let mut out = Vec::new();
    for cert in [Some("client"), None, Some("stranger"), Some("old")] {
        out.push(
            Text::connect(addr, &pki.client(cert))
                .and_then(|mut c| c.ask("set k 0 0 2\r\nv1\r\n"))
                .map_err(|_| ()),
        );
    }
    let mut plain = Text::connect(addr, &Credentials::default()).unwrap();
    let _ = plain.send(b"get k\r\n");
    out.push(plain.line().map_err(|_| ()));
    let mut good = Text::connect(addr, &pki.client(Some("client"))).unwrap();
    out.push(good.ask("get k\r\n").map_err(|_| ()));
    out
}

#[test]
fn the_same_options_give_memcacheds_answers() {
    let Some(mc) = memcached_binary() else {
        eprintln!("skipped: memcached is not installed (scripts/apt-packages.txt lists it)");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let pki = Pki::new(&d.path().join("pki"));
    let p = |n: &str| pki.path(n).display().to_string();

    // TLS, client certificates required (ssl_verify_mode=2).
    let ssl = format!(
        "ssl_chain_cert={},ssl_key={},ssl_ca_cert={},ssl_verify_mode=2",
        p("server.pem"),
        p("server.key"),
        p("ca.pem")
    );
    let args = vec![
        "-l".to_string(),
        "127.0.0.1".into(),
        "-Z".into(),
        "-o".into(),
        ssl,
    ];
    let probe = |port: u16| {
        Text::connect(&format!("127.0.0.1:{port}"), &pki.client(Some("client")))
            .and_then(|mut c| c.ask("version\r\n"))
            .is_ok_and(|v| v.starts_with("VERSION ") && !v.contains("inpath"))
    };
    let (_m, port) = memcached(&mc, &args, &[], probe);
    let theirs = tls_script(&format!("127.0.0.1:{port}"), &pki);
    let security = Security {
        tls: Some(pki.server_tls("server", ClientCerts::Require)),
        main_tls: true,
        ..Security::default()
    };
    let server = Server::start(dram_config(security)).unwrap();
    let ours = tls_script(&server.local_addr().to_string(), &pki);
    assert_eq!(ours, theirs, "TLS: inpath against memcached");
    assert_eq!(theirs[0], Ok("STORED".into()));
    server.stop().unwrap();

    // ASCII authentication.
    let users_file = d.path().join("users");
    std::fs::write(&users_file, "alice:secret\n").unwrap();
    let args = vec![
        "-l".to_string(),
        "127.0.0.1".into(),
        "-Y".into(),
        users_file.display().to_string(),
    ];
    let probe = |port: u16| {
        Text::connect(&format!("127.0.0.1:{port}"), &Credentials::default())
            .and_then(|mut c| c.ask("version\r\n"))
            .is_ok_and(|v| v == "CLIENT_ERROR unauthenticated")
    };
    let (_m, port) = memcached(&mc, &args, &[], probe);
    let theirs = ascii_script(&format!("127.0.0.1:{port}"));
    let security = Security {
        ascii: Some(Arc::new(Users::load(&users_file).unwrap())),
        ..Security::default()
    };
    let mut cfg = dram_config(security);
    cfg.protocol = inpath_cache::Protocol::Ascii;
    let server = Server::start(cfg).unwrap();
    assert_eq!(
        ascii_script(&server.local_addr().to_string()),
        theirs,
        "-Y: inpath against memcached"
    );
    server.stop().unwrap();

    // SASL PLAIN, memcached's users in a Cyrus sasldb written by saslpasswd2.
    let saslpasswd2 = ["/usr/sbin/saslpasswd2", "/usr/bin/saslpasswd2"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(saslpasswd2) = saslpasswd2 else {
        eprintln!(
            "SASL part skipped: saslpasswd2 is not installed (sasl2-bin, scripts/apt-packages.txt)"
        );
        return;
    };
    let conf = d.path().join("sasl");
    std::fs::create_dir(&conf).unwrap();
    let db = conf.join("sasldb2");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut child = std::process::Command::new(saslpasswd2)
        .args([
            "-a",
            "memcached",
            "-c",
            "-p",
            "-f",
            db.to_str().unwrap(),
            "-u",
            host.trim(),
            "alice",
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"secret").unwrap();
    assert!(child.wait().unwrap().success());
    std::fs::write(
        conf.join("memcached.conf"),
        format!("mech_list: plain\nsasldb_path: {}\n", db.display()),
    )
    .unwrap();
    let args = vec!["-l".to_string(), "127.0.0.1".into(), "-S".into()];
    let probe = |port: u16| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&bin(0x20, b"", b"", b"")).is_ok()
            && bin_reply(&mut s).is_some_and(|r| r.1 == b"PLAIN")
    };
    let (_m, port) = memcached(&mc, &args, &[("SASL_CONF_PATH", &conf)], probe);
    let theirs = sasl_script(&format!("127.0.0.1:{port}"));
    let security = Security {
        sasl: Some(users(d.path(), "alice:secret\n")),
        ..Security::default()
    };
    let mut cfg = dram_config(security);
    cfg.protocol = inpath_cache::Protocol::Binary;
    let server = Server::start(cfg).unwrap();
    assert_eq!(
        sasl_script(&server.local_addr().to_string()),
        theirs,
        "-S: inpath against memcached"
    );
    server.stop().unwrap();
}
