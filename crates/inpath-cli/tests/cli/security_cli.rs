//! `inpath tls init|token` and `store serve` with TLS, client certificates and tokens, through
//! the binary: the quickstart of docs/SECURITY.md works, each refusal says why, and an
//! unprotected port beyond loopback needs --insecure-no-auth.

use crate::common::{fails, ok, ok_json, Server};
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};

fn setup(dir: &Path) {
    let v = ok_json(dir, &["tls", "init", "tls", "--json"]);
    assert_eq!(v["hosts"][1], "127.0.0.1");
    let v = ok_json(
        dir,
        &[
            "tls", "token", "--tokens", "tokens", "--name", "ci", "--role", "read", "-o",
            "ci.token", "--json",
        ],
    );
    assert_eq!(
        (v["role"].as_str(), v["token"].is_null()),
        (Some("read"), true)
    );
    let token = ok(
        dir,
        &[
            "tls", "token", "--tokens", "tokens", "--name", "w", "--role", "write",
        ],
    );
    assert!(
        token.starts_with("inpath_") && token.trim().len() == 71,
        "{token}"
    );
    let file = std::fs::read_to_string(dir.join("tokens")).unwrap();
    assert!(
        !file.contains(token.trim()) && file.contains("w write sha256:"),
        "{file}"
    );
    std::fs::write(dir.join("data.txt"), "one needle\ntwo\nthree needle\n").unwrap();
    ok(dir, &["store", "put", "s", "data.txt"]);
}

#[test]
fn the_quickstart_serves_over_tls_with_tokens_and_certificates_and_refuses_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    setup(dir);
    let server = Server::start(
        dir,
        &[
            "s",
            "--tls-cert",
            "tls/server.pem",
            "--tls-key",
            "tls/server.key",
            "--tokens",
            "tokens",
            "--tls-client-ca",
            "tls/ca.pem",
            "--client-cert-role",
            "write",
        ],
    );
    let a = server.addr.as_str();
    let tls = ["--tls-ca", "tls/ca.pem"];
    let with = |extra: &[&'static str], verb: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = verb.iter().map(|s| s.to_string()).collect();
        v.insert(2, "--remote".into());
        v.insert(3, a.to_string());
        v.extend(tls.iter().chain(extra).map(|s| s.to_string()));
        v
    };
    let run_ok = |args: Vec<String>| ok(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let run_fails =
        |args: Vec<String>| fails(dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let read = ["--token-file", "ci.token"];
    assert_eq!(
        run_ok(with(&read, &["store", "grep", "1", "needle", "--count"])),
        "2\n"
    );
    let e = run_fails(with(&read, &["store", "rm", "1"]));
    assert!(
        e.contains("refused: ci has role read; this request needs role write"),
        "{e}"
    );
    let e = run_fails(with(&[], &["store", "ls"]));
    assert!(e.contains("refused: authentication required"), "{e}");
    let e = fails(dir, &["store", "ls", "--remote", a]);
    assert!(e.contains("this server speaks TLS"), "{e}");
    std::fs::write(dir.join("bad.token"), "inpath_0\n").unwrap();
    std::fs::set_permissions(
        dir.join("bad.token"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let e = run_fails(with(&["--token-file", "bad.token"], &["store", "ls"]));
    assert!(e.contains("refused: the token is not valid"), "{e}");
    // The client certificate has role write.
    let cert = [
        "--tls-cert",
        "tls/client.pem",
        "--tls-key",
        "tls/client.key",
    ];
    let put = run_ok(with(&cert, &["store", "put", "data.txt", "--name", "copy"]));
    assert!(put.starts_with("handle 2@1"), "{put}");
    // The token in the environment.
    let token = std::fs::read_to_string(dir.join("ci.token")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_inpath"))
        .current_dir(dir)
        .args([
            "store",
            "ls",
            "--remote",
            a,
            "--tls-ca",
            "tls/ca.pem",
            "--json",
        ])
        .env("INPATH_TOKEN", token.trim())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Client flags on a local store are refused.
    let e = fails(dir, &["store", "ls", "s", "--tls-ca", "tls/ca.pem"]);
    assert!(e.contains("are for a server (--remote)"), "{e}");
}

#[test]
fn an_open_port_needs_the_flag_and_says_so_and_the_live_page_binds_loopback() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    setup(dir);
    let e = fails(dir, &["store", "serve", "s", "--listen", "0.0.0.0:0"]);
    assert!(
        e.contains("refusing to listen on 0.0.0.0:0") && e.contains("--insecure-no-auth"),
        "{e}"
    );
    let e = fails(
        dir,
        &[
            "store",
            "serve",
            "s",
            "--listen",
            "0.0.0.0:0",
            "--tokens",
            "tokens",
        ],
    );
    assert!(e.contains("in the clear"), "{e}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_inpath"))
        .current_dir(dir)
        .args([
            "store",
            "serve",
            "s",
            "--listen",
            "0.0.0.0:0",
            "--insecure-no-auth",
            "--http",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let (mut first, mut second) = (String::new(), String::new());
    out.read_line(&mut first).unwrap();
    out.read_line(&mut second).unwrap();
    assert!(first.starts_with("listening on 0.0.0.0:"), "{first}");
    assert!(second.starts_with("http on 127.0.0.1:"), "{second}");
    let _ = child.kill();
    let err = child.wait_with_output().unwrap().stderr;
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("warning: inpath store serve listens on 0.0.0.0:0, every network interface, without TLS or authentication (--insecure-no-auth)"), "{err}");
}
