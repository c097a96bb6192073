//! `store serve` put on a network (issue 57): TLS, client certificates and tokens with roles.
//! Every refusal is in words, leaves the store as it was, and the server goes on serving the
//! others; 1,000 wrong tokens are slowed and counted and the right one still works. All on
//! loopback, with certificates made here.

use inpath_net::certs::{write_private, Ca, Validity};
use inpath_net::tokens::{self, Role, Tokens};
use inpath_net::{
    ClientCerts, ClientTlsFiles, Credentials, Limiter, ServerTls, ServerTlsFiles, Slowing,
};
use inpath_store::guard::Security;
use inpath_store::remote::{self, Client, Request, Service};
use inpath_store::{FlashReader, PutOptions, ReaderConfig, Store};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA with a server certificate, a client certificate and an expired one; another CA with
/// a client certificate; and a server certificate that expired.
struct Pki {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
    client_expired: (PathBuf, PathBuf),
    other_client: (PathBuf, PathBuf),
    server_expired: (PathBuf, PathBuf),
}

fn pki(dir: &Path) -> Pki {
    let hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ca = Ca::new("test CA", Validity::days(1)).unwrap();
    let other = Ca::new("test CA", Validity::days(1)).unwrap();
    let server = ca.server(&hosts, Validity::days(1)).unwrap();
    let old_server = ca.server(&hosts, Validity::expired()).unwrap();
    let client = ca.client("c", Validity::days(1)).unwrap();
    let old = ca.client("old", Validity::expired()).unwrap();
    let stranger = other.client("stranger", Validity::days(1)).unwrap();
    write_private(
        dir,
        &[
            ("ca.pem", ca.cert_pem()),
            ("server.pem", &server.cert_pem),
            ("server.key", &server.key_pem),
            ("old-server.pem", &old_server.cert_pem),
            ("old-server.key", &old_server.key_pem),
            ("client.pem", &client.cert_pem),
            ("client.key", &client.key_pem),
            ("old.pem", &old.cert_pem),
            ("old.key", &old.key_pem),
            ("stranger.pem", &stranger.cert_pem),
            ("stranger.key", &stranger.key_pem),
        ],
        false,
    )
    .unwrap();
    let pair = |c: &str, k: &str| (dir.join(c), dir.join(k));
    Pki {
        ca: dir.join("ca.pem"),
        server: pair("server.pem", "server.key"),
        client: pair("client.pem", "client.key"),
        client_expired: pair("old.pem", "old.key"),
        other_client: pair("stranger.pem", "stranger.key"),
        server_expired: pair("old-server.pem", "old-server.key"),
    }
}

/// Serves `dir` on a loopback port with `security`; the server thread runs until the test
/// process ends.
fn serve(dir: &Path, security: Security) -> (String, Arc<Service>) {
    let service = Arc::new(Service::new(
        dir.to_path_buf(),
        None,
        FlashReader::new(ReaderConfig::default()),
    ));
    let (tx, rx) = std::sync::mpsc::channel();
    let s = service.clone();
    std::thread::spawn(move || {
        remote::serve(s, "127.0.0.1:0", 64, Arc::new(security), |addr| {
            tx.send(addr.to_string()).unwrap();
        })
        .unwrap();
    });
    (rx.recv().unwrap(), service)
}

fn tls(p: &Pki, server: &(PathBuf, PathBuf), clients: ClientCerts) -> Option<Arc<ServerTls>> {
    let mut files = ServerTlsFiles::new(&server.0, &server.1);
    if clients != ClientCerts::Ignore {
        files = files.with_client_ca(&p.ca, clients);
    }
    Some(Arc::new(ServerTls::load(files).unwrap()))
}

fn credentials(p: &Pki, cert: Option<&(PathBuf, PathBuf)>, token: Option<&str>) -> Credentials {
    let files = ClientTlsFiles {
        ca: p.ca.clone(),
        cert: cert.map(|c| c.0.clone()),
        key: cert.map(|c| c.1.clone()),
    };
    Credentials {
        tls: Some(files.build().unwrap()),
        server_name: None,
        token: token.map(str::to_string),
    }
}

/// The error of connecting with `c` and asking for the handles.
fn refusal(addr: &str, c: &Credentials) -> String {
    let result = Client::connect_with(addr, c).and_then(|mut client| client.call(&Request::Ls));
    remote::error_text(&result.unwrap_err())
}

fn stat(service: &Service, name: &str) -> u64 {
    service.stats()[name].as_u64().unwrap()
}

#[test]
fn every_missing_wrong_or_weak_credential_is_refused_in_words_and_changes_nothing() {
    let d = inpath_testkit::dir::scratch("inpath-store-security");
    let p = pki(&d.path().join("pki"));
    let dir = d.path().join("store");
    let mut store = Store::create(&dir).unwrap();
    store
        .put_reader(
            &b"hello secure world\n"[..],
            "greeting",
            &PutOptions::default(),
        )
        .unwrap();
    let (read_token, write_token) = (tokens::generate().unwrap(), tokens::generate().unwrap());
    let file = tokens::with_entry(
        &tokens::with_entry("", "ci", Role::Read, &read_token),
        "loader",
        Role::Write,
        &write_token,
    );
    let security = Security {
        tls: tls(&p, &p.server, ClientCerts::Request),
        tokens: Some(Arc::new(Tokens::parse(&file, Path::new("tokens")).unwrap())),
        cert_role: Role::Read,
        limiter: Arc::new(Limiter::default()),
    };
    let (addr, service) = serve(&dir, security);
    let before = inpath_testkit::dir::snapshot(&dir);

    let none = refusal(&addr, &credentials(&p, None, None));
    assert!(none.contains("refused: authentication required"), "{none}");
    assert!(none.contains("--token-file"), "{none}");
    let wrong = refusal(&addr, &credentials(&p, None, Some("inpath_00")));
    assert!(wrong.contains("refused: the token is not valid"), "{wrong}");
    let stranger = refusal(&addr, &credentials(&p, Some(&p.other_client), None));
    assert!(
        stranger.contains("refused this client's certificate"),
        "{stranger}"
    );
    let old = refusal(&addr, &credentials(&p, Some(&p.client_expired), None));
    assert!(old.contains("client's certificate"), "{old}");
    let plain = refusal(&addr, &Credentials::default());
    assert!(
        plain.contains("this server speaks TLS: connect with --tls-ca"),
        "{plain}"
    );

    // A read token (and a read certificate) may not change the store; the connection stays.
    for c in [
        credentials(&p, None, Some(&read_token)),
        credentials(&p, Some(&p.client), None),
    ] {
        let mut reader = Client::connect_with(&addr, &c).unwrap();
        assert!(reader.is_tls());
        for req in [
            Request::Rm { handle: "1".into() },
            Request::Index {
                handle: "1".into(),
                item_size: 1,
                tables: 1,
                bits: 1,
                seed: 1,
                threads: 1,
            },
        ] {
            let e = remote::error_text(&reader.call(&req).unwrap_err());
            assert!(
                e.contains("has role read; this request needs role write"),
                "{e}"
            );
        }
        let put = Request::Put {
            name: "evil".into(),
            length: 4,
            page_size: 8192,
            seal_tier: None,
            compress: None,
            key_id: None,
        };
        let e = remote::error_text(&reader.put(&put, &b"evil"[..]).unwrap_err());
        assert!(e.contains("needs role write"), "{e}");
        let list = reader.call(&Request::Ls).unwrap();
        assert_eq!(list.as_array().unwrap().len(), 1);
    }
    assert!(
        inpath_testkit::dir::snapshot(&dir) == before,
        "{}",
        inpath_testkit::dir::describe_change(&before, &inpath_testkit::dir::snapshot(&dir))
    );

    // The server went on serving: a write token changes the store.
    let mut writer =
        Client::connect_with(&addr, &credentials(&p, None, Some(&write_token))).unwrap();
    let e = writer.call(&Request::Rm { handle: "1".into() }).unwrap();
    assert_eq!(e["handle"], 1, "{e}");
    assert!(stat(&service, "auth_missing") >= 1);
    assert!(stat(&service, "auth_failures") >= 2, "{}", service.stats());
    assert_eq!(stat(&service, "auth_forbidden"), 6);
    assert!(stat(&service, "tls_errors") >= 2, "{}", service.stats());
}

#[test]
fn tls_on_one_side_only_and_an_expired_server_certificate_are_named() {
    let d = inpath_testkit::dir::scratch("inpath-store-tls-sides");
    let p = pki(&d.path().join("pki"));
    let dir = d.path().join("store");
    Store::create(&dir).unwrap();
    // A TLS client against a plain (loopback) server.
    let (plain, service) = serve(&dir, Security::default());
    let e = refusal(&plain, &credentials(&p, None, None));
    assert!(e.contains("connect without --tls-ca"), "{e}");
    assert!(Client::connect(&plain).unwrap().call(&Request::Ls).is_ok());
    assert_eq!(stat(&service, "tls_errors"), 1);
    // A server whose certificate expired.
    let security = Security {
        tls: tls(&p, &p.server_expired, ClientCerts::Ignore),
        ..Security::default()
    };
    let (old, _) = serve(&dir, security);
    let e = refusal(&old, &credentials(&p, None, None));
    assert!(e.contains("server's certificate has expired"), "{e}");
    // TLS alone (no authentication) serves anyone who trusts the CA.
    let security = Security {
        tls: tls(&p, &p.server, ClientCerts::Ignore),
        ..Security::default()
    };
    let (open, _) = serve(&dir, security);
    let mut c = Client::connect_with(&open, &credentials(&p, None, None)).unwrap();
    assert!(c.call(&Request::Ls).is_ok());
}

#[test]
fn a_thousand_wrong_tokens_are_slowed_and_counted_and_the_right_one_still_works() {
    let d = inpath_testkit::dir::scratch("inpath-store-brute");
    let p = pki(&d.path().join("pki"));
    let dir = d.path().join("store");
    Store::create(&dir).unwrap();
    let token = tokens::generate().unwrap();
    let file = tokens::with_entry("", "ci", Role::Read, &token);
    let delay = Duration::from_millis(2);
    let security = Security {
        tls: tls(&p, &p.server, ClientCerts::Ignore),
        tokens: Some(Arc::new(Tokens::parse(&file, Path::new("t")).unwrap())),
        cert_role: Role::Read,
        limiter: Arc::new(Limiter::new(Slowing {
            free_per_second: 5,
            delay,
        })),
    };
    let (addr, service) = serve(&dir, security);
    let base = credentials(&p, None, None);
    let start = Instant::now();
    // Four guessers in parallel from one address: their attempts still take turns.
    let guessers: Vec<_> = (0..4)
        .map(|g| {
            let (addr, base) = (addr.clone(), base.clone());
            std::thread::spawn(move || {
                for i in 0..250 {
                    let c = Credentials {
                        token: Some(format!("inpath_guess_{g}_{i}")),
                        ..base.clone()
                    };
                    let e = remote::error_text(&Client::connect_with(&addr, &c).unwrap_err());
                    assert!(e.contains("the token is not valid"), "{e}");
                }
            })
        })
        .collect();
    for g in guessers {
        g.join().unwrap();
    }
    let took = start.elapsed();
    assert_eq!(stat(&service, "auth_failures"), 1000);
    let slowed = stat(&service, "auth_slowed");
    // All but the first few (free, and those in flight while they failed) waited for a slot,
    // and slots are `delay` apart whatever the number of guessers.
    assert!(slowed >= 980, "slowed {slowed} of 1000");
    assert!(
        took >= delay * (slowed as u32 - 1),
        "{slowed} slowed guesses took {took:?}"
    );
    let ok = Credentials {
        token: Some(token),
        ..base
    };
    let mut c = Client::connect_with(&addr, &ok).unwrap();
    assert!(c.call(&Request::Ls).is_ok());
    eprintln!("1000 wrong tokens: {took:?}, {slowed} slowed");
}
